// EAGLE-3 TTT training on regenerated target data (see eagle3_trainer.h).
// Checked by: tests/methods/eagle3_train_test.cpp.
#include "methods/eagle3/eagle3_trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "harness/base/error.h"
#include "harness/base/timer.h"
#include "methods/common/train/regen.h"
#include "methods/common/train/target_features.h"
#include "methods/common/train/train_util.h"
#include "methods/eagle3/eagle3_checkpoint.h"
#include "methods/eagle3/trainable_eagle3.h"
#include "models/model_registry.h"

namespace specbed {
namespace {

using ojson = nlohmann::ordered_json;

constexpr uint64_t kInitSalt = 0x65616733696e6974ULL;  // "eag3init"

class Eagle3TrainTask : public TrainTask {
 public:
  Eagle3TrainTask(const Eagle3TrainConfig& config, LlamaModel& target, const RegenData& data,
                  TargetFeatureSource& features, TrainableEagle3& head, int64_t n_train)
      : config_(config),
        loss_norm_(ParseTttLossNorm(config.ttt_loss_norm)),
        target_(target),
        data_(data),
        features_(features),
        head_(head),
        n_train_(n_train) {}

  std::string Name() const override { return "eagle3"; }
  std::vector<std::pair<std::string, at::Tensor>> Parameters() const override {
    return head_.named_parameters();
  }
  int64_t TrainRows() const override { return n_train_; }

  at::Tensor Loss(const std::vector<int64_t>& rows) override { return Compute(rows).loss; }

  EvalMetrics Evaluate() override {
    at::NoGradGuard no_grad;
    const int64_t n = data_.size();
    std::vector<double> loss(config_.ttt_steps, 0), hits(config_.ttt_steps, 0),
        count(config_.ttt_steps, 0);
    double total = 0;
    for (int64_t b0 = n_train_; b0 < n; b0 += config_.optim.batch) {
      std::vector<int64_t> rows;
      for (int64_t i = b0; i < std::min(n, b0 + config_.optim.batch); ++i) rows.push_back(i);
      const TttLossResult r = Compute(rows);
      for (int64_t k = 0; k < config_.ttt_steps; ++k) {
        loss[k] += r.step_loss[k] * r.step_count[k];
        hits[k] += r.step_top1[k] * r.step_count[k];
        count[k] += r.step_count[k];
      }
    }
    EvalMetrics m;
    double weight = 1, chain = 1, tau = 1;
    ojson top1 = ojson::array(), losses = ojson::array();
    for (int64_t k = 0; k < config_.ttt_steps; ++k) {
      const double lk = count[k] > 0 ? loss[k] / count[k] : 0;
      const double ak = count[k] > 0 ? hits[k] / count[k] : 0;
      total += weight * lk;
      weight *= config_.ttt_decay;
      top1.push_back(ak);
      losses.push_back(lk);
      chain *= ak;
      tau += chain;
    }
    m.loss = total;
    m.acceptance_proxy = top1[0].get<double>();
    m.extra["step_top1"] = top1;
    m.extra["step_loss"] = losses;
    // A chain drafted greedily accepts k+1 tokens only if steps 0..k all agree with the target:
    // tau_chain = 1 + sum_k prod_{j<=k} top1_j (teacher-forced estimate; trees do better).
    m.extra["chain_tau_estimate"] = tau;
    m.extra["eval_positions_step0"] = count[0];
    return m;
  }

  void WriteDrafter(const std::string& out_dir) const override {
    WriteEagle3Checkpoint(out_dir, head_.config(), head_.Tensors(), recipe_);
  }

  void set_recipe(ojson recipe) { recipe_ = std::move(recipe); }

 private:
  TttLossResult Compute(const std::vector<int64_t>& rows) {
    const SequenceBatch batch = MakeSequenceBatch(data_, rows, config_.max_len);
    TargetFeatures f;
    {
      at::NoGradGuard no_grad;
      f = features_.Get(rows, batch);
    }
    const auto logits = head_.Forward(f.hidden, batch.tokens, config_.ttt_steps);
    return Eagle3TttLoss(logits, f.logits, batch.loss_mask, head_.draft_ids(), head_.t2d(),
                         config_.ttt_decay, loss_norm_);
  }

  const Eagle3TrainConfig& config_;
  TttLossNorm loss_norm_;  // parsed once from config_.ttt_loss_norm
  LlamaModel& target_;
  const RegenData& data_;
  TargetFeatureSource& features_;
  TrainableEagle3& head_;
  int64_t n_train_;
  ojson recipe_;
};

}  // namespace

OptimConfig DefaultEagle3Optim() {
  OptimConfig o;
  o.steps = 800;
  o.batch = 16;
  o.lr = 3e-3;
  o.min_lr = 3e-4;
  o.warmup = 40;
  o.weight_decay = 0;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.grad_clip = 0.5;
  o.checkpoint_every = 100;
  o.log_every = 10;
  o.eval_every = 200;
  return o;
}

DraftVocabMap DraftVocabOfRegenRows(const RegenData& data, int64_t n_train, int64_t max_len,
                                    int64_t vocab_size, int64_t draft_vocab, double* coverage) {
  std::vector<int64_t> counts(vocab_size, 0);
  int64_t supervised = 0;
  for (int64_t i = 0; i < n_train; ++i) {
    const int64_t begin = data.offsets[i] + data.prompt_lengths[i];
    const int64_t end = std::min(data.offsets[i + 1], data.offsets[i] + max_len);
    for (int64_t j = begin; j < end; ++j) ++counts[data.tokens[j]];
    supervised += std::max<int64_t>(0, end - begin);
  }
  DraftVocabMap vocab = BuildDraftVocabMap(counts, std::min(draft_vocab, vocab_size));
  int64_t covered = 0;
  const bool* in = vocab.t2d.data_ptr<bool>();
  for (int64_t v = 0; v < vocab_size; ++v) covered += in[v] ? counts[v] : 0;
  *coverage = supervised > 0 ? static_cast<double>(covered) / supervised : 1;
  return vocab;
}

Eagle3TrainResult TrainEagle3(const Eagle3TrainConfig& config, const std::string& out_dir,
                              const TrainLoopOptions& options) {
  SPECBED_CHECK(!config.data.empty(), "eagle3: --data (a `specbed regen` file) is required");
  SPECBED_CHECK(config.ttt_steps >= 1 && config.ttt_steps <= 32, "eagle3: --ttt-steps must be in ",
                "[1, 32], got ", config.ttt_steps);
  ParseTttLossNorm(config.ttt_loss_norm);  // fails naming the choices
  SPECBED_CHECK(config.ttt_decay > 0 && config.ttt_decay <= 1, "eagle3: --ttt-decay must be in ",
                "(0, 1], got ", config.ttt_decay);
  SPECBED_CHECK(config.max_len >= 3, "eagle3: --max-len must be >= 3, got ", config.max_len);
  SPECBED_CHECK(config.n_eval >= 1, "eagle3: --n-eval must be >= 1, got ", config.n_eval);
  SPECBED_CHECK(config.draft_vocab >= 1, "eagle3: --draft-vocab must be >= 1");
  at::set_num_threads(config.optim.threads);

  Eagle3TrainResult result;
  const int64_t t0 = NowMicros();
  LoadedTarget target = LoadModel(config.target, ParseDtype(config.dtype));
  LlamaModel& teacher = *target.model;
  const LlamaConfig& tc = teacher.config();
  const RegenData data = LoadRegenData(config.data, tc.vocab_size);
  SPECBED_CHECK(data.size() > config.n_eval, "eagle3: '", config.data, "' has ", data.size(),
                " sequences; need more than --n-eval ", config.n_eval);
  SPECBED_CHECK(config.max_len <= tc.max_seq_len, "eagle3: --max-len ", config.max_len,
                " exceeds the target's context ", tc.max_seq_len);
  const int64_t n_train = data.size() - config.n_eval;

  result.aux_layers =
      config.aux_layers.empty() ? DefaultEagle3AuxLayers(tc.FeatureDepth()) : config.aux_layers;
  SPECBED_CHECK(result.aux_layers.size() == static_cast<size_t>(kEagle3AuxLayers),
                "eagle3: --aux-layers needs exactly ", kEagle3AuxLayers, " layer ids");
  for (int64_t l : result.aux_layers) {
    SPECBED_CHECK(l >= 0 && l <= tc.FeatureDepth(), "eagle3: aux layer ", l, " is outside [0, ",
                  tc.FeatureDepth(), "] (hidden_states numbering of a ", tc.FeatureDepth(),
                  "-layer target)");
  }

  // Draft vocabulary: the most frequent supervised (response) tokens of the training rows.
  const int64_t vd = std::min(config.draft_vocab, tc.vocab_size);
  const DraftVocabMap vocab = DraftVocabOfRegenRows(data, n_train, config.max_len, tc.vocab_size,
                                                    vd, &result.draft_vocab_coverage);

  Eagle3Config hc;
  hc.hidden_size = tc.dim;
  hc.intermediate_size = tc.hidden_dim;
  hc.n_heads = tc.n_heads;
  hc.n_kv_heads = tc.n_kv_heads;
  hc.head_dim = tc.head_dim;
  hc.target_hidden_size = tc.dim;
  hc.vocab_size = tc.vocab_size;
  hc.draft_vocab_size = vd;
  hc.max_position_embeddings = tc.max_seq_len;
  hc.rms_norm_eps = tc.norm_eps;
  hc.rope_theta = tc.rope_theta;
  hc.rope_scaling = tc.rope_scaling;
  hc.aux_layer_ids = result.aux_layers;
  hc.bos_token_id = tc.bos_token_id;
  hc.eos_token_ids = tc.eos_token_ids;
  hc.Validate("eagle3 head for target '" + target.spec.name + "'");

  std::map<std::string, at::Tensor> init =
      RandomEagle3Tensors(hc, DeriveSeed(config.optim.seed, 0, kInitSalt));
  init[kEagle3D2t] = vocab.d2t;
  init[kEagle3T2d] = vocab.t2d;
  const at::Tensor embedding = teacher.weights().tok_embeddings;
  TrainableEagle3 head(hc, init, embedding);
  result.head_parameters = head.ParameterCount();
  result.target_parameters = tc.ParameterCount();

  TargetFeatureOptions fo;
  fo.source = config.features;
  fo.layers = result.aux_layers;
  fo.max_len = config.max_len;
  fo.cache_dir = out_dir + "/work/features";
  fo.store_dtype = ParseFeatureStoreDtype(config.feature_dtype, "eagle3");
  fo.disk.verbose = options.verbose;
  std::filesystem::create_directories(out_dir + "/work");
  std::unique_ptr<TargetFeatureSource> features = MakeTargetFeatureSource(teacher, data, fo);
  result.data_seconds = (NowMicros() - t0) * 1e-6;

  ojson settings;
  settings["target"] = target.spec.name;
  settings["target_fingerprint"] = TargetFingerprint(teacher);
  settings["dtype"] = config.dtype;
  settings["data_fingerprint"] = RegenDataFingerprint(data);
  settings["aux_layers"] = result.aux_layers;
  settings["draft_vocab"] = vd;
  settings["ttt_steps"] = config.ttt_steps;
  settings["ttt_decay"] = config.ttt_decay;
  settings["ttt_loss_norm"] = config.ttt_loss_norm;
  settings["max_len"] = config.max_len;
  settings["n_eval"] = config.n_eval;

  Eagle3TrainTask task(config, teacher, data, *features, head, n_train);
  ojson recipe = TrainRecipe(settings, config.optim, "specbed train eagle3");
  recipe["features"] = config.features;
  recipe["data"] = data.provenance;
  task.set_recipe(recipe);
  result.loop = RunTrainLoop(task, config.optim, settings, out_dir, options);

  if (result.loop.finished) {
    WriteTrainSummary(out_dir, recipe,
                      {{"head_parameters", result.head_parameters},
                       {"target_parameters", result.target_parameters},
                       {"draft_vocab_coverage", result.draft_vocab_coverage}},
                      result.loop, "eval_top1_step0", config.optim.threads);
    if (options.verbose) {
      std::fprintf(stderr,
                   "eagle3: head %lld params (target %lld); held-out TTT loss %.4f, step-0 top-1 "
                   "%.4f, chain tau estimate %.3f; draft vocab %lld covers %.4f of tokens; train "
                   "%.1f s -> %s\n",
                   static_cast<long long>(result.head_parameters),
                   static_cast<long long>(result.target_parameters), result.loop.eval.loss,
                   result.loop.eval.acceptance_proxy,
                   result.loop.eval.extra["chain_tau_estimate"].get<double>(),
                   static_cast<long long>(vd), result.draft_vocab_coverage,
                   result.loop.train_seconds, out_dir.c_str());
    }
  }
  return result;
}

}  // namespace specbed
