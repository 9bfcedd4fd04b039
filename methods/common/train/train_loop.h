// The one training loop shared by every drafter trainer (draft LM for SpS, EAGLE-3, ...): AdamW
// with decoupled weight decay, linear warmup + cosine decay, global-norm gradient clipping, seeded
// data order, periodic checkpoints with exact resume, periodic held-out evaluation (validation
// loss + an acceptance proxy), a progress bar, and the loss curve in SQLite (the results store's
// train_runs / train_log / train_eval tables, in OUT/train_log.db).
// A trainer supplies a TrainTask (parameters, loss over rows, evaluation, how to write the
// deployable drafter); the loop owns everything else, so every drafter is trained and resumed the
// same way. Knobs and files: methods/common/train/README.md.
// Checked by: tests/train/train_loop_test.cpp (schedule, clipping, AdamW against a closed form,
// resume == uninterrupted bitwise, settings mismatch, log rows in SQLite).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/common/train/optimizer.h"

namespace specbed {

// One held-out evaluation.
struct EvalMetrics {
  double loss = 0;              // validation loss (the training objective on held-out rows)
  double acceptance_proxy = 0;  // what the task reports as its acceptance estimate
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // every other figure
};

// A drafter's training problem as the loop sees it.
class TrainTask {
 public:
  virtual ~TrainTask() = default;
  // Short name for messages, the progress bar and train_runs.task ("draft-lm", "eagle3").
  virtual std::string Name() const = 0;
  // The trainable parameters: float32 leaf tensors with requires_grad on the training device
  // (OptimConfig::device; the task places its model there), in a fixed order with stable unique
  // names (the checkpoint keys).
  virtual std::vector<std::pair<std::string, at::Tensor>> Parameters() const = 0;
  // Whether AdamW's weight decay applies to a parameter (default: matrices, not vectors).
  virtual bool Decays(const std::string& name, const at::Tensor& param) const {
    return param.dim() >= 2;
  }
  virtual int64_t TrainRows() const = 0;
  // Called once per process before the first step (e.g. to precompute teacher caches).
  virtual void Prepare() {}
  // Called before every Loss of training update `step` (0-based, the same on a resumed run), so
  // a task can derive per-step randomness (e.g. DFlash's random anchors) that resumes exactly.
  virtual void BeginStep(int64_t step) {}
  // Scalar float32 loss over the training rows `rows` (indices in [0, TrainRows())), with its
  // autograd graph, on the parameters' device. Must be deterministic given the parameters, the
  // rows and the step.
  virtual at::Tensor Loss(const std::vector<int64_t>& rows) = 0;
  // Held-out evaluation, without gradients.
  virtual EvalMetrics Evaluate() = 0;
  // Writes the deployable drafter (config + safetensors) into `out_dir`, from host copies of the
  // parameters (ToHost, param_device.h: nothing is copied on the CPU).
  virtual void WriteDrafter(const std::string& out_dir) const = 0;
};

struct TrainLoopOptions {
  // Require an existing run in the output directory (else specbed::Error).
  bool resume = false;
  // Discard any run (train state, log database, summary) in the output directory first.
  bool restart = false;
  // Stop (after writing a checkpoint) once this many steps are done; 0 = run to `steps`. The
  // schedule still uses `steps`, so this simulates an interruption.
  int64_t stop_after = 0;
  bool verbose = true;  // progress bar and messages on stderr
};

struct TrainLoopResult {
  int64_t step = 0;          // steps done
  bool finished = false;     // step == steps (then `eval` is filled)
  double first_loss = 0;     // loss of the first step of this process
  double final_loss = 0;     // mean loss over the last (up to) 20 steps of this process
  double train_seconds = 0;  // training steps, summed over resumed processes
  EvalMetrics eval;          // final held-out evaluation
  int64_t train_id = 0;      // row of train_runs in OUT/train_log.db
  std::string device;        // where this process trained (DeviceName of OptimConfig::device)
};

// Writes out_dir/train_summary.json of a finished loop: date, recipe, then `extra` (parameter
// counts, coverage, ...), steps, final_train_loss, eval_loss, `proxy_key` = the task's acceptance
// proxy, eval (its other held-out figures), train_seconds, threads, device (where the last
// process trained: bookkeeping, not part of the recipe).
void WriteTrainSummary(const std::string& out_dir, const nlohmann::ordered_json& recipe,
                       const nlohmann::ordered_json& extra, const TrainLoopResult& loop,
                       const std::string& proxy_key, int threads);

// Trains (or resumes) `task` into `out_dir`:
//   out_dir/<drafter files>          task.WriteDrafter, at every checkpoint
//   out_dir/train_log.db             SQLite (results schema): train_runs, train_log, train_eval
//   out_dir/work/train_state.safetensors   parameters, AdamW moments, data order (self-ignored);
//                                          float32 host tensors whatever the device, so a run
//                                          resumes on another device
// `settings` is the run identity (everything that changes the weights; OptimSettings(optim) is
// merged in). An unfinished run with the same identity resumes; a finished one only re-evaluates;
// another identity fails naming the first differing setting (flag `--key-name`).
TrainLoopResult RunTrainLoop(TrainTask& task, const OptimConfig& optim,
                             const nlohmann::ordered_json& settings, const std::string& out_dir,
                             const TrainLoopOptions& options = {});

// Throws naming the first setting of `wanted` that differs in `stored` (used by the loop and by
// trainers for their cached data); `where` names the directory or file.
void CheckSameSettings(const nlohmann::ordered_json& stored, const nlohmann::ordered_json& wanted,
                       const std::string& where);

}  // namespace specbed
