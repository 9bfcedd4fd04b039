// CUDA fused decoder-layer ops (launchers declared in kernels/cuda/launchers.h; CPU references
// kernels/cpu/decoder_ops_ref.cpp; contracts in kernels/cpu/references.h and
// kernels/decoder_op_args.h): RMSNorm rows, SiLU * up, and RoPE (with the optional q/k norm) of
// q into the query buffer and of k into the KV cache, v into the cache, at device-held positions
// and slots, and attention of up to 64 new rows over the cached slots and a bitmask over the new
// ones (kv_len on the device). Float32 math, one rounding to the element type.
// Checked by: tests/kernels/decoder_ops_test.cpp (DecoderOpsCuda: equal to the CPU references
// within float32 rounding, float32 / bfloat16 / float16).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_util.cuh"

namespace specbed {
namespace gpu {
namespace {

__device__ inline float ToFloat(float v) {
  return v;
}
__device__ inline float ToFloat(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ inline float ToFloat(__half v) {
  return __half2float(v);
}

template <typename T>
__device__ T FromFloat(float v);
template <>
__device__ inline float FromFloat<float>(float v) {
  return v;
}
template <>
__device__ inline __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ inline __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

// Calls f(T{}) with T the device storage type of `element`; kKernelBadInput for an unknown code.
template <typename F>
int WithElement(int32_t element, F&& f) {
  switch (element) {
    case kElementFloat32:
      return f(float{});
    case kElementBFloat16:
      return f(__nv_bfloat16{});
    case kElementFloat16:
      return f(__half{});
    default:
      return kKernelBadInput;
  }
}

constexpr int kNormThreads = 256;

template <typename T>
__global__ void RmsNormKernel(const T* __restrict__ x, int64_t x_stride,
                              const float* __restrict__ w, T* out, int64_t out_stride, int64_t d,
                              float eps) {
  __shared__ float scratch[32];
  const T* xr = x + blockIdx.x * x_stride;
  T* o = out + blockIdx.x * out_stride;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    const float v = ToFloat(xr[i]);
    ss += v * v;
  }
  const float inv = 1.0f / sqrtf(BlockSum(ss, scratch) / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
    o[i] = FromFloat<T>(ToFloat(xr[i]) * inv * w[i]);
  }
}

template <typename T>
__global__ void SiluMulKernel(const T* __restrict__ gate_up, T* __restrict__ act, int64_t rows,
                              int64_t hidden) {
  const int64_t total = rows * hidden;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / hidden, i = e % hidden;
    const float g = ToFloat(gate_up[r * 2 * hidden + i]);
    const float u = ToFloat(gate_up[r * 2 * hidden + hidden + i]);
    act[e] = FromFloat<T>(g / (1.0f + expf(-g)) * u);
  }
}

// Block (row r, head hh of q | k | v), thread i: the RoPE pair i of that head.
template <typename T>
__global__ void RopeKvKernel(RopeKvWriteArgs a) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x, hh = blockIdx.y, hd = a.head_dim, half = hd / 2;
  const int64_t pos = a.positions[r], slot = a.slots[r];
  if (pos < 0 || pos >= a.n_positions || slot < 0 || slot >= a.max_len) return;  // whole block
  const int64_t b = r / a.tokens, t = r % a.tokens;
  const bool is_q = hh < a.heads, is_k = !is_q && hh < a.heads + a.kv_heads;
  const float* norm = is_q ? a.q_norm : (is_k ? a.k_norm : nullptr);
  const T* src = static_cast<const T*>(a.qkv) + r * (a.heads + 2 * a.kv_heads) * hd + hh * hd;
  T* dst;
  if (is_q) {
    dst = static_cast<T*>(a.q_out) + ((b * a.heads + hh) * a.tokens + t) * hd;
  } else {
    const int64_t kh = is_k ? hh - a.heads : hh - a.heads - a.kv_heads;
    T* cache = static_cast<T*>(is_k ? a.k_cache : a.v_cache);
    dst = cache + ((b * a.kv_heads + kh) * a.max_len + slot) * hd;
  }
  const int64_t i = threadIdx.x;
  const int64_t ia = a.interleaved ? 2 * i : i, ib = a.interleaved ? 2 * i + 1 : i + half;
  float x0 = 0.f, x1 = 0.f;
  if (i < half) {
    x0 = ToFloat(src[ia]);
    x1 = ToFloat(src[ib]);
  }
  if (norm != nullptr) {  // uniform over the block
    const float inv =
        1.0f / sqrtf(BlockSum(x0 * x0 + x1 * x1, scratch) / static_cast<float>(hd) + a.eps);
    if (i < half) {  // rounded to the element type before RoPE, as the CPU reference
      x0 = ToFloat(FromFloat<T>(x0 * inv * norm[ia]));
      x1 = ToFloat(FromFloat<T>(x1 * inv * norm[ib]));
    }
  }
  if (i >= half) return;
  if (is_q || is_k) {
    const float c = a.cos[pos * half + i], s = a.sin[pos * half + i];
    dst[ia] = FromFloat<T>(x0 * c - x1 * s);
    dst[ib] = FromFloat<T>(x1 * c + x0 * s);
  } else {
    dst[ia] = FromFloat<T>(x0);
    dst[ib] = FromFloat<T>(x1);
  }
}

constexpr int kAttentionWarps = 4;
constexpr int kMaxPerLane = 8;  // head_dim <= 256

__device__ inline float WarpSum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// Block (b * heads + h, t): each warp walks keys warp, warp + 4, ... with an online softmax
// (lane l holds elements l, l + 32, ... of q and of the accumulator); the warps' partial results
// are merged through shared memory.
template <typename T>
__global__ void TreeAttentionKernel(TreeAttentionArgs a) {
  __shared__ float warp_max[kAttentionWarps], warp_sum[kAttentionWarps];
  __shared__ float warp_acc[kAttentionWarps][kMaxPerLane * 32];
  const int64_t b = blockIdx.x / a.heads, h = blockIdx.x % a.heads, t = blockIdx.y;
  const int64_t hd = a.head_dim, kvh = h / (a.heads / a.kv_heads);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t kv_len = a.kv_len[b];
  const auto bits = static_cast<uint64_t>(a.tree_bits[b * a.bits_batch_stride + t]);
  int64_t end = kv_len + (bits == 0 ? 0 : 64 - __clzll(static_cast<long long>(bits)));
  if (end > a.max_len) end = a.max_len;  // slots past the cache are skipped
  const T* q = static_cast<const T*>(a.q) + ((b * a.heads + h) * a.tokens + t) * hd;
  const int64_t kv_base = (b * a.kv_heads + kvh) * a.max_len * hd;
  const T* k = static_cast<const T*>(a.k_cache) + kv_base;
  const T* v = static_cast<const T*>(a.v_cache) + kv_base;
  float qf[kMaxPerLane], acc[kMaxPerLane];
  for (int e = 0; e < kMaxPerLane; ++e) {
    const int64_t i = lane + 32 * e;
    qf[e] = i < hd ? ToFloat(q[i]) : 0.f;
    acc[e] = 0.f;
  }
  float m = -INFINITY, sum = 0.f;
  for (int64_t j = warp; j < end; j += kAttentionWarps) {
    if (j >= kv_len && ((bits >> (j - kv_len)) & 1) == 0) continue;
    float dot = 0.f;
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int64_t i = lane + 32 * e;
      if (i < hd) dot += qf[e] * ToFloat(k[j * hd + i]);
    }
    const float s = WarpSum(dot) * a.scale;
    if (s > m) {
      const float r = sum > 0.f ? expf(m - s) : 0.f;
      sum *= r;
      for (int e = 0; e < kMaxPerLane; ++e) acc[e] *= r;
      m = s;
    }
    const float p = expf(s - m);
    sum += p;
    for (int e = 0; e < kMaxPerLane; ++e) {
      const int64_t i = lane + 32 * e;
      if (i < hd) acc[e] += p * ToFloat(v[j * hd + i]);
    }
  }
  if (lane == 0) {
    warp_max[warp] = m;
    warp_sum[warp] = sum;
  }
  for (int e = 0; e < kMaxPerLane; ++e) warp_acc[warp][lane + 32 * e] = acc[e];
  __syncthreads();
  float top = -INFINITY;
  for (int w = 0; w < kAttentionWarps; ++w) top = fmaxf(top, warp_max[w]);
  float total = 0.f;
  float scale_w[kAttentionWarps];
  for (int w = 0; w < kAttentionWarps; ++w) {
    scale_w[w] = warp_sum[w] > 0.f ? expf(warp_max[w] - top) : 0.f;
    total += warp_sum[w] * scale_w[w];
  }
  const float inv = total > 0.f ? 1.0f / total : 0.f;
  T* out = static_cast<T*>(a.out) + ((b * a.tokens + t) * a.heads + h) * hd;
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
    float o = 0.f;
    for (int w = 0; w < kAttentionWarps; ++w) o += warp_acc[w][i] * scale_w[w];
    out[i] = FromFloat<T>(o * inv);
  }
}

}  // namespace

int TreeAttention(const TreeAttentionArgs& args, void* stream) {
  if (args.batch * args.tokens * args.heads == 0) return kKernelOk;
  if (args.head_dim > kMaxPerLane * 32) return kKernelBadInput;
  const dim3 grid(static_cast<unsigned int>(args.batch * args.heads),
                  static_cast<unsigned int>(args.tokens));
  return WithElement(args.element, [&](auto zero) {
    TreeAttentionKernel<decltype(zero)><<<grid, kAttentionWarps * 32, 0, AsStream(stream)>>>(args);
    return LaunchStatus();
  });
}

int RmsNormRows(const void* x, int64_t x_stride, const float* w, void* out, int64_t out_stride,
                int64_t rows, int64_t d, float eps, int32_t element, void* stream) {
  if (rows == 0 || d == 0) return kKernelOk;
  return WithElement(element, [&](auto zero) {
    using T = decltype(zero);
    RmsNormKernel<T><<<static_cast<unsigned int>(rows), kNormThreads, 0, AsStream(stream)>>>(
        static_cast<const T*>(x), x_stride, w, static_cast<T*>(out), out_stride, d, eps);
    return LaunchStatus();
  });
}

int SiluMulRows(const void* gate_up, void* act, int64_t rows, int64_t hidden, int32_t element,
                void* stream) {
  if (rows * hidden == 0) return kKernelOk;
  return WithElement(element, [&](auto zero) {
    using T = decltype(zero);
    constexpr int kThreads = 256;
    SiluMulKernel<T><<<GridFor(rows * hidden, kThreads), kThreads, 0, AsStream(stream)>>>(
        static_cast<const T*>(gate_up), static_cast<T*>(act), rows, hidden);
    return LaunchStatus();
  });
}

int RopeKvWrite(const RopeKvWriteArgs& args, void* stream) {
  const int64_t rows = args.batch * args.tokens;
  if (rows == 0) return kKernelOk;
  const int64_t half = args.head_dim / 2;
  const unsigned int threads = static_cast<unsigned int>((half + 31) / 32 * 32);
  const dim3 grid(static_cast<unsigned int>(rows),
                  static_cast<unsigned int>(args.heads + 2 * args.kv_heads));
  return WithElement(args.element, [&](auto zero) {
    RopeKvKernel<decltype(zero)><<<grid, threads, 0, AsStream(stream)>>>(args);
    return LaunchStatus();
  });
}

}  // namespace gpu
}  // namespace specbed
