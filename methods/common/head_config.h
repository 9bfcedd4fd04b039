// What the drafter heads' config.json readers share (EAGLE-3's Eagle3Config, DFlash's
// DflashConfig, and the next head with the same member names): the decoder-layer fields, read
// through the engine's own parser (ParseHfConfig) so defaults and errors match a target's; the
// RoPE part as a LlamaConfig (Hugging Face rotate_half pairing); and the layer fields re-checked
// with the engine's rules (LlamaConfig::Validate).
// Checked by: tests/methods/eagle3_head_test.cpp, tests/methods/dflash_head_test.cpp (their
// config round trips and malformed-config cases).
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace specbed
