// `specbed report DB -o DIR`: turns a SpecBed results database into a report directory with
// report.md and index.html (run provenance, one table per (target, dataset) with one row per
// case, with speedup bootstrap CIs, time shares and exact match vs. AR, the bench table) and
// gnuplot plots (DIR/*.png + DIR/*.svg, script kept as DIR/plots.gp).
// Metric definitions: metrics/metrics.h and reports/README.md.
// Checked by: tests/reports/report_test.cpp (synthetic databases with AR and a fake speculative
// method, with and without gnuplot).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "metrics/metrics.h"
#include "results/store.h"

namespace specbed {

struct ReportOptions {
  // gnuplot program (a path or a name looked up on PATH). "" = $SPECBED_GNUPLOT when set, else
  // "gnuplot". When it cannot be found or fails, the report is written without plots and a
  // warning naming the program goes to stderr.
  std::string gnuplot;
  bool print_warnings = true;  // also print every warning to stderr as "specbed report: warning:"
};

// A table ready for rendering. Columns whose value is the same in every row can be moved out
// (llama-bench style) and are stated once above the table.
struct ReportTable {
  struct Column {
    std::string header;
    bool right_align = false;
    bool hideable = false;  // may be hidden when constant (configuration / no-data columns)
  };
  std::vector<Column> columns;
  std::vector<std::vector<std::string>> rows;                  // rows[i][column]
  std::vector<std::pair<std::string, std::string>> constants;  // hidden column -> its value
};

// Moves every hideable column whose cells are all equal into `constants` (tables with at least
// one row). Other columns stay, in order.
ReportTable HideConstantColumns(ReportTable table);

// One case with its metrics and, for non-AR methods, its speedup over the matching AR case.
struct CaseReport {
  ResultsStore::CaseRow row;
  CaseMetrics metrics;
  std::vector<SampleRecord> samples;
  bool is_ar = false;              // method == "ar" (the baseline; speedup 1.00)
  int64_t baseline_case_id = -1;   // matching AR case (FindArBaseline), -1 = none / is_ar
  bool baseline_same_run = false;  // the baseline comes from the case's own run
  Speedup speedup;                 // NaN fields when there is no baseline (with bootstrap CIs)
  ExactMatch exact_match;          // outputs vs. the baseline's; empty without a baseline
};

struct ReportGroup {
  std::string target, dataset;
  std::vector<CaseReport> cases;  // ordered by temperature, AR first, method, knobs, case_id
  bool has_steps() const;         // some case has steps rows (a speculative method)
};

using ReportRun = ResultsStore::RunRow;

struct BenchRow {
  int64_t run_id = 0;
  BenchRecord record;
};

struct ReportData {
  std::string db_path;
  std::vector<ReportRun> runs;
  std::vector<ReportGroup> groups;  // one per (target, dataset), in order of first appearance
  std::vector<BenchRow> bench;
};

// Reads everything the report needs. Fails (specbed::Error naming the path) when `db_path` is
// missing or not a SpecBed results database; the database is opened read-only.
ReportData LoadReportData(const std::string& db_path);

// The per-case table of one group (constant configuration columns already hidden).
ReportTable BuildCaseTable(const ReportGroup& group);
// The bench table (constant configuration columns already hidden).
ReportTable BuildBenchTable(const std::vector<BenchRow>& bench);

struct ReportResult {
  std::string index_html, report_md;  // paths of the written files
  std::vector<std::string> images;    // file names (relative to the report dir) embedded
  std::vector<std::string> warnings;  // e.g. gnuplot missing; also printed to stderr
};

// Writes DIR/report.md, DIR/index.html and the plots. Creates `out_dir` (with parents) when
// missing; fails naming it when it cannot be created or written.
ReportResult WriteReport(const std::string& db_path, const std::string& out_dir,
                         const ReportOptions& options = {});

}  // namespace specbed
