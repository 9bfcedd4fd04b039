// `specbed compare`: the regression gate. Matches the cases of a baseline and a candidate results
// database and compares them:
// - τ (tokens per verify step) exactly at T = 0, where decoding is deterministic: the candidate
//   regresses when its τ is below the baseline's by more than `tau_tolerance` (default 0: any
//   loss of acceptance fails). At T > 0 τ is reported, not gated.
// - speed statistically: per prompt, a speculative case's speedup over AR in its own database
//   (ComputeSpeedup's tok/s ratio: the sample's paired AR run when recorded, else the AR case's
//   answer; an AR case's own decode tokens/s); the statistic is the ratio of the candidate's to
//   the baseline's geometric mean over the prompts both answered; its interval is a paired
//   bootstrap over prompts and repeats (resample prompts; per drawn prompt one repeat of each
//   side). The candidate regresses when the whole interval lies below 1 - speedup_threshold.
// Cases match by their resolved configuration with the repeat index removed (repeats pool), or,
// with match "workload", by method name + workload (knob values ignored; each side must then
// hold one configuration per method and workload).
// Checked by: tests/reports/compare_test.cpp and tests/cli/compare_cli_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "metrics/metrics.h"

namespace specbed {

struct CompareOptions {
  std::string match = "key";        // "key" | "workload"
  double tau_tolerance = 0.0;       // allowed τ loss at T = 0
  double speedup_threshold = 0.10;  // allowed relative slowdown beyond the interval
  bool gate_tau = true;
  bool gate_speed = true;  // speculative rows: speedup vs the database's own AR (machine-relative)
  // AR rows carry absolute decode tokens/s, which depends on the machine: gated only when asked
  // (baseline and candidate measured on the same machine).
  bool gate_absolute_speed = false;
  BootstrapOptions bootstrap;
  // Speedups (and AR tok/s) over decode only (default) or prefill + decode.
  SpeedupScope scope = SpeedupScope::kDecode;
  // AR baselines measured on another machine only when asked (`--cross-machine-baseline`).
  BaselinePolicy baseline;
};

struct CompareRow {
  std::string label;  // method(knobs) target dataset T seed, of the baseline case
  // The same of the candidate (differs in knobs with --match workload).
  std::string candidate_label;
  std::string method;        // method name
  bool ar_baseline = false;  // the AR baseline (metrics IsArBaseline): absolute tok/s, no τ
  double temperature = 0;
  int64_t n_prompts = 0;  // prompts both sides answered (speed statistic units)
  int64_t baseline_repeats = 0, candidate_repeats = 0;
  double tau_baseline = kNoValue, tau_candidate = kNoValue;  // NaN for AR
  // Speculative: speedup vs own AR (geometric mean over prompts); AR: decode tokens/s.
  double speed_baseline = kNoValue, speed_candidate = kNoValue;
  double speed_ratio = kNoValue;  // candidate / baseline
  Interval speed_ratio_ci;
  bool tau_regressed = false;
  bool speed_regressed = false;
  std::string note;  // why a statistic is missing
};

struct CompareResult {
  std::string baseline_path, candidate_path;
  CompareOptions options;
  std::vector<CompareRow> rows;
  std::vector<std::string> unmatched_baseline;   // labels of baseline cases without a match
  std::vector<std::string> unmatched_candidate;  // labels of candidate cases without a match
  // Per unmatched baseline case (same order): the unmatched candidate case of the same method
  // with the fewest differing settings and those settings ("closest candidate case L differs in:
  // threads 1 → 2, knobs.k 4 → 8"; settings = the case's configuration fields, knobs.* and
  // config.* of its resolved config), or "no unmatched candidate case of method M".
  std::vector<std::string> unmatched_baseline_diffs;
  bool regressed = false;  // any row regressed, or a baseline case has no match
  bool gated = true;       // false: CompareCases without gates (a report, never a regression)
  // CompareCases only: the database, the ids of A and B, their "method(knobs)" and their
  // "target dataset T seed".
  std::string case_path;
  std::vector<int64_t> case_ids;
  std::vector<std::string> case_methods, case_workloads;
};

// Throws specbed::Error for unreadable databases, a database without cases, an unknown match mode,
// or (match "workload") two configurations of one method and workload in one database.
CompareResult CompareDatabases(const std::string& baseline_path, const std::string& candidate_path,
                               const CompareOptions& options);

// A vs B within one database: case `case_b` against case `case_a` (both speculative: the ratio of
// their per-prompt speedups over their own AR, with the paired bootstrap CI; both AR: tok/s), τ
// as above; gated only when options.gate_tau / gate_speed ask (`compare --cases A,B --gate`), and
// then AR tok/s too (one database, one machine). Fails for a case id not in the database, or one
// AR and one speculative case.
CompareResult CompareCases(const std::string& db_path, int64_t case_a, int64_t case_b,
                           const CompareOptions& options);

std::string FormatCompareTable(const CompareResult& result);
std::string CompareJson(const CompareResult& result);

}  // namespace specbed
