// A trainable Llama-family decoder for drafter training: the same math as the inference engine
// (models/llama_model.*) written with differentiable ATen ops, so LibTorch autograd gives the
// gradients. Parameters are float32 leaf tensors under their Hugging Face names
// (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ..., lm_head.weight when
// untied), so a trained model is written with WriteHfCheckpoint and served by LlamaModel.
// Covers RMSNorm (eps from the config), RoPE with either pairing (rope_interleaved) and any
// scaling RopeInverseFrequencies knows, GQA, SwiGLU, tied/untied heads, Qwen2 q/k/v biases and
// Qwen3 q/k norms. Full causal attention over [batch, T] tokens from position 0 (no KV cache).
// Checked by: tests/train/train_test.cpp (logits vs. LlamaModel on the written checkpoint, for
// llama2.c-style interleaved RoPE and HF Llama-3 / Qwen2 / Qwen3 shapes, to 1e-4; To keeps
// leaves; TrainableLlamaCuda: logits on cuda vs. cpu).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "models/llama_config.h"

namespace specbed {

class TrainableLlama {
 public:
  // Fresh weights for `config` (validated): RandomHfTensors(config, seed) — normal(0, 0.02),
  // deterministic in the seed and independent of the LibTorch version — with RMSNorm weights set
  // to 1 and the residual output projections (o_proj, down_proj) scaled by 1/sqrt(2 n_layers).
  TrainableLlama(const LlamaConfig& config, uint64_t seed);
  // Starts from `tensors` (HF names, any float dtype, CPU; copied to float32). Every tensor
  // ExpectedHfTensorShapes(config) names must be present with its shape; others are an error.
  TrainableLlama(const LlamaConfig& config, const std::map<std::string, at::Tensor>& tensors);

  // THE way to place the model: moves every parameter (and the RoPE tables) to `device`, each a
  // float32 leaf with requires_grad holding the same values (MoveParamsTo). The constructors
  // build on the CPU (inits drawn there, so every device starts from the same weights); call
  // To before handing named_parameters() to an optimiser. A no-op when already there.
  void To(const at::Device& device);
  // Where the parameters live (CPU until To moves them).
  at::Device device() const { return embed_.device(); }

  // Logits for next-token prediction at every position: tokens [batch, T] int64 on device()
  // (ids in [0, vocab), T <= max_seq_len) -> float32 [batch, T, vocab] on device(),
  // differentiable w.r.t. the parameters (unless called under a NoGradGuard).
  at::Tensor Forward(const at::Tensor& tokens) const;

  // The parameters (float32 leaf tensors on device() with requires_grad) sorted by HF name.
  const std::vector<std::pair<std::string, at::Tensor>>& named_parameters() const {
    return params_;
  }
  // Detached float32 copies on device() under their HF names (WriteHfCheckpoint takes them
  // through ToHost, param_device.h).
  std::map<std::string, at::Tensor> HfTensors() const;
  // Overwrites every parameter in place from `tensors` (same names and shapes as
  // named_parameters(), any device; float32 values copied exactly). Errors name `source` and
  // the tensor.
  void LoadTensors(const std::map<std::string, at::Tensor>& tensors, const std::string& source);
  int64_t ParameterCount() const;

  const LlamaConfig& config() const { return config_; }

 private:
  struct Layer {
    at::Tensor attn_norm, wq, wk, wv, bq, bk, bv, q_norm, k_norm, wo, ffn_norm, gate, up, down;
  };
  void BindParameters();
  const at::Tensor& Param(const std::string& name) const;

  LlamaConfig config_;
  std::vector<std::pair<std::string, at::Tensor>> params_;
  at::Tensor embed_, final_norm_, head_;
  std::vector<Layer> layers_;
  at::Tensor rope_cos_, rope_sin_;  // float32 [max_seq_len, head_dim / 2] on device()
};

}  // namespace specbed
