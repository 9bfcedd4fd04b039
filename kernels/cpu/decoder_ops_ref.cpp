// CPU references of the fused decoder-layer ops (layer 2 of 3; contracts in
// kernels/cpu/references.h and kernels/decoder_op_args.h): what the CPU ATen forward path runs.
// Plain loops over float32 math with one rounding to the element type (c10's conversions, as a
// tensor copy_ rounds).
// Checked by: tests/kernels/decoder_ops_test.cpp (against ATen compositions of the same math).
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/references.h"

namespace specbed {
namespace cpu {
namespace {

// Calls f(T{}) with T the storage type of `element`; false for an unknown code.
template <typename F>
bool WithElement(int32_t element, F&& f) {
  switch (element) {
    case kElementFloat32:
      f(float{});
      return true;
    case kElementBFloat16:
      f(c10::BFloat16{});
      return true;
    case kElementFloat16:
      f(c10::Half{});
      return true;
    default:
      return false;
  }
}

template <typename T>
float InvRms(const T* x, int64_t d, float eps) {
  float ss = 0.f;
  for (int64_t i = 0; i < d; ++i) ss += static_cast<float>(x[i]) * static_cast<float>(x[i]);
  return 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
}

// One head: src (head_dim elements) -> optional norm -> optional RoPE -> dst.
template <typename T>
void RotateHead(const T* src, T* dst, const float* norm, float eps, const float* cos,
                const float* sin, int64_t head_dim, bool interleaved) {
  float v[1024];  // head_dim <= 1024 (checked by the wrapper)
  const float inv = norm != nullptr ? InvRms(src, head_dim, eps) : 1.0f;
  for (int64_t i = 0; i < head_dim; ++i) {
    v[i] = static_cast<float>(src[i]);
    // The norm's output is rounded to the element type before RoPE, as the row kernels do.
    if (norm != nullptr) v[i] = static_cast<float>(static_cast<T>(v[i] * inv * norm[i]));
  }
  if (cos == nullptr) {
    for (int64_t i = 0; i < head_dim; ++i) dst[i] = static_cast<T>(v[i]);
    return;
  }
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + half;
    dst[a] = static_cast<T>(v[a] * cos[i] - v[b] * sin[i]);
    dst[b] = static_cast<T>(v[b] * cos[i] + v[a] * sin[i]);
  }
}

template <typename T>
int RopeKvWriteT(const RopeKvWriteArgs& a) {
  const int64_t hd = a.head_dim, half = hd / 2, row_width = (a.heads + 2 * a.kv_heads) * hd;
  const T* qkv = static_cast<const T*>(a.qkv);
  T* q_out = static_cast<T*>(a.q_out);
  T* k_cache = static_cast<T*>(a.k_cache);
  T* v_cache = static_cast<T*>(a.v_cache);
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t t = 0; t < a.tokens; ++t) {
      const int64_t r = b * a.tokens + t, pos = a.positions[r], slot = a.slots[r];
      if (pos < 0 || pos >= a.n_positions || slot < 0 || slot >= a.max_len) return kKernelBadInput;
      const float* cos = a.cos + pos * half;
      const float* sin = a.sin + pos * half;
      const T* row = qkv + r * row_width;
      for (int64_t h = 0; h < a.heads; ++h) {
        RotateHead(row + h * hd, q_out + ((b * a.heads + h) * a.tokens + t) * hd, a.q_norm, a.eps,
                   cos, sin, hd, a.interleaved);
      }
      for (int64_t h = 0; h < a.kv_heads; ++h) {
        const int64_t dst = ((b * a.kv_heads + h) * a.max_len + slot) * hd;
        RotateHead(row + (a.heads + h) * hd, k_cache + dst, a.k_norm, a.eps, cos, sin, hd,
                   a.interleaved);
        RotateHead(row + (a.heads + a.kv_heads + h) * hd, v_cache + dst, nullptr, a.eps, nullptr,
                   nullptr, hd, a.interleaved);
      }
    }
  }
  return kKernelOk;
}

// One query row against its visible slots, in one pass with a running maximum (the sum and the
// accumulator are rescaled when it grows).
template <typename T>
void AttendRow(const T* q, const T* k, const T* v, int64_t kv_len, uint64_t bits, int64_t hd,
               float scale, T* out) {
  float acc[1024] = {};  // head_dim <= 1024 (checked by the wrapper)
  float m = -std::numeric_limits<float>::infinity(), sum = 0.f;
  const int64_t end = kv_len + (bits == 0 ? 0 : 64 - __builtin_clzll(bits));
  for (int64_t j = 0; j < end; ++j) {
    if (j >= kv_len && ((bits >> (j - kv_len)) & 1) == 0) continue;
    float s = 0.f;
    for (int64_t i = 0; i < hd; ++i)
      s += static_cast<float>(q[i]) * static_cast<float>(k[j * hd + i]);
    s *= scale;
    if (s > m) {
      const float r = sum > 0.f ? std::exp(m - s) : 0.f;
      sum *= r;
      for (int64_t i = 0; i < hd; ++i) acc[i] *= r;
      m = s;
    }
    const float p = std::exp(s - m);
    sum += p;
    for (int64_t i = 0; i < hd; ++i) acc[i] += p * static_cast<float>(v[j * hd + i]);
  }
  const float inv = sum > 0.f ? 1.0f / sum : 0.f;
  for (int64_t i = 0; i < hd; ++i) out[i] = static_cast<T>(acc[i] * inv);
}

template <typename T>
int TreeAttentionT(const TreeAttentionArgs& a) {
  const int64_t hd = a.head_dim, group = a.heads / a.kv_heads;
  for (int64_t b = 0; b < a.batch; ++b) {
    const int64_t kv_len = a.kv_len[b];
    if (kv_len < 0 || kv_len + a.tokens > a.max_len) return kKernelBadInput;
    for (int64_t t = 0; t < a.tokens; ++t) {
      const auto bits = static_cast<uint64_t>(a.tree_bits[b * a.bits_batch_stride + t]);
      if (a.tokens < 64 && (bits >> a.tokens) != 0) return kKernelBadInput;
      for (int64_t h = 0; h < a.heads; ++h) {
        const int64_t kv = (b * a.kv_heads + h / group) * a.max_len * hd;
        AttendRow(static_cast<const T*>(a.q) + ((b * a.heads + h) * a.tokens + t) * hd,
                  static_cast<const T*>(a.k_cache) + kv, static_cast<const T*>(a.v_cache) + kv,
                  kv_len, bits, hd, a.scale,
                  static_cast<T*>(a.out) + ((b * a.tokens + t) * a.heads + h) * hd);
      }
    }
  }
  return kKernelOk;
}

}  // namespace

int TreeAttention(const TreeAttentionArgs& args) {
  int status = kKernelBadInput;
  WithElement(args.element, [&](auto zero) { status = TreeAttentionT<decltype(zero)>(args); });
  return status;
}

int RmsNormRows(const void* x, int64_t x_stride, const float* w, void* out, int64_t out_stride,
                int64_t rows, int64_t d, float eps, int32_t element) {
  const bool known = WithElement(element, [&](auto zero) {
    using T = decltype(zero);
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = static_cast<const T*>(x) + r * x_stride;
      T* o = static_cast<T*>(out) + r * out_stride;
      const float inv = InvRms(xr, d, eps);
      for (int64_t i = 0; i < d; ++i) o[i] = static_cast<T>(static_cast<float>(xr[i]) * inv * w[i]);
    }
  });
  return known ? kKernelOk : kKernelBadInput;
}

int SiluMulRows(const void* gate_up, void* act, int64_t rows, int64_t hidden, int32_t element) {
  const bool known = WithElement(element, [&](auto zero) {
    using T = decltype(zero);
    for (int64_t r = 0; r < rows; ++r) {
      const T* g = static_cast<const T*>(gate_up) + r * 2 * hidden;
      T* o = static_cast<T*>(act) + r * hidden;
      for (int64_t i = 0; i < hidden; ++i) {
        const float gv = static_cast<float>(g[i]);
        o[i] = static_cast<T>(gv / (1.0f + std::exp(-gv)) * static_cast<float>(g[hidden + i]));
      }
    }
  });
  return known ? kKernelOk : kKernelBadInput;
}

int RopeKvWrite(const RopeKvWriteArgs& args) {
  int status = kKernelBadInput;
  WithElement(args.element, [&](auto zero) { status = RopeKvWriteT<decltype(zero)>(args); });
  return status;
}

}  // namespace cpu
}  // namespace specbed
