// One speculative-sampling (rejection) step of tree verification (LibTorch wrapper, layer 3 of
// 3; raw layers: gpu::TreeRejectionStep in kernels/cuda/launchers.h, cpu::TreeRejectionStep in
// kernels/cpu/references.h).
// Checked by: tests/kernels/kernel_test.cpp (RejectionStep* tests).
#pragma once

#include <ATen/core/Tensor.h>

namespace specbed {

// For every sequence b: accept the drafted token t iff u * q[t] < p[t] (i.e. u < min(1, p/q);
// q[t] = 0 with p[t] > 0 accepts, p[t] = 0 rejects). On rejection p <- max(p - q, 0)
// renormalized to sum 1 (mass summed in double), so the next sibling / the correction token is
// drawn from the residual; if the residual has zero mass (p == q) p is left unchanged.
// All tensors contiguous, on one device (CPU or CUDA):
//   p:        [B, V] float32, target (residual) distribution, updated in place
//   q:        [B, V] float32, draft distribution
//   token:    [B] int32, drafted token, in [0, V) (validated on the host; a CUDA tensor is
//             copied there first)
//   u:        [B] float32, uniform draw in [0, 1)
//   accepted: out [B] uint8 or bool, 1 = accepted
// CUDA tensors launch on the current CUDA stream (CUDA builds only; otherwise specbed::Error).
void TreeRejectionStep(const at::Tensor& p, const at::Tensor& q, const at::Tensor& token,
                       const at::Tensor& u, const at::Tensor& accepted);

}  // namespace specbed
