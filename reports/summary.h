// `specbed summary DB`: one row of metrics per case of a results database, as a terminal table or
// as JSON with every number: method and knobs, target, dataset, T, answers, decode tok/s, tau,
// T_D%, other%, rollback, mean drafted nodes per step, the timing mode (paired / per-case),
// speedup over AR (geometric mean over answers of method tok/s / AR tok/s, the ratio of total
// throughputs and Spec-Bench's ratio of mean per-question speeds, each with a bootstrap 95% CI
// over prompts; from the paired AR runs when recorded; decode only or end to end),
// exact match vs. AR (rate, first divergence position, the target's top-2 logit margin there) and
// per-position acceptance r_i / alpha_i; then the database's `specbed serve` cells (their table
// and each method's crossover concurrency C*). The AR baseline of a case is an "ar" case with the
// same workload in the same run, else in any run of the database (a note says so). Metric
// definitions: metrics/metrics.h, reports/README.md. Checked by: tests/reports/summary_test.cpp
// (library) and tests/cli/summary_cli_test.cpp (CLI).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "metrics/metrics.h"
#include "metrics/serve_metrics.h"
#include "results/store.h"

namespace specbed {

struct SummaryOptions {
  int64_t run_id = -1;   // only cases of this run (-1 = all); baselines may come from any run
  int64_t case_id = -1;  // only this case (-1 = all)
  // Sample selection, applied to every case and its AR baseline alike: only samples of this
  // category ("" = all), then only the [slice_begin, slice_end) of those in stream order (the
  // order the case ran its prompts; slice_end -1 = to the end). Steps follow their samples.
  // Used to measure a stream window, e.g. before/after a distribution shift (OSD).
  std::string category;
  int64_t slice_begin = 0;
  int64_t slice_end = -1;
  BootstrapOptions bootstrap;
  SpeedupScope scope = SpeedupScope::kDecode;  // decode only, or prefill + decode (end to end)
  BaselinePolicy baseline;                     // AR baselines from another machine only when asked
};

struct SummaryRow {
  ResultsStore::CaseRow row;
  CaseMetrics metrics;
  bool is_baseline = false;       // an AR case (method "ar"): the baseline itself
  int64_t baseline_case_id = -1;  // the matching AR case, -1 = none / is_baseline
  int64_t baseline_run_id = -1;
  bool baseline_same_run = false;
  bool baseline_same_machine = false;
  Speedup speedup;         // empty (NaN) without a baseline
  ExactMatch exact_match;  // empty (NaN) without a baseline
};

struct Summary {
  std::string db_path;
  int schema_version = 0;
  std::vector<int64_t> run_ids;    // every run of the database
  std::vector<SummaryRow> rows;    // selected cases, in case_id order
  std::vector<std::string> notes;  // baselines from another run, cases without a baseline
  // The targets' cost regime, shown beside every speedup table: which targets are cost twins
  // (models/twin) and AR's fraction of the memory roofline per AR case (from the target_info /
  // machine the runner records in cases.config_json; empty for older databases).
  std::vector<std::string> cost_notes;
  // The database's `specbed serve` cells (of --run when given; none with --case), shown under the
  // cases (ServeResultsText / ServeResultsJson, reports/serve_report.h).
  std::vector<ServeCellData> serve_cells;
  BootstrapOptions bootstrap;
  SpeedupScope scope = SpeedupScope::kDecode;
};

// Reads the database (read-only; older schema versions are read as they are) and computes every
// row. Fails (specbed::Error naming the path) for a missing or non-SpecBed database, and for a
// --run / --case id that is not in it (listing the ids that are).
Summary BuildSummary(const std::string& db_path, const SummaryOptions& options = {});

// One case for CostRegimeNotes: its record (config_json "target_info" / "machine", written by the
// runner) and its decode throughput.
// The engine's per-step counters of a case that counted its launches (SPECBED_COUNT_OPS=on) or
// ran off the CPU (schema v12 steps; "" otherwise: older rows, AR, a CPU case without op counts):
// "<label>: per verify step N launching calls, R captured-step replays, a host-to-device and b
// device-to-host copies; device time F of the steps' wall time."
std::string EngineNote(const std::string& label, const CaseRecord& record, const CaseMetrics& m);

struct CostCase {
  int64_t case_id = 0;
  const CaseRecord* record = nullptr;
  double decode_tokens_per_s = 0;
};
// Targets whose per-token weights are below this many bytes fit in a CPU's caches (or a GPU's
// L2): decoding them is not memory-bound and speculation cannot pay (CostRegimeNotes warns).
inline constexpr double kCacheResidentWeightBytes = 32e6;

// "X is the cost twin of Y: ..." once per twin target, a WARNING once per target whose weights
// are under kCacheResidentWeightBytes, and per AR case its decode throughput as a
// fraction of the memory roofline (weight bytes per token x tok/s / measured bandwidth); per case
// whose timed prompts captured CUDA graphs (config_json.engine.graphs_timed), how many and how
// long. Cases without the recorded fields (older databases) give no notes.
std::vector<std::string> CostRegimeNotes(const std::vector<CostCase>& cases);

// Method knobs in short form: {"k":4,"tree":"static"} -> "k=4,tree=static"; "" for none.
std::string KnobsShort(const std::string& knobs_json);

// The definitions of the speedup columns (speedup, Σ ratio, Spec-Bench) in `scope`, as legend
// text ending with a newline; summary and report print it under every speedup table.
std::string SpeedupLegend(SpeedupScope scope);

// Speedup intervals rest on at least this many prompts (the bootstrap units); below it the
// summary and the report print "(n<5)" instead of an interval.
inline constexpr int64_t kMinPromptsForInterval = 5;

// "1.23 [1.10, 1.35]", "1.23 (n<5)" when n_prompts is 1..4, "1.23" without an interval, "—".
std::string SpeedupWithInterval(double v, const Interval& ci, int64_t n_prompts);

// What the terminal table shows (`specbed summary --wide / --columns / --sort`).
struct SummaryTableOptions {
  // false: the compact table (~120 columns): case, short label (method + the knobs that differ
  // between cases, as in the report), T, n, nodes/step, τ, acc%, speedup [95% CI], T_D%, exact;
  // target / dataset / timing only when they differ (else stated once above the table).
  // true: every column with the full method + knobs label.
  bool wide = false;
  std::vector<std::string> columns;  // column keys (SummaryColumnKeys) to show, in this order
  std::string sort;                  // "KEY", "KEY:asc" or "KEY:desc"; "" = case order
};

// Every column key of the terminal table, in table order (for --columns / --sort).
std::vector<std::string> SummaryColumnKeys();

// The human-readable table (aligned columns, a legend and the notes), ending with a newline.
// Fails (specbed::Error) for an unknown column or sort key, naming the valid ones.
std::string FormatSummaryTable(const Summary& summary, const SummaryTableOptions& options = {});

// Every number of the summary as a JSON document (NaN = null), pretty-printed.
std::string SummaryJson(const Summary& summary);

}  // namespace specbed
