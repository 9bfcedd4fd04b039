// SpecBed's one decoder engine: a Llama-family transformer forward over (KV cache + new tokens)
// on CPU, float32 or bfloat16. Used by AR and by every speculative method (target and drafters).
//
// Design (llama.cpp / llm.c style, for low per-token overhead):
// - q/k/v and gate/up projections are fused (two GEMMs per layer plus two in-place addmm for the
//   residual adds); GEMMs go through ATen (OpenBLAS for fp32, oneDNN for bf16), except for a
//   few rows (decode steps, short verify blocks: rows <= GemvMaxRows), which use SpecBed's own
//   matrix-vector kernel (models/gemv.h) so that AR speed does not depend on BLAS's kernel choice.
// - RMSNorm, q/k-norm + RoPE + cache write, attention and SwiGLU are hand-written row kernels:
//   every query row is computed by the same code in the same order whatever the number of new
//   tokens, so a row's attention result does not depend on how the tokens were batched.
// - All activations live in buffers preallocated for the largest batch*tokens seen; a steady
//   decode step allocates only tensor views.
// - An explicit attention mask over (cache + new tokens) and explicit positions make tree
//   verification possible; hidden states of any layers can be returned for drafters.
// Checked by: tests/engine/llama_model_test.cpp against models/reference_forward.h (plain loops
// over the original unfused tensors), for llama2.c and HF Llama-3 / Qwen2 / Qwen3 checkpoints.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "models/kv_cache.h"
#include "models/llama_config.h"
#include "models/llama_weights.h"

namespace specbed {

enum class LogitsMode { kNone, kLast, kAll };

struct ForwardOptions {
  // [batch, T] int64 CPU: RoPE position of each new token. Undefined: cache.length() + t.
  at::Tensor positions;
  // [batch, T, cache.length() + T] bool CPU, true = query t may attend to slot s. Undefined:
  // causal.
  at::Tensor mask;
  // Hidden states to return: 0 = embedding output, l (1..n_layers) = output of decoder layer l,
  // always BEFORE the final norm. This equals Hugging Face's `hidden_states[l]` for
  // l < n_layers; HF's last entry (l = n_layers) is taken AFTER the final norm, ours before it.
  // EAGLE-3's default layers {2, L/2, L-3} are below it; a DFlash head naming the target's last
  // layer (target_layer_ids id L-1 -> index L) reads the pre-norm state where the DFlash
  // reference reads HF's post-norm one (the published heads' ids stop below L-1).
  std::vector<int64_t> hidden_layers;
  LogitsMode logits = LogitsMode::kLast;
};

struct ForwardOutput {
  // float32 [batch, T, vocab] (kAll) or [batch, 1, vocab] (kLast); undefined for kNone.
  // A view of a model-owned buffer: valid until the next Forward call on this model.
  at::Tensor logits;
  // One tensor per requested hidden layer: [batch, T, dim], model dtype, owned.
  std::vector<at::Tensor> hidden;
};

class LlamaModel {
 public:
  // `weights` must be on CPU, all of one dtype (kFloat or kBFloat16); it becomes the model dtype.
  LlamaModel(LlamaConfig config, LlamaWeights weights);

  // Runs the decoder over `tokens` ([batch, T] int64 CPU) appended after cache.length() and
  // advances the cache by T. The cache must have been made by NewCache (same batch).
  ForwardOutput Forward(const at::Tensor& tokens, KvCache& cache,
                        const ForwardOptions& options = {});

  // A cache for `batch` sequences of up to `max_len` positions (default: config.max_seq_len).
  KvCache NewCache(int64_t batch, int64_t max_len = -1) const;

  const LlamaConfig& config() const { return config_; }
  const LlamaWeights& weights() const { return weights_; }
  at::ScalarType dtype() const { return dtype_; }

 private:
  void EnsureCapacity(int64_t n_rows, int64_t n_slots);
  void EnsureRope(int64_t max_position);

  LlamaConfig config_;
  LlamaWeights weights_;
  at::ScalarType dtype_;
  // Transposed weight views ([in, out]) so that out = in @ w_t.
  std::vector<at::Tensor> wqkv_t_, wo_t_, w_gate_up_t_, w_down_t_;
  at::Tensor lm_head_t_;
  // Preallocated activations, capacity_ rows each.
  int64_t capacity_ = 0;
  at::Tensor x_, xn_, qkv_, q_, attn_, gate_up_, act_, logits_, logits_lowp_, head_in_;
  at::Tensor scores_;  // float32 [threads, slot_capacity_]
  int64_t slot_capacity_ = 0;
  // RoPE tables, float32 [rope_capacity_, head_dim / 2].
  at::Tensor rope_cos_, rope_sin_;
  int64_t rope_capacity_ = 0;
  std::vector<double> inv_freq_;
};

}  // namespace specbed
