// `specbed train hrad` (see hrad_trainer.h).
#include "methods/specbranch/hrad_trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>

#include "base/error.h"
#include "base/timer.h"
#include "harness/engine/sampler.h"
#include "methods/common/json_fields.h"
#include "methods/common/train/param_device.h"
#include "methods/common/train/train_driver.h"
#include "methods/drafter_catalog.h"
#include "methods/pearl/draft_lm.h"
#include "methods/specbranch/hrad.h"
#include "models/model_registry.h"

namespace specbed {

OptimConfig DefaultHradOptim() {
  OptimConfig o = CosineOptim(2000, 32, 1e-3, 1e-4, 20);  // grad clip 1.0, seed 0
  o.weight_decay = 1e-4;
  o.beta2 = 0.999;
  o.checkpoint_every = 500;
  o.log_every = 20;
  return o;
}

namespace {

struct HradData {
  at::Tensor x;  // [N, in] float32
  std::vector<int64_t> y;
};

// Regenerated sequences and their labels (see hrad_trainer.h).
void BuildData(const HradTrainConfig& c, LoadedTarget& target, std::shared_ptr<LlamaModel> draft,
               const HradConfig& hc, HradData& train, HradData& eval) {
  LlamaModel& model = *target.model;
  const int64_t vocab = model.config().vocab_size;
  const int64_t dim = model.config().dim;
  const std::vector<int64_t> layers = hc.Layers();
  const at::Tensor& embedding = model.weights().tok_embeddings;
  DraftLm dlm(std::move(draft));
  std::vector<float> rows_train, rows_eval, z;
  const int64_t total = c.n_sequences + c.n_eval_sequences;
  SamplingParams sampling;
  sampling.temperature = c.temperature;
  for (int64_t s = 0; s < total; ++s) {
    // Sample a sequence from the target.
    Sampler sampler(sampling, c.data_seed * 1000003ULL + static_cast<uint64_t>(s));
    std::vector<int32_t> seq = {
        static_cast<int32_t>(std::max<int64_t>(model.config().bos_token_id, 0))};
    KvCache cache = model.NewCache(1, c.seq_len + c.gamma + 2);
    at::Tensor one = at::empty({1, 1}, at::kLong);
    while (static_cast<int64_t>(seq.size()) < c.seq_len) {
      one.data_ptr<int64_t>()[0] = seq.back();
      ForwardOutput out = model.Forward(one, cache);
      seq.push_back(sampler.Sample(out.logits.data_ptr<float>(), vocab));
    }
    // Labels: at every t >= 1, draft gamma greedy tokens after seq[0..t], verify greedily.
    cache.Truncate(0);
    SamplingParams greedy;
    dlm.Begin({seq[0]}, greedy, 0, c.seq_len + c.gamma + 2);
    std::vector<at::Tensor> prev_hidden;  // hidden at position t-1 (slot 0 of the last forward)
    at::Tensor ids = at::empty({1, c.gamma + 1}, at::kLong);
    DraftChunk chunk;
    std::vector<float>& rows = s < c.n_sequences ? rows_train : rows_eval;
    std::vector<int64_t>& labels = s < c.n_sequences ? train.y : eval.y;
    for (int64_t t = 0; t + 1 < static_cast<int64_t>(seq.size()); ++t) {
      // Cache holds seq[0..t-1]; forward [x_t, d_1..d_gamma].
      std::vector<int32_t> context(seq.begin(), seq.begin() + t + 1);
      const bool label_here = t >= 1;
      if (label_here) dlm.Draft(context, c.gamma, false, chunk);
      const int64_t n_in = label_here ? c.gamma + 1 : 1;
      ids.data_ptr<int64_t>()[0] = seq[t];
      for (int64_t i = 1; i < n_in; ++i) ids.data_ptr<int64_t>()[i] = chunk.tokens[i - 1];
      ForwardOptions fwd;
      fwd.logits = LogitsMode::kAll;
      fwd.hidden_layers = layers;
      ForwardOutput out = model.Forward(ids.narrow(1, 0, n_in), cache, fwd);
      if (label_here) {
        int64_t n = 0;
        const float* lg = out.logits.data_ptr<float>();
        while (n < c.gamma && Argmax(lg + n * vocab, vocab) == chunk.tokens[n]) ++n;
        const int64_t label = n == 0 ? 0 : (n == c.gamma ? 2 : 1);
        HradFeatures(prev_hidden, 0, embedding, seq[t], z);
        rows.insert(rows.end(), z.begin(), z.end());
        labels.push_back(label);
      }
      cache.Truncate(t + 1);  // keep x_t's KV (the first input), drop the draft tokens
      prev_hidden.clear();
      for (const at::Tensor& h : out.hidden) prev_hidden.push_back(h.narrow(1, 0, 1).clone());
    }
  }
  const int64_t in = hc.input_dim();
  SPECBED_CHECK(in == (hc.feature_layers + 1) * dim, "H-RAD: feature size mismatch");
  train.x = at::from_blob(rows_train.data(), {static_cast<int64_t>(train.y.size()), in}, at::kFloat)
                .clone();
  eval.x = at::from_blob(rows_eval.data(), {static_cast<int64_t>(eval.y.size()), in}, at::kFloat)
               .clone();
}

class HradTask : public TrainTask {
 public:
  // The data (built on the host) and the MLP (drawn on the host) are placed on `device`.
  HradTask(const HradTrainConfig& c, HradConfig hc, HradData train, HradData eval,
           const at::Device& device)
      : c_(c), hc_(std::move(hc)), train_(std::move(train)), eval_(std::move(eval)) {
    mean_ = train_.x.mean(0);
    std_ = train_.x.std(0).clamp_min(1e-3);
    for (int64_t l : train_.y) ++counts_[l];
    const double n = static_cast<double>(train_.y.size());
    std::vector<float> w(3);
    for (int k = 0; k < 3; ++k)
      w[k] = static_cast<float>(counts_[k] > 0 ? n / (3.0 * counts_[k]) : 0.0);
    class_weight_ = at::tensor(w);
    y_train_ = at::tensor(train_.y, at::kLong);
    for (const auto& [name, t] : RandomHradTensors(hc_, c.optim.seed)) {
      params_.push_back({name, t.clone().set_requires_grad(true)});
    }
    MoveParamsTo(params_, device);
    for (at::Tensor* t : {&mean_, &std_, &class_weight_, &y_train_, &train_.x, &eval_.x}) {
      *t = OnDevice(*t, device);
    }
  }
  std::string Name() const override { return "hrad"; }
  std::vector<std::pair<std::string, at::Tensor>> Parameters() const override { return params_; }
  int64_t TrainRows() const override { return static_cast<int64_t>(train_.y.size()); }
  void BeginStep(int64_t step) override { step_ = step; }

  at::Tensor Forward(const at::Tensor& x, bool train) const {
    at::Tensor h = (x - mean_) / std_;
    std::mt19937_64 rng(0x68726164ULL ^ (static_cast<uint64_t>(step_) * 0x9e3779b97f4a7c15ULL));
    for (int l = 0; l < 3; ++l) {
      h = at::addmm(P(l, true), h, P(l, false).t());
      if (l < 2) {
        h = at::relu(h);
        if (train && c_.dropout > 0) {
          at::Tensor mask = at::empty(h.sizes(), at::kFloat);
          std::bernoulli_distribution keep(1.0 - c_.dropout);
          float* m = mask.data_ptr<float>();
          for (int64_t i = 0; i < mask.numel(); ++i) {
            m[i] = keep(rng) ? static_cast<float>(1.0 / (1.0 - c_.dropout)) : 0.f;
          }
          h = h * OnDevice(mask, h.device());  // drawn on the host, one copy
        }
      }
    }
    return h;
  }

  at::Tensor Loss(const std::vector<int64_t>& rows) override {
    const at::Tensor idx = OnDevice(at::tensor(rows, at::kLong), train_.x.device());
    const at::Tensor logits = Forward(train_.x.index_select(0, idx), true);
    const at::Tensor y = y_train_.index_select(0, idx);
    const at::Tensor logp = at::log_softmax(logits, 1);
    const double ls = c_.label_smoothing;
    const at::Tensor nll = -logp.gather(1, y.view({-1, 1})).squeeze(1);
    const at::Tensor smooth = -logp.mean(1);
    const at::Tensor per = (1.0 - ls) * nll + ls * smooth;
    const at::Tensor w = class_weight_.index_select(0, y);
    return (per * w).sum() / w.sum();
  }

  EvalMetrics Evaluate() override {
    at::NoGradGuard no_grad;
    EvalMetrics m;
    const at::Tensor logits = Forward(eval_.x, false);
    const at::Tensor pred = ToHost(logits.argmax(1));  // one host read
    const at::Tensor y = at::tensor(eval_.y, at::kLong);
    m.loss = at::nll_loss(at::log_softmax(logits, 1), OnDevice(y, logits.device())).item<double>();
    int64_t confusion[3][3] = {{0}};
    for (int64_t i = 0; i < y.size(0); ++i) {
      ++confusion[y[i].item<int64_t>()][pred[i].item<int64_t>()];
    }
    int64_t right = 0, n = 0;
    nlohmann::ordered_json recall = nlohmann::ordered_json::object(),
                           conf = nlohmann::json::array();
    const char* names[3] = {"all_reject", "confidence", "all_accept"};
    for (int a = 0; a < 3; ++a) {
      int64_t row = 0;
      for (int b = 0; b < 3; ++b) row += confusion[a][b];
      right += confusion[a][a];
      n += row;
      recall[names[a]] = row > 0 ? static_cast<double>(confusion[a][a]) / row : 0.0;
      conf.push_back({confusion[a][0], confusion[a][1], confusion[a][2]});
    }
    m.acceptance_proxy = n > 0 ? static_cast<double>(right) / n : 0.0;  // held-out accuracy
    m.extra["accuracy"] = m.acceptance_proxy;
    m.extra["balanced_accuracy"] =
        (recall["all_reject"].get<double>() + recall["confidence"].get<double>() +
         recall["all_accept"].get<double>()) /
        3.0;
    m.extra["recall"] = recall;
    m.extra["confusion_rows_true_cols_pred"] = conf;
    m.extra["eval_rows"] = n;
    m.extra["train_class_counts"] = {counts_[0], counts_[1], counts_[2]};
    last_eval_ = m.extra;
    return m;
  }

  void WriteDrafter(const std::string& out_dir) const override {
    // Fold the standardisation into the first layer: W' = W / std, b' = b - W' mean.
    at::NoGradGuard no_grad;
    std::map<std::string, at::Tensor> tensors;
    for (const auto& [name, t] : params_) tensors[name] = ToHost(t.detach().clone());
    const at::Tensor w0 = tensors["mlp.0.weight"] / ToHost(std_).view({1, -1});
    tensors["mlp.0.bias"] = tensors["mlp.0.bias"] - at::mv(w0, ToHost(mean_));
    tensors["mlp.0.weight"] = w0.contiguous();
    HradConfig hc = hc_;
    hc.evaluation = last_eval_;
    WriteHradCheckpoint(out_dir, hc, tensors);
  }

  const nlohmann::ordered_json& last_eval() const { return last_eval_; }

 private:
  at::Tensor P(int l, bool bias) const {
    const std::string name = "mlp." + std::to_string(l) + (bias ? ".bias" : ".weight");
    for (const auto& [n, t] : params_) {
      if (n == name) return t;
    }
    Fail("H-RAD: no parameter ", name);
  }

  HradTrainConfig c_;
  HradConfig hc_;
  HradData train_, eval_;
  at::Tensor mean_, std_, class_weight_, y_train_;
  int64_t counts_[3] = {0, 0, 0};
  std::vector<std::pair<std::string, at::Tensor>> params_;
  int64_t step_ = 0;
  nlohmann::ordered_json last_eval_ = nlohmann::ordered_json::object();
};

}  // namespace

HradTrainResult TrainHrad(const HradTrainConfig& c, const std::string& out_dir,
                          const TrainLoopOptions& options) {
  SPECBED_CHECK(c.gamma >= 1 && c.feature_layers >= 1 && c.n_sequences >= 1 &&
                    c.n_eval_sequences >= 1 && c.seq_len > c.gamma + 2,
                "specbed train hrad: impossible settings (gamma ", c.gamma, ", K ",
                c.feature_layers, ", sequences ", c.n_sequences, "/", c.n_eval_sequences,
                ", seq-len ", c.seq_len, ")");
  const std::string drafter = c.drafter == kAutoDrafter
                                  ? DefaultDrafterName("draft", c.target, "specbed train hrad")
                                  : c.drafter;
  // Checked before anything loads. The labels and features are built on the CPU (the target
  // and the draft run there); the MLP trains on the device.
  const at::Device device = TrainDevice(c.optim, "specbed train hrad");
  const int64_t d0 = NowNanos();
  LoadedTarget target = LoadModel(c.target, at::kFloat);
  LoadedTarget draft = LoadModel(drafter, at::kFloat);
  HradConfig hc;
  hc.target_dim = target.model->config().dim;
  hc.target_layers = target.model->config().n_layers;
  hc.feature_layers = std::min(c.feature_layers, hc.target_layers);
  nlohmann::ordered_json settings;
  settings["target"] = c.target;
  settings["drafter"] = drafter;
  settings["gamma"] = c.gamma;
  settings["feature_layers"] = hc.feature_layers;
  SPECBED_JSON_PUT(settings, c, n_sequences, n_eval_sequences, seq_len, temperature, data_seed,
                   dropout, label_smoothing);
  hc.training = TrainRecipe(settings, c.optim, "specbed train hrad");
  hc.training["labels"] =
      "greedy draft of gamma tokens vs the target's greedy verification at every position of "
      "sequences sampled from the target (BOS prompt): 0 none accepted, 2 all, else 1";
  hc.training["class_balance"] = "inverse-frequency class weights in the loss (no SMOTE)";
  HradData train, eval;
  {
    at::NoGradGuard no_grad;
    BuildData(c, target, draft.model, hc, train, eval);
  }
  HradTrainResult result;
  result.data_seconds = (NowNanos() - d0) * 1e-9;
  result.n_train = static_cast<int64_t>(train.y.size());
  result.n_eval = static_cast<int64_t>(eval.y.size());
  HradTask task(c, hc, std::move(train), std::move(eval), device);
  result.loop = RunTrainLoop(task, c.optim, settings, out_dir, options);
  result.evaluation = task.last_eval();
  if (result.loop.finished) {
    task.WriteDrafter(out_dir);  // again, now with the final held-out figures in config.json
    nlohmann::ordered_json summary;
    summary["settings"] = settings;
    summary["n_train_rows"] = result.n_train;
    summary["n_eval_rows"] = result.n_eval;
    summary["data_seconds"] = result.data_seconds;
    summary["train_seconds"] = result.loop.train_seconds;
    summary["device"] = result.loop.device;
    summary["evaluation"] = result.evaluation;
    std::ofstream(out_dir + "/train_summary.json") << summary.dump(2) << "\n";
  }
  return result;
}

}  // namespace specbed
