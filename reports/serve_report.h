// `specbed serve`'s results in reports: the cells of a results database grouped by workload, one
// series per method configuration (method, knobs, draft-length schedule) with its crossover
// concurrency C* against AR on the identical trace (metrics/serve_metrics.h), the tables of the
// report's "Serving under load" section (C* per method with its CI and the per-C ratios; one row
// per cell with its schedule) and ServeTable, the plain-text table `specbed serve` prints at the
// end of a run. The section's plots are in reports/plots.h (BuildServePlots).
// Checked by: tests/reports/serve_report_test.cpp (groups, series, C* table, cell table, the
// plain-text table and its JSON, the report section and its plots, a database without serve
// cells).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "metrics/serve_metrics.h"
#include "reports/report.h"

namespace specbed {

// Whether a serve cell is the AR baseline: its stored traits say it does not speculate, or (no
// traits) its method is kArMethod, as IsArBaseline for cases.
bool IsServeArBaseline(const ServeCellRecord& cell);

// One method configuration of a group: its closed-loop cells and, unless it is AR, its C*.
struct ServeSeries {
  std::string label;  // "eagle3 depth=4 · by_batch" (schedule shown unless "fixed")
  bool is_ar = false;
  int style_index = 0;        // colour and marker in the plots (MethodColor / MethodMarker)
  std::vector<size_t> cells;  // indices into ServeGroup::cells, closed loop, ascending C
  CrossoverResult crossover;  // none for AR; NaN c_star without AR cells at its C and seeds
};

// The cells of one workload: target, dataset, temperature, max_new_tokens, n_requests, dtype,
// device, threads and batch_invariant equal.
struct ServeGroup {
  std::string title;  // "tiny / stories · T=0 · 48 requests × 16 new tokens · cpu float32 t1"
  // Ordered: AR first, then by series label, mode (closed first), concurrency / rate, seed.
  std::vector<ServeCellData> cells;
  std::vector<ServeMetrics> metrics;  // parallel to cells
  std::vector<std::string> labels;    // parallel to cells: the series label
  // Parallel to cells: output_throughput / that of the AR cell of the same group, mode,
  // concurrency, rate and seed (1 for AR; NaN without one).
  std::vector<double> x_ar;
  std::vector<ServeSeries> series;  // AR first
  std::vector<std::string> notes;   // cells without an AR partner
};

// Groups `cells` (any order) and computes every cell's metrics and every series' crossover.
std::vector<ServeGroup> BuildServeGroups(std::vector<ServeCellData> cells,
                                         const CrossoverOptions& options = {},
                                         const ServeSlo& slo = {});
// The serve cells of a results database (opened read-only) with their requests and steps, those
// of run `run_id` (-1 = every run), in cell order; none before schema v14.
std::vector<ServeCellData> LoadServeCells(const std::string& db_path, int64_t run_id = -1);
// LoadServeCells, grouped.
std::vector<ServeGroup> LoadServeGroups(const std::string& db_path,
                                        const CrossoverOptions& options = {});

// What `specbed serve` prints after a run and `specbed summary` under its cases: ServeTable of
// `cells`, then per speculative series its C* with the 95% CI ("C* sps gamma=3: 4 [95% CI 4,
// 8]"); "" without cells.
std::string ServeResultsText(const std::vector<ServeCellData>& cells);
// The same as JSON (`specbed summary --json`'s "serve", `specbed export --table serve`): per
// workload its title, its cells (every stored cell field, then "series", "x_ar" and the metrics:
// throughputs, TTFT / TPOT / ITL / E2E p50 / p95 / p99 ms, goodput, τ, acceptance, batch; NaN =
// null) and its series' C* ({"series", "metric", "c_star", "c_star_ci": [lo, hi]}; +inf = the
// string "inf": never crossed up to the largest tested C).
nlohmann::ordered_json ServeResultsJson(const std::vector<ServeCellData>& cells);

// "4", "> 16" (never crossed up to the largest tested C = 16), "—" (no AR partner).
std::string FormatCStar(double c_star, int64_t max_concurrency);

// One row per speculative series: method, schedule, C* [95% CI], then per tested concurrency
// the ratio to AR with its interval ("1.52 [1.47–1.58]", "≤" marks a crossed one).
ReportTable ServeCrossoverTable(const ServeGroup& group);
// One row per cell: method, schedule, load (C or λ), seed, output tok/s, ×AR, TTFT p50, TPOT
// p50 / p99, ITL p50, E2E p99, τ, acc%, the schedule's table (schedule_json).
ReportTable ServeCellTable(const ServeGroup& group);

// The plain-text table `specbed serve` prints after a run: one row per cell with method,
// schedule, C (or λ), output tok/s, ×AR (vs. the AR cell of the same load point and seed among
// `cells`), TTFT p50, TPOT p50 and p99, ITL p50, E2E p99 (ms), τ and acc%; columns aligned,
// numbers right-aligned, "—" for no value.
std::string ServeTable(const std::vector<ServeCellData>& cells, const ServeSlo& slo = {});

// How to read the section (C*, the AR baseline, the CPU caveat).
extern const char* const kServeReading;

}  // namespace specbed
