// EAGLE-3 TTT training on regenerated target data (see eagle3_trainer.h).
// Checked by: tests/methods/eagle3_train_test.cpp.
#include "methods/eagle3/eagle3_trainer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "base/error.h"
#include "methods/common/head_config.h"
#include "methods/common/train/param_device.h"
#include "methods/common/train/regen.h"
#include "methods/common/train/regen_head_trainer.h"
#include "methods/common/train/target_features.h"
#include "methods/common/train/train_driver.h"
#include "methods/common/train/train_util.h"
#include "methods/eagle3/eagle3_checkpoint.h"
#include "methods/eagle3/trainable_eagle3.h"
#include "models/model_registry.h"

namespace specbed {
namespace {

using ojson = nlohmann::ordered_json;

constexpr uint64_t kEagle3InitSalt = 0x65616733696e6974ULL;  // "eag3init"

class Eagle3TrainTask : public RegenHeadTask {
 public:
  Eagle3TrainTask(const Eagle3TrainConfig& config, const RegenHeadDriver& driver,
                  TargetFeatureSource& features, TrainableEagle3& head)
      : RegenHeadTask(driver, features, config.optim.batch),
        config_(config),
        loss_norm_(ParseTttLossNorm(config.ttt_loss_norm)),
        head_(head) {}

  std::string Name() const override { return "eagle3"; }
  std::vector<std::pair<std::string, at::Tensor>> Parameters() const override {
    return head_.named_parameters();
  }

  at::Tensor Loss(const std::vector<int64_t>& rows) override { return Compute(rows).loss; }

  EvalMetrics Evaluate() override {
    at::NoGradGuard no_grad;
    StepFigures steps(config_.ttt_steps);
    for (const std::vector<int64_t>& rows : HeldOutBatches()) {
      const TttLossResult r = Compute(rows);
      steps.Add(r.step_loss, r.step_top1, r.step_count);
    }
    // A chain drafted greedily accepts k+1 tokens only if steps 0..k all agree with the target:
    // tau_chain = 1 + sum_k prod_{j<=k} top1_j (teacher-forced estimate; trees do better).
    return steps.ChainMetrics(config_.ttt_decay, "step");
  }

  void WriteDrafter(const std::string& out_dir) const override {
    WriteEagle3Checkpoint(out_dir, head_.config(), ToHost(head_.Tensors()), recipe());
  }

 private:
  TttLossResult Compute(const std::vector<int64_t>& rows) {
    TargetFeatures f;
    const SequenceBatch batch = Batch(rows, &f);
    const auto logits = head_.Forward(f.hidden, batch.tokens, config_.ttt_steps);
    return Eagle3TttLoss(logits, f.logits, batch.loss_mask, head_.draft_ids(), head_.t2d(),
                         config_.ttt_decay, loss_norm_);
  }

  const Eagle3TrainConfig& config_;
  TttLossNorm loss_norm_;  // parsed once from config_.ttt_loss_norm
  TrainableEagle3& head_;
};

}  // namespace

OptimConfig DefaultEagle3Optim() {
  OptimConfig o = CosineOptim(800, 16, 3e-3, 3e-4, 40);  // betas (0.9, 0.95), no weight decay
  o.grad_clip = 0.5;
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

namespace {

// The flags that need no model, before anything loads.
void CheckEagle3TrainFlags(const Eagle3TrainConfig& config) {
  SPECBED_CHECK(!config.data.empty(), "eagle3: --data (a `specbed regen` file) is required");
  SPECBED_CHECK(config.ttt_steps >= 1 && config.ttt_steps <= 32, "eagle3: --ttt-steps must be in ",
                "[1, 32], got ", config.ttt_steps);
  ParseTttLossNorm(config.ttt_loss_norm);  // fails naming the choices
  SPECBED_CHECK(config.ttt_decay > 0 && config.ttt_decay <= 1, "eagle3: --ttt-decay must be in ",
                "(0, 1], got ", config.ttt_decay);
  SPECBED_CHECK(config.max_len >= 3, "eagle3: --max-len must be >= 3, got ", config.max_len);
  SPECBED_CHECK(config.n_eval >= 1, "eagle3: --n-eval must be >= 1, got ", config.n_eval);
  SPECBED_CHECK(config.draft_vocab >= 1, "eagle3: --draft-vocab must be >= 1");
}

// --aux-layers, or the EAGLE-3 default of the target; checked against its depth.
std::vector<int64_t> Eagle3AuxLayers(const Eagle3TrainConfig& config, const LlamaConfig& tc) {
  const std::vector<int64_t> aux =
      config.aux_layers.empty() ? DefaultEagle3AuxLayers(tc.FeatureDepth()) : config.aux_layers;
  SPECBED_CHECK(aux.size() == static_cast<size_t>(kEagle3AuxLayers),
                "eagle3: --aux-layers needs exactly ", kEagle3AuxLayers, " layer ids");
  for (int64_t l : aux) {
    SPECBED_CHECK(l >= 0 && l <= tc.FeatureDepth(), "eagle3: aux layer ", l, " is outside [0, ",
                  tc.FeatureDepth(), "] (hidden_states numbering of a ", tc.FeatureDepth(),
                  "-layer target)");
  }
  return aux;
}

// The head's config: the target's shape, a draft vocabulary of `vd` tokens.
Eagle3Config Eagle3HeadConfig(const LlamaConfig& tc, int64_t vd, const std::vector<int64_t>& aux,
                              const std::string& target_name) {
  Eagle3Config hc;
  CopyLayerFields(tc, hc);  // sizes, heads, RoPE, norm eps, bos/eos (torch_dtype is set on save)
  hc.target_hidden_size = tc.dim;
  hc.draft_vocab_size = vd;
  hc.aux_layer_ids = aux;
  hc.Validate("eagle3 head for target '" + target_name + "'");
  return hc;
}

void ReportEagle3(const Eagle3TrainResult& result, int64_t vd, const std::string& out_dir) {
  std::fprintf(stderr,
               "eagle3: head %lld params (target %lld); held-out TTT loss %.4f, step-0 top-1 "
               "%.4f, chain tau estimate %.3f; draft vocab %lld covers %.4f of tokens; train "
               "%.1f s -> %s\n",
               static_cast<long long>(result.head_parameters),
               static_cast<long long>(result.target_parameters), result.loop.eval.loss,
               result.loop.eval.acceptance_proxy,
               result.loop.eval.extra["chain_tau_estimate"].get<double>(),
               static_cast<long long>(vd), result.draft_vocab_coverage, result.loop.train_seconds,
               out_dir.c_str());
}

}  // namespace

Eagle3TrainResult TrainEagle3(const Eagle3TrainConfig& config, const std::string& out_dir,
                              const TrainLoopOptions& options) {
  CheckEagle3TrainFlags(config);
  RegenHeadDriver driver(RegenHeadSpecOf(config, "eagle3", config.dtype), out_dir, options);
  const LlamaConfig& tc = driver.target_config();
  Eagle3TrainResult result;
  result.aux_layers = Eagle3AuxLayers(config, tc);

  // Draft vocabulary: the most frequent supervised (response) tokens of the training rows.
  const int64_t vd = std::min(config.draft_vocab, tc.vocab_size);
  const DraftVocabMap vocab =
      DraftVocabOfRegenRows(driver.data(), driver.n_train(), config.max_len, tc.vocab_size, vd,
                            &result.draft_vocab_coverage);
  const Eagle3Config hc = Eagle3HeadConfig(tc, vd, result.aux_layers, driver.target_name());
  std::map<std::string, at::Tensor> init =
      RandomEagle3Tensors(hc, DeriveSeed(config.optim.seed, 0, kEagle3InitSalt));
  init[kEagle3D2t] = vocab.d2t;
  init[kEagle3T2d] = vocab.t2d;
  TrainableEagle3 head(hc, init, driver.teacher().weights().tok_embeddings);  // on the CPU
  head.To(driver.device());
  result.head_parameters = head.ParameterCount();
  result.target_parameters = tc.ParameterCount();
  TargetFeatureSource& features = driver.MakeFeatures(result.aux_layers);
  result.data_seconds = driver.SecondsSinceStart();

  ojson settings = driver.Identity();
  settings["aux_layers"] = result.aux_layers;
  settings["draft_vocab"] = vd;
  settings["ttt_steps"] = config.ttt_steps;
  settings["ttt_decay"] = config.ttt_decay;
  settings["ttt_loss_norm"] = config.ttt_loss_norm;
  Eagle3TrainTask task(config, driver, features, head);
  result.loop = driver.Run(task, settings, config.optim);
  if (result.loop.finished) {
    driver.WriteSummary(result.loop,
                        {{"head_parameters", result.head_parameters},
                         {"target_parameters", result.target_parameters},
                         {"draft_vocab_coverage", result.draft_vocab_coverage}},
                        "eval_top1_step0");
    if (options.verbose) ReportEagle3(result, vd, out_dir);
  }
  return result;
}

}  // namespace specbed
