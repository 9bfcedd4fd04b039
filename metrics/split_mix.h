// Internal to specbed_metrics: SplitMix64 (Steele, Lea, Flood 2014), the bootstrap's random
// stream: a tiny, fully specified generator with an exact multiply-shift index draw, so bootstrap
// intervals do not depend on the standard library's distributions and are identical on every
// platform and run (metrics.cpp's speedup intervals, serve_metrics.cpp's crossover intervals).
// Checked by: tests/reports/metrics_test.cpp, tests/reports/serve_metrics_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace specbed {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform index in [0, n) by multiply-shift (bias < n / 2^64, negligible).
  size_t Index(size_t n) {
    return static_cast<size_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace specbed
