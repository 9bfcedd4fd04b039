// CUDA greedy draft-tree verification (launcher declared in kernels/cuda/launchers.h; CPU
// reference kernels/cpu/greedy_verify_ref.cpp).
// Checked by: tests/kernels/kernel_test.cpp (GreedyVerifyCuda: equal to the CPU reference,
// ties and NaN rows included).
#include <cstdint>

#include "kernels/cuda/cuda_util.cuh"

namespace specbed {
namespace gpu {
namespace {

constexpr int kThreads = 1024;
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
__device__ int32_t BlockArgmax(const float* __restrict__ row, int64_t vocab,
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

// One block per sequence walks the tree from the root: argmax of the current slot's row, then
// the lowest-index child carrying that token (block minimum), until no child matches.
__global__ void GreedyVerifyKernel(const float* __restrict__ logits,
                                   const int32_t* __restrict__ tokens,
                                   const int32_t* __restrict__ parent, int64_t n, int64_t vocab,
                                   int32_t* __restrict__ accepted, int32_t* __restrict__ n_accepted,
                                   int32_t* __restrict__ bonus) {
  __shared__ ArgmaxCandidate argmax_scratch[32];
  __shared__ int32_t min_scratch[32];
  const int64_t b = blockIdx.x;
  const int32_t* tok = tokens + b * n;
  const int32_t* par = parent + b * n;
  int32_t* acc = accepted + b * n;
  int64_t slot = 0, count = 0;
  int32_t target = 0;
  while (true) {
    target = BlockArgmax(logits + (b * (n + 1) + slot) * vocab, vocab, argmax_scratch);
    int32_t child = kNone;
    for (int64_t j = slot + threadIdx.x; j < n; j += blockDim.x) {
      if (par[j] == slot - 1 && tok[j] == target) {
        child = static_cast<int32_t>(j);
        break;  // later j of this thread are larger
      }
    }
    child = BlockMin(child, min_scratch);
    if (child == kNone) break;  // uniform: every thread holds the same minimum
    if (threadIdx.x == 0) acc[count] = child;
    ++count;
    slot = static_cast<int64_t>(child) + 1;
  }
  for (int64_t j = count + threadIdx.x; j < n; j += blockDim.x) acc[j] = -1;
  if (threadIdx.x == 0) {
    n_accepted[b] = static_cast<int32_t>(count);
    bonus[b] = target;
  }
}

}  // namespace

int GreedyTreeVerify(const float* logits, const int32_t* tokens, const int32_t* parent,
                     int64_t batch, int64_t n, int64_t vocab, int32_t* accepted,
                     int32_t* n_accepted, int32_t* bonus, void* stream) {
  if (batch == 0) return kKernelOk;
  if (vocab < 1) return kKernelBadInput;
  GreedyVerifyKernel<<<static_cast<unsigned int>(batch), kThreads, 0, AsStream(stream)>>>(
      logits, tokens, parent, n, vocab, accepted, n_accepted, bonus);
  return LaunchStatus();
}

}  // namespace gpu
}  // namespace specbed
