// Device helpers shared by SpecBed's .cu kernels: stream cast, launch status, warp/block
// reductions. Included only from kernels/cuda/*.cu (never from host C++ or LibTorch code).
// Checked by: tests/kernels/kernel_test.cpp (the *Cuda tests exercise every reduction).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launchers.h"

namespace specbed {
namespace gpu {

inline cudaStream_t AsStream(void* stream) {
  return static_cast<cudaStream_t>(stream);
}

// Status of the launch just enqueued (configuration errors, no device, ...).
inline int LaunchStatus() {
  return static_cast<int>(cudaGetLastError());
}

// Blocks for grid-stride kernels over `total` items: enough to fill the GPU, at most 65535 * 16.
inline unsigned int GridFor(int64_t total, int threads) {
  const int64_t blocks = (total + threads - 1) / threads;
  const int64_t cap = 65535LL * 16;
  return static_cast<unsigned int>(blocks < 1 ? 1 : (blocks > cap ? cap : blocks));
}

inline constexpr unsigned int kFullMask = 0xffffffffu;

// Sum over the block of one value per thread; every thread gets the result. `scratch` holds
// one T per warp (at most 32). blockDim.x must be a multiple of 32.
template <typename T>
__device__ T BlockSum(T value, T* scratch) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(kFullMask, value, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  const int n_warps = blockDim.x / 32;
  T total = 0;
  for (int w = 0; w < n_warps; ++w) total += scratch[w];
  return total;
}

// Minimum over the block; every thread gets the result (same scratch rules as BlockSum).
__device__ inline int32_t BlockMin(int32_t value, int32_t* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const int32_t other = __shfl_down_sync(kFullMask, value, offset);
    value = other < value ? other : value;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  const int n_warps = blockDim.x / 32;
  int32_t result = scratch[0];
  for (int w = 1; w < n_warps; ++w) result = scratch[w] < result ? scratch[w] : result;
  return result;
}

constexpr int32_t kNone = INT32_MAX;

// A candidate of the argmax reduction; index kNone = no candidate (only NaN seen).
struct ArgmaxCandidate {
  float value;
  int32_t index;
};

// The better of two candidates: larger value, then lower index; a NaN is never a candidate.
// This is a total order, so any reduction tree gives the sequential scan's answer.
__device__ inline ArgmaxCandidate Better(ArgmaxCandidate a, ArgmaxCandidate b) {
  if (b.index == kNone) return a;
  if (a.index == kNone) return b;
  if (a.value > b.value) return a;
  if (b.value > a.value) return b;
  return a.index < b.index ? a : b;
}

// Argmax of row[0..vocab) over the block, equal to harness/engine/sampler.h Argmax: the lowest
// index of the largest non-NaN value, or 0 when row[0] is NaN (the sequential scan starts from
// row[0] and compares with '>'). Every thread gets the result.
__device__ inline int32_t BlockArgmax(const float* __restrict__ row, int64_t vocab,
                                      ArgmaxCandidate* scratch) {
  ArgmaxCandidate best{0.f, kNone};
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float v = row[i];
    if (v != v) continue;  // NaN
    if (best.index == kNone || v > best.value) best = {v, static_cast<int32_t>(i)};
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    ArgmaxCandidate other;
    other.value = __shfl_down_sync(kFullMask, best.value, offset);
    other.index = __shfl_down_sync(kFullMask, best.index, offset);
    best = Better(best, other);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) scratch[warp] = best;
  __syncthreads();
  best = scratch[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) best = Better(best, scratch[w]);
  const float first = row[0];
  if (first != first || best.index == kNone) return 0;
  return best.index;
}

}  // namespace gpu
}  // namespace specbed
