// The optimiser and its settings, shared by the training loop (train_loop.h) and the online
// adapters that update a drafter while it serves (OSD, the SpecBlock bandit, LTD's PPO): AdamW
// with decoupled weight decay, the warmup + cosine schedule, the settings' checks and identity.
// No results store, no training files: serving code may link it (library specbed_train_core).
// Checked by: tests/train/train_loop_test.cpp (schedule, clipping, AdamW against a closed form).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace specbed {

// Optimiser, schedule and bookkeeping settings of a training run.
struct OptimConfig {
  int64_t steps = 1000;
  int64_t batch = 16;  // training rows per step
  double lr = 1e-3;
  double min_lr = 1e-4;     // cosine decay floor
  int64_t warmup = 30;      // linear warmup steps
  double weight_decay = 0;  // AdamW decoupled decay on the parameters the task marks
  double beta1 = 0.9;
  double beta2 = 0.95;
  double grad_clip = 1.0;  // global L2 norm; 0 = off
  uint64_t seed = 0;       // data order (the task seeds its own init from it)
  // Bookkeeping (not part of the run identity).
  int64_t checkpoint_every = 100;
  int64_t log_every = 10;
  int64_t eval_every = 0;  // 0 = evaluate only at the end
  int threads = 1;
  // Where the trainable parameters, the optimiser state and the target (when the trainer runs
  // one) live: "cpu", "cuda" or "cuda:N" (models/device.h). Not part of the run identity: a run
  // checkpointed on one device resumes on another (train states are float32 host tensors).
  std::string device = "cpu";
};

// Throws specbed::Error naming `who` and the flag for an impossible setting.
void CheckOptimConfig(const OptimConfig& c, int64_t train_rows, const std::string& who);
// The device of `c` (ParseDevice + CheckDeviceAvailable): a clear specbed::Error naming `who`,
// --device and the device when it cannot run here. Call it before any work starts.
at::Device TrainDevice(const OptimConfig& c, const std::string& who);
// The identity part of `c` (every setting that changes the weights), as flat JSON keys.
nlohmann::ordered_json OptimSettings(const OptimConfig& c);
// The recipe a trainer stores with its drafter ("specbed_recipe"): the run identity `settings`,
// then OptimSettings(optim), then "trainer": `trainer` (e.g. "specbed train eagle3").
nlohmann::ordered_json TrainRecipe(const nlohmann::ordered_json& settings, const OptimConfig& optim,
                                   const std::string& trainer);
// Learning rate of 0-based update `step`: linear warmup to lr over `warmup` steps, then cosine
// decay from lr to min_lr over the remaining steps.
double ScheduledLearningRate(const OptimConfig& c, int64_t step);

// AdamW (decoupled weight decay, bias-corrected moments), as torch.optim.AdamW, over a fixed
// list of float32 leaf parameters on any device; the moments are allocated like the parameters
// (zeros_like), so the whole update runs where they live. Used by RunTrainLoop and by online
// adapters (OSD).
class AdamWOptimizer {
 public:
  // `params`: float32 leaf tensors with requires_grad on any device (names are checkpoint keys);
  // `decay[i]`: whether weight decay applies to params[i].
  AdamWOptimizer(std::vector<std::pair<std::string, at::Tensor>> params, std::vector<bool> decay,
                 double beta1, double beta2, double weight_decay);
  // Global L2 norm of the current gradients (parameters without a gradient count as 0). Reads
  // the per-parameter sums on the host: one device-to-host copy per call off the CPU.
  double GradNorm() const;
  // One update with learning rate `lr` from the parameters' .grad(), after clipping them to
  // global norm `grad_clip` (0 = off); clears the gradients. Returns the gradient norm before
  // clipping.
  double Step(double lr, double grad_clip);
  int64_t steps_done() const { return t_; }

  // State, for checkpoints.
  const std::vector<std::pair<std::string, at::Tensor>>& params() const { return params_; }
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }
  void set_steps_done(int64_t t) { t_ = t; }

 private:
  std::vector<std::pair<std::string, at::Tensor>> params_;
  std::vector<bool> decay_;
  double beta1_, beta2_, weight_decay_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
  int64_t t_ = 0;
};

}  // namespace specbed
