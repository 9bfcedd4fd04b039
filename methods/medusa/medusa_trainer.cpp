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
#include "models/device.h"
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

  // Per head k, the held-out frequency with which the label (token t + k + 2) is head k's r-th
  // candidate, r < top_k: the per-head accuracies Medusa's sparse-tree search is calibrated on.
  std::vector<std::vector<double>> RankAccuracy(int64_t top_k) {
    at::NoGradGuard no_grad;
    const int64_t heads = head_.config.num_heads;
    at::Tensor hits = at::zeros({heads, top_k}, at::kDouble);
    std::vector<double> count(heads, 0);
    for (const std::vector<int64_t>& rows : HeldOutBatches()) {
      const HeadLogits h = Forward(rows);
      for (int64_t k = 0; k < heads; ++k) {
        at::Tensor lk, labels, mask;
        if (!HeadSlice(h, k, lk, labels, mask)) continue;
        // The label's rank: how many candidates score above it.
        const at::Tensor label_logit = lk.gather(-1, labels.unsqueeze(-1));
        const at::Tensor rank = (lk > label_logit).sum(-1);  // [B, n]
        const at::Tensor kept = mask.to(at::kBool) & (rank < top_k);
        hits[k] += at::bincount(rank.masked_select(kept), {}, top_k).to(at::kCPU, at::kDouble);
        count[k] += mask.sum().item<double>();
      }
    }
    std::vector<std::vector<double>> out(heads, std::vector<double>(top_k, 0));
    for (int64_t k = 0; k < heads; ++k) {
      for (int64_t r = 0; r < top_k && count[k] > 0; ++r)
        out[k][r] = hits[k][r].item<double>() / count[k];
    }
    return out;
  }

  // Sets the heads' calibration (written with them by WriteDrafter).
  void SetCalibration(std::vector<std::vector<double>> rank_accuracy) {
    head_.config.rank_accuracy = std::move(rank_accuracy);
  }

  void WriteDrafter(const std::string& out_dir) const override {
    MedusaHead copy;
    copy.config = head_.config;
    for (const auto& [name, t] : head_.tensors) copy.tensors[name] = ToHost(t);
    WriteMedusaCheckpoint(out_dir, copy, recipe());
  }

 private:
  // Every head's logits over a batch of rows.
  struct HeadLogits {
    SequenceBatch batch;
    at::Tensor logits;  // [K, B * T, V]
    int64_t b = 0, t = 0;
  };
  HeadLogits Forward(const std::vector<int64_t>& rows) {
    TargetFeatures f;
    HeadLogits out;
    out.batch = Batch(rows, &f);
    at::Tensor normed;
    {
      at::NoGradGuard no_grad;
      const at::Tensor& h = f.hidden;  // [B, T, dim], pre-norm
      normed = h * at::rsqrt(h.pow(2).mean(-1, true) + norm_eps_) * norm_weight_;
    }
    out.b = normed.size(0);
    out.t = normed.size(1);
    out.logits = MedusaLogits(head_, normed.view({out.b * out.t, normed.size(2)}));
    return out;
  }
  // Head k's logits [B, n, V], labels (token t + k + 2) and mask [B, n] at the n positions whose
  // label is in the batch; false when there are none.
  static bool HeadSlice(const HeadLogits& h, int64_t k, at::Tensor& lk, at::Tensor& labels,
                        at::Tensor& mask) {
    const int64_t n = h.t - k - 2;
    if (n <= 0) return false;
    lk = h.logits[k].view({h.b, h.t, h.logits.size(2)}).narrow(1, 0, n);
    labels = h.batch.tokens.narrow(1, k + 2, n);
    mask = h.batch.loss_mask.narrow(1, k + 1, n);
    return true;
  }

  HeadsLoss Compute(const std::vector<int64_t>& rows) {
    const HeadLogits h = Forward(rows);
    HeadsLoss out;
    out.loss = at::zeros({}, h.logits.options());
    double weight = 1;
    for (int64_t k = 0; k < head_.config.num_heads; ++k, weight *= config_.decay) {
      at::Tensor lk, labels, mask;
      if (!HeadSlice(h, k, lk, labels, mask)) {
        out.head_loss.push_back(0);
        out.head_top1.push_back(0);
        out.head_count.push_back(0);
        continue;
      }
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
    if (!SameDevice(t.device(), driver.device())) t = t.to(driver.device());
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
    // The sparse tree's calibration (Medusa's per-head top-k accuracies) on the held-out rows,
    // written into the heads' config.json (`specbed_calibration`).
    task.SetCalibration(task.RankAccuracy(kMedusaCalibrationTopK));
    task.WriteDrafter(out_dir);
    driver.WriteSummary(result.loop, {{"head_parameters", result.head_parameters}},
                        "eval_top1_head0");
    if (options.verbose) ReportMedusa(result, out_dir);
  }
  return result;
}

}  // namespace specbed
