// Draft-tree ancestor mask for the verify forward (LibTorch wrapper, layer 3 of 3; raw layers:
// gpu::BuildTreeMask in kernels/cuda/launchers.h, cpu::BuildTreeMask in
// kernels/cpu/references.h). Tree conventions: methods/common/draft_tree.h.
// Checked by: tests/kernels/kernel_test.cpp (TreeMask* tests).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace specbed {

// Fills the attention mask of a verify forward over [prefix (committed cache), root, nodes].
//   parent:     [B, n] int32, contiguous, CPU or CUDA; parent[b][i] in [-1, i) (-1 = child of
//               the root), validated on the host (a CUDA parent is copied there first)
//   prefix_len: number of committed cache positions before the root, >= 0
//   mask:       out [B, n + 1, prefix_len + n + 1] bool, contiguous, preallocated on parent's
//               device. Row s (verify slot s: 0 = root, i + 1 = node i) is true at every
//               prefix column [0, prefix_len), at the root column prefix_len, and at column
//               prefix_len + 1 + j iff node j is slot s's node or one of its ancestors. Row 0
//               sees the prefix and itself only.
// CPU tensors run the CPU reference; CUDA tensors launch on the current CUDA stream (CUDA
// builds only; otherwise specbed::Error). Throws specbed::Error naming the bad argument.
void BuildTreeMask(const at::Tensor& parent, int64_t prefix_len, const at::Tensor& mask);

}  // namespace specbed
