// The flags and messages several `specbed` subcommands share (see cli_flags.h).
// Checked by: tests/cli/blockpilot_cli_test.cpp, tests/train/regen_test.cpp,
// tests/train/train_cli_test.cpp, tests/cli/ltd_cli_test.cpp.
#include "harness/cli/cli_flags.h"

#include <cstdio>

#include "harness/cli/commands.h"

namespace specbed::cli {

void AddOutputFlag(CLI::App* cmd, std::string& out, const std::string& help) {
  OldSpellings(cmd, cmd->add_option("-o,--output", out, help)->required(), {"--out"});
}

void AddTargetFlag(CLI::App* cmd, std::string& target) {
  OldSpellings(
      cmd,
      cmd->add_option("-t,--target", target, "Target model (name or path)")->capture_default_str(),
      {"--model"});
}

void AddTargetFlags(CLI::App* cmd, std::string& target, std::string& dtype) {
  AddTargetFlag(cmd, target);
  cmd->add_option("--dtype", dtype, "Target dtype: float32, bfloat16")->capture_default_str();
}

void AddThreadsFlag(CLI::App* cmd, int& threads) {
  cmd->add_option("--threads", threads, "CPU threads")->capture_default_str();
}

void AddQuietFlag(CLI::App* cmd, bool& verbose) {
  OldSpellings(cmd,
               cmd->add_flag_callback(
                   "-q,--quiet", [&verbose] { verbose = false; }, "No progress bar"),
               {"--no-progress"});
}

void AddPartialEveryFlag(CLI::App* cmd, double& seconds) {
  cmd->add_option("--partial-every", seconds,
                  "Seconds between progress writes to OUT.partial (resume point)")
      ->capture_default_str();
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

void PrintStopped(const std::string& progress) {
  std::printf("stopped %s; rerun the same command to resume\n", progress.c_str());
}

void PrintStoppedAtStep(int64_t step, int64_t steps) {
  PrintStopped("at step " + std::to_string(step) + " of " + std::to_string(steps));
}

bool ReportIfStopped(const TrainLoopResult& loop, int64_t steps) {
  if (loop.finished) return false;
  PrintStoppedAtStep(loop.step, steps);
  return true;
}

}  // namespace specbed::cli
