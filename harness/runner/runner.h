// The case runner: executes expanded cases and writes each one (samples + steps) to the results
// store in one transaction. Completed cases (same case key already in the database) are skipped,
// so an interrupted run resumes where it stopped and never duplicates rows. The runner — not the
// method — times phases and counts tokens. Cases with CaseConfig::timing "paired" also run AR on
// every prompt back to back with the method (AR first on even answers, second on odd ones) and
// store its decode time and output length with each sample. The target KV cache is sized for the
// method's largest draft tree (CacheLengthFor), so node budgets are not clipped near the end.
// Checked by: tests/engine/run_config_test.cpp and tests/cli/cli_test.cpp (kill + resume).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "harness/engine/ar_generate.h"
#include "harness/runner/run_config.h"
#include "harness/runner/sweep.h"
#include "models/model_registry.h"
#include "results/store.h"

namespace specbed {

class MethodRegistry;  // methods/method_registry.h
struct MethodContext;  // methods/method_registry.h
class ProgressBar;     // base/progress.h

// Builds the prompt ids for a conversation with the model's chat template.
std::vector<int32_t> BuildPromptIds(const LoadedTarget& target,
                                    const std::vector<ChatMessage>& messages);

// Stop rules for `target`: its tokenizer's EOS ids plus the config's, the given stop strings.
// Every decoding path (run, generate, methods) uses this, so stop behaviour is identical.
StopConfig StopConfigFor(const LoadedTarget& target, int64_t max_new_tokens,
                         const std::vector<std::string>& stop_strings);

// Per-prompt sampling seed derived from the case seed, the prompt index and the turn, so results
// do not depend on the order prompts run in and every method sees the same seeds.
uint64_t PromptSeed(uint64_t case_seed, int64_t prompt_index, int32_t turn);

struct RunnerOptions {
  bool show_progress = true;
  // Environment identity stored with the run (see environment.h); filled by the CLI.
  RunInfo run_info;
};

struct RunnerSummary {
  int64_t cases_total = 0, cases_run = 0, cases_skipped = 0;
  double wall_s = 0;
};

// Validates `cases` as RunCases does first (knobs, models, devices, datasets) without touching a
// store: callers run it before creating a results database, so bad input leaves no file behind.
// Throws specbed::Error naming the case and the bad input.
void ValidateRunCases(std::vector<CaseConfig> cases);

class Runner {
 public:
  Runner(ResultsStore& store, RunnerOptions options);
  // Runs every case of `config` not yet completed in the store (ExpandSweep of the config).
  RunnerSummary Run(const RunConfig& config);
  RunnerSummary Run(const SweepConfig& config);
  // Runs `cases` (e.g. ExpandSweep's, possibly sharded) not yet completed in the store: every
  // case is validated first, then each one is run (`warmup` discarded generations first) and
  // written in one transaction. `name` labels the progress line; `config_json` is stored as the
  // run's config. Cases need batch_size 1 (no method decodes batches yet).
  RunnerSummary RunCases(std::vector<CaseConfig> cases, const std::string& name, int64_t warmup,
                         const nlohmann::json& config_json);

 private:
  // A model loaded once per (name, dtype, chat template, device) and kept across cases.
  LoadedTarget& Target(const std::string& name, const std::string& dtype,
                       const std::string& chat_template, const std::string& device);
  // What a method's factory gets for case `c` on `target` (drafters load through Target).
  MethodContext ContextFor(const CaseConfig& c, LoadedTarget& target);
  // Runs one validated case (warmup, every turn of every prompt, paired AR when asked) and writes
  // it to the store in one transaction.
  void RunCase(const MethodRegistry& methods, const CaseConfig& c,
               const std::vector<Prompt>& prompts, int64_t warmup, int64_t run_id,
               const std::string& note, ProgressBar* progress);
  ResultsStore& store_;
  RunnerOptions options_;
  std::map<std::string, LoadedTarget> targets_;
  // Measured memory bandwidth (GB/s) of a case's device, once per Runner and key: the STREAM
  // triad at the case's thread count on the CPU, the device copy bandwidth on an accelerator
  // (MeasureDeviceCopyBandwidth); recorded with every case so that reports state AR's fraction
  // of the memory roofline.
  double MemoryBandwidthGbs(int threads, const std::string& device);
  std::map<std::string, double> bandwidth_gb_s_;
};

}  // namespace specbed
