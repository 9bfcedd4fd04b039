// `specbed summary DB [--json] [--run ID] [--case ID]`: one row of metrics per case of a results
// database (reports/summary.h): decode tok/s, tau, T_D%, other%, rollback, speedup over the AR
// baseline with bootstrap 95% CIs, exact match vs. AR with the first divergence and its margin,
// per-position acceptance. A table on stdout, or with --json every number as JSON.
// Checked by: tests/cli/summary_cli_test.cpp (the binary) and tests/reports/summary_test.cpp.
#include <cstdio>
#include <memory>

#include "harness/cli/commands.h"
#include "reports/summary.h"

namespace specbed::cli {
namespace {

struct SummaryCommandOptions {
  std::string db;
  bool json = false;
  int64_t run_id = -1;
  int64_t case_id = -1;
};

void RunSummary(const SummaryCommandOptions& o) {
  SummaryOptions options;
  options.run_id = o.run_id;
  options.case_id = o.case_id;
  const Summary summary = BuildSummary(o.db, options);
  const std::string text = o.json ? SummaryJson(summary) : FormatSummaryTable(summary);
  std::fwrite(text.data(), 1, text.size(), stdout);
}

}  // namespace

void AddSummaryCommand(CLI::App& app) {
  auto o = std::make_shared<SummaryCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "summary", "Results database -> one row of metrics per case (speedup with 95% CIs vs. AR)");
  cmd->add_option("db", o->db, "Results database (written by specbed run)")->required();
  cmd->add_flag("--json", o->json, "Print every number as JSON instead of the table");
  cmd->add_option("--run", o->run_id, "Only the cases of this run id")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--case", o->case_id, "Only this case id")->check(CLI::NonNegativeNumber);
  cmd->callback([o] { RunSummary(*o); });
}

}  // namespace specbed::cli
