// DFlash draft head forward on CPU, float32 (see dflash_head.h for the computation).
// Checked by: tests/methods/dflash_head_test.cpp.
#include "methods/dflash/dflash_head.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "methods/common/head_aten.h"
#include "methods/common/head_kernels.h"
#include "methods/dflash/dflash_checkpoint.h"
#include "models/tensor_util.h"

namespace specbed {
namespace {

// Per-head RMSNorm (weight w [head_dim]) then RoPE (rotate_half pairing) of one head_dim vector,
// src -> dst (may alias).
void NormRopeHead(const float* src, const float* w, float* dst, int64_t head_dim, float eps,
                  const float* cos, const float* sin) {
  RmsNormRow(src, w, dst, head_dim, eps);
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float x0 = dst[i], x1 = dst[i + half];
    dst[i] = x0 * cos[i] - x1 * sin[i];
    dst[i + half] = x1 * cos[i] + x0 * sin[i];
  }
}

}  // namespace

namespace {
std::atomic<int64_t> g_forwards{0};
}  // namespace

int64_t DflashHeadForwards() {
  return g_forwards.load(std::memory_order_relaxed);
}

const float* DflashHeadOutput::logits_row(int64_t i) const {
  SPECBED_CHECK(logits.is_cpu(), "DflashHeadOutput::logits_row: the logits are on ",
                logits.device(), ", not the CPU");
  return logits.data_ptr<float>() + i * logits.size(1);
}

namespace {

std::vector<DflashWeights::Layer> LoadDflashLayers(const DflashConfig& config,
                                                   const std::map<std::string, at::Tensor>& tensors,
                                                   const HeadPlacement& placement) {
  std::vector<DflashWeights::Layer> layers;
  for (int64_t l = 0; l < config.n_layers; ++l) {
    auto lg = [&](const char* suffix) {
      return PlaceWeight(tensors.at(DflashLayerTensorName(l, suffix)), placement);
    };
    auto norm = [&](const char* suffix) {
      return PlaceNormWeight(tensors.at(DflashLayerTensorName(l, suffix)), placement);
    };
    DflashWeights::Layer layer;
    const at::Tensor k = lg(kDflashKProj), v = lg(kDflashVProj);
    layer.wqkv = at::cat({lg(kDflashQProj), k, v}, 0).contiguous();
    layer.wkv = at::cat({k, v}, 0).contiguous();
    layer.wo = lg(kDflashOProj);
    layer.w_gate_up = at::cat({lg(kDflashGateProj), lg(kDflashUpProj)}, 0).contiguous();
    layer.w_down = lg(kDflashDownProj);
    layer.wqkv_t = layer.wqkv.t();
    layer.wkv_t = layer.wkv.t();
    layer.wo_t = layer.wo.t();
    layer.w_gate_up_t = layer.w_gate_up.t();
    layer.w_down_t = layer.w_down.t();
    layer.input_norm = norm(kDflashInputNorm);
    layer.post_norm = norm(kDflashPostNorm);
    layer.q_norm = norm(kDflashQNorm);
    layer.k_norm = norm(kDflashKNorm);
    layer.window = config.LayerWindow(l);
    layers.push_back(std::move(layer));
  }
  return layers;
}

void CheckVocabMatrix(const DflashConfig& c, const at::Tensor& t, const char* what) {
  const int64_t v = c.vocab_size, h = c.hidden_size;
  SPECBED_CHECK(t.defined(), "DflashHead: the target's ", what, " [", v, ", ", h,
                "] is required (the draft has none of its own)");
  SPECBED_CHECK(t.dim() == 2 && t.size(0) == v && t.size(1) == h, "DflashHead: target ", what,
                " has shape ", ShapeString(t.sizes()), ", expected [vocab_size, hidden_size] = [",
                v, ", ", h, "] (draft and target must share vocabulary and hidden size)");
  SPECBED_CHECK(t.is_floating_point(), "DflashHead: target ", what, " must be a float tensor, got ",
                c10::toString(t.scalar_type()));
}

// The target's embedding for the head: as it is on the ATen path; float32 or bfloat16 CPU for
// the row loops.
at::Tensor HeadEmbedding(const at::Tensor& target_embedding, const HeadPlacement& placement) {
  if (placement.aten) return PlaceWeight(target_embedding, placement);
  at::Tensor e = target_embedding.to(at::kCPU);
  if (e.scalar_type() != at::kFloat && e.scalar_type() != at::kBFloat16) e = e.to(at::kFloat);
  return e.contiguous();
}

std::shared_ptr<const DflashWeights> NonNullWeights(std::shared_ptr<const DflashWeights> w) {
  SPECBED_CHECK(w != nullptr, "DflashHead: no weights");
  return w;
}

}  // namespace

DflashWeights::DflashWeights(const DflashConfig& config_in,
                             const std::map<std::string, at::Tensor>& tensors,
                             const at::Tensor& target_embedding, const at::Tensor& target_lm_head,
                             const HeadPlacement& placement_in)
    : config(config_in), placement(placement_in) {
  ValidateDflashTensors(config, tensors, "DflashHead");
  fc = PlaceWeight(tensors.at(kDflashFc), placement);
  fc_t = fc.t();
  hidden_norm = PlaceNormWeight(tensors.at(kDflashHiddenNorm), placement);
  final_norm = PlaceNormWeight(tensors.at(kDflashFinalNorm), placement);
  layers = LoadDflashLayers(config, tensors, placement);
  CheckVocabMatrix(config, target_embedding, "token embedding");
  CheckVocabMatrix(config, target_lm_head, "lm_head");
  embedding = HeadEmbedding(target_embedding, placement);  // shared when it already matches
  lm_head = PlaceWeight(target_lm_head, placement);
  lm_head_t = lm_head.t();
  inv_freq = RopeInverseFrequencies(config.RopeConfig());
}

DflashHead::DflashHead(const DflashConfig& config, const std::map<std::string, at::Tensor>& tensors,
                       const at::Tensor& target_embedding, const at::Tensor& target_lm_head,
                       const HeadPlacement& placement)
    : DflashHead(std::make_shared<const DflashWeights>(config, tensors, target_embedding,
                                                       target_lm_head, placement)) {}

DflashHead::DflashHead(std::shared_ptr<const DflashWeights> weights)
    : w_(NonNullWeights(std::move(weights))),
      config_(w_->config),
      placement_(w_->placement),
      ctx_(w_->layers.size()) {
  EnsureRope(256);
  EnsureRows(config_.block_size);
  ResetContext(256);
}

void DflashHead::EnsureRows(int64_t n) {
  if (n > row_capacity_) {
    const int64_t h = config_.hidden_size;
    const auto opts = at::TensorOptions().dtype(at::kFloat);
    h_store_ = at::empty({n, h}, opts);
    x_store_ = at::empty({n, h}, opts);
    qkv_store_ = at::empty({n, config_.q_dim() + 2 * config_.kv_dim()}, opts);
    q_store_ = at::empty({n, config_.q_dim()}, opts);
    attn_store_ = at::empty({n, config_.q_dim()}, opts);
    gate_up_store_ = at::empty({n, 2 * config_.intermediate_size}, opts);
    act_store_ = at::empty({n, config_.intermediate_size}, opts);
    k_block_.assign(static_cast<size_t>(config_.n_kv_heads * n * config_.head_dim), 0.f);
    v_block_.assign(k_block_.size(), 0.f);
    row_capacity_ = n;
    rows_ = 0;  // views re-made below
  }
  if (n == rows_) return;
  // Leading rows of a contiguous [rows, cols] buffer: contiguous views.
  h_ = h_store_.narrow(0, 0, n);
  x_ = x_store_.narrow(0, 0, n);
  qkv_ = qkv_store_.narrow(0, 0, n);
  q_ = q_store_.narrow(0, 0, n);
  attn_ = attn_store_.narrow(0, 0, n);
  gate_up_ = gate_up_store_.narrow(0, 0, n);
  act_ = act_store_.narrow(0, 0, n);
  rows_ = n;
}

void DflashHead::EnsureRope(int64_t max_position) {
  GrowRopeTable(w_->inv_freq, max_position, rope_cos_, rope_sin_, rope_capacity_);
}

void DflashHead::GrowContext(int64_t capacity) {
  if (capacity <= context_capacity_) return;
  const int64_t n_kv = config_.n_kv_heads, hd = config_.head_dim;
  for (LayerContext& layer : ctx_) {
    if (placement_.aten) {
      const auto opts = at::TensorOptions(placement_.dtype).device(placement_.device);
      at::Tensor k = at::zeros({n_kv, capacity, hd}, opts), v = at::zeros_like(k);
      if (context_length_ > 0) {
        k.narrow(1, 0, context_length_).copy_(layer.k_t.narrow(1, 0, context_length_));
        v.narrow(1, 0, context_length_).copy_(layer.v_t.narrow(1, 0, context_length_));
      }
      layer.k_t = k;
      layer.v_t = v;
      continue;
    }
    std::vector<float> k(static_cast<size_t>(n_kv * capacity * hd), 0.f), v(k.size(), 0.f);
    for (int64_t kh = 0; kh < n_kv && context_length_ > 0; ++kh) {
      const size_t bytes = static_cast<size_t>(context_length_ * hd) * sizeof(float);
      std::memcpy(k.data() + kh * capacity * hd, layer.k.data() + kh * context_capacity_ * hd,
                  bytes);
      std::memcpy(v.data() + kh * capacity * hd, layer.v.data() + kh * context_capacity_ * hd,
                  bytes);
    }
    layer.k = std::move(k);
    layer.v = std::move(v);
  }
  context_capacity_ = capacity;
}

void DflashHead::ResetContext(int64_t capacity) {
  SPECBED_CHECK(capacity >= 1, "DflashHead::ResetContext: capacity must be positive, got ",
                capacity);
  context_length_ = 0;
  GrowContext(capacity);
}

void DflashHead::TruncateContext(int64_t length) {
  SPECBED_CHECK(length >= 0 && length <= context_length_, "DflashHead::TruncateContext: length ",
                length, " outside [0, context_length = ", context_length_, "]");
  context_length_ = length;
}

void DflashHead::AppendContext(const at::Tensor& features) {
  SPECBED_CHECK(
      features.defined() && features.dim() == 2 && features.size(1) == config_.fc_in_dim(),
      "DflashHead::AppendContext: features must be [n, ", config_.fc_in_dim(), "], got ",
      features.defined() ? ShapeString(features.sizes()) : std::string("undefined"));
  SPECBED_CHECK(features.size(0) >= 1, "DflashHead::AppendContext: no rows (n = 0)");
  if (placement_.aten) {
    AppendContextAten(features);
    return;
  }
  const at::Tensor host = features.to(at::kCPU, at::kFloat).contiguous();
  AppendContext(host.data_ptr<float>(), host.size(0));
}

void DflashHead::AppendContextAten(const at::Tensor& features) {
  const int64_t n = features.size(0), n_kv = config_.n_kv_heads, hd = config_.head_dim,
                kv_dim = config_.kv_dim(), past = context_length_;
  const double eps = config_.rms_norm_eps;
  if (past + n > context_capacity_) GrowContext(std::max(past + n, 2 * context_capacity_));
  rope_device_.Ensure(w_->inv_freq, past + n, placement_.device);
  const at::Tensor pos =
      at::arange(past, past + n, at::TensorOptions(at::kLong).device(placement_.device));
  const at::Tensor cos = rope_device_.Cos(pos), sin = rope_device_.Sin(pos);
  const at::Tensor c = RmsNormRowsAten(
      at::mm(features.to(placement_.device, placement_.dtype), w_->fc_t), w_->hidden_norm, eps);
  for (size_t l = 0; l < ctx_.size(); ++l) {
    const DflashWeights::Layer& layer = w_->layers[l];
    const at::Tensor kv = at::mm(c, layer.wkv_t);
    const at::Tensor k = RotateHalfRopeAten(
        RmsNormRowsAten(kv.narrow(1, 0, kv_dim).view({n, n_kv, hd}), layer.k_norm, eps), cos, sin);
    ctx_[l].k_t.narrow(1, past, n).copy_(k.transpose(0, 1));
    ctx_[l]
        .v_t.narrow(1, past, n)
        .copy_(kv.narrow(1, kv_dim, kv_dim).view({n, n_kv, hd}).transpose(0, 1));
  }
  context_length_ = past + n;
}

void DflashHead::AppendContext(const float* features, int64_t n) {
  SPECBED_CHECK(n >= 1, "DflashHead::AppendContext: no rows (n = ", n, ")");
  SPECBED_CHECK(features != nullptr, "DflashHead::AppendContext: features are required");
  if (placement_.aten) {
    AppendContextAten(at::from_blob(const_cast<float*>(features), {n, config_.fc_in_dim()},
                                    at::TensorOptions(at::kFloat)));
    return;
  }
  const int64_t h = config_.hidden_size, hd = config_.head_dim, n_kv = config_.n_kv_heads,
                kv_dim = config_.kv_dim();
  const float eps = static_cast<float>(config_.rms_norm_eps);
  const int64_t past = context_length_;
  if (past + n > context_capacity_) GrowContext(std::max(past + n, 2 * context_capacity_));
  EnsureRope(past + n);
  if (!ctx_rows_.defined() || ctx_rows_.size(0) < n) {
    const int64_t rows = std::max<int64_t>(n, ctx_rows_.defined() ? 2 * ctx_rows_.size(0) : 0);
    ctx_rows_ = at::empty({rows, h}, at::TensorOptions().dtype(at::kFloat));
    ctx_kv_ = at::empty({rows, 2 * kv_dim}, at::TensorOptions().dtype(at::kFloat));
  }
  // c = hidden_norm(fc(feature)).
  at::Tensor c = ctx_rows_.narrow(0, 0, n);
  const at::Tensor f = at::from_blob(const_cast<float*>(features), {n, config_.fc_in_dim()},
                                     at::TensorOptions().dtype(at::kFloat));
  at::mm_out(c, f, w_->fc_t);
  float* cp = c.data_ptr<float>();
  const float* hn = w_->hidden_norm.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) RmsNormRow(cp + i * h, hn, cp + i * h, h, eps);

  const int64_t half = hd / 2, cap = context_capacity_;
  at::Tensor kv = ctx_kv_.narrow(0, 0, n);
  const float* kvp = kv.data_ptr<float>();
  for (size_t l = 0; l < ctx_.size(); ++l) {
    const DflashWeights::Layer& layer = w_->layers[l];
    at::mm_out(kv, c, layer.wkv_t);
    const float* kn = layer.k_norm.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = past + i;
      const float* cs = rope_cos_.data() + pos * half;
      const float* sn = rope_sin_.data() + pos * half;
      const float* krow = kvp + i * 2 * kv_dim;
      const float* vrow = krow + kv_dim;
      for (int64_t kh = 0; kh < n_kv; ++kh) {
        const int64_t at_slot = (kh * cap + pos) * hd;
        NormRopeHead(krow + kh * hd, kn, ctx_[l].k.data() + at_slot, hd, eps, cs, sn);
        std::memcpy(ctx_[l].v.data() + at_slot, vrow + kh * hd,
                    static_cast<size_t>(hd) * sizeof(float));
      }
    }
  }
  context_length_ = past + n;
}

void DflashHead::ForwardFromBonus(int32_t bonus_token, DflashHeadOutput& out) {
  ForwardFromBonus(bonus_token, config_.block_size, out);
}

DflashBlock DflashHead::BonusBlock(int32_t bonus_token, int64_t n, DflashHeadOutput& out) {
  SPECBED_CHECK(config_.mask_token_id >= 0,
                "DflashHead::ForwardFromBonus: the config has no dflash_config.mask_token_id; "
                "pass the block tokens to Forward instead");
  SPECBED_CHECK(n >= 1, "DflashHead::ForwardFromBonus: block rows n must be >= 1, got ", n);
  if (static_cast<int64_t>(bonus_block_.size()) < n) bonus_block_.resize(static_cast<size_t>(n));
  bonus_block_[0] = bonus_token;
  for (int64_t i = 1; i < n; ++i) bonus_block_[i] = static_cast<int32_t>(config_.mask_token_id);
  return {this, bonus_block_.data(), n, context_length_, &out};
}

void DflashHead::ForwardFromBonus(int32_t bonus_token, int64_t n, DflashHeadOutput& out) {
  const DflashBlock block = BonusBlock(bonus_token, n, out);
  Forward(block.tokens, block.n, block.start_position, out);
}

void DflashHead::Forward(const int32_t* block_tokens, int64_t start_position,
                         DflashHeadOutput& out) {
  Forward(block_tokens, config_.block_size, start_position, out);
}

void DflashHead::CheckBlock(const int32_t* block_tokens, int64_t n, int64_t start_position) const {
  SPECBED_CHECK(n >= 1, "DflashHead::Forward: block rows n must be >= 1, got ", n);
  SPECBED_CHECK(block_tokens != nullptr, "DflashHead::Forward: block tokens are required");
  SPECBED_CHECK(start_position >= 0, "DflashHead::Forward: negative start position ",
                start_position);
  for (int64_t i = 0; i < n; ++i) {
    SPECBED_CHECK(block_tokens[i] >= 0 && block_tokens[i] < config_.vocab_size,
                  "DflashHead::Forward: token id ", block_tokens[i], " (block row ", i,
                  ") outside the vocabulary [0, ", config_.vocab_size, ")");
  }
}

void DflashHead::Forward(const int32_t* block_tokens, int64_t n, int64_t start_position,
                         DflashHeadOutput& out) {
  CheckBlock(block_tokens, n, start_position);
  if (placement_.aten) {
    ForwardBlocksAten({{this, block_tokens, n, start_position, &out}});
    return;
  }
  g_forwards.fetch_add(1, std::memory_order_relaxed);
  const int64_t b = n, h = config_.hidden_size, hd = config_.head_dim, n_heads = config_.n_heads,
                n_kv = config_.n_kv_heads, inter = config_.intermediate_size,
                q_dim = config_.q_dim(), kv_dim = config_.kv_dim(), qkv_dim = q_dim + 2 * kv_dim;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  EnsureRows(b);
  EnsureRope(start_position + b);
  EnsureRowOutput(b, out);
  EmbedBlock(block_tokens, b);
  float* hp = h_.data_ptr<float>();
  float* xp = x_.data_ptr<float>();
  const float* qkvp = qkv_.data_ptr<float>();
  float* qp = q_.data_ptr<float>();
  const int64_t half = hd / 2;
  for (size_t l = 0; l < ctx_.size(); ++l) {
    const DflashWeights::Layer& layer = w_->layers[l];
    // 1. x = input_layernorm(h); q, k, v with per-head norms and RoPE.
    const float* in_norm = layer.input_norm.data_ptr<float>();
    for (int64_t i = 0; i < b; ++i) RmsNormRow(hp + i * h, in_norm, xp + i * h, h, eps);
    at::mm_out(qkv_, x_, layer.wqkv_t);
    const float* qn = layer.q_norm.data_ptr<float>();
    const float* kn = layer.k_norm.data_ptr<float>();
    for (int64_t i = 0; i < b; ++i) {
      const int64_t pos = start_position + i;
      const float* cs = rope_cos_.data() + pos * half;
      const float* sn = rope_sin_.data() + pos * half;
      const float* qsrc = qkvp + i * qkv_dim;
      const float* ksrc = qsrc + q_dim;
      const float* vsrc = ksrc + kv_dim;
      for (int64_t head = 0; head < n_heads; ++head) {
        NormRopeHead(qsrc + head * hd, qn, qp + i * q_dim + head * hd, hd, eps, cs, sn);
      }
      for (int64_t kh = 0; kh < n_kv; ++kh) {
        NormRopeHead(ksrc + kh * hd, kn, k_block_.data() + (kh * b + i) * hd, hd, eps, cs, sn);
        std::memcpy(v_block_.data() + (kh * b + i) * hd, vsrc + kh * hd,
                    static_cast<size_t>(hd) * sizeof(float));
      }
    }

    // 2. Attention of every (row, head) over the context rows and the (visible) block rows.
    AttendBlock(l, b, start_position);

    // 3. h += o_proj(attn); h += down(silu(gate(post_ln(h))) * up(post_ln(h))).
    h_.addmm_(attn_, layer.wo_t);
    const float* post = layer.post_norm.data_ptr<float>();
    for (int64_t i = 0; i < b; ++i) RmsNormRow(hp + i * h, post, xp + i * h, h, eps);
    at::mm_out(gate_up_, x_, layer.w_gate_up_t);
    SwiGluRows(gate_up_.data_ptr<float>(), act_.data_ptr<float>(), b, inter);
    h_.addmm_(act_, layer.w_down_t);
  }

  // 4. logits = target_lm_head(norm(h)).
  out.hidden.copy_(h_);
  const float* fin = w_->final_norm.data_ptr<float>();
  for (int64_t i = 0; i < b; ++i) RmsNormRow(hp + i * h, fin, xp + i * h, h, eps);
  at::mm_out(out.logits, x_, w_->lm_head_t);
}

void DflashHead::EnsureRowOutput(int64_t n, DflashHeadOutput& out) const {
  const int64_t h = config_.hidden_size, vocab = config_.vocab_size;
  if (!out.logits.defined() || out.logits.size(0) != n || out.logits.size(1) != vocab ||
      !out.logits.is_cpu()) {
    out.logits = at::empty({n, vocab}, at::TensorOptions().dtype(at::kFloat));
  }
  if (!out.hidden.defined() || out.hidden.size(0) != n || out.hidden.size(1) != h ||
      !out.hidden.is_cpu() || out.hidden.scalar_type() != at::kFloat) {
    out.hidden = at::empty({n, h}, at::TensorOptions().dtype(at::kFloat));
  }
}

void DflashHead::EmbedBlock(const int32_t* block_tokens, int64_t n) {
  const int64_t h = config_.hidden_size;
  float* hp = h_.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = block_tokens[i];
    if (w_->embedding.scalar_type() == at::kFloat) {
      std::memcpy(hp + i * h, w_->embedding.data_ptr<float>() + id * h,
                  static_cast<size_t>(h) * sizeof(float));
    } else {
      const c10::BFloat16* e = w_->embedding.data_ptr<c10::BFloat16>() + id * h;
      for (int64_t d = 0; d < h; ++d) hp[i * h + d] = static_cast<float>(e[d]);
    }
  }
}

void DflashHead::AttendBlock(size_t l, int64_t b, int64_t start_position) {
  const int64_t hd = config_.head_dim, n_heads = config_.n_heads, q_dim = config_.q_dim();
  const int64_t ctx = context_length_, cap = context_capacity_;
  const int threads = at::get_num_threads();
  const int64_t stride = cap + b + hd;  // scores of every key + one accumulator row
  if (score_stride_ < stride || scores_.size() < static_cast<size_t>(threads * stride)) {
    score_stride_ = stride;
    scores_.assign(static_cast<size_t>(threads * stride), 0.f);
  }
  const float* qp = q_.data_ptr<float>();
  float* attnp = attn_.data_ptr<float>();
  const int64_t group = n_heads / config_.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bool causal = config_.causal;
  const float* kc = ctx_[l].k.data();
  const float* vc = ctx_[l].v.data();
  const float* kb = k_block_.data();
  const float* vb = v_block_.data();
  float* scores_base = scores_.data();
  const int64_t sstride = score_stride_;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, (ctx + b) * hd));
  const int64_t window = w_->layers[l].window;
  at::parallel_for(0, b * n_heads, grain, [&](int64_t begin, int64_t end) {
    float* scores = scores_base + at::get_thread_num() * sstride;
    float* acc = scores + ctx + b;
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r / n_heads, head = r % n_heads, kh = head / group;
      const float* qrow = qp + i * q_dim + head * hd;
      const float* kcb = kc + kh * cap * hd;
      const float* vcb = vc + kh * cap * hd;
      const float* kbb = kb + kh * b * hd;
      const float* vbb = vb + kh * b * hd;
      const int64_t visible = causal ? i + 1 : b;
      // A sliding layer sees keys less than `window` positions behind the query: context rows
      // (row s at position s) from query_position - window + 1 on, block rows from i - window
      // + 1 on (the query's own row always).
      const int64_t ctx_begin =
          window > 0 ? std::min(ctx, std::max<int64_t>(0, start_position + i - window + 1)) : 0;
      const int64_t block_begin = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
      float max_score = -INFINITY;
      for (int64_t s = ctx_begin; s < ctx; ++s) {
        scores[s] = Dot(qrow, kcb + s * hd, hd) * scale;
        max_score = std::max(max_score, scores[s]);
      }
      for (int64_t j = block_begin; j < visible; ++j) {
        scores[ctx + j] = Dot(qrow, kbb + j * hd, hd) * scale;
        max_score = std::max(max_score, scores[ctx + j]);
      }
      std::fill(acc, acc + hd, 0.f);
      float denom = 0.f;
      // Visible keys: context rows [ctx_begin, ctx), then block rows [block_begin, visible).
      auto accumulate = [&](float score, const float* vrow) {
        const float p = std::exp(score - max_score);
        denom += p;
        for (int64_t d = 0; d < hd; ++d) acc[d] += p * vrow[d];
      };
      for (int64_t s = ctx_begin; s < ctx; ++s) accumulate(scores[s], vcb + s * hd);
      for (int64_t j = block_begin; j < visible; ++j) accumulate(scores[ctx + j], vbb + j * hd);
      const float inv = 1.0f / denom;
      float* o = attnp + i * q_dim + head * hd;
      for (int64_t d = 0; d < hd; ++d) o[d] = acc[d] * inv;
    }
  });
}

at::Tensor DflashHead::BlockAllowed(int64_t n, int64_t start_position, int64_t window) const {
  const int64_t ctx = context_length_;
  const auto opts = at::TensorOptions(at::kLong).device(placement_.device);
  const at::Tensor s = at::arange(ctx + n, opts).unsqueeze(0);  // key slot [1, S]
  const at::Tensor i = at::arange(n, opts).unsqueeze(1);        // block row [n, 1]
  const at::Tensor j = s - ctx;                                 // block column of a block key
  at::Tensor ctx_ok = s.lt(ctx), block_ok = s.ge(ctx);
  if (config_.causal) block_ok = block_ok.logical_and(j.le(i));
  if (window > 0) {
    ctx_ok = ctx_ok.logical_and(s.ge(i + (start_position - window + 1)));
    block_ok = block_ok.logical_and(j.ge(i - window + 1));
  }
  return ctx_ok.logical_or(block_ok).expand({n, ctx + n});
}

void DflashHead::ForwardBatch(const std::vector<DflashBlock>& blocks) {
  SPECBED_CHECK(!blocks.empty(), "DflashHead::ForwardBatch: no blocks");
  for (size_t i = 0; i < blocks.size(); ++i) {
    const DflashBlock& b = blocks[i];
    SPECBED_CHECK(b.head != nullptr && b.out != nullptr, "DflashHead::ForwardBatch: block ", i,
                  " has no head or no output");
    SPECBED_CHECK(b.head->w_ == blocks[0].head->w_, "DflashHead::ForwardBatch: block ", i,
                  "'s head has other weights than block 0's (a batch shares one DflashWeights)");
    for (size_t j = 0; j < i; ++j) {
      SPECBED_CHECK(blocks[j].head != b.head, "DflashHead::ForwardBatch: blocks ", j, " and ", i,
                    " have the same head (one block per sequence)");
    }
    b.head->CheckBlock(b.tokens, b.n, b.start_position);
  }
  if (blocks[0].head->placement_.aten) {
    ForwardBlocksAten(blocks);
    return;
  }
  for (const DflashBlock& b : blocks) b.head->Forward(b.tokens, b.n, b.start_position, *b.out);
}

void DflashHead::ForwardBlocksAten(const std::vector<DflashBlock>& blocks) {
  g_forwards.fetch_add(1, std::memory_order_relaxed);
  DflashHead& lead = *blocks[0].head;  // its staging buffer and device RoPE table serve the batch
  const DflashWeights& w = *lead.w_;
  const DflashConfig& c = w.config;
  const int64_t hd = c.head_dim, n_heads = c.n_heads, n_kv = c.n_kv_heads, q_dim = c.q_dim(),
                kv_dim = c.kv_dim();
  const double eps = c.rms_norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const at::Device device = w.placement.device;
  int64_t total = 0, max_position = 1;
  for (const DflashBlock& b : blocks) {
    total += b.n;
    max_position = std::max(max_position, b.start_position + b.n);
  }
  // One upload: every block's tokens, then their positions.
  lead.staging_.Resize(2 * total, 0);
  for (int64_t i = 0, row = 0; i < static_cast<int64_t>(blocks.size()); ++i) {
    for (int64_t j = 0; j < blocks[i].n; ++j, ++row) {
      lead.staging_.ints()[row] = blocks[i].tokens[j];
      lead.staging_.ints()[total + row] = blocks[i].start_position + j;
    }
  }
  const at::Tensor staged = lead.staging_.Upload(device).first;
  lead.rope_device_.Ensure(w.inv_freq, max_position, device);
  const at::Tensor pos = staged.narrow(0, total, total);
  const at::Tensor cos = lead.rope_device_.Cos(pos), sin = lead.rope_device_.Sin(pos);
  // A block's keys and values go into its head's context buffers right after the context (slots
  // the next AppendContext overwrites), so attention reads one view of [context | block]: no
  // per-layer copy of the whole context. Masks: one per block and distinct layer window.
  std::vector<std::map<int64_t, at::Tensor>> allowed(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    DflashHead& head = *blocks[i].head;
    const int64_t need = head.context_length_ + blocks[i].n;
    if (need > head.context_capacity_) head.GrowContext(std::max(need, 2 * head.context_capacity_));
    for (const DflashWeights::Layer& layer : w.layers) {
      at::Tensor& mask = allowed[i][layer.window];
      if (!mask.defined())
        mask = head.BlockAllowed(blocks[i].n, blocks[i].start_position, layer.window);
    }
  }
  at::Tensor h = w.embedding.index_select(0, staged.narrow(0, 0, total));
  std::vector<at::Tensor> attn(blocks.size());
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const DflashWeights::Layer& layer = w.layers[l];
    const at::Tensor qkv = at::mm(RmsNormRowsAten(h, layer.input_norm, eps), layer.wqkv_t);
    const at::Tensor q = RotateHalfRopeAten(
        RmsNormRowsAten(qkv.narrow(1, 0, q_dim).view({total, n_heads, hd}), layer.q_norm, eps), cos,
        sin);
    const at::Tensor k = RotateHalfRopeAten(
        RmsNormRowsAten(qkv.narrow(1, q_dim, kv_dim).view({total, n_kv, hd}), layer.k_norm, eps),
        cos, sin);
    const at::Tensor v = qkv.narrow(1, q_dim + kv_dim, kv_dim).view({total, n_kv, hd});
    for (int64_t i = 0, row = 0; i < static_cast<int64_t>(blocks.size()); row += blocks[i++].n) {
      const DflashHead& head = *blocks[i].head;
      const int64_t n = blocks[i].n, ctx = head.context_length_;
      const LayerContext& context = head.ctx_[l];
      context.k_t.narrow(1, ctx, n).copy_(k.narrow(0, row, n).transpose(0, 1));
      context.v_t.narrow(1, ctx, n).copy_(v.narrow(0, row, n).transpose(0, 1));
      attn[i] = MaskedGqaAttentionAten(q.narrow(0, row, n), context.k_t.narrow(1, 0, ctx + n),
                                       context.v_t.narrow(1, 0, ctx + n),
                                       allowed[i].at(layer.window), scale);
    }
    h = h + at::mm(attn.size() == 1 ? attn[0] : at::cat(attn), layer.wo_t);
    h = h + at::mm(SwiGluAten(at::mm(RmsNormRowsAten(h, layer.post_norm, eps), layer.w_gate_up_t)),
                   layer.w_down_t);
  }
  const at::Tensor logits =
      at::mm(RmsNormRowsAten(h, w.final_norm, eps), w.lm_head_t).to(at::kFloat);
  for (int64_t i = 0, row = 0; i < static_cast<int64_t>(blocks.size()); row += blocks[i++].n) {
    blocks[i].out->hidden = h.narrow(0, row, blocks[i].n);
    blocks[i].out->logits = logits.narrow(0, row, blocks[i].n);
  }
}

}  // namespace specbed
