// The raw GEMV kernels (models/gemv_kernels.h: one table per instruction set, no LibTorch) against
// a float64 loop on exact-size buffers, for every table this CPU runs, every storage type, odd
// shapes (tails of every length), 1..19 rows (one-pass and grouped), bias and accumulation. Built
// without LibTorch, so scripts/sanitize runs it under ASan + UBSan: a read past a row or a tail is
// a failure there.
#include "models/gemv_kernels.h"

#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace specbed::gemv {
namespace {

// Values k/8 with |k| < 128: exact in bf16 (8 significant bits) and fp16, so the only rounding is
// the kernel's own (its sums and the final store).
float SmallValue(uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return static_cast<float>(static_cast<int>((state >> 33) % 255) - 127) / 8.0f;
}

uint16_t ToBf16Bits(float v) {  // exact for SmallValue's values (truncation = rounding)
  uint32_t u;
  std::memcpy(&u, &v, sizeof(u));
  return static_cast<uint16_t>(u >> 16);
}

uint16_t ToHalfBits(float v) {  // exact for normal values in fp16's range and for 0
  if (v == 0) return 0;
  const uint16_t sign = v < 0 ? 0x8000 : 0;
  int exponent = 0;
  const double mantissa = std::frexp(std::fabs(v), &exponent);  // [0.5, 1) * 2^exponent
  const auto fraction = static_cast<uint16_t>(std::lround((mantissa * 2 - 1) * 1024));
  return sign | static_cast<uint16_t>((exponent - 1 + 15) << 10) | fraction;
}

float FromBits(Storage s, const void* data, int64_t i) {
  if (s == Storage::kFloat) return static_cast<const float*>(data)[i];
  const uint16_t bits = static_cast<const uint16_t*>(data)[i];
  if (s == Storage::kBFloat16) {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof(f));
    return f;
  }
  const int exponent = (bits >> 10) & 0x1f, fraction = bits & 0x3ff;
  const double magnitude =
      exponent == 0 ? std::ldexp(fraction, -24) : std::ldexp(1024 + fraction, exponent - 25);
  return static_cast<float>((bits & 0x8000) ? -magnitude : magnitude);
}

// A matrix of SmallValues in storage `s` (bytes), and the float values it holds.
struct Buffer {
  std::vector<uint8_t> bytes;
  std::vector<float> values;
};
Buffer Make(Storage s, int64_t n, uint64_t& state) {
  Buffer b;
  const size_t width = s == Storage::kFloat ? 4 : 2;
  b.bytes.resize(static_cast<size_t>(n) * width);
  for (int64_t i = 0; i < n; ++i) {
    const float v = SmallValue(state);
    b.values.push_back(v);
    if (s == Storage::kFloat) {
      std::memcpy(b.bytes.data() + i * 4, &v, 4);
    } else {
      const uint16_t bits = s == Storage::kBFloat16 ? ToBf16Bits(v) : ToHalfBits(v);
      std::memcpy(b.bytes.data() + i * 2, &bits, 2);
    }
  }
  return b;
}

void CheckOne(const Table& table, Storage s, int64_t rows, int64_t out_features, int64_t in,
              bool bias, bool accumulate, uint64_t& state) {
  SCOPED_TRACE(::testing::Message()
               << table.name << " storage " << static_cast<int>(s) << " rows " << rows << " out "
               << out_features << " in " << in << " bias " << bias << " accumulate " << accumulate);
  const Buffer w = Make(s, out_features * in, state);
  const Buffer b = Make(s, out_features, state);
  Buffer out = Make(s, rows * out_features, state);
  const std::vector<float> old = out.values;
  // Activations: float32, except bf16 weights on a bf16-dot table (bf16 activations).
  const bool native_x = s == Storage::kBFloat16 && table.bf16_x;
  const Buffer x = Make(native_x ? Storage::kBFloat16 : Storage::kFloat, rows * in, state);
  const Args args{
      x.bytes.data(),   rows,         in,        w.bytes.data(), bias ? b.bytes.data() : nullptr,
      out.bytes.data(), out_features, accumulate};
  table.range[static_cast<int>(s)](args, 0, out_features);
  double max_error = 0, max_value = 1;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < out_features; ++j) {
      double expected = (accumulate ? old[r * out_features + j] : 0.0) + (bias ? b.values[j] : 0.0);
      for (int64_t i = 0; i < in; ++i) {
        expected += static_cast<double>(x.values[r * in + i]) * w.values[j * in + i];
      }
      const double got = FromBits(s, out.bytes.data(), r * out_features + j);
      max_error = std::max(max_error, std::fabs(got - expected));
      max_value = std::max(max_value, std::fabs(expected));
    }
  }
  // One rounding to the storage type plus float32 sums: 2^-8 (bf16), 2^-10 (fp16), 1e-5 (fp32).
  const double tolerance = s == Storage::kFloat ? 1e-5 : s == Storage::kBFloat16 ? 4e-3 : 1e-3;
  EXPECT_LT(max_error / max_value, tolerance);
}

TEST(GemvKernels, EveryTableMatchesAFloat64LoopOnExactSizeBuffers) {
  uint64_t state = 1;
  int tables = 0;
  for (int i = 0; i < kIsaCount; ++i) {
    const Table* table = TableOf(static_cast<Isa>(i));
    if (table == nullptr) continue;
    ++tables;
    for (Storage s : {Storage::kFloat, Storage::kBFloat16, Storage::kHalf}) {
      for (int64_t rows : {1, 2, 3, 5, 8, 9, 19}) {
        for (int64_t in : {1, 7, 31, 64, 97, 130}) {
          CheckOne(*table, s, rows, /*out_features=*/5, in, rows % 2 == 1, rows % 3 == 0, state);
        }
      }
    }
  }
  EXPECT_GE(tables, 1);
  EXPECT_TRUE(CpuHas(Isa::kGeneric));
  EXPECT_NE(TableOf(Isa::kGeneric), nullptr);
}

// Negative control for the test itself: a table whose kernel skips the last input element fails
// the comparison (the check sees a dropped tail).
TEST(GemvKernels, TheCheckCatchesADroppedTail) {
  Table broken = *TableOf(Isa::kGeneric);
  static RangeFn real = nullptr;
  real = broken.range[0];
  broken.range[0] = [](const Args& a, int64_t j0, int64_t j1) {
    Args shorter = a;
    shorter.in = a.in - 1;  // the rows keep their stride in a.x / a.weight only when rows == 1
    real(shorter, j0, j1);
  };
  uint64_t state = 7;
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    CheckOne(broken, Storage::kFloat, /*rows=*/1, /*out_features=*/1, /*in=*/31, false, false,
             state);
  }
  EXPECT_GE(failures.size(), 1);
}

}  // namespace
}  // namespace specbed::gemv
