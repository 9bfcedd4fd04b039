// `specbed run CONFIG.json`: expands targets x methods x datasets x temperatures x seeds into cases
// and runs them into the SQLite results store (resumable: completed cases are skipped).
#include <cstdio>

#include "harness/cli/commands.h"
#include "harness/engine/environment.h"
#include "harness/engine/runner.h"
#include "results/store.h"

namespace specbed::cli {
namespace {

struct RunOptions {
  std::string config;
  std::string output;
  int64_t limit = 0;
  int64_t max_new_tokens = 0;
  bool no_progress = false;
};

void RunRun(const RunOptions& o) {
  RunConfig config = LoadRunConfig(o.config);
  if (!o.output.empty()) config.output = o.output;
  if (o.limit > 0) {
    for (auto& d : config.datasets) d.limit = o.limit;
  }
  if (o.max_new_tokens > 0) config.max_new_tokens = o.max_new_tokens;
  auto store = ResultsStore::Open(config.output);
  RunnerOptions options;
  options.show_progress = !o.no_progress;
  options.run_info = CurrentEnvironment();
  options.run_info.repro_command = CommandLine();
  Runner runner(*store, options);
  const RunnerSummary s = runner.Run(config);
  std::fprintf(stderr,
               "specbed run: %lld cases (%lld run, %lld already complete) in %.1f s -> %s\n",
               static_cast<long long>(s.cases_total), static_cast<long long>(s.cases_run),
               static_cast<long long>(s.cases_skipped), s.wall_s, config.output.c_str());
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand(
      "run", "Run a config (targets x methods x datasets x temperatures x seeds) into SQLite");
  cmd->add_option("config", o->config, "Run config file (JSON; see configs/README.md)")->required();
  cmd->add_option("-o,--output", o->output, "Results database (overrides the config's \"output\")");
  cmd->add_option("--limit", o->limit, "Use only the first N prompts of every dataset")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "Override max_new_tokens")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--no-progress", o->no_progress, "Do not show progress on stderr");
  cmd->callback([o] { RunRun(*o); });
}

}  // namespace specbed::cli
