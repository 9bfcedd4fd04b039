// DFlash draft config.json parsing / writing and the default target layer rule. The Qwen3 part of
// the config goes through ParseHfConfig so field defaults and errors match the engine's.
// Checked by: tests/methods/dflash_head_test.cpp.
#include "methods/dflash/dflash_config.h"

#include <algorithm>

#include <cfenv>
#include <cmath>
#include <string>

#include "base/error.h"
#include "base/json_read.h"
#include "base/names.h"
#include "methods/common/head_config.h"
#include "models/config_fields.h"

namespace specbed {
namespace {

using namespace config_fields;  // GetInt, GetDouble, ...: the typed, source-naming readers

using nlohmann::json;

constexpr const char* kArchitecture = "DFlashDraftModel";
constexpr const char* kCausalKey = "specbed_causal";

}  // namespace

int64_t DflashConfig::num_features() const {
  if (!target_layer_ids.empty()) return static_cast<int64_t>(target_layer_ids.size());
  return n_layers;  // the default rule yields one id per draft layer
}

std::vector<int64_t> DflashConfig::TargetLayerIds() const {
  if (!target_layer_ids.empty()) return target_layer_ids;
  SPECBED_CHECK(num_target_layers > 0,
                "DFlash config has neither dflash_config.target_layer_ids nor num_target_layers; "
                "cannot derive the target layers");
  return DefaultDflashTargetLayers(num_target_layers, n_layers);
}

void DflashConfig::Validate(const std::string& source) const {
  const std::pair<const char*, int64_t> positive[] = {
      {"hidden_size", hidden_size},        {"intermediate_size", intermediate_size},
      {"num_hidden_layers", n_layers},     {"num_attention_heads", n_heads},
      {"num_key_value_heads", n_kv_heads}, {"head_dim", head_dim},
      {"vocab_size", vocab_size},          {"max_position_embeddings", max_position_embeddings},
  };
  for (const auto& [name, value] : positive) {
    SPECBED_CHECK(value > 0, source, ": ", name, " must be positive, got ", value);
  }
  SPECBED_CHECK(block_size >= 2, source,
                ": block_size must be at least 2 (bonus token + masks), got ", block_size);
  SPECBED_CHECK(mask_token_id >= -1 && mask_token_id < vocab_size, source,
                ": dflash_config.mask_token_id ", mask_token_id,
                " outside [0, vocab_size = ", vocab_size, ")");
  SPECBED_CHECK(num_target_layers >= 0, source, ": num_target_layers must be positive, got ",
                num_target_layers);
  SPECBED_CHECK(!target_layer_ids.empty() || num_target_layers > 0, source,
                ": needs dflash_config.target_layer_ids or num_target_layers (to derive them)");
  for (int64_t id : target_layer_ids) {
    SPECBED_CHECK(id >= 0, source, ": dflash_config.target_layer_ids has negative id ", id);
    SPECBED_CHECK(
        num_target_layers == 0 || id < num_target_layers, source,
        ": dflash_config.target_layer_ids has id ", id,
        ", outside the target's decoder layers [0, num_target_layers = ", num_target_layers, ")");
  }
  SPECBED_CHECK(sliding_layers.empty() || static_cast<int64_t>(sliding_layers.size()) == n_layers,
                source, ": layer_types has ", sliding_layers.size(),
                " entries, expected num_hidden_layers = ", n_layers);
  SPECBED_CHECK(sliding_layers.empty() || sliding_window >= 1, source,
                ": sliding_window must be >= 1 for \"sliding_attention\" layers, got ",
                sliding_window);
  if (target_layer_ids.empty()) {
    try {
      DefaultDflashTargetLayers(num_target_layers, n_layers);
    } catch (const Error& e) {
      Fail(source, ": no dflash_config.target_layer_ids and the default rule fails: ", e.what());
    }
  }
  RopeConfig().Validate(source);  // the layer fields, with the engine's rules
}

int64_t DflashConfig::ParameterCount() const {
  const int64_t h = hidden_size;
  const int64_t per_layer = 2 * h                             // input / post-attention norms
                            + q_dim() * h + 2 * kv_dim() * h  // q, k, v
                            + h * q_dim()                     // o_proj
                            + 2 * head_dim                    // q_norm, k_norm
                            + 3 * h * intermediate_size;      // gate, up, down
  return h * fc_in_dim() + h                                  // fc, hidden_norm
         + n_layers * per_layer + h;                          // layers, final norm
}

LlamaConfig DflashConfig::RopeConfig() const {
  LlamaConfig c = HeadLayerConfig(*this, "Qwen3ForCausalLM", n_layers);
  c.qk_norm = true;
  return c;
}

// The fields of ParseDflashConfig; nlohmann type errors escape (see ParseDflashConfig).
static DflashConfig ParseDflashConfigFields(const json& j, const std::string& source) {
  SPECBED_CHECK(j.is_object(), source, ": config must be a JSON object, got ", j.type_name());
  CheckKnownName(GetArchitecture(j, source, kArchitecture), "DFlash architecture", {kArchitecture},
                 source + ": field \"architectures\"");
  std::vector<bool> sliding;
  if (Has(j, "layer_types")) {
    const json& types = j["layer_types"];
    SPECBED_CHECK(types.is_array(), source, ": field \"layer_types\" must be a list, got ",
                  types.dump());
    for (size_t i = 0; i < types.size(); ++i) {
      SPECBED_CHECK(types[i] == json("full_attention") || types[i] == json("sliding_attention"),
                    source, ": layer_types[", i, "] is ", types[i].dump(),
                    "; SpecBed's DFlash head supports \"full_attention\" and "
                    "\"sliding_attention\"");
      sliding.push_back(types[i] == json("sliding_attention"));
    }
  }
  const bool any_sliding = std::find(sliding.begin(), sliding.end(), true) != sliding.end();

  // The draft layers are Qwen3 layers whatever the target family: let the engine's parser read
  // and check the shared fields.
  json qwen = j;
  qwen.erase("architectures");
  const std::string model_type = j.value("model_type", json("qwen3")).is_string()
                                     ? j.value("model_type", std::string("qwen3"))
                                     : std::string("?");
  SPECBED_CHECK(model_type == "qwen3" || model_type == "llama", source, ": model_type ",
                j["model_type"].dump(),
                " is not supported for a DFlash draft (expected \"qwen3\" or \"llama\")");
  qwen["model_type"] = "qwen3";
  qwen.erase("tie_word_embeddings");  // the draft has no embedding of its own
  // With layer_types, they say which layers slide (Qwen3's use_sliding_window / max_window_layers
  // only derive layer_types when it is absent).
  if (Has(j, "layer_types")) qwen.erase("use_sliding_window");
  const LlamaConfig lc = ParseHfConfig(qwen, source);

  DflashConfig c;
  CopyLayerFields(lc, c);
  c.n_layers = lc.n_layers;
  if (Has(j, "layer_types")) {
    SPECBED_CHECK(static_cast<int64_t>(j["layer_types"].size()) == c.n_layers, source,
                  ": layer_types has ", j["layer_types"].size(), " entries, expected ",
                  "num_hidden_layers = ", c.n_layers);
  }

  if (any_sliding) {
    SPECBED_CHECK(Has(j, "sliding_window"), source,
                  ": layer_types has \"sliding_attention\" layers but no \"sliding_window\"");
    c.sliding_window = GetInt(j, "sliding_window", source);
    c.sliding_layers = sliding;
  }
  c.num_target_layers = GetInt(j, "num_target_layers", source, 0);
  // block_size: top level (published configs), or only in dflash_config (newer z-lab configs),
  // or absent: z-lab's default of 16. The causal flag: upstream "is_causal" (top level or in
  // dflash_config) or SpecBed's "specbed_causal".
  std::vector<std::pair<std::string, int64_t>> block_sizes;
  std::vector<std::pair<std::string, bool>> causal_flags;
  if (Has(j, "block_size")) block_sizes.emplace_back("block_size", GetInt(j, "block_size", source));
  if (Has(j, kCausalKey))
    causal_flags.emplace_back(kCausalKey, GetBool(j, kCausalKey, source, false));
  if (Has(j, "is_causal"))
    causal_flags.emplace_back("is_causal", GetBool(j, "is_causal", source, false));
  if (Has(j, "dflash_config")) {
    const json& dc = j["dflash_config"];
    const std::string dc_source = source + ": dflash_config";
    SPECBED_CHECK(dc.is_object(), source, ": field \"dflash_config\" must be an object, got ",
                  dc.dump());
    c.mask_token_id = GetInt(dc, "mask_token_id", dc_source, -1);
    if (Has(dc, "target_layer_ids"))
      c.target_layer_ids = GetIntList(dc, "target_layer_ids", dc_source);
    if (Has(dc, "block_size")) {
      block_sizes.emplace_back("dflash_config.block_size", GetInt(dc, "block_size", dc_source));
    }
    if (Has(dc, "is_causal")) {
      causal_flags.emplace_back("dflash_config.is_causal",
                                GetBool(dc, "is_causal", dc_source, false));
    }
  }
  c.block_size = block_sizes.empty() ? kDflashDefaultBlockSize : block_sizes[0].second;
  for (const auto& [field, value] : block_sizes) {
    SPECBED_CHECK(value == c.block_size, source, ": ", block_sizes[0].first, " = ", c.block_size,
                  " but ", field, " = ", value, " (they must agree)");
  }
  c.causal = !causal_flags.empty() && causal_flags[0].second;
  for (const auto& [field, value] : causal_flags) {
    SPECBED_CHECK(value == c.causal, source, ": ", causal_flags[0].first, " = ",
                  c.causal ? "true" : "false", " but ", field, " = ", value ? "true" : "false",
                  " (they must agree)");
  }
  c.Validate(source);
  return c;
}

DflashConfig ParseDflashConfig(const json& j, const std::string& source) {
  // A type error (a string where a number belongs, ...) names the file and the field's JSON
  // pointer.
  return WithJsonContext(source, [&] { return ParseDflashConfigFields(j, source); });
}

nlohmann::ordered_json DflashConfigToJson(const DflashConfig& c) {
  c.Validate("DflashConfigToJson");
  const LlamaConfig layer = c.RopeConfig();
  nlohmann::ordered_json j;
  j["architectures"] = {kArchitecture};
  j["auto_map"] = {{"AutoModel", "dflash.DFlashDraftModel"}};
  j["model_type"] = "qwen3";
  j["block_size"] = c.block_size;
  nlohmann::ordered_json dc = nlohmann::ordered_json::object();
  if (c.mask_token_id >= 0) dc["mask_token_id"] = c.mask_token_id;
  if (!c.target_layer_ids.empty()) dc["target_layer_ids"] = c.target_layer_ids;
  j["dflash_config"] = dc;
  if (c.num_target_layers > 0) j["num_target_layers"] = c.num_target_layers;
  WriteLayerFieldsJson(c, layer, j);
  std::vector<std::string> layer_types;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    layer_types.push_back(c.LayerWindow(l) > 0 ? "sliding_attention" : "full_attention");
  }
  j["layer_types"] = layer_types;
  if (!c.sliding_layers.empty()) j["sliding_window"] = c.sliding_window;
  j["attention_bias"] = false;
  WriteTokenFieldsJson(c, layer, j);
  if (c.causal) j[kCausalKey] = true;
  return j;
}

std::vector<int64_t> DefaultDflashTargetLayers(int64_t target_layers, int64_t num_draft_layers) {
  SPECBED_CHECK(num_draft_layers >= 1, "DFlash default target layers: num_draft_layers must be ",
                "positive, got ", num_draft_layers);
  SPECBED_CHECK(target_layers >= 1, "DFlash default target layers: num_target_layers must be ",
                "positive, got ", target_layers);
  if (num_draft_layers == 1) return {target_layers / 2};
  SPECBED_CHECK(target_layers >= 4, "DFlash default target layers for ", num_draft_layers,
                " draft layers span layers 1 .. L-3 and need a target with at least 4 layers, ",
                "got num_target_layers = ", target_layers);
  const int64_t span = target_layers - 4;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < num_draft_layers; ++i) {
    // Python's round(): to nearest, ties to even (std::nearbyint in the default FE_TONEAREST).
    const double x =
        1.0 + static_cast<double>(i * span) / static_cast<double>(num_draft_layers - 1);
    ids.push_back(static_cast<int64_t>(std::nearbyint(x)));
  }
  return ids;
}

}  // namespace specbed
