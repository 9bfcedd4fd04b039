// Merging results databases (`specbed merge OUT.db IN.db...`): copies the runs, cases (with their
// samples and steps), serve cells (with their requests and steps) and bench rows of another
// database into an open store, skipping cases whose case_key (serve cells whose cell_key) is
// already there, so shards of a sweep run on several machines combine into one file
// and merging the same input twice adds nothing. The AR cases of a sharded sweep carry their shard
// in the key (harness/runner/sweep.h ShardCases), so every shard's AR case is kept, and each
// shard's speedups keep comparing with it (metrics FindArBaseline prefers the same run).
// Checked by: tests/results/merge_test.cpp, tests/results/serve_store_test.cpp (serve cells) and
// tests/cli/sweep_cli_test.cpp.
#pragma once

#include <cstdint>
#include <string>

#include "results/store.h"

namespace specbed {

struct MergeSummary {
  int64_t runs_copied = 0;          // runs rows inserted (a run already in the output is reused)
  int64_t cases_copied = 0;         // cases written with all their samples and steps
  int64_t cases_skipped = 0;        // cases whose case_key the output already held
  int64_t samples_copied = 0;       // samples rows of the copied cases
  int64_t steps_copied = 0;         // steps rows of the copied cases
  int64_t bench_copied = 0;         // bench rows of the inserted runs
  int64_t serve_cells_copied = 0;   // serve cells written with their requests and steps
  int64_t serve_cells_skipped = 0;  // serve cells whose cell_key the output already held
};

// Copies `input_path` (opened read-only; any schema version this build reads) into `out`. A run
// is inserted only when something of it is copied, and is reused when `out` already holds a run
// with identical provenance (so merging twice adds nothing). Each case is copied in one
// transaction (WriteCase) with new run/case ids; its samples and steps follow it. Drafter
// training tables are not copied. A missing or bad input, or the output itself, fails naming the
// file.
MergeSummary MergeResults(ResultsStore& out, const std::string& input_path);

}  // namespace specbed
