// IEEE binary16 -> binary32 on raw bits, branch-free so that `omp simd` loops and GCC vector code
// vectorize it (c10::Half's conversion stays scalar in a translation unit built without F16C).
// The 15 exponent + mantissa bits moved into float32's places read as 2^(e - 127) * 1.m (normal)
// or (m << 13) * 2^-149 (subnormal); multiplying by 2^112 moves the bias from 127 to 15, exactly;
// exponent 31 (inf, NaN) is restored afterwards.
//
// `static inline` on purpose: the per-instruction-set GEMV files (models/gemv_kernels.inc)
// include it, and a function with external linkage compiled there with AVX-512 enabled could be
// the copy the linker keeps for every caller.
//
// Checked by: tests/models/gemv_test.cpp (all 65,536 values against c10::Half).
#pragma once

#include <cstdint>
#include <cstring>

namespace specbed {

static inline float HalfBitsToFloat(uint16_t h) {
  uint32_t magnitude_bits = (static_cast<uint32_t>(h) & 0x7fffu) << 13;
  float magnitude;
  std::memcpy(&magnitude, &magnitude_bits, sizeof(magnitude));
  magnitude *= 0x1p112f;
  std::memcpy(&magnitude_bits, &magnitude, sizeof(magnitude));
  const uint32_t inf_nan = (h & 0x7c00u) == 0x7c00u ? 0x7f800000u : 0u;
  const uint32_t bits = ((static_cast<uint32_t>(h) & 0x8000u) << 16) | magnitude_bits | inf_nan;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

}  // namespace specbed
