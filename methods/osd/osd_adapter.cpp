// OSD online adaptation (see osd_adapter.h).
// Checked by: tests/methods/osd_test.cpp.
#include "methods/osd/osd_adapter.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>

#include "base/enum_names.h"
#include "base/error.h"
#include "base/names.h"
#include "base/timer.h"
#include "harness/engine/device_sampling.h"
#include "models/device.h"

namespace specbed {

SPECBED_ENUM_NAMES(Divergence, "divergence", DivergenceName, ParseDivergence,
                   {Divergence::kForwardKl, "forward_kl"}, {Divergence::kReverseKl, "reverse_kl"},
                   {Divergence::kJsd, "jsd"})

at::Tensor DivergenceLoss(const at::Tensor& teacher_logits, const at::Tensor& student_logits,
                          Divergence divergence) {
  SPECBED_CHECK(teacher_logits.dim() == 2 && teacher_logits.sizes() == student_logits.sizes(),
                "divergence: teacher and student logits must both be [N, V], got ",
                teacher_logits.sizes(), " and ", student_logits.sizes());
  const int64_t n = teacher_logits.size(0);
  if (n == 0) return (student_logits.sum() * 0).to(at::kFloat);
  at::Tensor log_p;
  {
    at::NoGradGuard no_grad;
    log_p = at::log_softmax(teacher_logits, -1);
  }
  const at::Tensor log_q = at::log_softmax(student_logits, -1);
  at::Tensor per_row;
  switch (divergence) {
    case Divergence::kForwardKl:
      per_row = (log_p.exp() * (log_p - log_q)).sum(-1);
      break;
    case Divergence::kReverseKl:
      per_row = (log_q.exp() * (log_q - log_p)).sum(-1);
      break;
    case Divergence::kJsd: {
      const at::Tensor p = log_p.exp(), q = log_q.exp();
      const at::Tensor log_m = at::log(0.5 * (p + q) + 1e-30);
      per_row = 0.5 * (p * (log_p - log_m)).sum(-1) + 0.5 * (q * (log_q - log_m)).sum(-1);
      break;
    }
  }
  return per_row.mean();
}

OsdAdapter::OsdAdapter(std::unique_ptr<OsdStudent> student, OsdOptions options)
    : student_(std::move(student)),
      options_(options),
      optimizer_(student_->Parameters(), std::vector<bool>(student_->Parameters().size(), false),
                 0.9, 0.999, 0.0) {
  const auto params = student_->Parameters();
  SPECBED_CHECK(!params.empty(), "osd: the student has no parameters");
  device_ = params.front().second.device();
  SPECBED_CHECK(options_.interval >= 1 && options_.steps >= 1 && options_.lr > 0 &&
                    options_.grad_clip >= 0 &&
                    (options_.max_tokens == 0 || options_.max_tokens >= 2),
                "osd: need interval >= 1, steps >= 1, lr > 0, grad_clip >= 0 and max_tokens 0 "
                "(the whole request) or >= 2 (got ",
                options_.interval, ", ", options_.steps, ", ", options_.lr, ", ",
                options_.grad_clip, ", ", options_.max_tokens, ")");
}

void OsdAdapter::BeginSequence(const DraftBegin& begin) {
  corrections_.clear();
  served_.Begin(begin);
  position_ = static_cast<int64_t>(begin.prompt->size()) + 1;  // prompt + the first root
}

void OsdAdapter::Observe(const DraftTree& tree, const Verdict& verdict) {
  // The bonus token is a correction when the drafter proposed something at its slot (the slot
  // has children) and the verifier took none of them; with supervise_round_end every step's
  // bonus is (the reference's rule).
  const int32_t slot = verdict.path.empty() ? -1 : verdict.path.back();
  bool proposed = false;
  for (int64_t i = 0; i < tree.size() && !proposed; ++i) proposed = tree.parent[i] == slot;
  const bool supervise = proposed || options_.supervise_round_end;
  if (supervise) corrections_.push_back(position_ + verdict.n_accepted());
  served_.Observe(verdict, supervise, position_ + verdict.n_accepted());
  position_ += static_cast<int64_t>(verdict.tokens.size());
}

void OsdAdapter::EndSequence(const std::vector<int32_t>& committed, int64_t prompt_len) {
  ++stats_.requests;
  ServedRequest r = served_.Finish(committed, options_.max_tokens);
  if (!r.supervised.empty()) buffer_.push_back(std::move(r));
  if (stats_.requests % options_.interval == 0) Update();
}

const OsdStats& OsdAdapter::stats() const {
  if (!pending_losses_.empty()) {
    // One copy for every loss not yet read (a view of the stacked values on the CPU).
    const at::Tensor host = CopyToHost(at::stack(pending_losses_).to(at::kDouble));
    const double* v = host.data_ptr<double>();
    stats_.losses.insert(stats_.losses.end(), v, v + host.numel());
    pending_losses_.clear();
  }
  return stats_;
}

void OsdAdapter::Update() {
  if (buffer_.empty()) return;
  const int64_t t0 = NowMicros();
  const OsdBatch batch = BuildOnlineBatch(buffer_, device_);
  int64_t supervised = 0;
  for (const ServedRequest& r : buffer_) {
    supervised += static_cast<int64_t>(r.supervised.size());
    stats_.context_tokens += static_cast<int64_t>(r.tokens.size());
  }
  for (int64_t s = 0; s < options_.steps; ++s) {
    const at::Tensor loss = student_->Loss(batch, options_.divergence);
    // Kept on the device; read when stats() is asked (no device-to-host copy in the update).
    if (s == 0) pending_losses_.push_back(loss.detach());
    loss.backward();
    optimizer_.Step(options_.lr, options_.grad_clip);
  }
  student_->Publish();
  buffer_.clear();
  ++stats_.updates;
  stats_.supervised_positions += supervised;
  // The update's device work is charged to it (a wait, no copy; nothing on the CPU).
  if (IsAsyncDevice(device_)) SynchronizeDevice(device_);
  stats_.update_seconds += (NowMicros() - t0) * 1e-6;
}

}  // namespace specbed
