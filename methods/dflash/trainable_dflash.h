// The DFlash / JetSpec block head written with differentiable ATen ops for training: the same
// math as the inference forward (dflash_head.h), run for many blocks of a sequence at once, plus
// the block losses (hard-label cross-entropy, forward KL, reverse KL) with DFlash's per-position
// weight exp(-(k-1)/gamma).
//
// Parallel blocks ("random anchors", DFlash paper / SpecForge): for anchor position a of a
// sequence, the block is [token a, MASK × (B-1)] at positions a .. a+B-1; block row k predicts
// token a+k. A block row attends to the projected target features (context) of positions < a
// (strictly: exactly the context the inference head holds when token a is the bonus token) and
// to the rows of its own block (all of them, or rows <= k when config.causal), never to another
// block. This is exactly what DflashHead sees at inference, so training sees test-time inputs.
// The target's embedding and LM head are frozen buffers (shared with the target, not trained).
// Checked by: tests/methods/dflash_train_test.cpp (blocks vs. DflashHead run the drafter's way to
// 1e-4, causal and bidirectional; the losses against plain-loop versions; anchors).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "methods/dflash/dflash_config.h"

namespace specbed {

class TrainableDflash {
 public:
  // `tensors`: canonical names (RandomDflashTensors / LoadDflashCheckpoint), validated; copied to
  // float32 leaves with requires_grad. target_embedding, target_lm_head: [V, H] CPU, any float
  // dtype (copied to float32, frozen). config.mask_token_id must be set.
  TrainableDflash(const DflashConfig& config, const std::map<std::string, at::Tensor>& tensors,
                  const at::Tensor& target_embedding, const at::Tensor& target_lm_head);

  // THE way to place the head: moves the parameters (float32 leaves with requires_grad, same
  // values; MoveParamsTo) and the frozen embedding / lm_head to `device`. The constructor builds
  // on the CPU; call To before handing named_parameters() to an optimiser.
  void To(const at::Device& device);
  // Where the parameters live (CPU until To moves them).
  at::Device device() const { return embedding_.device(); }

  // On device(): features: float32 [N, T, n_ids * H] the target hidden states at the configured
  // layers
  //   (TargetLayerIds, HF hidden_states[id + 1]) at positions 0..T-1, concatenated low layer
  //   first; tokens: int64 [N, T]; anchors: int64 [N, A] anchor positions in [0, T) or -1 (unused
  //   slot: computed on position 0, must be masked by the loss).
  // Returns float32 [N, A, B, V] logits (B = config.block_size): [n, i, k] is the head's logits
  // for token anchors[n, i] + k. Differentiable w.r.t. the parameters.
  at::Tensor Forward(const at::Tensor& features, const at::Tensor& tokens,
                     const at::Tensor& anchors) const;

  // Trainable parameters (float32 leaves), sorted by canonical name.
  const std::vector<std::pair<std::string, at::Tensor>>& named_parameters() const {
    return params_;
  }
  // Detached float32 copies of every draft tensor on device() (for WriteDflashCheckpoint through
  // ToHost, param_device.h / DflashHead).
  std::map<std::string, at::Tensor> Tensors() const;
  const DflashConfig& config() const { return config_; }
  int64_t ParameterCount() const;

 private:
  const at::Tensor& Param(const std::string& name) const;

  DflashConfig config_;
  std::vector<std::pair<std::string, at::Tensor>> params_;
  at::Tensor embedding_, lm_head_;  // float32 [V, H] on device(), frozen
  at::Tensor inv_freq_;             // float64 [head_dim / 2] CPU (tables are moved per forward)
};

// The training objective of the block head.
enum class DflashLossKind {
  kCrossEntropy,  // hard labels: the sequence token a+k (DFlash; JetSpec's "SFT" ablation)
  kForwardKl,     // KL(p || q) to the target's distribution at a+k-1 (JetSpec default)
  kReverseKl,     // KL(q || p) (JetSpec's ablation)
};
// "ce" | "forward_kl" | "reverse_kl"; unknown names fail listing them.
DflashLossKind ParseDflashLossKind(const std::string& name);
const char* DflashLossKindName(DflashLossKind kind);

struct DflashLossOptions {
  DflashLossKind kind = DflashLossKind::kCrossEntropy;
  // Per-position weight w_k = exp(-(k-1) / gamma) for block row k >= 1 (DFlash Eq. 4);
  // gamma <= 0 means uniform weights (gamma = infinity; JetSpec's main runs, DDTree).
  double gamma = 7.0;
  double temperature = 1.0;  // distillation temperature T_d (KL losses; no T^2 factor)
};

struct DflashLossResult {
  at::Tensor loss;                // scalar float32: sum w_k * loss / sum w_k over counted rows
  std::vector<double> row_loss;   // [B] mean loss per block row (row 0 unused: 0)
  std::vector<double> row_top1;   // [B] draft argmax == the sequence token, per block row
  std::vector<double> row_count;  // [B] counted rows per block row
  // Teacher-forced chain estimate of tau: mean over blocks (row 1 counted) of 1 + the number of
  // leading block rows whose argmax equals the sequence token (stopping at the first miss or
  // uncounted row).
  double chain_tau = 0;
  double blocks = 0;  // blocks averaged in chain_tau
};

// Loss of TrainableDflash::Forward output `logits` [N, A, B, V]:
//   tokens int64 [N, T]; anchors int64 [N, A] (as given to Forward; -1 = unused);
//   loss_mask float32 [N, T] (SequenceBatch convention: 1 at t when token t+1 is supervised);
//   target_logits float32 [N, T, V] (the target's logits; needed for the KL kinds, may be
//   undefined for cross-entropy).
// Block row k >= 1 of anchor a counts when a >= 0, a+k-1 < T and loss_mask[a+k-1] = 1; its label
// is tokens[a+k] and its teacher the target's logits at a+k-1. Row 0 (the anchor) never counts.
DflashLossResult DflashBlockLoss(const at::Tensor& logits, const at::Tensor& tokens,
                                 const at::Tensor& anchors, const at::Tensor& loss_mask,
                                 const at::Tensor& target_logits, const DflashLossOptions& options);

// Random anchors: per row n, up to `num_anchors` distinct positions a with loss_mask[n, a] = 1
// (token a+1 supervised), drawn uniformly without replacement (std::mt19937_64 seeded with
// row_seeds[n], SpecBed's own index mapping), sorted ascending; remaining slots -1.
// loss_mask: float32 [N, T] CPU; row_seeds: [N]. Returns int64 [N, num_anchors].
at::Tensor SampleDflashAnchors(const at::Tensor& loss_mask, int64_t num_anchors,
                               const std::vector<uint64_t>& row_seeds);

}  // namespace specbed
