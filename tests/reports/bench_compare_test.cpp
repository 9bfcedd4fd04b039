// `specbed compare` of two bench databases (reports/bench_compare.h) on hand-written bench rows:
// rows match on model, dtype, threads, batch, test and context (a pp and a tg row of the same
// length do not match each other), the latest run's row wins within a database, rows of one side
// only are named, a run database is not a bench database, and no match at all is an error.
// Checked by: itself (ctest compare_test).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "reports/bench_compare.h"
#include "tests/reports/synthetic_db.h"

namespace specbed {
namespace {

BenchRecord Row(const std::string& test, int64_t tokens, int64_t context, double tps) {
  BenchRecord r;
  r.model = "m";
  r.dtype = "float32";
  r.test = test;
  r.n_tokens = tokens;
  r.context_len = context;
  r.tokens_per_s = tps;
  return r;
}

std::string WriteBenchDb(const std::string& name,
                         const std::vector<std::vector<BenchRecord>>& runs) {
  const std::string path = testing::FreshDbPath(name);
  auto store = ResultsStore::Open(path);
  for (const auto& rows : runs) store->WriteBench(store->BeginRun(testing::TestRun()), rows);
  return path;
}

TEST(BenchCompare, MatchesRowsByWhatTheyMeasured) {
  const std::string a = WriteBenchDb(
      "bench_cmp_a", {{Row("pp", 64, 0, 900), Row("tg", 64, 0, 90), Row("tg", 32, 8, 80)}});
  // B measured tg64 twice (the later run counts) and has a row A lacks; its pp64 row is a tg64
  // row's length but another test.
  const std::string b = WriteBenchDb(
      "bench_cmp_b", {{Row("tg", 64, 0, 50)},
                      {Row("pp", 64, 0, 1800), Row("tg", 64, 0, 99), Row("tg", 64, 16, 70)}});
  EXPECT_TRUE(IsBenchDatabase(a));
  const BenchComparison c = CompareBenchDatabases(a, b);
  ASSERT_EQ(c.rows.size(), 2u);
  EXPECT_EQ(c.rows[0].a.test, "pp");
  EXPECT_DOUBLE_EQ(c.rows[0].ratio(), 2.0);
  EXPECT_EQ(c.rows[1].a.test, "tg");
  EXPECT_DOUBLE_EQ(c.rows[1].b.tokens_per_s, 99);  // the later run of B
  EXPECT_EQ(c.only_a, std::vector<std::string>{"m float32 t=1 b=1 tg32 ctx=8"});
  EXPECT_EQ(c.only_b, std::vector<std::string>{"m float32 t=1 b=1 tg64 ctx=16"});
  const std::string table = FormatBenchComparison(c);
  EXPECT_NE(table.find("| m | float32 | 1 | 1 | pp64 | 0 | 900.0 | 1800.0 | 2.000 |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("| m | float32 | 1 | 1 | tg64 | 0 | 90.0 | 99.0 | 1.100 |"),
            std::string::npos)
      << table;
}

TEST(BenchCompare, NoMatchingRowAndRunDatabases) {
  const std::string a = WriteBenchDb("bench_cmp_only_pp", {{Row("pp", 64, 0, 900)}});
  const std::string b = WriteBenchDb("bench_cmp_only_tg", {{Row("tg", 64, 0, 90)}});
  EXPECT_THROW(CompareBenchDatabases(a, b), Error);
  const std::string run = testing::FreshDbPath("bench_cmp_run");
  testing::WriteSummaryDb(run);
  EXPECT_FALSE(IsBenchDatabase(run));
}

}  // namespace
}  // namespace specbed
