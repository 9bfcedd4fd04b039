// Status codes shared by the raw kernel layers (kernels/cuda/launchers.h and
// kernels/cpu/references.h). Plain C++: no LibTorch, no CUDA headers.
// Checked by: tests/kernels/kernel_test.cpp (bad-input statuses of the CPU references).
#pragma once

namespace specbed {

// Every raw launcher and CPU reference returns one of these (or, for CUDA launchers, a
// positive cudaError_t value from the launch).
inline constexpr int kKernelOk = 0;
// An index input broke the function's documented precondition (parent outside [-1, i), token
// outside [0, vocab), compaction index out of order or out of range). The raw layers never read
// or write out of bounds on such input; the CPU references report it with this code, the CUDA
// kernels skip the offending element (they cannot report synchronously). The LibTorch
// wrappers validate on the host first, so they never see this code.
inline constexpr int kKernelBadInput = -1;

// Modes of SampledTreeVerify (kernels/sampled_verify.h; the last two are negative controls).
inline constexpr int kSampledRejection = 0;
inline constexpr int kSampledFollow = 1;
inline constexpr int kSampledFollowArgmax = 2;
inline constexpr int kSampledRejectionTargetResidual = 3;

}  // namespace specbed
