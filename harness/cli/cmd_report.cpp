// `specbed report DB [-o DIR] [--paper REF.json]`: writes DIR/report.md, DIR/index.html,
// DIR/tables.tex and gnuplot plots for a results database (reports/report.h) and prints the path
// of index.html. Warnings (e.g. gnuplot missing) go to stderr; the report is still written.
// Checked by: tests/reports/report_test.cpp (the report generation behind this command).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "harness/cli/cli_flags.h"
#include "harness/cli/commands.h"
#include "reports/report.h"

namespace specbed::cli {
namespace {

struct ReportCommandOptions {
  std::string db;
  std::string output;
  std::string gnuplot;
  std::vector<std::string> paper;
  std::string scope = "decode";
  bool cross_machine_baseline = false;
  int64_t window = 8;
};

// "results/run.db" -> "results/run_report".
std::string DefaultReportDir(const std::string& db) {
  std::string stem = db;
  const size_t slash = stem.find_last_of('/');
  const size_t dot = stem.find_last_of('.');
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash + 1)) {
    stem = stem.substr(0, dot);
  }
  return stem + "_report";
}

void RunReport(const ReportCommandOptions& o) {
  ReportOptions options;
  options.gnuplot = o.gnuplot;
  options.paper_references = o.paper;
  options.scope = ParseSpeedupScope(o.scope, "--scope");
  options.baseline.cross_machine = o.cross_machine_baseline;
  options.stream_window = o.window;
  const std::string dir = o.output.empty() ? DefaultReportDir(o.db) : o.output;
  const ReportResult result = WriteReport(o.db, dir, options);
  std::fprintf(stderr, "specbed report: %zu plots, %zu warnings\n", result.images.size(),
               result.warnings.size());
  std::printf("%s\n", result.index_html.c_str());
}

}  // namespace

void AddReportCommand(CLI::App& app) {
  auto [cmd, o] =
      AddSubcommand(&app, "report", RunReport,
                    "Results database -> report directory (report.md, index.html, plots)");
  cmd->add_option("db", o->db, "Results database (written by specbed run/bench)")->required();
  cmd->add_option("-o,--output", o->output,
                  "Report directory, created if missing (default: DB without extension + _report)");
  cmd->add_option("--gnuplot", o->gnuplot,
                  "gnuplot program (default: $SPECBED_GNUPLOT, else gnuplot on PATH)");
  cmd->add_option("--paper", o->paper,
                  "Paper reference JSON (reports/README.md); adds a paper-vs-measured table "
                  "(repeatable)");
  AddBaselineFlags(cmd, o->cross_machine_baseline, o->scope, "Speedups");
  cmd->add_option("--window", o->window,
                  "Answers per window of the adaptation-over-the-stream tables (cases that "
                  "trained online; default 8, the SpecBlock paper's interval)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
}

}  // namespace specbed::cli
