// OSD — Online Speculative Decoding (Liu et al., ICML 2024, arXiv:2310.07177): an Adapter that
// keeps distilling the drafter into the target while serving. Per request it records the
// positions where the draft disagreed with the target (a correction token: the verifier rejected
// every drafted child of the slot and sampled its own token); every `interval` requests it runs
// `steps` AdamW updates on the buffered requests with a divergence between the target's and the
// drafter's next-token distributions at those positions only, then serves the updated drafter.
//
// Convention (the paper's wording; the reference code supervises the position one later): a
// correction token at sequence index p is supervised where the drafter predicted it, i.e. on the
// distribution after tokens [0, p) (loss_mask[p - 1] = 1).
// The teacher is what the target computed while serving (methods/common/served_teacher.h: its
// logits at the corrected positions and its hidden states at every committed position, kept as
// the request was served); the reference code runs an extra target forward over the buffered
// sequences instead, which SpecBed does not (no teacher forward, no context cropped from the
// teacher). The update runs inside the request that triggers it, so its wall time is charged to
// that request (decode time, draft phase, StepStats::t_adapt_us).
// Students: the SpS draft LM (`sps+osd`) and the EAGLE-3 head (`eagle3+osd`; the TTT loss
// restricted to the recorded positions). They live and train on the target's device in float32
// (the batch is built there; nothing is counted by DeviceToHostCopies during an update; see
// methods/osd/README.md "Where it runs").
// Checked by: tests/methods/osd_test.cpp (recorded positions, divergences against closed forms,
// an update lowers the loss on the buffer and is served, outputs stay lossless at T = 0),
// tests/methods/served_teacher_test.cpp (students float32 on the target's device;
// OnlineUpdateCuda).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "harness/engine/method.h"
#include "methods/common/served_teacher.h"
#include "methods/common/train/optimizer.h"

namespace specbed {

enum class Divergence {
  kForwardKl,  // KL(target || draft): OSD's default, = soft cross-entropy up to a constant
  kReverseKl,  // KL(draft || target)
  kJsd,        // Jensen-Shannon divergence with mixing weight 1/2 (a true JSD; the reference
               // code's "jsd" is 0.9 FKL + 0.1 RKL)
};
const char* DivergenceName(Divergence d);
// "forward_kl" | "reverse_kl" | "jsd"; errors name `context`.
Divergence ParseDivergence(const std::string& name, const std::string& context);

// Mean over rows of D(teacher row, student row): teacher and student logits float32 [N, V]
// (softmax at temperature 1), differentiable w.r.t. `student_logits`. N = 0 gives 0.
at::Tensor DivergenceLoss(const at::Tensor& teacher_logits, const at::Tensor& student_logits,
                          Divergence divergence);

// The buffered requests of one update, with the teacher as served (loss_mask: 1 at p - 1 for
// every recorded correction index p; teacher_rows: the target's logits there; features: its
// hidden states at the drafter's layers).
using OsdBatch = OnlineBatch;

// A drafter that can be trained online: a trainable twin of the served drafter.
class OsdStudent {
 public:
  virtual ~OsdStudent() = default;
  // Trainable parameters (float32 leaves with requires_grad).
  virtual std::vector<std::pair<std::string, at::Tensor>> Parameters() const = 0;
  // Divergence between the target (batch.teacher_rows, as served) and the student at the masked
  // positions of `batch`; no target forward.
  virtual at::Tensor Loss(const OsdBatch& batch, Divergence divergence) = 0;
  // Makes the served drafter use the current parameters.
  virtual void Publish() = 0;
};

struct OsdOptions {
  int64_t interval = 8;  // requests between updates (OSD: 8)
  int64_t steps = 1;     // AdamW steps per update (OSD: 1)
  double lr = 3e-4;      // constant learning rate (OSD: 1e-4 for a 160M draft)
  double grad_clip = 0;  // 0 = off (OSD: off)
  Divergence divergence = Divergence::kForwardKl;
  // A buffered request keeps its last max_tokens tokens; 0 = the whole request (the student
  // attends over the context it was served with). A cap is a cost knob: the context before the
  // cut is then not seen (RoPE is relative, so the kept tail's positions do not matter).
  int64_t max_tokens = 0;
  // Which committed tokens are supervised: false (knob "rejected", default) = the bonus of a step
  // whose drafted children at that slot were all rejected; true ("round_end", the OSD reference
  // code's `wrong_token_ids`) = the last token of every step, including the bonus after a fully
  // accepted draft.
  bool supervise_round_end = false;
};

// What the adapter did, for reports and tests.
struct OsdStats {
  int64_t requests = 0;
  int64_t updates = 0;
  int64_t supervised_positions = 0;  // summed over updates
  int64_t context_tokens = 0;        // tokens the students attended over, summed over updates
  double update_seconds = 0;         // summed wall time of the updates
  std::vector<double> losses;        // loss before each update's first step
};

class OsdAdapter : public Adapter {
 public:
  OsdAdapter(std::unique_ptr<OsdStudent> student, OsdOptions options);

  void BeginSequence(const DraftBegin& begin) override;
  void Observe(const DraftTree& tree, const Verdict& verdict) override;
  void EndSequence(const std::vector<int32_t>& committed, int64_t prompt_len) override;

  // The losses of the updates so far are read from the students' device here (one
  // device-to-host copy for those not read yet; none during an update).
  const OsdStats& stats() const;
  // Correction indices recorded for the current (or just ended) request.
  const std::vector<int64_t>& corrections() const { return corrections_; }
  // Runs the pending update now (also called every `interval` requests).
  void Update();
  // The trainable student (its parameters live on the target's device, in float32).
  const OsdStudent& student() const { return *student_; }

 private:
  std::unique_ptr<OsdStudent> student_;
  OsdOptions options_;
  AdamWOptimizer optimizer_;
  ServedTeacher served_;  // the current request as served
  std::vector<ServedRequest> buffer_;
  std::vector<int64_t> corrections_;
  std::vector<uint8_t> has_children_;  // per slot of the current tree
  int64_t position_ = 0;               // committed tokens so far in this request
  at::Device device_ = at::kCPU;  // the student's (the target's) device: batches are built there
  mutable OsdStats stats_;
  mutable std::vector<at::Tensor> pending_losses_;  // float32 scalars on device_, not read yet
};

}  // namespace specbed
