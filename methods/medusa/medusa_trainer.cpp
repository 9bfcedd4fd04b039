// Medusa-1 head training on regenerated target data (see medusa_trainer.h).
#include "methods/medusa/medusa_trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "base/error.h"
#include "methods/common/train/param_device.h"
#include "methods/common/train/regen.h"
#include "methods/common/train/regen_head_trainer.h"
#include "methods/common/train/target_features.h"
#include "methods/common/train/train_driver.h"
#include "methods/common/train/train_util.h"
#include "methods/medusa/medusa_head.h"
#include "models/model_registry.h"

namespace specbed {
namespace {

constexpr uint64_t kMedusaInitSalt = 0x6d647361696e6974ULL;  // "mdsainit"

using ojson = nlohmann::ordered_json;

// Per-head loss and accuracy over one batch.
struct HeadsLoss {
  at::Tensor loss;  // weighted sum over heads (autograd)
  std::vector<double> head_loss, head_top1, head_count;
};

class MedusaTrainTask : public RegenHeadTask {
 public:
  MedusaTrainTask(const MedusaTrainConfig& config, const RegenHeadDriver& driver,
                  TargetFeatureSource& features, MedusaHead& head)
      : RegenHeadTask(driver, features, config.optim.batch),
        config_(config),
        norm_eps_(driver.target_config().norm_eps),
        head_(head),
        norm_weight_(driver.teacher().weights().final_norm.to(driver.device(), at::kFloat)) {}

  std::string Name() const override { return "medusa"; }
  std::vector<std::pair<std::string, at::Tensor>> Parameters() const override {
    return {head_.tensors.begin(), head_.tensors.end()};
  }
  at::Tensor Loss(const std::vector<int64_t>& rows) override { return Compute(rows).loss; }

  EvalMetrics Evaluate() override {
    at::NoGradGuard no_grad;
    StepFigures heads(head_.config.num_heads);
    for (const std::vector<int64_t>& rows : HeldOutBatches()) {
      const HeadsLoss r = Compute(rows);
      heads.Add(r.head_loss, r.head_top1, r.head_count);
    }
    // A chain of every head's top-1 keeps k + 1 tokens only if heads 0..k all agree with the
    // target (teacher-forced estimate; the sparse tree does better).
    return heads.ChainMetrics(config_.decay, "head");
  }

  void WriteDrafter(const std::string& out_dir) const override {
    MedusaHead copy;
    copy.config = head_.config;
    for (const auto& [name, t] : head_.tensors) copy.tensors[name] = ToHost(t);
    WriteMedusaCheckpoint(out_dir, copy, recipe());
  }

 private:
  HeadsLoss Compute(const std::vector<int64_t>& rows) {
    TargetFeatures f;
    const SequenceBatch batch = Batch(rows, &f);
    at::Tensor normed;
    {
      at::NoGradGuard no_grad;
      const at::Tensor& h = f.hidden;  // [B, T, dim], pre-norm
      normed = h * at::rsqrt(h.pow(2).mean(-1, true) + norm_eps_) * norm_weight_;
    }
    const int64_t b = normed.size(0), t = normed.size(1), d = normed.size(2);
    const at::Tensor logits = MedusaLogits(head_, normed.view({b * t, d}));  // [K, B*T, V]
    const int64_t vocab = logits.size(2);
    HeadsLoss out;
    out.loss = at::zeros({}, normed.options());
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
  double norm_eps_;
  MedusaHead& head_;
  at::Tensor norm_weight_;
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

void ReportMedusa(const MedusaTrainResult& r, const std::string& out_dir) {
  std::fprintf(stderr,
               "medusa: heads %lld params; held-out loss %.4f, head top-1 %s, chain tau "
               "estimate %.3f; train %.1f s -> %s\n",
               static_cast<long long>(r.head_parameters), r.loop.eval.loss,
               r.loop.eval.extra["head_top1"].dump().c_str(),
               r.loop.eval.extra["chain_tau_estimate"].get<double>(), r.loop.train_seconds,
               out_dir.c_str());
}

}  // namespace

OptimConfig DefaultMedusaOptim() {
  OptimConfig o = CosineOptim(800, 16, 1e-3, 1e-4, 40);  // no weight decay, grad clip 1
  o.beta2 = 0.999;
  o.eval_every = 200;
  return o;
}

namespace {

MedusaConfig MedusaHeadsConfig(const MedusaTrainConfig& config, const LlamaConfig& tc,
                               const std::string& target_name) {
  MedusaConfig hc;
  hc.num_heads = config.num_heads;
  hc.num_layers = config.num_layers;
  hc.base_model = target_name;
  hc.base_fields["num_attention_heads"] = tc.n_heads;
  hc.base_fields["num_key_value_heads"] = tc.n_kv_heads;
  hc.base_fields["head_dim"] = tc.head_dim;
  hc.base_fields["intermediate_size"] = tc.hidden_dim;
  hc.base_fields["num_hidden_layers"] = tc.n_layers;
  hc.base_fields["rms_norm_eps"] = tc.norm_eps;
  return hc;
}

}  // namespace

MedusaTrainResult TrainMedusa(const MedusaTrainConfig& config, const std::string& out_dir,
                              const TrainLoopOptions& options) {
  CheckMedusaTrainConfig(config);
  // The teacher runs in float32, and its dtype is not part of the run identity.
  RegenHeadDriver driver(RegenHeadSpecOf(config, "medusa", ""), out_dir, options);
  const LlamaConfig& tc = driver.target_config();
  MedusaHead head = InitMedusaHead(MedusaHeadsConfig(config, tc, driver.target_name()),
                                   driver.teacher().weights().lm_head,
                                   DeriveSeed(config.optim.seed, 0, kMedusaInitSalt));
  MedusaTrainResult result;
  // The heads are made on the CPU; placed on the training device as float32 leaves.
  for (auto& [name, t] : head.tensors) {
    if (t.device() != driver.device()) t = t.to(driver.device());
    t.set_requires_grad(true);
    result.head_parameters += t.numel();
  }
  TargetFeatureSource& features = driver.MakeFeatures({tc.n_layers});

  ojson settings = driver.Identity();
  settings["num_heads"] = config.num_heads;
  settings["num_layers"] = config.num_layers;
  settings["decay"] = config.decay;
  MedusaTrainTask task(config, driver, features, head);
  result.loop = driver.Run(task, settings, config.optim);
  if (result.loop.finished) {
    driver.WriteSummary(result.loop, {{"head_parameters", result.head_parameters}},
                        "eval_top1_head0");
    if (options.verbose) ReportMedusa(result, out_dir);
  }
  return result;
}

}  // namespace specbed
