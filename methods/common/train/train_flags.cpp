// The trainers' shared command-line pieces (see train_flags.h).
#include "methods/common/train/train_flags.h"

#include <variant>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace specbed::cli {
namespace {

// A flag of AddOptimFlags: its names, the OptimConfig field it sets (default shown) and its help.
struct OptimFlag {
  const char* names;
  std::variant<int64_t*, double*, uint64_t*, int*> value;
  const char* help;
};

}  // namespace

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

void AddDatasetFilterFlags(CLI::App* cmd, std::vector<std::string>& categories, int64_t& limit) {
  cmd->add_option("--dataset-categories", categories,
                  "Dataset prompts: only these categories (comma-separated)")
      ->delimiter(',');
  cmd->add_option("--limit", limit,
                  "Dataset prompts: the first N after the category filter (-1 = all)")
      ->capture_default_str();
}

void KeepLargeBlocksInHeap() {
#if defined(__GLIBC__)
  // glibc serves blocks above 128 KiB with mmap and unmaps them on free, so every training step
  // would page-fault its multi-MiB activations in afresh; keeping blocks up to 32 MiB (the
  // largest threshold glibc accepts) in the heap makes a step about a third faster.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

void AddRegenTrainerFlags(CLI::App* cmd, std::string& out, std::string& data, std::string& target,
                          std::string& dtype) {
  AddOutputFlag(cmd, out, "Output directory (checkpoint, train_log.db, work/)");
  cmd->add_option("--data", data, "Training data: a `specbed regen` file")->required();
  AddTargetFlags(cmd, target, dtype);
}

void AddAuxLayersFlag(CLI::App* cmd, std::vector<int64_t>& aux_layers, const std::string& what) {
  cmd->add_option(
         "--aux-layers", aux_layers,
         "Three target hidden-state ids " + what + " (HF numbering); default {2, L/2, L-3}")
      ->expected(3);
}

void AddRegenDataFlags(CLI::App* cmd, int64_t& max_len, int64_t& n_eval, std::string& features,
                       std::string& feature_dtype) {
  cmd->add_option("--max-len", max_len, "Crop training sequences to this many tokens")
      ->capture_default_str();
  cmd->add_option("--n-eval", n_eval, "Held-out sequences (the last ones of --data)")
      ->capture_default_str();
  cmd->add_option("--features", features,
                  "Target features: online (run the target each step) or disk (cache under "
                  "OUT/work/features)")
      ->check(CLI::IsMember({"online", "disk"}))
      ->capture_default_str();
  cmd->add_option("--feature-dtype", feature_dtype,
                  "Disk cache storage dtype: float32, bfloat16, float16")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}))
      ->capture_default_str();
}

}  // namespace specbed::cli
