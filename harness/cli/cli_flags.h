// Flags and messages that several `specbed` subcommands share: for train, regen and blockpilot
// the output and target flags with their old spellings, -q/--quiet, --partial-every, --threads,
// the training-loop flags, the parsed flags of a trainer, the run of a trainer on the shared loop
// and the note printed when a resumable command stopped early; for the commands that compute
// speedups (summary, report, export, compare) the AR-baseline flags. Checked by:
// tests/cli/blockpilot_cli_test.cpp, tests/train/regen_test.cpp, tests/train/train_cli_test.cpp,
// tests/cli/ltd_cli_test.cpp, tests/cli/summary_cli_test.cpp, tests/cli/compare_cli_test.cpp.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "methods/common/train/train_loop.h"

namespace specbed::cli {

// A trainer subcommand's parsed flags: its config, the loop options and -o/--output.
template <class Config>
struct TrainerFlags {
  Config config;
  TrainLoopOptions run;
  std::string out;
};

// -o/--output (required, described by `help`; old spelling --out).
void AddOutputFlag(CLI::App* cmd, std::string& out, const std::string& help);
// -t/--target, "Target model (name or path)", default shown (old spelling --model).
void AddTargetFlag(CLI::App* cmd, std::string& target);
// AddTargetFlag and --dtype ("Target dtype: float32, bfloat16", default shown).
void AddTargetFlags(CLI::App* cmd, std::string& target, std::string& dtype);
// --threads, "CPU threads", default shown.
void AddThreadsFlag(CLI::App* cmd, int& threads);
// -q/--quiet, "No progress bar" (old spelling --no-progress): sets `verbose` to false.
void AddQuietFlag(CLI::App* cmd, bool& verbose);
// --partial-every: seconds between progress writes to OUT.partial (default shown).
void AddPartialEveryFlag(CLI::App* cmd, double& seconds);

// The positional DB "Results database (written by specbed run)", required (summary, export).
void AddResultsDbArg(CLI::App* cmd, std::string& db);

// --cross-machine-baseline (off by default) and --scope (decode, e2e or end_to_end; default
// decode) of a command that compares with AR; `what` names its figure in --scope's help
// ("Speedups", "Speed").
void AddBaselineFlags(CLI::App* cmd, bool& cross_machine, std::string& scope,
                      const std::string& what);

// The shared training-loop flags (--steps, --batch, --lr, ..., --threads, --resume, --restart,
// --stop-after, --quiet; methods/common/train/train_loop.h) on `cmd`.
void AddOptimFlags(CLI::App* cmd, OptimConfig& optim, TrainLoopOptions& run);

// Prints "stopped <progress>; rerun the same command to resume" to stdout.
void PrintStopped(const std::string& progress);
// PrintStopped("at step <step> of <steps>").
void PrintStoppedAtStep(int64_t step, int64_t steps);
// PrintStoppedAtStep when `loop` stopped before `steps`; returns whether it did.
bool ReportIfStopped(const TrainLoopResult& loop, int64_t steps);

// Runs train(o.config, o.out, o.run) (a trainer on the shared loop, e.g. TrainEagle3) and returns
// its result, or nothing when it stopped before --steps (ReportIfStopped has said so).
template <class Config, class Train>
auto TrainUnlessStopped(const TrainerFlags<Config>& o, Train train)
    -> std::optional<decltype(train(o.config, o.out, o.run))> {
  auto r = train(o.config, o.out, o.run);
  if (ReportIfStopped(r.loop, o.config.optim.steps)) return std::nullopt;
  return r;
}

}  // namespace specbed::cli
