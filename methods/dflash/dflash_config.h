// Configuration of a DFlash block-diffusion draft head (Chen, Liang, Liu, "DFlash: Block Diffusion
// for Flash Speculative Decoding", 2026): a stack of Qwen3-style decoder layers without embedding
// or LM head of its own (the target's are shared), conditioned on fused target hidden states that
// are injected as extra keys/values in every layer, drafting a whole block of `block_size`
// positions [last committed token, MASK, ..., MASK] in one non-causal forward. Parsed from /
// written to the published config.json layout (architectures ["DFlashDraftModel"]).
// Checked by: tests/methods/dflash_head_test.cpp (round trip, published-layout parsing, every
// error, the default target layer rule).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/llama_config.h"

namespace specbed {

// block_size when a config gives none (z-lab's DFlash default).
constexpr int64_t kDflashDefaultBlockSize = 16;

struct DflashConfig {
  int64_t hidden_size = 0;        // H: draft width = the target's hidden size (shared embedding)
  int64_t intermediate_size = 0;  // SwiGLU inner width
  int64_t n_layers = 0;           // num_hidden_layers (draft decoder layers)
  int64_t n_heads = 0;            // num_attention_heads
  int64_t n_kv_heads = 0;         // num_key_value_heads (GQA when < n_heads)
  int64_t head_dim = 0;           // explicit head_dim (Qwen3 default 128 when absent)
  int64_t vocab_size = 0;         // V: the target vocabulary (logits via the target's lm_head)
  int64_t max_position_embeddings = 32768;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t block_size = 0;         // B: positions drafted per forward (bonus token + B-1 masks)
  int64_t mask_token_id = -1;     // dflash_config.mask_token_id; -1 = absent (older checkpoints)
  int64_t num_target_layers = 0;  // target decoder layers; 0 = unknown (absent)
  // 0-based target decoder layer ids whose OUTPUTS are fused (Hugging Face hidden_states[id + 1]),
  // low to high. Empty = DefaultDflashTargetLayers(num_target_layers, n_layers) (needs
  // num_target_layers); use TargetLayerIds() to get the effective list.
  std::vector<int64_t> target_layer_ids;
  // SpecBed extension (not in the published layout): causal attention inside the block (block row
  // i sees the context and block rows <= i) instead of the bidirectional block, so JetSpec's
  // causal variant reuses the head. Written as the top-level "specbed_causal": true only when set.
  bool causal = false;
  // Per-layer attention from "layer_types": true for a "sliding_attention" layer, whose queries
  // see only keys less than `sliding_window` positions behind them (query position - key
  // position < sliding_window, as Hugging Face's sliding-window mask), context and block rows
  // alike. Empty = every layer "full_attention".
  std::vector<bool> sliding_layers;
  int64_t sliding_window = 0;  // config "sliding_window"; required (>= 1) when a layer slides
  int64_t bos_token_id = -1;   // -1 = none
  std::vector<int64_t> eos_token_ids;    // may be empty
  std::string torch_dtype = "bfloat16";  // as stored in the checkpoint

  // The attention window of decoder layer `layer`: sliding_window for a sliding layer, else 0
  // (full attention).
  int64_t LayerWindow(int64_t layer) const {
    return layer < static_cast<int64_t>(sliding_layers.size()) && sliding_layers[layer]
               ? sliding_window
               : 0;
  }
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  // Number of fused target layers (the effective target_layer_ids' size).
  int64_t num_features() const;
  int64_t fc_in_dim() const { return num_features() * hidden_size; }
  // target_layer_ids, or the default rule when empty. Throws specbed::Error when both
  // target_layer_ids and num_target_layers are absent.
  std::vector<int64_t> TargetLayerIds() const;

  // Throws specbed::Error naming `source` and the field for a non-positive size, block_size < 2,
  // n_heads not a multiple of n_kv_heads, odd head_dim, bad rope values, mask_token_id outside
  // [-1, V), a negative target layer id or one >= num_target_layers (when known), or neither
  // target_layer_ids nor num_target_layers given.
  void Validate(const std::string& source) const;
  // Parameters of the draft (fc, norms, layers), without the shared embedding / lm_head.
  int64_t ParameterCount() const;
  // The RoPE-relevant part as a LlamaConfig (head_dim, theta, scaling, rotate_half pairing), so
  // RopeInverseFrequencies applies unchanged.
  LlamaConfig RopeConfig() const;
};

// Parses a DFlash draft config.json object. `source` (usually the file path) is named in errors.
// Layout (z-lab/dflash, SpecForge configs/qwen3-*-dflash.json): architectures[0]
// "DFlashDraftModel", Qwen3 fields at top level (model_type qwen3 or llama: the draft layers are
// always Qwen3-style with q_norm / k_norm), block_size (top level, or only inside dflash_config
// as newer z-lab configs have it, or absent: 16, z-lab's default; both places must agree),
// num_target_layers, dflash_config {mask_token_id, target_layer_ids, block_size, is_causal} (all
// optional), layer_types ("full_attention" or "sliding_attention" with "sliding_window"; any
// other type is refused by name), attention_bias must be false, optional causal flag: upstream
// "is_causal" (top level or in dflash_config) or SpecBed's "specbed_causal" (they must agree).
// Sizes, rms_norm_eps, rope_theta / rope_scaling, bos/eos, hidden_act silu and torch_dtype /
// dtype go through ParseHfConfig.
DflashConfig ParseDflashConfig(const nlohmann::json& j, const std::string& source);

// The published config.json layout for `config` (architectures ["DFlashDraftModel"], auto_map,
// model_type qwen3, layer_types (sliding_attention for sliding layers, with sliding_window;
// full_attention otherwise), attention_bias false,
// tie_word_embeddings false, dflash_config with mask_token_id when >= 0 and target_layer_ids when
// set; "specbed_causal": true when causal). ParseDflashConfig(DflashConfigToJson(c)) == c.
nlohmann::ordered_json DflashConfigToJson(const DflashConfig& config);

// The DFlash default target layers (z-lab/dflash build_target_layer_ids), 0-based decoder layer
// ids: one draft layer -> {L / 2}; else n ids evenly spaced from layer 1 to layer L - 3,
// round(1 + i * (L - 4) / (n - 1)) with Python's round-half-to-even. Qwen3-8B (L = 36, n = 5):
// {1, 9, 17, 25, 33}. Throws specbed::Error when num_draft_layers < 1, or when
// target_layers < 4 with more than one draft layer (the span would be empty or negative), or
// target_layers < 1.
std::vector<int64_t> DefaultDflashTargetLayers(int64_t target_layers, int64_t num_draft_layers);

}  // namespace specbed
