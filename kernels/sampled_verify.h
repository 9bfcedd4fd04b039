// Sampled (T > 0) verification of a draft tree in one walk (LibTorch wrapper, layer 3 of 3; raw
// layers: gpu::SampledTreeVerify in kernels/cuda/launchers.h, cpu::SampledTreeVerify in
// kernels/cpu/references.h). Tree conventions: methods/common/draft_tree.h.
// Checked by: tests/kernels/sampled_verify_test.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "kernels/kernel_status.h"

namespace specbed {

// One walk per sequence under `mode` (kSampledRejection for chain_rs / tree_rrs, kSampledFollow
// for sample_follow; the other two modes are the negative controls of the losslessness tests).
// The rules and the order the uniforms are consumed in: kernels/cuda/launchers.h. All tensors
// contiguous, on one device (CPU or CUDA):
//   probs:       [B, n + 1, V] float32, the target's sampling distribution at each slot
//   draft_probs: [B, n + 1, V] float32 (rejection modes with n > 0; may be undefined otherwise)
//   tokens:      [B, n] int32; parent: [B, n] int32, checked when on the CPU (as
//                GreedyTreeVerify: a device tensor's values are the caller's to validate)
//   u:           [B, n + 1] float64 uniforms in [0, 1)
//   residual:    [B, V] float32 scratch
//   accepted:    out [B, n] int32 (depth order, -1 padded); n_accepted, bonus: out [B] int32
// CUDA tensors launch on the current CUDA stream (CUDA builds only; otherwise specbed::Error).
void SampledTreeVerify(const at::Tensor& probs, const at::Tensor& draft_probs,
                       const at::Tensor& tokens, const at::Tensor& parent, const at::Tensor& u,
                       int32_t mode, const at::Tensor& residual, const at::Tensor& accepted,
                       const at::Tensor& n_accepted, const at::Tensor& bonus);

}  // namespace specbed
