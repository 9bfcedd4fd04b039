// In-memory weights of a Llama-family decoder in SpecBed's engine layout: q/k/v and gate/up
// projections fused so each layer runs two matmuls instead of five. All tensors share one dtype
// (float32, bfloat16 or float16) and live on one device.
// Checked by: tests/models/hf_checkpoint_test.cpp and tests/engine/llama_model_test.cpp (loaded
// weights vs. the plain-loop reference forward over the original, unfused tensors).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "models/llama_config.h"

namespace specbed {

struct LlamaLayerWeights {
  at::Tensor attn_norm;  // [dim]
  at::Tensor wqkv;       // [q_dim + 2*kv_dim, dim]: rows of wq, then wk, then wv
  at::Tensor bqkv;       // [q_dim + 2*kv_dim] or undefined (only Qwen2 has q/k/v bias)
  at::Tensor q_norm;     // [head_dim] or undefined (Qwen3 only)
  at::Tensor k_norm;     // [head_dim] or undefined (Qwen3 only)
  at::Tensor wo;         // [dim, q_dim]
  at::Tensor ffn_norm;   // [dim]
  at::Tensor w_gate_up;  // [2*hidden_dim, dim]: rows of w_gate (w1), then w_up (w3)
  at::Tensor w_down;     // [dim, hidden_dim]  (w2)
};

struct LlamaWeights {
  at::Tensor tok_embeddings;  // [vocab, dim]
  std::vector<LlamaLayerWeights> layers;
  at::Tensor final_norm;  // [dim]
  at::Tensor lm_head;     // [vocab, dim]; the same tensor as tok_embeddings when tied

  // Converts every tensor to `dtype` (kFloat, kBFloat16 or kHalf) on `device`, keeping tied
  // heads tied.
  LlamaWeights To(at::ScalarType dtype, at::Device device = at::kCPU) const;
  // Checks every shape against `config`; throws specbed::Error naming `source` on mismatch.
  void Validate(const LlamaConfig& config, const std::string& source) const;
};

// Random weights for `config` (normal(0, 0.02) projections, norms near 1), seeded; used for
// benchmark shapes and tests.
LlamaWeights RandomLlamaWeights(const LlamaConfig& config, uint64_t seed,
                                at::ScalarType dtype = at::kFloat);

}  // namespace specbed
