// Hugging Face config.json parsing/writing for Llama / Qwen2 / Qwen3 / Mistral, validation,
// parameter count and RoPE inverse frequencies (incl. `linear` and `llama3` scaling).
// Defaults for absent fields follow the transformers config classes (LlamaConfig, Qwen2Config,
// Qwen3Config, MistralConfig): see models/checkpoint/README.md.
// Checked by: tests/models/config_test.cpp (real configs, defaults, every error, hand-computed
// RoPE frequencies, parameter counts of published models) and tests/models/hf_checkpoint_test.cpp.
#include "models/llama_config.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "base/error.h"
#include "base/json_read.h"
#include "base/names.h"
#include "models/config_fields.h"

namespace specbed {
namespace {

using namespace config_fields;  // GetInt, GetDouble, ...: the typed, source-naming readers
using nlohmann::json;

enum class Family { kLlama, kQwen2, kQwen3, kMistral };

struct FamilyInfo {
  Family family;
  const char* model_type;
  const char* architecture;
};

constexpr FamilyInfo kFamilies[] = {
    {Family::kLlama, "llama", "LlamaForCausalLM"},
    {Family::kQwen2, "qwen2", "Qwen2ForCausalLM"},
    {Family::kQwen3, "qwen3", "Qwen3ForCausalLM"},
    {Family::kMistral, "mistral", "MistralForCausalLM"},
};

const FamilyInfo* FamilyByModelType(const std::string& model_type) {
  for (const auto& f : kFamilies) {
    if (model_type == f.model_type) return &f;
  }
  return nullptr;
}

const FamilyInfo* FamilyByArchitecture(const std::string& architecture) {
  for (const auto& f : kFamilies) {
    if (architecture == f.architecture) return &f;
  }
  return nullptr;
}

// Parses a rope scaling object ("rope_scaling", or transformers >= 4.57 "rope_parameters").
RopeScaling ParseRopeScaling(const json& j, const std::string& field, const std::string& source) {
  RopeScaling scaling;
  SPECBED_CHECK(j.is_object(), source, ": field \"", field, "\" must be an object or null, got ",
                j.type_name(), " ", j.dump());
  const std::string where = source + ": " + field;
  std::string type;
  if (Has(j, "rope_type")) {
    type = GetString(j, "rope_type", where, "");
  } else if (Has(j, "type")) {
    type = GetString(j, "type", where, "");
  } else {
    Fail(source, ": field \"", field, "\" has neither \"rope_type\" nor \"type\"");
  }
  if (type == "default") return scaling;
  if (type == "linear") {
    scaling.type = RopeScalingType::kLinear;
    scaling.factor = GetDouble(j, "factor", where);
    return scaling;
  }
  if (type == "llama3") {
    scaling.type = RopeScalingType::kLlama3;
    scaling.factor = GetDouble(j, "factor", where);
    scaling.low_freq_factor = GetDouble(j, "low_freq_factor", where);
    scaling.high_freq_factor = GetDouble(j, "high_freq_factor", where);
    scaling.original_max_position_embeddings = GetInt(j, "original_max_position_embeddings", where);
    return scaling;
  }
  try {
    FailUnknownName("rope scaling type", type, {"default", "linear", "llama3"});
  } catch (const Error& e) {
    Fail(source, ": field \"", field, "\": ", e.what(), " (others are not supported)");
  }
}

}  // namespace

void CheckAttentionShape(const std::string& source, int64_t n_heads, int64_t n_kv_heads,
                         int64_t head_dim, double rope_theta, double rms_norm_eps,
                         bool llama2c_names) {
  auto alias = [&](const char* name) { return llama2c_names ? StrCat(" (", name, ")") : ""; };
  SPECBED_CHECK(n_heads % n_kv_heads == 0, source, ": num_attention_heads", alias("n_heads"), " ",
                n_heads, " is not a multiple of num_key_value_heads", alias("n_kv_heads"), " ",
                n_kv_heads);
  SPECBED_CHECK(head_dim % 2 == 0, source, ": head_dim ", head_dim,
                " must be even (RoPE rotates pairs)");
  SPECBED_CHECK(std::isfinite(rope_theta) && rope_theta > 0, source,
                ": rope_theta must be positive, got ", rope_theta);
  SPECBED_CHECK(std::isfinite(rms_norm_eps) && rms_norm_eps > 0, source, ": rms_norm_eps",
                alias("norm_eps"), " must be positive, got ", rms_norm_eps);
}

// Mistral's "sliding_window": null = none; absent = MistralConfig's default 4096. A query attends
// to the W latest positions only, so full attention (SpecBed's) is the same function while a
// sequence holds at most W tokens: the context (max_seq_len) is capped at W.
static void ReadMistralWindow(const json& j, const std::string& source, LlamaConfig& c) {
  const bool is_null = j.contains("sliding_window") && j["sliding_window"].is_null();
  c.sliding_window = is_null ? 0 : GetInt(j, "sliding_window", source, 4096);
  SPECBED_CHECK(is_null || c.sliding_window > 0, source,
                ": sliding_window must be positive or null, got ", c.sliding_window);
  if (c.sliding_window > 0) c.max_seq_len = std::min(c.max_seq_len, c.sliding_window);
}

// The fields of ParseHfConfig; nlohmann type errors escape (see ParseHfConfig).
// The model family from model_type and/or architectures[0]; both must agree when both are given.
static const FamilyInfo& DetectFamily(const json& j, const std::string& source) {
  const FamilyInfo* by_type = nullptr;
  const FamilyInfo* by_arch = nullptr;
  std::vector<std::string> known_types, known_archs;
  for (const auto& f : kFamilies) {
    known_types.push_back(f.model_type);
    known_archs.push_back(f.architecture);
  }
  if (Has(j, "model_type")) {
    const std::string model_type = GetString(j, "model_type", source, "");
    by_type = FamilyByModelType(model_type);
    if (by_type == nullptr) CheckKnownName(model_type, "model_type", known_types, source);
  }
  if (Has(j, "architectures")) {
    const std::string arch = GetArchitecture(j, source, "");
    by_arch = FamilyByArchitecture(arch);
    if (by_arch == nullptr) CheckKnownName(arch, "architecture", known_archs, source);
  }
  SPECBED_CHECK(by_type != nullptr || by_arch != nullptr, source,
                ": missing \"model_type\" and \"architectures\"; expected model_type one of ",
                Join(known_types, ", "));
  SPECBED_CHECK(by_type == nullptr || by_arch == nullptr || by_type == by_arch, source,
                ": model_type \"", by_type ? by_type->model_type : "",
                "\" does not match architectures[0] \"", by_arch ? by_arch->architecture : "",
                "\"");
  return by_type != nullptr ? *by_type : *by_arch;
}

// The fields only some families have: biases and q/k norms, sliding windows.
static void ReadFamilyFields(const json& j, const std::string& source, const FamilyInfo& family,
                             LlamaConfig& c) {
  switch (family.family) {
    case Family::kLlama:
    case Family::kMistral:
      SPECBED_CHECK(!GetBool(j, "attention_bias", source, false), source,
                    ": attention_bias = true (bias on q/k/v/o projections) is not supported for ",
                    family.model_type);
      SPECBED_CHECK(!GetBool(j, "mlp_bias", source, false), source,
                    ": mlp_bias = true is not supported");
      break;
    case Family::kQwen2:
      c.qkv_bias = true;
      break;
    case Family::kQwen3:
      c.qk_norm = true;
      SPECBED_CHECK(!GetBool(j, "attention_bias", source, false), source,
                    ": attention_bias = true (bias on q/k/v/o projections) is not supported for "
                    "qwen3");
      break;
  }
  if (family.family == Family::kQwen2 || family.family == Family::kQwen3) {
    SPECBED_CHECK(!GetBool(j, "use_sliding_window", source, false), source,
                  ": use_sliding_window = true is not supported (full causal attention only)");
  }
  if (family.family == Family::kMistral) ReadMistralWindow(j, source, c);
}

static LlamaConfig ParseHfConfigFields(const json& j, const std::string& source) {
  SPECBED_CHECK(j.is_object(), source, ": config must be a JSON object, got ", j.type_name());

  const FamilyInfo& family = DetectFamily(j, source);

  LlamaConfig c;
  c.architecture = family.architecture;
  c.dim = GetInt(j, "hidden_size", source);
  c.n_layers = GetInt(j, "num_hidden_layers", source);
  c.n_heads = GetInt(j, "num_attention_heads", source);
  c.n_kv_heads = GetInt(j, "num_key_value_heads", source, c.n_heads);
  SPECBED_CHECK(c.n_heads > 0, source, ": num_attention_heads must be positive, got ", c.n_heads);
  if (Has(j, "head_dim")) {
    c.head_dim = GetInt(j, "head_dim", source);
  } else if (family.family == Family::kQwen3) {
    c.head_dim = 128;  // Qwen3Config default
  } else {
    SPECBED_CHECK(c.dim % c.n_heads == 0, source, ": hidden_size ", c.dim,
                  " is not a multiple of num_attention_heads ", c.n_heads,
                  " and no head_dim is given");
    c.head_dim = c.dim / c.n_heads;
  }
  c.hidden_dim = GetInt(j, "intermediate_size", source);
  c.vocab_size = GetInt(j, "vocab_size", source);
  const int64_t default_positions = family.family == Family::kLlama     ? 2048
                                    : family.family == Family::kMistral ? 131072
                                                                        : 32768;
  c.max_seq_len = GetInt(j, "max_position_embeddings", source, default_positions);
  c.norm_eps = GetDouble(j, "rms_norm_eps", source, 1e-6);
  c.tie_embeddings = GetBool(j, "tie_word_embeddings", source, false);

  const std::string act = GetString(j, "hidden_act", source, "silu");
  SPECBED_CHECK(act == "silu", source, ": hidden_act \"", act,
                "\" is not supported (expected \"silu\")");
  ReadFamilyFields(j, source, family, c);

  c.rope_theta = GetDouble(j, "rope_theta", source, 10000.0);
  if (Has(j, "rope_scaling")) {
    c.rope_scaling = ParseRopeScaling(j["rope_scaling"], "rope_scaling", source);
  }
  if (Has(j, "rope_parameters")) {  // transformers >= 4.57 layout
    const json& rp = j["rope_parameters"];
    c.rope_scaling = ParseRopeScaling(rp, "rope_parameters", source);
    if (rp.is_object() && Has(rp, "rope_theta")) {
      c.rope_theta = GetDouble(rp, "rope_theta", source + ": rope_parameters");
    }
  }
  c.rope_interleaved = false;  // HF checkpoints use rotate_half pairing

  c.bos_token_id = GetInt(j, "bos_token_id", source, -1);
  if (Has(j, "eos_token_id")) {
    const json& eos = j["eos_token_id"];
    if (eos.is_array()) {
      for (const auto& e : eos) {
        SPECBED_CHECK(e.is_number_integer(), source,
                      ": field \"eos_token_id\" must be an integer or a list of integers, got ",
                      eos.dump());
        c.eos_token_ids.push_back(e.get<int64_t>());
      }
    } else {
      c.eos_token_ids.push_back(GetInt(j, "eos_token_id", source));
    }
  }
  c.torch_dtype = GetString(j, "torch_dtype", source, GetString(j, "dtype", source, "float32"));
  if (Has(j, "specbed_twin")) {  // a cost twin (models/twin/cost_twin.h)
    const json& twin = j["specbed_twin"];
    SPECBED_CHECK(twin.is_object(), source, ": field \"specbed_twin\" must be an object");
    const std::string twin_source = source + ": specbed_twin";
    c.twin_feature_depth = GetInt(twin, "feature_depth", twin_source);
    c.twin_label = GetString(twin, "label", twin_source, "");
    SPECBED_CHECK(
        c.twin_feature_depth >= 1 && c.twin_feature_depth <= GetInt(j, "num_hidden_layers", source),
        source, ": specbed_twin.feature_depth ", c.twin_feature_depth,
        " must be in [1, num_hidden_layers]");
  }
  c.Validate(source);
  return c;
}

LlamaConfig ParseHfConfig(const json& j, const std::string& source) {
  // A type error (a string where a number belongs, ...) names the file and the field's JSON
  // pointer.
  return WithJsonContext(source, [&] { return ParseHfConfigFields(j, source); });
}

void LlamaConfig::Validate(const std::string& source) const {
  const std::vector<std::string> known = {"llama2c", "LlamaForCausalLM", "Qwen2ForCausalLM",
                                          "Qwen3ForCausalLM", "MistralForCausalLM"};
  bool known_arch = false;
  for (const auto& k : known) known_arch = known_arch || k == architecture;
  if (!known_arch) {
    try {
      FailUnknownName("architecture", architecture, known);
    } catch (const Error& e) {
      Fail(source, ": ", e.what());
    }
  }
  const std::pair<const char*, int64_t> positive[] = {
      {"hidden_size (dim)", dim},
      {"num_hidden_layers (n_layers)", n_layers},
      {"num_attention_heads (n_heads)", n_heads},
      {"num_key_value_heads (n_kv_heads)", n_kv_heads},
      {"head_dim", head_dim},
      {"intermediate_size (hidden_dim)", hidden_dim},
      {"vocab_size", vocab_size},
      {"max_position_embeddings (max_seq_len)", max_seq_len},
  };
  for (const auto& [name, value] : positive) {
    SPECBED_CHECK(value > 0, source, ": ", name, " must be positive, got ", value);
  }
  const std::tuple<const char*, int64_t, int64_t> capped[] = {
      {"hidden_size (dim)", dim, kMaxConfigDim},
      {"num_hidden_layers (n_layers)", n_layers, kMaxConfigLayers},
      {"num_attention_heads (n_heads)", n_heads, kMaxConfigHeads},
      {"num_key_value_heads (n_kv_heads)", n_kv_heads, kMaxConfigHeads},
      {"head_dim", head_dim, kMaxConfigDim},
      {"intermediate_size (hidden_dim)", hidden_dim, kMaxConfigDim},
      {"vocab_size", vocab_size, kMaxConfigVocab},
      {"max_position_embeddings (max_seq_len)", max_seq_len, kMaxConfigPositions},
  };
  for (const auto& [name, value, cap] : capped) {
    SPECBED_CHECK(value <= cap, source, ": ", name, " = ", value, " exceeds SpecBed's limit of ",
                  cap, " (far above any published model; the config is corrupt)");
  }
  CheckAttentionShape(source, n_heads, n_kv_heads, head_dim, rope_theta, norm_eps,
                      /*llama2c_names=*/true);
  if (rope_scaling.type != RopeScalingType::kNone) {
    SPECBED_CHECK(std::isfinite(rope_scaling.factor) && rope_scaling.factor > 0, source,
                  ": rope_scaling.factor must be positive, got ", rope_scaling.factor);
  }
  if (rope_scaling.type == RopeScalingType::kLlama3) {
    SPECBED_CHECK(rope_scaling.low_freq_factor > 0, source,
                  ": rope_scaling.low_freq_factor must be positive, got ",
                  rope_scaling.low_freq_factor);
    SPECBED_CHECK(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor, source,
                  ": rope_scaling.high_freq_factor (", rope_scaling.high_freq_factor,
                  ") must be larger than low_freq_factor (", rope_scaling.low_freq_factor, ")");
    SPECBED_CHECK(rope_scaling.original_max_position_embeddings > 0, source,
                  ": rope_scaling.original_max_position_embeddings must be positive, got ",
                  rope_scaling.original_max_position_embeddings);
  }
  SPECBED_CHECK(sliding_window >= 0, source, ": sliding_window must be positive or 0 (none), got ",
                sliding_window);
  SPECBED_CHECK(sliding_window == 0 || max_seq_len <= sliding_window, source,
                ": max_position_embeddings (max_seq_len) ", max_seq_len, " exceeds sliding_window ",
                sliding_window,
                ": SpecBed attends to every earlier position, which equals the "
                "windowed attention only up to the window");
  SPECBED_CHECK(bos_token_id == -1 || (bos_token_id >= 0 && bos_token_id < vocab_size), source,
                ": bos_token_id ", bos_token_id, " is outside the vocabulary [0, ", vocab_size,
                ")");
  for (int64_t eos : eos_token_ids) {
    SPECBED_CHECK(eos >= 0 && eos < vocab_size, source, ": eos_token_id ", eos,
                  " is outside the vocabulary [0, ", vocab_size, ")");
  }
}

nlohmann::json LlamaConfig::ToHfJson() const {
  SPECBED_CHECK(!rope_interleaved, "config of architecture ", architecture,
                ": Hugging Face checkpoints use rotate_half RoPE pairing; permute the q/k rows "
                "and set rope_interleaved = false before converting");
  Family family = Family::kLlama;
  if (architecture == "Qwen2ForCausalLM") family = Family::kQwen2;
  if (architecture == "Qwen3ForCausalLM") family = Family::kQwen3;
  if (architecture == "MistralForCausalLM") family = Family::kMistral;
  const FamilyInfo& info = kFamilies[static_cast<int>(family)];
  SPECBED_CHECK(qkv_bias == (family == Family::kQwen2), "config of architecture ", architecture,
                ": qkv_bias = ", qkv_bias, " cannot be expressed in a ", info.model_type,
                " config.json (only qwen2 has q/k/v biases, always)");
  SPECBED_CHECK(qk_norm == (family == Family::kQwen3), "config of architecture ", architecture,
                ": qk_norm = ", qk_norm, " cannot be expressed in a ", info.model_type,
                " config.json (only qwen3 has q/k norms, always)");
  SPECBED_CHECK(sliding_window == 0 || family == Family::kMistral, "config of architecture ",
                architecture, ": sliding_window = ", sliding_window, " cannot be expressed in a ",
                info.model_type, " config.json (only mistral has one)");
  json j = json::object();
  j["architectures"] = json::array({info.architecture});
  j["model_type"] = info.model_type;
  j["hidden_size"] = dim;
  j["intermediate_size"] = hidden_dim;
  j["num_hidden_layers"] = n_layers;
  j["num_attention_heads"] = n_heads;
  j["num_key_value_heads"] = n_kv_heads;
  j["head_dim"] = head_dim;
  j["vocab_size"] = vocab_size;
  j["max_position_embeddings"] = max_seq_len;
  j["rope_theta"] = rope_theta;
  j["rms_norm_eps"] = norm_eps;
  j["tie_word_embeddings"] = tie_embeddings;
  j["hidden_act"] = "silu";
  if (family != Family::kQwen2) j["attention_bias"] = false;
  if (family == Family::kLlama || family == Family::kMistral) j["mlp_bias"] = false;
  if (family == Family::kQwen2 || family == Family::kQwen3) j["use_sliding_window"] = false;
  if (family == Family::kMistral) {
    j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
  }
  switch (rope_scaling.type) {
    case RopeScalingType::kNone:
      j["rope_scaling"] = nullptr;
      break;
    case RopeScalingType::kLinear:
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", rope_scaling.factor}};
      break;
    case RopeScalingType::kLlama3:
      j["rope_scaling"] = {
          {"rope_type", "llama3"},
          {"factor", rope_scaling.factor},
          {"low_freq_factor", rope_scaling.low_freq_factor},
          {"high_freq_factor", rope_scaling.high_freq_factor},
          {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
      break;
  }
  j["bos_token_id"] = bos_token_id >= 0 ? json(bos_token_id) : json(nullptr);
  if (eos_token_ids.empty()) {
    j["eos_token_id"] = nullptr;
  } else if (eos_token_ids.size() == 1) {
    j["eos_token_id"] = eos_token_ids[0];
  } else {
    j["eos_token_id"] = eos_token_ids;
  }
  j["torch_dtype"] = torch_dtype;
  return j;
}

int64_t LlamaConfig::ParameterCount() const {
  int64_t per_layer = 2 * dim                  // attention and MLP norms
                      + qkv_dim() * dim        // q, k, v projections
                      + dim * q_dim()          // o projection
                      + 3 * dim * hidden_dim;  // gate, up, down
  if (qkv_bias) per_layer += qkv_dim();
  if (qk_norm) per_layer += 2 * head_dim;
  const int64_t embeddings = vocab_size * dim * (tie_embeddings ? 1 : 2);
  return embeddings + n_layers * per_layer + dim;  // + final norm
}

std::vector<double> RopeInverseFrequencies(const LlamaConfig& config) {
  const int64_t half = config.head_dim / 2;
  const RopeScaling& s = config.rope_scaling;
  std::vector<double> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(config.rope_theta,
                              static_cast<double>(2 * i) / static_cast<double>(config.head_dim));
    if (s.type == RopeScalingType::kLinear) {
      f /= s.factor;
    } else if (s.type == RopeScalingType::kLlama3) {
      // Meta's apply_scaling / transformers' _compute_llama3_parameters: keep high frequencies
      // (short wavelengths), divide low frequencies by `factor`, interpolate in between.
      const double old_len = static_cast<double>(s.original_max_position_embeddings);
      const double low_freq_wavelen = old_len / s.low_freq_factor;
      const double high_freq_wavelen = old_len / s.high_freq_factor;
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen < high_freq_wavelen) {
        // unchanged
      } else if (wavelen > low_freq_wavelen) {
        f /= s.factor;
      } else {
        const double smooth =
            (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
    inv_freq[i] = f;
  }
  return inv_freq;
}

}  // namespace specbed
