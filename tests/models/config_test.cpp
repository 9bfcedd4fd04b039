// Tests for models/llama_config.{h,cpp}: parsing published config.json files (Llama-3.1-8B,
// Qwen2.5-0.5B-Instruct, Qwen3-0.6B, Mistral-7B v0.1 and v0.3), HF defaults, Mistral's sliding
// window, every malformed-config error, ToHfJson round
// trip, parameter counts of published models, RoPE inverse frequencies computed by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "models/llama_config.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using nlohmann::json;
using testing_util::SmallLlama2cConfig;
using testing_util::SmallLlama3Config;
using testing_util::SmallMistralConfig;
using testing_util::SmallQwen2Config;
using testing_util::SmallQwen3Config;

// config.json of meta-llama/Llama-3.1-8B (as published).
constexpr const char* kLlama31_8B = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 128000,
  "eos_token_id": [128001, 128008, 128009],
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 131072,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3"
  },
  "rope_theta": 500000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0",
  "use_cache": true,
  "vocab_size": 128256
})";

// config.json of Qwen/Qwen2.5-0.5B-Instruct.
constexpr const char* kQwen25_05B = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 21,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// config.json of Qwen/Qwen3-0.6B.
constexpr const char* kQwen3_06B = R"({
  "architectures": ["Qwen3ForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 1024,
  "initializer_range": 0.02,
  "intermediate_size": 3072,
  "max_position_embeddings": 40960,
  "max_window_layers": 28,
  "model_type": "qwen3",
  "num_attention_heads": 16,
  "num_hidden_layers": 28,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000,
  "sliding_window": null,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.51.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

// config.json of mistralai/Mistral-7B-v0.3: no sliding window (null).
constexpr const char* kMistral7B_v03 = R"({
  "architectures": ["MistralForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.42.0.dev0",
  "use_cache": true,
  "vocab_size": 32768
})";

// config.json of mistralai/Mistral-7B-v0.1: a 4096-position sliding window in a 32768 context.
constexpr const char* kMistral7B_v01 = R"({
  "architectures": ["MistralForCausalLM"],
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 10000.0,
  "sliding_window": 4096,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.34.0.dev0",
  "use_cache": true,
  "vocab_size": 32000
})";

// The smallest accepted llama config: only the required fields.
json MinimalLlama() {
  return {{"model_type", "llama"},    {"hidden_size", 64},        {"num_hidden_layers", 2},
          {"num_attention_heads", 4}, {"intermediate_size", 128}, {"vocab_size", 100}};
}

// Expects ParseHfConfig(j, "cfg.json") to fail with a message containing every part.
void ExpectParseFails(const json& j, const std::vector<std::string>& parts) {
  try {
    ParseHfConfig(j, "cfg.json");
    ADD_FAILURE() << "expected an error for " << j.dump();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cfg.json"), std::string::npos) << msg;
    for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
}

// MinimalLlama() with `field` set to `value` fails to parse (as ExpectParseFails checks).
void ExpectFieldFails(const char* field, const json& value, const std::vector<std::string>& parts) {
  json j = MinimalLlama();
  j[field] = value;
  ExpectParseFails(j, parts);
}

// The fields ParseHfConfig reads, for comparing whole configs (EXPECT_EQ on two of these compares
// field by field and prints both on a difference); the llama3 rope-scaling fields count only under
// llama3 scaling.
auto Fields(const LlamaConfig& c) {
  const RopeScaling& s = c.rope_scaling;
  const bool llama3 = s.type == RopeScalingType::kLlama3;
  return std::make_tuple(
      c.architecture, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.hidden_dim,
      c.vocab_size, c.max_seq_len, c.rope_theta, c.norm_eps, c.tie_embeddings, c.qkv_bias,
      c.qk_norm, c.rope_interleaved, s.type, s.factor, llama3 ? s.low_freq_factor : 0.0,
      llama3 ? s.high_freq_factor : 0.0, llama3 ? s.original_max_position_embeddings : int64_t{0},
      c.bos_token_id, c.eos_token_ids, c.torch_dtype, c.sliding_window);
}

// A published checkpoint's config: `shape` with `n_layers` layers, bfloat16 weights and the given
// RoPE theta, RMSNorm epsilon, embedding tying and special tokens (no family-specific field set).
LlamaConfig Published(const std::string& architecture, const testing_util::SmallShape& shape,
                      int64_t n_layers, double rope_theta, double norm_eps, bool tie_embeddings,
                      int64_t bos_token_id, std::vector<int64_t> eos_token_ids) {
  LlamaConfig c = testing_util::SmallConfigOf(architecture, shape, norm_eps, tie_embeddings,
                                              bos_token_id, std::move(eos_token_ids));
  c.n_layers = n_layers;
  c.rope_theta = rope_theta;
  c.torch_dtype = "bfloat16";
  return c;
}

// Each published config.json parses to every field of its model and to the published parameter
// count.
TEST(HfConfig, ParsesPublishedConfigs) {
  // Llama-3.1-8B: GQA, untied head, llama3 rope scaling.
  LlamaConfig llama31 = Published("LlamaForCausalLM", {4096, 32, 8, 128, 14336, 128256, 131072}, 32,
                                  500000.0, 1e-5, false, 128000, {128001, 128008, 128009});
  llama31.rope_scaling = {RopeScalingType::kLlama3, /*factor=*/8.0, /*low_freq_factor=*/1.0,
                          /*high_freq_factor=*/4.0, /*original_max_position_embeddings=*/8192};
  // Qwen2.5-0.5B: q/k/v biases, tied embeddings, no rope scaling.
  LlamaConfig qwen25 = Published("Qwen2ForCausalLM", {896, 14, 2, 64, 4864, 151936, 32768}, 24, 1e6,
                                 1e-6, true, 151643, {151645});
  qwen25.qkv_bias = true;
  // Qwen3-0.6B: q/k norms, head_dim given explicitly (128 != 1024 / 16), rope_theta given as an
  // integer, "rope_scaling": null.
  LlamaConfig qwen3 = Published("Qwen3ForCausalLM", {1024, 16, 8, 128, 3072, 151936, 40960}, 28,
                                1e6, 1e-6, true, 151643, {151645});
  qwen3.qk_norm = true;
  // Mistral-7B v0.3 (no window) and v0.1 (window 4096: the context is capped there).
  const LlamaConfig mistral03 = Published(
      "MistralForCausalLM", {4096, 32, 8, 128, 14336, 32768, 32768}, 32, 1e6, 1e-5, false, 1, {2});
  LlamaConfig mistral01 = Published("MistralForCausalLM", {4096, 32, 8, 128, 14336, 32000, 4096},
                                    32, 10000.0, 1e-5, false, 1, {2});
  mistral01.sliding_window = 4096;
  const struct {
    const char* text;
    const LlamaConfig& expected;
    int64_t parameters;
  } cases[] = {{kLlama31_8B, llama31, 8030261248LL},
               {kQwen25_05B, qwen25, 494032768LL},
               {kQwen3_06B, qwen3, 596049920LL},
               {kMistral7B_v03, mistral03, 7248023552LL},
               {kMistral7B_v01, mistral01, 7241732096LL}};
  for (const auto& [text, expected, parameters] : cases) {
    SCOPED_TRACE(expected.architecture);
    const LlamaConfig c = ParseHfConfig(json::parse(text), "config.json");
    EXPECT_EQ(Fields(c), Fields(expected));
    EXPECT_EQ(c.ParameterCount(), parameters);
  }
  EXPECT_EQ(ParseHfConfig(json::parse(kQwen3_06B), "qwen3.json").q_dim(), 2048);
}

TEST(HfConfig, DefaultsFollowTransformersConfigClasses) {
  const LlamaConfig llama = ParseHfConfig(MinimalLlama(), "min.json");
  EXPECT_EQ(llama.architecture, "LlamaForCausalLM");
  EXPECT_EQ(llama.n_kv_heads, 4);      // num_key_value_heads defaults to num_attention_heads
  EXPECT_EQ(llama.head_dim, 16);       // hidden_size / num_attention_heads
  EXPECT_FALSE(llama.tie_embeddings);  // LlamaConfig default (PretrainedConfig's is true)
  EXPECT_EQ(llama.max_seq_len, 2048);
  EXPECT_EQ(llama.rope_theta, 10000.0);
  EXPECT_EQ(llama.norm_eps, 1e-6);
  EXPECT_EQ(llama.bos_token_id, -1);
  EXPECT_TRUE(llama.eos_token_ids.empty());
  EXPECT_EQ(llama.torch_dtype, "float32");
  EXPECT_EQ(llama.rope_scaling.type, RopeScalingType::kNone);

  json qwen3 = MinimalLlama();
  qwen3["model_type"] = "qwen3";
  const LlamaConfig q3 = ParseHfConfig(qwen3, "min3.json");
  EXPECT_EQ(q3.head_dim, 128);  // Qwen3Config default head_dim
  EXPECT_EQ(q3.max_seq_len, 32768);
  EXPECT_TRUE(q3.qk_norm);

  // architectures alone identifies the family; null means "use the default".
  json by_arch = MinimalLlama();
  by_arch.erase("model_type");
  by_arch["architectures"] = {"Qwen2ForCausalLM"};
  by_arch["num_key_value_heads"] = nullptr;
  const LlamaConfig q2 = ParseHfConfig(by_arch, "arch.json");
  EXPECT_EQ(q2.architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(q2.qkv_bias);
  EXPECT_EQ(q2.n_kv_heads, 4);
}

// MistralConfig: an absent sliding_window is 4096 (its default), null is none; the window caps the
// context; no q/k/v bias or q/k norm (Llama's math).
TEST(HfConfig, MistralSlidingWindowCapsTheContext) {
  json j = MinimalLlama();
  j["model_type"] = "mistral";
  LlamaConfig c = ParseHfConfig(j, "mistral.json");
  EXPECT_EQ(c.architecture, "MistralForCausalLM");
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.max_seq_len, 4096);  // min(131072 (MistralConfig default), the window)
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.qk_norm);
  j["sliding_window"] = nullptr;
  c = ParseHfConfig(j, "mistral.json");
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.max_seq_len, 131072);
  j["max_position_embeddings"] = 512;
  j["sliding_window"] = 1024;  // a window wider than the context never slides
  c = ParseHfConfig(j, "mistral.json");
  EXPECT_EQ(c.sliding_window, 1024);
  EXPECT_EQ(c.max_seq_len, 512);
  j["sliding_window"] = 0;
  ExpectParseFails(j, {"cfg.json", "sliding_window must be positive or null, got 0"});
  j["sliding_window"] = 100;
  j["attention_bias"] = true;
  ExpectParseFails(j, {"attention_bias = true", "not supported for mistral"});
  // A Qwen2 config's sliding_window (use_sliding_window: false) is not Mistral's: ignored.
  EXPECT_EQ(ParseHfConfig(json::parse(kQwen25_05B), "qwen2.json").sliding_window, 0);
}

TEST(HfConfig, AcceptsLinearScalingAndLegacyTypeKeyAndRopeParameters) {
  json j = MinimalLlama();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  LlamaConfig c = ParseHfConfig(j, "lin.json");
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kLinear);
  EXPECT_EQ(c.rope_scaling.factor, 2.0);

  j = MinimalLlama();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 12345.0}};
  c = ParseHfConfig(j, "rp.json");
  EXPECT_EQ(c.rope_theta, 12345.0);
  EXPECT_EQ(c.rope_scaling.type, RopeScalingType::kNone);
}

TEST(HfConfigErrors, NotAnObject) {
  ExpectParseFails(json::array({1, 2}), {"JSON object"});
}

TEST(HfConfigErrors, MissingRequiredField) {
  for (const char* field : {"hidden_size", "num_hidden_layers", "num_attention_heads",
                            "intermediate_size", "vocab_size"}) {
    json j = MinimalLlama();
    j.erase(field);
    ExpectParseFails(j, {"missing required field", std::string("\"") + field + "\""});
  }
}

TEST(HfConfigErrors, WrongFieldTypes) {
  ExpectFieldFails("hidden_size", "64", {"\"hidden_size\" must be an integer", "string"});
  ExpectFieldFails("vocab_size", 100.5, {"\"vocab_size\" must be an integer"});
  ExpectFieldFails("rms_norm_eps", "1e-5", {"\"rms_norm_eps\" must be a number"});
  ExpectFieldFails("tie_word_embeddings", 1, {"\"tie_word_embeddings\" must be true or false"});
  ExpectFieldFails("eos_token_id", {1, "2"}, {"\"eos_token_id\" must be an integer or a list"});
  ExpectFieldFails("architectures", "LlamaForCausalLM",
                   {"\"architectures\" must be a non-empty array"});
  ExpectFieldFails("rope_scaling", 8.0, {"\"rope_scaling\" must be an object or null"});
}

TEST(HfConfigErrors, UnknownOrMismatchedFamily) {
  ExpectFieldFails("model_type", "qwen",
                   {"unknown model_type 'qwen'", "did you mean", "llama, qwen2, qwen3, mistral"});
  ExpectFieldFails("architectures", {"GemmaForCausalLM"},
                   {"unknown architecture 'GemmaForCausalLM'"});
  ExpectFieldFails("architectures", {"Qwen2ForCausalLM"},
                   {"model_type \"llama\" does not match", "Qwen2ForCausalLM"});
  json j = MinimalLlama();
  j.erase("model_type");
  ExpectParseFails(j, {"missing \"model_type\" and \"architectures\""});
}

TEST(HfConfigErrors, InconsistentValues) {
  ExpectFieldFails("num_key_value_heads", 3,
                   {"not a multiple of num_key_value_heads (n_kv_heads) 3"});
  ExpectFieldFails("hidden_size", 66,
                   {"hidden_size 66 is not a multiple of num_attention_heads 4"});
  ExpectFieldFails("head_dim", 7, {"head_dim 7 must be even"});
  ExpectFieldFails("vocab_size", 0, {"vocab_size must be positive"});
  ExpectFieldFails("bos_token_id", 100, {"bos_token_id 100 is outside the vocabulary"});
  ExpectFieldFails("rms_norm_eps", 0.0, {"rms_norm_eps (norm_eps) must be positive"});
}

TEST(HfConfigErrors, UnsupportedFeatures) {
  ExpectFieldFails("attention_bias", true, {"attention_bias = true"});
  ExpectFieldFails("mlp_bias", true, {"mlp_bias = true"});
  ExpectFieldFails("hidden_act", "gelu", {"hidden_act \"gelu\""});
  json j = MinimalLlama();
  j["model_type"] = "qwen2";
  j["use_sliding_window"] = true;
  ExpectParseFails(j, {"use_sliding_window = true"});
  ExpectFieldFails("rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}},
                   {"unknown rope scaling type 'yarn'", "llama3"});
  ExpectFieldFails("rope_scaling",
                   {{"rope_type", "llama3"},
                    {"factor", 8.0},
                    {"high_freq_factor", 4.0},
                    {"original_max_position_embeddings", 8192}},
                   {"rope_scaling", "missing required field \"low_freq_factor\""});
  ExpectFieldFails("rope_scaling", {{"factor", 8.0}}, {"neither \"rope_type\" nor \"type\""});
}

TEST(HfConfig, ToHfJsonRoundTripsEveryFamily) {
  LlamaConfig linear = SmallQwen2Config();
  linear.rope_scaling.type = RopeScalingType::kLinear;
  linear.rope_scaling.factor = 2.5;
  linear.eos_token_ids = {};
  LlamaConfig windowless = SmallMistralConfig();
  windowless.sliding_window = 0;
  for (const LlamaConfig& c : {SmallLlama3Config(), SmallQwen2Config(), SmallQwen3Config(),
                               SmallMistralConfig(), windowless, linear}) {
    const json j = c.ToHfJson();
    SCOPED_TRACE(j.dump());
    // Through text, as written to disk.
    const LlamaConfig back = ParseHfConfig(json::parse(j.dump(2)), "roundtrip.json");
    EXPECT_EQ(Fields(c), Fields(back));
  }
  const json q3 = SmallQwen3Config().ToHfJson();
  EXPECT_EQ(q3["model_type"], "qwen3");
  EXPECT_EQ(q3["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(q3["head_dim"], 16);
  EXPECT_EQ(SmallLlama3Config().ToHfJson()["rope_scaling"]["rope_type"], "llama3");
  const json m = SmallMistralConfig().ToHfJson();
  EXPECT_EQ(m["model_type"], "mistral");
  EXPECT_EQ(m["sliding_window"], 96);
  EXPECT_FALSE(m.contains("use_sliding_window"));
  EXPECT_TRUE(windowless.ToHfJson()["sliding_window"].is_null());
}

TEST(HfConfig, ToHfJsonRejectsWhatHfCannotExpress) {
  EXPECT_THROW(SmallLlama2cConfig().ToHfJson(), Error);  // interleaved RoPE
  LlamaConfig c = SmallLlama3Config();
  c.qkv_bias = true;
  try {
    c.ToHfJson();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("qkv_bias"), std::string::npos) << e.what();
  }
  c = SmallLlama3Config();
  c.sliding_window = 256;
  try {
    c.ToHfJson();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only mistral has one"), std::string::npos) << e.what();
  }
}

TEST(HfConfig, ValidateNamesSourceAndField) {
  LlamaConfig c = SmallLlama2cConfig();
  c.Validate("ok");  // llama2c configs are valid too
  c.n_kv_heads = 3;
  try {
    c.Validate("model 'x'");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("model 'x'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("n_kv_heads"), std::string::npos) << msg;
  }
  c = SmallLlama3Config();
  c.architecture = "LlamaForCausalLm";
  try {
    c.Validate("src");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'LlamaForCausalLM'"), std::string::npos)
        << e.what();
  }
  c = SmallLlama3Config();
  c.rope_scaling.high_freq_factor = c.rope_scaling.low_freq_factor;
  EXPECT_THROW(c.Validate("src"), Error);
  c = SmallMistralConfig();
  c.max_seq_len = 200;  // past the window, full attention is not Mistral's
  try {
    c.Validate("src");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_seq_len) 200 exceeds sliding_window 96"),
              std::string::npos)
        << e.what();
  }
}

TEST(HfConfig, ParameterCountOfSmallConfigs) {
  // Qwen3 small config: untied, q/k norms, no bias. Counted by hand:
  // embeddings 90*40 twice, per layer 2*40 norms + (64+32+32)*40 qkv + 40*64 o + 3*40*72 mlp +
  // 2*16 q/k norms, final norm 40.
  const int64_t per_layer = 80 + 128 * 40 + 40 * 64 + 3 * 40 * 72 + 32;
  EXPECT_EQ(SmallQwen3Config().ParameterCount(), 2 * 90 * 40 + 2 * per_layer + 40);
}

// SmallLlama2cConfig with head_dim 8 and theta 10000 (4 frequencies), RoPE scaled by `type`
// with `factor`.
LlamaConfig RopeTestConfig(RopeScalingType type, double factor) {
  LlamaConfig c = SmallLlama2cConfig();
  c.head_dim = 8;
  c.rope_theta = 10000.0;
  c.rope_scaling.type = type;
  c.rope_scaling.factor = factor;
  return c;
}

// RopeInverseFrequencies(c) is `want`, each within 1e-15.
void ExpectFrequencies(const LlamaConfig& c, const std::vector<double>& want) {
  const std::vector<double> f = RopeInverseFrequencies(c);
  ASSERT_EQ(f.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(f[i], want[i], 1e-15) << i;
}

TEST(RopeFrequencies, PlainHandComputed) {
  // theta^(-2i/8) = 10000^(-i/4): 1, 0.1, 0.01, 0.001.
  ExpectFrequencies(RopeTestConfig(RopeScalingType::kNone, 1.0), {1.0, 0.1, 0.01, 0.001});
}

TEST(RopeFrequencies, LinearDividesByFactor) {
  ExpectFrequencies(RopeTestConfig(RopeScalingType::kLinear, 4.0), {0.25, 0.025, 0.0025, 0.00025});
}

TEST(RopeFrequencies, Llama3CoversAllThreeBands) {
  LlamaConfig c = RopeTestConfig(RopeScalingType::kLlama3, 8.0);
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 1000;
  // low_freq_wavelen = 1000 / 1 = 1000, high_freq_wavelen = 1000 / 4 = 250.
  // Base frequencies 1, 0.1, 0.01, 0.001 have wavelengths 2*pi/f = 6.28, 62.8, 628.3, 6283:
  //  - 6.28 and 62.8 < 250: kept.
  //  - 6283 > 1000: divided by 8 -> 0.000125.
  //  - 628.3 in between: smooth = (1000/628.3185 - 1) / (4 - 1) = 0.1971831436396511,
  //    f = (1 - smooth) * 0.01 / 8 + smooth * 0.01 = 0.0029753525068469473.
  ExpectFrequencies(c, {1.0, 0.1, 0.0029753525068469473, 0.000125});
}

TEST(RopeFrequencies, Llama31_8BHighAndLowEnds) {
  const LlamaConfig c = ParseHfConfig(json::parse(kLlama31_8B), "llama.json");
  const std::vector<double> f = RopeInverseFrequencies(c);
  ASSERT_EQ(f.size(), 64u);
  EXPECT_EQ(f[0], 1.0);  // highest frequency untouched
  // Lowest frequency: 500000^(-126/128) has wavelength >> 8192, so it is divided by 8.
  EXPECT_NEAR(f[63], std::pow(500000.0, -126.0 / 128.0) / 8.0, 1e-18);
}

}  // namespace
}  // namespace specbed
