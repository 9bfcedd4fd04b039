// Tests for models/checkpoint/hf_checkpoint.{h,cpp} and models/llama_weights.{h,cpp}: checkpoint
// round trips (Llama-3 / Qwen2 / Qwen3, single-file and sharded, fp32 / bf16 / fp16 storage),
// the fused weight layout, random tensors, and every missing/wrong-shape/extra-tensor and
// malformed-config/index error.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "base/mapped_file.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/checkpoint/safetensors.h"
#include "models/llama_weights.h"
#include "tests/common/test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using nlohmann::json;
using testing::ExpectError;
using testing_util::ScratchDir;
using testing_util::SmallLlama3Config;
using testing_util::SmallMistralConfig;
using testing_util::SmallQwen2Config;
using testing_util::SmallQwen3Config;
using testing_util::TestName;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  ASSERT_TRUE(out.good());
}

LlamaConfig ConfigByName(const std::string& name) {
  if (name == "llama3") return SmallLlama3Config();
  if (name == "qwen2") return SmallQwen2Config();
  if (name == "mistral") return SmallMistralConfig();
  return SmallQwen3Config();
}

// ---- Round trips ----------------------------------------------------------------------------

// (family, sharded, store dtype)
using RoundTripParam = std::tuple<std::string, bool, at::ScalarType>;
class HfRoundTrip : public ::testing::TestWithParam<RoundTripParam> {};

TEST_P(HfRoundTrip, TensorsAndConfigComeBackExactly) {
  const auto& [family, sharded, store] = GetParam();
  const LlamaConfig config = ConfigByName(family);
  const auto tensors = RandomHfTensors(config, 1234);
  const std::string dir = ScratchDir(TestName());
  WriteHfCheckpoint(dir, config, tensors, store, sharded ? 16384 : 0);

  // Layout on disk.
  EXPECT_EQ(PathExists(dir + "/model.safetensors"), !sharded);
  EXPECT_EQ(PathExists(dir + "/model.safetensors.index.json"), sharded);
  if (sharded) {
    const json index = json::parse(ReadFileToString(dir + "/model.safetensors.index.json"));
    std::set<std::string> shard_names;
    for (const auto& [name, shard] : index["weight_map"].items()) {
      shard_names.insert(shard.get<std::string>());
    }
    EXPECT_GT(shard_names.size(), 1u);
    char last[64];
    std::snprintf(last, sizeof(last), "model-%05zu-of-%05zu.safetensors", shard_names.size(),
                  shard_names.size());
    EXPECT_EQ(*shard_names.rbegin(), last);
    EXPECT_EQ(index["weight_map"].size(), tensors.size());
    int64_t total = 0;
    for (const auto& [name, t] : tensors) total += t.numel() * at::elementSize(store);
    EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), total);
  }

  // Reading back: stored values are the written tensors rounded to `store`.
  for (at::ScalarType read : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(read));
    const HfModel model = ReadHfCheckpoint(dir, read);
    LlamaConfig expected_config = config;
    expected_config.torch_dtype = store == at::kFloat      ? "float32"
                                  : store == at::kBFloat16 ? "bfloat16"
                                                           : "float16";
    EXPECT_EQ(model.config.ToHfJson(), expected_config.ToHfJson());
    ASSERT_EQ(model.tensors.size(), tensors.size());
    for (const auto& [name, t] : tensors) {
      ASSERT_TRUE(model.tensors.count(name)) << name;
      const at::Tensor& got = model.tensors.at(name);
      EXPECT_EQ(got.scalar_type(), read) << name;
      at::Tensor want = t.to(store);
      if (store == at::kHalf) want = want.to(at::kFloat);
      want = want.to(read);
      EXPECT_TRUE(at::equal(got, want)) << name;
    }
  }
  // And the engine weights load.
  const LoadedModel loaded = LoadHfCheckpoint(dir, at::kBFloat16);
  EXPECT_EQ(loaded.weights.tok_embeddings.scalar_type(), at::kBFloat16);
  EXPECT_EQ(static_cast<int64_t>(loaded.weights.layers.size()), config.n_layers);
  EXPECT_EQ(loaded.weights.lm_head.is_same(loaded.weights.tok_embeddings), config.tie_embeddings);
}

INSTANTIATE_TEST_SUITE_P(
    AllFamilies, HfRoundTrip,
    ::testing::Combine(::testing::Values("llama3", "qwen2", "qwen3", "mistral"), ::testing::Bool(),
                       ::testing::Values(at::kFloat, at::kBFloat16)),
    [](const ::testing::TestParamInfo<RoundTripParam>& info) {
      return std::get<0>(info.param) + (std::get<1>(info.param) ? "_sharded_" : "_single_") +
             (std::get<2>(info.param) == at::kFloat ? "fp32" : "bf16");
    });

TEST(HfCheckpoint, Fp16StorageRoundsThroughHalf) {
  const LlamaConfig config = SmallQwen3Config();
  const auto tensors = RandomHfTensors(config, 5);
  const std::string dir = ScratchDir(TestName());
  WriteHfCheckpoint(dir, config, tensors, at::kHalf);
  auto file = SafetensorsFile::Open(dir + "/model.safetensors");
  EXPECT_EQ(file->Find("model.norm.weight")->dtype, SafetensorsDtype::kF16);
  EXPECT_EQ(file->metadata().at("format"), "pt");
  const HfModel model = ReadHfCheckpoint(dir, at::kFloat);
  EXPECT_EQ(model.config.torch_dtype, "float16");
  for (const auto& [name, t] : tensors) {
    EXPECT_TRUE(at::equal(model.tensors.at(name), t.to(at::kHalf).to(at::kFloat))) << name;
  }
}

TEST(HfCheckpoint, SwitchingLayoutRemovesTheStaleOne) {
  const LlamaConfig config = SmallQwen2Config();
  const std::string dir = ScratchDir(TestName());
  WriteHfCheckpoint(dir, config, RandomHfTensors(config, 1), at::kFloat, 0);
  const auto second = RandomHfTensors(config, 2);
  WriteHfCheckpoint(dir, config, second, at::kFloat, 8192);
  EXPECT_FALSE(PathExists(dir + "/model.safetensors"));
  const HfModel model = ReadHfCheckpoint(dir);
  EXPECT_TRUE(at::equal(model.tensors.at("model.embed_tokens.weight"),
                        second.at("model.embed_tokens.weight")));
  WriteHfCheckpoint(dir, config, RandomHfTensors(config, 3), at::kFloat, 0);
  EXPECT_FALSE(PathExists(dir + "/model.safetensors.index.json"));
}

// ---- Fused layout ---------------------------------------------------------------------------

// Rows [0, q), [q, q + kv) and [q + kv, q + 2 kv) of `fused` are the q, k and v projections'
// `suffix` ("weight" or "bias") of the layer whose tensors start with `prefix`.
template <typename TensorMap>
void ExpectFusedQkv(const at::Tensor& fused, const TensorMap& t, const std::string& prefix,
                    const std::string& suffix, int64_t q, int64_t kv) {
  EXPECT_TRUE(at::equal(fused.slice(0, 0, q), t.at(prefix + "self_attn.q_proj." + suffix)));
  EXPECT_TRUE(at::equal(fused.slice(0, q, q + kv), t.at(prefix + "self_attn.k_proj." + suffix)));
  EXPECT_TRUE(
      at::equal(fused.slice(0, q + kv, q + 2 * kv), t.at(prefix + "self_attn.v_proj." + suffix)));
}

TEST(WeightsFromHf, FusedRowsAreWhereTheHeaderSays) {
  for (const LlamaConfig& c : {SmallLlama3Config(), SmallQwen2Config(), SmallQwen3Config()}) {
    SCOPED_TRACE(c.architecture);
    const auto t = RandomHfTensors(c, 77);
    const LlamaWeights w = WeightsFromHfTensors(c, t, "test");
    ASSERT_EQ(static_cast<int64_t>(w.layers.size()), c.n_layers);
    EXPECT_TRUE(at::equal(w.tok_embeddings, t.at("model.embed_tokens.weight")));
    EXPECT_TRUE(at::equal(w.final_norm, t.at("model.norm.weight")));
    if (c.tie_embeddings) {
      EXPECT_TRUE(w.lm_head.is_same(w.tok_embeddings));
    } else {
      EXPECT_TRUE(at::equal(w.lm_head, t.at("lm_head.weight")));
    }
    const int64_t q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim;
    for (int64_t i = 0; i < c.n_layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      const LlamaLayerWeights& l = w.layers[i];
      EXPECT_TRUE(at::equal(l.attn_norm, t.at(p + "input_layernorm.weight")));
      ExpectFusedQkv(l.wqkv, t, p, "weight", q, kv);
      EXPECT_EQ(l.bqkv.defined(), c.qkv_bias);
      if (c.qkv_bias) ExpectFusedQkv(l.bqkv, t, p, "bias", q, kv);
      EXPECT_EQ(l.q_norm.defined(), c.qk_norm);
      if (c.qk_norm) {
        EXPECT_TRUE(at::equal(l.q_norm, t.at(p + "self_attn.q_norm.weight")));
        EXPECT_TRUE(at::equal(l.k_norm, t.at(p + "self_attn.k_norm.weight")));
      }
      EXPECT_TRUE(at::equal(l.wo, t.at(p + "self_attn.o_proj.weight")));
      EXPECT_TRUE(at::equal(l.ffn_norm, t.at(p + "post_attention_layernorm.weight")));
      EXPECT_TRUE(at::equal(l.w_gate_up.slice(0, 0, h), t.at(p + "mlp.gate_proj.weight")));
      EXPECT_TRUE(at::equal(l.w_gate_up.slice(0, h, 2 * h), t.at(p + "mlp.up_proj.weight")));
      EXPECT_TRUE(at::equal(l.w_down, t.at(p + "mlp.down_proj.weight")));
      EXPECT_TRUE(l.wqkv.is_contiguous());
      EXPECT_TRUE(l.w_gate_up.is_contiguous());
    }
  }
}

TEST(WeightsFromHf, ExpectedShapesListEveryTensorOnce) {
  const auto shapes = ExpectedHfTensorShapes(SmallQwen2Config());
  // embed + final norm (tied: no lm_head), and per layer: 2 norms, q/k/v/o, q/k/v bias,
  // gate/up/down = 12.
  EXPECT_EQ(shapes.size(), 2u + 2 * 12);
  EXPECT_EQ(shapes.count("lm_head.weight"), 0u);
  EXPECT_EQ(shapes.at("model.layers.1.self_attn.k_proj.bias"), (std::vector<int64_t>{16}));
  const auto q3 = ExpectedHfTensorShapes(SmallQwen3Config());
  EXPECT_EQ(q3.at("model.layers.0.self_attn.q_norm.weight"), (std::vector<int64_t>{16}));
  EXPECT_EQ(q3.at("model.layers.0.self_attn.q_proj.weight"), (std::vector<int64_t>{64, 40}));
  EXPECT_EQ(q3.at("model.layers.0.self_attn.o_proj.weight"), (std::vector<int64_t>{40, 64}));
  EXPECT_EQ(q3.at("lm_head.weight"), (std::vector<int64_t>{90, 40}));
}

TEST(WeightsFromHf, MissingTensorIsNamedWithExpectedShape) {
  const LlamaConfig c = SmallLlama3Config();
  auto t = RandomHfTensors(c, 1);
  t.erase("model.layers.1.mlp.up_proj.weight");
  ExpectError([&] { WeightsFromHfTensors(c, t, "ckpt-A"); },
              {"ckpt-A", "missing tensor 'model.layers.1.mlp.up_proj.weight'", "[96, 64]"});
}

TEST(WeightsFromHf, MissingLmHeadWhenUntied) {
  const LlamaConfig c = SmallLlama3Config();
  auto t = RandomHfTensors(c, 1);
  t.erase("lm_head.weight");
  ExpectError([&] { WeightsFromHfTensors(c, t, "src"); },
              {"missing tensor 'lm_head.weight'", "tie_word_embeddings = false"});
}

TEST(WeightsFromHf, WrongShapeNamesExpectedAndActual) {
  const LlamaConfig c = SmallLlama3Config();
  auto t = RandomHfTensors(c, 1);
  t["model.layers.0.self_attn.k_proj.weight"] = at::zeros({17, 64});
  ExpectError([&] { WeightsFromHfTensors(c, t, "src-B"); },
              {"src-B", "'model.layers.0.self_attn.k_proj.weight'", "has shape [17, 64]",
               "expected [16, 64]"});
}

TEST(WeightsFromHf, MissingQwen2BiasAndQwen3Norm) {
  auto q2 = RandomHfTensors(SmallQwen2Config(), 1);
  q2.erase("model.layers.0.self_attn.v_proj.bias");
  ExpectError([&] { WeightsFromHfTensors(SmallQwen2Config(), q2, "q2"); },
              {"missing tensor 'model.layers.0.self_attn.v_proj.bias'", "[16]"});
  auto q3 = RandomHfTensors(SmallQwen3Config(), 1);
  q3.erase("model.layers.1.self_attn.k_norm.weight");
  ExpectError([&] { WeightsFromHfTensors(SmallQwen3Config(), q3, "q3"); },
              {"missing tensor 'model.layers.1.self_attn.k_norm.weight'"});
}

TEST(WeightsFromHf, UnexpectedTensorsAreErrorsExceptInvFreq) {
  const LlamaConfig c = SmallLlama3Config();
  auto t = RandomHfTensors(c, 1);
  t["model.layers.0.self_attn.rotary_emb.inv_freq"] = at::ones({4});
  WeightsFromHfTensors(c, t, "src");  // ignorable
  t["model.layers.0.self_attn.q_proj.bias"] = at::zeros({64});
  ExpectError([&] { WeightsFromHfTensors(c, t, "src"); },
              {"unexpected tensor", "model.layers.0.self_attn.q_proj.bias", "qkv_bias = 0"});
}

TEST(WeightsFromHf, TiedLmHeadMustMatchEmbeddingsWhenPresent) {
  const LlamaConfig c = SmallQwen2Config();
  auto t = RandomHfTensors(c, 1);
  t["lm_head.weight"] = t.at("model.embed_tokens.weight").clone();
  const LlamaWeights w = WeightsFromHfTensors(c, t, "src");
  EXPECT_TRUE(w.lm_head.is_same(w.tok_embeddings));
  t["lm_head.weight"] = t.at("lm_head.weight") + 1;
  ExpectError([&] { WeightsFromHfTensors(c, t, "src"); },
              {"'lm_head.weight' differs", "tie_word_embeddings = true"});
}

TEST(WeightsFromHf, MixedDtypesAreRejected) {
  const LlamaConfig c = SmallLlama3Config();
  auto t = RandomHfTensors(c, 1);
  t["model.norm.weight"] = t.at("model.norm.weight").to(at::kBFloat16);
  ExpectError([&] { WeightsFromHfTensors(c, t, "src"); },
              {"'model.norm.weight' has dtype BFloat16", "one dtype"});
}

// ---- LlamaWeights ---------------------------------------------------------------------------

TEST(LlamaWeights, RandomWeightsAreSeededAndConvertKeepingTies) {
  const LlamaConfig c = SmallQwen2Config();  // tied
  const LlamaWeights a = RandomLlamaWeights(c, 9);
  const LlamaWeights b = RandomLlamaWeights(c, 9);
  const LlamaWeights other = RandomLlamaWeights(c, 10);
  EXPECT_TRUE(at::equal(a.layers[1].wqkv, b.layers[1].wqkv));
  EXPECT_FALSE(at::equal(a.layers[1].wqkv, other.layers[1].wqkv));
  EXPECT_TRUE(a.lm_head.is_same(a.tok_embeddings));
  const LlamaWeights bf = a.To(at::kBFloat16);
  EXPECT_EQ(bf.layers[0].bqkv.scalar_type(), at::kBFloat16);
  EXPECT_TRUE(bf.lm_head.is_same(bf.tok_embeddings));
  EXPECT_TRUE(at::equal(bf.layers[0].w_down, a.layers[0].w_down.to(at::kBFloat16)));
  bf.Validate(c, "bf");
  const LlamaWeights direct = RandomLlamaWeights(c, 9, at::kBFloat16);
  EXPECT_TRUE(at::equal(direct.layers[0].wqkv, bf.layers[0].wqkv));
}

TEST(LlamaWeights, ValidateNamesTheBadWeight) {
  const LlamaConfig c = SmallQwen3Config();
  LlamaWeights w = RandomLlamaWeights(c, 3);
  w.Validate(c, "ok");
  LlamaWeights bad = w;
  bad.layers[1].w_gate_up = at::zeros({10, 40});
  ExpectError([&] { bad.Validate(c, "weights-X"); },
              {"weights-X", "layers[1].w_gate_up", "[10, 40]", "expected [144, 40]"});
  bad = w;
  bad.layers[0].q_norm = at::Tensor();
  ExpectError([&] { bad.Validate(c, "w"); }, {"layers[0].q_norm is missing"});
  bad = w;
  bad.layers[0].bqkv = at::zeros({c.qkv_dim()});
  ExpectError([&] { bad.Validate(c, "w"); }, {"layers[0].bqkv is set"});
  bad = w;
  bad.layers.pop_back();
  ExpectError([&] { bad.Validate(c, "w"); }, {"1 layers, config has 2"});
  bad = w;
  bad.final_norm = bad.final_norm.to(at::kBFloat16);
  ExpectError([&] { bad.Validate(c, "w"); }, {"final_norm has dtype BFloat16"});
}

TEST(RandomHfTensors, DistributionsAndDeterminism) {
  LlamaConfig c = SmallLlama3Config();
  c.vocab_size = 2048;  // a large embedding for the statistics
  const auto a = RandomHfTensors(c, 42);
  const auto b = RandomHfTensors(c, 42);
  const auto other = RandomHfTensors(c, 43);
  EXPECT_EQ(a.size(), ExpectedHfTensorShapes(c).size());
  for (const auto& [name, t] : a) {
    EXPECT_TRUE(at::equal(t, b.at(name))) << name;
    EXPECT_FALSE(at::equal(t, other.at(name))) << name;
    EXPECT_EQ(t.scalar_type(), at::kFloat);
  }
  const at::Tensor embed = a.at("model.embed_tokens.weight");
  EXPECT_NEAR(embed.mean().item<double>(), 0.0, 0.001);
  EXPECT_NEAR(embed.std().item<double>(), 0.02, 0.0005);
  // Different tensors get different streams.
  EXPECT_FALSE(at::equal(a.at("model.layers.0.mlp.gate_proj.weight"),
                         a.at("model.layers.0.mlp.up_proj.weight")));
  const at::Tensor norm = at::cat({a.at("model.layers.0.input_layernorm.weight"),
                                   a.at("model.layers.0.post_attention_layernorm.weight"),
                                   a.at("model.layers.1.input_layernorm.weight"),
                                   a.at("model.layers.1.post_attention_layernorm.weight")});
  EXPECT_NEAR(norm.mean().item<double>(), 1.0, 0.03);
  EXPECT_NEAR(norm.std().item<double>(), 0.1, 0.02);
  const auto bf = RandomHfTensors(c, 42, at::kBFloat16);
  EXPECT_TRUE(at::equal(bf.at("lm_head.weight"), a.at("lm_head.weight").to(at::kBFloat16)));
}

// ---- Checkpoint directory errors ------------------------------------------------------------

// A valid single-file Llama-3 checkpoint in a fresh scratch directory.
std::string WriteValidCheckpoint(const std::string& name, int64_t shard_bytes = 0) {
  const LlamaConfig c = SmallLlama3Config();
  const std::string dir = ScratchDir(name);
  WriteHfCheckpoint(dir, c, RandomHfTensors(c, 1), at::kFloat, shard_bytes);
  return dir;
}

TEST(HfCheckpointErrors, MissingTensorNamesTheDirectory) {
  const LlamaConfig c = SmallLlama3Config();
  auto t = RandomHfTensors(c, 1);
  t.erase("model.layers.0.input_layernorm.weight");
  const std::string dir = ScratchDir(TestName());
  WriteHfCheckpoint(dir, c, t);
  ExpectError([&] { LoadHfCheckpoint(dir); },
              {dir, "missing tensor 'model.layers.0.input_layernorm.weight'"});
}

TEST(HfCheckpointErrors, WrongShapeInFile) {
  const LlamaConfig c = SmallLlama3Config();
  auto t = RandomHfTensors(c, 1);
  t["model.norm.weight"] = at::ones({65});
  const std::string dir = ScratchDir(TestName());
  WriteHfCheckpoint(dir, c, t);
  ExpectError([&] { LoadHfCheckpoint(dir); },
              {dir, "'model.norm.weight' has shape [65], expected [64]"});
}

TEST(HfCheckpointErrors, ConfigJsonNotJson) {
  const std::string dir = WriteValidCheckpoint(TestName());
  WriteText(dir + "/config.json", "{\"hidden_size\": 64,");
  ExpectError([&] { ReadHfCheckpoint(dir); }, {dir + "/config.json", "not valid JSON"});
}

TEST(HfCheckpointErrors, ConfigJsonMissingField) {
  const std::string dir = WriteValidCheckpoint(TestName());
  json j = json::parse(ReadFileToString(dir + "/config.json"));
  j.erase("vocab_size");
  WriteText(dir + "/config.json", j.dump());
  ExpectError([&] { ReadHfCheckpoint(dir); },
              {dir + "/config.json", "missing required field \"vocab_size\""});
}

TEST(HfCheckpointErrors, ConfigJsonWrongType) {
  const std::string dir = WriteValidCheckpoint(TestName());
  json j = json::parse(ReadFileToString(dir + "/config.json"));
  j["num_hidden_layers"] = "2";
  WriteText(dir + "/config.json", j.dump());
  ExpectError([&] { ReadHfCheckpoint(dir); },
              {dir + "/config.json", "\"num_hidden_layers\" must be an integer"});
}

TEST(HfCheckpointErrors, MissingDirectoryConfigOrWeights) {
  const std::string dir = ScratchDir(TestName());
  ExpectError([&] { ReadHfCheckpoint(dir + "/nope"); }, {"nope", "does not exist"});
  ExpectError([&] { ReadHfCheckpoint(dir); }, {dir, "has no config.json"});
  WriteText(dir + "/config.json", SmallLlama3Config().ToHfJson().dump());
  ExpectError([&] { ReadHfCheckpoint(dir); },
              {dir, "neither model.safetensors nor model.safetensors.index.json"});
}

// A valid sharded checkpoint for the current test whose index weight_map was edited by `edit`;
// sets `index_path` to the index file.
std::string CheckpointWithEditedIndex(const std::function<void(json& weight_map)>& edit,
                                      std::string* index_path) {
  const std::string dir = WriteValidCheckpoint(TestName(), 16384);
  *index_path = dir + "/model.safetensors.index.json";
  json index = json::parse(ReadFileToString(*index_path));
  edit(index["weight_map"]);
  WriteText(*index_path, index.dump());
  return dir;
}

TEST(HfCheckpointErrors, IndexNamesMissingShard) {
  std::string index_path;
  const std::string dir = CheckpointWithEditedIndex(
      [](json& map) { map["model.norm.weight"] = "model-00099-of-00099.safetensors"; },
      &index_path);
  ExpectError([&] { ReadHfCheckpoint(dir); },
              {index_path, "shard 'model-00099-of-00099.safetensors' does not exist"});
}

TEST(HfCheckpointErrors, IndexListsTensorTheShardLacks) {
  std::string index_path;
  const std::string dir = CheckpointWithEditedIndex(
      [](json& map) { map["model.extra.weight"] = map["model.norm.weight"]; }, &index_path);
  ExpectError([&] { ReadHfCheckpoint(dir); },
              {index_path, "'model.extra.weight'", "does not contain it"});
}

TEST(HfCheckpointErrors, ShardTensorNotInIndex) {
  std::string index_path;
  const std::string dir =
      CheckpointWithEditedIndex([](json& map) { map.erase("model.norm.weight"); }, &index_path);
  ExpectError([&] { ReadHfCheckpoint(dir); },
              {"'model.norm.weight' is not listed in the weight_map"});
}

TEST(HfCheckpointErrors, MalformedIndex) {
  const std::string dir = WriteValidCheckpoint(TestName(), 16384);
  const std::string index_path = dir + "/model.safetensors.index.json";
  WriteText(index_path, R"({"metadata": {}})");
  ExpectError([&] { ReadHfCheckpoint(dir); }, {index_path, "\"weight_map\""});
  WriteText(index_path, R"({"weight_map": [)");
  ExpectError([&] { ReadHfCheckpoint(dir); }, {index_path, "not valid JSON"});
}

TEST(HfCheckpointErrors, NonFloatTensorInFile) {
  const std::string dir = WriteValidCheckpoint(TestName());
  // Replace the weights with a file holding an integer tensor.
  const int32_t ids[2] = {1, 2};
  WriteSafetensors(dir + "/model.safetensors",
                   {{"model.embed_tokens.weight", SafetensorsDtype::kI32, {2}, ids, 8}});
  ExpectError([&] { ReadHfCheckpoint(dir); },
              {dir + "/model.safetensors", "'model.embed_tokens.weight'", "dtype I32"});
}

TEST(HfCheckpointErrors, CorruptSafetensorsNamesFile) {
  const std::string dir = WriteValidCheckpoint(TestName());
  WriteText(dir + "/model.safetensors", "tiny");
  ExpectError([&] { ReadHfCheckpoint(dir); }, {dir + "/model.safetensors", "shorter"});
}

}  // namespace
}  // namespace specbed

namespace specbed {
namespace {

// A config.json claiming 10^9 layers used to build a table of 10^10 tensor names until the OOM
// killer ended the process. Now the cap refuses it at once, and a layer count within the cap but
// above the layers the checkpoint holds fails before anything sized by the config is built.
TEST(HfCheckpointErrors, AbsurdLayerCountFailsFastWithoutAllocating) {
  const std::string dir = ScratchDir(TestName());
  WriteHfCheckpoint(dir, SmallLlama3Config(), RandomHfTensors(SmallLlama3Config(), 1));
  json j = json::parse(ReadFileToString(dir + "/config.json"));
  j["num_hidden_layers"] = 1000000000;
  WriteText(dir + "/config.json", j.dump());
  const auto start = std::chrono::steady_clock::now();
  ExpectError([&] { LoadHfCheckpoint(dir); },
              {dir + "/config.json", "num_hidden_layers (n_layers) = 1000000000",
               "exceeds SpecBed's limit of 4096"});
  j["num_hidden_layers"] = 4000;
  WriteText(dir + "/config.json", j.dump());
  ExpectError([&] { LoadHfCheckpoint(dir); },
              {dir, "num_hidden_layers = 4000 but the checkpoint holds tensors for 2 layer(s)"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.0);
  for (const char* field : {"hidden_size", "vocab_size", "intermediate_size",
                            "max_position_embeddings", "num_attention_heads"}) {
    json big = json::parse(ReadFileToString(dir + "/config.json"));
    big["num_hidden_layers"] = 2;
    big[field] = int64_t{1} << 40;
    WriteText(dir + "/config.json", big.dump());
    ExpectError([&] { ReadHfCheckpoint(dir); }, {dir + "/config.json", "exceeds SpecBed's limit"});
  }
}

// NaN or Inf weights are an error naming the file and tensor; SPECBED_ALLOW_NONFINITE_WEIGHTS=1
// loads them anyway.
TEST(HfCheckpointErrors, NonFiniteWeightsNameTheTensor) {
  const LlamaConfig c = SmallLlama3Config();
  auto t = RandomHfTensors(c, 1);
  t["model.layers.1.mlp.up_proj.weight"].view({-1})[7] = std::nanf("");
  t["model.layers.1.mlp.up_proj.weight"].view({-1})[9] = INFINITY;
  const std::string dir = ScratchDir(TestName());
  WriteHfCheckpoint(dir, c, t);
  ExpectError([&] { LoadHfCheckpoint(dir); },
              {dir + "/model.safetensors", "tensor 'model.layers.1.mlp.up_proj.weight'",
               "holds 2 non-finite value(s)", "first at flat index 7",
               "SPECBED_ALLOW_NONFINITE_WEIGHTS=1"});
  ExpectError([&] { LoadHfCheckpoint(dir, at::kBFloat16); },
              {"tensor 'model.layers.1.mlp.up_proj.weight'", "non-finite"});
  setenv("SPECBED_ALLOW_NONFINITE_WEIGHTS", "1", 1);
  EXPECT_NO_THROW(LoadHfCheckpoint(dir));
  unsetenv("SPECBED_ALLOW_NONFINITE_WEIGHTS");
}

// A repeated key in config.json is an error naming it (it used to be last-wins).
TEST(HfCheckpointErrors, DuplicateConfigKeyIsRefused) {
  const std::string dir = ScratchDir(TestName());
  WriteHfCheckpoint(dir, SmallLlama3Config(), RandomHfTensors(SmallLlama3Config(), 1));
  const std::string text = ReadFileToString(dir + "/config.json");
  WriteText(dir + "/config.json", "{\"vocab_size\": 7, " + text.substr(text.find('{') + 1));
  ExpectError([&] { ReadHfCheckpoint(dir); },
              {dir + "/config.json", "duplicate key \"vocab_size\" at /vocab_size"});
}

}  // namespace
}  // namespace specbed
