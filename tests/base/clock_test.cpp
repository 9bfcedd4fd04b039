// Tests for the decision clocks (base/clock.h): the wall clock is the steady clock and
// never goes back; a ManualClock moves only by hand; a CostModelClock reads its cost model.
#include "base/clock.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace specbed {
namespace {

TEST(Clock, WallClockIsTheSteadyClockAndNeverGoesBack) {
  const Clock& wall = WallClock();
  EXPECT_EQ(&wall, &WallClock());
  const double before = NowNanos() * 1e-9;
  const double a = wall.Now();
  const double b = wall.Now();
  const double after = NowNanos() * 1e-9;
  EXPECT_LE(before, a);
  EXPECT_LE(a, b);
  EXPECT_LE(b, after);
}

TEST(Clock, ManualClockMovesOnlyByHand) {
  ManualClock clock;
  EXPECT_EQ(clock.Now(), 0);
  clock.Advance(0.25);
  clock.Advance(0.5);
  EXPECT_DOUBLE_EQ(clock.Now(), 0.75);
  clock.Set(3);
  EXPECT_EQ(clock.Now(), 3);
}

TEST(Clock, CostModelClockReadsTheWorkDone) {
  int64_t forwards = 0;
  const CostModelClock clock([&] { return 2e-3 * static_cast<double>(forwards); });
  EXPECT_EQ(clock.Now(), 0);
  forwards = 5;
  EXPECT_DOUBLE_EQ(clock.Now(), 0.01);
  const Clock& as_clock = clock;  // used through the interface, as the decisions do
  EXPECT_DOUBLE_EQ(as_clock.Now(), 0.01);
}

}  // namespace
}  // namespace specbed
