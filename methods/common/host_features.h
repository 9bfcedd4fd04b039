// Target features for the parts that compute on the host in float32: SpecBranch's H-RAD input
// row. (The trainable students of OSD and the SpecBlock bandit train on the target's device and
// their teacher stays there: methods/common/served_teacher.h.) Hidden states and logits the
// target produced on its device come back as contiguous float32 CPU tensors. On the CPU this is
// the tensor itself when it is already float32 and contiguous (no copy, so CPU runs are
// unchanged); from a device it is one device-to-host copy per tensor, counted by
// DeviceToHostCopies (harness/engine/verifier.h). The drafter heads themselves run on the
// target's device (methods/common/head_aten.h); docs/ARCHITECTURE.md, "Devices and the two
// forward paths", lists every host synchronization.
// Checked by: tests/methods/aten_path_test.cpp (every method, CPU); results/gpu/ (a GPU).
#pragma once

#include <ATen/ATen.h>

#include <vector>

#include "harness/engine/verifier.h"

namespace specbed {

// t: any shape, any float dtype, any device -> float32, contiguous, CPU.
inline at::Tensor HostFloat32(const at::Tensor& t) {
  return CopyToHost(t).to(at::kFloat).contiguous();
}

inline std::vector<at::Tensor> HostFloat32(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  out.reserve(ts.size());
  for (const at::Tensor& t : ts) out.push_back(HostFloat32(t));
  return out;
}

}  // namespace specbed
