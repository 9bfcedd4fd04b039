// `specbed train hrad`: SpecBranch's H-RAD predictor trainer (hrad_trainer.h) behind its flags.
// Checked by: tests/methods/specbranch_test.cpp, tests/train/train_cli_test.cpp.
#include "methods/common/train/train_flags.h"
#include "methods/specbranch/hrad_trainer.h"

namespace specbed::cli {
namespace {

void RunTrainHrad(const TrainerFlags<HradTrainConfig>& o) {
  TrainDevice(o.config.optim, "train hrad");  // before the target or the data load
  const auto r = TrainUnlessStopped(o, TrainHrad);
  if (!r) return;
  std::printf("%s: %lld train rows, %lld held-out rows (data %.1f s, train %.1f s); held-out %s\n",
              o.out.c_str(), static_cast<long long>(r->n_train), static_cast<long long>(r->n_eval),
              r->data_seconds, r->loop.train_seconds, r->evaluation.dump().c_str());
}

}  // namespace

void AddSpecBranchTrainCommands(CLI::App* train) {
  auto [cmd, o] = AddSubcommand(
      train, "hrad", RunTrainHrad,
      "Train SpecBranch's H-RAD predictor (3-class MLP on target features) from draft/target "
      "agreement on sequences sampled from the target -> OUT/config.json + model.safetensors");
  o->config.optim = DefaultHradOptim();
  HradTrainConfig& c = o->config;
  AddOutputFlag(cmd, o->out, "Output directory");
  AddTargetFlag(cmd, c.target);
  AddShownFlags(cmd, {{"--drafter", c.drafter, "SpS draft LM (auto = the target's shipped one)"},
                      {"--gamma", c.gamma, "Draft length of the labels (= specbranch gamma_max)"},
                      {"--feature-layers", c.feature_layers, "K: last target layers read"}});
  AddSampledDataFlags(cmd, c, "Held-out sequences");
  AddShownFlags(cmd, {{"--data-seed", c.data_seed, "Seed of the sampled sequences"},
                      {"--dropout", c.dropout, "Dropout after each hidden layer"}});
  AddOptimFlags(cmd, c.optim, o->run);
}

}  // namespace specbed::cli
