// `specbed summary DB [--wide] [--columns K,..] [--sort KEY[:asc|:desc]] [--json] [--run ID]
// [--case ID] [--method M,..] [--temperature T,..] [--category C] [--slice A:B]
// [--scope decode|e2e]`: one row of metrics per case of
// a results database (reports/summary.h). The default table fits ~120 columns (short labels, the
// columns read first: τ, acceptance rate, speedup with its bootstrap 95% CI, T_D%, exact match at
// T = 0); --wide shows every column (tok/s, other%, rollback, divergence and margin, per-position
// acceptance, ...). With --json every number as JSON. --method / --temperature keep the rows of
// those methods / temperatures (speedups still against every case's own AR baseline). Checked by:
// tests/cli/summary_cli_test.cpp (the binary) and tests/reports/summary_test.cpp.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <vector>

#include "base/error.h"
#include "base/names.h"
#include "harness/cli/cli_flags.h"
#include "harness/cli/commands.h"
#include "reports/format.h"
#include "reports/summary.h"

namespace specbed::cli {
namespace {

struct SummaryCommandOptions {
  std::string db;
  bool json = false;
  SummaryTableOptions table;
  int64_t run_id = -1;
  int64_t case_id = -1;
  std::string category;
  std::string slice;
  std::vector<std::string> methods;  // --method: keep only these methods' rows
  std::vector<double> temperatures;  // --temperature: keep only rows at these temperatures
  std::string scope = "decode";
  bool cross_machine_baseline = false;
};

// "A:B" (B may be empty = to the end) -> [A, B); errors name the flag.
void ParseSlice(const std::string& text, SummaryOptions& options) {
  const size_t colon = text.find(':');
  SPECBED_CHECK(colon != std::string::npos, "--slice must look like A:B (e.g. 0:40 or 40:), got '",
                text, "'");
  try {
    options.slice_begin = colon == 0 ? 0 : std::stoll(text.substr(0, colon));
    options.slice_end = colon + 1 == text.size() ? -1 : std::stoll(text.substr(colon + 1));
  } catch (const std::exception&) {
    Fail("--slice must look like A:B with non-negative integers, got '", text, "'");
  }
}

// Keeps the rows of the given methods and temperatures (none given = all); a method or
// temperature the database does not hold is an error listing those it does.
void KeepRows(const SummaryCommandOptions& o, Summary& summary) {
  std::set<std::string> methods;
  std::set<double> temperatures;
  for (const SummaryRow& r : summary.rows) {
    methods.insert(r.row.record.method);
    temperatures.insert(r.row.record.temperature);
  }
  for (const std::string& m : o.methods) {
    SPECBED_CHECK(
        methods.count(m), "summary --method ", m, ": ", o.db, " holds no case of it (its ",
        "methods: ", Join(std::vector<std::string>(methods.begin(), methods.end()), ", "), ")");
  }
  for (double t : o.temperatures) {
    std::vector<std::string> held;
    for (double h : temperatures) held.push_back(report_format::General(h));
    SPECBED_CHECK(temperatures.count(t), "summary --temperature ", report_format::General(t), ": ",
                  o.db, " holds no case at it (its temperatures: ", Join(held, ", "), ")");
  }
  const auto keep = [&](const SummaryRow& r) {
    const auto& c = r.row.record;
    return (o.methods.empty() ||
            std::find(o.methods.begin(), o.methods.end(), c.method) != o.methods.end()) &&
           (o.temperatures.empty() || std::find(o.temperatures.begin(), o.temperatures.end(),
                                                c.temperature) != o.temperatures.end());
  };
  std::vector<SummaryRow> kept;
  for (SummaryRow& r : summary.rows) {
    if (keep(r)) kept.push_back(std::move(r));
  }
  summary.rows = std::move(kept);
}

void RunSummary(const SummaryCommandOptions& o) {
  SummaryOptions options;
  options.run_id = o.run_id;
  options.case_id = o.case_id;
  options.category = o.category;
  if (!o.slice.empty()) ParseSlice(o.slice, options);
  options.scope = ParseSpeedupScope(o.scope, "--scope");
  options.baseline.cross_machine = o.cross_machine_baseline;
  Summary summary = BuildSummary(o.db, options);
  KeepRows(o, summary);
  WriteToStdout(o.json ? SummaryJson(summary) : FormatSummaryTable(summary, o.table));
}

}  // namespace

void AddSummaryCommand(CLI::App& app) {
  auto [cmd, o] = AddSubcommand(
      &app, "summary", RunSummary,
      "Results database -> one row of metrics per case (speedup with 95% CIs vs. AR)");
  AddResultsDbArg(cmd, o->db);
  cmd->add_flag("--json", o->json, "Print every number as JSON instead of the table");
  cmd->add_flag("--wide", o->table.wide,
                "Every column, with the full method knobs (default: a ~120-column table)");
  cmd->add_option("--columns", o->table.columns,
                  "Columns to show, comma-separated, in order: " + Join(SummaryColumnKeys(), ","))
      ->delimiter(',');
  cmd->add_option("--sort", o->table.sort,
                  "Order rows by a column: KEY, KEY:asc or KEY:desc (metrics default to "
                  "descending; default: case order)");
  cmd->add_option("--run", o->run_id, "Only the cases of this run id")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--case", o->case_id, "Only this case id")->check(CLI::NonNegativeNumber);
  cmd->add_option("--method", o->methods,
                  "Only these methods' rows, comma-separated (speedups still against AR)")
      ->delimiter(',');
  cmd->add_option("--temperature", o->temperatures,
                  "Only the rows at these temperatures, comma-separated (e.g. 0 or 0,1)")
      ->delimiter(',');
  cmd->add_option("--category", o->category,
                  "Only samples of this prompt category (baselines filtered alike)");
  cmd->add_option("--slice", o->slice,
                  "Only samples A..B-1 (after --category) in stream order, e.g. 0:40 or 40:");
  AddBaselineFlags(cmd, o->cross_machine_baseline, o->scope, "Speedup");
}

}  // namespace specbed::cli
