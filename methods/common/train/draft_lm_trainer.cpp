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

#include "harness/base/error.h"
#include "harness/base/hash.h"
#include "harness/base/mapped_file.h"
#include "harness/base/progress.h"
#include "harness/base/timer.h"
#include "harness/engine/ar_generate.h"
#include "methods/common/train/trainable_llama.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/checkpoint/safetensors.h"
#include "models/model_registry.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

constexpr const char* kStateFormat = "specbed-draft-lm-train-state-v1";
constexpr const char* kDataFormat = "specbed-draft-lm-data-v1";
constexpr double kAdamEps = 1e-8;
constexpr size_t kLossWindow = 20;
// Teacher log-probabilities of all training rows are computed once and kept in memory when they
// fit in this many bytes (float32); otherwise every step runs the teacher on its batch.
constexpr int64_t kTeacherCacheBytes = int64_t{2} << 30;

// Deterministic 64-bit seed from (seed, index, salt).
uint64_t DeriveSeed(uint64_t seed, uint64_t index, uint64_t salt) {
  const uint64_t words[3] = {seed, index, salt};
  return Fnv1a64(words, sizeof(words));
}

void WriteFileAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    SPECBED_CHECK(out.good(), "cannot write '", tmp, "'");
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    SPECBED_CHECK(out.good(), "write failed for '", tmp, "'");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  SPECBED_CHECK(!ec, "cannot rename '", tmp, "' to '", path, "': ", ec.message());
}

// FNV-1a over the bytes of a few weight tensors: identifies the target's weights cheaply.
std::string TargetFingerprint(const LlamaModel& model) {
  const LlamaWeights& w = model.weights();
  std::vector<at::Tensor> parts = {w.tok_embeddings, w.final_norm, w.layers.front().wqkv,
                                   w.layers.back().w_down};
  if (!w.lm_head.is_same(w.tok_embeddings)) parts.push_back(w.lm_head);
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const at::Tensor& t : parts) {
    const at::Tensor c = t.contiguous();
    h = Fnv1a64(c.data_ptr(), c.numel() * c.element_size(), h);
  }
  return Hex64(h);
}

// Flag name of a settings key, for error messages.
std::string FlagName(const std::string& key) {
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
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
  s["steps"] = c.steps;
  s["batch"] = c.batch;
  s["lr"] = c.lr;
  s["min_lr"] = c.min_lr;
  s["warmup"] = c.warmup;
  s["weight_decay"] = c.weight_decay;
  s["beta1"] = c.beta1;
  s["beta2"] = c.beta2;
  s["grad_clip"] = c.grad_clip;
  s["seed"] = c.seed;
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

// Throws naming the first setting that differs between a stored run and this one.
void CheckSameSettings(const ojson& stored, const ojson& wanted, const std::string& where) {
  for (const auto& [key, value] : wanted.items()) {
    const bool has = stored.contains(key);
    if (has && stored[key] == value) continue;
    const std::string hint =
        "; pass --restart to discard it (or resume with the same settings, or use another --out)";
    if (key == "target_fingerprint") {
      Fail(where, " holds a run trained on other target weights (fingerprint ",
           has ? stored[key].dump() : "none", ", this target's ", value.dump(), ")", hint);
    }
    Fail(where, " holds a run with different settings: '", key, "' (", FlagName(key), ") is ",
         has ? stored[key].dump() : "absent", " there but ", value.dump(), " now", hint);
  }
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

// Rows `rows` of `data` as int64 [rows.size(), seq_len].
at::Tensor BatchTokens(const TokenData& data, const std::vector<int64_t>& rows) {
  at::Tensor t = at::empty({static_cast<int64_t>(rows.size()), data.seq_len}, at::kLong);
  int64_t* p = t.data_ptr<int64_t>();
  for (size_t i = 0; i < rows.size(); ++i) {
    const int32_t* r = data.Row(rows[i]);
    for (int64_t j = 0; j < data.seq_len; ++j) p[i * data.seq_len + j] = r[j];
  }
  return t;
}

// Teacher log-probabilities, float32 [batch, T, vocab] (owned, no grad).
at::Tensor TeacherLogProbs(LlamaModel& target, const at::Tensor& tokens) {
  KvCache cache = target.NewCache(tokens.size(0), tokens.size(1));
  ForwardOptions fo;
  fo.logits = LogitsMode::kAll;
  const ForwardOutput out = target.Forward(tokens, cache, fo);
  return at::log_softmax(out.logits, -1);
}

// Teacher log-probabilities of training rows [0, n_rows), float32 [n_rows, seq_len, vocab], in
// chunks of `batch` rows; undefined when they would exceed kTeacherCacheBytes.
at::Tensor TeacherCache(LlamaModel& target, const TokenData& data, int64_t n_rows, int64_t batch,
                        bool verbose) {
  const int64_t vocab = target.config().vocab_size;
  if (n_rows * data.seq_len * vocab * static_cast<int64_t>(sizeof(float)) > kTeacherCacheBytes) {
    return at::Tensor();
  }
  at::NoGradGuard no_grad;
  at::Tensor cache = at::empty({n_rows, data.seq_len, vocab}, at::kFloat);
  std::unique_ptr<ProgressBar> bar;
  if (verbose) bar = std::make_unique<ProgressBar>("teacher logits", n_rows, "seq");
  for (int64_t b0 = 0; b0 < n_rows; b0 += batch) {
    std::vector<int64_t> rows;
    for (int64_t i = b0; i < std::min(n_rows, b0 + batch); ++i) rows.push_back(i);
    cache.narrow(0, b0, static_cast<int64_t>(rows.size()))
        .copy_(TeacherLogProbs(target, BatchTokens(data, rows)));
    if (bar) bar->Advance(static_cast<int64_t>(rows.size()));
  }
  return cache;
}

// Shuffled passes over the training rows; the whole state is (rng, perm, cursor).
struct DataOrder {
  std::mt19937_64 rng;
  std::vector<int32_t> perm;
  int64_t cursor = 0;

  std::vector<int64_t> Next(int64_t n_rows, int64_t batch) {
    if (perm.empty() || cursor + batch > static_cast<int64_t>(perm.size())) {
      perm.resize(n_rows);
      for (int64_t i = 0; i < n_rows; ++i) perm[i] = static_cast<int32_t>(i);
      for (int64_t i = n_rows - 1; i > 0; --i) {
        const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
        std::swap(perm[i], perm[j]);
      }
      cursor = 0;
    }
    std::vector<int64_t> rows(perm.begin() + cursor, perm.begin() + cursor + batch);
    cursor += batch;
    return rows;
  }
};

// AdamW (decoupled weight decay, bias-corrected moments), as torch.optim.AdamW.
struct AdamW {
  std::vector<at::Tensor> exp_avg, exp_avg_sq;
  std::vector<bool> decay;
};

double LearningRate(const DraftLmTrainConfig& c, int64_t step) {  // step: 0-based update index
  if (step < c.warmup) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup);
  const int64_t span = std::max<int64_t>(1, c.steps - c.warmup);
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup) / span);
  return c.min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (c.lr - c.min_lr);
}

// One optimiser update from the parameters' .grad(); clears the gradients.
void AdamWStep(TrainableLlama& model, AdamW& opt, const DraftLmTrainConfig& c, double lr,
               int64_t t /* 1-based update count */) {
  at::NoGradGuard no_grad;
  const auto& params = model.named_parameters();
  double scale = 1.0;
  if (c.grad_clip > 0) {
    double sum_sq = 0;
    for (const auto& [name, p] : params) sum_sq += p.grad().pow(2).sum().item<double>();
    const double norm = std::sqrt(sum_sq);
    if (norm > c.grad_clip) scale = c.grad_clip / (norm + 1e-6);
  }
  const double bc1 = 1.0 - std::pow(c.beta1, static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(c.beta2, static_cast<double>(t));
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor p = params[i].second;
    at::Tensor g = p.grad();
    if (scale != 1.0) g = g * scale;
    if (opt.decay[i] && c.weight_decay > 0) p.mul_(1.0 - lr * c.weight_decay);
    opt.exp_avg[i].mul_(c.beta1).add_(g, 1.0 - c.beta1);
    opt.exp_avg_sq[i].mul_(c.beta2).addcmul_(g, g, 1.0 - c.beta2);
    const at::Tensor denom = (opt.exp_avg_sq[i].sqrt() / std::sqrt(bc2)).add_(kAdamEps);
    p.addcdiv_(opt.exp_avg[i], denom, -lr / bc1);
    p.mutable_grad().reset();
  }
}

SafetensorsTensorView F32View(const std::string& name, const at::Tensor& t) {
  return {name, SafetensorsDtype::kF32, t.sizes().vec(), t.data_ptr<float>(),
          static_cast<size_t>(t.numel()) * sizeof(float)};
}

at::Tensor TensorFromEntry(const SafetensorsEntry& e, const std::string& path) {
  SPECBED_CHECK(e.dtype == SafetensorsDtype::kF32, path, ": tensor '", e.name, "' is ",
                SafetensorsDtypeName(e.dtype), ", expected F32");
  at::Tensor t = at::empty(e.shape, at::kFloat);
  std::memcpy(t.data_ptr<float>(), e.data, e.nbytes);
  return t;
}

struct TrainState {
  int64_t step = 0;
  double train_seconds = 0;
  std::vector<double> loss_window;
};

void SaveState(const std::string& path, const TrainableLlama& model, const AdamW& opt,
               const DataOrder& order, const TrainState& st, const ojson& settings) {
  std::vector<at::Tensor> keep;  // detached views must outlive the write
  std::vector<SafetensorsTensorView> views;
  const auto& params = model.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    keep.push_back(params[i].second.detach().contiguous());
    views.push_back(F32View("param/" + params[i].first, keep.back()));
    views.push_back(F32View("exp_avg/" + params[i].first, opt.exp_avg[i]));
    views.push_back(F32View("exp_avg_sq/" + params[i].first, opt.exp_avg_sq[i]));
  }
  views.push_back({"order/perm",
                   SafetensorsDtype::kI32,
                   {static_cast<int64_t>(order.perm.size())},
                   order.perm.data(),
                   order.perm.size() * sizeof(int32_t)});
  std::ostringstream rng;
  rng << order.rng;
  std::map<std::string, std::string> meta;
  meta["format"] = kStateFormat;
  meta["settings"] = settings.dump();
  meta["step"] = std::to_string(st.step);
  meta["order_cursor"] = std::to_string(order.cursor);
  meta["order_rng"] = rng.str();
  meta["train_seconds"] = ojson(st.train_seconds).dump();
  meta["loss_window"] = ojson(st.loss_window).dump();
  WriteSafetensors(path, views, meta);
}

// Reads the stored settings of a train state (for the mismatch check before anything is loaded).
ojson ReadStateSettings(const std::string& path) {
  const auto file = SafetensorsFile::Open(path);
  const auto& meta = file->metadata();
  SPECBED_CHECK(meta.count("format") && meta.at("format") == kStateFormat, path,
                ": not a draft-lm train state (metadata format != ", kStateFormat, ")");
  SPECBED_CHECK(meta.count("settings"), path, ": metadata has no 'settings'");
  return ojson::parse(meta.at("settings"));
}

void LoadState(const std::string& path, TrainableLlama& model, AdamW& opt, DataOrder& order,
               TrainState& st) {
  const auto file = SafetensorsFile::Open(path);
  const auto& meta = file->metadata();
  for (const char* key : {"step", "order_cursor", "order_rng", "train_seconds", "loss_window"}) {
    SPECBED_CHECK(meta.count(key), path, ": metadata has no '", key, "'");
  }
  auto find = [&](const std::string& name) -> const SafetensorsEntry& {
    const SafetensorsEntry* e = file->Find(name);
    SPECBED_CHECK(e != nullptr, path, ": missing tensor '", name, "'");
    return *e;
  };
  std::map<std::string, at::Tensor> params;
  const auto& named = model.named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    const std::string& name = named[i].first;
    params[name] = TensorFromEntry(find("param/" + name), path);
    opt.exp_avg[i] = TensorFromEntry(find("exp_avg/" + name), path);
    opt.exp_avg_sq[i] = TensorFromEntry(find("exp_avg_sq/" + name), path);
    SPECBED_CHECK(opt.exp_avg[i].sizes() == named[i].second.sizes() &&
                      opt.exp_avg_sq[i].sizes() == named[i].second.sizes(),
                  path, ": optimizer moments of '", name, "' have the wrong shape");
  }
  model.LoadTensors(params, path);
  const SafetensorsEntry& perm = find("order/perm");
  SPECBED_CHECK(perm.dtype == SafetensorsDtype::kI32 && perm.shape.size() == 1, path,
                ": 'order/perm' must be a 1-D I32 tensor");
  order.perm.resize(perm.shape[0]);
  std::memcpy(order.perm.data(), perm.data, perm.nbytes);
  order.cursor = std::stoll(meta.at("order_cursor"));
  std::istringstream rng(meta.at("order_rng"));
  rng >> order.rng;
  SPECBED_CHECK(!rng.fail(), path, ": malformed 'order_rng'");
  st.step = std::stoll(meta.at("step"));
  st.train_seconds = ojson::parse(meta.at("train_seconds")).get<double>();
  st.loss_window = ojson::parse(meta.at("loss_window")).get<std::vector<double>>();
}

// Keeps the log lines of steps <= `step` (a resumed run rewrites what follows).
void TruncateLog(const std::string& path, int64_t step) {
  if (!PathExists(path)) return;
  std::istringstream in(ReadFileToString(path));
  std::string kept, line;
  while (std::getline(in, line)) {
    const ojson j = ojson::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].get<int64_t>() <= step) {
      kept += line + "\n";
    }
  }
  WriteFileAtomically(path, kept);
}

struct EvalStats {
  double kl = 0, top1 = 0, acceptance = 0;
};

// Teacher-forced comparison on the held-out rows [first, first + count).
EvalStats Evaluate(LlamaModel& target, const TrainableLlama& draft, const TokenData& data,
                   int64_t first, int64_t count, int64_t batch) {
  at::NoGradGuard no_grad;
  EvalStats s;
  int64_t positions = 0;
  for (int64_t b0 = 0; b0 < count; b0 += batch) {
    std::vector<int64_t> rows;
    for (int64_t i = b0; i < std::min(count, b0 + batch); ++i) rows.push_back(first + i);
    const at::Tensor tokens = BatchTokens(data, rows);
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
                "--n-heads must be positive (got ", c.layers, ", ", c.dim, ", ", c.n_heads, ")");
  SPECBED_CHECK(c.dim % c.n_heads == 0 && (c.dim / c.n_heads) % 2 == 0, "draft-lm: --dim ", c.dim,
                " must be a multiple of --n-heads ", c.n_heads, " with an even head size");
  SPECBED_CHECK(
      c.n_kv_heads >= 0 && c.hidden_dim >= 0 && c.max_seq_len >= 0,
      "draft-lm: --n-kv-heads, --hidden-dim and --max-seq-len must be >= 0 (0 = default)");
  SPECBED_CHECK(c.n_sequences >= 1 && c.n_eval_sequences >= 1 && c.seq_len >= 2,
                "draft-lm: need --n-sequences >= 1, --n-eval-sequences >= 1 and --seq-len >= 2");
  SPECBED_CHECK(c.temperature > 0, "draft-lm: --temperature must be > 0 (sampling), got ",
                c.temperature);
  SPECBED_CHECK(c.steps >= 1 && c.batch >= 1 && c.batch <= c.n_sequences, "draft-lm: need ",
                "--steps >= 1 and 1 <= --batch <= --n-sequences (got ", c.steps, ", ", c.batch,
                ", ", c.n_sequences, ")");
  SPECBED_CHECK(c.lr > 0 && c.min_lr >= 0 && c.min_lr <= c.lr, "draft-lm: need --lr > 0 and ",
                "0 <= --min-lr <= --lr (got ", c.lr, ", ", c.min_lr, ")");
  SPECBED_CHECK(c.warmup >= 0 && c.weight_decay >= 0 && c.grad_clip >= 0,
                "draft-lm: --warmup, --weight-decay and --grad-clip must be >= 0");
  SPECBED_CHECK(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1,
                "draft-lm: --beta1 and --beta2 must be in [0, 1)");
  SPECBED_CHECK(c.checkpoint_every >= 1 && c.log_every >= 1 && c.threads >= 1,
                "draft-lm: --checkpoint-every, --log-every and --threads must be >= 1");
}

}  // namespace

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

DraftLmTrainResult TrainDraftLm(const DraftLmTrainConfig& config, const std::string& out_dir,
                                const DraftLmTrainOptions& options) {
  CheckConfig(config);
  SPECBED_CHECK(!out_dir.empty(), "draft-lm: --out is required");
  SPECBED_CHECK(!(options.resume && options.restart), "draft-lm: --resume and --restart exclude ",
                "each other");
  SPECBED_CHECK(options.stop_after >= 0, "draft-lm: stop_after must be >= 0");
  at::set_num_threads(config.threads);

  LoadedTarget target = LoadModel(config.target, ParseDtype(config.dtype));
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
  const std::string state_path = work + "/train_state.safetensors";
  const std::string log_path = out_dir + "/train_log.jsonl";
  fs::create_directories(work);
  WriteFileAtomically(work + "/.gitignore", "# scratch of specbed train draft-lm\n*\n");
  if (options.restart) {
    fs::remove(state_path);
    fs::remove(log_path);
    fs::remove(out_dir + "/train_summary.json");
  }
  const bool have_state = PathExists(state_path);
  SPECBED_CHECK(have_state || !options.resume, "draft-lm: --resume given but '", out_dir,
                "' holds no train state (", state_path, ")");
  if (have_state) CheckSameSettings(ReadStateSettings(state_path), settings, "'" + out_dir + "'");

  const TokenData data = LoadOrSampleData(teacher, DataSettings(settings), bos, work,
                                          options.verbose, &result.data_seconds);

  TrainableLlama draft(dc, DeriveSeed(config.seed, 0, 0x696e6974));  // "init"
  AdamW opt;
  for (const auto& [name, p] : draft.named_parameters()) {
    opt.exp_avg.push_back(at::zeros_like(p.detach()));
    opt.exp_avg_sq.push_back(at::zeros_like(p.detach()));
    opt.decay.push_back(p.dim() >= 2);
  }
  DataOrder order;
  order.rng.seed(DeriveSeed(config.seed, 0, 0x6f72646572));  // "order"
  TrainState st;
  if (have_state) {
    LoadState(state_path, draft, opt, order, st);
    TruncateLog(log_path, st.step);
  } else {
    WriteFileAtomically(log_path, "");
  }
  if (options.verbose && st.step > 0) {
    std::fprintf(stderr, "draft-lm: resuming '%s' at step %lld of %lld\n", out_dir.c_str(),
                 static_cast<long long>(st.step), static_cast<long long>(config.steps));
  }

  const int64_t end_step =
      options.stop_after > 0 ? std::min(config.steps, options.stop_after) : config.steps;
  std::ofstream log(log_path, std::ios::app);
  SPECBED_CHECK(log.good(), "cannot append to '", log_path, "'");
  auto checkpoint = [&] {
    SaveState(state_path, draft, opt, order, st, settings);
    WriteHfCheckpoint(out_dir, dc, draft.HfTensors(), at::kFloat);
  };
  at::Tensor teacher_cache;
  if (st.step < end_step) {
    const int64_t t0 = NowMicros();
    teacher_cache = TeacherCache(teacher, data, config.n_sequences, config.batch, options.verbose);
    result.teacher_seconds = (NowMicros() - t0) * 1e-6;
  }
  {
    std::unique_ptr<ProgressBar> bar;
    if (options.verbose) {
      bar = std::make_unique<ProgressBar>("train draft-lm",
                                          std::max<int64_t>(0, end_step - st.step), "step");
    }
    bool first = true;
    while (st.step < end_step) {
      const int64_t t0 = NowMicros();
      const std::vector<int64_t> rows = order.Next(config.n_sequences, config.batch);
      const at::Tensor tokens = BatchTokens(data, rows);
      at::Tensor t_logp, t_p;
      {
        at::NoGradGuard no_grad;
        t_logp = teacher_cache.defined()
                     ? teacher_cache.index_select(0, at::tensor(rows, at::kLong))
                     : TeacherLogProbs(teacher, tokens);
        t_p = t_logp.exp();
      }
      const at::Tensor d_logp = at::log_softmax(draft.Forward(tokens), -1);
      const at::Tensor loss = (t_p * (t_logp - d_logp)).sum() / static_cast<double>(tokens.numel());
      loss.backward();
      const double lr = LearningRate(config, st.step);
      AdamWStep(draft, opt, config, lr, st.step + 1);
      const double loss_value = loss.item<double>();
      ++st.step;
      st.train_seconds += (NowMicros() - t0) * 1e-6;
      st.loss_window.push_back(loss_value);
      if (st.loss_window.size() > kLossWindow) st.loss_window.erase(st.loss_window.begin());
      if (first) result.first_loss = loss_value;
      first = false;
      if (st.step % config.log_every == 0 || st.step == config.steps) {
        ojson line;
        line["step"] = st.step;
        line["loss"] = loss_value;
        line["lr"] = lr;
        line["elapsed_s"] = st.train_seconds;
        log << line.dump() << "\n";
        log.flush();
      }
      if (st.step % config.checkpoint_every == 0 || st.step == end_step) checkpoint();
      if (bar) {
        char note[64];
        std::snprintf(note, sizeof(note), "loss %.4f lr %.2e", loss_value, lr);
        bar->Advance(1, note);
      }
    }
  }
  if (!PathExists(out_dir + "/model.safetensors")) checkpoint();  // a finished run, files lost

  result.step = st.step;
  result.train_seconds = st.train_seconds;
  double window = 0;
  for (double l : st.loss_window) window += l;
  result.final_loss = st.loss_window.empty() ? 0 : window / st.loss_window.size();
  result.finished = st.step >= config.steps;
  if (!result.finished) return result;

  const EvalStats ev =
      Evaluate(teacher, draft, data, config.n_sequences, config.n_eval_sequences, config.batch);
  result.eval_kl = ev.kl;
  result.top1_agreement = ev.top1;
  result.expected_acceptance = ev.acceptance;
  ojson summary;
  summary["date"] = NowRfc3339();
  summary["settings"] = settings;
  summary["draft_config"] = dc.ToHfJson();
  summary["draft_parameters"] = draft.ParameterCount();
  summary["target_parameters"] = tc.ParameterCount();
  summary["steps"] = st.step;
  summary["final_train_kl"] = result.final_loss;
  summary["eval_kl"] = ev.kl;
  summary["eval_top1_agreement"] = ev.top1;
  summary["eval_expected_acceptance_t1"] = ev.acceptance;
  summary["eval_positions"] = config.n_eval_sequences * config.seq_len;
  summary["train_seconds"] = st.train_seconds;
  summary["teacher_cache_seconds_this_run"] = result.teacher_seconds;
  summary["data_seconds_this_run"] = result.data_seconds;
  summary["threads"] = config.threads;
  WriteFileAtomically(out_dir + "/train_summary.json", summary.dump(2) + "\n");
  if (options.verbose) {
    std::fprintf(stderr,
                 "draft-lm: %lld params (target %lld); final train KL %.4f; held-out (%lld "
                 "positions): KL %.4f, top-1 agreement %.4f, expected SpS acceptance at T=1 "
                 "%.4f; train %.1f s (+ teacher cache %.1f s), data %.1f s -> %s\n",
                 static_cast<long long>(draft.ParameterCount()),
                 static_cast<long long>(tc.ParameterCount()), result.final_loss,
                 static_cast<long long>(config.n_eval_sequences * config.seq_len), ev.kl, ev.top1,
                 ev.acceptance, st.train_seconds, result.teacher_seconds, result.data_seconds,
                 out_dir.c_str());
  }
  return result;
}

}  // namespace specbed
