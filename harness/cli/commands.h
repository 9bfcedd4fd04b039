// The `specbed` subcommands. Each Add*Command registers its options on the app and a callback
// that does the work; errors are thrown as specbed::Error and reported by main().
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/cli_options.h"

namespace specbed::cli {

// argc/argv of the process, for the reproduce command stored with every run.
void SetCommandLine(int argc, char** argv);
std::string CommandLine();

// Writes `text` to stdout as it is (a table, JSON, a script).
inline void WriteToStdout(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
}

void AddGenerateCommand(CLI::App& app);
void AddRunCommand(CLI::App& app);
void AddTokenizeCommand(CLI::App& app);
void AddListCommand(CLI::App& app);
void AddBenchCommand(CLI::App& app);
void AddReportCommand(CLI::App& app);
void AddSummaryCommand(CLI::App& app);
void AddExportCommand(CLI::App& app);
void AddTrainCommand(CLI::App& app);
void AddRegenCommand(CLI::App& app);
void AddSweepCommand(CLI::App& app);
void AddMergeCommand(CLI::App& app);
void AddSlurmCommand(CLI::App& app);
void AddCompareCommand(CLI::App& app);
void AddServeCommand(CLI::App& app);
void AddBlockpilotCommand(CLI::App& app);
void AddTwinCommand(CLI::App& app);
// `specbed ltd-adaptation` (cmd_ltd.cpp).
void AddLtdCommand(CLI::App& app);

// `specbed run` and `specbed sweep` (cmd_sweep.cpp): load a run/sweep file, expand, shard, run.
struct SweepFileOptions {
  std::string command = "run";            // names the command in messages
  std::string config, output, shard;      // shard "I/N" ("" = all cases)
  std::string device, dtype;              // "" = as in the config
  std::string target;                     // -t/--target: replaces the config's targets
  std::vector<std::string> knobs;         // --knob KEY=VALUE: set in every method that has KEY
  int64_t limit = 0, max_new_tokens = 0;  // 0 = as in the config
  bool dry_run = false, no_progress = false;
  bool no_summary = false;  // skip the summary table printed at the end
};
void RunSweepFile(const SweepFileOptions& options);
// The flags `run` and `sweep` share (config, --output, -t/--target, --knob, --device, --dtype,
// --limit,
// --max-new-tokens, --dry-run, --no-summary, --quiet).
void AddSweepFileFlags(CLI::App* cmd, SweepFileOptions* o);

// Exit status of `specbed compare` when the candidate regresses (1 = error, 0 = no regression).
inline constexpr int kRegressionExitCode = 3;

}  // namespace specbed::cli
