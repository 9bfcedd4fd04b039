// CUDA draft-tree ancestor mask (launcher declared in kernels/cuda/launchers.h; CPU reference
// kernels/cpu/tree_mask_ref.cpp).
// Checked by: tests/kernels/kernel_test.cpp (TreeMaskCuda: equal to the CPU reference).
#include "kernels/cuda/cuda_util.cuh"

namespace specbed {
namespace gpu {
namespace {

// One thread per mask element (grid-stride). Node column j of row s is true iff walking up from
// node s - 1 reaches j; parents strictly decrease, so the walk stops once it passes below j.
// A parent outside [-1, i) ends the walk (no out-of-bounds read, no endless loop).
__global__ void TreeMaskKernel(const int32_t* __restrict__ parent, int64_t batch, int64_t n,
                               int64_t prefix_len, bool* __restrict__ mask) {
  const int64_t width = prefix_len + n + 1;
  const int64_t total = batch * (n + 1) * width;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t col = e % width;
    if (col <= prefix_len) {
      mask[e] = true;
      continue;
    }
    const int64_t row = e / width;
    const int64_t b = row / (n + 1), s = row % (n + 1);
    const int64_t j = col - prefix_len - 1;
    const int32_t* par = parent + b * n;
    int64_t i = s - 1;
    while (i > j) {
      const int64_t up = par[i];
      if (up >= i) {  // invalid tree: stop
        i = -1;
        break;
      }
      i = up;
    }
    mask[e] = i == j;
  }
}

}  // namespace

int BuildTreeMask(const int32_t* parent, int64_t batch, int64_t n, int64_t prefix_len, bool* mask,
                  void* stream) {
  const int64_t total = batch * (n + 1) * (prefix_len + n + 1);
  if (total == 0) return kKernelOk;
  constexpr int kThreads = 256;
  TreeMaskKernel<<<GridFor(total, kThreads), kThreads, 0, AsStream(stream)>>>(parent, batch, n,
                                                                              prefix_len, mask);
  return LaunchStatus();
}

}  // namespace gpu
}  // namespace specbed
