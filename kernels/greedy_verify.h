// Greedy verification of a draft tree (LibTorch wrapper, layer 3 of 3; raw layers:
// gpu::GreedyTreeVerify in kernels/cuda/launchers.h, cpu::GreedyTreeVerify in
// kernels/cpu/references.h). Tree conventions: methods/common/draft_tree.h.
// Checked by: tests/kernels/kernel_test.cpp (GreedyVerify* tests).
#pragma once

#include <ATen/core/Tensor.h>

namespace specbed {

// Walks the tree from the root: the target token at slot s is the argmax of logits row s
// (lowest index on ties, NaN never chosen unless element 0 is NaN: exactly
// harness/engine/sampler.h Argmax); the walk descends to the FIRST (lowest-index) child of s
// whose token equals it and stops when there is none. All tensors contiguous, on one device
// (CPU or CUDA):
//   logits:     [B, n + 1, V] float32, row s = target logits at verify slot s (0 = root)
//   tokens:     [B, n] int32, drafted token of node i
//   parent:     [B, n] int32, parent[b][i] in [-1, i): checked when on the CPU; a device
//               tensor's values are the caller's to validate (no copy back per call; the walk
//               stays in bounds for any values)
//   accepted:   out [B, n] int32, accepted node indices in depth order, -1 padded
//   n_accepted: out [B] int32, number of accepted nodes
//   bonus:      out [B] int32, argmax at the last accepted slot (the root's when none)
// n = 0 is allowed (then bonus = argmax of the root row). CUDA tensors launch on the current
// CUDA stream (CUDA builds only; otherwise specbed::Error).
void GreedyTreeVerify(const at::Tensor& logits, const at::Tensor& tokens, const at::Tensor& parent,
                      const at::Tensor& accepted, const at::Tensor& n_accepted,
                      const at::Tensor& bonus);

}  // namespace specbed
