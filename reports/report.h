// `specbed report DB -o DIR`: turns a SpecBed results database into a report directory with
// report.md, index.html and tables.tex: run provenance, tables in the papers' layout (per
// (target, temperature): one row per method configuration, Spd and τ per benchmark, their means,
// T_D% and rollback%), a "paper vs measured" table when reference numbers are given, detailed
// per-case tables per (target, dataset) (speedup bootstrap CIs, time shares, exact match vs. AR),
// the bench table, and gnuplot figures (DIR/*.png + DIR/*.svg, script kept as DIR/plots.gp).
// Cases flagged "synthetic_acceptance" are marked on their rows and by a banner.
// Metric definitions: metrics/metrics.h and reports/README.md.
// Checked by: tests/reports/report_test.cpp (synthetic databases with AR and a fake speculative
// method, with and without gnuplot), tests/reports/paper_report_test.cpp (paper-layout tables,
// LaTeX, figures, paper vs measured, synthetic banner, headless-browser rendering),
// tests/reports/headline_test.cpp (short labels, headline tables, below-1x notes, section order),
// tests/reports/report_reading_test.cpp (ties, paired tok/s, setup line, notes, plots at 19
// methods).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "metrics/metrics.h"
#include "reports/paper_reference.h"
#include "results/store.h"

namespace specbed {

struct ReportOptions {
  // gnuplot program (a path or a name looked up on PATH). "" = $SPECBED_GNUPLOT when set, else
  // "gnuplot". When it cannot be found or fails, the report is written without plots and a
  // warning naming the program goes to stderr.
  std::string gnuplot;
  bool print_warnings = true;  // also print every warning to stderr as "specbed report: warning:"
  // Paper reference files (`--paper PATH`, format: reports/paper_reference.h). Files named by
  // "paper": {"reference": PATH} in a run's or case's config_json are added to these.
  std::vector<std::string> paper_references;
  // Speedups over decode only (default) or prefill + decode (`--scope e2e`).
  SpeedupScope scope = SpeedupScope::kDecode;
  // Answers per window of the adaptation-over-the-stream tables (`--window`, BuildStreamTables);
  // 8 = the SpecBlock paper's measurement interval.
  int64_t stream_window = 8;
  // AR baselines measured on another machine only when asked (`--cross-machine-baseline`).
  BaselinePolicy baseline;
};

// A table ready for rendering. Columns whose value is the same in every row can be moved out
// (llama-bench style) and are stated once above the table.
struct ReportTable {
  struct Column {
    Column(std::string header_text = "", bool align_right = false, bool can_hide = false,
           std::string group_name = "")
        : header(std::move(header_text)),
          right_align(align_right),
          hideable(can_hide),
          group(std::move(group_name)) {}
    std::string header;
    bool right_align = false;
    bool hideable = false;  // may be hidden when constant (configuration / no-data columns)
    // Spanning header over consecutive columns with the same group (e.g. the benchmark above its
    // "Spd" and "τ" columns); "" = none. Markdown writes "group header" instead.
    std::string group;
    // Cells are ", "-separated tokens (knobs: "drafter=x, k=4") that HTML keeps whole: a line
    // breaks only between tokens, so the column is at least as wide as its longest token.
    bool whole_tokens = false;
  };
  std::vector<Column> columns;
  std::vector<std::vector<std::string>> rows;  // rows[i][column]
  // Hover text per cell (HTML title, e.g. a case's full knobs beside the short ones shown),
  // parallel to rows; empty = none. Markdown and LaTeX show the cell text only.
  std::vector<std::vector<std::string>> titles;
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
  std::vector<StepRecord> steps;
  bool is_ar = false;                     // method == "ar" (the baseline; speedup 1.00)
  int64_t baseline_case_id = -1;          // matching AR case (FindArBaseline), -1 = none / is_ar
  bool baseline_same_run = false;         // the baseline comes from the case's own run
  bool baseline_same_machine = false;     // ... or from another run on the same machine
  std::string baseline_machine;           // CaseRow::machine of the baseline's run
  int64_t refused_baseline_case_id = -1;  // an AR case on another machine, not used (policy)
  Speedup speedup;         // NaN fields when there is no baseline (with bootstrap CIs)
  ExactMatch exact_match;  // outputs vs. the baseline's; empty without a baseline
  // Short human label (ShortCaseLabels over every case of the report, e.g. "eagle3 d7 k10 n60"),
  // used by the headline and stream tables and every plot.
  std::string label;
  // Plot style: one colour per method (index into the report's sorted methods) and one marker
  // per setting of that method (index of its label among the method's labels, report order).
  int method_index = 0;
  int setting_index = 0;
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
  std::vector<BenchVerifyRecord> verify_curve;  // `specbed bench --verify-widths` rows (any run)
  SpeedupScope scope = SpeedupScope::kDecode;   // of every speedup in it
};

// Reads everything the report needs. Fails (specbed::Error naming the path) when `db_path` is
// missing or not a SpecBed results database; the database is opened read-only. Speedups are
// computed in `scope`, against AR baselines `policy` allows (FindArBaseline).
ReportData LoadReportData(const std::string& db_path, SpeedupScope scope = SpeedupScope::kDecode,
                          const BaselinePolicy& policy = {});

// Short human labels for cases, one per entry of `cases` (same order): the method, then every
// method knob whose value differs among the given cases of that method, abbreviated ("depth" d,
// "top_k" k, "total_tokens" n, "budget" b, "block_size" bs, "gamma" g, "width" w; other keys by
// the initials of their words, osd_lr -> ol) and written with its value ("d7"; a boolean as
// "name" / "no-name"; a string as "abbrev=file name" of a path; a case without the knob shows
// nothing for it: the method's default), then every other configuration field
// that differs among the given cases (threads "t4", dtype, batch "batch4", seed, top_p, top_k,
// max new, limit, categories, device). Temperature, target and dataset are not part of a label
// (tables and plots show them). Two cases with the same label and the same target, dataset and
// temperature get " #case_id" appended.
std::vector<std::string> ShortCaseLabels(const std::vector<const ResultsStore::CaseRow*>& cases);

// Per case, its knobs whose value differs among the cases of its method ("k=4, tree=static"; the
// shortened knobs of the details table, full strings on hover); when none differs, all of them
// if that is short (<= 24 characters), else "…"; "none" when the method has no knobs.
std::vector<std::string> DifferingKnobs(const std::vector<const ResultsStore::CaseRow*>& cases);

// The headline of the report: per (target, temperature) one row per speculative case (dataset
// shown when the target has several) with its label (the knobs that differ), its budget
// (nodes/step: mean drafted nodes per verify step), τ, acceptance rate, speedup [95% CI], T_D%
// and exact match (T = 0 only), ordered by speedup (best first); AR cases are the baseline and
// have no row.
struct HeadlineTable {
  std::string target;
  double temperature = 0;
  std::string title;  // "target · T=0"
  ReportTable table;
  std::vector<const CaseReport*> cases;  // one per row
  // Sentences explaining speedups below 1 (the cost regime): per such case the measured step time
  // in AR-token times and, when the database has a verify-width curve for the target, the cost of
  // verifying the case's tokens per step relative to one token.
  std::vector<std::string> slow_notes;
  // Said once above those notes: why a step can cost more than the tokens it saves (and, when the
  // database has no verify-width curve of the target, how to measure one). "" without notes.
  std::string slow_explanation;
  // Notes on the table's cases (CaseNotes): adaptation that never ran, another target's asset.
  std::vector<std::string> case_notes;
};
std::vector<HeadlineTable> BuildHeadlineTables(const ReportData& data);

// A case against the leader of its headline table (the best speedup among the table's cases of
// the same dataset): `ratio` = the geometric mean, over the answers both gave (matched by prompt
// and turn), of the case's per-answer speedup ÷ the leader's (the paired B/A ratio of `specbed
// compare --cases`), `ci` its percentile bootstrap interval over the shared prompts (NaN under
// kMinPromptsForInterval prompts or without resamples). The case is tied with the leader when
// the interval holds 1; under kMinPromptsForInterval shared prompts a tie is not decided.
struct LeaderComparison {
  double ratio = kNoValue;
  Interval ci;
  int64_t n_prompts = 0;  // prompts both answered
  bool decided() const { return std::isfinite(ci.lo) && std::isfinite(ci.hi); }
  bool tied() const { return decided() && ci.lo <= 1.0 && 1.0 <= ci.hi; }
};
LeaderComparison CompareWithLeader(const Speedup& leader, const Speedup& other,
                                   const BootstrapOptions& bootstrap = {});

// Decode tok/s over the answers a speedup is paired with (ratio of totals, in its scope): the
// method's and their AR side's (the paired AR runs, or the AR case's same prompts). Their
// quotient is the ratio of aggregate throughputs (speedup Σ), not the geometric-mean speedup.
struct PairedSpeeds {
  double method = kNoValue, ar = kNoValue;
};
PairedSpeeds PairedTokensPerS(const Speedup& s);

// The report's setup line: target (and what a cost twin copies), device, dtype, threads,
// prompts × new tokens, temperatures, and where each method's knobs are (with "CPU-sized
// settings" when every case ran on the CPU); "" without cases.
std::string SetupLine(const ReportData& data);
// One row per speculative method configuration (short label): its knobs as run and its cases.
ReportTable MethodSettingsTable(const ReportData& data);
// Notes on a case: an online-adapting method (+osd, +bandit) none of whose steps recorded
// adaptation time, or whose every verify step drafted and accepted exactly what its static method
// (the name before "+osd" / "+bandit", same group, temperature and seed: one of `group`'s cases)
// did on the same prompts, so its adaptation never acted; a string knob of a cost-twin case that
// names the twin's original model ("stories260K-blockpilot" for stories260K-twin) instead of the
// twin.
std::vector<std::string> CaseNotes(const CaseReport& c, const ReportGroup& group);

// The per-case table of one group (constant configuration columns already hidden).
ReportTable BuildCaseTable(const ReportGroup& group);
// The bench table (constant configuration columns already hidden).
ReportTable BuildBenchTable(const std::vector<BenchRow>& bench);
// Provenance: one column per run (start, version, commit, flags, host, cpu, gpu, libraries,
// command, config).
ReportTable RunsTable(const std::vector<ReportRun>& runs);
// The conventions list of a report whose speedups are in `scope` (its first line says which).
std::vector<std::string> ConventionsFor(SpeedupScope scope);

// True when a case is flagged as using synthetic acceptance (not a real measurement): its
// config_json or method knobs carry the key "synthetic_acceptance" (at any depth) with a value
// other than false/null.
bool IsSyntheticCase(const CaseRecord& c);

// A case's decode settings as table cells: top_p, top_k, seed, max_new_tokens, dtype, threads,
// device, batch size (the case table and the paper tables' settings columns).
std::vector<std::string> DecodeSettingCells(const CaseRecord& r);
// The marker shown on such rows and in the banner.
inline constexpr const char* kSyntheticMarker = "SYNTHETIC ACCEPTANCE — not a real measurement";

// One table in the papers' layout: for one (target, temperature), one row per method
// configuration (AR excluded: it is the baseline), per benchmark the columns "Spd" (geometric-mean
// speedup vs. AR) and "τ", then "Mean Spd" / "Mean τ" (arithmetic means over the benchmarks with a
// value; "*" when some benchmark has none), "T_D%" and "rollback%" (pooled over the row's cases).
// A benchmark is a dataset, or a (dataset, category) when the dataset's answers have several
// categories. Configuration columns that are constant are hidden into `table.constants`.
struct PaperTable {
  std::string target;
  double temperature = 0;
  std::string title;  // "target · T=0"
  ReportTable table;
  std::vector<std::string> notes;  // duplicate cases, missing baselines, incomplete means
};
std::vector<PaperTable> BuildPaperTables(const ReportData& data);

// Adaptation over a prompt stream (the SpecBlock paper's adaptation tables): for each (target,
// dataset, temperature) where some case trained online (a step with t_adapt_us > 0), one row per
// window of `window` consecutive answers in the order they were run (sample order; the dataset's
// order for a run that was not resumed out of order), and per case of that (target, dataset, T)
// the window's τ (emitted tokens / verify steps), Spd (geometric mean of the answers' speedups,
// the report's scope) and "upd s" (online-update seconds charged to the window's answers). The
// "category" column names the window's categories (e.g. where a stream shifts), the last row
// covers every answer.
struct StreamTable {
  std::string title;  // "target / dataset · T=0 · windows of 8 answers"
  ReportTable table;
  std::vector<std::string> case_notes;   // "case 3: specblock+osd budget=6 ..." per column group
  std::vector<std::string> case_labels;  // the column groups' labels ("case 3 specblock+osd")
  std::vector<const CaseReport*> cases;  // the column groups' cases (their plot styles)
  std::vector<std::vector<double>> tau;  // [case][window] (NaN: no steps), for the τ plot
};
std::vector<StreamTable> BuildStreamTables(const ReportData& data, int64_t window);

// "Paper vs measured": one row per reference row: the paper's Spd/τ next to the measured ones of
// the first matching case (MatchesPaperRow, in report order), "—" when none matches.
struct PaperComparison {
  std::string heading;  // the paper, table and hardware
  std::string notes;    // the reference file's notes
  ReportTable table;
  std::vector<std::string> match_notes;  // rows with several matching cases
};
PaperComparison BuildPaperComparison(const ReportData& data, const PaperReference& ref);

// LaTeX: `s` with the special characters escaped (\ & % $ # _ { } ~ ^) and the Unicode symbols
// the report uses (τ α Σ × ± · — – ≥ ≤ →) written as LaTeX; other text unchanged.
std::string LatexEscape(const std::string& s);
// A booktabs `table` environment with one `tabular` (spanning group headers as \multicolumn +
// \cmidrule), the caption followed by the "Same in every row" constants.
std::string LatexTable(const ReportTable& table, const std::string& caption);

struct ReportResult {
  std::string index_html, report_md, tables_tex;  // paths of the written files
  std::vector<std::string> images;    // file names (relative to the report dir) embedded
  std::vector<std::string> warnings;  // e.g. gnuplot missing; also printed to stderr
};

// Writes DIR/report.md, DIR/index.html, DIR/tables.tex and the plots. Fails (naming the file) when
// a `paper_references` file is missing or invalid; a file named in a config that cannot be read is
// a warning. Creates `out_dir` (with parents) when
// missing; fails naming it when it cannot be created or written.
ReportResult WriteReport(const std::string& db_path, const std::string& out_dir,
                         const ReportOptions& options = {});

}  // namespace specbed
