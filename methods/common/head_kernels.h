// Row kernels shared by the drafter heads' CPU forwards (methods/eagle3/eagle3_head.cpp,
// methods/dflash/dflash_head.cpp): RMSNorm of one row, SwiGLU of rows, a dot product, and the
// growth of a RoPE cos/sin table. Header-only, no LibTorch.
// Checked by: tests/methods/eagle3_head_test.cpp and tests/methods/dflash_head_test.cpp (each head
// against a plain-loop reference).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace specbed {

// out[0, dim) = x / rms(x) * w; x may be float or bfloat16, math in float32. out may alias x.
template <typename T>
void RmsNormRow(const T* x, const float* w, float* out, int64_t dim, float eps) {
  float ss = 0.f;
  for (int64_t i = 0; i < dim; ++i) {
    const float v = static_cast<float>(x[i]);
    ss += v * v;
  }
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
  for (int64_t i = 0; i < dim; ++i) out[i] = static_cast<float>(x[i]) * inv * w[i];
}

// SwiGLU of `rows` rows: act[i, f] = silu(gate[i, f]) * up[i, f], where row i of `gate_up` is
// [gate (inter) | up (inter)] and row i of `act` has `inter` floats.
inline void SwiGluRows(const float* gate_up, float* act, int64_t rows, int64_t inter) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* gate = gate_up + i * 2 * inter;
    const float* up = gate + inter;
    float* a = act + i * inter;
    for (int64_t f = 0; f < inter; ++f) a[f] = gate[f] / (1.0f + std::exp(-gate[f])) * up[f];
  }
}

inline float Dot(const float* a, const float* b, int64_t n) {
  float acc = 0.f;
  for (int64_t i = 0; i < n; ++i) acc += a[i] * b[i];
  return acc;
}

// Grows a RoPE table ([capacity, inv_freq.size()] cos and sin, row p = position p) to cover
// positions < max_position (at least doubling); rows already there are kept.
inline void GrowRopeTable(const std::vector<double>& inv_freq, int64_t max_position,
                          std::vector<float>& cos, std::vector<float>& sin, int64_t& capacity) {
  if (max_position <= capacity) return;
  const int64_t cap = std::max(max_position, 2 * capacity);
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  cos.resize(cap * half);
  sin.resize(cap * half);
  for (int64_t p = capacity; p < cap; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq[i];
      cos[p * half + i] = static_cast<float>(std::cos(angle));
      sin[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  capacity = cap;
}

}  // namespace specbed
