// Engine-layout Llama weights: dtype conversion, shape validation, seeded random weights.
// Checked by: tests/models/hf_checkpoint_test.cpp (fusion layout, Validate errors, To keeps ties).
#include "models/llama_weights.h"

#include <ATen/ATen.h>

#include <string>

#include "base/error.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/device.h"
#include "models/tensor_util.h"

namespace specbed {

LlamaWeights LlamaWeights::To(at::ScalarType dtype, at::Device device) const {
  SPECBED_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
                "LlamaWeights::To: dtype must be Float, BFloat16 or Half, got ",
                c10::toString(dtype));
  auto conv = [dtype, device](const at::Tensor& t) {
    return t.defined() ? t.to(device, dtype).contiguous() : t;
  };
  LlamaWeights out;
  out.tok_embeddings = conv(tok_embeddings);
  out.lm_head =
      lm_head.defined() && lm_head.is_same(tok_embeddings) ? out.tok_embeddings : conv(lm_head);
  out.final_norm = conv(final_norm);
  out.layers.reserve(layers.size());
  for (const auto& l : layers) {
    LlamaLayerWeights o;
    o.attn_norm = conv(l.attn_norm);
    o.wqkv = conv(l.wqkv);
    o.bqkv = conv(l.bqkv);
    o.q_norm = conv(l.q_norm);
    o.k_norm = conv(l.k_norm);
    o.wo = conv(l.wo);
    o.ffn_norm = conv(l.ffn_norm);
    o.w_gate_up = conv(l.w_gate_up);
    o.w_down = conv(l.w_down);
    out.layers.push_back(std::move(o));
  }
  return out;
}

void LlamaWeights::Validate(const LlamaConfig& c, const std::string& source) const {
  SPECBED_CHECK(tok_embeddings.defined(), source, ": weights have no tok_embeddings");
  const at::ScalarType dtype = tok_embeddings.scalar_type();
  const at::Device device = tok_embeddings.device();
  SPECBED_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf, source,
                ": tok_embeddings has dtype ", c10::toString(dtype),
                ", expected Float, BFloat16 or Half");
  auto check = [&](const std::string& name, const at::Tensor& t, std::vector<int64_t> shape) {
    SPECBED_CHECK(t.defined(), source, ": weight ", name, " is missing (expected shape ",
                  ShapeString(shape), ")");
    SPECBED_CHECK(t.sizes() == at::IntArrayRef(shape), source, ": weight ", name, " has shape ",
                  ShapeString(t.sizes()), ", expected ", ShapeString(shape));
    SPECBED_CHECK(t.scalar_type() == dtype, source, ": weight ", name, " has dtype ",
                  c10::toString(t.scalar_type()), ", expected ", c10::toString(dtype));
    SPECBED_CHECK(SameDevice(t.device(), device), source, ": weight ", name, " is on ", t.device(),
                  ", expected ", device);
  };
  auto check_absent = [&](const std::string& name, const at::Tensor& t, const char* why) {
    SPECBED_CHECK(!t.defined(), source, ": weight ", name, " is set but ", why);
  };
  check("tok_embeddings", tok_embeddings, {c.vocab_size, c.dim});
  check("final_norm", final_norm, {c.dim});
  check("lm_head", lm_head, {c.vocab_size, c.dim});
  SPECBED_CHECK(static_cast<int64_t>(layers.size()) == c.n_layers, source, ": weights have ",
                layers.size(), " layers, config has ", c.n_layers);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const LlamaLayerWeights& l = layers[i];
    const std::string p = "layers[" + std::to_string(i) + "].";
    check(p + "attn_norm", l.attn_norm, {c.dim});
    check(p + "wqkv", l.wqkv, {c.qkv_dim(), c.dim});
    if (c.qkv_bias) {
      check(p + "bqkv", l.bqkv, {c.qkv_dim()});
    } else {
      check_absent(p + "bqkv", l.bqkv, "the config has no q/k/v bias");
    }
    if (c.qk_norm) {
      check(p + "q_norm", l.q_norm, {c.head_dim});
      check(p + "k_norm", l.k_norm, {c.head_dim});
    } else {
      check_absent(p + "q_norm", l.q_norm, "the config has no q/k norm");
      check_absent(p + "k_norm", l.k_norm, "the config has no q/k norm");
    }
    check(p + "wo", l.wo, {c.dim, c.q_dim()});
    check(p + "ffn_norm", l.ffn_norm, {c.dim});
    check(p + "w_gate_up", l.w_gate_up, {2 * c.hidden_dim, c.dim});
    check(p + "w_down", l.w_down, {c.dim, c.hidden_dim});
  }
}

LlamaWeights RandomLlamaWeights(const LlamaConfig& config, uint64_t seed, at::ScalarType dtype) {
  return WeightsFromHfTensors(config, RandomHfTensors(config, seed, dtype), "random weights");
}

}  // namespace specbed
