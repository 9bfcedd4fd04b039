// Trainable Llama forward with ATen autograd (see trainable_llama.h).
// Checked by: tests/train/train_test.cpp.
#include "methods/common/train/trainable_llama.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <limits>

#include "base/error.h"
#include "base/names.h"
#include "methods/common/named_params.h"
#include "methods/common/train/param_device.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/device.h"
#include "models/tensor_util.h"

namespace specbed {
namespace {

// RMSNorm over the last dimension: the shared ATen op (float32 math, x's dtype).
constexpr auto RmsNorm = RmsNormLastDimAten;

// Rotates x [batch, T, heads, head_dim] by cos/sin [T, head_dim/2]; pairs are adjacent elements
// (interleaved, llama2.c) or the two halves (HF rotate_half).
at::Tensor Rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                bool interleaved) {
  const int64_t b = x.size(0), t = x.size(1), h = x.size(2), hd = x.size(3), half = hd / 2;
  const at::Tensor c = cos.view({1, t, 1, half});
  const at::Tensor s = sin.view({1, t, 1, half});
  if (interleaved) {
    const at::Tensor pairs = x.reshape({b, t, h, half, 2});
    const at::Tensor a = pairs.select(-1, 0);
    const at::Tensor bb = pairs.select(-1, 1);
    return at::stack({a * c - bb * s, a * s + bb * c}, -1).reshape({b, t, h, hd});
  }
  return RotateHalfAten(x, c, s);
}

}  // namespace

TrainableLlama::TrainableLlama(const LlamaConfig& config, uint64_t seed)
    : TrainableLlama(config, RandomHfTensors(config, seed)) {
  at::NoGradGuard no_grad;
  const double residual_scale = 1.0 / std::sqrt(2.0 * static_cast<double>(config_.n_layers));
  for (auto& [name, p] : params_) {
    if (EndsWith(name, "norm.weight")) {
      p.fill_(1.0);
    } else if (EndsWith(name, "o_proj.weight") || EndsWith(name, "down_proj.weight")) {
      p.mul_(residual_scale);
    }
  }
}

TrainableLlama::TrainableLlama(const LlamaConfig& config,
                               const std::map<std::string, at::Tensor>& tensors)
    : config_(config) {
  config_.Validate("TrainableLlama config");
  const auto expected = ExpectedHfTensorShapes(config_);
  for (const auto& [name, t] : tensors) {
    SPECBED_CHECK(expected.count(name) == 1, "TrainableLlama: unexpected tensor '", name,
                  "' for a ", config_.architecture,
                  " config (tie_embeddings = ", config_.tie_embeddings, ")");
  }
  for (const auto& [name, shape] : expected) {
    auto it = tensors.find(name);
    SPECBED_CHECK(it != tensors.end() && it->second.defined(), "TrainableLlama: missing tensor '",
                  name, "'");
    SPECBED_CHECK(it->second.sizes() == at::IntArrayRef(shape), "TrainableLlama: tensor '", name,
                  "' has shape ", ShapeString(it->second.sizes()), ", expected ",
                  ShapeString(shape));
    at::Tensor p = it->second.detach().to(at::kCPU).to(at::kFloat).clone().contiguous();
    p.set_requires_grad(true);
    params_.emplace_back(name, p);
  }
  BindParameters();

  const std::vector<double> inv_freq = RopeInverseFrequencies(config_);
  const int64_t half = config_.head_dim / 2, n_pos = config_.max_seq_len;
  rope_cos_ = at::empty({n_pos, half}, at::kFloat);
  rope_sin_ = at::empty({n_pos, half}, at::kFloat);
  float* c = rope_cos_.data_ptr<float>();
  float* s = rope_sin_.data_ptr<float>();
  for (int64_t p = 0; p < n_pos; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq[i];
      c[p * half + i] = static_cast<float>(std::cos(angle));
      s[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void TrainableLlama::To(const at::Device& device) {
  MoveParamsTo(params_, device);
  BindParameters();
  rope_cos_ = OnDevice(rope_cos_, device);
  rope_sin_ = OnDevice(rope_sin_, device);
}

const at::Tensor& TrainableLlama::Param(const std::string& name) const {
  return FindParam(params_, name, "TrainableLlama");
}

void TrainableLlama::BindParameters() {
  embed_ = Param("model.embed_tokens.weight");
  final_norm_ = Param("model.norm.weight");
  head_ = config_.tie_embeddings ? embed_ : Param("lm_head.weight");
  layers_.assign(config_.n_layers, Layer{});
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    Layer& L = layers_[l];
    L.attn_norm = Param(p + "input_layernorm.weight");
    L.wq = Param(p + "self_attn.q_proj.weight");
    L.wk = Param(p + "self_attn.k_proj.weight");
    L.wv = Param(p + "self_attn.v_proj.weight");
    if (config_.qkv_bias) {
      L.bq = Param(p + "self_attn.q_proj.bias");
      L.bk = Param(p + "self_attn.k_proj.bias");
      L.bv = Param(p + "self_attn.v_proj.bias");
    }
    if (config_.qk_norm) {
      L.q_norm = Param(p + "self_attn.q_norm.weight");
      L.k_norm = Param(p + "self_attn.k_norm.weight");
    }
    L.wo = Param(p + "self_attn.o_proj.weight");
    L.ffn_norm = Param(p + "post_attention_layernorm.weight");
    L.gate = Param(p + "mlp.gate_proj.weight");
    L.up = Param(p + "mlp.up_proj.weight");
    L.down = Param(p + "mlp.down_proj.weight");
  }
}

at::Tensor TrainableLlama::Forward(const at::Tensor& tokens) const {
  SPECBED_CHECK(tokens.dim() == 2 && tokens.scalar_type() == at::kLong && tokens.size(1) >= 1,
                "TrainableLlama::Forward: tokens must be int64 [batch, T] with T >= 1");
  SPECBED_CHECK(SameDevice(tokens.device(), device()), "TrainableLlama::Forward: tokens are on ",
                tokens.device(), " but the parameters on ", device());
  const int64_t b = tokens.size(0), t = tokens.size(1);
  SPECBED_CHECK(t <= config_.max_seq_len, "TrainableLlama::Forward: ", t,
                " tokens exceed max_seq_len ", config_.max_seq_len);
  const int64_t n_heads = config_.n_heads, n_kv = config_.n_kv_heads, hd = config_.head_dim;
  const int64_t group = n_heads / n_kv;
  const double eps = config_.norm_eps;
  const at::Tensor cos = rope_cos_.narrow(0, 0, t);
  const at::Tensor sin = rope_sin_.narrow(0, 0, t);
  // [T, T] additive causal mask: -inf above the diagonal.
  const at::Tensor mask =
      at::full({t, t}, -std::numeric_limits<float>::infinity(), rope_cos_.options()).triu(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));

  at::Tensor x = at::embedding(embed_, tokens);  // [B, T, dim]
  for (const Layer& L : layers_) {
    const at::Tensor h = RmsNorm(x, L.attn_norm, eps);
    at::Tensor q = at::linear(h, L.wq, L.bq).view({b, t, n_heads, hd});
    at::Tensor k = at::linear(h, L.wk, L.bk).view({b, t, n_kv, hd});
    at::Tensor v = at::linear(h, L.wv, L.bv).view({b, t, n_kv, hd});
    if (config_.qk_norm) {
      q = RmsNorm(q, L.q_norm, eps);
      k = RmsNorm(k, L.k_norm, eps);
    }
    q = Rope(q, cos, sin, config_.rope_interleaved).transpose(1, 2);  // [B, H, T, hd]
    k = Rope(k, cos, sin, config_.rope_interleaved).transpose(1, 2);  // [B, KV, T, hd]
    v = v.transpose(1, 2);
    if (group > 1) {  // GQA: query head h reads kv head h / group
      k = k.repeat_interleave(group, 1);
      v = v.repeat_interleave(group, 1);
    }
    const at::Tensor scores = at::matmul(q, k.transpose(-2, -1)) * scale + mask;
    const at::Tensor attn = at::matmul(at::softmax(scores, -1), v)  // [B, H, T, hd]
                                .transpose(1, 2)
                                .reshape({b, t, n_heads * hd});
    x = x + at::linear(attn, L.wo);
    const at::Tensor hf = RmsNorm(x, L.ffn_norm, eps);
    x = x + at::linear(at::silu(at::linear(hf, L.gate)) * at::linear(hf, L.up), L.down);
  }
  return at::linear(RmsNorm(x, final_norm_, eps), head_);
}

std::map<std::string, at::Tensor> TrainableLlama::HfTensors() const {
  return CloneParams(params_);
}

void TrainableLlama::LoadTensors(const std::map<std::string, at::Tensor>& tensors,
                                 const std::string& source) {
  SPECBED_CHECK(tensors.size() == params_.size(), source, ": holds ", tensors.size(),
                " parameter tensors, expected ", params_.size());
  at::NoGradGuard no_grad;
  for (auto& [name, p] : params_) {
    auto it = tensors.find(name);
    SPECBED_CHECK(it != tensors.end(), source, ": missing parameter '", name, "'");
    SPECBED_CHECK(it->second.sizes() == p.sizes(), source, ": parameter '", name, "' has shape ",
                  ShapeString(it->second.sizes()), ", expected ", ShapeString(p.sizes()));
    p.copy_(it->second);
  }
}

int64_t TrainableLlama::ParameterCount() const {
  return CountParams(params_);
}

}  // namespace specbed
