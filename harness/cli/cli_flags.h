// Flags that several `specbed` subcommands share beyond base/cli_options.h (output, target,
// threads, quiet, --partial-every) and methods/common/train/train_flags.h (the trainers' flags and
// messages): the results-database argument and, for the commands that compute speedups (summary,
// report, export, compare), the AR-baseline flags; the warning before a large target runs on the
// CPU (run, sweep, generate, bench); --knob KEY=VALUE pairs (generate, run, sweep). Checked by:
// tests/cli/summary_cli_test.cpp, tests/cli/compare_cli_test.cpp, tests/cli/sweep_cli_test.cpp (the
// warning).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/cli_options.h"
#include "methods/common/train/train_flags.h"

namespace specbed::cli {

// The positional DB "Results database (written by specbed run)", required (summary, export).
void AddResultsDbArg(CLI::App* cmd, std::string& db);

// --cross-machine-baseline (off by default) and --scope (decode, e2e or end_to_end; default
// decode) of a command that compares with AR; `what` names its figure in --scope's help
// ("Speedups", "Speed").
void AddBaselineFlags(CLI::App* cmd, bool& cross_machine, std::string& scope,
                      const std::string& what);

// Targets above this many parameters warn before they run on the CPU (README "On a GPU machine").
inline constexpr int64_t kCpuWarnParameters = 1'000'000'000;
// Prints "specbed COMMAND: warning: target T has N B parameters and would run on the CPU ..." to
// stderr when `device` is "cpu" and the target's config (read without loading weights) holds
// more than kCpuWarnParameters; registry names (all small) and unreadable targets are skipped.
void WarnLargeTargetOnCpu(const std::string& command, const std::string& target,
                          const std::string& device);

// --knob KEY=VALUE pairs in order: VALUE parsed as JSON when it is one (numbers, true, lists),
// else kept as a string (a head directory, "auto"); a pair without "=" fails naming `command`.
std::vector<std::pair<std::string, nlohmann::json>> KnobPairsFromFlags(
    const std::vector<std::string>& pairs, const std::string& command);

}  // namespace specbed::cli
