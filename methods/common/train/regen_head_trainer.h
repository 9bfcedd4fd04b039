// The driver of the drafter trainers that learn from a `specbed regen` file and the target's
// features (EAGLE-3, Medusa, DFlash / JetSpec, SpecBlock). RegenHeadDriver owns the data side and
// the bookkeeping: it loads the target and the data and holds the last n_eval sequences out, makes
// the target-feature source (online or the disk cache under OUT/work/features), starts the run
// identity with the target and data fingerprints, runs the shared loop (train_loop.h) with the
// recipe every such drafter records (TrainRecipe + "features" + "data" provenance) and writes
// train_summary.json. A trainer configures it with its model and loss: a RegenHeadTask, whose
// Batch() gives the padded rows and their target features and HeldOutBatches() the evaluation
// rows. The fields these trainers' configs share (and so their flags -o, --data, -t, --dtype,
// --max-len, --n-eval, --features, --feature-dtype) are RegenHeadTrainConfig.
// Checked by: tests/train/train_driver_test.cpp (the driver on a tiny task), and through the
// trainers: tests/methods/eagle3_train_test.cpp, dflash_train_test.cpp, medusa_test.cpp,
// specblock_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/common/train/regen.h"
#include "methods/common/train/target_features.h"
#include "methods/common/train/train_loop.h"
#include "models/model_registry.h"

namespace specbed {

// The fields every trainer on a `specbed regen` file shares: the base of their configs (EAGLE-3,
// Medusa, DFlash / JetSpec, SpecBlock) and of their flags (-t, --dtype, --data, --max-len,
// --n-eval, --features, --feature-dtype and the loop's; methods/common/train/train_flags.h).
struct RegenHeadTrainConfig {
  std::string target = "stories260K";     // registry name or path; teacher dtype `dtype`
  std::string dtype = "float32";          // teacher dtype (Medusa's teacher is float32: no flag)
  std::string data;                       // `specbed regen` file (required)
  int64_t max_len = 256;                  // training sequences are cropped to this many tokens
  int64_t n_eval = 32;                    // held-out sequences (the last ones of the data)
  std::string features = "online";        // "online" | "disk" (target_features.h)
  std::string feature_dtype = "float32";  // disk cache storage: float32 | bfloat16 | float16
  OptimConfig optim;                      // defaults: the trainer's Default*Optim()
};

// What the driver needs: a trainer's config fields, with dtype "" = float32 (left out of the run
// identity), the task name and whether max_len is checked against the target's context.
struct RegenHeadSpec : RegenHeadTrainConfig {
  std::string who;            // task name: messages, "specbed train <who>" in the recipe
  bool check_context = true;  // fail when max_len exceeds the target's context
};

// What those trainers return: the loop's result and the sizes and data time they report.
struct RegenHeadTrainResult {
  TrainLoopResult loop;
  int64_t head_parameters = 0;
  int64_t target_parameters = 0;
  double data_seconds = 0;  // loading the data / building the disk feature cache
};

// The driver's spec of trainer config `c`, named `who`, with teacher dtype `dtype` ("" =
// float32, left out of the run identity).
RegenHeadSpec RegenHeadSpecOf(const RegenHeadTrainConfig& c, const std::string& who,
                              const std::string& dtype);

class RegenHeadTask;

class RegenHeadDriver {
 public:
  // Checks spec.device (before anything loads), sets the thread count, loads the target on that
  // device (its ATen forward path off the CPU) and the data and checks the held-out split (errors
  // name `who` and the flag).
  RegenHeadDriver(RegenHeadSpec spec, std::string out_dir, TrainLoopOptions options);
  ~RegenHeadDriver();

  LlamaModel& teacher() const { return *target_.model; }
  // The training device: the target's, where the trainer places its model (e.g. To(device())).
  at::Device device() const { return device_; }
  const LlamaConfig& target_config() const { return target_.model->config(); }
  const std::string& target_name() const { return target_.spec.name; }
  const RegenData& data() const { return data_; }
  int64_t n_train() const { return n_train_; }
  const RegenHeadSpec& spec() const { return spec_; }
  const nlohmann::ordered_json& recipe() const { return recipe_; }
  // Seconds since the driver started loading (the trainers' data_seconds).
  double SecondsSinceStart() const;

  // Makes the feature source of hidden_states `layers` (builds or reuses the disk cache).
  TargetFeatureSource& MakeFeatures(std::vector<int64_t> layers);

  // The first keys of the run identity: target, target_fingerprint, dtype (unless spec.dtype is
  // empty), data_fingerprint.
  nlohmann::ordered_json Identity() const;

  // Appends max_len and n_eval to `settings` (the last keys of the identity), gives `task` the
  // recipe and runs the loop into the output directory.
  TrainLoopResult Run(RegenHeadTask& task, nlohmann::ordered_json settings,
                      const OptimConfig& optim);

  // out_dir/train_summary.json of a finished run (WriteTrainSummary with the recipe).
  void WriteSummary(const TrainLoopResult& loop, const nlohmann::ordered_json& extra,
                    const std::string& proxy_key) const;

 private:
  RegenHeadSpec spec_;
  std::string out_dir_;
  TrainLoopOptions options_;
  int64_t started_us_ = 0;
  at::Device device_ = at::kCPU;
  LoadedTarget target_;
  RegenData data_;
  int64_t n_train_ = 0;
  std::unique_ptr<TargetFeatureSource> features_;
  nlohmann::ordered_json recipe_;
};

// A regen trainer's model and loss as the loop sees it; the driver supplies the rows.
class RegenHeadTask : public TrainTask {
 public:
  RegenHeadTask(const RegenHeadDriver& driver, TargetFeatureSource& features, int64_t batch);

  int64_t TrainRows() const override { return n_train_; }
  void set_recipe(nlohmann::ordered_json recipe) { recipe_ = std::move(recipe); }

 protected:
  // Rows `rows` as a padded batch cropped to max_len, and the target's features there (computed
  // without gradients) in *features, all on the training device (the batch is built on the host
  // and copied once); `host` (optional) receives the batch as built, on the CPU.
  SequenceBatch Batch(const std::vector<int64_t>& rows, TargetFeatures* features,
                      SequenceBatch* host = nullptr);
  // The held-out rows in batches of the training batch size.
  std::vector<std::vector<int64_t>> HeldOutBatches() const;
  const nlohmann::ordered_json& recipe() const { return recipe_; }
  const RegenData& data() const { return data_; }

 private:
  const RegenData& data_;
  TargetFeatureSource& features_;
  at::Device device_;
  int64_t n_train_, max_len_, batch_;
  nlohmann::ordered_json recipe_;
};

}  // namespace specbed
