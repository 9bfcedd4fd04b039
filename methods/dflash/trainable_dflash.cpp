// Differentiable DFlash / JetSpec block head and its losses (see trainable_dflash.h).
// Checked by: tests/methods/dflash_train_test.cpp.
#include "methods/dflash/trainable_dflash.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "base/enum_names.h"
#include "base/error.h"
#include "methods/common/named_params.h"
#include "methods/common/train/param_device.h"
#include "methods/dflash/dflash_checkpoint.h"
#include "models/tensor_util.h"

namespace specbed {
namespace {

// RMSNorm and rotate_half RoPE: the shared ATen ops (float32 math, x's dtype).
constexpr auto RmsNorm = RmsNormLastDimAten;
constexpr auto Rope = RotateHalfAten;

}  // namespace

TrainableDflash::TrainableDflash(const DflashConfig& config,
                                 const std::map<std::string, at::Tensor>& tensors,
                                 const at::Tensor& target_embedding,
                                 const at::Tensor& target_lm_head)
    : config_(config) {
  config_.Validate("DFlash trainable head");
  ValidateDflashTensors(config_, tensors, "DFlash trainable head");
  SPECBED_CHECK(config_.mask_token_id >= 0,
                "DFlash trainable head: the config needs dflash_config.mask_token_id");
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    SPECBED_CHECK(config_.LayerWindow(l) == 0, "DFlash trainable head: layer ", l,
                  " is \"sliding_attention\"; training supports full-attention layers only "
                  "(sliding windows are implemented for drafting, not in the training forward)");
  }
  for (const auto& [name, shape] : ExpectedDflashTensorShapes(config_)) {
    at::Tensor p = tensors.at(name).detach().to(at::kCPU).to(at::kFloat).contiguous().clone();
    params_.emplace_back(name, p.set_requires_grad(true));
  }
  const int64_t v = config_.vocab_size, h = config_.hidden_size;
  auto frozen = [&](const at::Tensor& t, const char* what) {
    SPECBED_CHECK(t.defined() && t.dim() == 2 && t.size(0) == v && t.size(1) == h,
                  "DFlash trainable head: the target's ", what, " must be [", v, ", ", h, "], got ",
                  t.defined() ? t.sizes() : at::IntArrayRef{});
    return t.detach().to(at::kCPU).to(at::kFloat).contiguous().clone();
  };
  embedding_ = frozen(target_embedding, "token embedding");
  lm_head_ = frozen(target_lm_head, "lm_head");
  const std::vector<double> inv = RopeInverseFrequencies(config_.RopeConfig());
  inv_freq_ = at::empty({static_cast<int64_t>(inv.size())}, at::kDouble);
  std::copy(inv.begin(), inv.end(), inv_freq_.data_ptr<double>());
}

void TrainableDflash::To(const at::Device& device) {
  MoveParamsTo(params_, device);
  embedding_ = OnDevice(embedding_, device);
  lm_head_ = OnDevice(lm_head_, device);
}

const at::Tensor& TrainableDflash::Param(const std::string& name) const {
  return FindParam(params_, name, "DFlash trainable head");
}

int64_t TrainableDflash::ParameterCount() const {
  return CountParams(params_);
}

std::map<std::string, at::Tensor> TrainableDflash::Tensors() const {
  return CloneParams(params_);
}

at::Tensor TrainableDflash::Forward(const at::Tensor& features, const at::Tensor& tokens,
                                    const at::Tensor& anchors) const {
  const DflashConfig& c = config_;
  SPECBED_CHECK(tokens.dim() == 2 && tokens.scalar_type() == at::kLong,
                "DFlash head forward: tokens must be int64 [N, T], got ", tokens.sizes());
  const int64_t n = tokens.size(0), t = tokens.size(1);
  SPECBED_CHECK(features.dim() == 3 && features.size(0) == n && features.size(1) == t &&
                    features.size(2) == c.fc_in_dim() && features.scalar_type() == at::kFloat,
                "DFlash head forward: features must be float32 [", n, ", ", t, ", ", c.fc_in_dim(),
                "], got ", features.sizes());
  SPECBED_CHECK(anchors.dim() == 2 && anchors.size(0) == n && anchors.scalar_type() == at::kLong,
                "DFlash head forward: anchors must be int64 [", n, ", A], got ", anchors.sizes());
  const int64_t a = anchors.size(1), b = c.block_size, h = c.hidden_size, nh = c.n_heads,
                nkv = c.n_kv_heads, hd = c.head_dim, group = nh / nkv;
  const double eps = c.rms_norm_eps;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const at::Tensor anchor0 = anchors.clamp_min(0);  // unused slots compute on position 0

  // RoPE tables for positions 0 .. T + B - 1.
  const at::Tensor angles = at::arange(t + b, at::kDouble).unsqueeze(1) * inv_freq_.unsqueeze(0);
  // Computed on the CPU (the same bits on every device), then one copy each to the device.
  const at::Tensor cos_all = OnDevice(angles.cos().to(at::kFloat), device());
  const at::Tensor sin_all = OnDevice(angles.sin().to(at::kFloat), device());
  // Context rows at positions 0..T-1: [1, T, 1, hd/2] (broadcast over N and heads).
  const at::Tensor cos_ctx = cos_all.narrow(0, 0, t).view({1, t, 1, hd / 2});
  const at::Tensor sin_ctx = sin_all.narrow(0, 0, t).view({1, t, 1, hd / 2});
  // Block rows: position anchor + k: [N, A, B, 1, hd/2].
  const at::Tensor block_pos =
      anchor0.unsqueeze(2) + at::arange(b, tokens.options()).view({1, 1, b});
  const at::Tensor cos_blk = cos_all.index_select(0, block_pos.reshape(-1)).view({n, a, b, 1, -1});
  const at::Tensor sin_blk = sin_all.index_select(0, block_pos.reshape(-1)).view({n, a, b, 1, -1});

  // Visibility. Context key s is visible to every row of anchor a's block iff s < a (false for
  // unused slots too: they then only see their own block). [N, 1, A, 1, T].
  const at::Tensor ctx_visible =
      (at::arange(t, tokens.options()).view({1, 1, t}) < anchors.unsqueeze(2))
          .view({n, 1, a, 1, t});
  at::Tensor block_visible = at::ones({b, b}, tokens.options().dtype(at::kBool));
  if (c.causal) block_visible = block_visible.tril();
  const at::Tensor visible = at::cat({ctx_visible.expand({n, 1, a, b, t}),
                                      block_visible.view({1, 1, 1, b, b}).expand({n, 1, a, b, b})},
                                     -1);  // [N, 1, A, B, T + B]

  // Context: c = hidden_norm(fc(features)) [N, T, H].
  const at::Tensor ctx =
      RmsNorm(at::matmul(features, Param(kDflashFc).t()), Param(kDflashHiddenNorm), eps);

  // Block input: the target's embedding of [token a, MASK, ...].
  at::Tensor block_tokens = at::full({n, a, b}, c.mask_token_id, tokens.options());
  block_tokens.select(2, 0).copy_(tokens.gather(1, anchor0));
  at::Tensor hstate = embedding_.index_select(0, block_tokens.reshape(-1)).view({n, a * b, h});

  auto expand_kv = [&](const at::Tensor& x) {  // [..., nkv, hd] -> [..., nh, hd] (GQA)
    std::vector<int64_t> shape = x.sizes().vec();
    const int64_t dims = x.dim();
    std::vector<int64_t> expanded = shape;
    expanded.insert(expanded.begin() + (dims - 1), group);
    std::vector<int64_t> unsq = shape;
    unsq.insert(unsq.begin() + (dims - 1), 1);
    shape[dims - 2] = nh;
    return x.view(unsq).expand(expanded).reshape(shape);
  };

  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto p = [&](const char* suffix) -> const at::Tensor& {
      return Param(DflashLayerTensorName(l, suffix));
    };
    const at::Tensor x = RmsNorm(hstate, p(kDflashInputNorm), eps);  // [N, A*B, H]
    // Queries and block keys/values: [N, A, B, heads, hd].
    at::Tensor q =
        RmsNorm(at::matmul(x, p(kDflashQProj).t()).view({n, a, b, nh, hd}), p(kDflashQNorm), eps);
    q = Rope(q, cos_blk, sin_blk);
    at::Tensor kb =
        RmsNorm(at::matmul(x, p(kDflashKProj).t()).view({n, a, b, nkv, hd}), p(kDflashKNorm), eps);
    kb = Rope(kb, cos_blk, sin_blk);
    const at::Tensor vb = at::matmul(x, p(kDflashVProj).t()).view({n, a, b, nkv, hd});
    // Context keys/values (the same injected rows in every layer's attention): [N, T, heads, hd].
    at::Tensor kc =
        RmsNorm(at::matmul(ctx, p(kDflashKProj).t()).view({n, t, nkv, hd}), p(kDflashKNorm), eps);
    kc = Rope(kc, cos_ctx, sin_ctx);
    const at::Tensor vc = at::matmul(ctx, p(kDflashVProj).t()).view({n, t, nkv, hd});

    const at::Tensor qh = q.permute({0, 3, 1, 2, 4});               // [N, nh, A, B, hd]
    const at::Tensor kbh = expand_kv(kb).permute({0, 3, 1, 4, 2});  // [N, nh, A, hd, B]
    const at::Tensor vbh = expand_kv(vb).permute({0, 3, 1, 2, 4});  // [N, nh, A, B, hd]
    const at::Tensor kch = expand_kv(kc).permute({0, 2, 3, 1});     // [N, nh, hd, T]
    const at::Tensor vch = expand_kv(vc).permute({0, 2, 1, 3});     // [N, nh, T, hd]
    const at::Tensor s_ctx = at::matmul(qh.reshape({n, nh, a * b, hd}), kch).view({n, nh, a, b, t});
    const at::Tensor s_blk = at::matmul(qh, kbh);  // [N, nh, A, B, B]
    const at::Tensor scores =
        (at::cat({s_ctx, s_blk}, -1) * scale)
            .masked_fill(visible.logical_not(), -std::numeric_limits<float>::infinity());
    const at::Tensor probs = at::softmax(scores, -1);
    const at::Tensor attn =
        at::matmul(probs.narrow(-1, 0, t).reshape({n, nh, a * b, t}), vch).view({n, nh, a, b, hd}) +
        at::matmul(probs.narrow(-1, t, b), vbh);  // [N, nh, A, B, hd]
    const at::Tensor merged = attn.permute({0, 2, 3, 1, 4}).reshape({n, a * b, nh * hd});
    hstate = hstate + at::matmul(merged, p(kDflashOProj).t());
    const at::Tensor y = RmsNorm(hstate, p(kDflashPostNorm), eps);
    const at::Tensor act =
        at::silu(at::matmul(y, p(kDflashGateProj).t())) * at::matmul(y, p(kDflashUpProj).t());
    hstate = hstate + at::matmul(act, p(kDflashDownProj).t());
  }
  const at::Tensor out = RmsNorm(hstate, Param(kDflashFinalNorm), eps);
  return at::matmul(out, lm_head_.t()).view({n, a, b, c.vocab_size});
}

constexpr EnumName<DflashLossKind> kDflashLossNames[] = {
    {DflashLossKind::kCrossEntropy, "ce"},
    {DflashLossKind::kForwardKl, "forward_kl"},
    {DflashLossKind::kReverseKl, "reverse_kl"}};

DflashLossKind ParseDflashLossKind(const std::string& name) {
  if (const std::optional<DflashLossKind> kind = EnumValueOf(kDflashLossNames, name)) return *kind;
  Fail("unknown DFlash loss '", name,
       "'; expected one of: ", Join(EnumNames(kDflashLossNames), ", "));
}

const char* DflashLossKindName(DflashLossKind kind) {
  return EnumNameOf(kDflashLossNames, kind);
}

DflashLossResult DflashBlockLoss(const at::Tensor& logits, const at::Tensor& tokens,
                                 const at::Tensor& anchors, const at::Tensor& loss_mask,
                                 const at::Tensor& target_logits,
                                 const DflashLossOptions& options) {
  SPECBED_CHECK(logits.dim() == 4, "DFlash loss: logits must be [N, A, B, V], got ",
                logits.sizes());
  const int64_t n = logits.size(0), a = logits.size(1), b = logits.size(2), v = logits.size(3);
  const int64_t t = tokens.size(1);
  SPECBED_CHECK(
      tokens.dim() == 2 && tokens.size(0) == n && anchors.sizes() == at::IntArrayRef({n, a}) &&
          loss_mask.sizes() == tokens.sizes(),
      "DFlash loss: tokens / loss_mask must be [", n, ", T] and anchors [", n, ", ", a, "]");
  const bool kl = options.kind != DflashLossKind::kCrossEntropy;
  SPECBED_CHECK(
      !kl || (target_logits.defined() && target_logits.dim() == 3 && target_logits.size(0) == n &&
              target_logits.size(1) == t && target_logits.size(2) == v),
      "DFlash loss: the KL losses need the target's logits [", n, ", ", t, ", ", v, "]");
  SPECBED_CHECK(options.temperature > 0, "DFlash loss: temperature must be > 0, got ",
                options.temperature);

  // Row k of anchor i reads sequence position pos = anchor + k (label) and pos - 1 (teacher).
  const at::Tensor k_idx = at::arange(b, anchors.options()).view({1, 1, b});
  const at::Tensor label_pos = anchors.unsqueeze(2) + k_idx;  // [N, A, B]
  const at::Tensor prev = (label_pos - 1).clamp(0, t - 1);
  at::Tensor valid = (anchors.unsqueeze(2) >= 0) & (k_idx >= 1) & (label_pos - 1 < t);
  valid = valid & (loss_mask.gather(1, prev.view({n, a * b})).view({n, a, b}) > 0.5);
  const at::Tensor labels =
      tokens.gather(1, label_pos.clamp(0, t - 1).view({n, a * b})).view({n, a, b});

  // Per-row weights w_k (0 for uncounted rows).
  at::Tensor wk = at::ones({b}, at::kFloat);
  if (options.gamma > 0) {
    for (int64_t k = 1; k < b; ++k) {
      wk.data_ptr<float>()[k] = static_cast<float>(std::exp(-(k - 1) / options.gamma));
    }
  }
  const at::Tensor weights = valid.to(at::kFloat) * OnDevice(wk, logits.device()).view({1, 1, b});

  const at::Tensor logq = at::log_softmax(logits / options.temperature, -1);
  at::Tensor row_loss;  // [N, A, B]
  if (!kl) {
    row_loss = -logq.gather(3, labels.unsqueeze(3)).squeeze(3);
  } else {
    const at::Tensor teacher =
        target_logits.gather(1, prev.view({n, a * b, 1}).expand({n, a * b, v})).view({n, a, b, v});
    const at::Tensor logp = at::log_softmax(teacher / options.temperature, -1);
    if (options.kind == DflashLossKind::kForwardKl) {
      row_loss = (logp.exp() * (logp - logq)).sum(-1);
    } else {
      row_loss = (logq.exp() * (logq - logp)).sum(-1);
    }
  }
  DflashLossResult r;
  const at::Tensor total_w = weights.sum();
  r.loss =
      total_w.item<float>() > 0 ? (row_loss * weights).sum() / total_w : (row_loss * weights).sum();

  // Statistics (no grad).
  const at::Tensor hits = (logits.detach().argmax(-1) == labels) & valid;  // [N, A, B]
  const at::Tensor vf = valid.to(at::kFloat);
  // Read on the host: one copy each off the CPU (the same tensors on it).
  const at::Tensor count = ToHost(vf.sum(at::IntArrayRef{0, 1}));
  const at::Tensor loss_sum = ToHost((row_loss.detach() * vf).sum(at::IntArrayRef{0, 1}));
  const at::Tensor hit_sum = ToHost(hits.to(at::kFloat).sum(at::IntArrayRef{0, 1}));
  r.row_loss.assign(b, 0);
  r.row_top1.assign(b, 0);
  r.row_count.assign(b, 0);
  for (int64_t k = 0; k < b; ++k) {
    const double cnt = count[k].item<double>();
    r.row_count[k] = cnt;
    if (cnt > 0) {
      r.row_loss[k] = loss_sum[k].item<double>() / cnt;
      r.row_top1[k] = hit_sum[k].item<double>() / cnt;
    }
  }
  // Leading run of hits per block: cumprod over rows 1..B-1.
  if (b > 1) {
    const at::Tensor run = hits.narrow(2, 1, b - 1).to(at::kLong).cumprod(2).sum(2);  // [N, A]
    const at::Tensor counted = valid.select(2, 1);
    const double blocks = counted.sum().item<double>();
    r.blocks = blocks;
    r.chain_tau =
        blocks > 0 ? 1.0 + (run.to(at::kDouble) * counted).sum().item<double>() / blocks : 0;
  }
  return r;
}

at::Tensor SampleDflashAnchors(const at::Tensor& loss_mask, int64_t num_anchors,
                               const std::vector<uint64_t>& row_seeds) {
  SPECBED_CHECK(loss_mask.dim() == 2 && loss_mask.scalar_type() == at::kFloat && loss_mask.is_cpu(),
                "DFlash anchors: loss_mask must be float32 [N, T] on the CPU");
  SPECBED_CHECK(num_anchors >= 1, "DFlash anchors: need at least one anchor per sequence, got ",
                num_anchors);
  const int64_t n = loss_mask.size(0), t = loss_mask.size(1);
  SPECBED_CHECK(static_cast<int64_t>(row_seeds.size()) == n, "DFlash anchors: ", n, " rows but ",
                row_seeds.size(), " seeds");
  at::Tensor out = at::full({n, num_anchors}, -1, at::kLong);
  const at::Tensor mask = loss_mask.contiguous();
  const float* m = mask.data_ptr<float>();
  int64_t* o = out.data_ptr<int64_t>();
  std::vector<int64_t> pool;
  for (int64_t r = 0; r < n; ++r) {
    pool.clear();
    for (int64_t i = 0; i < t; ++i) {
      if (m[r * t + i] > 0.5f) pool.push_back(i);
    }
    std::mt19937_64 rng(row_seeds[r]);
    const int64_t take = std::min<int64_t>(num_anchors, static_cast<int64_t>(pool.size()));
    for (int64_t i = 0; i < take; ++i) {  // partial Fisher-Yates
      const int64_t left = static_cast<int64_t>(pool.size()) - i;
      const int64_t j = i + static_cast<int64_t>(rng() % static_cast<uint64_t>(left));
      std::swap(pool[i], pool[j]);
    }
    std::sort(pool.begin(), pool.begin() + take);
    for (int64_t i = 0; i < take; ++i) o[r * num_anchors + i] = pool[i];
  }
  return out;
}

}  // namespace specbed
