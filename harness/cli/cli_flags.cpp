// The flags and messages several `specbed` subcommands share (see cli_flags.h).
// Checked by: tests/cli/blockpilot_cli_test.cpp, tests/train/regen_test.cpp,
// tests/train/train_cli_test.cpp, tests/cli/ltd_cli_test.cpp.
#include "harness/cli/cli_flags.h"

#include <cstdio>
#include <variant>

#include "harness/cli/commands.h"

namespace specbed::cli {
namespace {

// A flag of AddOptimFlags: its names, the OptimConfig field it sets (default shown) and its help.
struct OptimFlag {
  const char* names;
  std::variant<int64_t*, double*, uint64_t*, int*> value;
  const char* help;
};

}  // namespace

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

void AddOptimFlags(CLI::App* cmd, OptimConfig& c, TrainLoopOptions& run) {
  const OptimFlag flags[] = {
      {"--steps", &c.steps, "Optimiser steps"},
      {"-b,--batch", &c.batch, "Sequences per step"},
      {"--lr", &c.lr, "Peak learning rate (AdamW)"},
      {"--min-lr", &c.min_lr, "Learning rate at the end of the cosine decay"},
      {"--warmup", &c.warmup, "Linear warmup steps"},
      {"--weight-decay", &c.weight_decay, "AdamW weight decay (matrices only)"},
      {"--beta1", &c.beta1, "AdamW beta1"},
      {"--beta2", &c.beta2, "AdamW beta2"},
      {"--grad-clip", &c.grad_clip, "Global gradient-norm clip (0 = off)"},
      {"--seed", &c.seed, "Seed of init and data order"},
      {"--checkpoint-every", &c.checkpoint_every, "Steps between checkpoints"},
      {"--log-every", &c.log_every, "Steps between loss rows in train_log.db"},
      {"--eval-every", &c.eval_every, "Steps between held-out evaluations (0 = only at the end)"},
      {"--threads", &c.threads, "CPU threads"},
  };
  for (const OptimFlag& f : flags) {
    std::visit(
        [&](auto* value) { cmd->add_option(f.names, *value, f.help)->capture_default_str(); },
        f.value);
  }
  cmd->add_option("--device", c.device, "Training device: cpu, cuda or cuda:N")
      ->capture_default_str();
  cmd->add_flag("--resume", run.resume, "Require an existing run in -o/--output and continue it");
  cmd->add_flag("--restart", run.restart, "Discard any run in -o/--output and start afresh");
  cmd->add_option("--stop-after", run.stop_after,
                  "Stop after this many steps (checkpointed; the schedule still uses --steps)")
      ->capture_default_str();
  AddQuietFlag(cmd, run.verbose);
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
