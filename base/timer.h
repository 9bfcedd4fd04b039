// Monotonic wall-clock timing used by the runner's phase timers (steady_clock, microseconds).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace specbed {

inline int64_t NowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline int64_t NowNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Wall-clock time as RFC 3339 UTC ("2026-11-21T08:05:00Z").
std::string NowRfc3339();

}  // namespace specbed
