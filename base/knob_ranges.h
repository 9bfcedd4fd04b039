// Ranges of the sampling knobs, one set for every entry point (`specbed generate` flags, run and
// sweep configs), so a value accepted by one is accepted by all.
// Checked by: tests/cli/cli_test.cpp (generate and configs) and tests/engine/run_config_test.cpp.
#pragma once

namespace specbed {

// Temperatures are in [0, kMaxTemperature]; 0 = greedy. Above ~10 every distribution of a real
// model is flat to print precision, so 100 leaves room without admitting 1e308.
inline constexpr double kMaxTemperature = 100.0;

}  // namespace specbed
