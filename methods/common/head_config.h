// What the drafter heads' config.json readers and writers share (EAGLE-3's Eagle3Config, DFlash's
// DflashConfig, and the next head with the same member names): the decoder-layer fields, read
// through the engine's own parser (ParseHfConfig) so defaults and errors match a target's; the
// layers as a LlamaConfig (HeadLayerConfig: RoPE with Hugging Face rotate_half pairing, checked
// with the engine's rules by LlamaConfig::Validate); writing the layer and token fields back under
// Hugging Face's names; and reading / writing a head checkpoint directory around the head's own
// config parser and tensor checks.
// Checked by: tests/methods/eagle3_head_test.cpp, tests/methods/dflash_head_test.cpp (their
// config round trips and malformed-config cases).
#pragma once

#include <cstdint>
#include <string>

#include <functional>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/names.h"
#include "models/checkpoint/head_checkpoint.h"
#include "models/llama_config.h"

namespace specbed {

// The decoder-layer fields of a head config from the engine's parse of its layer.
template <typename HeadConfig>
void CopyLayerFields(const LlamaConfig& lc, HeadConfig& c) {
  c.hidden_size = lc.dim;
  c.intermediate_size = lc.hidden_dim;
  c.n_heads = lc.n_heads;
  c.n_kv_heads = lc.n_kv_heads;
  c.head_dim = lc.head_dim;
  c.vocab_size = lc.vocab_size;
  c.max_position_embeddings = lc.max_seq_len;
  c.rms_norm_eps = lc.norm_eps;
  c.rope_theta = lc.rope_theta;
  c.rope_scaling = lc.rope_scaling;
  c.bos_token_id = lc.bos_token_id;
  c.eos_token_ids = lc.eos_token_ids;
  c.torch_dtype = lc.torch_dtype;
}

// The head's `n_layers` decoder layers as a LlamaConfig of `architecture`: sizes, heads, norm eps,
// RoPE (Hugging Face rotate_half pairing) and bos/eos, so RopeInverseFrequencies,
// LlamaConfig::Validate (the engine's rules) and LlamaConfig::ToHfJson apply unchanged.
template <typename HeadConfig>
LlamaConfig HeadLayerConfig(const HeadConfig& c, const std::string& architecture,
                            int64_t n_layers) {
  LlamaConfig l;
  l.architecture = architecture;
  l.dim = c.hidden_size;
  l.n_layers = n_layers;
  l.n_heads = c.n_heads;
  l.n_kv_heads = c.n_kv_heads;
  l.head_dim = c.head_dim;
  l.hidden_dim = c.intermediate_size;
  l.vocab_size = c.vocab_size;
  l.max_seq_len = c.max_position_embeddings;
  l.norm_eps = c.rms_norm_eps;
  l.rope_theta = c.rope_theta;
  l.rope_scaling = c.rope_scaling;
  l.rope_interleaved = false;  // Hugging Face rotate_half pairing
  l.bos_token_id = c.bos_token_id;
  l.eos_token_ids = c.eos_token_ids;
  return l;
}

// Writes the decoder-layer fields every head's config.json carries, under Hugging Face's names,
// after what `j` holds: `layer` is the head's HeadLayerConfig (its rope_scaling is written as the
// engine writes a target's config.json).
template <typename HeadConfig>
void WriteLayerFieldsJson(const HeadConfig& c, const LlamaConfig& layer,
                          nlohmann::ordered_json& j) {
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = layer.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["rope_scaling"] = layer.ToHfJson()["rope_scaling"];
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["vocab_size"] = c.vocab_size;
}

// Writes the token fields that close a head's config.json: bos/eos as the engine writes them, no
// tied embeddings, and the checkpoint dtype.
template <typename HeadConfig>
void WriteTokenFieldsJson(const HeadConfig& c, const LlamaConfig& layer,
                          nlohmann::ordered_json& j) {
  const nlohmann::json llama_json = layer.ToHfJson();
  j["bos_token_id"] = llama_json["bos_token_id"];
  j["eos_token_id"] = llama_json["eos_token_id"];
  j["tie_word_embeddings"] = false;
  j["torch_dtype"] = c.torch_dtype;
}

// Names tensor `name` of the input `source` in errors: "SOURCE, tensor 'NAME'" (the default of
// the heads' tensor checks when no per-tensor origin is known).
using TensorWhere = std::function<std::string(const std::string& name)>;
inline TensorWhere TensorOf(const std::string& source) {
  return [source](const std::string& name) { return source + ", tensor '" + name + "'"; };
}

// Reads the head checkpoint directory `dir` (config.json + safetensors; `what` = "EAGLE-3" names it
// in errors, `hint` says how to convert a pickle-only head): the config through
// parse(json, path), the recipe, the tensors (names through `rename`) checked by
// check(config, tensors, where, origin_of_name).
template <typename Checkpoint, typename Parse, typename Check>
Checkpoint ReadHeadCheckpointAs(const std::string& dir, const std::string& what,
                                const std::string& hint, Parse parse, Check check,
                                const std::function<std::string(const std::string&)>& rename = {}) {
  const std::string where = what + " checkpoint '" + dir + "'";
  const HeadConfigFile file = ReadHeadConfig(dir, where);
  Checkpoint ckpt;
  ckpt.source = dir;
  ckpt.config = parse(file.config, file.path);
  ckpt.recipe = file.recipe;
  HeadTensors stored = ReadHeadTensors(dir, where, hint, rename);
  ckpt.tensors = std::move(stored.tensors);
  check(ckpt.config, ckpt.tensors, where + " (" + Join(stored.files, ", ") + ")",
        [&](const std::string& name) { return stored.origin.at(name); });
  return ckpt;
}

// Writes a head checkpoint: `config` with torch_dtype set from `float_dtype`, through
// to_json(config), after validate(config, tensors, where, TensorOf(where)).
template <typename Config, typename ToJson, typename Validate>
void WriteHeadCheckpointAs(const std::string& dir, const std::string& what, const Config& config,
                           const std::map<std::string, at::Tensor>& tensors,
                           const nlohmann::json& recipe, SafetensorsDtype float_dtype,
                           ToJson to_json, Validate validate) {
  const std::string where = "writing " + what + " checkpoint '" + dir + "'";
  Config stored = config;
  stored.torch_dtype = HeadTorchDtype(float_dtype, where);
  validate(config, tensors, where, TensorOf(where));
  WriteHeadCheckpoint(dir, to_json(stored), recipe, tensors, float_dtype, where);
}

}  // namespace specbed
