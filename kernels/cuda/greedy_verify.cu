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
