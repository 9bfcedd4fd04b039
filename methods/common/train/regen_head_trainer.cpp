// The regen-data trainers' driver (see regen_head_trainer.h).
// Checked by: tests/train/train_driver_test.cpp.
#include "methods/common/train/regen_head_trainer.h"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <filesystem>
#include <utility>

#include "base/error.h"
#include "base/timer.h"
#include "methods/common/train/train_driver.h"
#include "methods/common/train/train_util.h"
#include "models/device.h"

namespace specbed {

using ojson = nlohmann::ordered_json;

RegenHeadSpec RegenHeadSpecOf(const RegenHeadTrainConfig& c, const std::string& who,
                              const std::string& dtype) {
  RegenHeadSpec s;
  static_cast<RegenHeadTrainConfig&>(s) = c;
  s.who = who;
  s.dtype = dtype;
  return s;
}

RegenHeadDriver::RegenHeadDriver(RegenHeadSpec spec, std::string out_dir, TrainLoopOptions options)
    : spec_(std::move(spec)), out_dir_(std::move(out_dir)), options_(options) {
  const std::string& who = spec_.who;
  device_ = ParseDevice(spec_.optim.device, who + " --device");
  CheckDeviceAvailable(device_, who + " --device");
  at::set_num_threads(spec_.optim.threads);
  started_us_ = NowMicros();
  target_ = LoadModel(spec_.target, spec_.dtype.empty() ? at::kFloat : ParseDtype(spec_.dtype), "",
                      device_);
  const LlamaConfig& tc = target_config();
  data_ = LoadRegenData(spec_.data, tc.vocab_size);
  SPECBED_CHECK(data_.size() > spec_.n_eval, who, ": '", spec_.data, "' has ", data_.size(),
                " sequences; need more than --n-eval ", spec_.n_eval);
  SPECBED_CHECK(!spec_.check_context || spec_.max_len <= tc.max_seq_len, who, ": --max-len ",
                spec_.max_len, " exceeds the target's context ", tc.max_seq_len);
  n_train_ = data_.size() - spec_.n_eval;
}

RegenHeadDriver::~RegenHeadDriver() = default;

double RegenHeadDriver::SecondsSinceStart() const {
  return (NowMicros() - started_us_) * 1e-6;
}

TargetFeatureSource& RegenHeadDriver::MakeFeatures(std::vector<int64_t> layers) {
  TargetFeatureOptions fo;
  fo.source = spec_.features;
  fo.layers = std::move(layers);
  fo.max_len = spec_.max_len;
  fo.cache_dir = out_dir_ + "/work/features";
  fo.store_dtype = ParseFeatureStoreDtype(spec_.feature_dtype, spec_.who);
  fo.disk.verbose = options_.verbose;
  std::filesystem::create_directories(out_dir_ + "/work");
  features_ = MakeTargetFeatureSource(teacher(), data_, fo);
  return *features_;
}

ojson RegenHeadDriver::Identity() const {
  ojson settings;
  settings["target"] = target_name();
  settings["target_fingerprint"] = TargetFingerprint(teacher());
  if (!spec_.dtype.empty()) settings["dtype"] = spec_.dtype;
  settings["data_fingerprint"] = RegenDataFingerprint(data_);
  return settings;
}

TrainLoopResult RegenHeadDriver::Run(RegenHeadTask& task, ojson settings,
                                     const OptimConfig& optim) {
  settings["max_len"] = spec_.max_len;
  settings["n_eval"] = spec_.n_eval;
  recipe_ = TrainRecipe(settings, optim, "specbed train " + spec_.who);
  recipe_["features"] = spec_.features;
  recipe_["data"] = data_.provenance;
  task.set_recipe(recipe_);
  return RunTrainLoop(task, optim, settings, out_dir_, options_);
}

void RegenHeadDriver::WriteSummary(const TrainLoopResult& loop, const ojson& extra,
                                   const std::string& proxy_key) const {
  WriteTrainSummary(out_dir_, recipe_, extra, loop, proxy_key, spec_.optim.threads);
}

RegenHeadTask::RegenHeadTask(const RegenHeadDriver& driver, TargetFeatureSource& features,
                             int64_t batch)
    : data_(driver.data()),
      features_(features),
      device_(driver.device()),
      n_train_(driver.n_train()),
      max_len_(driver.spec().max_len),
      batch_(batch) {}

SequenceBatch RegenHeadTask::Batch(const std::vector<int64_t>& rows, TargetFeatures* features,
                                   SequenceBatch* host) {
  const SequenceBatch batch = MakeSequenceBatch(data_, rows, max_len_);
  at::NoGradGuard no_grad;
  *features = features_.Get(rows, batch);
  if (host != nullptr) *host = batch;
  return BatchOnDevice(batch, device_);
}

std::vector<std::vector<int64_t>> RegenHeadTask::HeldOutBatches() const {
  return RowBatches(n_train_, data_.size(), batch_);
}

}  // namespace specbed
