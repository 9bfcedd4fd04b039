// The flags and messages several `specbed` subcommands share (see cli_flags.h).
// Checked by: tests/cli/summary_cli_test.cpp, tests/cli/compare_cli_test.cpp.
#include "harness/cli/cli_flags.h"

#include "harness/cli/commands.h"

namespace specbed::cli {

void AddResultsDbArg(CLI::App* cmd, std::string& db) {
  cmd->add_option("db", db, "Results database (written by specbed run)")->required();
}

void AddBaselineFlags(CLI::App* cmd, bool& cross_machine, std::string& scope,
                      const std::string& what) {
  cmd->add_flag("--cross-machine-baseline", cross_machine,
                "Also compare with an AR case measured on another machine (a run with another host "
                "/ cpu / gpu) when the case has none of its own machine; off by default, so no "
                "speedup crosses machines unless asked");
  cmd->add_option("--scope", scope,
                  what + " over decode only (decode, default) or prefill + decode (e2e)")
      ->check(CLI::IsMember({"decode", "e2e", "end_to_end"}));
}

}  // namespace specbed::cli
