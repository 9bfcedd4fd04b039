// `specbed train ltd-baselines` (see ltd_classifier_trainer.h).
// Checked by: tests/methods/ltd_classifier_test.cpp, tests/cli/ltd_cli_test.cpp.
#include "methods/ltd/ltd_classifier_trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>

#include "base/error.h"
#include "base/json_read.h"
#include "base/mapped_file.h"
#include "base/paths.h"
#include "base/progress.h"
#include "methods/common/json_fields.h"
#include "methods/common/train/train_loop.h"
#include "methods/ltd/ltd_classifiers.h"
#include "methods/ltd/ltd_controllers.h"
#include "methods/ltd/ltd_method.h"
#include "methods/ltd/ltd_trainer.h"
#include "models/checkpoint/head_checkpoint.h"
#include "models/checkpoint/hf_checkpoint.h"

namespace specbed {
namespace {
using ojson = nlohmann::ordered_json;

void CheckConfig(const LtdBaselineTrainConfig& c) {
  const std::pair<int64_t, const char*> positives[] = {{c.top_k, "--top-k"},
                                                       {c.max_depth, "--max-depth"},
                                                       {c.nodes, "--nodes"},
                                                       {c.disco_hidden, "--disco-hidden"},
                                                       {c.specdec_hidden, "--specdec-hidden"},
                                                       {c.c2t_hidden, "--c2t-hidden"},
                                                       {c.disco_epochs, "--disco-epochs"},
                                                       {c.specdec_epochs, "--specdec-epochs"},
                                                       {c.c2t_epochs, "--c2t-epochs"},
                                                       {c.batch, "--batch"},
                                                       {c.max_new_tokens, "-n/--max-new-tokens"},
                                                       {c.val_count, "--val-count"}};
  for (const auto& [v, flag] : positives) {
    SPECBED_CHECK(v >= 1, "train ltd-baselines: ", flag, " must be >= 1, got ", v);
  }
  SPECBED_CHECK(c.lr > 0 && c.weight_decay >= 0,
                "train ltd-baselines: --lr must be > 0 and --weight-decay >= 0");
  SPECBED_CHECK(c.threads >= 1, "train ltd-baselines: --threads must be >= 1");
}

// Rows of one classifier: features [rows * dim] and 0/1 labels.
struct LabelledRows {
  int64_t dim = 0;
  std::vector<float> x;
  std::vector<float> y;
  int64_t rows() const { return static_cast<int64_t>(y.size()); }
  void Add(const float* f, bool label) {
    x.insert(x.end(), f, f + dim);
    y.push_back(label ? 1.f : 0.f);
  }
};

struct ClassifierData {
  LabelledRows disco, specdec, c2t;
};

// Records the classifiers' inputs while EAGLE-3 drafts at a fixed shape, and labels them from
// the verdict.
class RecordingController : public TreeShapeController {
 public:
  RecordingController(int64_t max_rounds, int64_t nodes) : TreeShapeController(max_rounds, nodes) {}
  bool WantsDraftHidden() const override { return true; }
  bool ContinueDrafting(const DraftRoundInfo& info) override {
    const int64_t w = info.top_k;
    disco_.resize(static_cast<size_t>((w + 2) * (rounds_.size() + 1)));
    EncodeDiscoFeatures(w, info.beam_scores, info.n_beam, info.best_entropy, info.rounds,
                        disco_.data() + (w + 2) * rounds_.size());
    hidden_.insert(hidden_.end(), info.best_hidden, info.best_hidden + info.hidden_size);
    hidden_size_ = info.hidden_size;
    top_k_ = w;
    rounds_.push_back(info.rounds);
    return true;
  }
  void AfterStep(const DraftTree& tree, const Verdict& verdict) override {
    if (data == nullptr) return Clear();
    const int64_t accepted = verdict.n_accepted();
    if (data->disco.dim == 0) {
      data->disco.dim = top_k_ + 2;
      data->specdec.dim = hidden_size_;
      data->c2t.dim = 2;
    }
    for (size_t i = 0; i < rounds_.size(); ++i) {
      const bool reached = accepted >= rounds_[i] + 1;
      data->disco.Add(disco_.data() + (top_k_ + 2) * i, reached);
      data->specdec.Add(hidden_.data() + hidden_size_ * i, reached);
    }
    LabelNodes(tree, verdict);
    Clear();
  }
  ClassifierData* data = nullptr;  // nullptr = record nothing

 private:
  void LabelNodes(const DraftTree& tree, const Verdict& verdict) {
    score_.assign(static_cast<size_t>(tree.size()), 0.f);
    on_path_.assign(static_cast<size_t>(tree.size()), 0);
    for (int32_t n : verdict.path) on_path_[n] = 1;
    float f[2];
    for (int64_t n = 0; n < tree.size(); ++n) {  // BFS order: parents first
      const int32_t p = tree.parent[n];
      score_[n] = (p < 0 ? 0.f : score_[p]) + tree.draft_logp[n];
      EncodeC2tFeatures(score_[n], tree.depth[n], f);
      data->c2t.Add(f, on_path_[n] != 0);
    }
  }
  void Clear() {
    rounds_.clear();
    hidden_.clear();
  }
  std::vector<int64_t> rounds_;
  std::vector<float> disco_, hidden_, score_;
  std::vector<uint8_t> on_path_;
  int64_t hidden_size_ = 0, top_k_ = 0;
};

// Indices of a balanced subset: every row of the smaller class and as many of the larger,
// chosen by a seeded shuffle.
std::vector<int64_t> BalancedRows(const LabelledRows& d, std::mt19937_64& rng, const char* what) {
  std::vector<int64_t> pos, neg;
  for (int64_t i = 0; i < d.rows(); ++i) (d.y[i] > 0.5f ? pos : neg).push_back(i);
  SPECBED_CHECK(!pos.empty() && !neg.empty(), "train ltd-baselines: the ", what, " data has ",
                pos.size(), " positive and ", neg.size(),
                " negative rows; both are needed (more prompts or tokens?)");
  std::shuffle(pos.begin(), pos.end(), rng);
  std::shuffle(neg.begin(), neg.end(), rng);
  const size_t m = std::min(pos.size(), neg.size());
  std::vector<int64_t> rows(pos.begin(), pos.begin() + m);
  rows.insert(rows.end(), neg.begin(), neg.begin() + m);
  return rows;
}

at::Tensor Features(const LabelledRows& d) {
  return at::from_blob(const_cast<float*>(d.x.data()), {d.rows(), d.dim}, at::kFloat).clone();
}

at::Tensor Labels(const LabelledRows& d) {
  return at::from_blob(const_cast<float*>(d.y.data()), {d.rows()}, at::kFloat).clone();
}

// Area under the ROC curve of `score` for 0/1 `label` (ties count one half).
double Auc(const std::vector<float>& score, const std::vector<float>& label) {
  std::vector<int64_t> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return score[a] < score[b]; });
  double rank_sum = 0, n_pos = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && score[order[j]] == score[order[i]]) ++j;
    const double mid = 0.5 * static_cast<double>(i + j + 1);  // 1-based average rank
    for (size_t k = i; k < j; ++k) {
      if (label[order[k]] > 0.5f) {
        rank_sum += mid;
        n_pos += 1;
      }
    }
    i = j;
  }
  const double n_neg = static_cast<double>(score.size()) - n_pos;
  if (n_pos == 0 || n_neg == 0) return 0.5;
  return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg);
}

// Held-out figures at the 0.5 threshold: balanced accuracy, AUC, positive share.
ojson Evaluate(const LtdClassifierCheckpoint& ck, const LabelledRows& val) {
  if (val.rows() == 0) return {{"rows", 0}};
  const at::Tensor p = at::sigmoid(LtdClassifierLogits(ck.config, ck.tensors, Features(val)));
  const std::vector<float> prob(p.data_ptr<float>(), p.data_ptr<float>() + p.numel());
  double tp = 0, tn = 0, pos = 0;
  for (size_t i = 0; i < prob.size(); ++i) {
    const bool y = val.y[i] > 0.5f;
    pos += y;
    if (y && prob[i] >= 0.5f) ++tp;
    if (!y && prob[i] < 0.5f) ++tn;
  }
  const double neg = static_cast<double>(prob.size()) - pos;
  const double bal = 0.5 * ((pos > 0 ? tp / pos : 0) + (neg > 0 ? tn / neg : 0));
  return {{"rows", val.rows()},
          {"positive_share", pos / static_cast<double>(prob.size())},
          {"balanced_accuracy", bal},
          {"auc", Auc(prob, val.y)}};
}

struct FitSettings {
  int64_t epochs = 1, batch = 64;
  double lr = 1e-4, weight_decay = 0.01;
  uint64_t seed = 0;
};

// Seeded init (normal(0, 1/sqrt(in)) weights, zero biases), then AdamW on the balanced rows.
LtdClassifierCheckpoint Fit(LtdClassifierConfig config, const LabelledRows& train,
                            const LabelledRows& val, const FitSettings& s, const char* what) {
  std::mt19937_64 rng(s.seed);
  std::vector<int64_t> rows = BalancedRows(train, rng, what);
  LtdClassifierCheckpoint ck;
  ck.config = std::move(config);
  std::vector<std::pair<std::string, at::Tensor>> params;
  std::vector<bool> decay;
  for (const auto& [name, shape] : ExpectedLtdClassifierShapes(ck.config)) {
    at::Tensor t = shape.size() == 2
                       ? SeededNormalTensor(shape, s.seed, name,
                                            1.0 / std::sqrt(static_cast<double>(shape[1])))
                       : at::zeros(shape, at::kFloat);
    t.set_requires_grad(true);
    ck.tensors[name] = t;
    params.emplace_back(name, t);
    decay.push_back(shape.size() == 2);
  }
  AdamWOptimizer opt(params, decay, 0.9, 0.999, s.weight_decay);
  const at::Tensor x = Features(train), y = Labels(train);
  double last_loss = 0;
  for (int64_t e = 0; e < s.epochs; ++e) {
    std::shuffle(rows.begin(), rows.end(), rng);
    for (size_t b = 0; b < rows.size(); b += static_cast<size_t>(s.batch)) {
      const size_t end = std::min(rows.size(), b + static_cast<size_t>(s.batch));
      const at::Tensor idx =
          at::from_blob(rows.data() + b, {static_cast<int64_t>(end - b)}, at::kLong);
      const at::Tensor logits = LtdClassifierLogits(ck.config, ck.tensors, x.index_select(0, idx));
      const at::Tensor loss = at::binary_cross_entropy_with_logits(logits, y.index_select(0, idx));
      loss.backward();
      opt.Step(s.lr, 0);
      last_loss = loss.item<double>();
    }
  }
  for (auto& [name, t] : ck.tensors) t = t.detach();
  ck.config.evaluation = Evaluate(ck, val);
  ck.config.evaluation["train_rows_balanced"] = static_cast<int64_t>(rows.size());
  ck.config.evaluation["final_train_loss"] = last_loss;
  return ck;
}

ojson Recipe(const LtdBaselineTrainConfig& c, const std::string& head, int64_t epochs) {
  ojson r = {{"trainer", "specbed train ltd-baselines"}, {"target", c.target}, {"head", head}};
  SPECBED_JSON_PUT(r, c, prompts, train_from, max_new_tokens);
  // The data-collection tree's shape.
  r["collect_top_k"] = c.top_k;
  r["collect_max_depth"] = c.max_depth;
  r["collect_nodes"] = c.nodes;
  r["epochs"] = epochs;
  SPECBED_JSON_PUT(r, c, batch, lr, weight_decay, seed);
  r["balanced"] = true;
  return r;
}

// Runs EAGLE-3 over `prompts`, recording into `data`.
void Collect(LtdTrainSetup& setup, SpeculativeDecoder& decoder, RecordingController& recorder,
             const std::vector<std::vector<int32_t>>& prompts, int64_t max_new_tokens,
             ClassifierData& data, ProgressBar* bar) {
  recorder.data = &data;
  for (const auto& p : prompts) {
    RunLtdGeneration(setup, decoder, p, max_new_tokens);
    if (bar != nullptr) bar->Advance();
  }
  recorder.data = nullptr;
}

}  // namespace

LtdBaselineTrainResult TrainLtdBaselines(const LtdBaselineTrainConfig& c,
                                         const std::string& out_dir, bool verbose) {
  CheckConfig(c);
  SPECBED_CHECK(!out_dir.empty(), "train ltd-baselines: -o/--output is required");
  at::set_num_threads(c.threads);
  const auto setup = PrepareLtdTraining(c, "train ltd-baselines");
  auto owned = std::make_unique<RecordingController>(c.max_depth, c.nodes);
  RecordingController* recorder = owned.get();
  auto decoder = MakeLtdEagle3Decoder(setup->context, setup->head, c.top_k, c.max_depth, c.nodes,
                                      std::move(owned));
  ClassifierData train, val;
  {
    std::unique_ptr<ProgressBar> bar;
    if (verbose) {
      bar = std::make_unique<ProgressBar>(
          "ltd-baselines data",
          static_cast<int64_t>(setup->train_prompts.size() + setup->val_prompts.size()), "prompt");
    }
    Collect(*setup, *decoder, *recorder, setup->train_prompts, c.max_new_tokens, train, bar.get());
    Collect(*setup, *decoder, *recorder, setup->val_prompts, c.max_new_tokens, val, bar.get());
  }
  SPECBED_CHECK(train.disco.rows() > 0,
                "train ltd-baselines: the training prompts gave no "
                "expansion round (raise -n/--max-new-tokens or --max-depth)");
  struct Job {
    LtdClassifierKind kind;
    int64_t hidden, epochs;
    const LabelledRows* train;
    const LabelledRows* val;
  };
  const std::vector<Job> jobs = {
      {LtdClassifierKind::kDisco, c.disco_hidden, c.disco_epochs, &train.disco, &val.disco},
      {LtdClassifierKind::kSpecDec, c.specdec_hidden, c.specdec_epochs, &train.specdec,
       &val.specdec},
      {LtdClassifierKind::kC2t, c.c2t_hidden, c.c2t_epochs, &train.c2t, &val.c2t}};
  LtdBaselineTrainResult result;
  for (const Job& job : jobs) {
    const char* name = LtdClassifierKindName(job.kind);
    LtdClassifierConfig cfg = DefaultLtdClassifierConfig(job.kind, c.top_k, train.specdec.dim);
    cfg.hidden = job.hidden;
    cfg.training = Recipe(c, setup->head, job.epochs);
    const FitSettings fit{job.epochs, c.batch, c.lr, c.weight_decay, c.seed};
    const LtdClassifierCheckpoint ck = Fit(cfg, *job.train, *job.val, fit, name);
    WriteLtdClassifier(out_dir + "/" + name, ck);
    ojson entry = ck.config.evaluation;
    entry["train_rows"] = job.train->rows();
    result.summary[name] = entry;
    if (verbose) {
      std::fprintf(stderr, "%s: held-out balanced accuracy %.3f, AUC %.3f (%lld rows)\n", name,
                   entry.value("balanced_accuracy", 0.0), entry.value("auc", 0.0),
                   static_cast<long long>(entry.value("rows", int64_t{0})));
    }
  }
  WriteFileAtomically(out_dir + "/train_summary.json", result.summary.dump(2));
  return result;
}

}  // namespace specbed
