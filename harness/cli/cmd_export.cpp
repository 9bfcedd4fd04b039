// `specbed export DB [--format csv|json] [--table cases|positions|samples|steps|serve] [-o FILE]
// [--run ID] [--scope decode|e2e]`: a results database as CSV or JSON (reports/export.h); stdout
// unless -o names a file (its folder is created). Checked by: tests/cli/summary_cli_test.cpp (the
// binary vs. `summary --json`) and tests/reports/export_test.cpp.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "base/error.h"
#include "harness/cli/cli_flags.h"
#include "harness/cli/commands.h"
#include "reports/export.h"

namespace specbed::cli {
namespace {

struct ExportCommandOptions {
  std::string db, format = "csv", table = "cases", output, scope = "decode";
  int64_t run_id = -1;
  bool cross_machine_baseline = false;
};

void RunExport(const ExportCommandOptions& o) {
  const ExportFormat format = ParseExportFormat(o.format, "--format");
  const ExportTable table = ParseExportTable(o.table, "--table");
  SummaryOptions options;
  options.run_id = o.run_id;
  options.scope = ParseSpeedupScope(o.scope, "--scope");
  options.baseline.cross_machine = o.cross_machine_baseline;
  const Summary summary = BuildSummary(o.db, options);
  const std::string text = ExportResults(summary, table, format);
  if (o.output.empty() || o.output == "-") {
    WriteToStdout(text);
    return;
  }
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(o.output).parent_path();
  std::error_code ec;
  if (!parent.empty()) {
    fs::create_directories(parent, ec);
    SPECBED_CHECK(!ec, "export: cannot create the folder of -o '", o.output, "': ", ec.message());
  }
  std::ofstream out(o.output, std::ios::binary | std::ios::trunc);
  SPECBED_CHECK(out.good(), "export: cannot write -o '", o.output, "'");
  out << text;
  out.close();
  SPECBED_CHECK(out.good(), "export: writing '", o.output, "' failed (disk full?)");
  std::fprintf(stderr, "specbed export: %s\n", o.output.c_str());
}

}  // namespace

void AddExportCommand(CLI::App& app) {
  auto [cmd, o] = AddSubcommand(&app, "export", RunExport,
                                "Results database -> CSV or JSON (cases with every summary metric "
                                "and CI, per-position acceptance, samples, steps, serve cells)");
  AddResultsDbArg(cmd, o->db);
  cmd->add_option("--format", o->format, "csv (default) or json")
      ->check(CLI::IsMember({"csv", "json"}));
  cmd->add_option("--table", o->table,
                  "cases (default: one row per case, the numbers of `specbed summary --json`), "
                  "positions (one row per case and draft position: r, alpha, vLLM's "
                  "per-position acceptance rate), samples (one row per answer), steps (one row "
                  "per verify step) or serve (one row per `specbed serve` cell: its metrics and "
                  "its method's C*)")
      ->check(CLI::IsMember({"cases", "positions", "samples", "steps", "serve"}));
  cmd->add_option("-o,--output", o->output, "Output file (default: stdout)");
  cmd->add_option("--run", o->run_id, "Only the cases of this run id")
      ->check(CLI::NonNegativeNumber);
  AddBaselineFlags(cmd, o->cross_machine_baseline, o->scope, "Speedups");
}

}  // namespace specbed::cli
