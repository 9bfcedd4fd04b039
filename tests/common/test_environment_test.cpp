// The environment ctest gives every GoogleTest test (cmake/SpecBedTest.cmake SPECBED_TEST_ENV):
// SPECBED_HOME and one OpenMP thread. A list property that lost its second entry (as
// gtest_discover_tests did with an unescaped ";" until 2026-12-04) leaves LibTorch at the
// machine's width, and ctest -j 2 then runs four spinning OpenMP threads on two cores (tests up to
// 10x slower). Skipped when run by hand without SPECBED_HOME.
#include <gtest/gtest.h>

#include <cstdlib>

namespace specbed {
namespace {

TEST(TestEnvironment, CtestGivesEveryTestTheShippedFilesAndOneOpenMpThread) {
  if (std::getenv("SPECBED_HOME") == nullptr) {
    GTEST_SKIP() << "not run by ctest (SPECBED_HOME unset)";
  }
  const char* omp = std::getenv("OMP_NUM_THREADS");
  ASSERT_NE(omp, nullptr) << "ctest set SPECBED_HOME but not OMP_NUM_THREADS: the test "
                             "environment list lost an entry (cmake/SpecBedTest.cmake)";
  EXPECT_STREQ(omp, "1");
}

}  // namespace
}  // namespace specbed
