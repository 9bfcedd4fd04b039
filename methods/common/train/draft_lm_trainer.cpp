// Draft LM distillation (see draft_lm_trainer.h and README.md beside it).
// Checked by: tests/train/train_test.cpp.
#include "methods/common/train/draft_lm_trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

#include "base/error.h"
#include "base/hash.h"
#include "base/json_read.h"
#include "base/mapped_file.h"
#include "base/progress.h"
#include "base/timer.h"
#include "harness/engine/ar_generate.h"
#include "methods/common/train/param_device.h"
#include "methods/common/train/train_driver.h"
#include "methods/common/train/train_loop.h"
#include "methods/common/train/train_util.h"
#include "methods/common/train/trainable_llama.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/checkpoint/safetensors.h"
#include "models/model_registry.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

constexpr const char* kDataFormat = "specbed-draft-lm-data-v1";
// Teacher log-probabilities of all training rows are computed once and kept in memory when they
// fit in this many bytes (float32); otherwise every step runs the teacher on its batch.
constexpr int64_t kTeacherCacheBytes = int64_t{2} << 30;

OptimConfig DraftLmOptim(const DraftLmTrainConfig& c) {
  return c.optim;
}

// The run identity: everything that changes the trained weights.
ojson Settings(const DraftLmTrainConfig& c, const LlamaConfig& draft, const std::string& target,
               const std::string& fingerprint) {
  ojson s;
  s["target"] = target;
  s["target_fingerprint"] = fingerprint;
  s["dtype"] = c.dtype;
  s["layers"] = draft.n_layers;
  s["dim"] = draft.dim;
  s["n_heads"] = draft.n_heads;
  s["n_kv_heads"] = draft.n_kv_heads;
  s["hidden_dim"] = draft.hidden_dim;
  s["max_seq_len"] = draft.max_seq_len;
  s["n_sequences"] = c.n_sequences;
  s["n_eval_sequences"] = c.n_eval_sequences;
  s["seq_len"] = c.seq_len;
  s["temperature"] = c.temperature;
  // The optimiser's part of the identity, in the same key order as before the shared loop.
  const ojson optim = OptimSettings(DraftLmOptim(c));
  for (const auto& [key, value] : optim.items()) s[key] = value;
  return s;
}

// The settings that determine the sampled data.
ojson DataSettings(const ojson& s) {
  ojson d;
  for (const char* key : {"target", "target_fingerprint", "dtype", "n_sequences",
                          "n_eval_sequences", "seq_len", "temperature", "seed"}) {
    d[key] = s[key];
  }
  return d;
}

// Sequences of `seq_len` tokens, one row each, int32.
struct TokenData {
  int64_t n_rows = 0, seq_len = 0;
  std::vector<int32_t> tokens;
  const int32_t* Row(int64_t i) const { return tokens.data() + i * seq_len; }
};

TokenData SampleData(LlamaModel& target, const ojson& settings, int32_t bos, bool verbose) {
  TokenData d;
  d.seq_len = settings["seq_len"].get<int64_t>();
  d.n_rows = settings["n_sequences"].get<int64_t>() + settings["n_eval_sequences"].get<int64_t>();
  d.tokens.resize(d.n_rows * d.seq_len);
  const uint64_t seed = settings["seed"].get<uint64_t>();
  GenerationConfig gen;
  gen.sampling.temperature = settings["temperature"].get<double>();
  gen.stop.max_new_tokens = d.seq_len - 1;
  gen.stop.stop_on_eos = false;  // fixed-length rows; what follows an EOS is trained on too
  KvCache cache = target.NewCache(1, d.seq_len);
  std::unique_ptr<ProgressBar> bar;
  if (verbose) bar = std::make_unique<ProgressBar>("sample data", d.n_rows, "seq");
  for (int64_t i = 0; i < d.n_rows; ++i) {
    gen.seed = DeriveSeed(seed, static_cast<uint64_t>(i), 0x64617461);  // "data"
    const GenerationResult r = GenerateAr(target, nullptr, {bos}, gen, cache);
    SPECBED_CHECK(static_cast<int64_t>(r.tokens.size()) == d.seq_len - 1, "sampling sequence ", i,
                  " stopped after ", r.tokens.size(), " of ", d.seq_len - 1, " tokens (",
                  StopReasonName(r.stop_reason), ")");
    int32_t* row = d.tokens.data() + i * d.seq_len;
    row[0] = bos;
    std::copy(r.tokens.begin(), r.tokens.end(), row + 1);
    if (bar) bar->Advance(1);
  }
  return d;
}

// Loads work/data.bin when work/data.json matches `data_settings`, else samples and stores it.
TokenData LoadOrSampleData(LlamaModel& target, const ojson& data_settings, int32_t bos,
                           const std::string& work, bool verbose, double* seconds) {
  const std::string bin = work + "/data.bin", meta = work + "/data.json";
  *seconds = 0;
  if (PathExists(bin) && PathExists(meta)) {
    const ojson m = ojson::parse(ReadFileToString(meta), nullptr, /*allow_exceptions=*/false);
    if (m.is_object() && m.value("format", "") == kDataFormat && m["settings"] == data_settings) {
      TokenData d;
      d.n_rows = m["n_rows"].get<int64_t>();
      d.seq_len = m["seq_len"].get<int64_t>();
      const std::string bytes = ReadFileToString(bin);
      SPECBED_CHECK(bytes.size() == static_cast<size_t>(d.n_rows * d.seq_len) * sizeof(int32_t),
                    bin, ": ", bytes.size(), " bytes, expected ", d.n_rows, " x ", d.seq_len,
                    " int32 tokens (delete it to resample)");
      SPECBED_CHECK(Hex64(Fnv1a64(bytes.data(), bytes.size())) == m["hash"].get<std::string>(), bin,
                    ": content hash does not match ", meta, " (delete both to resample)");
      d.tokens.resize(d.n_rows * d.seq_len);
      std::memcpy(d.tokens.data(), bytes.data(), bytes.size());
      return d;
    }
  }
  const int64_t t0 = NowMicros();
  TokenData d = SampleData(target, data_settings, bos, verbose);
  *seconds = (NowMicros() - t0) * 1e-6;
  const std::string bytes(reinterpret_cast<const char*>(d.tokens.data()),
                          d.tokens.size() * sizeof(int32_t));
  WriteFileAtomically(bin, bytes);
  ojson m;
  m["format"] = kDataFormat;
  m["settings"] = data_settings;
  m["n_rows"] = d.n_rows;
  m["seq_len"] = d.seq_len;
  m["hash"] = Hex64(Fnv1a64(bytes.data(), bytes.size()));
  m["sample_seconds"] = *seconds;
  WriteFileAtomically(meta, m.dump(2) + "\n");
  return d;
}

// Rows `rows` of `data` as int64 [rows.size(), seq_len] on `device`: built on the host, then one
// copy (none on the CPU).
at::Tensor BatchTokens(const TokenData& data, const std::vector<int64_t>& rows,
                       const at::Device& device) {
  at::Tensor t = at::empty({static_cast<int64_t>(rows.size()), data.seq_len}, at::kLong);
  int64_t* p = t.data_ptr<int64_t>();
  for (size_t i = 0; i < rows.size(); ++i) {
    const int32_t* r = data.Row(rows[i]);
    for (int64_t j = 0; j < data.seq_len; ++j) p[i * data.seq_len + j] = r[j];
  }
  return OnDevice(t, device);
}

// Teacher log-probabilities, float32 [batch, T, vocab] on the target's device (owned, no grad);
// tokens int64 [batch, T] on that device.
at::Tensor TeacherLogProbs(LlamaModel& target, const at::Tensor& tokens) {
  KvCache cache = target.NewCache(tokens.size(0), tokens.size(1));
  ForwardOptions fo;
  fo.logits = LogitsMode::kAll;
  const ForwardOutput out = target.Forward(tokens, cache, fo);
  return at::log_softmax(out.logits, -1);
}

// Teacher log-probabilities of training rows [0, n_rows), float32 [n_rows, seq_len, vocab] on the
// target's device, in chunks of `batch` rows; undefined when they would exceed
// kTeacherCacheBytes.
at::Tensor TeacherCache(LlamaModel& target, const TokenData& data, int64_t n_rows, int64_t batch,
                        bool verbose) {
  const int64_t vocab = target.config().vocab_size;
  if (n_rows * data.seq_len * vocab * static_cast<int64_t>(sizeof(float)) > kTeacherCacheBytes) {
    return at::Tensor();
  }
  at::NoGradGuard no_grad;
  const at::Device device = target.device();
  at::Tensor cache = at::empty({n_rows, data.seq_len, vocab}, at::dtype(at::kFloat).device(device));
  std::unique_ptr<ProgressBar> bar;
  if (verbose) bar = std::make_unique<ProgressBar>("teacher logits", n_rows, "seq");
  for (int64_t b0 = 0; b0 < n_rows; b0 += batch) {
    std::vector<int64_t> rows;
    for (int64_t i = b0; i < std::min(n_rows, b0 + batch); ++i) rows.push_back(i);
    cache.narrow(0, b0, static_cast<int64_t>(rows.size()))
        .copy_(TeacherLogProbs(target, BatchTokens(data, rows, device)));
    if (bar) bar->Advance(static_cast<int64_t>(rows.size()));
  }
  return cache;
}

struct EvalStats {
  double kl = 0, top1 = 0, acceptance = 0;
};

// Teacher-forced comparison on the held-out rows [first, first + count), on the draft's device
// (the target's); three host reads per batch.
EvalStats Evaluate(LlamaModel& target, const TrainableLlama& draft, const TokenData& data,
                   int64_t first, int64_t count, int64_t batch) {
  at::NoGradGuard no_grad;
  EvalStats s;
  int64_t positions = 0;
  for (int64_t b0 = 0; b0 < count; b0 += batch) {
    std::vector<int64_t> rows;
    for (int64_t i = b0; i < std::min(count, b0 + batch); ++i) rows.push_back(first + i);
    const at::Tensor tokens = BatchTokens(data, rows, draft.device());
    const at::Tensor t_logp = TeacherLogProbs(target, tokens);
    const at::Tensor d_logp = at::log_softmax(draft.Forward(tokens), -1);
    const at::Tensor t_p = t_logp.exp();
    s.kl += (t_p * (t_logp - d_logp)).sum().item<double>();
    s.top1 += t_logp.argmax(-1).eq(d_logp.argmax(-1)).sum().item<double>();
    s.acceptance += at::minimum(t_p, d_logp.exp()).sum().item<double>();
    positions += tokens.numel();
  }
  s.kl /= positions;
  s.top1 /= positions;
  s.acceptance /= positions;
  return s;
}

void CheckConfig(const DraftLmTrainConfig& c) {
  SPECBED_CHECK(c.layers >= 1 && c.dim >= 2 && c.n_heads >= 1, "draft-lm: --layers, --dim and ",
                "--heads must be positive (got ", c.layers, ", ", c.dim, ", ", c.n_heads, ")");
  SPECBED_CHECK(c.dim % c.n_heads == 0 && (c.dim / c.n_heads) % 2 == 0, "draft-lm: --dim ", c.dim,
                " must be a multiple of --heads ", c.n_heads, " with an even head size");
  SPECBED_CHECK(c.n_kv_heads >= 0 && c.hidden_dim >= 0 && c.max_seq_len >= 0,
                "draft-lm: --kv-heads, --hidden-dim and --max-seq-len must be >= 0 (0 = default)");
  SPECBED_CHECK(c.n_sequences >= 1 && c.n_eval_sequences >= 1 && c.seq_len >= 2,
                "draft-lm: need --n-sequences >= 1, --n-eval-sequences >= 1 and --seq-len >= 2");
  SPECBED_CHECK(c.temperature > 0, "draft-lm: --temperature must be > 0 (sampling), got ",
                c.temperature);
}

}  // namespace

OptimConfig DefaultDraftLmOptim() {
  OptimConfig o = CosineOptim(1200, 16, 1e-2, 1e-3, 30);  // betas (0.9, 0.95), grad clip 1.0
  o.weight_decay = 0.01;
  return o;
}

LlamaConfig DraftLlamaConfig(const DraftLmTrainConfig& c, const LlamaConfig& target) {
  LlamaConfig d;
  d.architecture = "LlamaForCausalLM";
  d.dim = c.dim;
  d.n_layers = c.layers;
  d.n_heads = c.n_heads;
  d.n_kv_heads = c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads;
  d.head_dim = c.n_heads > 0 ? c.dim / c.n_heads : 0;
  d.hidden_dim = c.hidden_dim > 0 ? c.hidden_dim : (8 * c.dim / 3 + 15) / 16 * 16;
  d.vocab_size = target.vocab_size;
  d.max_seq_len = c.max_seq_len > 0 ? c.max_seq_len : target.max_seq_len;
  d.rope_theta = target.rope_theta;
  d.rope_scaling = target.rope_scaling;
  d.norm_eps = target.norm_eps;
  d.tie_embeddings = true;
  d.rope_interleaved = false;
  d.bos_token_id = target.bos_token_id;
  d.eos_token_ids = target.eos_token_ids;
  d.torch_dtype = "float32";
  d.Validate("draft-lm draft config");
  return d;
}

namespace {

// Forward-KL distillation of the draft on the sampled rows, as a TrainTask.
class DraftLmTask : public TrainTask {
 public:
  DraftLmTask(const DraftLmTrainConfig& config, LlamaModel& teacher, const TokenData& data,
              TrainableLlama& draft, bool verbose)
      : config_(config), teacher_(teacher), data_(data), draft_(draft), verbose_(verbose) {}

  std::string Name() const override { return "draft-lm"; }
  std::vector<std::pair<std::string, at::Tensor>> Parameters() const override {
    return draft_.named_parameters();
  }
  int64_t TrainRows() const override { return config_.n_sequences; }
  void Prepare() override {
    const int64_t t0 = NowMicros();
    teacher_cache_ =
        TeacherCache(teacher_, data_, config_.n_sequences, config_.optim.batch, verbose_);
    teacher_seconds += (NowMicros() - t0) * 1e-6;
  }
  at::Tensor Loss(const std::vector<int64_t>& rows) override {
    const at::Device device = draft_.device();
    const at::Tensor tokens = BatchTokens(data_, rows, device);
    at::Tensor t_logp, t_p;
    {
      at::NoGradGuard no_grad;
      t_logp = teacher_cache_.defined()
                   ? teacher_cache_.index_select(0, OnDevice(at::tensor(rows, at::kLong), device))
                   : TeacherLogProbs(teacher_, tokens);
      t_p = t_logp.exp();
    }
    const at::Tensor d_logp = at::log_softmax(draft_.Forward(tokens), -1);
    return (t_p * (t_logp - d_logp)).sum() / static_cast<double>(tokens.numel());
  }
  EvalMetrics Evaluate() override {
    const EvalStats ev = specbed::Evaluate(teacher_, draft_, data_, config_.n_sequences,
                                           config_.n_eval_sequences, config_.optim.batch);
    EvalMetrics m;
    m.loss = ev.kl;
    m.acceptance_proxy = ev.acceptance;
    m.extra["top1_agreement"] = ev.top1;
    m.extra["expected_acceptance_t1"] = ev.acceptance;
    return m;
  }
  // The HF checkpoint, with the training recipe (the run identity) under the extra config.json
  // key "specbed_recipe" (Hugging Face loaders ignore unknown keys).
  void WriteDrafter(const std::string& out_dir) const override {
    WriteHfCheckpoint(out_dir, draft_.config(), ToHost(draft_.HfTensors()), at::kFloat);
    const std::string path = out_dir + "/config.json";
    ojson config = ParseOrderedJsonText(ReadFileToString(path), path);
    config["specbed_recipe"] = recipe_;
    WriteFileAtomically(path, config.dump(2) + "\n");
  }
  void set_recipe(ojson recipe) { recipe_ = std::move(recipe); }

  double teacher_seconds = 0;

 private:
  const DraftLmTrainConfig& config_;
  LlamaModel& teacher_;
  const TokenData& data_;
  TrainableLlama& draft_;
  bool verbose_;
  at::Tensor teacher_cache_;
  ojson recipe_;
};

}  // namespace

DraftLmTrainResult TrainDraftLm(const DraftLmTrainConfig& config, const std::string& out_dir,
                                const DraftLmTrainOptions& options) {
  CheckConfig(config);
  const OptimConfig optim = DraftLmOptim(config);
  CheckOptimConfig(optim, config.n_sequences, "draft-lm");
  const at::Device device = TrainDevice(optim, "draft-lm");
  SPECBED_CHECK(!out_dir.empty(), "draft-lm: -o/--output is required");
  at::set_num_threads(config.optim.threads);

  // The teacher runs on the training device (its ATen forward path off the CPU).
  LoadedTarget target = LoadModel(config.target, ParseDtype(config.dtype), "", device);
  LlamaModel& teacher = *target.model;
  const LlamaConfig& tc = teacher.config();
  SPECBED_CHECK(config.seq_len <= tc.max_seq_len, "draft-lm: --seq-len ", config.seq_len,
                " exceeds the target's max_seq_len ", tc.max_seq_len);
  int32_t bos = static_cast<int32_t>(tc.bos_token_id);
  if (bos < 0 && target.tokenizer) bos = target.tokenizer->bos_id();
  SPECBED_CHECK(bos >= 0, "draft-lm: target '", config.target,
                "' has no BOS token to start the sampled sequences from");

  DraftLmTrainResult result;
  result.draft_config = DraftLlamaConfig(config, tc);
  const LlamaConfig& dc = result.draft_config;
  SPECBED_CHECK(config.seq_len <= dc.max_seq_len, "draft-lm: --seq-len ", config.seq_len,
                " exceeds the draft's --max-seq-len ", dc.max_seq_len);
  result.settings = Settings(config, dc, target.spec.name, TargetFingerprint(teacher));
  const ojson& settings = result.settings;

  const std::string work = out_dir + "/work";
  fs::create_directories(work);
  const TokenData data = LoadOrSampleData(teacher, DataSettings(settings), bos, work,
                                          options.verbose, &result.data_seconds);

  TrainableLlama draft(dc, DeriveSeed(config.optim.seed, 0, 0x696e6974));  // "init", on the CPU
  draft.To(device);
  DraftLmTask task(config, teacher, data, draft, options.verbose);
  ojson recipe = settings;
  recipe["trainer"] = "specbed train draft-lm";
  task.set_recipe(recipe);
  const TrainLoopResult loop = RunTrainLoop(task, optim, settings, out_dir, options);
  result.step = loop.step;
  result.finished = loop.finished;
  result.first_loss = loop.first_loss;
  result.final_loss = loop.final_loss;
  result.train_seconds = loop.train_seconds;
  result.teacher_seconds = task.teacher_seconds;
  if (!result.finished) return result;

  result.eval_kl = loop.eval.loss;
  result.top1_agreement = loop.eval.extra["top1_agreement"].get<double>();
  result.expected_acceptance = loop.eval.acceptance_proxy;
  ojson summary;
  summary["date"] = NowRfc3339();
  summary["settings"] = settings;
  summary["draft_config"] = dc.ToHfJson();
  summary["draft_parameters"] = draft.ParameterCount();
  summary["target_parameters"] = tc.ParameterCount();
  summary["steps"] = loop.step;
  summary["final_train_kl"] = result.final_loss;
  summary["eval_kl"] = result.eval_kl;
  summary["eval_top1_agreement"] = result.top1_agreement;
  summary["eval_expected_acceptance_t1"] = result.expected_acceptance;
  summary["eval_positions"] = config.n_eval_sequences * config.seq_len;
  summary["train_seconds"] = loop.train_seconds;
  summary["teacher_cache_seconds_this_run"] = result.teacher_seconds;
  summary["data_seconds_this_run"] = result.data_seconds;
  summary["threads"] = config.optim.threads;
  summary["device"] = loop.device;
  WriteFileAtomically(out_dir + "/train_summary.json", summary.dump(2) + "\n");
  if (options.verbose) {
    std::fprintf(stderr,
                 "draft-lm: %lld params (target %lld); final train KL %.4f; held-out (%lld "
                 "positions): KL %.4f, top-1 agreement %.4f, expected SpS acceptance at T=1 "
                 "%.4f; train %.1f s (+ teacher cache %.1f s), data %.1f s -> %s\n",
                 static_cast<long long>(draft.ParameterCount()),
                 static_cast<long long>(tc.ParameterCount()), result.final_loss,
                 static_cast<long long>(config.n_eval_sequences * config.seq_len), result.eval_kl,
                 result.top1_agreement, result.expected_acceptance, loop.train_seconds,
                 result.teacher_seconds, result.data_seconds, out_dir.c_str());
  }
  return result;
}

}  // namespace specbed
