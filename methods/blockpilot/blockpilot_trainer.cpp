// BlockPilot predictor training and its figures (see blockpilot_trainer.h).
// Checked by: tests/methods/blockpilot_test.cpp.
#include "methods/blockpilot/blockpilot_trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "base/error.h"
#include "base/hash.h"
#include "base/mapped_file.h"
#include "base/timer.h"
#include "methods/blockpilot/blockpilot_predictor.h"
#include "methods/common/json_fields.h"
#include "methods/common/train/param_device.h"
#include "methods/common/train/train_driver.h"
#include "methods/common/train/train_util.h"
#include "models/device.h"

namespace specbed {
namespace {

using ojson = nlohmann::ordered_json;

ojson ChoiceJson(const BlockPilotChoiceFigures& f) {
  return ojson{{"mean_tau", f.mean_tau}, {"tokens_per_s", f.tokens_per_s}};
}

ojson Histogram(const BlockPilotLabels& labels, const std::vector<int64_t>& rows,
                const std::vector<int64_t>& choice) {
  std::map<int64_t, int64_t> counts;
  for (int64_t b : labels.candidates) counts[b] = 0;
  for (int64_t r : rows) ++counts[labels.candidates[choice[r]]];
  ojson h = ojson::object();
  for (const auto& [b, n] : counts) h[std::to_string(b)] = n;
  return h;
}

double Accuracy(const std::vector<int64_t>& rows, const std::vector<int64_t>& a,
                const std::vector<int64_t>& b) {
  if (rows.empty()) return 0;
  int64_t hits = 0;
  for (int64_t r : rows) hits += a[r] == b[r];
  return static_cast<double>(hits) / static_cast<double>(rows.size());
}

// 16 hex digits over the label arrays (the run identity of the training data).
std::string LabelsFingerprint(const BlockPilotLabels& l) {
  uint64_t h = Fnv1a64(l.logits.data(), l.logits.size() * sizeof(float));
  h = Fnv1a64(l.tau.data(), l.tau.size() * sizeof(double), h);
  h = Fnv1a64(l.decode_ms.data(), l.decode_ms.size() * sizeof(double), h);
  h = Fnv1a64(l.candidates.data(), l.candidates.size() * sizeof(int64_t), h);
  return Hex64(h);
}

// The MLP with autograd: parameters under the checkpoint names.
class TrainableBlockPilot {
 public:
  TrainableBlockPilot(const BlockPilotConfig& config, uint64_t seed) : config_(config) {
    for (auto& [name, t] : RandomBlockPilotTensors(config, seed)) {
      t.set_requires_grad(true);
      params_[name] = t;
    }
  }
  // THE way to place the predictor: moves every parameter to `device` (float32 leaves with
  // requires_grad, same values). Built on the CPU (the seeded init), then moved.
  void To(const at::Device& device) {
    for (auto& [name, t] : params_) {
      if (SameDevice(t.device(), device)) continue;
      t = t.detach().to(device);
      t.set_requires_grad(true);
    }
  }
  at::Device device() const { return params_.begin()->second.device(); }
  // x float32 [N, V] on device() -> logits float32 [N, C] on device().
  at::Tensor Forward(const at::Tensor& x) const {
    at::Tensor h = x;
    for (int64_t i = 0; i < config_.num_layers; ++i) {
      h = at::linear(h, params_.at(BlockPilotTensorName(i, false)),
                     params_.at(BlockPilotTensorName(i, true)));
      if (i + 1 < config_.num_layers) h = at::relu(h);
    }
    return h;
  }
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (int64_t i = 0; i < config_.num_layers; ++i) {
      for (bool bias : {false, true}) {
        const std::string name = BlockPilotTensorName(i, bias);
        out.emplace_back(name, params_.at(name));
      }
    }
    return out;
  }
  std::map<std::string, at::Tensor> Tensors() const {
    std::map<std::string, at::Tensor> out;
    for (const auto& [name, t] : params_) out[name] = t.detach().clone();
    return out;
  }
  BlockPilotConfig& config() { return config_; }
  const BlockPilotConfig& config() const { return config_; }

 private:
  BlockPilotConfig config_;
  std::map<std::string, at::Tensor> params_;
};

class BlockPilotTask : public TrainTask {
 public:
  BlockPilotTask(const BlockPilotLabels& labels, const std::vector<int64_t>& targets,
                 const std::string& criterion, TrainableBlockPilot& model, int64_t n_train)
      : labels_(labels),
        targets_(targets),
        criterion_(criterion),
        model_(model),
        n_train_(n_train) {
    at::NoGradGuard no_grad;
    const at::Tensor logits = at::from_blob(const_cast<float*>(labels.logits.data()),
                                            {labels.size(), labels.vocab_size}, at::kFloat);
    // Built on the host, then one copy each to the predictor's device (none on the CPU).
    inputs_ = OnDevice(BlockPilotInputs(model.config().input, logits).contiguous().clone(),
                       model.device());
    targets_tensor_ = OnDevice(at::tensor(targets, at::kLong), model.device());
    // The majority label of the training rows (the trivial baseline).
    std::vector<int64_t> counts(labels.n_candidates(), 0);
    for (int64_t i = 0; i < n_train; ++i) ++counts[targets[i]];
    majority_ = std::max_element(counts.begin(), counts.end()) - counts.begin();
  }

  std::string Name() const override { return "blockpilot"; }
  std::vector<std::pair<std::string, at::Tensor>> Parameters() const override {
    return model_.named_parameters();
  }
  int64_t TrainRows() const override { return n_train_; }

  at::Tensor Loss(const std::vector<int64_t>& rows) override {
    const at::Tensor index = OnDevice(at::tensor(rows, at::kLong), model_.device());
    const at::Tensor logits = model_.Forward(inputs_.index_select(0, index));
    return at::nll_loss(at::log_softmax(logits, 1), targets_tensor_.index_select(0, index));
  }

  // Predicted candidate index per row (all rows).
  std::vector<int64_t> PredictAll() const {
    at::NoGradGuard no_grad;
    const at::Tensor pred = ToHost(model_.Forward(inputs_).argmax(1)).contiguous();
    return std::vector<int64_t>(pred.data_ptr<int64_t>(), pred.data_ptr<int64_t>() + pred.numel());
  }

  EvalMetrics Evaluate() override {
    at::NoGradGuard no_grad;
    const int64_t n = labels_.size();
    std::vector<int64_t> eval_rows, train_rows;
    for (int64_t i = 0; i < n; ++i) (i < n_train_ ? train_rows : eval_rows).push_back(i);
    const at::Tensor index = at::arange(n_train_, n, targets_tensor_.options());
    const at::Tensor logits = model_.Forward(inputs_.index_select(0, index));
    EvalMetrics m;
    m.loss = at::nll_loss(at::log_softmax(logits, 1), targets_tensor_.index_select(0, index))
                 .item<double>();
    const std::vector<int64_t> pred = PredictAll();
    const std::vector<int64_t> majority(n, majority_);
    m.acceptance_proxy = Accuracy(eval_rows, pred, targets_);
    m.extra["heldout"] = BlockPilotFigures(labels_, eval_rows, pred, criterion_);
    m.extra["heldout"]["majority_accuracy"] = Accuracy(eval_rows, majority, targets_);
    m.extra["heldout"]["majority_block_size"] = labels_.candidates[majority_];
    m.extra["train_accuracy"] = Accuracy(train_rows, pred, targets_);
    std::vector<int64_t> all(n);
    for (int64_t i = 0; i < n; ++i) all[i] = i;
    m.extra["all_prompts"] = BlockPilotFigures(labels_, all, {}, criterion_);
    last_eval_ = m.extra;
    last_eval_["heldout_loss"] = m.loss;
    return m;
  }

  void WriteDrafter(const std::string& out_dir) const override {
    BlockPilotConfig c = model_.config();
    c.evaluation = last_eval_;
    WriteBlockPilotCheckpoint(out_dir, c, ToHost(model_.Tensors()));
  }

  const ojson& last_eval() const { return last_eval_; }

 private:
  const BlockPilotLabels& labels_;
  const std::vector<int64_t>& targets_;
  std::string criterion_;
  TrainableBlockPilot& model_;
  int64_t n_train_;
  at::Tensor inputs_, targets_tensor_;
  int64_t majority_ = 0;
  ojson last_eval_ = ojson::object();
};

}  // namespace

OptimConfig DefaultBlockPilotOptim() {
  OptimConfig o = CosineOptim(400, 32, 1e-3, 1e-4, 20);  // grad clip 1.0, seed 0, 1 thread
  o.weight_decay = 0.01;
  o.beta2 = 0.999;
  return o;
}

BlockPilotChoiceFigures ScoreBlockChoice(const BlockPilotLabels& labels,
                                         const std::vector<int64_t>& rows,
                                         const std::vector<int64_t>& choice) {
  BlockPilotChoiceFigures f;
  if (rows.empty()) return f;
  const int64_t nc = labels.n_candidates();
  double tau = 0, tokens = 0, ms = 0;
  for (int64_t r : rows) {
    const int64_t k = r * nc + choice[r];
    tau += labels.tau[k];
    tokens += static_cast<double>(labels.decode_tokens[k]);
    ms += labels.decode_ms[k];
  }
  f.mean_tau = tau / static_cast<double>(rows.size());
  f.tokens_per_s = ms > 0 ? tokens * 1e3 / ms : 0.0;
  return f;
}

ojson BlockPilotFigures(const BlockPilotLabels& labels, const std::vector<int64_t>& rows,
                        const std::vector<int64_t>& predicted, const std::string& criterion) {
  const int64_t n = labels.size(), nc = labels.n_candidates();
  const std::vector<int64_t> by_tau = BlockPilotLabelIndices(labels, "tau");
  const std::vector<int64_t> by_tps = BlockPilotLabelIndices(labels, "throughput");
  const std::vector<int64_t>& wanted = criterion == "tau" ? by_tau : by_tps;
  ojson j;
  j["prompts"] = static_cast<int64_t>(rows.size());
  j["criterion"] = criterion;
  j["label_histogram"] = Histogram(labels, rows, wanted);
  if (!predicted.empty()) {
    ojson p = ChoiceJson(ScoreBlockChoice(labels, rows, predicted));
    p["accuracy"] = Accuracy(rows, predicted, wanted);
    p["accuracy_tau_labels"] = Accuracy(rows, predicted, by_tau);
    p["accuracy_throughput_labels"] = Accuracy(rows, predicted, by_tps);
    p["histogram"] = Histogram(labels, rows, predicted);
    j["predictor"] = p;
  }
  j["oracle_tau"] = ChoiceJson(ScoreBlockChoice(labels, rows, by_tau));
  j["oracle_throughput"] = ChoiceJson(ScoreBlockChoice(labels, rows, by_tps));
  ojson fixed = ojson::object();
  std::vector<double> fixed_tau(nc), fixed_tps(nc);
  for (int64_t c = 0; c < nc; ++c) {
    const BlockPilotChoiceFigures f = ScoreBlockChoice(labels, rows, std::vector<int64_t>(n, c));
    fixed_tau[c] = f.mean_tau;
    fixed_tps[c] = f.tokens_per_s;
    fixed[std::to_string(labels.candidates[c])] = ChoiceJson(f);
  }
  j["fixed"] = fixed;
  auto best = [&](const std::vector<double>& values) {
    const int64_t c = ChooseBlockLabel(values.data(), labels.candidates, labels.trained_block_size);
    ojson b = ChoiceJson({fixed_tau[c], fixed_tps[c]});
    b["block_size"] = labels.candidates[c];
    return b;
  };
  j["best_fixed_tau"] = best(fixed_tau);
  j["best_fixed_throughput"] = best(fixed_tps);
  for (int64_t c = 0; c < nc; ++c) {
    if (labels.candidates[c] != labels.trained_block_size) continue;
    ojson t = ChoiceJson({fixed_tau[c], fixed_tps[c]});
    t["block_size"] = labels.trained_block_size;
    j["trained_block_size"] = t;
  }
  return j;
}

BlockPilotTrainResult TrainBlockPilot(const BlockPilotTrainConfig& config,
                                      const std::string& out_dir, const TrainLoopOptions& options) {
  const std::string who = "blockpilot train";
  const at::Device device = TrainDevice(config.optim, who);  // before the labels load
  SPECBED_CHECK(!config.labels.empty(), who, ": --labels (a `specbed blockpilot label` file) is ",
                "required");
  SPECBED_CHECK(config.criterion == "tau" || config.criterion == "throughput", who,
                ": --criterion must be tau or throughput, got '", config.criterion, "'");
  SPECBED_CHECK(config.hidden >= 1 && config.layers >= 1, who,
                ": --hidden and --layers must be >= 1 (got ", config.hidden, ", ", config.layers,
                ")");
  SPECBED_CHECK(config.holdout > 0 && config.holdout < 1, who,
                ": --holdout must be in (0, 1), got ", config.holdout);
  const BlockPilotInput input = ParseBlockPilotInput(config.input, who + " --input");
  const BlockPilotLabels labels = LoadBlockPilotLabels(config.labels);
  const int64_t n = labels.size();
  const int64_t n_eval = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(config.holdout * static_cast<double>(n) - 1e-9)));
  SPECBED_CHECK(n - n_eval >= 1, who, ": '", config.labels, "' has ", n, " prompts; holding out ",
                n_eval, " leaves none to train on");
  const int64_t n_train = n - n_eval;
  const std::vector<int64_t> targets = BlockPilotLabelIndices(labels, config.criterion);

  BlockPilotConfig pc;
  pc.vocab_size = labels.vocab_size;
  pc.trained_block_size = labels.trained_block_size;
  pc.radius = labels.provenance.value("radius", int64_t{0});
  pc.candidates = labels.candidates;
  pc.input = input;
  pc.hidden_size = config.hidden;
  pc.num_layers = config.layers;
  pc.Validate(who + " (labels '" + config.labels + "')");

  ojson settings;
  settings["labels_fingerprint"] = LabelsFingerprint(labels);
  settings["n_prompts"] = n;
  SPECBED_JSON_PUT(settings, config, criterion, input, hidden, layers, holdout);
  const ojson optim = OptimSettings(config.optim);
  for (const auto& [key, value] : optim.items()) settings[key] = value;

  const ojson& lp = labels.provenance;
  ojson training;
  training["trainer"] = "specbed blockpilot train";
  training["labels_file"] = config.labels;
  training["criterion"] = config.criterion;
  training["prompts"] = lp.value("prompts", ojson());
  training["drafter"] = lp.value("drafter", ojson());
  training["target"] = lp.value("target", ojson());
  training["max_new_tokens"] = lp.value("max_new_tokens", ojson());
  training["label_decoding"] = lp.value("decoding", ojson());
  training["n_train_prompts"] = n_train;
  training["n_heldout_prompts"] = n_eval;
  training["heldout"] = "the last n_heldout_prompts prompts of the label file";
  training["settings"] = settings;
  pc.training = training;

  TrainableBlockPilot model(pc, DeriveSeed(config.optim.seed, 0, 0x696e6974));  // "init"
  model.To(device);
  BlockPilotTask task(labels, targets, config.criterion, model, n_train);
  BlockPilotTrainResult result;
  result.n_train = n_train;
  result.n_eval = n_eval;
  result.loop = RunTrainLoop(task, config.optim, settings, out_dir, options);
  if (!result.loop.finished) return result;

  result.evaluation = task.last_eval();
  task.WriteDrafter(out_dir);
  ojson summary;
  summary["date"] = NowRfc3339();
  summary["settings"] = settings;
  summary["predictor"] = BlockPilotConfigToJson(model.config());
  summary["predictor"].erase("evaluation");
  summary["parameters"] = [&] {
    int64_t count = 0;
    for (const auto& [name, t] : model.named_parameters()) count += t.numel();
    return count;
  }();
  summary["steps"] = result.loop.step;
  summary["final_train_loss"] = result.loop.final_loss;
  summary["train_seconds"] = result.loop.train_seconds;
  summary["device"] = result.loop.device;
  summary["evaluation"] = result.evaluation;
  WriteFileAtomically(out_dir + "/train_summary.json", summary.dump(2) + "\n");
  return result;
}

}  // namespace specbed
