// EAGLE-3 head config.json parsing / writing and the default target aux layers. The Llama part of
// the config goes through ParseHfConfig so field defaults and errors match the engine's.
// Checked by: tests/methods/eagle3_head_test.cpp.
#include "methods/eagle3/eagle3_config.h"

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

// "LlamaForCausalLM": the SafeAILab EAGLE-3 training template's config (the head is one Llama
// decoder layer; the EAGLE-3 fields and the single layer say what it is).
const std::vector<std::string> kArchitectures = {"LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM",
                                                 "LlamaForCausalLM"};

}  // namespace

void Eagle3Config::Validate(const std::string& source) const {
  const std::pair<const char*, int64_t> positive[] = {
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_attention_heads", n_heads},
      {"num_key_value_heads", n_kv_heads},
      {"head_dim", head_dim},
      {"target_hidden_size", target_hidden_size},
      {"vocab_size", vocab_size},
      {"draft_vocab_size", draft_vocab_size},
      {"max_position_embeddings", max_position_embeddings},
  };
  for (const auto& [name, value] : positive) {
    SPECBED_CHECK(value > 0, source, ": ", name, " must be positive, got ", value);
  }
  SPECBED_CHECK(draft_vocab_size <= vocab_size, source, ": draft_vocab_size ", draft_vocab_size,
                " is larger than vocab_size ", vocab_size);
  CheckAttentionShape(source, n_heads, n_kv_heads, head_dim, rope_theta, rms_norm_eps);
  SPECBED_CHECK(
      aux_layer_ids.empty() || static_cast<int64_t>(aux_layer_ids.size()) == kEagle3AuxLayers,
      source, ": eagle_aux_hidden_state_layer_ids must list exactly ", kEagle3AuxLayers,
      " target layers, got ", aux_layer_ids.size());
  for (int64_t id : aux_layer_ids) {
    SPECBED_CHECK(id >= 0, source, ": eagle_aux_hidden_state_layer_ids has negative id ", id);
  }
  RopeConfig().Validate(source);  // the layer fields, with the engine's rules
}

int64_t Eagle3Config::ParameterCount() const {
  const int64_t h = hidden_size;
  return h * fc_in_dim()              // fc
         + 3 * h                      // hidden_norm, input_layernorm, post_attention_layernorm
         + qkv_dim() * 2 * h          // q, k, v over [embedding | feature]
         + h * q_dim()                // o_proj
         + 3 * h * intermediate_size  // gate, up, down
         + h                          // final norm
         + draft_vocab_size * h;      // lm_head
}

LlamaConfig Eagle3Config::RopeConfig() const {
  return HeadLayerConfig(*this, "LlamaForCausalLM", /*n_layers=*/1);
}

// The fields of ParseEagle3Config; nlohmann type errors escape (see ParseEagle3Config).
static Eagle3Config ParseEagle3ConfigFields(const json& j, const std::string& source) {
  SPECBED_CHECK(j.is_object(), source, ": config must be a JSON object, got ", j.type_name());

  // Where the Llama layer fields and the EAGLE-3 fields live.
  const bool speculators = Has(j, "speculators_model_type") || Has(j, "transformer_layer_config");
  json layer;
  std::string layer_source = source;
  if (speculators) {
    const json& type = j.value("speculators_model_type", json());
    SPECBED_CHECK(type == json("eagle3"), source,
                  ": speculators_model_type must be \"eagle3\", got ", type.dump(),
                  " (only EAGLE-3 speculators are EAGLE-3 heads)");
    SPECBED_CHECK(Has(j, "transformer_layer_config") && j["transformer_layer_config"].is_object(),
                  source,
                  ": speculators config needs a \"transformer_layer_config\" object (the Llama "
                  "decoder layer config)");
    layer = j["transformer_layer_config"];
    layer_source = source + ": transformer_layer_config";
  } else {
    CheckKnownName(GetArchitecture(j, source, kArchitectures[0]), "EAGLE-3 architecture",
                   kArchitectures, source + ": field \"architectures\"");
    layer = j;
  }

  // The decoder layer is a plain Llama layer: let the engine's parser read and check it.
  SPECBED_CHECK(layer.is_object(), layer_source, ": expected a JSON object");
  const int64_t n_layers = GetInt(layer, "num_hidden_layers", layer_source, 1);
  SPECBED_CHECK(n_layers == 1, layer_source, ": num_hidden_layers is ", n_layers,
                ", expected 1 (an EAGLE-3 head has one decoder layer, \"midlayer\")");
  json llama = layer;
  llama.erase("architectures");
  llama["model_type"] = "llama";  // the head's layer is Llama whatever the target family
  llama["num_hidden_layers"] = 1;
  llama.erase("tie_word_embeddings");  // the head has no tied embedding by construction
  const LlamaConfig lc = ParseHfConfig(llama, layer_source);

  Eagle3Config c;
  CopyLayerFields(lc, c);

  // EAGLE-3 fields: top level in both layouts (speculators keep them outside the layer config;
  // a value inside the layer config is accepted when the top level has none).
  auto eagle_int = [&](const char* field, int64_t fallback) {
    if (Has(j, field)) return GetInt(j, field, source, fallback);
    return GetInt(layer, field, layer_source, fallback);
  };
  auto eagle_bool = [&](const char* field, bool fallback) {
    if (Has(j, field)) return GetBool(j, field, source, fallback);
    return GetBool(layer, field, layer_source, fallback);
  };
  c.draft_vocab_size = eagle_int("draft_vocab_size", c.vocab_size);
  c.target_hidden_size = eagle_int("target_hidden_size", c.hidden_size);
  c.norm_before_residual = eagle_bool("norm_before_residual", speculators);
  SPECBED_CHECK(!eagle_bool("fc_norm", false), source,
                ": fc_norm = true (a per-chunk RMSNorm before fc) is not supported by SpecBed's "
                "EAGLE-3 head (see methods/eagle3/README.md)");
  SPECBED_CHECK(!eagle_bool("norm_output", false), source,
                ": norm_output = true is not supported by SpecBed's EAGLE-3 head (see "
                "methods/eagle3/README.md)");

  if (Has(j, "eagle_aux_hidden_state_layer_ids")) {
    c.aux_layer_ids = GetIntList(j, "eagle_aux_hidden_state_layer_ids", source);
  } else if (Has(layer, "eagle_aux_hidden_state_layer_ids")) {
    c.aux_layer_ids = GetIntList(layer, "eagle_aux_hidden_state_layer_ids", layer_source);
  }
  if (Has(j, "eagle_config")) {
    const json& ec = j["eagle_config"];
    const std::string ec_source = source + ": eagle_config";
    SPECBED_CHECK(ec.is_object(), source, ": field \"eagle_config\" must be an object, got ",
                  ec.dump());
    SPECBED_CHECK(GetBool(ec, "use_aux_hidden_state", ec_source, true), ec_source,
                  ": use_aux_hidden_state = false is not supported (an EAGLE-3 head fuses ",
                  kEagle3AuxLayers, " target hidden states)");
    if (Has(ec, "eagle_aux_hidden_state_layer_ids")) {
      const auto ids = GetIntList(ec, "eagle_aux_hidden_state_layer_ids", ec_source);
      SPECBED_CHECK(c.aux_layer_ids.empty() || c.aux_layer_ids == ids, ec_source,
                    ": eagle_aux_hidden_state_layer_ids differs from the top-level field of the "
                    "same name");
      c.aux_layer_ids = ids;
    }
  }
  c.Validate(source);
  return c;
}

Eagle3Config ParseEagle3Config(const json& j, const std::string& source) {
  // A type error (a string where a number belongs, ...) names the file and the field's JSON
  // pointer.
  return WithJsonContext(source, [&] { return ParseEagle3ConfigFields(j, source); });
}

nlohmann::ordered_json Eagle3ConfigToJson(const Eagle3Config& c) {
  c.Validate("Eagle3ConfigToJson");
  const LlamaConfig layer = c.RopeConfig();
  nlohmann::ordered_json j;
  j["architectures"] = {"LlamaForCausalLMEagle3"};
  j["model_type"] = "llama";
  WriteLayerFieldsJson(c, layer, j);
  j["draft_vocab_size"] = c.draft_vocab_size;
  j["target_hidden_size"] = c.target_hidden_size;
  j["norm_before_residual"] = c.norm_before_residual;
  WriteTokenFieldsJson(c, layer, j);
  if (!c.aux_layer_ids.empty()) {
    j["eagle_config"] = {{"eagle_aux_hidden_state_layer_ids", c.aux_layer_ids},
                         {"use_aux_hidden_state", true}};
  }
  return j;
}

std::vector<int64_t> DefaultEagle3AuxLayers(int64_t target_layers) {
  SPECBED_CHECK(target_layers >= 3, "EAGLE-3 needs a target with at least 3 decoder layers for ",
                "its default aux layers {2, L/2, L-3}, got L = ", target_layers);
  return {2, target_layers / 2, target_layers - 3};
}

}  // namespace specbed
