// CUDA sampled (T > 0) tree verification in one walk (launcher declared in
// kernels/cuda/launchers.h; CPU reference kernels/cpu/sampled_verify_ref.cpp).
// Checked by: tests/kernels/sampled_verify_test.cpp (SampledVerifyCuda: the same walks as the
// CPU reference on random trees, every mode).
#include <cstdint>

#include "kernels/cuda/cuda_util.cuh"

namespace specbed {
namespace gpu {
namespace {

constexpr int kThreads = 1024;

// Shared scratch of one block's reductions.
struct Scratch {
  double sums[32];
  int32_t ints[32];
  ArgmaxCandidate argmax[32];
};

// Exclusive prefix over the block of one double per thread (thread order).
__device__ double BlockExclusiveSum(double value, double* warp_totals) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double inclusive = value;
  for (int offset = 1; offset < 32; offset *= 2) {
    const double other = __shfl_up_sync(kFullMask, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  __syncthreads();
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  double before = 0.0;
  for (int w = 0; w < warp; ++w) before += warp_totals[w];
  return before + inclusive - value;
}

// Inverse-CDF draw from row[0..vocab) with uniform u: each thread owns a contiguous chunk, so
// the running sum is the chunk's exclusive prefix plus a scan inside the chunk. Every thread
// whose chunk reaches past u reports its first such index; the lowest wins (a chunk whose
// prefix already exceeds u reports its first positive entry, so rounding between the two sums
// cannot lose the draw). Past the total: the last positive entry (0 if none).
__device__ int32_t BlockDraw(const float* __restrict__ row, int64_t vocab, double u, Scratch& s) {
  const int64_t chunk = (vocab + blockDim.x - 1) / blockDim.x;
  const int64_t begin = threadIdx.x * chunk;
  const int64_t end = begin + chunk < vocab ? begin + chunk : vocab;
  double local = 0.0;
  int32_t last = -1;
  for (int64_t i = begin; i < end; ++i) {
    if (row[i] > 0.f) {
      local += row[i];
      last = static_cast<int32_t>(i);
    }
  }
  double cum = BlockExclusiveSum(local, s.sums);
  int32_t found = kNone;
  for (int64_t i = begin; i < end && found == kNone; ++i) {
    if (!(row[i] > 0.f)) continue;
    cum += row[i];
    if (u < cum) found = static_cast<int32_t>(i);
  }
  found = BlockMin(found, s.ints);
  if (found != kNone) return found;
  const int32_t last_positive = -BlockMin(last < 0 ? 1 : -last, s.ints);  // max over the block
  return last_positive < 0 ? 0 : last_positive;
}

// The lowest-index child of `slot` after node `after` (-1: the first) carrying `token` (any
// token when token < 0), or kNone.
__device__ int32_t NextChild(const int32_t* __restrict__ par, const int32_t* __restrict__ tok,
                             int64_t n, int64_t slot, int32_t after, int32_t token, Scratch& s) {
  int32_t child = kNone;
  const int64_t first = after + 1 > slot ? after + 1 : slot;
  for (int64_t j = first + threadIdx.x; j < n; j += blockDim.x) {
    if (par[j] == slot - 1 && (token < 0 || tok[j] == token)) {
      child = static_cast<int32_t>(j);
      break;  // later j of this thread are larger
    }
  }
  return BlockMin(child, s.ints);
}

// r <- max(r - q, 0) / mass unless the mass is 0 (kernels/cpu/rejection_step_ref.cpp).
__device__ void Residual(float* __restrict__ r, const float* __restrict__ q, int64_t vocab,
                         Scratch& s) {
  double local = 0.0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float d = r[i] - q[i];
    if (d > 0.f) local += d;
  }
  const double mass = BlockSum(local, s.sums);
  if (!(mass > 0.0)) return;
  const double inv_mass = 1.0 / mass;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float d = r[i] - q[i];
    r[i] = d > 0.f ? static_cast<float>(d * inv_mass) : 0.f;
  }
  __syncthreads();
}

// Rejection at a slot whose first child is `c`: the accepted child, or kNone with *bonus set
// (by thread 0; every thread gets the same child).
__device__ int32_t RejectAtSlot(const float* __restrict__ p, const float* __restrict__ q,
                                const int32_t* par, const int32_t* tok, int64_t n, int64_t slot,
                                int64_t vocab, int32_t c, bool wrong_residual,
                                float* __restrict__ r, const double* u, int32_t& next_u,
                                int32_t* bonus, Scratch& s) {
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) r[i] = p[i];
  __syncthreads();
  for (; c != kNone; c = NextChild(par, tok, n, slot, c, -1, s)) {
    const int32_t t = tok[c];
    const double uc = u[next_u++];
    const bool accept = t >= 0 && t < vocab && uc * static_cast<double>(q[t]) < r[t];
    __syncthreads();  // every thread has read r[t] before the residual overwrites it
    if (accept) return c;
    Residual(r, q, vocab, s);
  }
  const int32_t y = BlockDraw(wrong_residual ? p : r, vocab, u[next_u++], s);
  if (threadIdx.x == 0) *bonus = y;
  return kNone;
}

__global__ void SampledVerifyKernel(const float* __restrict__ probs,
                                    const float* __restrict__ draft_probs,
                                    const int32_t* __restrict__ tokens,
                                    const int32_t* __restrict__ parent,
                                    const double* __restrict__ uniforms, int64_t n, int64_t vocab,
                                    int32_t mode, float* __restrict__ residual,
                                    int32_t* __restrict__ accepted,
                                    int32_t* __restrict__ n_accepted, int32_t* __restrict__ bonus) {
  __shared__ Scratch s;
  const int64_t b = blockIdx.x;
  const int32_t* tok = tokens + b * n;
  const int32_t* par = parent + b * n;
  const double* u = uniforms + b * (n + 1);
  int32_t* acc = accepted + b * n;
  int32_t next_u = 0;
  int64_t slot = 0, count = 0;
  const bool rejection = mode == kSampledRejection || mode == kSampledRejectionTargetResidual;
  while (true) {
    const float* p = probs + (b * (n + 1) + slot) * vocab;
    int32_t c = NextChild(par, tok, n, slot, -1, -1, s);
    if (c == kNone) {  // a leaf: the bonus from the target
      const int32_t y = BlockDraw(p, vocab, u[next_u++], s);
      if (threadIdx.x == 0) bonus[b] = y;
      break;
    }
    if (rejection) {
      c = RejectAtSlot(p, draft_probs + (b * (n + 1) + slot) * vocab, par, tok, n, slot, vocab, c,
                       mode == kSampledRejectionTargetResidual, residual + b * vocab, u, next_u,
                       bonus + b, s);
    } else {
      const bool argmax = mode == kSampledFollowArgmax;
      const int32_t y =
          argmax ? BlockArgmax(p, vocab, s.argmax) : BlockDraw(p, vocab, u[next_u++], s);
      c = NextChild(par, tok, n, slot, -1, y, s);
      if (c == kNone) {
        const int32_t z = argmax ? BlockDraw(p, vocab, u[next_u++], s) : y;
        if (threadIdx.x == 0) bonus[b] = z;
      }
    }
    if (c == kNone) break;
    if (threadIdx.x == 0) acc[count] = c;
    ++count;
    slot = static_cast<int64_t>(c) + 1;
  }
  for (int64_t j = count + threadIdx.x; j < n; j += blockDim.x) acc[j] = -1;
  if (threadIdx.x == 0) n_accepted[b] = static_cast<int32_t>(count);
}

}  // namespace

int SampledTreeVerify(const float* probs, const float* draft_probs, const int32_t* tokens,
                      const int32_t* parent, const double* u, int64_t batch, int64_t n,
                      int64_t vocab, int32_t mode, float* residual, int32_t* accepted,
                      int32_t* n_accepted, int32_t* bonus, void* stream) {
  if (batch == 0) return kKernelOk;
  if (vocab < 1 || mode < kSampledRejection || mode > kSampledRejectionTargetResidual) {
    return kKernelBadInput;
  }
  SampledVerifyKernel<<<static_cast<unsigned int>(batch), kThreads, 0, AsStream(stream)>>>(
      probs, draft_probs, tokens, parent, u, n, vocab, mode, residual, accepted, n_accepted, bonus);
  return LaunchStatus();
}

}  // namespace gpu
}  // namespace specbed
