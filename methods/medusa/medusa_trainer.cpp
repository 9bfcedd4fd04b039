// Medusa-1 head training on regenerated target data (see medusa_trainer.h).
#include "methods/medusa/medusa_trainer.h"

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
#include "methods/medusa/medusa_head.h"
#include "models/model_registry.h"

namespace specbed {
namespace {

using ojson = nlohmann::ordered_json;

// Per-head loss and accuracy over one batch.
struct HeadsLoss {
  at::Tensor loss;  // weighted sum over heads (autograd)
  std::vector<double> head_loss, head_top1, head_count;
};

class MedusaTrainTask : public TrainTask {
 public:
  MedusaTrainTask(const MedusaTrainConfig& config, LlamaModel& target, const RegenData& data,
                  TargetFeatureSource& features, MedusaHead& head, int64_t n_train)
      : config_(config),
        target_(target),
        data_(data),
        features_(features),
        head_(head),
        n_train_(n_train),
        norm_weight_(target.weights().final_norm.to(at::kCPU, at::kFloat)) {}

  std::string Name() const override { return "medusa"; }
  std::vector<std::pair<std::string, at::Tensor>> Parameters() const override {
    return {head_.tensors.begin(), head_.tensors.end()};
  }
  int64_t TrainRows() const override { return n_train_; }
  at::Tensor Loss(const std::vector<int64_t>& rows) override { return Compute(rows).loss; }

  EvalMetrics Evaluate() override {
    at::NoGradGuard no_grad;
    const int64_t k_heads = head_.config.num_heads;
    std::vector<double> loss(k_heads, 0), hits(k_heads, 0), count(k_heads, 0);
    for (int64_t b0 = n_train_; b0 < data_.size(); b0 += config_.optim.batch) {
      std::vector<int64_t> rows;
      for (int64_t i = b0; i < std::min(data_.size(), b0 + config_.optim.batch); ++i) {
        rows.push_back(i);
      }
      const HeadsLoss r = Compute(rows);
      for (int64_t k = 0; k < k_heads; ++k) {
        loss[k] += r.head_loss[k] * r.head_count[k];
        hits[k] += r.head_top1[k] * r.head_count[k];
        count[k] += r.head_count[k];
      }
    }
    EvalMetrics m;
    ojson top1 = ojson::array(), losses = ojson::array();
    double weight = 1, chain = 1, tau = 1;
    for (int64_t k = 0; k < k_heads; ++k) {
      const double lk = count[k] > 0 ? loss[k] / count[k] : 0;
      const double ak = count[k] > 0 ? hits[k] / count[k] : 0;
      m.loss += weight * lk;
      weight *= config_.decay;
      top1.push_back(ak);
      losses.push_back(lk);
      chain *= ak;
      tau += chain;
    }
    m.acceptance_proxy = top1[0].get<double>();
    m.extra["head_top1"] = top1;
    m.extra["head_loss"] = losses;
    // A chain of every head's top-1 keeps k + 1 tokens only if heads 0..k all agree with the
    // target (teacher-forced estimate; the sparse tree does better).
    m.extra["chain_tau_estimate"] = tau;
    m.extra["eval_positions_head0"] = count[0];
    return m;
  }

  void WriteDrafter(const std::string& out_dir) const override {
    MedusaHead copy;
    copy.config = head_.config;
    for (const auto& [name, t] : head_.tensors) copy.tensors[name] = t.detach();
    WriteMedusaCheckpoint(out_dir, copy, recipe_);
  }

  void set_recipe(ojson recipe) { recipe_ = std::move(recipe); }

 private:
  HeadsLoss Compute(const std::vector<int64_t>& rows) {
    const SequenceBatch batch = MakeSequenceBatch(data_, rows, config_.max_len);
    at::Tensor normed;
    {
      at::NoGradGuard no_grad;
      const at::Tensor h = features_.Get(rows, batch).hidden;  // [B, T, dim], pre-norm
      normed = h * at::rsqrt(h.pow(2).mean(-1, true) + target_.config().norm_eps) * norm_weight_;
    }
    const int64_t b = normed.size(0), t = normed.size(1), d = normed.size(2);
    const at::Tensor logits = MedusaLogits(head_, normed.view({b * t, d}));  // [K, B*T, V]
    const int64_t vocab = logits.size(2);
    HeadsLoss out;
    out.loss = at::zeros({}, at::kFloat);
    double weight = 1;
    for (int64_t k = 0; k < head_.config.num_heads; ++k, weight *= config_.decay) {
      const int64_t n = t - k - 2;  // positions whose token t + k + 2 is in the batch
      if (n <= 0) {
        out.head_loss.push_back(0);
        out.head_top1.push_back(0);
        out.head_count.push_back(0);
        continue;
      }
      const at::Tensor lk = logits[k].view({b, t, vocab}).narrow(1, 0, n);
      const at::Tensor labels = batch.tokens.narrow(1, k + 2, n);
      const at::Tensor mask = batch.loss_mask.narrow(1, k + 1, n);
      const at::Tensor nll = -at::log_softmax(lk, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1);
      const double count = mask.sum().item<double>();
      const at::Tensor head_loss = (nll * mask).sum() / std::max(count, 1.0);
      out.loss = out.loss + weight * head_loss;
      out.head_loss.push_back(head_loss.item<double>());
      const at::Tensor hit = (lk.argmax(-1) == labels).to(at::kFloat);
      out.head_top1.push_back(count > 0 ? (hit * mask).sum().item<double>() / count : 0);
      out.head_count.push_back(count);
    }
    return out;
  }

  const MedusaTrainConfig& config_;
  LlamaModel& target_;
  const RegenData& data_;
  TargetFeatureSource& features_;
  MedusaHead& head_;
  int64_t n_train_;
  at::Tensor norm_weight_;
  ojson recipe_;
};

void CheckMedusaTrainConfig(const MedusaTrainConfig& c) {
  SPECBED_CHECK(!c.data.empty(), "medusa: --data (a `specbed regen` file) is required");
  SPECBED_CHECK(c.num_heads >= 1 && c.num_heads <= 16, "medusa: --heads must be in [1, 16], got ",
                c.num_heads);
  SPECBED_CHECK(c.num_layers >= 1 && c.num_layers <= 8, "medusa: --layers must be in [1, 8], got ",
                c.num_layers);
  SPECBED_CHECK(c.decay > 0 && c.decay <= 1, "medusa: --decay must be in (0, 1], got ", c.decay);
  SPECBED_CHECK(c.max_len >= c.num_heads + 2, "medusa: --max-len must be >= heads + 2 (",
                c.num_heads + 2, "), got ", c.max_len);
  SPECBED_CHECK(c.n_eval >= 1, "medusa: --n-eval must be >= 1, got ", c.n_eval);
}

void WriteMedusaSummary(const MedusaTrainResult& r, const ojson& recipe, int threads,
                        const std::string& out_dir, bool verbose) {
  WriteTrainSummary(out_dir, recipe, {{"head_parameters", r.head_parameters}}, r.loop,
                    "eval_top1_head0", threads);
  if (verbose) {
    std::fprintf(stderr,
                 "medusa: heads %lld params; held-out loss %.4f, head top-1 %s, chain tau "
                 "estimate %.3f; train %.1f s -> %s\n",
                 static_cast<long long>(r.head_parameters), r.loop.eval.loss,
                 r.loop.eval.extra["head_top1"].dump().c_str(),
                 r.loop.eval.extra["chain_tau_estimate"].get<double>(), r.loop.train_seconds,
                 out_dir.c_str());
  }
}

}  // namespace

OptimConfig DefaultMedusaOptim() {
  OptimConfig o;
  o.steps = 800;
  o.batch = 16;
  o.lr = 1e-3;
  o.min_lr = 1e-4;
  o.warmup = 40;
  o.weight_decay = 0;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.grad_clip = 1.0;
  o.checkpoint_every = 100;
  o.log_every = 10;
  o.eval_every = 200;
  return o;
}

MedusaTrainResult TrainMedusa(const MedusaTrainConfig& config, const std::string& out_dir,
                              const TrainLoopOptions& options) {
  CheckMedusaTrainConfig(config);
  at::set_num_threads(config.optim.threads);
  LoadedTarget target = LoadModel(config.target, at::kFloat);
  LlamaModel& teacher = *target.model;
  const LlamaConfig& tc = teacher.config();
  const RegenData data = LoadRegenData(config.data, tc.vocab_size);
  SPECBED_CHECK(data.size() > config.n_eval, "medusa: '", config.data, "' has ", data.size(),
                " sequences; need more than --n-eval ", config.n_eval);
  SPECBED_CHECK(config.max_len <= tc.max_seq_len, "medusa: --max-len ", config.max_len,
                " exceeds the target's context ", tc.max_seq_len);
  const int64_t n_train = data.size() - config.n_eval;

  MedusaConfig hc;
  hc.num_heads = config.num_heads;
  hc.num_layers = config.num_layers;
  hc.base_model = target.spec.name;
  hc.base_fields["num_attention_heads"] = tc.n_heads;
  hc.base_fields["num_key_value_heads"] = tc.n_kv_heads;
  hc.base_fields["head_dim"] = tc.head_dim;
  hc.base_fields["intermediate_size"] = tc.hidden_dim;
  hc.base_fields["num_hidden_layers"] = tc.n_layers;
  hc.base_fields["rms_norm_eps"] = tc.norm_eps;
  MedusaHead head = InitMedusaHead(hc, teacher.weights().lm_head);
  MedusaTrainResult result;
  for (auto& [name, t] : head.tensors) {
    t.set_requires_grad(true);
    result.head_parameters += t.numel();
  }

  TargetFeatureOptions fo;
  fo.source = config.features;
  fo.layers = {tc.n_layers};
  fo.max_len = config.max_len;
  fo.cache_dir = out_dir + "/work/features";
  fo.store_dtype = ParseFeatureStoreDtype(config.feature_dtype, "medusa");
  fo.disk.verbose = options.verbose;
  std::filesystem::create_directories(out_dir + "/work");
  std::unique_ptr<TargetFeatureSource> features = MakeTargetFeatureSource(teacher, data, fo);

  ojson settings;
  settings["target"] = target.spec.name;
  settings["target_fingerprint"] = TargetFingerprint(teacher);
  settings["data_fingerprint"] = RegenDataFingerprint(data);
  settings["num_heads"] = config.num_heads;
  settings["num_layers"] = config.num_layers;
  settings["decay"] = config.decay;
  settings["max_len"] = config.max_len;
  settings["n_eval"] = config.n_eval;

  MedusaTrainTask task(config, teacher, data, *features, head, n_train);
  ojson recipe = TrainRecipe(settings, config.optim, "specbed train medusa");
  recipe["features"] = config.features;
  recipe["data"] = data.provenance;
  task.set_recipe(recipe);
  result.loop = RunTrainLoop(task, config.optim, settings, out_dir, options);
  if (result.loop.finished) {
    WriteMedusaSummary(result, recipe, config.optim.threads, out_dir, options.verbose);
  }
  return result;
}

}  // namespace specbed
