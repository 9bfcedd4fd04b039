// DFlash / JetSpec block-head training on regenerated target data (see dflash_trainer.h).
// Checked by: tests/methods/dflash_train_test.cpp.
#include "methods/dflash/dflash_trainer.h"

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
#include "methods/dflash/dflash_checkpoint.h"
#include "models/model_registry.h"

namespace specbed {
namespace {

using ojson = nlohmann::ordered_json;

constexpr uint64_t kDflashInitSalt = 0x64666c736e696e69ULL;  // "dflsnini"
constexpr uint64_t kAnchorSalt = 0x64666c73616e6368ULL;      // "dflsanch"
constexpr uint64_t kEvalSalt = 0x64666c736576616cULL;        // "dflseval"

class DflashTrainTask : public RegenHeadTask {
 public:
  DflashTrainTask(const DflashTrainConfig& config, const RegenHeadDriver& driver,
                  TargetFeatureSource& features, TrainableDflash& head)
      : RegenHeadTask(driver, features, config.optim.batch), config_(config), head_(head) {}

  std::string Name() const override { return config_.variant; }
  std::vector<std::pair<std::string, at::Tensor>> Parameters() const override {
    return head_.named_parameters();
  }
  void BeginStep(int64_t step) override { step_ = step; }

  at::Tensor Loss(const std::vector<int64_t>& rows) override {
    std::vector<uint64_t> seeds;
    for (int64_t r : rows) {
      seeds.push_back(DeriveSeed(
          config_.optim.seed,
          static_cast<uint64_t>(step_) * 0x100000000ULL + static_cast<uint64_t>(r), kAnchorSalt));
    }
    return Compute(rows, seeds).loss;
  }

  EvalMetrics Evaluate() override {
    at::NoGradGuard no_grad;
    const int64_t b = config_.block_size;
    StepFigures per_row(b);
    double tau_sum = 0, blocks = 0, weighted = 0, weights = 0;
    for (const std::vector<int64_t>& rows : HeldOutBatches()) {
      std::vector<uint64_t> seeds;
      for (int64_t i : rows) {
        seeds.push_back(DeriveSeed(config_.optim.seed, static_cast<uint64_t>(i), kEvalSalt));
      }
      const DflashLossResult r = Compute(rows, seeds);
      per_row.Add(r.row_loss, r.row_top1, r.row_count);
      double w_total = 0;
      for (int64_t k = 0; k < b; ++k) w_total += r.row_count[k] * RowWeight(k);
      weighted += r.loss.item<double>() * w_total;
      weights += w_total;
      tau_sum += r.chain_tau * r.blocks;
      blocks += r.blocks;
    }
    EvalMetrics m;
    m.loss = weights > 0 ? weighted / weights : 0;
    const ChainFigures means =
        per_row.Chain(1.0);  // per-row means; row 0 (the bonus token) is dropped
    ojson top1 = means.top1, losses = means.loss;
    top1.erase(0);
    losses.erase(0);
    m.acceptance_proxy = top1[0].get<double>();
    m.extra["row_top1"] = top1;  // block rows 1 .. B-1
    m.extra["row_loss"] = losses;
    // Teacher-forced estimate of the chain's tau at T = 0 (1 + leading correct rows per block).
    m.extra["chain_tau_estimate"] = blocks > 0 ? tau_sum / blocks : 0;
    m.extra["eval_blocks"] = blocks;
    return m;
  }

  void WriteDrafter(const std::string& out_dir) const override {
    WriteDflashCheckpoint(out_dir, head_.config(), ToHost(head_.Tensors()), recipe());
  }

 private:
  double RowWeight(int64_t k) const {
    if (k < 1) return 0;
    return config_.loss.gamma > 0 ? std::exp(-(k - 1) / config_.loss.gamma) : 1.0;
  }

  DflashLossResult Compute(const std::vector<int64_t>& rows, const std::vector<uint64_t>& seeds) {
    TargetFeatures f;
    SequenceBatch host;
    const SequenceBatch batch = Batch(rows, &f, &host);
    // Drawn on the host from the host mask, then one copy to the device.
    const at::Tensor anchors =
        OnDevice(SampleDflashAnchors(host.loss_mask, config_.anchors, seeds), head_.device());
    const at::Tensor logits = head_.Forward(f.hidden, batch.tokens, anchors);
    return DflashBlockLoss(logits, batch.tokens, anchors, batch.loss_mask, f.logits, config_.loss);
  }

  const DflashTrainConfig& config_;
  TrainableDflash& head_;
  int64_t step_ = 0;
};

}  // namespace

OptimConfig DefaultDflashOptim() {
  OptimConfig o = CosineOptim(1000, 16, 3e-3, 3e-4, 40);  // betas (0.9, 0.95), clip 1.0
  o.eval_every = 250;
  return o;
}

DflashTrainConfig DefaultDflashTrainConfig(const std::string& variant) {
  DflashTrainConfig c;
  c.variant = variant;
  c.optim = DefaultDflashOptim();
  if (variant == "dflash") {
    c.causal = false;
    c.loss.kind = DflashLossKind::kCrossEntropy;
    c.loss.gamma = 7.0;
  } else if (variant == "jetspec") {
    c.causal = true;
    c.loss.kind = DflashLossKind::kForwardKl;
    c.loss.gamma = 0;
  } else {
    Fail("unknown block-head variant '", variant, "'; expected dflash or jetspec");
  }
  return c;
}

namespace {

// The flags that need no model, before anything loads.
void CheckDflashTrainFlags(const DflashTrainConfig& config) {
  const std::string& who = config.variant;
  SPECBED_CHECK(!config.data.empty(), who, ": --data (a `specbed regen` file) is required");
  SPECBED_CHECK(config.block_size >= 2 && config.block_size <= 256, who,
                ": --block-size must be in [2, 256], got ", config.block_size);
  SPECBED_CHECK(config.layers >= 1 && config.layers <= 64, who,
                ": --layers must be in [1, 64], got ", config.layers);
  SPECBED_CHECK(config.anchors >= 1, who, ": --anchors must be >= 1, got ", config.anchors);
  SPECBED_CHECK(config.loss.gamma >= 0, who, ": --gamma must be >= 0 (0 = uniform), got ",
                config.loss.gamma);
  SPECBED_CHECK(config.loss.temperature > 0, who, ": --distill-temperature must be > 0, got ",
                config.loss.temperature);
  SPECBED_CHECK(config.max_len >= 3, who, ": --max-len must be >= 3, got ", config.max_len);
  SPECBED_CHECK(config.n_eval >= 1, who, ": --n-eval must be >= 1, got ", config.n_eval);
}

}  // namespace

namespace {

// The head's config: the target's shape unless the flags give one.
DflashConfig DflashHeadConfig(const DflashTrainConfig& config, const LlamaConfig& tc,
                              const std::string& target_name) {
  DflashConfig hc;
  hc.hidden_size = tc.dim;
  hc.intermediate_size = config.intermediate > 0 ? config.intermediate : tc.hidden_dim;
  hc.n_layers = config.layers;
  hc.n_heads = config.heads > 0 ? config.heads : tc.n_heads;
  hc.n_kv_heads =
      config.kv_heads > 0 ? config.kv_heads : (config.heads > 0 ? config.heads : tc.n_kv_heads);
  hc.head_dim = config.head_dim > 0 ? config.head_dim : tc.head_dim;
  hc.vocab_size = tc.vocab_size;
  hc.max_position_embeddings = tc.max_seq_len;
  hc.rms_norm_eps = tc.norm_eps;
  hc.rope_theta = tc.rope_theta;
  hc.rope_scaling = tc.rope_scaling;
  hc.block_size = config.block_size;
  hc.mask_token_id = config.mask_token;
  hc.num_target_layers = tc.FeatureDepth();  // a cost twin's identity layers never count
  hc.target_layer_ids = config.target_layers.empty()
                            ? DefaultDflashTargetLayers(tc.FeatureDepth(), config.layers)
                            : config.target_layers;
  hc.causal = config.causal;
  hc.bos_token_id = tc.bos_token_id;
  hc.eos_token_ids = tc.eos_token_ids;
  hc.torch_dtype = "float32";
  hc.Validate(config.variant + " head for target '" + target_name + "'");
  return hc;
}

// The run identity after the driver's keys: the head's shape and the objective.
void AddDflashSettings(const DflashTrainConfig& config, const DflashConfig& hc, ojson& settings) {
  settings["causal"] = config.causal;
  settings["block_size"] = config.block_size;
  settings["layers"] = config.layers;
  settings["heads"] = hc.n_heads;
  settings["kv_heads"] = hc.n_kv_heads;
  settings["head_dim"] = hc.head_dim;
  settings["intermediate"] = hc.intermediate_size;
  settings["target_layers"] = hc.target_layer_ids;
  settings["mask_token"] = config.mask_token;
  settings["anchors"] = config.anchors;
  settings["loss"] = DflashLossKindName(config.loss.kind);
  settings["gamma"] = config.loss.gamma;
  settings["distill_temperature"] = config.loss.temperature;
}

void ReportDflash(const std::string& who, const DflashTrainResult& result,
                  const std::string& out_dir) {
  std::fprintf(stderr,
               "%s: head %lld params (target %lld); held-out loss %.4f, row-1 top-1 %.4f, "
               "chain tau estimate %.3f; train %.1f s -> %s\n",
               who.c_str(), static_cast<long long>(result.head_parameters),
               static_cast<long long>(result.target_parameters), result.loop.eval.loss,
               result.loop.eval.acceptance_proxy,
               result.loop.eval.extra["chain_tau_estimate"].get<double>(),
               result.loop.train_seconds, out_dir.c_str());
}

}  // namespace

DflashTrainResult TrainDflash(const DflashTrainConfig& config, const std::string& out_dir,
                              const TrainLoopOptions& options) {
  const std::string& who = config.variant;
  CheckDflashTrainFlags(config);
  RegenHeadDriver driver(RegenHeadSpecOf(config, who, config.dtype), out_dir, options);
  const LlamaConfig& tc = driver.target_config();
  SPECBED_CHECK(config.mask_token >= 0 && config.mask_token < tc.vocab_size, who, ": --mask-token ",
                config.mask_token, " is outside the target vocabulary [0, ", tc.vocab_size, ")");
  DflashTrainResult result;
  const DflashConfig hc = DflashHeadConfig(config, tc, driver.target_name());
  result.target_layers = hc.target_layer_ids;
  const std::map<std::string, at::Tensor> init =
      RandomDflashTensors(hc, DeriveSeed(config.optim.seed, 0, kDflashInitSalt));
  const LlamaWeights& w = driver.teacher().weights();
  TrainableDflash head(hc, init, w.tok_embeddings, w.lm_head);  // on the CPU
  head.To(driver.device());
  result.head_parameters = head.ParameterCount();
  result.target_parameters = tc.ParameterCount();
  std::vector<int64_t> layers;
  for (int64_t id : hc.target_layer_ids) layers.push_back(id + 1);  // HF hidden_states
  TargetFeatureSource& features = driver.MakeFeatures(layers);
  result.data_seconds = driver.SecondsSinceStart();

  ojson settings = driver.Identity();
  AddDflashSettings(config, hc, settings);
  DflashTrainTask task(config, driver, features, head);
  result.loop = driver.Run(task, settings, config.optim);
  if (result.loop.finished) {
    driver.WriteSummary(result.loop,
                        {{"head_parameters", result.head_parameters},
                         {"target_parameters", result.target_parameters}},
                        "eval_top1_row1");
    if (options.verbose) ReportDflash(who, result, out_dir);
  }
  return result;
}

}  // namespace specbed
