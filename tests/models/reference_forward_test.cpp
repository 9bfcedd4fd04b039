// Tests for models/reference_forward.{h,cpp}: agreement with an independent ATen (float64,
// whole-sequence, masked-softmax) formulation written here; a hand-computable MLP-only model;
// invariances that pin down each feature (RoPE pairing, GQA head mapping, q/k norm, biases);
// determinism, causality, errors and speed.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/reference_forward.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using Tensors = std::map<std::string, at::Tensor>;
using testing_util::SmallLlama2cConfig;
using testing_util::SmallLlama3Config;
using testing_util::SmallQwen2Config;
using testing_util::SmallQwen3Config;

// Random tensors with projections and embeddings scaled up (std 0.2) so attention is far from
// uniform and every feature visibly changes the logits.
Tensors SharpTensors(const LlamaConfig& c, uint64_t seed) {
  Tensors t = RandomHfTensors(c, seed);
  for (auto& [name, tensor] : t) {
    if (name.find("proj.weight") != std::string::npos || name == "lm_head.weight" ||
        name == "model.embed_tokens.weight") {
      tensor = tensor * 10;
    }
  }
  return t;
}

std::vector<int32_t> Tokens(int64_t n, int64_t vocab, int64_t seed) {
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < n; ++i)
    tokens.push_back(static_cast<int32_t>((i * 37 + seed * 11) % vocab));
  return tokens;
}

at::Tensor ToTensor(const std::vector<std::vector<float>>& rows) {
  at::Tensor t = at::empty(
      {static_cast<int64_t>(rows.size()), rows.empty() ? 0 : static_cast<int64_t>(rows[0].size())});
  float* out = t.data_ptr<float>();
  for (const auto& row : rows) out = std::copy(row.begin(), row.end(), out);
  return t.to(at::kDouble);
}

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

at::Tensor Rms(const at::Tensor& x, const at::Tensor& w, double eps) {
  return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

// [T, heads, head_dim] rotated by position.
at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                     bool interleaved) {
  const int64_t T = x.size(0), H = x.size(1), D = x.size(2);
  const at::Tensor c = cos.view({T, 1, D / 2});
  const at::Tensor s = sin.view({T, 1, D / 2});
  if (interleaved) {
    const at::Tensor pairs = x.view({T, H, D / 2, 2});
    const at::Tensor a = pairs.select(3, 0), b = pairs.select(3, 1);
    return at::stack({a * c - b * s, a * s + b * c}, 3).view({T, H, D});
  }
  const at::Tensor a = x.slice(2, 0, D / 2), b = x.slice(2, D / 2, D);
  return at::cat({a * c - b * s, b * c + a * s}, 2);
}

// Whole-sequence float64 forward with ATen ops and a causal mask (HF-style formulation).
at::Tensor AtenForward(const LlamaConfig& c, const Tensors& t, const std::vector<int32_t>& tokens) {
  auto W = [&](const std::string& name) { return t.at(name).to(at::kDouble); };
  const int64_t T = static_cast<int64_t>(tokens.size());
  const int64_t H = c.n_heads, KV = c.n_kv_heads, D = c.head_dim;
  std::vector<int64_t> ids(tokens.begin(), tokens.end());
  at::Tensor x = W("model.embed_tokens.weight")
                     .index_select(0, at::tensor(ids, at::TensorOptions().dtype(at::kLong)));
  const std::vector<double> inv = RopeInverseFrequencies(c);
  const at::Tensor angles = at::outer(at::arange(T, at::TensorOptions().dtype(at::kDouble)),
                                      at::tensor(inv, at::TensorOptions().dtype(at::kDouble)));
  const at::Tensor cos = angles.cos(), sin = angles.sin();
  const at::Tensor mask =
      at::ones({T, T}, at::TensorOptions().dtype(at::kBool)).triu(1);  // true above diagonal
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const at::Tensor h = Rms(x, W(p + "input_layernorm.weight"), c.norm_eps);
    at::Tensor q = h.matmul(W(p + "self_attn.q_proj.weight").t());
    at::Tensor k = h.matmul(W(p + "self_attn.k_proj.weight").t());
    at::Tensor v = h.matmul(W(p + "self_attn.v_proj.weight").t());
    if (c.qkv_bias) {
      q = q + W(p + "self_attn.q_proj.bias");
      k = k + W(p + "self_attn.k_proj.bias");
      v = v + W(p + "self_attn.v_proj.bias");
    }
    q = q.view({T, H, D});
    k = k.view({T, KV, D});
    v = v.view({T, KV, D});
    if (c.qk_norm) {
      q = Rms(q, W(p + "self_attn.q_norm.weight"), c.norm_eps);
      k = Rms(k, W(p + "self_attn.k_norm.weight"), c.norm_eps);
    }
    q = ApplyRope(q, cos, sin, c.rope_interleaved);
    k = ApplyRope(k, cos, sin, c.rope_interleaved);
    k = k.repeat_interleave(H / KV, 1);
    v = v.repeat_interleave(H / KV, 1);
    at::Tensor scores = at::einsum("thd,shd->hts", {q, k}) / std::sqrt(static_cast<double>(D));
    scores = scores.masked_fill(mask, -INFINITY).softmax(-1);
    const at::Tensor attn = at::einsum("hts,shd->thd", {scores, v}).reshape({T, H * D});
    x = x + attn.matmul(W(p + "self_attn.o_proj.weight").t());
    const at::Tensor m = Rms(x, W(p + "post_attention_layernorm.weight"), c.norm_eps);
    const at::Tensor act = at::silu(m.matmul(W(p + "mlp.gate_proj.weight").t())) *
                           m.matmul(W(p + "mlp.up_proj.weight").t());
    x = x + act.matmul(W(p + "mlp.down_proj.weight").t());
  }
  x = Rms(x, W("model.norm.weight"), c.norm_eps);
  const at::Tensor head = c.tie_embeddings ? W("model.embed_tokens.weight") : W("lm_head.weight");
  return x.matmul(head.t());
}

class ReferenceVsAten : public ::testing::TestWithParam<std::string> {};

TEST_P(ReferenceVsAten, LogitsAgree) {
  LlamaConfig c;
  if (GetParam() == "llama3") c = SmallLlama3Config();
  if (GetParam() == "qwen2") c = SmallQwen2Config();
  if (GetParam() == "qwen3") c = SmallQwen3Config();
  if (GetParam() == "llama2c") c = SmallLlama2cConfig();
  const Tensors t = SharpTensors(c, 2024);
  const auto tokens = Tokens(24, c.vocab_size, 3);
  const at::Tensor ref = ToTensor(ReferenceForward(c, t, tokens));
  const at::Tensor aten = AtenForward(c, t, tokens);
  ASSERT_EQ(ref.sizes(), aten.sizes());
  const double scale = aten.abs().max().item<double>();
  EXPECT_GT(scale, 0.5);  // logits are not trivially small
  EXPECT_LT(MaxAbsDiff(ref, aten), 1e-5 * scale);
}

INSTANTIATE_TEST_SUITE_P(AllFamilies, ReferenceVsAten,
                         ::testing::Values("llama3", "qwen2", "qwen3", "llama2c"));

TEST(ReferenceForward, MlpOnlyModelIsHandComputable) {
  // One layer with o_proj = 0: attention contributes nothing, so
  // logits[t] = head(rms(x + down(silu(gate(rms(x))) * up(rms(x))))), x = embed[token t].
  LlamaConfig c = SmallLlama3Config();
  c.n_layers = 1;
  Tensors t = SharpTensors(c, 8);
  t["model.layers.0.self_attn.o_proj.weight"].zero_();
  const std::vector<int32_t> tokens = {5, 17, 5, 99};
  const auto logits = ReferenceForward(c, t, tokens);
  ASSERT_EQ(logits.size(), tokens.size());
  auto D = [&](const std::string& name) { return t.at(name).to(at::kDouble); };
  for (size_t i = 0; i < tokens.size(); ++i) {
    const at::Tensor x = D("model.embed_tokens.weight")[tokens[i]];
    const at::Tensor n = x * (1.0 / std::sqrt(x.pow(2).mean().item<double>() + c.norm_eps)) *
                         D("model.layers.0.post_attention_layernorm.weight");
    const at::Tensor g = D("model.layers.0.mlp.gate_proj.weight").matmul(n);
    const at::Tensor u = D("model.layers.0.mlp.up_proj.weight").matmul(n);
    const at::Tensor y =
        x + D("model.layers.0.mlp.down_proj.weight").matmul(g / (1 + (-g).exp()) * u);
    const at::Tensor z =
        y * (1.0 / std::sqrt(y.pow(2).mean().item<double>() + c.norm_eps)) * D("model.norm.weight");
    const at::Tensor want = D("lm_head.weight").matmul(z);
    ASSERT_EQ(logits[i].size(), static_cast<size_t>(c.vocab_size));
    for (int64_t v = 0; v < c.vocab_size; ++v) {
      EXPECT_NEAR(logits[i][v], want[v].item<double>(), 1e-5) << "t=" << i << " v=" << v;
    }
  }
  // Same token at positions 0 and 2 gives the same logits (no attention, no position effect).
  EXPECT_EQ(logits[0], logits[2]);
}

TEST(ReferenceForward, DeterministicAndCausal) {
  const LlamaConfig c = SmallQwen3Config();
  const Tensors t = SharpTensors(c, 4);
  const auto tokens = Tokens(20, c.vocab_size, 1);
  const auto a = ReferenceForward(c, t, tokens);
  const auto b = ReferenceForward(c, t, tokens);
  EXPECT_EQ(a, b);
  // Logits at position i depend only on tokens[0..i].
  const std::vector<int32_t> prefix(tokens.begin(), tokens.begin() + 12);
  const auto p = ReferenceForward(c, t, prefix);
  for (size_t i = 0; i < prefix.size(); ++i) EXPECT_EQ(p[i], a[i]) << i;
  // ... and changing a later token changes later logits.
  auto changed = tokens;
  changed[12] = (changed[12] + 1) % c.vocab_size;
  const auto d = ReferenceForward(c, t, changed);
  EXPECT_EQ(d[11], a[11]);
  EXPECT_NE(d[13], a[13]);
  EXPECT_TRUE(ReferenceForward(c, t, {}).empty());
}

// Permutes the rows of each head of `w` ([heads * head_dim, ...]) from interleaved pair order
// (0,1),(2,3),... to HF half order: new row i = old 2i, new row i + D/2 = old 2i + 1.
at::Tensor InterleavedToHalves(const at::Tensor& w, int64_t heads, int64_t D) {
  std::vector<int64_t> order;
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t i = 0; i < D / 2; ++i) order.push_back(h * D + 2 * i);
    for (int64_t i = 0; i < D / 2; ++i) order.push_back(h * D + 2 * i + 1);
  }
  return w.index_select(0, at::tensor(order, at::TensorOptions().dtype(at::kLong)));
}

TEST(ReferenceForward, InterleavedRopeEqualsHalfRopeWithPermutedRows) {
  // The conversion Meta -> HF checkpoints apply: both pairings give the same model once q/k rows
  // are permuted. Also checks that RoPE matters (unpermuted rows give different logits).
  const LlamaConfig interleaved = SmallLlama2cConfig();
  LlamaConfig halves = interleaved;
  halves.rope_interleaved = false;
  const Tensors t = SharpTensors(interleaved, 6);
  Tensors permuted = t;
  for (int64_t l = 0; l < interleaved.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    permuted[p + "q_proj.weight"] =
        InterleavedToHalves(t.at(p + "q_proj.weight"), interleaved.n_heads, interleaved.head_dim);
    permuted[p + "k_proj.weight"] = InterleavedToHalves(
        t.at(p + "k_proj.weight"), interleaved.n_kv_heads, interleaved.head_dim);
  }
  const auto tokens = Tokens(16, interleaved.vocab_size, 2);
  const at::Tensor a = ToTensor(ReferenceForward(interleaved, t, tokens));
  const at::Tensor b = ToTensor(ReferenceForward(halves, permuted, tokens));
  const at::Tensor wrong = ToTensor(ReferenceForward(halves, t, tokens));
  EXPECT_LT(MaxAbsDiff(a, b), 1e-5);
  EXPECT_GT(MaxAbsDiff(a, wrong), 1e-2);
}

TEST(ReferenceForward, GqaEqualsMhaWithRepeatedKvHeads) {
  // GQA: query head h reads kv head h / (n_heads / n_kv_heads). Duplicating each kv head's rows
  // for its group gives an equivalent multi-head model.
  const LlamaConfig gqa = SmallLlama3Config();  // 8 heads, 2 kv heads
  LlamaConfig mha = gqa;
  mha.n_kv_heads = gqa.n_heads;
  const Tensors t = SharpTensors(gqa, 12);
  Tensors repeated = t;
  const int64_t group = gqa.n_heads / gqa.n_kv_heads, D = gqa.head_dim;
  for (int64_t l = 0; l < gqa.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    for (const char* proj : {"k_proj.weight", "v_proj.weight"}) {
      const at::Tensor w = t.at(p + proj).view({gqa.n_kv_heads, D, gqa.dim});
      repeated[p + proj] = w.repeat_interleave(group, 0).reshape({gqa.n_heads * D, gqa.dim});
    }
  }
  const auto tokens = Tokens(16, gqa.vocab_size, 5);
  const at::Tensor a = ToTensor(ReferenceForward(gqa, t, tokens));
  const at::Tensor b = ToTensor(ReferenceForward(mha, repeated, tokens));
  EXPECT_LT(MaxAbsDiff(a, b), 1e-5);
  // Pairing kv heads the other way (h % n_kv_heads) would differ.
  Tensors tiled = t;
  for (int64_t l = 0; l < gqa.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    for (const char* proj : {"k_proj.weight", "v_proj.weight"}) {
      tiled[p + proj] = t.at(p + proj).repeat({group, 1});
    }
  }
  EXPECT_GT(MaxAbsDiff(a, ToTensor(ReferenceForward(mha, tiled, tokens))), 1e-2);
}

TEST(ReferenceForward, QkNormMakesQueryAndKeyScaleIrrelevant) {
  const LlamaConfig c = SmallQwen3Config();
  const Tensors t = SharpTensors(c, 3);
  Tensors scaled = t;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    scaled[p + "q_proj.weight"] = t.at(p + "q_proj.weight") * 3;
    scaled[p + "k_proj.weight"] = t.at(p + "k_proj.weight") * 0.5;
  }
  const auto tokens = Tokens(12, c.vocab_size, 4);
  const at::Tensor a = ToTensor(ReferenceForward(c, t, tokens));
  EXPECT_LT(MaxAbsDiff(a, ToTensor(ReferenceForward(c, scaled, tokens))), 1e-4);
  // The q/k norm weights themselves do matter.
  Tensors renormed = t;
  renormed["model.layers.0.self_attn.q_norm.weight"] =
      t.at("model.layers.0.self_attn.q_norm.weight") * 2;
  EXPECT_GT(MaxAbsDiff(a, ToTensor(ReferenceForward(c, renormed, tokens))), 1e-3);
}

TEST(ReferenceForward, Qwen2ZeroBiasEqualsNoBias) {
  const LlamaConfig qwen2 = SmallQwen2Config();
  LlamaConfig plain = qwen2;
  plain.qkv_bias = false;
  plain.architecture = "LlamaForCausalLM";
  Tensors t = SharpTensors(qwen2, 13);
  const auto tokens = Tokens(10, qwen2.vocab_size, 6);
  const at::Tensor with_bias = ToTensor(ReferenceForward(qwen2, t, tokens));
  for (auto& [name, tensor] : t) {
    if (name.find(".bias") != std::string::npos) tensor = at::zeros_like(tensor);
  }
  const at::Tensor zero_bias = ToTensor(ReferenceForward(qwen2, t, tokens));
  EXPECT_LT(MaxAbsDiff(zero_bias, ToTensor(ReferenceForward(plain, t, tokens))), 1e-6);
  EXPECT_GT(MaxAbsDiff(zero_bias, with_bias), 1e-3);  // biases are applied
}

TEST(ReferenceForward, ReadsBf16Tensors) {
  const LlamaConfig c = SmallLlama3Config();
  const Tensors f32 = SharpTensors(c, 21);
  Tensors bf16, rounded;
  for (const auto& [name, t] : f32) {
    bf16[name] = t.to(at::kBFloat16);
    rounded[name] = bf16[name].to(at::kFloat);
  }
  const auto tokens = Tokens(8, c.vocab_size, 1);
  EXPECT_EQ(ReferenceForward(c, bf16, tokens), ReferenceForward(c, rounded, tokens));
}

TEST(ReferenceForward, Errors) {
  const LlamaConfig c = SmallLlama3Config();
  Tensors t = RandomHfTensors(c, 1);
  try {
    ReferenceForward(c, t, {1, 128});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 128 at position 1"), std::string::npos) << e.what();
  }
  t.erase("model.layers.1.mlp.down_proj.weight");
  try {
    ReferenceForward(c, t, {1});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.layers.1.mlp.down_proj.weight'"),
              std::string::npos)
        << e.what();
  }
}

TEST(ReferenceForward, FastEnoughFor64TokensOnASmallModel) {
  LlamaConfig c = SmallLlama3Config();
  c.n_layers = 5;
  c.vocab_size = 512;
  c.hidden_dim = 172;
  const Tensors t = RandomHfTensors(c, 1);
  const auto tokens = Tokens(64, c.vocab_size, 0);
  const auto start = std::chrono::steady_clock::now();
  const auto logits = ReferenceForward(c, t, tokens);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(logits.size(), 64u);
  EXPECT_LT(seconds, 1.0);
  std::printf("ReferenceForward: 64 tokens, dim 64, 5 layers, vocab 512: %.3f s\n", seconds);
}

}  // namespace
}  // namespace specbed
