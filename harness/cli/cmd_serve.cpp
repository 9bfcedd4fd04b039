// `specbed serve CONFIG [-o DB] [-t TARGET] [--concurrency C,..] [--requests N] [-n N] [--dry-run]`
// runs a serve config (harness/runner/serve.h: every method under load, closed loop at fixed
// concurrency and/or open loop at Poisson rates, continuous batching) into SQLite, resumable
// (stored cells are skipped), then prints one row per cell of the config (ServeTable: output
// tok/s, xAR on the identical trace, TTFT / TPOT / ITL / E2E, tau, acceptance) and each method's
// crossover concurrency C* with its 95% interval.
// Checked by: tests/cli/serve_cli_test.cpp.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "base/error.h"
#include "base/names.h"
#include "harness/cli/commands.h"
#include "harness/runner/environment.h"
#include "harness/runner/serve.h"
#include "methods/method_registry.h"
#include "reports/serve_report.h"
#include "results/store.h"

namespace specbed::cli {
namespace {

struct ServeOptions {
  std::string config, output, target;
  std::vector<int64_t> concurrency;
  int64_t requests = 0, max_new_tokens = 0;
  bool dry_run = false, no_progress = false;
};

// The table of the config's cells and the C* lines of its series.
void PrintResults(const std::string& db, const ServeConfig& config) {
  std::set<std::string> keys;
  for (const ServeCell& c : config.cells) keys.insert(c.Key());
  std::vector<ServeCellData> cells = LoadServeCells(db);
  cells.erase(std::remove_if(cells.begin(), cells.end(),
                             [&](const ServeCellData& d) { return !keys.count(d.cell.cell_key); }),
              cells.end());
  WriteToStdout(ServeResultsText(cells));
}

void RunServeCommand(const ServeOptions& o) {
  MethodRegistry methods;
  RegisterBuiltinMethods(methods);
  ServeOverrides overrides;
  overrides.target = o.target;
  overrides.concurrency = o.concurrency;
  overrides.n_requests = o.requests;
  overrides.max_new_tokens = o.max_new_tokens;
  ServeConfig config = LoadServeConfig(o.config, methods, overrides);
  if (!o.output.empty()) config.output = o.output;
  std::fprintf(stderr, "specbed serve: %zu cells\n", config.cells.size());
  if (o.dry_run) {
    for (const ServeCell& c : config.cells)
      std::printf("%s  %s\n", c.Key().c_str(), c.Label().c_str());
    return;
  }
  ValidateServe(config, methods);  // before the database exists: bad input leaves no file
  auto store = ResultsStore::Open(config.output);
  RunInfo info = CurrentEnvironment();
  info.repro_command = CommandLine();
  const ServeSummary s = RunServe(config, *store, info, !o.no_progress);
  store.reset();
  std::fprintf(stderr,
               "specbed serve: %lld cells (%lld run, %lld already complete) in %.1f s -> %s\n",
               static_cast<long long>(s.cells_total), static_cast<long long>(s.cells_run),
               static_cast<long long>(s.cells_skipped), s.wall_s, config.output.c_str());
  PrintResults(config.output, config);
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "Serve every method of a serve config under load (continuous batching, closed "
      "loop at fixed concurrency or Poisson arrivals) and store per-request latencies, "
      "batch steps and the crossover concurrency C* vs. AR");
  cmd->add_option("config", o->config, "Serve config (JSON; see configs/README.md)")->required();
  cmd->add_option("-o,--output", o->output, "Results database (overrides the config's \"output\")");
  cmd->add_option("-t,--target", o->target,
                  "Serve this target instead of the config's \"targets\"");
  cmd->add_option("--concurrency", o->concurrency,
                  "Closed-loop concurrencies to run instead of the config's (e.g. 1,2,4)")
      ->delimiter(',');
  cmd->add_option("--requests", o->requests, "Requests per cell (overrides \"n_requests\")")
      ->check(CLI::PositiveNumber);
  cmd->add_option("-n,--max-new-tokens", o->max_new_tokens, "Override max_new_tokens")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--dry-run", o->dry_run, "List the cells (key and label) and exit");
  cmd->add_flag("-q,--quiet", o->no_progress, "Do not show progress on stderr");
  cmd->callback([o] { RunServeCommand(*o); });
}

}  // namespace specbed::cli
