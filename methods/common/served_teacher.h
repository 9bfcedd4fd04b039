// What the target computed while serving a request, kept for the online adapters (OSD and the
// SpecBlock bandit) so that an update needs no teacher forward of its own (issue 26): the
// target's hidden states at every committed position (the drafter's requested layers: the
// prompt's from prefill, then each verify step's root and accepted path) and its logits at the
// supervised positions (the distribution the verifier drew a correction token from). An update
// therefore costs the same teacher work whoever runs it (none), and its teacher saw the whole
// context the request was served with, however much of the request the student is shown.
// Checked by: tests/methods/served_teacher_test.cpp (the batch layout on a hand-made request,
// the same values built for the ATen path's device; no target forward during the updates of
// sps+osd, eagle3+osd, specblock+osd, specblock+bandit; ServedTeacherCuda: the batch on cuda).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "harness/engine/method.h"

namespace specbed {

// One served request as an update sees it.
struct ServedRequest {
  std::vector<int32_t> tokens;      // the committed tokens kept (all, or the last max_tokens)
  std::vector<int64_t> supervised;  // indices p into `tokens` (p >= 1) of supervised tokens
  std::vector<at::Tensor> teacher;  // per supervised index: the target's logits row [V]
  // The target's hidden states at tokens[j] (requested layers concatenated): [tokens.size(), F],
  // any device and float dtype; the last token's row is zero (it was never forwarded).
  // Undefined when the drafter requested no layer.
  at::Tensor features;
};

// Records one request while it is served.
class ServedTeacher {
 public:
  // Starts a request; keeps the prompt's hidden states (DraftBegin::hidden, [1, P, H] each).
  void Begin(const DraftBegin& begin);
  // After a verify step: keeps the committed slots' hidden states (Verdict::hidden) and, when
  // `supervise`, the logits row (Verdict::logits) of the slot the step's bonus was sampled at,
  // for committed index `bonus_index`. Device copies only (no host synchronisation).
  void Observe(const Verdict& verdict, bool supervise, int64_t bonus_index);
  // The request for an update: `committed` whole (max_tokens 0, the default of every online
  // adapter: the student attends over the context the request was served with), or its last
  // `max_tokens` (a cost cap: the context before the cut is then not seen), with the supervised
  // indices inside them (p - 1 kept too) and their rows.
  ServedRequest Finish(const std::vector<int32_t>& committed, int64_t max_tokens) const;

 private:
  std::vector<at::Tensor> hidden_;  // [n_i, F] per prompt / step
  std::vector<int64_t> positions_;  // supervised committed indices
  std::vector<at::Tensor> rows_;    // their logits rows [V]
};

// A padded batch of served requests, on the students' device (the target's): the students train
// there in float32. Tokens, lengths, the loss mask and the teacher index are laid out on the host
// and uploaded in one host-to-device copy each (none on the CPU); the features and teacher rows
// stay on the device they were served on and are converted to float32 there. No device-to-host
// copy.
struct OnlineBatch {
  at::Tensor tokens;     // int64 [B, T] on the device, right-padded with 0
  at::Tensor lengths;    // int64 [B] on the device
  at::Tensor loss_mask;  // float32 [B, T] on the device: 1 at p - 1 for every supervised index p
  // float32 [B, T, F] on the device (zero-padded), or undefined (no layer requested).
  at::Tensor features;
  // The target's logits at the supervised positions: float32 [N, V] on the device, one row per
  // set loss_mask entry in row-major order; teacher_index int64 [B, T] on the device holds its
  // row (-1 elsewhere).
  at::Tensor teacher_rows, teacher_index;
  // The host layouts the device tensors were uploaded from (the same tensors on the CPU), for
  // index work without a device-to-host copy: float32 [B, T] and int64 [B, T], CPU.
  at::Tensor host_loss_mask, host_teacher_index;
  at::Device device() const { return tokens.device(); }
};

// requests: features and teacher rows on any device, any float dtype; `device`: where the batch
// is built (the students' device).
OnlineBatch BuildOnlineBatch(const std::vector<ServedRequest>& requests,
                             const at::Device& device = at::kCPU);

// Teacher rows of the set entries of `mask` (float [B, T] on the CPU, a subset of
// batch.host_loss_mask) in row-major order: float32 [N', V] on the batch's device.
at::Tensor TeacherRowsAt(const OnlineBatch& batch, const at::Tensor& mask);
// Teacher rows at flat indices `flat` (int64 [N'] on the CPU, into [B * T], each a supervised
// position; checked on the host) -> float32 [N', V] on the batch's device (the row indices go
// up in one host-to-device copy; none on the CPU).
at::Tensor TeacherRowsAtFlat(const OnlineBatch& batch, const at::Tensor& flat);

}  // namespace specbed
