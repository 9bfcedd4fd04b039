// SpecBlock training (see specblock_trainer.h).
// Checked by: tests/methods/specblock_test.cpp.
#include "methods/specblock/specblock_trainer.h"

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
#include "methods/eagle3/eagle3_checkpoint.h"
#include "methods/eagle3/eagle3_config.h"
#include "methods/eagle3/eagle3_trainer.h"
#include "models/model_registry.h"

namespace specbed {
namespace {

using ojson = nlohmann::ordered_json;
constexpr uint64_t kSpecBlockInitSalt = 0x7370626c6b696e69ULL;  // "spblkini"
constexpr uint64_t kSplitSalt = 0x7370626c6b73706cULL;          // "spblkspl"

}  // namespace

namespace {

class SpecBlockTrainTask : public RegenHeadTask {
 public:
  SpecBlockTrainTask(const SpecBlockTrainConfig& config, const RegenHeadDriver& driver,
                     TargetFeatureSource& features, SpecBlockModel& model)
      : RegenHeadTask(driver, features, config.optim.batch), config_(config), model_(model) {}

  std::string Name() const override { return "specblock"; }
  std::vector<std::pair<std::string, at::Tensor>> Parameters() const override {
    return model_.named_parameters();
  }
  void BeginStep(int64_t step) override {
    rng_.seed(DeriveSeed(config_.optim.seed, static_cast<uint64_t>(step), kSplitSalt));
    rank_on_ = step >= SpecBlockRankWarmup(config_);
  }
  at::Tensor Loss(const std::vector<int64_t>& rows) override {
    return Compute(rows, rank_on_).loss;
  }

  EvalMetrics Evaluate() override {
    at::NoGradGuard no_grad;
    rng_.seed(DeriveSeed(config_.optim.seed, 0, kSplitSalt ^ 1));
    const int64_t k = config_.block_size;
    std::vector<double> hits(k, 0), counts(k, 0);
    std::array<std::array<double, 4>, 4> conf{};
    double loss = 0, draft = 0, rank = 0, batches = 0;
    for (const std::vector<int64_t>& rows : HeldOutBatches()) {
      const SpecBlockLossResult r = Compute(rows, /*rank=*/true);
      loss += r.loss.item<double>();
      draft += r.draft_loss;
      rank += r.rank_loss;
      batches += 1;
      for (int64_t s = 0; s < k; ++s) {
        hits[s] += r.slot_hits[s];
        counts[s] += r.slot_counts[s];
      }
      for (int a = 0; a < 4; ++a)
        for (int p = 0; p < 4; ++p) conf[a][p] += r.confusion[a][p];
    }
    EvalMetrics m;
    m.loss = batches > 0 ? loss / batches : 0;
    ojson top1 = ojson::array();
    double chain = 1, tau = 1;
    for (int64_t s = 0; s < k; ++s) {
      const double a = counts[s] > 0 ? hits[s] / counts[s] : 0;
      top1.push_back(a);
      chain *= a;
      tau += chain;
    }
    m.acceptance_proxy = top1[0].get<double>();
    m.extra["slot_top1"] = top1;
    m.extra["block_chain_tau_estimate"] = tau;
    m.extra["draft_loss"] = batches > 0 ? draft / batches : 0;
    m.extra["rank_loss"] = batches > 0 ? rank / batches : 0;
    ojson cm = ojson::array();
    double total = 0;
    for (auto& row : conf)
      for (double x : row) total += x;
    ojson freq = ojson::array();
    for (int a = 0; a < 4; ++a) {
      cm.push_back(ojson(std::vector<double>(conf[a].begin(), conf[a].end())));
      double rs = 0;
      for (double x : conf[a]) rs += x;
      freq.push_back(total > 0 ? rs / total : 0);
    }
    m.extra["rank_confusion"] = cm;  // [true bucket][predicted bucket], block 1, mask = 1
    m.extra["bucket_frequency"] = freq;
    m.extra["rank_positions"] = total;
    return m;
  }

  void WriteDrafter(const std::string& out_dir) const override {
    SpecBlockConfig c = model_.config();
    c.recipe = recipe();
    WriteSpecBlockCheckpoint(out_dir, c, ToHost(model_.Tensors()));
  }

 private:
  SpecBlockLossResult Compute(const std::vector<int64_t>& rows, bool rank) {
    SpecBlockLossOptions o;
    o.blocks = config_.blocks;
    o.valid_prefix = config_.valid_prefix;
    o.slot_norm_floor = config_.slot_norm_floor;
    o.rank = rank;
    TargetFeatures f;
    const SequenceBatch batch = Batch(rows, &f);
    return SpecBlockLoss(model_, f.hidden, batch.tokens, f.logits, batch.loss_mask, o, rng_);
  }

  const SpecBlockTrainConfig& config_;
  SpecBlockModel& model_;
  std::mt19937_64 rng_;
  bool rank_on_ = false;
};

}  // namespace

int64_t SpecBlockRankWarmup(const SpecBlockTrainConfig& config) {
  const int64_t steps = config.optim.steps;
  const int64_t w = config.rank_warmup == -1 ? steps * 3 / 8 : config.rank_warmup;
  SPECBED_CHECK(w >= 0 && w < steps, "specblock: --rank-warmup ", config.rank_warmup,
                " must fall inside the run (0 <= w < --steps ", steps,
                ", or -1 = 3/8 of the steps): the rank head would never be trained");
  return w;
}

OptimConfig DefaultSpecBlockOptim() {
  OptimConfig o = CosineOptim(800, 16, 3e-3, 3e-4, 12);  // warmup 1.5% of the steps, as the paper
  o.beta2 = 0.999;
  o.grad_clip = 0.5;
  o.eval_every = 200;
  return o;
}

namespace {

// The drafter's config: the target's shape, `vd` draft tokens, the flags' block and depth.
SpecBlockConfig SpecBlockDrafterConfig(const SpecBlockTrainConfig& config, const LlamaConfig& tc,
                                       int64_t vd, const std::vector<int64_t>& aux,
                                       const std::string& target_name) {
  SpecBlockConfig c;
  c.hidden_size = tc.dim;
  c.intermediate_size = tc.hidden_dim;
  c.n_heads = tc.n_heads;
  c.n_kv_heads = tc.n_kv_heads;
  c.head_dim = tc.head_dim;
  c.target_hidden_size = tc.dim;
  c.vocab_size = tc.vocab_size;
  c.draft_vocab_size = vd;
  c.block_size = config.block_size;
  c.n_layers = config.layers;
  c.n_shifts = config.shifts < 0 ? config.layers : config.shifts;
  c.rank_hidden = config.rank_hidden;
  c.rms_norm_eps = tc.norm_eps;
  c.rope_theta = tc.rope_theta;
  c.max_position_embeddings = tc.max_seq_len;
  c.aux_layer_ids = aux;
  c.Validate("specblock drafter for target '" + target_name + "'");
  return c;
}

// --aux-layers, or the EAGLE-3 default of the target; checked against its depth.
std::vector<int64_t> SpecBlockAuxLayers(const SpecBlockTrainConfig& config, const LlamaConfig& tc) {
  const std::vector<int64_t> aux =
      config.aux_layers.empty() ? DefaultEagle3AuxLayers(tc.FeatureDepth()) : config.aux_layers;
  SPECBED_CHECK(aux.size() == 3, "specblock: --aux-layers needs exactly 3 layer ids");
  for (int64_t l : aux) {
    SPECBED_CHECK(l >= 0 && l <= tc.FeatureDepth(), "specblock: aux layer ", l, " is outside [0, ",
                  tc.FeatureDepth(), "]");
  }
  return aux;
}

// The run identity after the driver's keys.
void AddSpecBlockSettings(const SpecBlockTrainConfig& config, const SpecBlockConfig& c,
                          ojson& settings) {
  settings["aux_layers"] = c.aux_layer_ids;
  settings["draft_vocab"] = c.draft_vocab_size;
  settings["block_size"] = config.block_size;
  settings["layers"] = config.layers;
  settings["shifts"] = c.n_shifts;
  settings["rank_hidden"] = config.rank_hidden;
  settings["blocks"] = config.blocks;
  settings["rank_warmup"] = SpecBlockRankWarmup(config);
  settings["valid_prefix"] = config.valid_prefix;
  settings["slot_norm_floor"] = config.slot_norm_floor;
}

}  // namespace

SpecBlockTrainResult TrainSpecBlock(const SpecBlockTrainConfig& config, const std::string& out_dir,
                                    const TrainLoopOptions& options) {
  SPECBED_CHECK(!config.data.empty(), "specblock: --data (a `specbed regen` file) is required");
  SPECBED_CHECK(config.max_len >= 3, "specblock: --max-len must be >= 3");
  SPECBED_CHECK(config.n_eval >= 1, "specblock: --n-eval must be >= 1");
  SPECBED_CHECK(config.blocks == 1 || config.blocks == 2, "specblock: --blocks must be 1 or 2");
  RegenHeadSpec spec = RegenHeadSpecOf(config, "specblock", config.dtype);
  spec.check_context = false;
  RegenHeadDriver driver(spec, out_dir, options);
  const LlamaConfig& tc = driver.target_config();
  SpecBlockTrainResult result;
  const std::vector<int64_t> aux = SpecBlockAuxLayers(config, tc);
  const int64_t vd = std::min(config.draft_vocab, tc.vocab_size);
  const DraftVocabMap vocab =
      DraftVocabOfRegenRows(driver.data(), driver.n_train(), config.max_len, tc.vocab_size, vd,
                            &result.draft_vocab_coverage);
  const SpecBlockConfig c = SpecBlockDrafterConfig(config, tc, vd, aux, driver.target_name());
  std::map<std::string, at::Tensor> init =
      RandomSpecBlockTensors(c, DeriveSeed(config.optim.seed, 0, kSpecBlockInitSalt));
  init["d2t"] = vocab.d2t;
  init["t2d"] = vocab.t2d;
  HeadPlacement placement;  // float32 leaves on the training device (the default: the CPU)
  placement.device = driver.device();
  SpecBlockModel model(c, init, driver.teacher().weights().tok_embeddings, /*trainable=*/true,
                       placement);
  result.parameters = model.ParameterCount();
  TargetFeatureSource& features = driver.MakeFeatures(aux);

  ojson settings = driver.Identity();
  AddSpecBlockSettings(config, c, settings);
  SpecBlockTrainTask task(config, driver, features, model);
  result.loop = driver.Run(task, settings, config.optim);
  if (result.loop.finished) {
    driver.WriteSummary(
        result.loop,
        {{"parameters", result.parameters}, {"draft_vocab_coverage", result.draft_vocab_coverage}},
        "eval_top1_slot1");
  }
  return result;
}

}  // namespace specbed
