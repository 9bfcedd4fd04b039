// What the `specbed train <name>` subcommands share, in the trainers' layer so that each method
// declares its own subcommand in its folder (Add<Folder>TrainCommands, methods/builtin_methods.h):
// a trainer's parsed flags, the training-loop flags, the data flags of the trainers on a
// `specbed regen` file and of those that sample from the target, the run of a trainer on the
// shared loop with the message it prints, and the note printed when a resumable command stopped
// early. Checked by: tests/train/train_cli_test.cpp (exit codes, resume, mismatch message),
// tests/cli/ltd_cli_test.cpp, tests/cli/blockpilot_cli_test.cpp, tests/train/regen_test.cpp.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/cli_options.h"
#include "methods/builtin_methods.h"
#include "methods/common/train/optimizer.h"
#include "methods/common/train/train_loop.h"

namespace specbed::cli {

// `specbed train <name>` subcommands of each trainer folder (methods/builtin_methods.h), defined
// in the folder's <name>_train_command.cpp; `train` is the `specbed train` command.
#define SPECBED_DECLARE_TRAIN_COMMANDS(Folder) void Add##Folder##TrainCommands(CLI::App* train);
SPECBED_TRAINER_FOLDERS(SPECBED_DECLARE_TRAIN_COMMANDS)
#undef SPECBED_DECLARE_TRAIN_COMMANDS

// A trainer subcommand's parsed flags: its config, the loop options and -o/--output.
template <class Config>
struct TrainerFlags {
  Config config;
  TrainLoopOptions run;
  std::string out;
};

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

// --dataset-categories (comma-separated) and --limit (-1 = all) of a training-data job's dataset
// prompts (`specbed regen`, `specbed blockpilot label`).
void AddDatasetFilterFlags(CLI::App* cmd, std::vector<std::string>& categories, int64_t& limit);

// Keeps blocks up to 32 MiB in glibc's heap, so a training step does not page-fault its
// multi-MiB activations in afresh (about a third faster); no-op elsewhere.
void KeepLargeBlocksInHeap();

// -o/--output, --data, -t/--target, --dtype of the trainers that read a `specbed regen` file
// (with their old spellings --out and --model).
void AddRegenTrainerFlags(CLI::App* cmd, std::string& out, std::string& data, std::string& target,
                          std::string& dtype);

// The regen-data flags of the head trainers that read target features (train eagle3, dflash,
// jetspec, specblock, medusa): --max-len, --n-eval, --features, --feature-dtype.
void AddRegenDataFlags(CLI::App* cmd, int64_t& max_len, int64_t& n_eval, std::string& features,
                       std::string& feature_dtype);

// The flags every head trainer on a `specbed regen` file ends with: AddRegenDataFlags, then
// AddOptimFlags.
template <class Config>
void AddRegenDataAndOptimFlags(CLI::App* cmd, TrainerFlags<Config>& o) {
  Config& c = o.config;
  AddRegenDataFlags(cmd, c.max_len, c.n_eval, c.features, c.feature_dtype);
  AddOptimFlags(cmd, c.optim, o.run);
}

// --n-sequences, --n-eval-sequences (described by `eval_help`), --seq-len and --temperature of
// the trainers that sample their data from the target (train draft-lm, hrad).
template <class Config>
void AddSampledDataFlags(CLI::App* cmd, Config& c, const std::string& eval_help) {
  AddShownFlags(cmd,
                {{"--n-sequences", c.n_sequences, "Training sequences sampled from the target"},
                 {"--n-eval-sequences", c.n_eval_sequences, eval_help},
                 {"--seq-len", c.seq_len, "Tokens per sequence (BOS included)"},
                 {"--temperature", c.temperature, "Sampling temperature of the data"}});
}

// `specbed train <name>`: AddSubcommand with TrainerFlags<Config> and `run`.
template <class Config>
std::pair<CLI::App*, TrainerFlags<Config>*> AddTrainerCommand(
    CLI::App* train, const std::string& name, std::function<void(const TrainerFlags<Config>&)> run,
    const std::string& help) {
  return AddSubcommand<TrainerFlags<Config>>(train, name, std::move(run), help);
}

// `specbed train <name>` of a head trainer on a `specbed regen` file: AddTrainerCommand with the
// config's optimiser preset to `optim`, then -o, --data, -t, --dtype (AddRegenTrainerFlags).
template <class Config>
std::pair<CLI::App*, TrainerFlags<Config>*> AddRegenHeadCommand(
    CLI::App* train, const std::string& name, std::function<void(const TrainerFlags<Config>&)> run,
    const std::string& help, const OptimConfig& optim) {
  auto [cmd, o] = AddTrainerCommand<Config>(train, name, std::move(run), help);
  Config& c = o->config;
  c.optim = optim;
  AddRegenTrainerFlags(cmd, o->out, c.data, c.target, c.dtype);
  return {cmd, o};
}

// --aux-layers: the three target hidden-state ids (HF numbering) a head fuses (`what`); default
// {2, L/2, L-3}.
void AddAuxLayersFlag(CLI::App* cmd, std::vector<int64_t>& aux_layers, const std::string& what);

// Runs a head trainer whose held-out figures include a chain tau estimate (train eagle3, medusa,
// dflash, jetspec) and prints "OUT: N steps, final train loss L; held-out <loss> E, <top1> top-1
// A, chain tau estimate T; train S s".
template <class Config, class Train>
void RunChainTauTrainer(const TrainerFlags<Config>& o, Train train, const std::string& who,
                        const char* loss, const char* top1) {
  TrainDevice(o.config.optim, who);  // before the target or the data load
  KeepLargeBlocksInHeap();
  const auto r = TrainUnlessStopped(o, train);
  if (!r) return;
  const TrainLoopResult& loop = r->loop;
  std::printf(
      "%s: %lld steps, final train loss %.4f; held-out %s %.4f, %s top-1 %.4f, chain tau "
      "estimate %.3f; train %.1f s\n",
      o.out.c_str(), static_cast<long long>(loop.step), loop.final_loss, loss, loop.eval.loss, top1,
      loop.eval.acceptance_proxy, loop.eval.extra["chain_tau_estimate"].get<double>(),
      loop.train_seconds);
}

// RunChainTauTrainer(flags, train, who, loss, top1) as a command's callback.
template <class Config, class Train>
std::function<void(const TrainerFlags<Config>&)> ChainTauRun(Train train, std::string who,
                                                             const char* loss, const char* top1) {
  return [=](const TrainerFlags<Config>& o) { RunChainTauTrainer(o, train, who, loss, top1); };
}

}  // namespace specbed::cli
