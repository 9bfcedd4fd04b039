// `specbed run CONFIG.json`: expands targets x methods x datasets x temperatures x seeds into cases
// and runs them into the SQLite results store (resumable: completed cases are skipped), then
// prints the database's summary table (specbed summary; --no-summary to skip). A sweep
// file (harness/runner/sweep.h) is accepted too: both go through RunSweepFile (cmd_sweep.cpp).
// Checked by: tests/cli/cli_test.cpp and tests/cli/sweep_cli_test.cpp.
#include "harness/cli/commands.h"

namespace specbed::cli {

void AddRunCommand(CLI::App& app) {
  auto [cmd, o] = AddSubcommand(
      &app, "run", RunSweepFile,
      "Run a config (targets x methods x datasets x temperatures x seeds) into SQLite");
  o->command = "run";
  cmd->add_option("config", o->config, "Run or sweep config file (JSON; see configs/README.md)")
      ->required();
  cmd->add_option("-o,--output", o->output, "Results database (overrides the config's \"output\")");
  cmd->add_option("--limit", o->limit, "Use only the first N prompts of every dataset")
      ->check(CLI::PositiveNumber);
  cmd->add_option("-n,--max-new-tokens", o->max_new_tokens, "Override max_new_tokens")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--dry-run", o->dry_run, "List the cases (key and label) and exit");
  cmd->add_flag("--no-summary", o->no_summary,
                "Do not print the summary table (specbed summary DB) at the end");
  OldSpellings(cmd, cmd->add_flag("-q,--quiet", o->no_progress, "Do not show progress on stderr"),
               {"--no-progress"});
}

}  // namespace specbed::cli
