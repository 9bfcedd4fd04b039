// The flags and messages several `specbed` subcommands share (see cli_flags.h).
// Checked by: tests/cli/summary_cli_test.cpp, tests/cli/compare_cli_test.cpp,
// tests/cli/sweep_cli_test.cpp (WarnLargeTargetOnCpu).
#include "harness/cli/cli_flags.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "base/error.h"
#include "harness/cli/commands.h"
#include "models/model_registry.h"

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

void WarnLargeTargetOnCpu(const std::string& command, const std::string& target,
                          const std::string& device) {
  if (device != "cpu") return;
  const std::vector<std::string> builtin = BuiltinModelNames();
  if (std::find(builtin.begin(), builtin.end(), target) != builtin.end()) return;
  int64_t parameters = -1;
  try {
    parameters = ModelParameterCount(ResolveModel(target));
  } catch (const Error&) {
    return;  // a missing checkpoint fails with its own message when it loads
  }
  if (parameters <= kCpuWarnParameters) return;
  std::fprintf(stderr,
               "specbed %s: warning: target %s has %.2f B parameters and would run on the CPU "
               "(device \"cpu\"): expect seconds to minutes per token; add --device cuda (or "
               "\"device\": \"cuda\" in a config)\n",
               command.c_str(), target.c_str(), static_cast<double>(parameters) / 1e9);
}

std::vector<std::pair<std::string, nlohmann::json>> KnobPairsFromFlags(
    const std::vector<std::string>& pairs, const std::string& command) {
  std::vector<std::pair<std::string, nlohmann::json>> knobs;
  for (const std::string& pair : pairs) {
    const size_t eq = pair.find('=');
    SPECBED_CHECK(eq != std::string::npos && eq > 0, command,
                  " --knob expects KEY=VALUE (e.g. --knob depth=7), got '", pair, "'");
    const std::string value = pair.substr(eq + 1);
    const nlohmann::json parsed = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    knobs.emplace_back(pair.substr(0, eq), parsed.is_discarded() ? nlohmann::json(value) : parsed);
  }
  return knobs;
}

}  // namespace specbed::cli
