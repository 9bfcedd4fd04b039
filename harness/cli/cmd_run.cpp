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
  AddSweepFileFlags(cmd, o);
}

}  // namespace specbed::cli
