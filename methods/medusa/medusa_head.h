// Medusa-1 heads (Cai et al., ICML 2024) in the published layout, and their forward.
//
// Head k (0-based, K heads) reads the target's last hidden state at position t (after the
// target's final norm) and predicts the token at t + k + 2 (the target's own lm_head predicts
// t + 1). Each head is `num_layers` residual blocks h <- h + SiLU(W h + b), then its own lm_head.
// Published files (FasterDecoding/Medusa): config.json with "medusa_num_heads",
// "medusa_num_layers", "base_model_name_or_path"; tensors "{k}.{j}.linear.weight" [dim, dim],
// "{k}.{j}.linear.bias" [dim] for j < num_layers and "{k}.{num_layers}.weight" [vocab, dim] in
// medusa_lm_head.safetensors. SpecBed also writes hidden_size, vocab_size and its recipe.
// Checked by: tests/methods/medusa_test.cpp (a file written with the published names loads and
// drafts; a wrong shape, a missing or an extra tensor is refused naming it; round trip;
// MedusaLogitsRows against MedusaLogits and at any row count).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace specbed {

inline constexpr char kMedusaTensorFile[] = "medusa_lm_head.safetensors";
// Candidates per head the trainer's calibration measures (Medusa's top_k).
inline constexpr int64_t kMedusaCalibrationTopK = 10;

struct MedusaConfig {
  int64_t num_heads = 4;    // medusa_num_heads (K)
  int64_t num_layers = 1;   // medusa_num_layers: residual blocks per head
  int64_t hidden_size = 0;  // the target's hidden size (read from the tensors)
  int64_t vocab_size = 0;   // the target's vocabulary (read from the tensors)
  std::string base_model;   // base_model_name_or_path
  // The base model's shape fields (num_attention_heads, intermediate_size, num_hidden_layers,
  // rms_norm_eps, ...), written beside the Medusa fields so that the cost-twin padder
  // (models/twin) can widen the heads like any HF checkpoint; not needed to read them.
  nlohmann::ordered_json base_fields = nlohmann::ordered_json::object();
  // The sparse tree's calibration, config.json's "specbed_calibration" (written by `specbed
  // train medusa` from its held-out rows; empty when absent): rank_accuracy[k][r] = how often the
  // label is head k's r-th candidate. K rows of equal length, values in [0, 1], each row's sum
  // <= 1.
  std::vector<std::vector<double>> rank_accuracy;
};

// Published tensor names of head `head`.
std::string MedusaBlockWeightName(int64_t head, int64_t layer);  // "{k}.{j}.linear.weight"
std::string MedusaBlockBiasName(int64_t head, int64_t layer);    // "{k}.{j}.linear.bias"
std::string MedusaLmHeadName(int64_t head, int64_t num_layers);  // "{k}.{L}.weight"

struct MedusaHead {
  MedusaConfig config;
  std::map<std::string, at::Tensor> tensors;  // published name -> float32 tensor
};

// Reads `dir` (config.json + medusa_lm_head.safetensors, model.safetensors or *.safetensors
// shards). Every tensor the config implies must be present with its shape, nothing else; the
// hidden size and vocabulary come from head 0's lm_head and must equal target_dim / target_vocab
// (when > 0). Errors name the directory and the tensor.
MedusaHead ReadMedusaCheckpoint(const std::string& dir, int64_t target_dim = 0,
                                int64_t target_vocab = 0);
// Writes `dir`/config.json (published fields + hidden_size, vocab_size, the recipe when not null)
// and `dir`/medusa_lm_head.safetensors (float32).
void WriteMedusaCheckpoint(const std::string& dir, const MedusaHead& head,
                           const nlohmann::json& recipe = nullptr);

// Medusa-1's initialisation: every block's W zero and its b nn.Linear's default (uniform in
// +-1/sqrt(dim), seeded by `seed` and the tensor's name: TensorNameSeed), so a block starts as
// h + SiLU(b); every lm_head a copy of the target's `lm_head` (float32 [vocab, dim], any device
// -> CPU).
MedusaHead InitMedusaHead(const MedusaConfig& config, const at::Tensor& lm_head, uint64_t seed);

// Logits of every head: hidden [N, dim] of the heads' dtype (the target's final-normed last hidden
// states, on the head tensors' device) -> float32 [K, N, vocab] (computed in the heads' dtype,
// then widened). Differentiable in head.tensors.
at::Tensor MedusaLogits(const MedusaHead& head, const at::Tensor& hidden);

// MedusaLogits on the row kernels (models/gemv.h GemvRows: one pass over each weight for up to 8
// rows), for drafting beside a row-kernel target: hidden [N, dim] CPU, contiguous, the heads' dtype
// (float32, bfloat16 or float16; the head tensors on the CPU in that dtype) -> float32 [K, N,
// vocab]. Each block's h + SiLU(W h + b) is computed in float32 and rounded once; each row's
// logits are the same bits at any N (batch-invariant: a sequence drafting beside others drafts as
// it would alone). Not differentiable.
at::Tensor MedusaLogitsRows(const MedusaHead& head, const at::Tensor& hidden);

}  // namespace specbed
