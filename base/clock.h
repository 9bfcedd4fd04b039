// The clock that timing-driven decisions read (the SpecBlock bandit's throughput reward): the
// steady clock in production (WallClock), a hand-driven ManualClock or a deterministic
// CostModelClock (time = a model of the work done, e.g. a fixed cost per target forward) in
// tests, so that a test of such a decision does not depend on the machine's load. Phase timings
// and reported durations stay on the wall clock (timer.h); only decisions take a Clock.
// Checked by: tests/base/clock_test.cpp; tests/methods/specblock_test.cpp (the bandit on a cost
// model).
#pragma once

#include <functional>
#include <utility>

#include "base/timer.h"

namespace specbed {

// A monotonic time source in seconds from an arbitrary origin.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual double Now() const = 0;
};

// The steady clock (NowNanos), what production decisions read.
class SteadyClock final : public Clock {
 public:
  double Now() const override { return static_cast<double>(NowNanos()) * 1e-9; }
};

// The process's steady clock: the default wherever a Clock may be injected.
inline const Clock& WallClock() {
  static const SteadyClock clock;
  return clock;
}

// Time set by hand (tests): starts at 0, moves only by Set / Advance.
class ManualClock final : public Clock {
 public:
  double Now() const override { return now_s_; }
  void Set(double seconds) { now_s_ = seconds; }
  void Advance(double seconds) { now_s_ += seconds; }

 private:
  double now_s_ = 0;
};

// Time as a model of the work done so far: Now() = cost() seconds, e.g. a fixed cost per
// target forward times the target's forward counter (LlamaModel::forward_calls). Deterministic
// whatever the machine's load; `cost` must never decrease.
class CostModelClock final : public Clock {
 public:
  explicit CostModelClock(std::function<double()> cost) : cost_(std::move(cost)) {}
  double Now() const override { return cost_(); }

 private:
  std::function<double()> cost_;
};

}  // namespace specbed
