// The EAGLE-3 head written with differentiable ATen ops for training-time test (TTT): the same
// math as the inference forward (eagle3_head.h), unrolled over `unroll` draft steps on whole
// sequences at once, plus the TTT loss.
//
// Unrolled forward (B sequences of T tokens; the EAGLE-3 "training-time test"):
//   step 0:  row t reads (fc(aux_t), token t+1) at position t and predicts token t+2;
//   step k:  row t reads (the head's own step k-1 output at row t, token t+1+k) at position t+k
//            and predicts token t+2+k.
//   Attention of (row t, step k): the step-0 keys of rows <= t (the context a drafted node sees)
//   plus the keys of steps 1..k at row t only (its tree ancestors and itself). This is exactly
//   what a depth-(k+1) node attends to at inference, so training sees test-time inputs.
// The token embedding is the target's and stays frozen; d2t / t2d are fixed buffers.
// TTT loss (per step k, weight decay^k, summed): soft cross-entropy between the target's
// next-token distribution restricted to the draft vocabulary (softmax of target logits over the
// draft ids) and the draft's log-softmax over the positions whose loss mask is set and whose
// target argmax is in the draft vocabulary, normalised per TttLossNorm: by the count of those
// positions (kCounted, SpecBed's default) or by all B x T positions of the batch (kAllPositions,
// the EAGLE-3 reference's `.mean()` over the masked product, which weighs later steps and padded
// batches less).
// Checked by: tests/methods/eagle3_train_test.cpp (unrolled steps vs. Eagle3Head with an explicit
// tree mask to 1e-4; the loss against a plain-loop version; training lowers it; To keeps leaves
// and the forward; TrainableEagle3Cuda: forward and loss on cuda vs. cpu).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "methods/eagle3/eagle3_config.h"

namespace specbed {

class TrainableEagle3 {
 public:
  // `tensors`: canonical names (RandomEagle3Tensors / LoadEagle3Checkpoint), validated; float
  // tensors are copied to float32 leaves with requires_grad. `target_embedding`: [V, H] CPU, any
  // float dtype (copied to float32, frozen); the head's own embed_tokens.weight wins (frozen too).
  TrainableEagle3(const Eagle3Config& config, const std::map<std::string, at::Tensor>& tensors,
                  const at::Tensor& target_embedding);

  // THE way to place the head: moves the parameters (float32 leaves with requires_grad, same
  // values; MoveParamsTo), the frozen embedding and the draft-vocabulary maps (d2t, draft_ids,
  // t2d) to `device`. The constructor builds on the CPU; call To before handing named_parameters()
  // to an optimiser. A no-op when already there.
  void To(const at::Device& device);
  // Where the parameters live (CPU until To moves them).
  at::Device device() const { return embedding_.device(); }

  // aux: float32 [B, T, 3 * Ht] on device() (target hidden states at positions 0..T-1, the
  // configured layers concatenated); tokens: int64 [B, T] on device(). Returns `unroll` float32 [B,
  // T, Vd] logits: entry k, row t predicts token t + 2 + k. Rows whose inputs run past T (t + 1 + k
  // >= T) read token 0 and must be masked by the caller. Differentiable w.r.t. the parameters.
  std::vector<at::Tensor> Forward(const at::Tensor& aux, const at::Tensor& tokens,
                                  int64_t unroll) const;

  // Trainable parameters (float32 leaves), sorted by canonical name.
  const std::vector<std::pair<std::string, at::Tensor>>& named_parameters() const {
    return params_;
  }
  // Every tensor for WriteEagle3Checkpoint (through ToHost, param_device.h) / Eagle3Head:
  // detached float32 copies on device(), d2t, t2d (and embed_tokens.weight when the head has its
  // own).
  std::map<std::string, at::Tensor> Tensors() const;
  // Target id of every draft id: int64 [Vd] on device().
  const at::Tensor& draft_ids() const { return draft_ids_; }
  // Membership of target ids in the draft vocabulary: bool [V] on device().
  const at::Tensor& t2d() const { return t2d_; }
  const Eagle3Config& config() const { return config_; }
  int64_t ParameterCount() const;

 private:
  const at::Tensor& Param(const char* name) const;

  Eagle3Config config_;
  std::vector<std::pair<std::string, at::Tensor>> params_;
  at::Tensor d2t_, t2d_, draft_ids_;  // on device()
  at::Tensor embedding_;              // float32 [V, H] on device(), frozen
  bool own_embedding_ = false;
  std::vector<double> inv_freq_;
};

struct TttLossResult {
  // Scalar float32, differentiable: sum_k decay^k * loss_k, loss_k normalised per TttLossNorm.
  at::Tensor loss;
  std::vector<double> step_loss;   // loss_k (0 when no position counts)
  std::vector<double> step_top1;   // per step: draft argmax == target argmax over the counted rows
  std::vector<double> step_count;  // counted positions per step
};

// TTT loss of `logits` (TrainableEagle3::Forward output) against the target:
//   target_logits: float32 [B, T, V], the target's logits at positions 0..T-1;
//   loss_mask: float32 [B, T], 1 where the target's prediction at position t (token t+1) is
//     supervised (SequenceBatch::loss_mask convention);
//   draft_ids: int64 [Vd] target ids of the draft vocabulary; t2d: bool [V].
// Step k row t is compared with the target distribution at position t + 1 + k and counted when
// loss_mask[t + 1 + k] is set and argmax target_logits[t + 1 + k] is in the draft vocabulary.
// How each TTT step's summed loss is normalised (see above); `--ttt-loss-norm counted|all`.
enum class TttLossNorm { kCounted, kAllPositions };
const char* TttLossNormName(TttLossNorm norm);          // "counted" | "all"
TttLossNorm ParseTttLossNorm(const std::string& name);  // errors list the choices

TttLossResult Eagle3TttLoss(const std::vector<at::Tensor>& logits, const at::Tensor& target_logits,
                            const at::Tensor& loss_mask, const at::Tensor& draft_ids,
                            const at::Tensor& t2d, double decay,
                            TttLossNorm norm = TttLossNorm::kCounted);

}  // namespace specbed
