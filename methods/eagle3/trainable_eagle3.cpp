// Differentiable EAGLE-3 head and TTT loss (see trainable_eagle3.h).
// Checked by: tests/methods/eagle3_train_test.cpp.
#include "methods/eagle3/trainable_eagle3.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>

#include "base/enum_names.h"
#include "base/error.h"
#include "methods/common/named_params.h"
#include "methods/common/train/param_device.h"
#include "methods/eagle3/eagle3_checkpoint.h"
#include "models/device.h"
#include "models/tensor_util.h"

namespace specbed {
namespace {

// RMSNorm and rotate_half RoPE: the shared ATen ops (float32 math, x's dtype).
constexpr auto RmsNorm = RmsNormLastDimAten;
constexpr auto Rope = RotateHalfAten;

// Row t shifted to read entry t + shift (zero / `fill` past the end): [B, T, ...].
at::Tensor ShiftLeft(const at::Tensor& x, int64_t shift) {
  const int64_t t = x.size(1);
  if (shift <= 0) return x;
  if (shift >= t) return at::zeros_like(x);
  std::vector<int64_t> pad_shape = x.sizes().vec();
  pad_shape[1] = shift;
  return at::cat({x.narrow(1, shift, t - shift), at::zeros(pad_shape, x.options())}, 1);
}

}  // namespace

TrainableEagle3::TrainableEagle3(const Eagle3Config& config,
                                 const std::map<std::string, at::Tensor>& tensors,
                                 const at::Tensor& target_embedding)
    : config_(config) {
  config_.Validate("EAGLE-3 trainable head");
  ValidateEagle3Tensors(config_, tensors, "EAGLE-3 trainable head");
  const auto shapes = ExpectedEagle3TensorShapes(config_);
  for (const auto& [name, shape] : shapes) {
    if (name == kEagle3D2t || name == kEagle3T2d) continue;
    at::Tensor p = tensors.at(name).detach().to(at::kFloat).contiguous().clone();
    params_.emplace_back(name, p.set_requires_grad(true));
  }
  const int64_t vd = config_.draft_vocab_size, v = config_.vocab_size;
  auto d2t = tensors.find(kEagle3D2t);
  auto t2d = tensors.find(kEagle3T2d);
  if (d2t != tensors.end()) {
    d2t_ = d2t->second.to(at::kLong).contiguous().clone();
    t2d_ = t2d->second.to(at::kBool).contiguous().clone();
  } else {
    d2t_ = at::zeros({vd}, at::kLong);
    t2d_ = at::ones({v}, at::kBool);
  }
  draft_ids_ = d2t_ + at::arange(vd, at::kLong);
  auto embed = tensors.find(kEagle3Embed);
  own_embedding_ = embed != tensors.end();
  const at::Tensor& e = own_embedding_ ? embed->second : target_embedding;
  SPECBED_CHECK(e.defined() && e.dim() == 2 && e.size(0) == v && e.size(1) == config_.hidden_size,
                "EAGLE-3 trainable head: the token embedding must be [", v, ", ",
                config_.hidden_size, "], got ", e.defined() ? e.sizes() : at::IntArrayRef{});
  embedding_ = e.detach().to(at::kCPU, at::kFloat).contiguous().clone();
  inv_freq_ = RopeInverseFrequencies(config_.RopeConfig());
}

void TrainableEagle3::To(const at::Device& device) {
  MoveParamsTo(params_, device);
  embedding_ = OnDevice(embedding_, device);
  d2t_ = OnDevice(d2t_, device);
  draft_ids_ = OnDevice(draft_ids_, device);
  t2d_ = OnDevice(t2d_, device);
}

const at::Tensor& TrainableEagle3::Param(const char* name) const {
  return FindParam(params_, name, "EAGLE-3 trainable head");
}

int64_t TrainableEagle3::ParameterCount() const {
  return CountParams(params_);
}

std::map<std::string, at::Tensor> TrainableEagle3::Tensors() const {
  std::map<std::string, at::Tensor> out = CloneParams(params_);
  out[kEagle3D2t] = d2t_.clone();
  out[kEagle3T2d] = t2d_.clone();
  if (own_embedding_) out[kEagle3Embed] = embedding_.clone();
  return out;
}

std::vector<at::Tensor> TrainableEagle3::Forward(const at::Tensor& aux, const at::Tensor& tokens,
                                                 int64_t unroll) const {
  const Eagle3Config& c = config_;
  SPECBED_CHECK(tokens.dim() == 2 && tokens.scalar_type() == at::kLong,
                "EAGLE-3 head forward: ", "tokens must be int64 [B, T]");
  const int64_t b = tokens.size(0), t = tokens.size(1);
  SPECBED_CHECK(aux.dim() == 3 && aux.size(0) == b && aux.size(1) == t &&
                    (aux.size(2) == c.fc_in_dim() || aux.size(2) == c.hidden_size),
                "EAGLE-3 head forward: aux must be float32 [", b, ", ", t, ", ", c.fc_in_dim(),
                "], got ", aux.sizes());
  SPECBED_CHECK(unroll >= 1, "EAGLE-3 head forward: unroll must be >= 1");
  SPECBED_CHECK(SameDevice(tokens.device(), device()) && SameDevice(aux.device(), device()),
                "EAGLE-3 head forward: tokens (", tokens.device(), ") and aux (", aux.device(),
                ") must be on the parameters' device ", device());
  const int64_t h = c.hidden_size, nh = c.n_heads, nkv = c.n_kv_heads, hd = c.head_dim;
  const double eps = c.rms_norm_eps;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));

  // RoPE tables for positions 0 .. T + unroll - 1.
  const int64_t n_pos = t + unroll;
  at::Tensor inv = at::empty({hd / 2}, at::kDouble);
  for (int64_t i = 0; i < hd / 2; ++i) inv.data_ptr<double>()[i] = inv_freq_[i];
  const at::Tensor angles = at::arange(n_pos, at::kDouble).unsqueeze(1) * inv.unsqueeze(0);
  // Computed on the CPU (the same bits on every device), then one copy each to the device.
  const at::Tensor cos_all = OnDevice(angles.cos().to(at::kFloat), device());
  const at::Tensor sin_all = OnDevice(angles.sin().to(at::kFloat), device());

  const at::Tensor causal =
      at::ones({t, t}, tokens.options().dtype(at::kBool)).tril();  // [query, key]
  const at::Tensor& wq = Param(kEagle3QProj);
  const at::Tensor& wk = Param(kEagle3KProj);
  const at::Tensor& wv = Param(kEagle3VProj);
  const at::Tensor& wo = Param(kEagle3OProj);
  const at::Tensor& w_in = Param(kEagle3InputNorm);
  const at::Tensor& w_hid = Param(kEagle3HiddenNorm);
  const at::Tensor& w_post = Param(kEagle3PostNorm);
  const at::Tensor& w_gate = Param(kEagle3GateProj);
  const at::Tensor& w_up = Param(kEagle3UpProj);
  const at::Tensor& w_down = Param(kEagle3DownProj);
  const at::Tensor& w_norm = Param(kEagle3FinalNorm);
  const at::Tensor& w_head = Param(kEagle3LmHead);

  at::Tensor g = aux.size(2) == h && aux.size(2) != c.fc_in_dim()
                     ? aux
                     : at::matmul(aux, Param(kEagle3Fc).t());  // [B, T, H]
  at::Tensor k0, v0;                                           // [B, nh, T, hd] (expanded)
  std::vector<at::Tensor> k_diag, v_diag;                      // steps 1..k at the same row
  std::vector<at::Tensor> logits;
  for (int64_t k = 0; k < unroll; ++k) {
    const at::Tensor tok = ShiftLeft(tokens, 1 + k);
    const at::Tensor e = at::embedding(embedding_, tok);  // [B, T, H]
    const at::Tensor gn = RmsNorm(g, w_hid, eps);
    const at::Tensor x = at::cat({RmsNorm(e, w_in, eps), gn}, -1);  // [B, T, 2H]
    const at::Tensor cos = cos_all.narrow(0, k, t), sin = sin_all.narrow(0, k, t);
    const at::Tensor q = Rope(at::matmul(x, wq.t()).view({b, t, nh, hd}).transpose(1, 2), cos, sin);
    at::Tensor kk = Rope(at::matmul(x, wk.t()).view({b, t, nkv, hd}).transpose(1, 2), cos, sin);
    at::Tensor vv = at::matmul(x, wv.t()).view({b, t, nkv, hd}).transpose(1, 2);
    if (nkv != nh) {
      kk = kk.repeat_interleave(nh / nkv, 1);
      vv = vv.repeat_interleave(nh / nkv, 1);
    }
    at::Tensor attn;
    if (k == 0) {
      k0 = kk;
      v0 = vv;
      const at::Tensor s = at::matmul(q, k0.transpose(-1, -2)) * scale;  // [B, nh, T, T]
      attn = at::matmul(at::softmax(s.masked_fill(~causal, -INFINITY), -1), v0);
    } else {
      k_diag.push_back(kk);
      v_diag.push_back(vv);
      std::vector<at::Tensor> parts = {
          (at::matmul(q, k0.transpose(-1, -2)) * scale).masked_fill(~causal, -INFINITY)};
      for (const at::Tensor& kd : k_diag) parts.push_back((q * kd).sum(-1, true) * scale);
      const at::Tensor w = at::softmax(at::cat(parts, -1), -1);  // [B, nh, T, T + k]
      attn = at::matmul(w.narrow(-1, 0, t), v0);
      for (int64_t j = 0; j < k; ++j) attn = attn + w.narrow(-1, t + j, 1) * v_diag[j];
    }
    attn = attn.transpose(1, 2).reshape({b, t, nh * hd});
    const at::Tensor residual = c.norm_before_residual ? gn : g;
    at::Tensor hs = residual + at::matmul(attn, wo.t());
    const at::Tensor hn = RmsNorm(hs, w_post, eps);
    hs = hs +
         at::matmul(at::silu(at::matmul(hn, w_gate.t())) * at::matmul(hn, w_up.t()), w_down.t());
    logits.push_back(at::matmul(RmsNorm(hs, w_norm, eps), w_head.t()));
    g = hs;
  }
  return logits;
}

constexpr EnumName<TttLossNorm> kTttLossNormNames[] = {{TttLossNorm::kCounted, "counted"},
                                                       {TttLossNorm::kAllPositions, "all"}};

const char* TttLossNormName(TttLossNorm norm) {
  return EnumNameOf(kTttLossNormNames, norm);
}

TttLossNorm ParseTttLossNorm(const std::string& name) {
  if (const std::optional<TttLossNorm> norm = EnumValueOf(kTttLossNormNames, name)) return *norm;
  Fail("eagle3: unknown TTT loss normalisation '", name,
       "' (expected 'counted': per step by its counted positions, or 'all': by every position "
       "of the batch, as the EAGLE-3 reference)");
}

TttLossResult Eagle3TttLoss(const std::vector<at::Tensor>& logits, const at::Tensor& target_logits,
                            const at::Tensor& loss_mask, const at::Tensor& draft_ids,
                            const at::Tensor& t2d, double decay, TttLossNorm norm) {
  SPECBED_CHECK(!logits.empty(), "EAGLE-3 TTT loss: no steps");
  SPECBED_CHECK(target_logits.dim() == 3 && loss_mask.dim() == 2 &&
                    target_logits.size(0) == loss_mask.size(0) &&
                    target_logits.size(1) == loss_mask.size(1),
                "EAGLE-3 TTT loss: target logits [B, T, V] and loss mask [B, T] disagree: ",
                target_logits.sizes(), " vs ", loss_mask.sizes());
  TttLossResult r;
  at::Tensor total;
  double weight = 1.0;
  for (size_t k = 0; k < logits.size(); ++k) {
    const int64_t shift = static_cast<int64_t>(k) + 1;
    at::Tensor p, mask, target_top;
    {
      at::NoGradGuard no_grad;
      const at::Tensor tgt = ShiftLeft(target_logits, shift);
      const at::Tensor tgt_d = tgt.index_select(-1, draft_ids);
      p = at::softmax(tgt_d, -1);
      target_top = tgt_d.argmax(-1);
      const at::Tensor in_vocab =
          t2d.index_select(0, tgt.argmax(-1).reshape(-1)).view(loss_mask.sizes()).to(at::kFloat);
      mask = ShiftLeft(loss_mask.unsqueeze(-1), shift).squeeze(-1) * in_vocab;
    }
    const at::Tensor logq = at::log_softmax(logits[k], -1);
    const double count = mask.sum().item<double>();
    const at::Tensor sum_k = -((p * logq).sum(-1) * mask).sum();
    const at::Tensor loss_k = sum_k / std::max(count, 1.0);  // reported per counted position
    const at::Tensor term =
        (norm == TttLossNorm::kCounted ? loss_k : sum_k / static_cast<double>(mask.numel())) *
        weight;
    total = total.defined() ? total + term : term;
    r.step_loss.push_back(loss_k.item<double>());
    r.step_count.push_back(count);
    {
      at::NoGradGuard no_grad;
      const double hits =
          (logq.argmax(-1).eq(target_top).to(at::kFloat) * mask).sum().item<double>();
      r.step_top1.push_back(count > 0 ? hits / count : 0.0);
    }
    weight *= decay;
  }
  r.loss = total;
  return r;
}

}  // namespace specbed
