// What the drafter heads' config.json readers share (EAGLE-3's Eagle3Config, DFlash's
// DflashConfig, and the next head with the same member names): the decoder-layer fields, read
// through the engine's own parser (ParseHfConfig) so defaults and errors match a target's; the
// RoPE part as a LlamaConfig (Hugging Face rotate_half pairing); and the layer fields re-checked
// with the engine's rules (LlamaConfig::Validate); and reading / writing a head checkpoint
// directory around the head's own config parser and tensor checks.
// Checked by: tests/methods/eagle3_head_test.cpp, tests/methods/dflash_head_test.cpp (their
// config round trips and malformed-config cases).
#pragma once

#include <cstdint>
#include <string>

#include <functional>
#include <map>
#include <utility>

#include <nlohmann/json.hpp>

#include "harness/base/names.h"
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

// The head's RoPE as a LlamaConfig of `architecture` (heads, head_dim, theta, scaling,
// rotate_half pairing), so RopeInverseFrequencies applies unchanged.
template <typename HeadConfig>
LlamaConfig HeadRopeConfig(const HeadConfig& c, const std::string& architecture) {
  LlamaConfig rope;
  rope.architecture = architecture;
  rope.n_heads = c.n_heads;
  rope.n_kv_heads = c.n_kv_heads;
  rope.head_dim = c.head_dim;
  rope.rope_theta = c.rope_theta;
  rope.rope_scaling = c.rope_scaling;
  rope.rope_interleaved = false;  // Hugging Face rotate_half pairing
  return rope;
}

// Checks the layer fields with the engine's rules (sizes, theta and scaling factors, bos/eos):
// `rope` (the head's RoPE config) completed with the sizes of `n_layers` layers.
template <typename HeadConfig>
void ValidateLayerFields(const HeadConfig& c, LlamaConfig rope, int64_t n_layers,
                         const std::string& source) {
  rope.dim = c.hidden_size;
  rope.n_layers = n_layers;
  rope.hidden_dim = c.intermediate_size;
  rope.vocab_size = c.vocab_size;
  rope.max_seq_len = c.max_position_embeddings;
  rope.norm_eps = c.rms_norm_eps;
  rope.bos_token_id = c.bos_token_id;
  rope.eos_token_ids = c.eos_token_ids;
  rope.Validate(source);
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
// to_json(config), after validate(config, tensors, where).
template <typename Config, typename ToJson, typename Validate>
void WriteHeadCheckpointAs(const std::string& dir, const std::string& what, const Config& config,
                           const std::map<std::string, at::Tensor>& tensors,
                           const nlohmann::json& recipe, SafetensorsDtype float_dtype,
                           ToJson to_json, Validate validate) {
  const std::string where = "writing " + what + " checkpoint '" + dir + "'";
  Config stored = config;
  stored.torch_dtype = HeadTorchDtype(float_dtype, where);
  validate(config, tensors, where);
  WriteHeadCheckpoint(dir, to_json(stored), recipe, tensors, float_dtype, where);
}

}  // namespace specbed
