// Tests for methods/dflash: config.json parsing/writing (published Qwen3-8B-b16 layout, the
// SpecBed causal option, every error), the default target layer rule (incl. Python's
// round-half-to-even), checkpoint round trips (F32 exact, BF16/F16 within their rounding), every
// checkpoint failure mode, and the block forward against an independent plain-loop reference
// (double precision, unfused checkpoint tensors): non-causal and causal blocks of n < block_size,
// n = block_size and n > block_size rows, incremental context == full context, truncation,
// ForwardFromBonus; extra rows past block_size change earlier rows only in non-causal heads.
// Randomized inputs use fixed seeds; tolerances are ~1e-4 relative to the output scale while the
// float32 rounding error is ~1e-6 of it, so the false-failure rate is effectively zero.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/names.h"
#include "methods/dflash/dflash_checkpoint.h"
#include "methods/dflash/dflash_config.h"
#include "methods/dflash/dflash_head.h"
#include "models/checkpoint/safetensors.h"
#include "models/op_trace.h"
#include "tests/common/cuda_test_util.h"
#include "tests/methods/head_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
// ErrorOf, ConfigJson, TensorMap, WriteRawCheckpoint, ScratchDir, ...:
// tests/methods/head_test_util.h and tests/models/model_test_util.h.
using namespace testing_util;

// A Qwen3-like draft scaled down; q_dim (48) != hidden (32) as in Qwen3-4B's draft.
DflashConfig SmallConfig() {
  return testing_util::DflashConfigOf(
      {/*hidden_size=*/32, /*intermediate_size=*/48, /*n_heads=*/4, /*n_kv_heads=*/2,
       /*head_dim=*/12, /*vocab_size=*/50, /*max_position_embeddings=*/4096,
       /*rms_norm_eps=*/1e-6, /*rope_theta=*/10000.0, /*bos_token_id=*/1, /*eos_token_ids=*/{2}},
      /*n_layers=*/2, /*block_size=*/4, /*mask_token_id=*/49, /*num_target_layers=*/8,
      /*target_layer_ids=*/{1, 3, 5});
}

void ExpectSameConfig(const DflashConfig& a, const DflashConfig& b) {
  ExpectSameHeadConfigBase(a, b);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.block_size, b.block_size);
  EXPECT_EQ(a.mask_token_id, b.mask_token_id);
  EXPECT_EQ(a.num_target_layers, b.num_target_layers);
  EXPECT_EQ(a.target_layer_ids, b.target_layer_ids);
  EXPECT_EQ(a.causal, b.causal);
}

// config.json of z-lab/Qwen3-8B-DFlash-b16 (as mirrored by SpecForge configs/qwen3-8b-dflash.json).
json PublishedQwen3_8BConfig() {
  return json::parse(R"({
    "architectures": ["DFlashDraftModel"],
    "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
    "model_type": "qwen3", "block_size": 16,
    "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
    "num_target_layers": 36, "num_hidden_layers": 5, "hidden_size": 4096,
    "intermediate_size": 12288, "num_attention_heads": 32, "num_key_value_heads": 8,
    "head_dim": 128, "rms_norm_eps": 1e-06, "rope_theta": 1000000, "rope_scaling": null,
    "max_position_embeddings": 40960, "vocab_size": 151936,
    "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention",
                    "full_attention"],
    "attention_bias": false, "attention_dropout": 0.0, "hidden_act": "silu",
    "tie_word_embeddings": false, "dtype": "bfloat16", "use_cache": true,
    "bos_token_id": 151643, "eos_token_id": 151645})");
}

// ---- Config ---------------------------------------------------------------------------------

TEST(DflashConfig, JsonRoundTrip) {
  DflashConfig c = SmallConfig();
  ExpectSameConfig(ParseDflashConfig(ConfigJson(c), "small"), c);
  const auto j = DflashConfigToJson(c);
  ExpectConfigJsonNames(j, "DFlashDraftModel", "qwen3");
  EXPECT_EQ(j["dflash_config"]["mask_token_id"], 49);
  EXPECT_EQ(j["dflash_config"]["target_layer_ids"], nlohmann::ordered_json::array({1, 3, 5}));
  EXPECT_EQ(j["layer_types"].size(), 2u);
  EXPECT_FALSE(j.contains("specbed_causal"));

  // Causal, no ids (derived), no mask token, no bos.
  c.causal = true;
  c.target_layer_ids.clear();
  c.mask_token_id = -1;
  c.bos_token_id = -1;
  c.torch_dtype = "float32";
  const auto j2 = DflashConfigToJson(c);
  EXPECT_EQ(j2["specbed_causal"], true);
  EXPECT_FALSE(j2["dflash_config"].contains("mask_token_id"));
  EXPECT_FALSE(j2["dflash_config"].contains("target_layer_ids"));
  const DflashConfig back = ParseDflashConfig(ConfigJson(c), "small");
  ExpectSameConfig(back, c);
  // Default rule for L = 8, 2 draft layers: round(1 + i * 4 / 1) = {1, 5}.
  EXPECT_EQ(back.TargetLayerIds(), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(back.fc_in_dim(), 2 * 32);
}

TEST(DflashConfig, PublishedQwen3_8BDraft) {
  const DflashConfig c = ParseDflashConfig(PublishedQwen3_8BConfig(), "qwen3-8b.json");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 32);
  EXPECT_EQ(c.n_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.block_size, 16);
  EXPECT_EQ(c.mask_token_id, 151669);
  EXPECT_EQ(c.num_target_layers, 36);
  EXPECT_EQ(c.target_layer_ids, (std::vector<int64_t>{1, 9, 17, 25, 33}));
  EXPECT_EQ(c.TargetLayerIds(), DefaultDflashTargetLayers(36, 5));
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_FALSE(c.causal);
  EXPECT_EQ(c.fc_in_dim(), 20480);
  // ~1.05B parameters (notes); exactly: fc + hidden_norm + 5 layers + norm.
  const int64_t per_layer =
      2 * 4096 + 4096 * 4096 * 2 + 2 * 1024 * 4096 + 2 * 128 + 3 * 4096 * 12288;
  EXPECT_EQ(c.ParameterCount(), 4096 * 20480 + 4096 + 5 * per_layer + 4096);
  EXPECT_GT(c.ParameterCount(), 1'000'000'000);
  EXPECT_LT(c.ParameterCount(), 1'100'000'000);
  const auto shapes = ExpectedDflashTensorShapes(c);
  EXPECT_EQ(shapes.size(), 3u + 5u * 11u);
  EXPECT_EQ(shapes.at("fc.weight"), (std::vector<int64_t>{4096, 20480}));
  EXPECT_EQ(shapes.at("layers.4.self_attn.k_proj.weight"), (std::vector<int64_t>{1024, 4096}));
  EXPECT_EQ(shapes.at("layers.0.self_attn.q_norm.weight"), (std::vector<int64_t>{128}));
  EXPECT_EQ(shapes.at("layers.2.mlp.down_proj.weight"), (std::vector<int64_t>{4096, 12288}));

  // Older checkpoints: no dflash_config at all -> ids from the rule, no mask token.
  json old = PublishedQwen3_8BConfig();
  old.erase("dflash_config");
  const DflashConfig o = ParseDflashConfig(old, "old.json");
  EXPECT_TRUE(o.target_layer_ids.empty());
  EXPECT_EQ(o.mask_token_id, -1);
  EXPECT_EQ(o.TargetLayerIds(), (std::vector<int64_t>{1, 9, 17, 25, 33}));
}

TEST(DflashConfig, DefaultTargetLayers) {
  EXPECT_EQ(DefaultDflashTargetLayers(36, 5), (std::vector<int64_t>{1, 9, 17, 25, 33}));
  EXPECT_EQ(DefaultDflashTargetLayers(36, 1), (std::vector<int64_t>{18}));
  EXPECT_EQ(DefaultDflashTargetLayers(28, 5), (std::vector<int64_t>{1, 7, 13, 19, 25}));
  // Python round() ties to even: L = 9, n = 3 -> 1 + 2.5 = 3.5 -> 4; L = 7 -> 2.5 -> 2.
  EXPECT_EQ(DefaultDflashTargetLayers(9, 3), (std::vector<int64_t>{1, 4, 6}));
  EXPECT_EQ(DefaultDflashTargetLayers(7, 3), (std::vector<int64_t>{1, 2, 4}));
  EXPECT_EQ(DefaultDflashTargetLayers(4, 3), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_THAT(ErrorOf([] { DefaultDflashTargetLayers(3, 2); }), HasSubstr("at least 4 layers"));
  EXPECT_THAT(ErrorOf([] { DefaultDflashTargetLayers(36, 0); }),
              HasSubstr("num_draft_layers must be positive"));
  EXPECT_THAT(ErrorOf([] { DefaultDflashTargetLayers(0, 1); }),
              HasSubstr("num_target_layers must be positive"));
}

TEST(DflashConfig, Errors) {
  auto error_with = [](const std::function<void(json&)>& edit) {
    json j = PublishedQwen3_8BConfig();
    edit(j);
    return ErrorOf([&] { ParseDflashConfig(j, "cfg.json"); });
  };
  std::string msg = error_with([](json& j) { j["architectures"] = {"DFlashDraftModle"}; });
  EXPECT_THAT(msg, HasSubstr("cfg.json: field \"architectures\""));
  EXPECT_THAT(msg, HasSubstr("DFlashDraftModel"));
  EXPECT_THAT(error_with([](json& j) { j.erase("architectures"); }),
              HasSubstr("missing field \"architectures\""));
  msg = error_with([](json& j) { j["layer_types"][1] = "chunked_attention"; });
  EXPECT_THAT(msg, HasSubstr("layer_types[1]"));
  EXPECT_THAT(msg, HasSubstr("chunked_attention"));
  EXPECT_THAT(error_with([](json& j) { j["layer_types"][1] = "sliding_attention"; }),
              HasSubstr("\"sliding_attention\" layers but no \"sliding_window\""));
  EXPECT_THAT(error_with([](json& j) {
                j["layer_types"][1] = "sliding_attention";
                j["sliding_window"] = 0;
              }),
              HasSubstr("sliding_window must be >= 1"));
  EXPECT_THAT(error_with([](json& j) { j["layer_types"].erase(0); }),
              HasSubstr("layer_types has 4 entries, expected num_hidden_layers = 5"));
  EXPECT_THAT(error_with([](json& j) { j["dflash_config"]["block_size"] = 8; }),
              HasSubstr("block_size = 16 but dflash_config.block_size = 8 (they must agree)"));
  EXPECT_THAT(error_with([](json& j) {
                j["is_causal"] = true;
                j["specbed_causal"] = false;
              }),
              HasSubstr("(they must agree)"));
  EXPECT_THAT(error_with([](json& j) { j["block_size"] = 1; }),
              HasSubstr("block_size must be at least 2"));
  EXPECT_THAT(error_with([](json& j) { j["block_size"] = "16"; }),
              HasSubstr("field \"block_size\" must be an integer"));
  EXPECT_THAT(error_with([](json& j) {
                j["dflash_config"]["target_layer_ids"] = {1, 36};
              }),
              HasSubstr("target_layer_ids has id 36, outside the target's decoder layers"));
  EXPECT_THAT(error_with([](json& j) { j["dflash_config"]["target_layer_ids"] = {-1}; }),
              HasSubstr("target_layer_ids has negative id -1"));
  EXPECT_THAT(error_with([](json& j) { j["dflash_config"]["target_layer_ids"] = "1,9"; }),
              HasSubstr("field \"target_layer_ids\" must be a list"));
  EXPECT_THAT(error_with([](json& j) {
                j["dflash_config"].erase("target_layer_ids");
                j.erase("num_target_layers");
              }),
              HasSubstr("needs dflash_config.target_layer_ids or num_target_layers"));
  EXPECT_THAT(error_with([](json& j) { j["dflash_config"]["mask_token_id"] = 151936; }),
              HasSubstr("mask_token_id 151936 outside [0, vocab_size = 151936)"));
  EXPECT_THAT(error_with([](json& j) { j["dflash_config"] = 3; }),
              HasSubstr("field \"dflash_config\" must be an object"));
  EXPECT_THAT(error_with([](json& j) { j["attention_bias"] = true; }),
              HasSubstr("attention_bias = true"));
  EXPECT_THAT(error_with([](json& j) { j["model_type"] = "gemma"; }),
              HasSubstr("model_type \"gemma\" is not supported for a DFlash draft"));
  EXPECT_THAT(error_with([](json& j) { j["specbed_causal"] = 1; }),
              HasSubstr("field \"specbed_causal\" must be true or false"));
  EXPECT_THAT(error_with([](json& j) { j["hidden_size"] = 0; }), HasSubstr("hidden_size"));
  EXPECT_THAT(error_with([](json& j) { j["num_key_value_heads"] = 5; }),
              HasSubstr("num_key_value_heads"));
  // Unknown target depth and no ids: TargetLayerIds() explains.
  DflashConfig c = SmallConfig();
  c.target_layer_ids.clear();
  c.num_target_layers = 0;
  EXPECT_THAT(ErrorOf([&] { c.TargetLayerIds(); }), HasSubstr("num_target_layers"));
  EXPECT_THAT(ErrorOf([&] { DflashConfigToJson(c); }), HasSubstr("num_target_layers"));
}

// ---- Checkpoint -----------------------------------------------------------------------------

// The error of loading a small checkpoint whose tensors were edited by `edit`.
std::string LoadErrorAfter(const std::string& name, const std::function<void(TensorMap&)>& edit) {
  const DflashConfig c = SmallConfig();
  TensorMap tensors = RandomDflashTensors(c, 3);
  edit(tensors);
  const std::string dir = ScratchDir(name + "_edit");
  WriteRawCheckpoint(dir, ConfigJson(c), tensors);
  return ErrorOf([&] { LoadDflashCheckpoint(dir); });
}

TEST(DflashCheckpoint, RoundTripFloat32WithRecipe) {
  const DflashConfig c = SmallConfig();
  const TensorMap tensors = RandomDflashTensors(c, 7);
  EXPECT_EQ(tensors.size(), 3u + 2u * 11u);
  const std::string dir = ScratchDir(TestName());
  const json recipe = {{"task", "dflash"}, {"gamma", 7}};
  WriteDflashCheckpoint(dir, c, tensors, recipe);
  const DflashCheckpoint ckpt = LoadDflashCheckpoint(dir);
  DflashConfig want = c;
  want.torch_dtype = "float32";
  ExpectSameConfig(ckpt.config, want);
  ExpectLoadedAsWritten(ckpt, dir, tensors, recipe, "DFlashDraftModel");
  auto file = SafetensorsFile::Open(dir + "/model.safetensors");
  EXPECT_EQ(file->Find("layers.1.self_attn.q_norm.weight")->dtype, SafetensorsDtype::kF32);
  EXPECT_EQ(file->entries().size(), tensors.size());
}

TEST(DflashCheckpoint, RoundTripHalfPrecisionCausalNoRecipe) {
  DflashConfig c = SmallConfig();
  c.causal = true;
  const TensorMap tensors = RandomDflashTensors(c, 8);
  for (const auto& [dtype, torch_dtype, name] : testing_util::HalfPrecisions()) {
    const std::string dir = ScratchDir(TestName() + name);
    WriteDflashCheckpoint(dir, c, tensors, nullptr, dtype);
    const DflashCheckpoint ckpt = LoadDflashCheckpoint(dir);
    EXPECT_EQ(ckpt.config.torch_dtype, name);
    EXPECT_TRUE(ckpt.config.causal);
    EXPECT_TRUE(ckpt.recipe.is_null());
    EXPECT_EQ(SafetensorsFile::Open(dir + "/model.safetensors")->Find("fc.weight")->dtype, dtype);
    for (const auto& [tname, t] : tensors) ASSERT_TRUE(t.is_floating_point()) << tname;
    testing_util::ExpectStoredRounding(ckpt.tensors, tensors, torch_dtype, name);
  }
}

TEST(DflashCheckpoint, ShardsAndInvFreqBuffers) {
  const DflashConfig c = SmallConfig();
  const TensorMap tensors = RandomDflashTensors(c, 9);
  TensorMap a, b;
  for (const auto& [name, t] : tensors) (name < "layers.1" ? a : b)[name] = t;
  b["layers.0.self_attn.rotary_emb.inv_freq"] = at::ones({6});
  const std::string dir = ScratchDir(TestName());
  WriteRawCheckpoint(dir, ConfigJson(c), a, "model-00001-of-00002.safetensors");
  WriteRawCheckpoint(dir, ConfigJson(c), b, "model-00002-of-00002.safetensors");
  ExpectTensorsEqual(LoadDflashCheckpoint(dir).tensors, tensors);
}

TEST(DflashCheckpoint, TensorErrors) {
  const std::string name = TestName();
  std::string msg =
      LoadErrorAfter(name, [](TensorMap& t) { t.erase("layers.1.mlp.up_proj.weight"); });
  EXPECT_THAT(msg, HasSubstr("missing tensor 'layers.1.mlp.up_proj.weight'"));
  EXPECT_THAT(msg, HasSubstr("[48, 32]"));
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));

  msg = LoadErrorAfter(name, [](TensorMap& t) {
    t["layers.0.self_attn.qnorm.weight"] = t.at("layers.0.self_attn.q_norm.weight");
    t.erase("layers.0.self_attn.q_norm.weight");
  });
  EXPECT_THAT(msg, HasSubstr("model.safetensors', tensor 'layers.0.self_attn.qnorm.weight'"));
  EXPECT_THAT(msg, HasSubstr("did you mean 'layers.0.self_attn.q_norm.weight'?"));

  msg = LoadErrorAfter(name, [](TensorMap& t) { t["embed_tokens.weight"] = at::zeros({50, 32}); });
  EXPECT_THAT(msg, HasSubstr("tensor 'embed_tokens.weight': unexpected tensor name"));

  msg = LoadErrorAfter(name, [](TensorMap& t) { t["fc.weight"] = at::zeros({32, 64}); });
  EXPECT_THAT(msg, HasSubstr("tensor 'fc.weight'"));
  EXPECT_THAT(msg, HasSubstr("shape [32, 64], expected [32, 96]"));

  msg = LoadErrorAfter(name, [](TensorMap& t) { t["norm.weight"] = at::ones({32}, at::kLong); });
  EXPECT_THAT(msg, HasSubstr("tensor 'norm.weight'"));
  EXPECT_THAT(msg, HasSubstr("expected a floating-point dtype"));
}

TEST(DflashCheckpoint, DirectoryErrors) {
  const DflashConfig c = SmallConfig();
  testing_util::ExpectCheckpointDirectoryErrors(
      ScratchDir(TestName()), ConfigJson(c),
      [](const std::string& dir) { LoadDflashCheckpoint(dir); },
      {"has only pytorch_model.bin; SpecBed never reads pickled"});
  // Duplicate across shards.
  const TensorMap tensors = RandomDflashTensors(c, 4);
  const std::string dup = ScratchDir(TestName() + "_dup");
  WriteRawCheckpoint(dup, ConfigJson(c), tensors, "a.safetensors");
  WriteRawCheckpoint(dup, ConfigJson(c), {{"norm.weight", tensors.at("norm.weight")}},
                     "b.safetensors");
  const std::string msg = ErrorOf([&] { LoadDflashCheckpoint(dup); });
  EXPECT_THAT(msg, HasSubstr("b.safetensors', tensor 'norm.weight': duplicates"));
  EXPECT_THAT(msg, HasSubstr("a.safetensors"));
}

TEST(DflashCheckpoint, WriterValidatesFirstAndRandomIsDeterministic) {
  const DflashConfig c = SmallConfig();
  TensorMap tensors = RandomDflashTensors(c, 5);
  const std::string dir = ScratchDir(TestName());
  TensorMap bad = tensors;
  bad.erase("hidden_norm.weight");
  EXPECT_THAT(ErrorOf([&] { WriteDflashCheckpoint(dir + "/x", c, bad); }),
              HasSubstr("missing tensor 'hidden_norm.weight'"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/x"));
  EXPECT_THAT(ErrorOf([&] {
                WriteDflashCheckpoint(dir + "/y", c, tensors, nullptr, SafetensorsDtype::kI64);
              }),
              HasSubstr("is not a weight dtype"));
  const TensorMap again = RandomDflashTensors(c, 5);
  ExpectTensorsEqual(again, tensors);
  EXPECT_FALSE(at::equal(RandomDflashTensors(c, 6).at("fc.weight"), tensors.at("fc.weight")));
  EXPECT_TRUE(at::equal(tensors.at("layers.0.self_attn.k_norm.weight"), at::ones({12})));
}

// ---- Forward --------------------------------------------------------------------------------

using Mat = std::vector<std::vector<double>>;

Mat ToMat(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kDouble).contiguous();
  Mat m(c.size(0), std::vector<double>(c.size(1)));
  for (int64_t i = 0; i < c.size(0); ++i) {
    for (int64_t j = 0; j < c.size(1); ++j) m[i][j] = c.data_ptr<double>()[i * c.size(1) + j];
  }
  return m;
}

std::vector<double> ToVec(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// y = W x for W [out, in].
std::vector<double> MatVec(const Mat& w, const std::vector<double>& x) {
  std::vector<double> y(w.size(), 0.0);
  for (size_t o = 0; o < w.size(); ++o) {
    for (size_t i = 0; i < x.size(); ++i) y[o] += w[o][i] * x[i];
  }
  return y;
}

std::vector<double> RmsNorm(const std::vector<double>& x, const std::vector<double>& w,
                            double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w[i];
  return y;
}

// Per-head RMSNorm then rotate_half RoPE at `pos` (plain theta, no scaling) of one head vector.
std::vector<double> NormRope(const std::vector<double>& x, const std::vector<double>& w, double eps,
                             int64_t pos, double theta) {
  std::vector<double> n = RmsNorm(x, w, eps), y(x.size());
  const size_t d = x.size(), half = d / 2;
  for (size_t i = 0; i < half; ++i) {
    const double freq = std::pow(theta, -2.0 * i / d);
    const double c = std::cos(pos * freq), s = std::sin(pos * freq);
    y[i] = n[i] * c - n[i + half] * s;
    y[i + half] = n[i + half] * c + n[i] * s;
  }
  return y;
}

std::vector<double> Slice(const std::vector<double>& x, int64_t begin, int64_t n) {
  return std::vector<double>(x.begin() + begin, x.begin() + begin + n);
}

// Independent reference: logits [n][V] of the block `tokens` (n = tokens.size() rows, any n) at
// positions [start, start + n) with context feature rows `features` (row j at position j),
// straight from the unfused tensors.
Mat ReferenceForward(const DflashConfig& c, const TensorMap& t, const at::Tensor& embedding,
                     const at::Tensor& lm_head, const Mat& features,
                     const std::vector<int32_t>& tokens, int64_t start) {
  const int64_t b = static_cast<int64_t>(tokens.size()), hd = c.head_dim,
                group = c.n_heads / c.n_kv_heads;
  const double eps = c.rms_norm_eps;
  const Mat fc = ToMat(t.at("fc.weight")), emb = ToMat(embedding), lm = ToMat(lm_head);
  Mat ctx;
  for (const auto& f : features) {
    ctx.push_back(RmsNorm(MatVec(fc, f), ToVec(t.at("hidden_norm.weight")), eps));
  }
  Mat h;
  for (int32_t tok : tokens) h.push_back(emb[tok]);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto w = [&](const char* s) { return ToMat(t.at(DflashLayerTensorName(l, s))); };
    auto v = [&](const char* s) { return ToVec(t.at(DflashLayerTensorName(l, s))); };
    const Mat wq = w(kDflashQProj), wk = w(kDflashKProj), wv = w(kDflashVProj),
              wo = w(kDflashOProj), wg = w(kDflashGateProj), wu = w(kDflashUpProj),
              wd = w(kDflashDownProj);
    const std::vector<double> qn = v(kDflashQNorm), kn = v(kDflashKNorm);
    // Keys / values: context rows then block rows, per kv head.
    std::vector<Mat> keys(c.n_kv_heads), vals(c.n_kv_heads);
    std::vector<Mat> queries(c.n_heads);
    auto add_kv = [&](const std::vector<double>& x, int64_t pos) {
      const auto k = MatVec(wk, x), vv = MatVec(wv, x);
      for (int64_t kh = 0; kh < c.n_kv_heads; ++kh) {
        keys[kh].push_back(NormRope(Slice(k, kh * hd, hd), kn, eps, pos, c.rope_theta));
        vals[kh].push_back(Slice(vv, kh * hd, hd));
      }
    };
    for (size_t j = 0; j < ctx.size(); ++j) add_kv(ctx[j], static_cast<int64_t>(j));
    for (int64_t i = 0; i < b; ++i) {
      const auto x = RmsNorm(h[i], v(kDflashInputNorm), eps);
      add_kv(x, start + i);
      const auto q = MatVec(wq, x);
      for (int64_t head = 0; head < c.n_heads; ++head) {
        queries[head].push_back(
            NormRope(Slice(q, head * hd, hd), qn, eps, start + i, c.rope_theta));
      }
    }
    const int64_t n_ctx = static_cast<int64_t>(ctx.size());
    Mat next = h;
    for (int64_t i = 0; i < b; ++i) {
      std::vector<double> attn(c.n_heads * hd, 0.0);
      for (int64_t head = 0; head < c.n_heads; ++head) {
        const int64_t kh = head / group;
        const int64_t n_keys = n_ctx + (c.causal ? i + 1 : b);
        // Sliding layers: a key at position kpos is visible when (start + i) - kpos < window.
        const int64_t window = c.LayerWindow(l);
        auto visible = [&](int64_t j) {
          const int64_t kpos = j < n_ctx ? j : start + (j - n_ctx);
          return window == 0 || (start + i) - kpos < window;
        };
        std::vector<double> s(n_keys);
        double mx = -1e300;
        for (int64_t j = 0; j < n_keys; ++j) {
          if (!visible(j)) continue;
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += queries[head][i][d] * keys[kh][j][d];
          s[j] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int64_t j = 0; j < n_keys; ++j) z += (s[j] = visible(j) ? std::exp(s[j] - mx) : 0.0);
        for (int64_t j = 0; j < n_keys; ++j) {
          for (int64_t d = 0; d < hd; ++d) attn[head * hd + d] += s[j] / z * vals[kh][j][d];
        }
      }
      const auto o = MatVec(wo, attn);
      for (int64_t d = 0; d < c.hidden_size; ++d) next[i][d] += o[d];
      const auto x2 = RmsNorm(next[i], v(kDflashPostNorm), eps);
      const auto g = MatVec(wg, x2), u = MatVec(wu, x2);
      std::vector<double> a(g.size());
      for (size_t f = 0; f < g.size(); ++f) a[f] = g[f] / (1.0 + std::exp(-g[f])) * u[f];
      const auto down = MatVec(wd, a);
      for (int64_t d = 0; d < c.hidden_size; ++d) next[i][d] += down[d];
    }
    h = next;
  }
  Mat logits;
  for (int64_t i = 0; i < b; ++i) {
    logits.push_back(MatVec(lm, RmsNorm(h[i], ToVec(t.at("norm.weight")), eps)));
  }
  return logits;
}

// Every forward test runs on the row loops and on the ATen path forced on the CPU (float32), both
// against the same plain-loop reference.
class DflashHeadForward : public ::testing::TestWithParam<bool> {
 protected:
  void Build(bool causal) {
    placement_.aten = GetParam();
    config_ = SmallConfig();
    config_.causal = causal;
    tensors_ = RandomDflashTensors(config_, 11);
    // Larger-than-init weights so attention is far from uniform and layers matter.
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (auto& [name, t] : tensors_) {
      float* p = t.data_ptr<float>();
      for (int64_t i = 0; i < t.numel(); ++i) {
        p[i] = EndsWith(name, "norm.weight") ? 1.0f + 0.2f * normal(rng) : 0.2f * normal(rng);
      }
    }
    embedding_ = at::empty({config_.vocab_size, config_.hidden_size});
    lm_head_ = at::empty({config_.vocab_size, config_.hidden_size});
    for (at::Tensor* m : {&embedding_, &lm_head_}) {
      float* p = m->data_ptr<float>();
      for (int64_t i = 0; i < m->numel(); ++i) p[i] = normal(rng);
    }
    features_.assign(kContext, std::vector<float>(config_.fc_in_dim()));
    for (auto& row : features_) {
      for (float& f : row) f = normal(rng);
    }
  }

  Mat FeatureMat(int64_t n) const {
    Mat m;
    for (int64_t i = 0; i < n; ++i) m.emplace_back(features_[i].begin(), features_[i].end());
    return m;
  }

  std::vector<float> FlatFeatures(int64_t begin, int64_t end) const {
    std::vector<float> flat;
    for (int64_t i = begin; i < end; ++i) {
      flat.insert(flat.end(), features_[i].begin(), features_[i].end());
    }
    return flat;
  }

  void ExpectMatches(const DflashHeadOutput& out, const Mat& want, const std::string& what) {
    const int64_t n = static_cast<int64_t>(want.size());
    ASSERT_EQ(out.logits.size(0), n) << what;
    ASSERT_EQ(out.logits.size(1), config_.vocab_size) << what;
    ASSERT_EQ(out.hidden.size(0), n) << what;
    ASSERT_EQ(out.hidden.size(1), config_.hidden_size) << what;
    double scale = 0;
    for (const auto& row : want) {
      for (double x : row) scale = std::max(scale, std::abs(x));
    }
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t v = 0; v < config_.vocab_size; ++v) {
        ASSERT_NEAR(out.logits_row(i)[v], want[i][v], 1e-4 * scale)
            << what << " row " << i << " vocab " << v;
      }
    }
  }

  static constexpr int64_t kContext = 9;
  DflashConfig config_;
  TensorMap tensors_;
  at::Tensor embedding_, lm_head_;
  std::vector<std::vector<float>> features_;
  HeadPlacement placement_;
};

TEST_P(DflashHeadForward, NonCausalAndCausalMatchReferenceIncrementally) {
  for (bool causal : {false, true}) {
    Build(causal);
    DflashHead head(config_, tensors_, embedding_, lm_head_, placement_);
    head.ResetContext(2);  // forces growth while appending
    const std::vector<int32_t> block = {7, 49, 49, 49};
    const std::vector<int32_t> block2 = {3, 49, 12, 49};
    DflashHeadOutput out;

    // Full context in one call.
    const auto all = FlatFeatures(0, kContext);
    head.AppendContext(all.data(), kContext);
    EXPECT_EQ(head.context_length(), kContext);
    head.Forward(block.data(), kContext, out);
    const Mat want_full = ReferenceForward(config_, tensors_, embedding_, lm_head_,
                                           FeatureMat(kContext), block, kContext);
    ExpectMatches(out, want_full, causal ? "causal full" : "full");
    const float* logits_storage = out.logits.data_ptr<float>();

    // Incremental: 4 rows, a draft, then 2 + 3 more rows (as accepted tokens arrive).
    head.ResetContext(2);
    EXPECT_EQ(head.context_length(), 0);
    auto part = FlatFeatures(0, 4);
    head.AppendContext(part.data(), 4);
    head.Forward(block2.data(), 4, out);
    ExpectMatches(
        out, ReferenceForward(config_, tensors_, embedding_, lm_head_, FeatureMat(4), block2, 4),
        "prefix 4");
    part = FlatFeatures(4, 6);
    head.AppendContext(part.data(), 2);
    part = FlatFeatures(6, kContext);
    head.AppendContext(part.data(), 3);
    head.Forward(block.data(), kContext, out);
    ExpectMatches(out, want_full, "incremental");
    if (!placement_.aten) {  // the row path reuses its output buffers
      EXPECT_EQ(out.logits.data_ptr<float>(), logits_storage);
    }

    // Truncate back to 6 rows (a rejected suffix) and redraft: equals a fresh 6-row context.
    head.TruncateContext(6);
    head.Forward(block2.data(), 6, out);
    ExpectMatches(
        out, ReferenceForward(config_, tensors_, embedding_, lm_head_, FeatureMat(6), block2, 6),
        "truncated");
    // Re-append after truncation (rows overwritten in place).
    part = FlatFeatures(6, kContext);
    head.AppendContext(part.data(), 3);
    head.ForwardFromBonus(7, out);  // [7, 49, 49, 49] at context_length()
    ExpectMatches(out, want_full, "from bonus");
  }
}

// "sliding_attention" layers (window from the config) against the reference: the first layer
// slides with a window of 3 positions, the second attends to everything; non-causal and causal,
// full and incremental context, and the window really changes the output.
TEST_P(DflashHeadForward, SlidingWindowLayersMatchReference) {
  for (bool causal : {false, true}) {
    Build(causal);
    DflashHead full(config_, tensors_, embedding_, lm_head_, placement_);
    config_.sliding_layers = {true, false};
    config_.sliding_window = 3;
    DflashHead head(config_, tensors_, embedding_, lm_head_, placement_);
    const std::vector<int32_t> block = {7, 49, 49, 49};
    const auto all = FlatFeatures(0, kContext);
    head.AppendContext(all.data(), kContext);
    full.AppendContext(all.data(), kContext);
    DflashHeadOutput out, out_full;
    head.Forward(block.data(), kContext, out);
    full.Forward(block.data(), kContext, out_full);
    const Mat want = ReferenceForward(config_, tensors_, embedding_, lm_head_, FeatureMat(kContext),
                                      block, kContext);
    ExpectMatches(out, want, causal ? "sliding causal" : "sliding");
    EXPECT_GT((out.logits - out_full.logits).abs().max().item<float>(), 1e-3);
    // Incremental context, a shorter context than the window, and n > block_size rows.
    head.ResetContext(1);
    auto part = FlatFeatures(0, 2);
    head.AppendContext(part.data(), 2);
    const std::vector<int32_t> longer = {3, 49, 12, 49, 49, 5};
    head.Forward(longer.data(), static_cast<int64_t>(longer.size()), 2, out);
    ExpectMatches(
        out, ReferenceForward(config_, tensors_, embedding_, lm_head_, FeatureMat(2), longer, 2),
        "short context");
    // A window of 1: each row sees only itself (no context at all).
    config_.sliding_layers = {true, true};
    config_.sliding_window = 1;
    DflashHead own(config_, tensors_, embedding_, lm_head_, placement_);
    own.AppendContext(all.data(), kContext);
    own.Forward(block.data(), kContext, out);
    ExpectMatches(out,
                  ReferenceForward(config_, tensors_, embedding_, lm_head_, FeatureMat(kContext),
                                   block, kContext),
                  "window 1");
  }
}

TEST_P(DflashHeadForward, VariableRowCountsMatchReference) {
  // n < block_size (4), n = block_size and n > block_size, in an order that grows, shrinks and
  // regrows the work buffers; the bonus row plus mask rows, and a block with real tokens.
  for (bool causal : {false, true}) {
    Build(causal);
    DflashHead head(config_, tensors_, embedding_, lm_head_, placement_);
    const auto all = FlatFeatures(0, kContext);
    head.AppendContext(all.data(), kContext);
    DflashHeadOutput out;
    for (int64_t n : {4, 2, 7, 1, 9, 3, 9}) {
      const std::string what =
          std::string(causal ? "causal" : "non-causal") + " n " + std::to_string(n);
      std::vector<int32_t> block(n, 49);
      block[0] = 7;
      head.ForwardFromBonus(7, n, out);
      ExpectMatches(out,
                    ReferenceForward(config_, tensors_, embedding_, lm_head_, FeatureMat(kContext),
                                     block, kContext),
                    what + " from bonus");
      for (int64_t i = 1; i < n; i += 2) block[i] = static_cast<int32_t>(3 * i + 1);
      head.Forward(block.data(), n, kContext - 2, out);
      ExpectMatches(out,
                    ReferenceForward(config_, tensors_, embedding_, lm_head_, FeatureMat(kContext),
                                     block, kContext - 2),
                    what + " tokens");
    }
    // The same n again keeps the output storage.
    head.ForwardFromBonus(7, 9, out);
    const float* storage = out.logits.data_ptr<float>();
    head.ForwardFromBonus(5, 9, out);
    if (!placement_.aten) {
      EXPECT_EQ(out.logits.data_ptr<float>(), storage);
    }
    // The default forms are n = block_size.
    DflashHeadOutput a, b;
    head.ForwardFromBonus(5, a);
    head.ForwardFromBonus(5, config_.block_size, b);
    EXPECT_TRUE(at::equal(a.logits, b.logits));
    EXPECT_THAT(ErrorOf([&] { head.ForwardFromBonus(5, 0, out); }), HasSubstr("must be >= 1"));
    const int32_t token = 5;
    EXPECT_THAT(ErrorOf([&] { head.Forward(&token, 0, kContext, out); }),
                HasSubstr("block rows n must be >= 1, got 0"));
  }
}

TEST_P(DflashHeadForward, ExtraRowsChangeEarlierRowsOnlyWhenNonCausal) {
  for (bool causal : {false, true}) {
    Build(causal);
    DflashHead head(config_, tensors_, embedding_, lm_head_, placement_);
    const auto all = FlatFeatures(0, 6);
    head.AppendContext(all.data(), 6);
    DflashHeadOutput trained, longer;
    head.ForwardFromBonus(7, config_.block_size, trained);
    head.ForwardFromBonus(7, 2 * config_.block_size, longer);
    const at::Tensor first = longer.logits.narrow(0, 0, config_.block_size);
    if (causal) {
      // Rows see only earlier rows (equal up to GEMM blocking, which may depend on the row count).
      EXPECT_TRUE(at::allclose(first, trained.logits, 1e-5, 1e-5));
    } else {
      EXPECT_FALSE(at::allclose(first, trained.logits));
    }
  }
}

TEST_P(DflashHeadForward, CausalDiffersAndBlockRowsSeeLaterRowsOnlyWhenNonCausal) {
  Build(false);
  DflashHead bidir(config_, tensors_, embedding_, lm_head_, placement_);
  config_.causal = true;
  DflashHead causal(config_, tensors_, embedding_, lm_head_, placement_);
  const auto all = FlatFeatures(0, 5);
  bidir.AppendContext(all.data(), 5);
  causal.AppendContext(all.data(), 5);
  std::vector<int32_t> block = {7, 49, 49, 49}, changed = {7, 49, 49, 20};
  DflashHeadOutput a, b, c, d;
  bidir.Forward(block.data(), 5, a);
  bidir.Forward(changed.data(), 5, b);
  causal.Forward(block.data(), 5, c);
  causal.Forward(changed.data(), 5, d);
  // Changing the last block token moves row 0 only in the bidirectional head.
  EXPECT_FALSE(at::allclose(a.logits[0], b.logits[0]));
  EXPECT_TRUE(at::equal(c.logits.narrow(0, 0, 3), d.logits.narrow(0, 0, 3)));
  EXPECT_FALSE(at::allclose(a.logits[1], c.logits[1]));
}

TEST_P(DflashHeadForward, Bf16EmbeddingAndErrors) {
  Build(false);
  DflashHead head(config_, tensors_, embedding_.to(at::kBFloat16), lm_head_, placement_);
  const auto all = FlatFeatures(0, 3);
  head.AppendContext(all.data(), 3);
  const std::vector<int32_t> block = {5, 49, 49, 49};
  DflashHeadOutput out;
  head.Forward(block.data(), 3, out);
  ExpectMatches(out,
                ReferenceForward(config_, tensors_, embedding_.to(at::kBFloat16).to(at::kFloat),
                                 lm_head_, FeatureMat(3), block, 3),
                "bf16 embedding");
  EXPECT_EQ(head.parameter_count(), config_.ParameterCount());

  const std::vector<int32_t> bad = {5, 50, 49, 49};
  EXPECT_THAT(ErrorOf([&] { head.Forward(bad.data(), 3, out); }),
              HasSubstr("token id 50 (block row 1) outside the vocabulary [0, 50)"));
  EXPECT_THAT(ErrorOf([&] { head.Forward(block.data(), -1, out); }),
              HasSubstr("negative start position"));
  EXPECT_THAT(ErrorOf([&] { head.TruncateContext(4); }), HasSubstr("outside [0, context_length"));
  EXPECT_THAT(ErrorOf([&] { head.AppendContext(all.data(), 0); }), HasSubstr("no rows"));
  EXPECT_THAT(ErrorOf([&] {
                DflashHead(config_, tensors_, embedding_, at::zeros({50, 31}));
              }),
              HasSubstr("target lm_head has shape [50, 31], expected [vocab_size, hidden_size]"));
  EXPECT_THAT(ErrorOf([&] { DflashHead(config_, tensors_, at::Tensor(), lm_head_); }),
              HasSubstr("token embedding"));
  TensorMap missing = tensors_;
  missing.erase("layers.1.self_attn.k_norm.weight");
  EXPECT_THAT(ErrorOf([&] { DflashHead(config_, missing, embedding_, lm_head_); }),
              HasSubstr("DflashHead: missing tensor 'layers.1.self_attn.k_norm.weight'"));
  DflashConfig no_mask = config_;
  no_mask.mask_token_id = -1;
  DflashHead head2(no_mask, tensors_, embedding_, lm_head_, placement_);
  EXPECT_THAT(ErrorOf([&] { head2.ForwardFromBonus(3, out); }), HasSubstr("mask_token_id"));
}

INSTANTIATE_TEST_SUITE_P(Paths, DflashHeadForward, ::testing::Bool(), testing_util::PathName);

// Context of 9 rows, then a block of 6 at the context's end: [hidden | logits] as float32 CPU.
at::Tensor RunDflashBlock(const DflashConfig& config, const TensorMap& tensors,
                          const at::Tensor& embedding, const at::Tensor& lm_head,
                          const HeadPlacement& placement) {
  DflashHead head(config, tensors, embedding, lm_head, placement);
  at::manual_seed(4);
  head.AppendContext(at::randn({5, config.fc_in_dim()}).to(placement.device));
  head.AppendContext(at::randn({4, config.fc_in_dim()}).to(placement.device));
  DflashHeadOutput out;
  head.ForwardFromBonus(7, 6, out);
  return at::cat({out.hidden.to(at::kCPU, at::kFloat), out.logits.cpu()}, 1);
}

DflashConfig WindowedConfig() {
  DflashConfig c = SmallConfig();
  c.sliding_layers = {true, false};
  c.sliding_window = 3;
  return c;
}

TEST(DflashHeadAten, MatchesTheRowsInBfloat16WithSlidingWindows) {
  const DflashConfig config = WindowedConfig();
  const TensorMap tensors = RandomDflashTensors(config, 11);
  const at::Tensor embedding = at::randn({config.vocab_size, config.hidden_size});
  const at::Tensor lm_head = at::randn({config.vocab_size, config.hidden_size});
  const at::Tensor rows = RunDflashBlock(config, tensors, embedding, lm_head, HeadPlacement{});
  HeadPlacement aten;
  aten.aten = true;
  EXPECT_LT(
      testing_util::RelativeL2(RunDflashBlock(config, tensors, embedding, lm_head, aten), rows),
      1e-5);
  aten.dtype = at::kBFloat16;
  EXPECT_LT(
      testing_util::RelativeL2(RunDflashBlock(config, tensors, embedding, lm_head, aten), rows),
      3e-2);
}

// A block forward on the ATen path writes the block's keys and values after the context in the
// context buffers and attends over one view of them: no op copies the context.
TEST(DflashHeadAten, BlockForwardDoesNotCopyTheContext) {
  const DflashConfig config = WindowedConfig();
  const TensorMap tensors = RandomDflashTensors(config, 11);
  HeadPlacement aten;
  aten.aten = true;
  DflashHead head(config, tensors, at::randn({config.vocab_size, config.hidden_size}),
                  at::randn({config.vocab_size, config.hidden_size}), aten);
  head.AppendContext(at::randn({40, config.fc_in_dim()}));
  DflashHeadOutput out;
  OpTrace trace;
  head.ForwardFromBonus(7, 6, out);
  trace.Stop();
  const OpCounts counts = CountOps(trace.ops());
  // Two per layer: the rotate-half RoPE of the block's q and k (dim -1). Concatenating the
  // context's keys and values with the block's made two more per layer.
  EXPECT_EQ(counts.by_name.at("aten::cat"), 2 * config.n_layers);
  EXPECT_GT(counts.by_name.count("aten::copy_"), 0u);  // the block rows, per layer
}

// Three sequences' heads over one DflashWeights (contexts of 5, 9 and 13 rows, blocks of 6, 3 and
// 6 rows, one at an explicit position): ForwardBatch gives each the outputs of its own Forward,
// on the row loops bit for bit (each block in turn) and on the ATen path within rounding in one
// forward (one GEMM per projection for all 15 rows, as many as for one block).
TEST(DflashHeadAten, ForwardBatchGivesEverySequenceItsOwnForward) {
  const DflashConfig config = WindowedConfig();
  const TensorMap tensors = RandomDflashTensors(config, 11);
  const at::Tensor embedding = at::randn({config.vocab_size, config.hidden_size});
  const at::Tensor lm_head = at::randn({config.vocab_size, config.hidden_size});
  for (bool aten_path : {false, true}) {
    SCOPED_TRACE(aten_path ? "ATen path" : "row loops");
    HeadPlacement placement;
    placement.aten = aten_path;
    const auto weights =
        std::make_shared<const DflashWeights>(config, tensors, embedding, lm_head, placement);
    std::vector<std::unique_ptr<DflashHead>> heads;
    at::manual_seed(5);
    for (int64_t context : {5, 9, 13}) {
      heads.push_back(std::make_unique<DflashHead>(weights));
      heads.back()->AppendContext(at::randn({context, config.fc_in_dim()}));
    }
    const std::vector<int32_t> tokens = {4, 49, 7, 49, 12, 49};
    std::vector<DflashHeadOutput> together(3), alone(3);
    std::vector<DflashBlock> blocks = {heads[0]->BonusBlock(7, 6, together[0]),
                                       {heads[1].get(), tokens.data(), 3, 11, &together[1]},
                                       heads[2]->BonusBlock(3, 6, together[2])};
    const int64_t forwards = DflashHeadForwards();
    OpTrace trace;
    DflashHead::ForwardBatch(blocks);
    trace.Stop();
    EXPECT_EQ(DflashHeadForwards() - forwards, aten_path ? 1 : 3);
    if (aten_path) {
      EXPECT_EQ(CountOps(trace.ops()).by_name.at("aten::mm"), 4 * config.n_layers + 1);
    }
    heads[0]->ForwardFromBonus(7, 6, alone[0]);
    heads[1]->Forward(tokens.data(), 3, 11, alone[1]);
    heads[2]->ForwardFromBonus(3, 6, alone[2]);
    for (size_t i = 0; i < 3; ++i) {
      const at::Tensor a = at::cat({together[i].hidden.to(at::kFloat), together[i].logits}, 1);
      const at::Tensor b = at::cat({alone[i].hidden.to(at::kFloat), alone[i].logits}, 1);
      if (aten_path) {
        EXPECT_LT(testing_util::RelativeL2(a, b), 1e-6) << "sequence " << i;
      } else {
        EXPECT_TRUE(at::equal(a, b)) << "sequence " << i;
      }
    }
    EXPECT_EQ(heads[1]->context_length(), 9) << "a batch forward leaves the contexts";
  }
}

TEST(DflashHeadAten, ForwardBatchRefusesMixedOrRepeatedHeads) {
  const DflashConfig config = WindowedConfig();
  const TensorMap tensors = RandomDflashTensors(config, 11);
  const at::Tensor embedding = at::randn({config.vocab_size, config.hidden_size});
  const at::Tensor lm_head = at::randn({config.vocab_size, config.hidden_size});
  DflashHead a(config, tensors, embedding, lm_head), b(config, tensors, embedding, lm_head);
  DflashHead c(a.weights());
  DflashHeadOutput out_a, out_b, out_c;
  EXPECT_THAT(ErrorOf([&] { DflashHead::ForwardBatch({}); }), HasSubstr("no blocks"));
  EXPECT_THAT(ErrorOf([&] {
                DflashHead::ForwardBatch({a.BonusBlock(1, 4, out_a), b.BonusBlock(1, 4, out_b)});
              }),
              HasSubstr("block 1's head has other weights than block 0's"));
  EXPECT_THAT(ErrorOf([&] {
                DflashHead::ForwardBatch({a.BonusBlock(1, 4, out_a), a.BonusBlock(2, 4, out_c)});
              }),
              HasSubstr("blocks 0 and 1 have the same head"));
  EXPECT_NO_THROW(DflashHead::ForwardBatch({a.BonusBlock(1, 4, out_a), c.BonusBlock(2, 4, out_c)}));
}

TEST(DflashHeadAtenCuda, MatchesTheRowsOnTheGpu) {
  SPECBED_SKIP_WITHOUT_CUDA();
  const DflashConfig config = WindowedConfig();
  const TensorMap tensors = RandomDflashTensors(config, 11);
  const at::Tensor embedding = at::randn({config.vocab_size, config.hidden_size});
  const at::Tensor lm_head = at::randn({config.vocab_size, config.hidden_size});
  const at::Tensor rows = RunDflashBlock(config, tensors, embedding, lm_head, HeadPlacement{});
  testing_util::ExpectGpuMatchesRows(rows, [&](const HeadPlacement& gpu) {
    return RunDflashBlock(config, tensors, embedding.to(gpu.device, gpu.dtype),
                          lm_head.to(gpu.device, gpu.dtype), gpu);
  });
}

// Published config variants upstream code reads: block_size only inside dflash_config (newer z-lab
// configs) or absent (z-lab's default 16), the upstream is_causal flag, and sliding_attention
// layers with their window; each written as a small checkpoint and loaded.
TEST(DflashCheckpoint, PublishedConfigVariantsLoad) {
  const DflashConfig c = SmallConfig();
  const TensorMap tensors = RandomDflashTensors(c, 9);
  auto load_with = [&](const std::string& name, const std::function<void(json&)>& edit) {
    json j = ConfigJson(c);
    edit(j);
    const std::string dir = ScratchDir(TestName() + "_" + name);
    WriteRawCheckpoint(dir, j, tensors);
    return LoadDflashCheckpoint(dir).config;
  };
  DflashConfig got = load_with("inner_block", [](json& j) {
    j.erase("block_size");
    j["dflash_config"]["block_size"] = 8;
  });
  EXPECT_EQ(got.block_size, 8);
  got = load_with("no_block", [](json& j) { j.erase("block_size"); });
  EXPECT_EQ(got.block_size, kDflashDefaultBlockSize);
  EXPECT_EQ(got.block_size, 16);
  got = load_with("is_causal", [](json& j) { j["is_causal"] = true; });
  EXPECT_TRUE(got.causal);
  got = load_with("inner_is_causal", [](json& j) { j["dflash_config"]["is_causal"] = true; });
  EXPECT_TRUE(got.causal);
  got = load_with("not_causal", [](json& j) { j["is_causal"] = false; });
  EXPECT_FALSE(got.causal);
  got = load_with("sliding", [](json& j) {
    j["layer_types"] = {"sliding_attention", "full_attention"};
    j["sliding_window"] = 5;
    j["use_sliding_window"] = true;
  });
  EXPECT_EQ(got.sliding_layers, (std::vector<bool>{true, false}));
  EXPECT_EQ(got.sliding_window, 5);
  EXPECT_EQ(got.LayerWindow(0), 5);
  EXPECT_EQ(got.LayerWindow(1), 0);
  // Written back in the published layout, it parses to the same layers.
  const json back = ConfigJson(got);
  EXPECT_EQ(back["layer_types"], json({"sliding_attention", "full_attention"}));
  EXPECT_EQ(back["sliding_window"], 5);
  const DflashConfig again = ParseDflashConfig(back, "back.json");
  EXPECT_EQ(again.sliding_layers, got.sliding_layers);
  EXPECT_EQ(again.sliding_window, 5);
}

}  // namespace
}  // namespace specbed
