// DFlash / JetSpec block-head training on regenerated target data (see dflash_trainer.h).
// Checked by: tests/methods/dflash_train_test.cpp.
#include "methods/dflash/dflash_trainer.h"

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
#include "methods/dflash/dflash_checkpoint.h"
#include "models/model_registry.h"

namespace specbed {
namespace {

using ojson = nlohmann::ordered_json;

constexpr uint64_t kInitSalt = 0x64666c736e696e69ULL;    // "dflsnini"
constexpr uint64_t kAnchorSalt = 0x64666c73616e6368ULL;  // "dflsanch"
constexpr uint64_t kEvalSalt = 0x64666c736576616cULL;    // "dflseval"

class DflashTrainTask : public TrainTask {
 public:
  DflashTrainTask(const DflashTrainConfig& config, const RegenData& data,
                  TargetFeatureSource& features, TrainableDflash& head, int64_t n_train)
      : config_(config), data_(data), features_(features), head_(head), n_train_(n_train) {}

  std::string Name() const override { return config_.variant; }
  std::vector<std::pair<std::string, at::Tensor>> Parameters() const override {
    return head_.named_parameters();
  }
  int64_t TrainRows() const override { return n_train_; }
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
    const int64_t n = data_.size(), b = config_.block_size;
    std::vector<double> loss(b, 0), hits(b, 0), count(b, 0);
    double tau_sum = 0, blocks = 0, weighted = 0, weights = 0;
    for (int64_t b0 = n_train_; b0 < n; b0 += config_.optim.batch) {
      std::vector<int64_t> rows;
      std::vector<uint64_t> seeds;
      for (int64_t i = b0; i < std::min(n, b0 + config_.optim.batch); ++i) {
        rows.push_back(i);
        seeds.push_back(DeriveSeed(config_.optim.seed, static_cast<uint64_t>(i), kEvalSalt));
      }
      const DflashLossResult r = Compute(rows, seeds);
      double w_total = 0;
      for (int64_t k = 0; k < b; ++k) {
        loss[k] += r.row_loss[k] * r.row_count[k];
        hits[k] += r.row_top1[k] * r.row_count[k];
        count[k] += r.row_count[k];
        w_total += r.row_count[k] * RowWeight(k);
      }
      weighted += r.loss.item<double>() * w_total;
      weights += w_total;
      tau_sum += r.chain_tau * r.blocks;
      blocks += r.blocks;
    }
    EvalMetrics m;
    m.loss = weights > 0 ? weighted / weights : 0;
    ojson top1 = ojson::array(), losses = ojson::array();
    for (int64_t k = 1; k < b; ++k) {
      top1.push_back(count[k] > 0 ? hits[k] / count[k] : 0);
      losses.push_back(count[k] > 0 ? loss[k] / count[k] : 0);
    }
    m.acceptance_proxy = top1[0].get<double>();
    m.extra["row_top1"] = top1;  // block rows 1 .. B-1
    m.extra["row_loss"] = losses;
    // Teacher-forced estimate of the chain's tau at T = 0 (1 + leading correct rows per block).
    m.extra["chain_tau_estimate"] = blocks > 0 ? tau_sum / blocks : 0;
    m.extra["eval_blocks"] = blocks;
    return m;
  }

  void WriteDrafter(const std::string& out_dir) const override {
    WriteDflashCheckpoint(out_dir, head_.config(), head_.Tensors(), recipe_);
  }

  void set_recipe(ojson recipe) { recipe_ = std::move(recipe); }

 private:
  double RowWeight(int64_t k) const {
    if (k < 1) return 0;
    return config_.loss.gamma > 0 ? std::exp(-(k - 1) / config_.loss.gamma) : 1.0;
  }

  DflashLossResult Compute(const std::vector<int64_t>& rows, const std::vector<uint64_t>& seeds) {
    const SequenceBatch batch = MakeSequenceBatch(data_, rows, config_.max_len);
    TargetFeatures f;
    {
      at::NoGradGuard no_grad;
      f = features_.Get(rows, batch);
    }
    const at::Tensor anchors = SampleDflashAnchors(batch.loss_mask, config_.anchors, seeds);
    const at::Tensor logits = head_.Forward(f.hidden, batch.tokens, anchors);
    return DflashBlockLoss(logits, batch.tokens, anchors, batch.loss_mask, f.logits, config_.loss);
  }

  const DflashTrainConfig& config_;
  const RegenData& data_;
  TargetFeatureSource& features_;
  TrainableDflash& head_;
  int64_t n_train_;
  int64_t step_ = 0;
  ojson recipe_;
};

}  // namespace

OptimConfig DefaultDflashOptim() {
  OptimConfig o;
  o.steps = 1000;
  o.batch = 16;
  o.lr = 3e-3;
  o.min_lr = 3e-4;
  o.warmup = 40;
  o.weight_decay = 0;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.grad_clip = 1.0;
  o.checkpoint_every = 100;
  o.log_every = 10;
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

DflashTrainResult TrainDflash(const DflashTrainConfig& config, const std::string& out_dir,
                              const TrainLoopOptions& options) {
  const std::string& who = config.variant;
  CheckDflashTrainFlags(config);
  at::set_num_threads(config.optim.threads);

  DflashTrainResult result;
  const int64_t t0 = NowMicros();
  LoadedTarget target = LoadModel(config.target, ParseDtype(config.dtype));
  LlamaModel& teacher = *target.model;
  const LlamaConfig& tc = teacher.config();
  const RegenData data = LoadRegenData(config.data, tc.vocab_size);
  SPECBED_CHECK(data.size() > config.n_eval, who, ": '", config.data, "' has ", data.size(),
                " sequences; need more than --n-eval ", config.n_eval);
  SPECBED_CHECK(config.max_len <= tc.max_seq_len, who, ": --max-len ", config.max_len,
                " exceeds the target's context ", tc.max_seq_len);
  SPECBED_CHECK(config.mask_token >= 0 && config.mask_token < tc.vocab_size, who, ": --mask-token ",
                config.mask_token, " is outside the target vocabulary [0, ", tc.vocab_size, ")");
  const int64_t n_train = data.size() - config.n_eval;

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
  hc.Validate(who + " head for target '" + target.spec.name + "'");
  result.target_layers = hc.target_layer_ids;

  const std::map<std::string, at::Tensor> init =
      RandomDflashTensors(hc, DeriveSeed(config.optim.seed, 0, kInitSalt));
  const LlamaWeights& w = teacher.weights();
  TrainableDflash head(hc, init, w.tok_embeddings, w.lm_head);
  result.head_parameters = head.ParameterCount();
  result.target_parameters = tc.ParameterCount();

  TargetFeatureOptions fo;
  fo.source = config.features;
  for (int64_t id : hc.target_layer_ids) fo.layers.push_back(id + 1);  // HF hidden_states
  fo.max_len = config.max_len;
  fo.cache_dir = out_dir + "/work/features";
  fo.store_dtype = ParseFeatureStoreDtype(config.feature_dtype, who);
  fo.disk.verbose = options.verbose;
  std::filesystem::create_directories(out_dir + "/work");
  std::unique_ptr<TargetFeatureSource> features = MakeTargetFeatureSource(teacher, data, fo);
  result.data_seconds = (NowMicros() - t0) * 1e-6;

  ojson settings;
  settings["target"] = target.spec.name;
  settings["target_fingerprint"] = TargetFingerprint(teacher);
  settings["dtype"] = config.dtype;
  settings["data_fingerprint"] = RegenDataFingerprint(data);
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
  settings["max_len"] = config.max_len;
  settings["n_eval"] = config.n_eval;

  DflashTrainTask task(config, data, *features, head, n_train);
  ojson recipe = TrainRecipe(settings, config.optim, "specbed train " + config.variant);
  recipe["features"] = config.features;
  recipe["data"] = data.provenance;
  task.set_recipe(recipe);
  result.loop = RunTrainLoop(task, config.optim, settings, out_dir, options);

  if (result.loop.finished) {
    WriteTrainSummary(out_dir, recipe,
                      {{"head_parameters", result.head_parameters},
                       {"target_parameters", result.target_parameters}},
                      result.loop, "eval_top1_row1", config.optim.threads);
    if (options.verbose) {
      std::fprintf(stderr,
                   "%s: head %lld params (target %lld); held-out loss %.4f, row-1 top-1 %.4f, "
                   "chain tau estimate %.3f; train %.1f s -> %s\n",
                   who.c_str(), static_cast<long long>(result.head_parameters),
                   static_cast<long long>(result.target_parameters), result.loop.eval.loss,
                   result.loop.eval.acceptance_proxy,
                   result.loop.eval.extra["chain_tau_estimate"].get<double>(),
                   result.loop.train_seconds, out_dir.c_str());
    }
  }
  return result;
}

}  // namespace specbed
