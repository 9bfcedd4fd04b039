// `specbed compare A.db B.db` for two `specbed bench` databases (llama-bench's
// compare-llama-bench): the rows of A and B matched on what was measured — model, dtype, threads,
// batch, test (ppN / tgN), context — with A's and B's tok/s and B/A, in a Markdown table. When a
// database measured the same row more than once, its latest run's row counts. Rows of one
// database only are counted and named below the table.
// Checked by: tests/reports/bench_compare_test.cpp and tests/cli/compare_cli_test.cpp
// (CompareCli.TwoBenchDatabases).
#pragma once

#include <string>
#include <vector>

#include "results/store.h"

namespace specbed {

struct BenchComparisonRow {
  BenchRecord a, b;  // the matched rows (key fields equal)
  double ratio() const { return b.tokens_per_s / a.tokens_per_s; }
};

struct BenchComparison {
  std::string a_path, b_path;
  std::vector<BenchComparisonRow> rows;     // in A's order
  std::vector<std::string> only_a, only_b;  // key labels of unmatched rows
};

// True when the database holds bench rows and no case (what `compare` then compares).
bool IsBenchDatabase(const std::string& path);
// Matches the bench rows of two databases; fails naming both when no row matches.
BenchComparison CompareBenchDatabases(const std::string& a_path, const std::string& b_path);
// The Markdown table (model, dtype, threads, batch, test, context, A tok/s, B tok/s, B/A) and the
// unmatched rows.
std::string FormatBenchComparison(const BenchComparison& c);

}  // namespace specbed
