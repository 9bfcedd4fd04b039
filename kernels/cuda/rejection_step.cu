// CUDA speculative-sampling (rejection) step (launcher declared in kernels/cuda/launchers.h;
// CPU reference kernels/cpu/rejection_step_ref.cpp).
// Checked by: tests/kernels/kernel_test.cpp (RejectionStepCuda: same accepted flags as the CPU
// reference and p within 1e-6).
#include "kernels/cuda/cuda_util.cuh"

namespace specbed {
namespace gpu {
namespace {

constexpr int kThreads = 512;

// One block per sequence. The accept test reads two values; on rejection the residual mass
// sum(max(p - q, 0)) is reduced in double (each difference rounded to float once, as in the CPU
// reference), then p is overwritten by the normalized residual unless the mass is 0.
// A token outside [0, vocab) leaves p alone and reports "rejected".
__global__ void RejectionStepKernel(float* __restrict__ p, const float* __restrict__ q,
                                    const int32_t* __restrict__ token, const float* __restrict__ u,
                                    int64_t vocab, uint8_t* __restrict__ accepted) {
  __shared__ double scratch[32];
  const int64_t b = blockIdx.x;
  float* pr = p + b * vocab;
  const float* qr = q + b * vocab;
  const int32_t t = token[b];
  if (t < 0 || t >= vocab) {
    if (threadIdx.x == 0) accepted[b] = 0;
    return;
  }
  const bool accept = u[b] * qr[t] < pr[t];
  // Every thread has read pr[t] before any thread may write p (the sum below syncs first).
  if (threadIdx.x == 0) accepted[b] = accept ? 1 : 0;
  if (accept) return;
  double local = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float d = pr[i] - qr[i];
    if (d > 0.f) local += d;
  }
  const double mass = BlockSum(local, scratch);
  if (!(mass > 0.0)) return;
  const double inv_mass = 1.0 / mass;  // the CPU reference scales the same way
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float d = pr[i] - qr[i];
    pr[i] = d > 0.f ? static_cast<float>(d * inv_mass) : 0.f;
  }
}

}  // namespace

int TreeRejectionStep(float* p, const float* q, const int32_t* token, const float* u, int64_t batch,
                      int64_t vocab, uint8_t* accepted, void* stream) {
  if (batch == 0) return kKernelOk;
  if (vocab < 1) return kKernelBadInput;
  RejectionStepKernel<<<static_cast<unsigned int>(batch), kThreads, 0, AsStream(stream)>>>(
      p, q, token, u, vocab, accepted);
  return LaunchStatus();
}

}  // namespace gpu
}  // namespace specbed
