// `specbed serve`: batched, concurrent serving of every method under load on one engine
// (harness/engine/batch_engine.h), and the figures engineers ask first: which method pays at
// which load. A serve config (configs/README.md, "Serve configs") expands into cells: target x
// method (with knobs) x draft schedule x load point x trace seed. A load point is a closed loop at
// fixed concurrency C (like `vllm bench serve --max-concurrency`: C users, each sending its next
// request when the previous one finished) or an open loop with Poisson arrivals at rate lambda
// (seeded exponential gaps; at most max_running sequences in a step, the rest queue).
//
// Continuous batching: at every step boundary the arrived requests are admitted while slots are
// free (each prefilled by a batch-1 forward, timed), then one batch step runs for every running
// sequence. The clock is the measured compute time: when nothing runs and the next arrival lies
// ahead, the clock jumps to it (no sleeping), so a cell's timeline is its work plus the idle gaps
// the arrivals leave. Per request: arrival, admission, first token, every emission, finish; per
// step: batch size, verify rows, drafted / accepted / emitted tokens, the K chosen, the phases'
// time. An online adapter's end-of-sequence update stalls the batch: its time is charged to every
// request in that step. Cells are written one transaction each (results/serve_records.h) and
// skipped when their key is stored, so an interrupted serve sweep resumes. AR on the identical
// trace (same seed: same prompts in the same order, same arrivals, same per-request seeds) is
// every method's baseline (metrics/serve_metrics.h: C*).
//
// Methods that run their own loop (PEARL, SpecBranch: supports_batch = false) are refused at any
// concurrency above 1 with an error naming them; at C = 1 they are refused too (serve them with
// `specbed run`, whose batch-1 figures are theirs).
// Checked by: tests/cli/serve_cli_test.cpp (a closed and an open loop end to end, answers equal
// across C, resume, refusals).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/runner/run_config.h"
#include "results/serve_records.h"
#include "results/store.h"

namespace specbed {

class MethodRegistry;

// One cell to run.
struct ServeCell {
  std::string target;
  MethodSpec method;  // knobs resolved
  DatasetSpec dataset;
  std::string mode;         // "closed" | "open"
  int64_t concurrency = 0;  // closed
  double rate = 0;          // open: requests per second
  int64_t max_running = 0;  // the engine's slots (closed: = concurrency)
  nlohmann::json schedule;  // DraftSchedule spec (batch_engine.h)
  int64_t n_requests = 0, max_new_tokens = 0, threads = 1;
  double temperature = 0;
  uint64_t seed = 0;
  std::string dtype = "float32", device = "cpu";
  bool batch_invariant = true;
  bool batch_drafts = true;  // BatchOptions::batch_drafts
  int64_t warmup = 1;        // untimed requests before the cell (per slot)

  nlohmann::json IdentityJson() const;
  std::string Key() const;    // hash of IdentityJson()
  std::string Label() const;  // "eagle3 C=4 by_batch seed=0"
};

struct ServeConfig {
  std::string name = "serve", output = "results/serve.db";
  std::vector<ServeCell> cells;
  nlohmann::json json;  // as read
};

// Overrides from the command line (empty = the config's).
struct ServeOverrides {
  std::string target;
  std::vector<int64_t> concurrency;
  int64_t n_requests = 0, max_new_tokens = 0;
};

// Reads and expands a serve config; every error names `path` and the bad entry.
ServeConfig LoadServeConfig(const std::string& path, const MethodRegistry& methods,
                            const ServeOverrides& overrides = {});

// One cell's requests: prompt index and per-request seed in trace order, and (open loop) the
// arrival times. Deterministic in cell.seed.
struct ServeTrace {
  std::vector<int64_t> prompt_index;
  std::vector<uint64_t> seeds;
  std::vector<double> arrival_ms;  // open loop only
};
ServeTrace BuildServeTrace(const ServeCell& cell, int64_t n_prompts);

// The refusals before anything runs (callers check before creating a database): a method that
// cannot share a batch (supports_batch = false), a bad schedule, an unknown dataset.
void ValidateServe(const ServeConfig& config, const MethodRegistry& methods);

struct ServeSummary {
  int64_t cells_total = 0, cells_run = 0, cells_skipped = 0;
  double wall_s = 0;
};

// Runs every cell not yet in `store` (validated first: methods that cannot share a batch are
// refused before anything runs).
ServeSummary RunServe(const ServeConfig& config, ResultsStore& store, const RunInfo& run_info,
                      bool show_progress);

}  // namespace specbed
