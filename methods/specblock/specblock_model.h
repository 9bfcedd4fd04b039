// The SpecBlock drafter (Shi et al., "SpecBlock: Block-Iterative Speculative Decoding with Dynamic
// Tree Drafting", §2 of the paper and of SpecBed's implementation notes): one network, written with
// differentiable ATen ops, used both for serving (under NoGradGuard, with its own KV cache) and for
// training.
//
// Per start (condition c, token x) one forward produces a block of K slots:
//   c    = W_cond · [h_low ; h_mid ; h_top]   (first-block start: target features, width 3·Ht)
//        = the cached last-layer state h^(L) of an earlier slot (later block: W_cond skipped)
//   h0_k = W_fuse · [Norm_c(c) ; Norm_e(E[x]) ; Norm_q(q_k)],  k = 1..K  (prefix broadcast)
//   for layer l = 0..L-1:  x = W_shift^(l)·[x_k ; x_{k-1}] (x_0 := x_1; only for the layers that
//        have a shift), then a Llama decoder layer (RMSNorm, GQA + RoPE rotate_half, SwiGLU)
//   h^(L)_k (pre-final-norm; cached as the condition of later blocks),
//   logits_k = lm_head(FinalNorm(h^(L)_k)) over the reduced draft vocabulary (d2t / t2d),
//   bucket logits = rank_head([sg(h^(L)_k) ; sg(psi(p_k))]) (2-layer MLP, SiLU).
// psi(p) (15 features, fp32): top-10 log-probs (descending), log-prob gaps top1-top2, top1-top3,
// top1-top5, p_max, entropy.
// Rows: a forward over N starts is laid out start-major ([N, K] slots, row = start * K + k - 1).
// RoPE position of slot k of a start whose token sits at absolute index j: j + k - 1.
// The embedding is the target's, frozen (never a parameter).
// Checked by: tests/methods/specblock_test.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/common/head_aten.h"

namespace specbed {

inline constexpr int64_t kSpecBlockPsiFeatures = 15;
inline constexpr int64_t kSpecBlockBuckets = 4;

struct SpecBlockConfig {
  int64_t hidden_size = 0;        // d (= the target's)
  int64_t intermediate_size = 0;  // SwiGLU width of the drafter layers
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t target_hidden_size = 0;  // Ht: width of one captured target layer
  int64_t vocab_size = 0;          // V (target vocabulary)
  int64_t draft_vocab_size = 0;    // Vd
  int64_t block_size = 4;          // K (fixed at training)
  int64_t n_layers = 2;            // L
  int64_t n_shifts = 2;            // W_shift count: L (before every layer) or L - 1 (between)
  int64_t rank_hidden = 256;       // rank-head MLP width
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000;
  int64_t max_position_embeddings = 2048;
  std::vector<int64_t> aux_layer_ids;  // 3 target hidden_states indices (low, mid, top)
  nlohmann::json recipe;               // "specbed_recipe" (training recipe) or null

  void Validate(const std::string& where) const;
  nlohmann::ordered_json ToJson() const;
  static SpecBlockConfig FromJson(const nlohmann::json& j, const std::string& where);
};

// Canonical tensor names and shapes (d2t int64 [Vd], t2d bool [V] included).
std::map<std::string, std::vector<int64_t>> SpecBlockTensorShapes(const SpecBlockConfig& c);
// Names of the "head-only" parameter group (lm_head + final norm + rank head).
bool SpecBlockIsHeadParam(const std::string& name);

struct SpecBlockCheckpoint {
  SpecBlockConfig config;
  std::map<std::string, at::Tensor> tensors;
  std::string source;
};
// Reads dir/config.json + dir/model.safetensors; every error names the directory and the tensor
// or field at fault (wrong model_type, missing tensor, wrong shape).
SpecBlockCheckpoint LoadSpecBlockCheckpoint(const std::string& dir);
void WriteSpecBlockCheckpoint(const std::string& dir, const SpecBlockConfig& config,
                              const std::map<std::string, at::Tensor>& tensors);
// Seeded init: normals (std 0.02), norms 1, W_shift = [I | 0], random sorted draft vocabulary.
std::map<std::string, at::Tensor> RandomSpecBlockTensors(const SpecBlockConfig& config,
                                                         uint64_t seed);

// Per layer cached keys/values: [B, n_kv_heads, rows, head_dim] each.
struct SpecBlockKv {
  std::vector<at::Tensor> k, v;
};

class SpecBlockModel {
 public:
  // THE way to place the model, for training too (a trainable model on `placement.device`
  // trains there, in float32). `tensors`: canonical names (checked: names and shapes; any
  // device); floats copied to leaves on
  // `placement`'s device (requires_grad when `trainable`), in float32 when trainable or on the
  // row path, else in the placement's dtype (serving on the target's device: norms, RoPE and
  // softmax still compute in float32). `target_embedding`: [V, d] any float dtype (copied to the
  // parameters' device and dtype, frozen).
  SpecBlockModel(const SpecBlockConfig& config, const std::map<std::string, at::Tensor>& tensors,
                 const at::Tensor& target_embedding, bool trainable,
                 const HeadPlacement& placement = {});

  const SpecBlockConfig& config() const { return config_; }
  const std::vector<std::pair<std::string, at::Tensor>>& named_parameters() const {
    return params_;
  }
  const at::Tensor& Param(const std::string& name) const;
  // Detached copies of every tensor (d2t / t2d included) for checkpoints.
  std::map<std::string, at::Tensor> Tensors() const;
  // Copies parameter values from `other` (same config).
  void CopyFrom(const SpecBlockModel& other);
  int64_t ParameterCount() const;

  // Fused block inputs h0: cond [B, N, Wc] (Wc = 3 Ht with `target_cond`, else d), tokens int64
  // [B, N] -> [B, N, K, d].
  at::Tensor Fuse(const at::Tensor& cond, const at::Tensor& tokens, bool target_cond) const;
  // Decoder trunk over N starts: h0 [B, N, K, d]; positions int64 [B, N * K]; mask bool
  // [B, R, C + R] (R = N * K rows; C = cached rows in `past`, 0 when past is null), true = may
  // attend. `past` (optional): keys/values of earlier rows; `present` (optional): receives this
  // call's keys/values (RoPE applied). Returns h^(L) [B, N, K, d].
  at::Tensor Trunk(const at::Tensor& h0, const at::Tensor& positions, const at::Tensor& mask,
                   const SpecBlockKv* past, SpecBlockKv* present) const;
  // Draft-vocabulary logits of h^(L) (any leading shape).
  at::Tensor Logits(const at::Tensor& h) const;
  // Bucket logits from [sg(h) ; sg(psi(logits))].
  at::Tensor RankLogits(const at::Tensor& h, const at::Tensor& logits) const;

  // Target id of every draft id: int64 [Vd] on device(); membership bool [V] on the CPU; draft
  // id of a target id (-1).
  const at::Tensor& draft_ids() const { return draft_ids_; }
  const at::Tensor& t2d() const { return t2d_; }
  const std::vector<int32_t>& draft_to_target() const { return d2t_ids_; }
  const std::vector<int32_t>& target_to_draft() const { return t2d_ids_; }
  // The parameters' device and dtype.
  at::Device device() const { return embedding_.device(); }
  at::ScalarType dtype() const { return embedding_.scalar_type(); }

 private:
  SpecBlockConfig config_;
  std::vector<std::pair<std::string, at::Tensor>> params_;
  std::map<std::string, size_t> index_;
  at::Tensor d2t_, t2d_, draft_ids_, embedding_, inv_freq_;
  std::vector<int32_t> d2t_ids_, t2d_ids_;
};

// psi(p) of draft logits [..., Vd] -> [..., 15] (no gradient).
at::Tensor SpecBlockPsi(const at::Tensor& logits);
// Bucket of a 1-based rank: 1 -> 0, 2..4 -> 1, 5..10 -> 2, > 10 -> 3.
inline int64_t SpecBlockBucketOfRank(int64_t r) {
  return r <= 1 ? 0 : r <= 4 ? 1 : r <= 10 ? 2 : 3;
}
// Bucket labels of target ids `labels` (int64 [...], target vocabulary) under draft logits
// [..., Vd]: bucket of the label's rank; labels outside the draft vocabulary get bucket 3.
at::Tensor SpecBlockBucketLabels(const at::Tensor& logits, const at::Tensor& labels,
                                 const SpecBlockModel& model);

}  // namespace specbed
