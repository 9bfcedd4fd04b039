// Tests for methods/eagle3: config.json parsing/writing (published, vLLM speculators, errors),
// default aux layers, checkpoint round trips (F32 exact, BF16/F16 within their rounding,
// `layers.0.` prefix, shards, identity vocab), every checkpoint failure mode, the draft
// vocabulary construction, and the head forward against an independent plain-loop reference
// (double precision, unfused tensors): full causal sequence, incremental cache == full, tree mask
// + explicit positions with own-hidden features (fc skipped), norm_before_residual, own embedding.
// Randomized inputs use fixed seeds; tolerances are ~1e-5 relative to the output scale while the
// float32 rounding error is ~1e-7 of it, so the false-failure rate is effectively zero.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/mapped_file.h"
#include "methods/eagle3/eagle3_checkpoint.h"
#include "methods/eagle3/eagle3_config.h"
#include "methods/eagle3/eagle3_head.h"
#include "models/checkpoint/safetensors.h"
#include "models/op_trace.h"
#include "tests/common/cuda_test_util.h"
#include "tests/methods/head_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
// ErrorOf, ConfigJson, SetHeadShape, TensorMap, WriteRawCheckpoint, ScratchDir, ...:
// tests/methods/head_test_util.h and tests/models/model_test_util.h.
using namespace testing_util;

// A Llama-3-like head scaled down; head_dim * n_heads (96) != hidden (64) as in Qwen3-4B.
Eagle3Config SmallConfig() {
  Eagle3Config c;
  SetHeadShape(c, {/*hidden_size=*/64, /*intermediate_size=*/160, /*n_heads=*/4, /*n_kv_heads=*/2,
                   /*head_dim=*/24, /*vocab_size=*/300, /*max_position_embeddings=*/2048,
                   /*rms_norm_eps=*/1e-5, /*rope_theta=*/500000.0, /*bos_token_id=*/1,
                   /*eos_token_ids=*/{2}});
  c.target_hidden_size = 48;
  c.draft_vocab_size = 120;
  c.rope_scaling.type = RopeScalingType::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.aux_layer_ids = {1, 2, 3};
  return c;
}

void ExpectSameConfig(const Eagle3Config& a, const Eagle3Config& b) {
  ExpectSameHeadConfigBase(a, b);
  EXPECT_EQ(a.target_hidden_size, b.target_hidden_size);
  EXPECT_EQ(a.draft_vocab_size, b.draft_vocab_size);
  EXPECT_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
  EXPECT_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings,
            b.rope_scaling.original_max_position_embeddings);
  EXPECT_EQ(a.aux_layer_ids, b.aux_layer_ids);
  EXPECT_EQ(a.norm_before_residual, b.norm_before_residual);
}

// config.json of the Llama-3.1-8B head as published (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B).
json PublishedLlama31Config() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
    "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
    "num_key_value_heads": 8, "num_hidden_layers": 1, "rms_norm_eps": 1e-05,
    "max_position_embeddings": 2048, "vocab_size": 128256, "draft_vocab_size": 32000,
    "bos_token_id": 128000, "eos_token_id": 128001, "pad_token_id": 0, "hidden_act": "silu",
    "tie_word_embeddings": false, "torch_dtype": "float16"})");
}

// ---- Config ---------------------------------------------------------------------------------

TEST(Eagle3Config, JsonRoundTrip) {
  Eagle3Config c = SmallConfig();
  ExpectSameConfig(ParseEagle3Config(ConfigJson(c), "small"), c);
  const auto j = Eagle3ConfigToJson(c);
  ExpectConfigJsonNames(j, "LlamaForCausalLMEagle3", "llama");
  EXPECT_EQ(j["num_hidden_layers"], 1);
  EXPECT_EQ(j["tie_word_embeddings"], false);
  EXPECT_EQ(j["eagle_config"]["eagle_aux_hidden_state_layer_ids"],
            nlohmann::ordered_json::array({1, 2, 3}));
  EXPECT_EQ(j["rope_scaling"]["rope_type"], "llama3");

  c.aux_layer_ids.clear();
  c.norm_before_residual = true;
  c.rope_scaling = RopeScaling();
  c.bos_token_id = -1;
  c.eos_token_ids = {2, 3};
  c.torch_dtype = "bfloat16";
  EXPECT_FALSE(Eagle3ConfigToJson(c).contains("eagle_config"));
  ExpectSameConfig(ParseEagle3Config(ConfigJson(c), "small"), c);
}

TEST(Eagle3Config, PublishedLlama31Head) {
  const Eagle3Config c = ParseEagle3Config(PublishedLlama31Config(), "llama31.json");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.target_hidden_size, 4096);
  EXPECT_EQ(c.fc_in_dim(), 12288);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.draft_vocab_size, 32000);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
  EXPECT_TRUE(c.aux_layer_ids.empty());
  EXPECT_FALSE(c.norm_before_residual);
  EXPECT_EQ(c.torch_dtype, "float16");
  const auto shapes = ExpectedEagle3TensorShapes(c);
  EXPECT_EQ(shapes.at("fc.weight"), (std::vector<int64_t>{4096, 12288}));
  EXPECT_EQ(shapes.at("midlayer.self_attn.q_proj.weight"), (std::vector<int64_t>{4096, 8192}));
  EXPECT_EQ(shapes.at("midlayer.self_attn.k_proj.weight"), (std::vector<int64_t>{1024, 8192}));
  EXPECT_EQ(shapes.at("lm_head.weight"), (std::vector<int64_t>{32000, 4096}));
  EXPECT_EQ(shapes.at("t2d"), (std::vector<int64_t>{128256}));
  EXPECT_EQ(shapes.count("embed_tokens.weight"), 0u);
}

TEST(Eagle3Config, Qwen3StyleHeadDimAndAuxIds) {
  json j = PublishedLlama31Config();
  j["architectures"] = {"Eagle3LlamaForCausalLM"};
  j["hidden_size"] = 2560;
  j["head_dim"] = 128;
  j["rope_theta"] = 1000000;
  j["target_hidden_size"] = 2560;
  j["norm_before_residual"] = true;
  j["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", {1, 17, 32}},
                       {"use_aux_hidden_state", true}};
  const Eagle3Config c = ParseEagle3Config(j, "qwen3.json");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.q_dim(), 4096);
  EXPECT_EQ(ExpectedEagle3TensorShapes(c).at("midlayer.self_attn.q_proj.weight"),
            (std::vector<int64_t>{4096, 5120}));
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_TRUE(c.norm_before_residual);
  EXPECT_EQ(c.aux_layer_ids, (std::vector<int64_t>{1, 17, 32}));
}

TEST(Eagle3Config, SpeculatorsWrapper) {
  json layer = PublishedLlama31Config();
  layer.erase("draft_vocab_size");
  layer["architectures"] = {"LlamaForCausalLM"};
  const json j = {{"architectures", {"Eagle3Speculator"}},
                  {"speculators_model_type", "eagle3"},
                  {"transformer_layer_config", layer},
                  {"draft_vocab_size", 32000},
                  {"target_hidden_size", 4096},
                  {"eagle_aux_hidden_state_layer_ids", {2, 16, 29}},
                  {"speculators_config", {{"proposal_methods", json::array()}}}};
  const Eagle3Config c = ParseEagle3Config(j, "spec.json");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.draft_vocab_size, 32000);
  EXPECT_TRUE(c.norm_before_residual);  // the speculators default
  EXPECT_EQ(c.aux_layer_ids, (std::vector<int64_t>{2, 16, 29}));
}

TEST(Eagle3Config, Errors) {
  auto parse_with = [](const char* field, const json& value) {
    json j = PublishedLlama31Config();
    if (value.is_null()) {
      j.erase(field);
    } else {
      j[field] = value;
    }
    return ErrorOf([&] { ParseEagle3Config(j, "head/config.json"); });
  };
  std::string msg = parse_with("num_hidden_layers", 2);
  EXPECT_THAT(msg, HasSubstr("head/config.json"));
  EXPECT_THAT(msg, HasSubstr("num_hidden_layers is 2, expected 1"));
  EXPECT_THAT(parse_with("fc_norm", true), HasSubstr("fc_norm = true"));
  EXPECT_THAT(parse_with("norm_output", true), HasSubstr("norm_output = true"));
  msg = parse_with("architectures", json::array({"MistralForCausalLM"}));
  EXPECT_THAT(msg, HasSubstr("architectures"));
  EXPECT_THAT(msg, HasSubstr("LlamaForCausalLMEagle3"));
  EXPECT_THAT(parse_with("architectures", nullptr), HasSubstr("missing field \"architectures\""));
  EXPECT_THAT(parse_with("hidden_size", nullptr), HasSubstr("\"hidden_size\""));
  EXPECT_THAT(parse_with("draft_vocab_size", 200000),
              HasSubstr("draft_vocab_size 200000 is larger than vocab_size 128256"));
  EXPECT_THAT(parse_with("draft_vocab_size", "32000"), HasSubstr("\"draft_vocab_size\""));
  EXPECT_THAT(parse_with("eagle_config", json{{"eagle_aux_hidden_state_layer_ids", {1, 2}}}),
              HasSubstr("exactly 3"));
  EXPECT_THAT(parse_with("eagle_config", json{{"use_aux_hidden_state", false}}),
              HasSubstr("use_aux_hidden_state = false"));
  EXPECT_THAT(parse_with("rope_scaling", json{{"rope_type", "yarn"}, {"factor", 4.0}}),
              HasSubstr("rope_scaling"));
  EXPECT_THAT(ErrorOf([] {
                ParseEagle3Config(
                    json{{"speculators_model_type", "eagle"}, {"transformer_layer_config", {}}},
                    "s.json");
              }),
              HasSubstr("speculators_model_type must be \"eagle3\""));
}

TEST(Eagle3Config, DefaultAuxLayers) {
  EXPECT_EQ(DefaultEagle3AuxLayers(32), (std::vector<int64_t>{2, 16, 29}));
  EXPECT_EQ(DefaultEagle3AuxLayers(36), (std::vector<int64_t>{2, 18, 33}));
  EXPECT_EQ(DefaultEagle3AuxLayers(5), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_THAT(ErrorOf([] { DefaultEagle3AuxLayers(2); }), HasSubstr("at least 3"));
}

// ---- Checkpoints ----------------------------------------------------------------------------

TEST(Eagle3Checkpoint, RoundTripFloat32WithRecipe) {
  const Eagle3Config c = SmallConfig();
  const TensorMap tensors = RandomEagle3Tensors(c, 7);
  const std::string dir = ScratchDir(TestName());
  const json recipe = {{"task", "eagle3"}, {"steps", 100}, {"lr", 1e-4}};
  WriteEagle3Checkpoint(dir, c, tensors, recipe);
  const Eagle3Checkpoint ckpt = LoadEagle3Checkpoint(dir);
  ExpectSameConfig(ckpt.config, c);
  ExpectLoadedAsWritten(ckpt, dir, tensors, recipe, "LlamaForCausalLMEagle3");
  // The published layout on disk.
  auto file = SafetensorsFile::Open(dir + "/model.safetensors");
  EXPECT_EQ(file->Find("d2t")->dtype, SafetensorsDtype::kI64);
  EXPECT_EQ(file->Find("t2d")->dtype, SafetensorsDtype::kBool);
  EXPECT_EQ(file->Find("fc.weight")->dtype, SafetensorsDtype::kF32);
  EXPECT_EQ(file->entries().size(), 15u);
}

TEST(Eagle3Checkpoint, RoundTripHalfPrecisionAndNoRecipe) {
  const Eagle3Config c = SmallConfig();
  const TensorMap tensors = RandomEagle3Tensors(c, 8, /*with_embedding=*/true);
  for (const auto& [dtype, torch_dtype, name] : testing_util::HalfPrecisions()) {
    const std::string dir = ScratchDir(TestName() + name);
    WriteEagle3Checkpoint(dir, c, tensors, nullptr, dtype);
    const Eagle3Checkpoint ckpt = LoadEagle3Checkpoint(dir);
    EXPECT_EQ(ckpt.config.torch_dtype, name);
    EXPECT_TRUE(ckpt.recipe.is_null());
    EXPECT_EQ(SafetensorsFile::Open(dir + "/model.safetensors")->Find("fc.weight")->dtype, dtype);
    // Exactly the stored rounding of the float32 values (within the dtype's tolerance).
    testing_util::ExpectStoredRounding(ckpt.tensors, tensors, torch_dtype, name);
  }
}

TEST(Eagle3Checkpoint, VllmPrefixAndShards) {
  const Eagle3Config c = SmallConfig();
  const TensorMap tensors = RandomEagle3Tensors(c, 9);
  TensorMap first, second;
  for (const auto& [name, t] : tensors) {
    std::string stored = name;
    if (stored.rfind("midlayer.", 0) == 0) stored = "layers.0." + stored.substr(9);
    (first.size() < 7 ? first : second)[stored] = t;
  }
  const std::string dir = ScratchDir(TestName());
  WriteRawCheckpoint(dir, ConfigJson(c), first, "model-00001-of-00002.safetensors");
  WriteRawCheckpoint(dir, ConfigJson(c), second, "model-00002-of-00002.safetensors");
  const Eagle3Checkpoint ckpt = LoadEagle3Checkpoint(dir);
  ExpectTensorsEqual(ckpt.tensors, tensors);
}

TEST(Eagle3Checkpoint, IdentityVocabWithoutMap) {
  Eagle3Config c = SmallConfig();
  c.draft_vocab_size = c.vocab_size;
  TensorMap tensors = RandomEagle3Tensors(c, 10);
  EXPECT_TRUE(at::equal(tensors.at("d2t"), at::zeros({c.vocab_size}, at::kLong)));
  tensors.erase("d2t");
  tensors.erase("t2d");
  const std::string dir = ScratchDir(TestName());
  WriteEagle3Checkpoint(dir, c, tensors);
  const Eagle3Checkpoint ckpt = LoadEagle3Checkpoint(dir);
  EXPECT_TRUE(at::equal(ckpt.tensors.at("d2t"), at::zeros({c.vocab_size}, at::kLong)));
  EXPECT_TRUE(at::equal(ckpt.tensors.at("t2d"), at::ones({c.vocab_size}, at::kBool)));
}

// Writes `tensors` (after `edit`) with SmallConfig's config.json and returns the load error.
template <typename Edit>
std::string LoadErrorAfter(const std::string& dir_name, Edit edit) {
  const Eagle3Config c = SmallConfig();
  TensorMap tensors = RandomEagle3Tensors(c, 11);
  edit(tensors);
  const std::string dir = ScratchDir(dir_name);
  WriteRawCheckpoint(dir, ConfigJson(c), tensors);
  return ErrorOf([&] { LoadEagle3Checkpoint(dir); });
}

TEST(Eagle3Checkpoint, TensorErrors) {
  const std::string name = TestName();
  std::string msg = LoadErrorAfter(name, [](TensorMap& t) { t.erase(kEagle3UpProj); });
  EXPECT_THAT(msg, HasSubstr("missing tensor 'midlayer.mlp.up_proj.weight'"));
  EXPECT_THAT(msg, HasSubstr("[160, 64]"));
  EXPECT_THAT(msg, HasSubstr("model.safetensors"));

  msg = LoadErrorAfter(name, [](TensorMap& t) {
    t["midlayer.self_attn.qproj.weight"] = t.at(kEagle3QProj);
    t.erase(kEagle3QProj);
  });
  EXPECT_THAT(msg, HasSubstr("model.safetensors', tensor 'midlayer.self_attn.qproj.weight'"));
  EXPECT_THAT(msg, HasSubstr("did you mean 'midlayer.self_attn.q_proj.weight'?"));

  msg = LoadErrorAfter(name, [](TensorMap& t) { t[kEagle3Fc] = at::zeros({64, 143}); });
  EXPECT_THAT(msg, HasSubstr("tensor 'fc.weight'"));
  EXPECT_THAT(msg, HasSubstr("shape [64, 143], expected [64, 144]"));

  msg = LoadErrorAfter(
      name, [](TensorMap& t) { t["layers.0.self_attn.o_proj.weight"] = t.at(kEagle3OProj); });
  EXPECT_THAT(msg, HasSubstr("duplicates"));
  EXPECT_THAT(msg, HasSubstr("midlayer.self_attn.o_proj.weight"));

  msg = LoadErrorAfter(name, [](TensorMap& t) { t[kEagle3FinalNorm] = at::ones({64}, at::kLong); });
  EXPECT_THAT(msg, HasSubstr("tensor 'norm.weight'"));
  EXPECT_THAT(msg, HasSubstr("expected a floating-point dtype"));
}

TEST(Eagle3Checkpoint, VocabMapErrors) {
  const std::string name = TestName();
  std::string msg =
      LoadErrorAfter(name, [](TensorMap& t) { t[kEagle3D2t] = t[kEagle3D2t].to(at::kFloat); });
  EXPECT_THAT(msg, HasSubstr("tensor 'd2t'"));
  EXPECT_THAT(msg, HasSubstr("dtype Float, expected Long (safetensors I64)"));

  msg = LoadErrorAfter(name, [](TensorMap& t) { t[kEagle3T2d] = t[kEagle3T2d].to(at::kByte); });
  EXPECT_THAT(msg, HasSubstr("tensor 't2d'"));
  EXPECT_THAT(msg, HasSubstr("expected Bool (safetensors BOOL)"));

  msg = LoadErrorAfter(name, [](TensorMap& t) {
    t[kEagle3D2t] = t[kEagle3D2t].clone();
    t[kEagle3D2t][119] = 500;
  });
  EXPECT_THAT(msg, HasSubstr("tensor 'd2t'"));
  EXPECT_THAT(msg, HasSubstr("draft id 119 maps to target id"));
  EXPECT_THAT(msg, HasSubstr("outside the vocabulary [0, 300)"));

  msg = LoadErrorAfter(name, [](TensorMap& t) {
    t[kEagle3D2t] = t[kEagle3D2t].clone();
    const int64_t first_target = t[kEagle3D2t][0].item<int64_t>();
    t[kEagle3D2t][1] = first_target - 1;  // draft id 1 -> the target of draft id 0
  });
  EXPECT_THAT(msg, HasSubstr("both map to target id"));

  msg = LoadErrorAfter(name, [](TensorMap& t) {
    t[kEagle3T2d] = t[kEagle3T2d].clone();
    const at::Tensor unmarked = at::nonzero(t[kEagle3T2d].logical_not()).flatten();
    t[kEagle3T2d][unmarked[0].item<int64_t>()] = true;
  });
  EXPECT_THAT(msg, HasSubstr("tensor 't2d'"));
  EXPECT_THAT(msg, HasSubstr("marks 121 target ids, expected draft_vocab_size = 120"));

  msg = LoadErrorAfter(name, [](TensorMap& t) {
    at::Tensor t2d = t[kEagle3T2d].clone();
    const at::Tensor marked = at::nonzero(t2d).flatten();
    const at::Tensor unmarked = at::nonzero(t2d.logical_not()).flatten();
    t2d[marked[5].item<int64_t>()] = false;
    t2d[unmarked[0].item<int64_t>()] = true;
    t[kEagle3T2d] = t2d;
  });
  EXPECT_THAT(msg, HasSubstr("tensor 't2d'"));
  EXPECT_THAT(msg, HasSubstr("t2d inconsistent with d2t"));

  msg = LoadErrorAfter(name, [](TensorMap& t) {
    t.erase(kEagle3D2t);
    t.erase(kEagle3T2d);
  });
  EXPECT_THAT(msg, HasSubstr("missing tensor 'd2t'"));
  EXPECT_THAT(msg, HasSubstr("required when draft_vocab_size != vocab_size"));
}

TEST(Eagle3Checkpoint, DirectoryErrors) {
  testing_util::ExpectCheckpointDirectoryErrors(
      ScratchDir(TestName()), ConfigJson(SmallConfig()),
      [](const std::string& dir) { LoadEagle3Checkpoint(dir); },
      {"pytorch_model.bin", "never reads pickled", "methods/eagle3/README.md"});
}

TEST(Eagle3Checkpoint, WriterValidatesFirst) {
  const Eagle3Config c = SmallConfig();
  TensorMap tensors = RandomEagle3Tensors(c, 12);
  tensors[kEagle3LmHead] = at::zeros({121, 64});
  const std::string dir = ScratchDir(TestName()) + "/out";
  const std::string msg = ErrorOf([&] { WriteEagle3Checkpoint(dir, c, tensors); });
  EXPECT_THAT(msg, HasSubstr("tensor 'lm_head.weight'"));
  EXPECT_THAT(msg, HasSubstr("shape [121, 64], expected [120, 64]"));
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_THAT(ErrorOf([&] {
                WriteEagle3Checkpoint(dir, c, RandomEagle3Tensors(c, 12), nullptr,
                                      SafetensorsDtype::kI32);
              }),
              HasSubstr("expected F32, BF16 or F16"));
}

TEST(Eagle3Checkpoint, RandomTensorsAreDeterministic) {
  const Eagle3Config c = SmallConfig();
  const TensorMap a = RandomEagle3Tensors(c, 1), b = RandomEagle3Tensors(c, 1),
                  other = RandomEagle3Tensors(c, 2);
  ExpectTensorsEqual(a, b);
  EXPECT_FALSE(at::equal(a.at(kEagle3Fc), other.at(kEagle3Fc)));
  EXPECT_FALSE(at::equal(a.at(kEagle3D2t), other.at(kEagle3D2t)));
  EXPECT_TRUE(at::equal(a.at(kEagle3HiddenNorm), at::ones({64})));
  // normal(0, 0.02) over 64 * 144 values: the sample std is within 5% with overwhelming odds.
  EXPECT_NEAR(a.at(kEagle3Fc).std().item<double>(), 0.02, 0.001);
  ValidateEagle3Tensors(c, a, "random");  // a valid, sorted draft vocabulary
  const at::Tensor used = at::arange(120, at::kLong) + a.at(kEagle3D2t);
  EXPECT_TRUE(at::equal(std::get<0>(at::sort(used)), used));
}

TEST(Eagle3Checkpoint, BuildDraftVocabMap) {
  // Counts of ids 0..9. The 4 most frequent: id 7 (count 9), then ids 2, 5, 8 (count 5 each);
  // sorted ascending: {2, 5, 7, 8}.
  const std::vector<int64_t> counts = {1, 0, 5, 3, 0, 5, 2, 9, 5, 3};
  DraftVocabMap map = BuildDraftVocabMap(counts, 4);
  EXPECT_TRUE(at::equal(map.d2t, at::tensor(std::vector<int64_t>{2 - 0, 5 - 1, 7 - 2, 8 - 3})));
  std::vector<bool> expected_t2d(10, false);
  for (int64_t id : {2, 5, 7, 8}) expected_t2d[id] = true;
  for (int64_t v = 0; v < 10; ++v) EXPECT_EQ(map.t2d[v].item<bool>(), expected_t2d[v]) << v;
  // A tie at the cut: ids 9 and 3 both have count 3; the 5th slot goes to the smaller id 3.
  map = BuildDraftVocabMap(counts, 5);
  EXPECT_TRUE(at::equal(map.d2t, at::tensor(std::vector<int64_t>{2, 3 - 1, 5 - 2, 7 - 3, 8 - 4})));
  EXPECT_FALSE(map.t2d[9].item<bool>());
  EXPECT_EQ(map.t2d.sum().item<int64_t>(), 5);
  // Full vocabulary: identity.
  map = BuildDraftVocabMap(counts, 10);
  EXPECT_TRUE(at::equal(map.d2t, at::zeros({10}, at::kLong)));
  EXPECT_THAT(ErrorOf([&] { BuildDraftVocabMap(counts, 11); }), HasSubstr("draft_vocab_size 11"));
  EXPECT_THAT(ErrorOf([] { BuildDraftVocabMap({1, -1}, 1); }), HasSubstr("negative count"));
}

// ---- Forward against a plain-loop reference -------------------------------------------------

// Independent llama3 RoPE inverse frequencies (transformers' _compute_llama3_parameters).
std::vector<double> ReferenceInvFreq(const Eagle3Config& c) {
  std::vector<double> out;
  const RopeScaling& s = c.rope_scaling;
  for (int64_t i = 0; i < c.head_dim / 2; ++i) {
    double f = std::pow(c.rope_theta, -2.0 * i / c.head_dim);
    if (s.type == RopeScalingType::kLlama3) {
      const double wavelen = 2 * M_PI / f;
      const double low_wavelen = s.original_max_position_embeddings / s.low_freq_factor;
      const double high_wavelen = s.original_max_position_embeddings / s.high_freq_factor;
      if (wavelen > low_wavelen) {
        f = f / s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    out.push_back(f);
  }
  return out;
}

using Vec = std::vector<double>;

// y = W x with W [out, in] float32 (the original, unfused tensor).
Vec Linear(const at::Tensor& w, const Vec& x) {
  const int64_t out = w.size(0), in = w.size(1);
  EXPECT_EQ(in, static_cast<int64_t>(x.size()));
  const float* p = w.data_ptr<float>();
  Vec y(out, 0.0);
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t i = 0; i < in; ++i) y[o] += static_cast<double>(p[o * in + i]) * x[i];
  }
  return y;
}

Vec RmsNorm(const Vec& x, const at::Tensor& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * inv * w.data_ptr<float>()[i];
  return y;
}

// HF apply_rotary_pos_emb on one head vector: x * cos + rotate_half(x) * sin.
Vec RotateHalfRope(const Vec& x, int64_t pos, const std::vector<double>& inv_freq) {
  const size_t half = x.size() / 2;
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double angle = pos * inv_freq[i % half];
    const double rotated = i < half ? -x[i + half] : x[i - half];
    y[i] = x[i] * std::cos(angle) + rotated * std::sin(angle);
  }
  return y;
}

struct RefRow {
  Vec feature;  // width 3 * Ht or H
  int32_t token;
  int64_t position;
};

// The whole set of rows at once: row i attends to row j where allowed[i][j].
void ReferenceForward(const Eagle3Config& c, const TensorMap& t, const at::Tensor& embedding,
                      const std::vector<RefRow>& rows,
                      const std::vector<std::vector<bool>>& allowed, std::vector<Vec>* hidden,
                      std::vector<Vec>* logits) {
  const int64_t h = c.hidden_size, hd = c.head_dim, n = static_cast<int64_t>(rows.size());
  const double eps = c.rms_norm_eps;
  const auto inv_freq = ReferenceInvFreq(c);
  const at::Tensor emb = embedding.to(at::kFloat).contiguous();
  std::vector<Vec> q(n), k(n), v(n), residual(n);
  for (int64_t i = 0; i < n; ++i) {
    const RefRow& r = rows[i];
    const Vec g = static_cast<int64_t>(r.feature.size()) == h
                      ? r.feature
                      : Linear(t.at("fc.weight"), r.feature);
    Vec e(h);
    for (int64_t d = 0; d < h; ++d) e[d] = emb.data_ptr<float>()[r.token * h + d];
    const Vec ne = RmsNorm(e, t.at("midlayer.input_layernorm.weight"), eps);
    const Vec ng = RmsNorm(g, t.at("midlayer.hidden_norm.weight"), eps);
    Vec x = ne;
    x.insert(x.end(), ng.begin(), ng.end());
    residual[i] = c.norm_before_residual ? ng : g;
    const Vec qi = Linear(t.at("midlayer.self_attn.q_proj.weight"), x);
    const Vec ki = Linear(t.at("midlayer.self_attn.k_proj.weight"), x);
    v[i] = Linear(t.at("midlayer.self_attn.v_proj.weight"), x);
    for (int64_t head = 0; head < c.n_heads; ++head) {
      const Vec rq = RotateHalfRope(Vec(qi.begin() + head * hd, qi.begin() + (head + 1) * hd),
                                    r.position, inv_freq);
      q[i].insert(q[i].end(), rq.begin(), rq.end());
    }
    for (int64_t head = 0; head < c.n_kv_heads; ++head) {
      const Vec rk = RotateHalfRope(Vec(ki.begin() + head * hd, ki.begin() + (head + 1) * hd),
                                    r.position, inv_freq);
      k[i].insert(k[i].end(), rk.begin(), rk.end());
    }
  }
  hidden->assign(n, Vec());
  logits->assign(n, Vec());
  const int64_t group = c.n_heads / c.n_kv_heads;
  for (int64_t i = 0; i < n; ++i) {
    Vec attn(c.q_dim(), 0.0);
    for (int64_t head = 0; head < c.n_heads; ++head) {
      const int64_t kv = head / group;
      std::vector<double> w(n, 0.0);
      double max_s = -1e300, denom = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (!allowed[i][j]) continue;
        double s = 0;
        for (int64_t d = 0; d < hd; ++d) s += q[i][head * hd + d] * k[j][kv * hd + d];
        w[j] = s / std::sqrt(static_cast<double>(hd));
        max_s = std::max(max_s, w[j]);
      }
      for (int64_t j = 0; j < n; ++j) {
        if (!allowed[i][j]) continue;
        w[j] = std::exp(w[j] - max_s);
        denom += w[j];
      }
      for (int64_t j = 0; j < n; ++j) {
        if (!allowed[i][j]) continue;
        for (int64_t d = 0; d < hd; ++d) attn[head * hd + d] += w[j] / denom * v[j][kv * hd + d];
      }
    }
    Vec hs = residual[i];
    const Vec o = Linear(t.at("midlayer.self_attn.o_proj.weight"), attn);
    for (int64_t d = 0; d < h; ++d) hs[d] += o[d];
    const Vec post = RmsNorm(hs, t.at("midlayer.post_attention_layernorm.weight"), eps);
    const Vec gate = Linear(t.at("midlayer.mlp.gate_proj.weight"), post);
    const Vec up = Linear(t.at("midlayer.mlp.up_proj.weight"), post);
    Vec act(gate.size());
    for (size_t f = 0; f < gate.size(); ++f) act[f] = gate[f] / (1 + std::exp(-gate[f])) * up[f];
    const Vec down = Linear(t.at("midlayer.mlp.down_proj.weight"), act);
    for (int64_t d = 0; d < h; ++d) hs[d] += down[d];
    (*hidden)[i] = hs;
    (*logits)[i] = Linear(t.at("lm_head.weight"), RmsNorm(hs, t.at("norm.weight"), eps));
  }
}

// |got - want| <= 1e-5 * (|want| + max |want|) for every element of `n` rows.
void ExpectRowsNear(const float* got, int64_t width, const std::vector<Vec>& want,
                    int64_t first_row, int64_t n, const std::string& what) {
  double scale = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (double x : want[first_row + i]) scale = std::max(scale, std::abs(x));
  }
  ASSERT_GT(scale, 0.0);
  int failures = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t d = 0; d < width; ++d) {
      const double w = want[first_row + i][d];
      const double g = got[i * width + d];
      if (std::abs(g - w) > 1e-5 * (std::abs(w) + scale) && failures++ < 5) {
        ADD_FAILURE() << what << " row " << first_row + i << " col " << d << ": got " << g
                      << ", want " << w << " (scale " << scale << ")";
      }
    }
  }
}

// Every forward test runs on the row loops and on the ATen path forced on the CPU (float32), both
// against the same plain-loop reference.
class Eagle3HeadForward : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    placement_.aten = GetParam();
    config_ = SmallConfig();
    tensors_ = RandomEagle3Tensors(config_, 21);
    // Larger-than-init weights for norms and o/down projections make every term matter.
    std::mt19937_64 rng(5);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (const char* name :
         {kEagle3HiddenNorm, kEagle3InputNorm, kEagle3PostNorm, kEagle3FinalNorm}) {
      float* p = tensors_[name].data_ptr<float>();
      for (int64_t i = 0; i < tensors_[name].numel(); ++i) p[i] = 1.f + 0.3f * normal(rng);
    }
    for (const char* name : {kEagle3QProj, kEagle3KProj})
      tensors_[name].mul_(8.f);  // sharper attention
    embedding_ = at::empty({config_.vocab_size, config_.hidden_size});
    float* e = embedding_.data_ptr<float>();
    for (int64_t i = 0; i < embedding_.numel(); ++i) e[i] = normal(rng);
    rng_.seed(99);
  }

  RefRow MakeRow(int64_t width, int64_t position) {
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(config_.vocab_size) - 1);
    RefRow r;
    for (int64_t d = 0; d < width; ++d) r.feature.push_back(static_cast<float>(normal(rng_)));
    r.token = token(rng_);
    r.position = position;
    return r;
  }

  // Runs rows [begin, end) of `rows` through `head` in one call.
  void Run(Eagle3Head& head, const std::vector<RefRow>& rows, int64_t begin, int64_t end,
           const std::vector<uint8_t>* mask, bool pass_positions, Eagle3HeadOutput& out) {
    const int64_t width = static_cast<int64_t>(rows[begin].feature.size());
    std::vector<float> features;
    std::vector<int32_t> tokens;
    std::vector<int64_t> positions;
    for (int64_t i = begin; i < end; ++i) {
      ASSERT_EQ(static_cast<int64_t>(rows[i].feature.size()), width);
      for (double f : rows[i].feature) features.push_back(static_cast<float>(f));
      tokens.push_back(rows[i].token);
      positions.push_back(rows[i].position);
    }
    head.Forward(features.data(), width, tokens.data(), pass_positions ? positions.data() : nullptr,
                 end - begin, mask ? mask->data() : nullptr, out);
  }

  static std::vector<std::vector<bool>> Causal(int64_t n) {
    std::vector<std::vector<bool>> a(n, std::vector<bool>(n, false));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j <= i; ++j) a[i][j] = true;
    }
    return a;
  }

  Eagle3Config config_;
  TensorMap tensors_;
  at::Tensor embedding_;
  std::mt19937_64 rng_;
  HeadPlacement placement_;
};

INSTANTIATE_TEST_SUITE_P(Paths, Eagle3HeadForward, ::testing::Bool(), testing_util::PathName);

TEST_P(Eagle3HeadForward, FullCausalSequenceAndIncremental) {
  const int64_t n = 9, fc_in = config_.fc_in_dim(), h = config_.hidden_size,
                vd = config_.draft_vocab_size;
  std::vector<RefRow> rows;
  for (int64_t i = 0; i < n; ++i) rows.push_back(MakeRow(fc_in, i));
  std::vector<Vec> ref_hidden, ref_logits;
  ReferenceForward(config_, tensors_, embedding_, rows, Causal(n), &ref_hidden, &ref_logits);

  Eagle3Head head(config_, tensors_, embedding_, placement_);
  Eagle3HeadOutput out;
  head.ResetCache(32);
  Run(head, rows, 0, n, nullptr, /*pass_positions=*/false, out);
  EXPECT_EQ(head.cache_length(), n);
  ASSERT_EQ(out.n, n);
  EXPECT_EQ(out.hidden.sizes(), (std::vector<int64_t>{n, h}));
  EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{n, vd}));
  ExpectRowsNear(out.hidden.data_ptr<float>(), h, ref_hidden, 0, n, "full hidden");
  ExpectRowsNear(out.logits.data_ptr<float>(), vd, ref_logits, 0, n, "full logits");

  // Incremental: 4 rows, then 1, then 4, with explicit positions == default ones.
  head.ResetCache(32);
  int64_t done = 0;
  for (int64_t chunk : {4, 1, 4}) {
    Run(head, rows, done, done + chunk, nullptr, /*pass_positions=*/true, out);
    ExpectRowsNear(out.hidden_row(0), h, ref_hidden, done, chunk, "incremental hidden");
    ExpectRowsNear(out.logits_row(0), vd, ref_logits, done, chunk, "incremental logits");
    done += chunk;
  }
  // Truncate + re-run of the last rows gives the same result again.
  head.TruncateCache(6);
  Run(head, rows, 6, n, nullptr, false, out);
  ExpectRowsNear(out.logits_row(0), vd, ref_logits, 6, 3, "re-run logits");
  EXPECT_EQ(head.cache_length(), n);
}

TEST_P(Eagle3HeadForward, TreeMaskPositionsAndOwnHiddenFeatures) {
  // Context: 5 rows from target features. Tree: depth 1 = 3 nodes at position 5 whose features
  // are the head's own hidden (width H, fc skipped); depth 2 = 2 nodes at position 6 (children
  // of depth-1 nodes 0 and 2).
  const int64_t fc_in = config_.fc_in_dim(), h = config_.hidden_size, vd = config_.draft_vocab_size;
  const int64_t n_ctx = 5;
  std::vector<RefRow> rows;
  for (int64_t i = 0; i < n_ctx; ++i) rows.push_back(MakeRow(fc_in, i));
  for (int64_t i = 0; i < 3; ++i) rows.push_back(MakeRow(h, 5));
  for (int64_t i = 0; i < 2; ++i) rows.push_back(MakeRow(h, 6));
  const int64_t n = static_cast<int64_t>(rows.size());
  const std::vector<int64_t> parent = {-1, -1, -1, -1, -1, 4, 4, 4, 5, 7};
  std::vector<std::vector<bool>> allowed(n, std::vector<bool>(n, false));
  for (int64_t i = 0; i < n; ++i) {
    if (i < n_ctx) {
      for (int64_t j = 0; j <= i; ++j) allowed[i][j] = true;
      continue;
    }
    for (int64_t j = 0; j < n_ctx; ++j) allowed[i][j] = true;
    for (int64_t a = i; a >= n_ctx; a = parent[a]) allowed[i][a] = true;
  }
  std::vector<Vec> ref_hidden, ref_logits;
  ReferenceForward(config_, tensors_, embedding_, rows, allowed, &ref_hidden, &ref_logits);

  Eagle3Head head(config_, tensors_, embedding_, placement_);
  Eagle3HeadOutput out;
  head.ResetCache(16);
  Run(head, rows, 0, n_ctx, nullptr, false, out);
  ExpectRowsNear(out.logits_row(0), vd, ref_logits, 0, n_ctx, "context logits");
  // Depth 1 and depth 2 calls with masks over (cache + new rows).
  int64_t begin = n_ctx;
  for (int64_t count : {3, 2}) {
    const int64_t past = head.cache_length();
    std::vector<uint8_t> mask(count * (past + count));
    for (int64_t i = 0; i < count; ++i) {
      for (int64_t j = 0; j < past + count; ++j)
        mask[i * (past + count) + j] = allowed[begin + i][j];
    }
    Run(head, rows, begin, begin + count, &mask, /*pass_positions=*/true, out);
    ExpectRowsNear(out.hidden_row(0), h, ref_hidden, begin, count, "tree hidden");
    ExpectRowsNear(out.logits_row(0), vd, ref_logits, begin, count, "tree logits");
    begin += count;
  }
  EXPECT_EQ(head.cache_length(), n);

  // The whole set in one call with the full mask gives the same rows.
  head.ResetCache(16);
  std::vector<uint8_t> mask_ctx(n_ctx * n_ctx);
  for (int64_t i = 0; i < n_ctx; ++i) {
    for (int64_t j = 0; j < n_ctx; ++j) mask_ctx[i * n_ctx + j] = allowed[i][j];
  }
  Run(head, rows, 0, n_ctx, &mask_ctx, true, out);
  ExpectRowsNear(out.hidden_row(0), h, ref_hidden, 0, n_ctx, "masked context hidden");
}

TEST_P(Eagle3HeadForward, FeaturesMayAliasTheOutput) {
  // Depth-k features are the previous call's output hidden: pass out's own buffer.
  const int64_t h = config_.hidden_size, vd = config_.draft_vocab_size;
  std::vector<RefRow> rows;
  for (int64_t i = 0; i < 3; ++i) rows.push_back(MakeRow(config_.fc_in_dim(), i));
  Eagle3Head head(config_, tensors_, embedding_, placement_);
  Eagle3HeadOutput out;
  head.ResetCache(8);
  Run(head, rows, 0, 3, nullptr, false, out);
  for (int64_t i = 0; i < 3; ++i) {
    RefRow next;
    next.feature.assign(out.hidden_row(i), out.hidden_row(i) + h);
    next.token = rows[i].token ^ 1;
    next.position = 3 + i;
    rows.push_back(next);
  }
  const std::vector<int32_t> tokens = {rows[3].token, rows[4].token, rows[5].token};
  head.Forward(out.hidden_row(0), h, tokens.data(), nullptr, 3, nullptr, out);
  std::vector<Vec> ref_hidden, ref_logits;
  ReferenceForward(config_, tensors_, embedding_, rows, Causal(6), &ref_hidden, &ref_logits);
  ExpectRowsNear(out.hidden_row(0), h, ref_hidden, 3, 3, "aliased hidden");
  ExpectRowsNear(out.logits_row(0), vd, ref_logits, 3, 3, "aliased logits");
}

TEST_P(Eagle3HeadForward, NormBeforeResidualOwnEmbeddingAndBf16TargetEmbedding) {
  const int64_t h = config_.hidden_size, vd = config_.draft_vocab_size;
  std::vector<RefRow> rows;
  for (int64_t i = 0; i < 6; ++i) rows.push_back(MakeRow(config_.fc_in_dim(), i + 3));
  {
    Eagle3Config c = config_;
    c.norm_before_residual = true;
    TensorMap t = tensors_;
    t[kEagle3Embed] = embedding_.mul(0.5f);
    std::vector<Vec> ref_hidden, ref_logits;
    ReferenceForward(c, t, t[kEagle3Embed], rows, Causal(6), &ref_hidden, &ref_logits);
    Eagle3Head head(c, t, at::Tensor(),
                    placement_);  // the head's own embedding, no target embedding
    EXPECT_TRUE(head.owns_embedding());
    EXPECT_EQ(head.parameter_count(), c.ParameterCount() + c.vocab_size * c.hidden_size);
    Eagle3HeadOutput out;
    head.ResetCache(8);
    Run(head, rows, 0, 6, nullptr, true, out);
    ExpectRowsNear(out.hidden_row(0), h, ref_hidden, 0, 6, "norm_before_residual hidden");
    ExpectRowsNear(out.logits_row(0), vd, ref_logits, 0, 6, "norm_before_residual logits");
  }
  {
    const at::Tensor bf16 = embedding_.to(at::kBFloat16);
    std::vector<Vec> ref_hidden, ref_logits;
    ReferenceForward(config_, tensors_, bf16, rows, Causal(6), &ref_hidden, &ref_logits);
    Eagle3Head head(config_, tensors_, bf16, placement_);
    EXPECT_FALSE(head.owns_embedding());
    EXPECT_EQ(head.parameter_count(), config_.ParameterCount());
    Eagle3HeadOutput out;
    head.ResetCache(8);
    Run(head, rows, 0, 6, nullptr, true, out);
    ExpectRowsNear(out.logits_row(0), vd, ref_logits, 0, 6, "bf16 embedding logits");
  }
}

// A context of 5 target-feature rows, then 3 tree rows (own-hidden features, explicit positions)
// whose middle row may attend to nothing; returns [hidden | logits] of every row as float32 CPU.
at::Tensor RunContextAndTree(const Eagle3Config& config, const TensorMap& tensors,
                             const at::Tensor& embedding, const HeadPlacement& placement) {
  Eagle3Head head(config, tensors, embedding, placement);
  Eagle3HeadOutput out;
  head.ResetCache(16);
  at::manual_seed(3);
  const at::Tensor context = at::randn({5, config.fc_in_dim()});
  const std::vector<int32_t> ctx_tokens = {1, 7, 40, 99, 250};
  head.Forward(context, ctx_tokens.data(), nullptr, 5, nullptr, out);
  std::vector<at::Tensor> rows = {
      at::cat({out.hidden.to(at::kCPU, at::kFloat), out.logits.cpu()}, 1)};
  const at::Tensor tree = out.hidden.narrow(0, 2, 3);  // [3, H] on the head's device
  const std::vector<int32_t> tokens = {5, 6, 7};
  const std::vector<int64_t> positions = {5, 5, 6};
  std::vector<uint8_t> mask(3 * 8, 0);
  for (int64_t j = 0; j < 5; ++j) mask[0 * 8 + j] = mask[2 * 8 + j] = 1;
  mask[0 * 8 + 5] = 1;  // row 1 attends to nothing
  mask[2 * 8 + 5] = mask[2 * 8 + 7] = 1;
  head.Forward(tree, tokens.data(), positions.data(), 3, mask.data(), out);
  rows.push_back(at::cat({out.hidden.to(at::kCPU, at::kFloat), out.logits.cpu()}, 1));
  return at::cat(rows, 0);
}

TEST(Eagle3HeadAten, MatchesTheRowsWithAnEmptyMaskRowAndInBfloat16) {
  const Eagle3Config config = SmallConfig();
  const TensorMap tensors = RandomEagle3Tensors(config, 21);
  const at::Tensor embedding = at::randn({config.vocab_size, config.hidden_size});
  const at::Tensor rows = RunContextAndTree(config, tensors, embedding, HeadPlacement{});
  HeadPlacement aten;
  aten.aten = true;
  const at::Tensor f32 = RunContextAndTree(config, tensors, embedding, aten);
  const double scale = rows.abs().max().item<double>();
  EXPECT_LT((f32 - rows).abs().max().item<double>(), 1e-5 * scale);
  aten.dtype = at::kBFloat16;
  const at::Tensor bf16 = RunContextAndTree(config, tensors, embedding, aten);
  EXPECT_LT(testing_util::RelativeL2(bf16, rows),
            3e-2);  // bf16 rounding of weights and activations
}

// Three sequences' heads over one Eagle3Weights on the ATen path, with caches of 4, 6 and 9
// context rows: a batch of context rows (target features, causal) and then a batch of tree rows
// (own hidden, positions, masks) each give every sequence the rows of its own forward (within
// rounding) and grow its cache alone, in one forward each (one GEMM per projection).
TEST(Eagle3HeadAten, ForwardBatchGivesEverySequenceItsOwnForward) {
  const Eagle3Config config = SmallConfig();
  const TensorMap tensors = RandomEagle3Tensors(config, 21);
  HeadPlacement aten;
  aten.aten = true;
  const auto weights = std::make_shared<const Eagle3Weights>(
      config, tensors, at::randn({config.vocab_size, config.hidden_size}), aten);
  const std::vector<int64_t> contexts = {4, 6, 9};
  std::vector<std::unique_ptr<Eagle3Head>> together, alone;
  std::vector<Eagle3HeadOutput> out_together(3), out_alone(3);
  std::vector<at::Tensor> features;
  std::vector<std::vector<int32_t>> tokens;
  at::manual_seed(8);
  for (int64_t n : contexts) {
    for (auto* heads : {&together, &alone}) {
      heads->push_back(std::make_unique<Eagle3Head>(weights));
      heads->back()->ResetCache(32);
    }
    features.push_back(at::randn({n, config.fc_in_dim()}));
    tokens.emplace_back();
    for (int64_t i = 0; i < n; ++i) tokens.back().push_back(static_cast<int32_t>(17 * i + n));
  }
  auto expect_near = [](const Eagle3HeadOutput& a, const Eagle3HeadOutput& b, size_t i) {
    EXPECT_LT(testing_util::RelativeL2(at::cat({a.hidden, a.logits}, 1),
                                       at::cat({b.hidden, b.logits}, 1)),
              1e-6)
        << "sequence " << i;
  };
  // Context rows.
  std::vector<Eagle3DeviceRows> rows;
  for (size_t i = 0; i < 3; ++i) {
    rows.push_back(together[i]->StageRows(features[i], tokens[i].data(), nullptr, contexts[i],
                                          nullptr, out_together[i]));
    alone[i]->Forward(features[i], tokens[i].data(), nullptr, contexts[i], nullptr, out_alone[i]);
  }
  int64_t forwards = Eagle3HeadForwards();
  OpTrace trace;
  Eagle3Head::ForwardBatch(rows);
  trace.Stop();
  EXPECT_EQ(Eagle3HeadForwards() - forwards, 1);
  EXPECT_EQ(CountOps(trace.ops()).by_name.at("aten::mm"), 6);  // fc, qkv, o, gate-up, down, lm
  for (size_t i = 0; i < 3; ++i) {
    expect_near(out_together[i], out_alone[i], i);
    EXPECT_EQ(together[i]->cache_length(), contexts[i]);
  }
  // Two tree rows each: the last context row's hidden, both at the next position, each seeing
  // the context and itself.
  rows.clear();
  for (size_t i = 0; i < 3; ++i) {
    const int64_t n = contexts[i];
    const at::Tensor allowed = at::cat({at::ones({2, n}, at::kBool), at::eye(2, at::kBool)}, 1);
    const at::Tensor pos = at::full({2}, n, at::kLong), tok = at::tensor({5, 9}, at::kLong);
    const at::Tensor own = out_alone[i].hidden.narrow(0, n - 1, 1).expand({2, -1}).contiguous();
    rows.push_back(together[i]->DeviceRows(own, tok, pos, allowed, n + 1, out_together[i]));
    alone[i]->ForwardOnDevice(own, tok, pos, allowed, n + 1, out_alone[i]);
  }
  forwards = Eagle3HeadForwards();
  Eagle3Head::ForwardBatch(rows);
  EXPECT_EQ(Eagle3HeadForwards() - forwards, 1);
  for (size_t i = 0; i < 3; ++i) {
    expect_near(out_together[i], out_alone[i], i);
    EXPECT_EQ(together[i]->cache_length(), contexts[i] + 2);
  }
}

TEST(Eagle3HeadAten, ForwardBatchRefusesMixedBatchesAndTheRowLoops) {
  const Eagle3Config config = SmallConfig();
  const TensorMap tensors = RandomEagle3Tensors(config, 21);
  const at::Tensor embedding = at::randn({config.vocab_size, config.hidden_size});
  HeadPlacement aten;
  aten.aten = true;
  Eagle3Head a(config, tensors, embedding, aten), b(config, tensors, embedding, aten);
  Eagle3Head c(a.weights()), rows_head(config, tensors, embedding);
  for (Eagle3Head* h : {&a, &b, &c, &rows_head}) h->ResetCache(8);
  Eagle3HeadOutput out;
  const std::vector<int32_t> tok = {3, 4};
  const at::Tensor wide = at::randn({2, config.fc_in_dim()});
  const at::Tensor narrow = at::randn({2, config.hidden_size});
  auto stage = [&](Eagle3Head& h, const at::Tensor& f) {
    return h.StageRows(f, tok.data(), nullptr, 2, nullptr, out);
  };
  EXPECT_THAT(ErrorOf([&] { Eagle3Head::ForwardBatch({}); }), HasSubstr("no rows"));
  EXPECT_THAT(ErrorOf([&] {
                Eagle3Head::ForwardBatch({stage(a, wide), stage(b, wide)});
              }),
              HasSubstr("another head's weights"));
  EXPECT_THAT(ErrorOf([&] {
                Eagle3Head::ForwardBatch({stage(a, wide), stage(c, narrow)});
              }),
              HasSubstr("another feature width"));
  EXPECT_THAT(ErrorOf([&] {
                Eagle3Head::ForwardBatch({stage(a, wide), stage(a, wide)});
              }),
              HasSubstr("sequences 0 and 1 have the same head"));
  EXPECT_THAT(ErrorOf([&] { stage(rows_head, wide); }), HasSubstr("runs the row loops"));
  EXPECT_NO_THROW(Eagle3Head::ForwardBatch({stage(a, wide), stage(c, wide)}));
}

// The device drafters' top-k download (methods/common/head_aten.h), run here on CPU tensors: the
// k best log-softmax entries per row, highest first, ids through the map when given.
TEST(Eagle3HeadAten, DownloadTopKLogProbsMatchesASortedLogSoftmax) {
  at::manual_seed(7);
  const at::Tensor logits = at::randn({3, 50});
  const at::Tensor map = at::arange(50, at::kLong).mul(3).add(1);
  const at::Tensor lp = at::log_softmax(logits, -1);
  const auto [want, order] = lp.sort(-1, /*descending=*/true);
  for (bool mapped : {false, true}) {
    std::vector<int32_t> ids(12);
    std::vector<float> logp(12);
    DownloadTopKLogProbs(logits, 4, mapped ? map : at::Tensor(), ids.data(), logp.data());
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t j = 0; j < 4; ++j) {
        const int64_t col = order[i][j].item<int64_t>();
        EXPECT_EQ(ids[i * 4 + j], mapped ? 3 * col + 1 : col) << i << "," << j;
        EXPECT_NEAR(logp[i * 4 + j], want[i][j].item<float>(), 1e-5) << i << "," << j;
      }
    }
  }
}

TEST(Eagle3HeadAtenCuda, MatchesTheRowsOnTheGpu) {
  SPECBED_SKIP_WITHOUT_CUDA();
  const Eagle3Config config = SmallConfig();
  const TensorMap tensors = RandomEagle3Tensors(config, 21);
  const at::Tensor embedding = at::randn({config.vocab_size, config.hidden_size});
  const at::Tensor rows = RunContextAndTree(config, tensors, embedding, HeadPlacement{});
  testing_util::ExpectGpuMatchesRows(rows, [&](const HeadPlacement& gpu) {
    return RunContextAndTree(config, tensors, embedding.to(gpu.device, gpu.dtype), gpu);
  });
}

TEST_P(Eagle3HeadForward, VocabMapAccessorsAndErrors) {
  Eagle3Head head(config_, tensors_, embedding_, placement_);
  const int64_t* d2t = tensors_.at(kEagle3D2t).data_ptr<int64_t>();
  const bool* t2d = tensors_.at(kEagle3T2d).data_ptr<bool>();
  for (int32_t d = 0; d < config_.draft_vocab_size; ++d) {
    EXPECT_EQ(head.DraftToTarget(d), d + d2t[d]);
    EXPECT_EQ(head.TargetToDraft(head.DraftToTarget(d)), d);
  }
  for (int32_t t = 0; t < config_.vocab_size; ++t) {
    EXPECT_EQ(head.InDraftVocab(t), t2d[t]);
    if (!t2d[t]) {
      EXPECT_EQ(head.TargetToDraft(t), -1);
    }
  }
  EXPECT_EQ(head.parameter_count(), config_.ParameterCount());

  EXPECT_THAT(ErrorOf([&] {
                Eagle3Head(config_, tensors_, at::zeros({300, 63}));
              }),
              HasSubstr("expected [vocab_size, hidden_size] = [300, 64]"));
  EXPECT_THAT(ErrorOf([&] { Eagle3Head(config_, tensors_, at::Tensor()); }),
              HasSubstr("target's token embedding"));
  TensorMap bad = tensors_;
  bad.erase(kEagle3OProj);
  EXPECT_THAT(ErrorOf([&] { Eagle3Head(config_, bad, embedding_); }),
              HasSubstr("missing tensor 'midlayer.self_attn.o_proj.weight'"));

  Eagle3HeadOutput out;
  head.ResetCache(2);
  std::vector<float> features(3 * config_.fc_in_dim(), 0.f);
  std::vector<int32_t> tokens = {1, 2, 3};
  EXPECT_THAT(
      ErrorOf([&] { head.Forward(features.data(), 50, tokens.data(), nullptr, 1, nullptr, out); }),
      HasSubstr("feature width 50, expected 144"));
  EXPECT_THAT(ErrorOf([&] {
                head.Forward(features.data(), config_.fc_in_dim(), tokens.data(), nullptr, 3,
                             nullptr, out);
              }),
              HasSubstr("exceed the cache capacity 2"));
  tokens[0] = 300;
  EXPECT_THAT(ErrorOf([&] {
                head.Forward(features.data(), config_.fc_in_dim(), tokens.data(), nullptr, 1,
                             nullptr, out);
              }),
              HasSubstr("token id 300"));
  EXPECT_EQ(head.cache_length(), 0);
  EXPECT_THAT(ErrorOf([&] { head.TruncateCache(1); }), HasSubstr("outside [0, cache_length = 0]"));
}

// The SafeAILab EAGLE-3 training template's config says "architectures": ["LlamaForCausalLM"]
// (one Llama decoder layer plus the EAGLE-3 fields); a checkpoint written with it loads.
TEST(Eagle3Checkpoint, SafeAILabTemplateArchitectureLoads) {
  const Eagle3Config c = SmallConfig();
  const TensorMap tensors = RandomEagle3Tensors(c, 5);
  const std::string dir = ScratchDir(TestName());
  WriteEagle3Checkpoint(dir, c, tensors, nullptr);
  json cj = json::parse(ReadFileToString(dir + "/config.json"));
  cj["architectures"] = {"LlamaForCausalLM"};
  testing_util::WriteTextFile(dir + "/config.json", cj.dump(2));
  const Eagle3Checkpoint ckpt = LoadEagle3Checkpoint(dir);
  ExpectSameConfig(ckpt.config, c);
  ExpectTensorsEqual(ckpt.tensors, tensors);
  // Still one decoder layer only: a plain two-layer Llama config is not an EAGLE-3 head.
  cj["num_hidden_layers"] = 2;
  testing_util::WriteTextFile(dir + "/config.json", cj.dump(2));
  EXPECT_NE(ErrorOf([&] { LoadEagle3Checkpoint(dir); }).find("num_hidden_layers is 2, expected 1"),
            std::string::npos);
}

}  // namespace
}  // namespace specbed
