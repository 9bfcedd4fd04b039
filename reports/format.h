// Number formatting shared by `specbed report` and `specbed summary`: a metric with no value
// (NaN or infinite) prints as "—".
// Checked by: tests/reports/report_test.cpp and tests/reports/summary_test.cpp (table cells).
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace specbed {
namespace report_format {

inline constexpr const char* kNone = "—";

// `v` with `decimals` digits after the point ("1.50"), or "—".
inline std::string Fixed(double v, int decimals) {
  if (!std::isfinite(v)) return kNone;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

// `v` in %g form ("0.125", "1e-05"), or "—".
inline std::string General(double v) {
  if (!std::isfinite(v)) return kNone;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

}  // namespace report_format
}  // namespace specbed
