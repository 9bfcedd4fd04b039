// The records of `specbed serve` (schema v14): one serve cell (a method on one arrival trace at one
// load point), its requests and its batch steps. A cell is written with all its requests and steps
// in one transaction (like a case), so a crash never leaves a partial cell and a serve sweep
// resumes by skipping cell keys already stored. Metrics (throughput, TTFT, TPOT, ITL, E2E, the
// crossover concurrency C*) are computed later from these raw facts (metrics/serve_metrics.h).
// Times are milliseconds since the cell's clock started (the first arrival is at 0 in closed
// loop; open loop draws arrivals from a seeded exponential).
// Checked by: tests/results/serve_store_test.cpp (round trips, resume, every field a column).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specbed {

// One serve cell: target x method (with knobs) x load point (closed loop at concurrency C, or open
// loop at rate lambda) x draft-length schedule x trace seed.
struct ServeCellRecord {
  std::string cell_key;  // hash of the resolved cell config; unique among completed cells
  std::string target, method, method_knobs_json, dataset;
  std::string mode;           // "closed" (fixed concurrency) | "open" (Poisson arrivals)
  int64_t concurrency = 0;    // closed: C requests in flight; open: 0
  double rate = 0;            // open: lambda, requests per second; closed: 0
  int64_t max_running = 0;    // the most sequences in one batch step (closed: = C)
  std::string schedule;       // the K policy's name: "fixed" | "by_batch" | "split"
  std::string schedule_json;  // the policy with its table, e.g. {"policy":"by_batch","k":{"1":4}}
  int64_t n_requests = 0, max_new_tokens = 0;
  double temperature = 0;
  uint64_t seed = 0;  // trace seed (prompt order, arrivals, per-request sampling seeds)
  std::string dtype, device;
  int64_t threads = 1;
  int64_t batch_invariant = 1;  // 1 = every row through the kernel batch 1 would use
  std::string config_json;      // the full resolved cell config
  std::string method_traits_json;
  double makespan_ms = 0;  // first arrival to last finish
  double wall_s = 0;       // the whole cell, warm-up included
};

// One request of a cell.
struct ServeRequestRecord {
  int64_t request_index = 0;  // position in the trace (0-based)
  std::string prompt_id;
  int64_t n_prompt_tokens = 0, n_output_tokens = 0;
  double arrival_ms = 0;      // when it arrived (queued)
  double admitted_ms = 0;     // when it joined the running batch (its prefill starts)
  double first_token_ms = 0;  // when its first token was sampled (end of its prefill)
  double finish_ms = 0;       // when its last token was emitted
  // Every emission after the first token: [[t_ms, n_tokens], ...], one entry per batch step that
  // appended tokens to this request (ITL is the gap between consecutive entries).
  std::string emits_json;
  int64_t n_steps = 0;     // batch steps it took part in after its prefill
  int64_t n_drafted = 0;   // draft nodes offered to the verifier over its steps
  int64_t n_accepted = 0;  // draft tokens accepted over its steps
  int64_t n_drafts = 0;    // steps with at least one drafted node (vLLM's num_drafts)
  std::string stop_reason;
  std::string output_hash;      // hash of the generated token ids
  std::string output_ids_json;  // "[12,7,...]"
  double t_adapt_ms = 0;        // online-adapter updates that stalled the batch while it ran
};

// One batch step of a cell: one target forward over every running sequence's rows (or, for the
// requests admitted at this boundary, their prefills).
struct ServeStepRecord {
  int64_t step_index = 0;
  double start_ms = 0;          // when the step began
  int64_t batch_size = 0;       // running sequences in the batch forward
  int64_t n_admitted = 0;       // requests admitted (and prefilled) at this boundary
  int64_t n_verify_tokens = 0;  // rows of the batch forward (sum of 1 + drafted nodes)
  int64_t n_drafted = 0, n_accepted = 0, n_emitted = 0;
  int64_t k_chosen = 0;  // the schedule's draft length (nodes per sequence) for this step
  double t_prefill_ms = 0, t_draft_ms = 0, t_verify_ms = 0, t_other_ms = 0, t_adapt_ms = 0;
};

}  // namespace specbed
