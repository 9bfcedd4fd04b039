// SpecBlock drafter network, config and checkpoint (see specblock_model.h).
// Checked by: tests/methods/specblock_test.cpp.
#include "methods/specblock/specblock_model.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "base/error.h"
#include "methods/common/json_fields.h"
#include "methods/common/named_params.h"
#include "models/checkpoint/head_checkpoint.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/gemv.h"
#include "models/tensor_util.h"

namespace specbed {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// RMSNorm and rotate_half RoPE: the shared ATen ops (float32 math, x's dtype).
constexpr auto RmsNorm = RmsNormLastDimAten;
constexpr auto Rope = RotateHalfAten;

// Most activation rows for which a serving (no-gradient) projection runs on SpecBed's GemvRows
// instead of ATen's matmul. OpenBLAS repacks the whole weight on every small-M sgemm call: on the
// stories260K twin that packing and the small-M kernel were 28% of a SpecBlock decode (perf,
// budget 6), with drafter calls of 8-24 rows. GemvRows streams each weight once per 4 rows.
constexpr int64_t kServeGemvMaxRows = 32;

// x [..., in] @ w[out, in]^T -> [..., out]. x: float32 or the weight's dtype, CPU; w: [out, in].
at::Tensor Linear(const at::Tensor& x, const at::Tensor& w) {
  const int64_t in = x.size(-1);
  const int64_t rows = in > 0 ? x.numel() / in : 0;
  const bool needs_grad = at::GradMode::is_enabled() && (x.requires_grad() || w.requires_grad());
  if (!needs_grad && rows > 0 && rows <= kServeGemvMaxRows && x.device().is_cpu() &&
      w.device().is_cpu() && x.scalar_type() == w.scalar_type() &&
      (w.scalar_type() == at::kFloat || w.scalar_type() == at::kBFloat16 ||
       w.scalar_type() == at::kHalf) &&
      w.dim() == 2 && w.is_contiguous()) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    const at::Tensor out = at::empty({rows, w.size(0)}, w.options());
    GemvRows(x.reshape({rows, in}).contiguous(), w, {}, out, /*accumulate=*/false);
    return out.view(shape);
  }
  return at::matmul(x, w.t());
}

std::string L(int64_t l, const char* rest) {
  return "layers." + std::to_string(l) + "." + rest;
}

}  // namespace

void SpecBlockConfig::Validate(const std::string& where) const {
  SPECBED_CHECK(hidden_size > 0 && intermediate_size > 0 && n_heads > 0 && n_kv_heads > 0 &&
                    head_dim > 0 && head_dim % 2 == 0 && n_heads % n_kv_heads == 0,
                where, ": bad attention/width fields (hidden_size ", hidden_size, ", heads ",
                n_heads, "/", n_kv_heads, ", head_dim ", head_dim, ")");
  SPECBED_CHECK(target_hidden_size > 0 && vocab_size > 0 && draft_vocab_size > 0 &&
                    draft_vocab_size <= vocab_size,
                where, ": bad vocabulary fields (vocab_size ", vocab_size, ", draft_vocab_size ",
                draft_vocab_size, ")");
  SPECBED_CHECK(block_size >= 1 && block_size <= 32, where, ": block_size must be in [1, 32], got ",
                block_size);
  SPECBED_CHECK(n_layers >= 1 && (n_shifts == n_layers || n_shifts == n_layers - 1), where,
                ": n_shifts must be n_layers or n_layers - 1 (got ", n_shifts, " for ", n_layers,
                " layers)");
  SPECBED_CHECK(rank_hidden >= 1, where, ": rank_hidden must be >= 1");
  SPECBED_CHECK(aux_layer_ids.size() == 3, where, ": aux_layer_ids needs 3 target layers, got ",
                aux_layer_ids.size());
}

ojson SpecBlockConfig::ToJson() const {
  ojson j;
  j["architectures"] = {"SpecBlockDrafter"};
  j["model_type"] = "specblock";
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_attention_heads"] = n_heads;
  j["num_key_value_heads"] = n_kv_heads;
  j["head_dim"] = head_dim;
  SPECBED_JSON_PUT(j, *this, target_hidden_size, vocab_size, draft_vocab_size, block_size);
  j["num_hidden_layers"] = n_layers;
  j["num_shifts"] = n_shifts;
  j["rank_hidden_size"] = rank_hidden;
  SPECBED_JSON_PUT(j, *this, rms_norm_eps, rope_theta, max_position_embeddings);
  j["aux_hidden_state_layer_ids"] = aux_layer_ids;
  j["torch_dtype"] = "float32";
  return j;
}

SpecBlockConfig SpecBlockConfig::FromJson(const json& j, const std::string& where) {
  SPECBED_CHECK(j.is_object() && j.value("model_type", std::string()) == "specblock", where,
                ": config.json is not a SpecBlock drafter (model_type '",
                j.is_object() ? j.value("model_type", std::string()) : std::string(),
                "', expected 'specblock')");
  SpecBlockConfig c;
  auto get = [&](const char* key) -> const json& {
    SPECBED_CHECK(j.contains(key), where, ": config.json lacks '", key, "'");
    return j.at(key);
  };
  c.hidden_size = get("hidden_size").get<int64_t>();
  c.intermediate_size = get("intermediate_size").get<int64_t>();
  c.n_heads = get("num_attention_heads").get<int64_t>();
  c.n_kv_heads = get("num_key_value_heads").get<int64_t>();
  c.head_dim = get("head_dim").get<int64_t>();
  c.target_hidden_size = get("target_hidden_size").get<int64_t>();
  c.vocab_size = get("vocab_size").get<int64_t>();
  c.draft_vocab_size = get("draft_vocab_size").get<int64_t>();
  c.block_size = get("block_size").get<int64_t>();
  c.n_layers = get("num_hidden_layers").get<int64_t>();
  c.n_shifts = get("num_shifts").get<int64_t>();
  c.rank_hidden = get("rank_hidden_size").get<int64_t>();
  c.rms_norm_eps = get("rms_norm_eps").get<double>();
  c.rope_theta = get("rope_theta").get<double>();
  c.max_position_embeddings = j.value("max_position_embeddings", int64_t{2048});
  c.aux_layer_ids = get("aux_hidden_state_layer_ids").get<std::vector<int64_t>>();
  if (j.contains(kHeadRecipeKey)) c.recipe = j.at(kHeadRecipeKey);
  c.Validate(where);
  return c;
}

std::map<std::string, std::vector<int64_t>> SpecBlockTensorShapes(const SpecBlockConfig& c) {
  const int64_t d = c.hidden_size, qd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim;
  std::map<std::string, std::vector<int64_t>> s;
  s["cond.weight"] = {d, 3 * c.target_hidden_size};
  s["queries"] = {c.block_size, d};
  s["norm_c.weight"] = {d};
  s["norm_e.weight"] = {d};
  s["norm_q.weight"] = {d};
  s["fuse.weight"] = {d, 3 * d};
  for (int64_t i = 0; i < c.n_shifts; ++i) s["shift." + std::to_string(i) + ".weight"] = {d, 2 * d};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    s[L(l, "input_layernorm.weight")] = {d};
    s[L(l, "self_attn.q_proj.weight")] = {qd, d};
    s[L(l, "self_attn.k_proj.weight")] = {kvd, d};
    s[L(l, "self_attn.v_proj.weight")] = {kvd, d};
    s[L(l, "self_attn.o_proj.weight")] = {d, qd};
    s[L(l, "post_attention_layernorm.weight")] = {d};
    s[L(l, "mlp.gate_proj.weight")] = {c.intermediate_size, d};
    s[L(l, "mlp.up_proj.weight")] = {c.intermediate_size, d};
    s[L(l, "mlp.down_proj.weight")] = {d, c.intermediate_size};
  }
  s["norm.weight"] = {d};
  s["lm_head.weight"] = {c.draft_vocab_size, d};
  s["rank_head.fc1.weight"] = {c.rank_hidden, d + kSpecBlockPsiFeatures};
  s["rank_head.fc1.bias"] = {c.rank_hidden};
  s["rank_head.fc2.weight"] = {kSpecBlockBuckets, c.rank_hidden};
  s["rank_head.fc2.bias"] = {kSpecBlockBuckets};
  s["d2t"] = {c.draft_vocab_size};
  s["t2d"] = {c.vocab_size};
  return s;
}

bool SpecBlockIsHeadParam(const std::string& name) {
  return name == "lm_head.weight" || name == "norm.weight" || name.rfind("rank_head.", 0) == 0;
}

namespace {

void CheckSpecBlockTensors(const SpecBlockConfig& c, const std::map<std::string, at::Tensor>& t,
                           const std::string& where) {
  CheckNamedTensorShapes(SpecBlockTensorShapes(c), t, where,
                         "(not a SpecBlock tensor for this config)", /*floats_only=*/false);
}

}  // namespace

SpecBlockCheckpoint LoadSpecBlockCheckpoint(const std::string& dir) {
  const std::string where = "SpecBlock checkpoint '" + dir + "'";
  const HeadConfigFile file = ReadHeadConfig(dir, where);
  SpecBlockCheckpoint ckpt;
  ckpt.source = dir;
  ckpt.config = SpecBlockConfig::FromJson(file.config, where + " (" + file.path + ")");
  HeadTensors stored = ReadHeadTensors(dir, where, "");
  for (auto& [name, tensor] : stored.tensors) {
    ckpt.tensors[name] = tensor.is_floating_point() ? tensor.to(at::kFloat).contiguous() : tensor;
  }
  CheckSpecBlockTensors(ckpt.config, ckpt.tensors, where);
  return ckpt;
}

void WriteSpecBlockCheckpoint(const std::string& dir, const SpecBlockConfig& config,
                              const std::map<std::string, at::Tensor>& tensors) {
  const std::string where = "writing SpecBlock checkpoint '" + dir + "'";
  CheckSpecBlockTensors(config, tensors, where);
  WriteHeadCheckpoint(dir, config.ToJson(), config.recipe, tensors, SafetensorsDtype::kF32, where);
}

std::map<std::string, at::Tensor> RandomSpecBlockTensors(const SpecBlockConfig& c, uint64_t seed) {
  c.Validate("RandomSpecBlockTensors");
  std::map<std::string, at::Tensor> t;
  const int64_t d = c.hidden_size;
  for (const auto& [name, shape] : SpecBlockTensorShapes(c)) {
    if (name == "d2t" || name == "t2d") continue;
    at::Tensor x = at::zeros(shape, at::kFloat);
    if (name.find("norm") != std::string::npos && name.find("weight") != std::string::npos &&
        shape.size() == 1) {
      x.fill_(1.0f);
    } else if (name.rfind("shift.", 0) == 0) {
      x.narrow(1, 0, d).copy_(at::eye(d, at::kFloat));  // [I | 0]: identity at init
    } else if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      // zeros
    } else {
      FillSeededNormal(x.data_ptr<float>(), x.numel(), TensorNameSeed(seed, name), 0.0, 0.02);
    }
    t[name] = x;
  }
  std::vector<int64_t> ids(c.vocab_size);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937_64 rng(TensorNameSeed(seed, "d2t"));
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(c.draft_vocab_size);
  std::sort(ids.begin(), ids.end());
  at::Tensor d2t = at::empty({c.draft_vocab_size}, at::kLong);
  at::Tensor t2d = at::zeros({c.vocab_size}, at::kBool);
  for (int64_t i = 0; i < c.draft_vocab_size; ++i) {
    d2t.data_ptr<int64_t>()[i] = ids[i] - i;
    t2d.data_ptr<bool>()[ids[i]] = true;
  }
  t["d2t"] = d2t;
  t["t2d"] = t2d;
  return t;
}

SpecBlockModel::SpecBlockModel(const SpecBlockConfig& config,
                               const std::map<std::string, at::Tensor>& tensors,
                               const at::Tensor& target_embedding, bool trainable,
                               const HeadPlacement& placement)
    : config_(config) {
  const at::ScalarType dtype = trainable ? at::kFloat : placement.dtype;
  config_.Validate("SpecBlock drafter");
  CheckSpecBlockTensors(config_, tensors, "SpecBlock drafter");
  for (const auto& [name, shape] : SpecBlockTensorShapes(config_)) {
    if (name == "d2t" || name == "t2d") continue;
    at::Tensor p = tensors.at(name).detach().to(placement.device, dtype).contiguous().clone();
    if (trainable) p.set_requires_grad(true);
    index_[name] = params_.size();
    params_.emplace_back(name, p);
  }
  d2t_ = tensors.at("d2t").to(at::kCPU, at::kLong).contiguous().clone();  // host: read below
  t2d_ = tensors.at("t2d").to(at::kCPU, at::kBool).contiguous().clone();
  const int64_t vd = config_.draft_vocab_size, v = config_.vocab_size;
  draft_ids_ = d2t_ + at::arange(vd, at::kLong);
  d2t_ids_.resize(vd);
  t2d_ids_.assign(v, -1);
  for (int64_t i = 0; i < vd; ++i) {
    const int64_t id = draft_ids_.data_ptr<int64_t>()[i];
    SPECBED_CHECK(id >= 0 && id < v, "SpecBlock drafter: d2t maps draft id ", i,
                  " outside the vocabulary");
    d2t_ids_[i] = static_cast<int32_t>(id);
    t2d_ids_[id] = static_cast<int32_t>(i);
  }
  SPECBED_CHECK(
      target_embedding.defined() && target_embedding.dim() == 2 && target_embedding.size(0) == v &&
          target_embedding.size(1) == config_.hidden_size,
      "SpecBlock drafter: the target embedding must be [", v, ", ", config_.hidden_size, "], got ",
      target_embedding.defined() ? target_embedding.sizes() : at::IntArrayRef{});
  embedding_ = target_embedding.detach().to(placement.device, dtype).contiguous();
  const int64_t half = config_.head_dim / 2;
  inv_freq_ = at::empty({half}, at::kDouble);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq_.data_ptr<double>()[i] =
        1.0 / std::pow(config_.rope_theta, static_cast<double>(2 * i) / config_.head_dim);
  }
  inv_freq_ = inv_freq_.to(placement.device);
  draft_ids_ = draft_ids_.to(placement.device);
}

const at::Tensor& SpecBlockModel::Param(const std::string& name) const {
  auto it = index_.find(name);
  SPECBED_CHECK(it != index_.end(), "SpecBlock drafter: no parameter '", name, "'");
  return params_[it->second].second;
}

std::map<std::string, at::Tensor> SpecBlockModel::Tensors() const {
  std::map<std::string, at::Tensor> out = CloneParams(params_);
  out["d2t"] = d2t_.clone();
  out["t2d"] = t2d_.clone();
  return out;
}

void SpecBlockModel::CopyFrom(const SpecBlockModel& other) {
  at::NoGradGuard no_grad;
  SPECBED_CHECK(other.params_.size() == params_.size(), "SpecBlock: CopyFrom of another shape");
  for (size_t i = 0; i < params_.size(); ++i) params_[i].second.copy_(other.params_[i].second);
}

int64_t SpecBlockModel::ParameterCount() const {
  return CountParams(params_);
}

at::Tensor SpecBlockModel::Fuse(const at::Tensor& cond, const at::Tensor& tokens,
                                bool target_cond) const {
  const SpecBlockConfig& c = config_;
  const double eps = c.rms_norm_eps;
  const at::Tensor cv = target_cond ? Linear(cond, Param("cond.weight")) : cond;
  const at::Tensor e = at::embedding(embedding_, tokens);  // [B, N, d]
  const at::Tensor nc = RmsNorm(cv, Param("norm_c.weight"), eps);
  const at::Tensor ne = RmsNorm(e, Param("norm_e.weight"), eps);
  const at::Tensor nq = RmsNorm(Param("queries"), Param("norm_q.weight"), eps);  // [K, d]
  const at::Tensor& wf = Param("fuse.weight");                                   // [d, 3d]
  const int64_t d = c.hidden_size;
  // W_fuse [nc; ne; nq] = Wc nc + We ne + Wq nq (prefix broadcast: the first two per start).
  const at::Tensor pre =
      at::matmul(nc, wf.narrow(1, 0, d).t()) + at::matmul(ne, wf.narrow(1, d, d).t());  // [B, N, d]
  const at::Tensor q = at::matmul(nq, wf.narrow(1, 2 * d, d).t());                      // [K, d]
  return pre.unsqueeze(2) + q.unsqueeze(0).unsqueeze(0);  // [B, N, K, d]
}

at::Tensor SpecBlockModel::Trunk(const at::Tensor& h0, const at::Tensor& positions,
                                 const at::Tensor& mask, const SpecBlockKv* past,
                                 SpecBlockKv* present) const {
  const SpecBlockConfig& c = config_;
  const int64_t b = h0.size(0), n = h0.size(1), k = h0.size(2), d = c.hidden_size;
  const int64_t r = n * k, nh = c.n_heads, nkv = c.n_kv_heads, hd = c.head_dim;
  const double eps = c.rms_norm_eps;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const at::Tensor angles =
      positions.to(at::kDouble).unsqueeze(-1) * inv_freq_.unsqueeze(0).unsqueeze(0);
  const at::Tensor cos = angles.cos().to(at::kFloat).unsqueeze(1);  // [B, 1, R, hd/2]
  const at::Tensor sin = angles.sin().to(at::kFloat).unsqueeze(1);
  const at::Tensor attn_mask = mask.unsqueeze(1);  // [B, 1, R, C + R]
  if (present != nullptr) {
    present->k.assign(c.n_layers, at::Tensor());
    present->v.assign(c.n_layers, at::Tensor());
  }
  const int64_t shift0 = c.n_layers - c.n_shifts;  // first layer preceded by a shift
  at::Tensor x = h0;                               // [B, N, K, d]
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (l >= shift0) {
      // h~_k = W_shift [x_k ; x_{k-1}], x_0 := x_1 (within each block).
      const at::Tensor prev = k > 1 ? at::cat({x.narrow(2, 0, 1), x.narrow(2, 0, k - 1)}, 2) : x;
      x = Linear(at::cat({x, prev}, -1), Param("shift." + std::to_string(l - shift0) + ".weight"));
    }
    const at::Tensor flat = x.reshape({b, r, d});
    const at::Tensor xn = RmsNorm(flat, Param(L(l, "input_layernorm.weight")), eps);
    const at::Tensor q = Rope(
        Linear(xn, Param(L(l, "self_attn.q_proj.weight"))).view({b, r, nh, hd}).transpose(1, 2),
        cos, sin);
    at::Tensor kk = Rope(
        Linear(xn, Param(L(l, "self_attn.k_proj.weight"))).view({b, r, nkv, hd}).transpose(1, 2),
        cos, sin);
    at::Tensor vv =
        Linear(xn, Param(L(l, "self_attn.v_proj.weight"))).view({b, r, nkv, hd}).transpose(1, 2);
    if (present != nullptr) {
      present->k[l] = kk;
      present->v[l] = vv;
    }
    if (past != nullptr && past->k[l].defined() && past->k[l].size(2) > 0) {
      kk = at::cat({past->k[l], kk}, 2);
      vv = at::cat({past->v[l], vv}, 2);
    }
    if (nh != nkv) {
      kk = kk.repeat_interleave(nh / nkv, 1);
      vv = vv.repeat_interleave(nh / nkv, 1);
    }
    at::Tensor scores =
        at::matmul(q, kk.transpose(2, 3)).to(at::kFloat) * scale;  // [B, nh, R, C+R]
    scores = scores.masked_fill(attn_mask.logical_not(), -std::numeric_limits<float>::infinity());
    const at::Tensor a =
        at::matmul(at::softmax(scores, -1).to(vv.scalar_type()), vv);  // [B, nh, R, hd]
    at::Tensor h = flat + Linear(a.transpose(1, 2).reshape({b, r, nh * hd}),
                                 Param(L(l, "self_attn.o_proj.weight")));
    const at::Tensor hn = RmsNorm(h, Param(L(l, "post_attention_layernorm.weight")), eps);
    const at::Tensor g = Linear(hn, Param(L(l, "mlp.gate_proj.weight")));
    const at::Tensor u = Linear(hn, Param(L(l, "mlp.up_proj.weight")));
    h = h + Linear(at::silu(g) * u, Param(L(l, "mlp.down_proj.weight")));
    x = h.view({b, n, k, d});
  }
  return x;
}

at::Tensor SpecBlockModel::Logits(const at::Tensor& h) const {
  return Linear(RmsNorm(h, Param("norm.weight"), config_.rms_norm_eps), Param("lm_head.weight"));
}

at::Tensor SpecBlockPsi(const at::Tensor& logits) {
  at::NoGradGuard no_grad;
  const at::Tensor lp = at::log_softmax(logits.detach().to(at::kFloat), -1);
  const int64_t vd = lp.size(-1);
  const int64_t top = std::min<int64_t>(10, vd);
  at::Tensor t = std::get<0>(lp.topk(top, -1));
  if (top < 10) {  // tiny vocabularies: pad with a very low log-prob
    std::vector<int64_t> shape = t.sizes().vec();
    shape.back() = 10 - top;
    t = at::cat({t, at::full(shape, -30.0f, t.options())}, -1);
  }
  const at::Tensor t1 = t.narrow(-1, 0, 1);
  const at::Tensor gaps =
      at::cat({t1 - t.narrow(-1, 1, 1), t1 - t.narrow(-1, 2, 1), t1 - t.narrow(-1, 4, 1)}, -1);
  const at::Tensor p = lp.exp();
  const at::Tensor entropy = -(p * lp).sum(-1, true);
  return at::cat({t, gaps, t1.exp(), entropy}, -1);
}

at::Tensor SpecBlockModel::RankLogits(const at::Tensor& h, const at::Tensor& logits) const {
  // h is RMS-normalised (no weight) first: the pre-final-norm residual's scale drifts in training.
  const at::Tensor hd = h.detach();
  const at::Tensor hn = hd * at::rsqrt(hd.pow(2).mean(-1, true) + config_.rms_norm_eps);
  const at::Tensor in = at::cat({hn.to(at::kFloat), SpecBlockPsi(logits)}, -1)
                            .to(Param("rank_head.fc1.weight").scalar_type());
  const at::Tensor z =
      at::silu(at::matmul(in, Param("rank_head.fc1.weight").t()) + Param("rank_head.fc1.bias"));
  return at::matmul(z, Param("rank_head.fc2.weight").t()) + Param("rank_head.fc2.bias");
}

at::Tensor SpecBlockBucketLabels(const at::Tensor& logits, const at::Tensor& labels,
                                 const SpecBlockModel& model) {
  at::NoGradGuard no_grad;
  const at::Tensor lg = logits.detach();
  const at::Tensor lab = labels.to(at::kLong);
  const at::Tensor t2d = at::full({model.config().vocab_size}, -1, at::kLong);
  const auto& m = model.target_to_draft();
  int64_t* tp = t2d.data_ptr<int64_t>();
  for (size_t i = 0; i < m.size(); ++i) tp[i] = m[i];
  // Built on the host, then one copy to the logits' device (none on the CPU).
  const at::Tensor did = t2d.to(lg.device()).index_select(0, lab.reshape(-1)).view(lab.sizes());
  const at::Tensor inside = did.ge(0);
  const at::Tensor own = lg.gather(-1, did.clamp_min(0).unsqueeze(-1));  // [..., 1]
  const at::Tensor rank = lg.gt(own).sum(-1) + 1;
  at::Tensor bucket =
      at::where(rank.le(1), at::zeros_like(rank),
                at::where(rank.le(4), at::ones_like(rank),
                          at::where(rank.le(10), at::full_like(rank, 2), at::full_like(rank, 3))));
  return at::where(inside, bucket, at::full_like(bucket, 3));
}

}  // namespace specbed
