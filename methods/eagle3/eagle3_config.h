// Configuration of an EAGLE-3 draft head (Li et al., "EAGLE-3: Scaling up Inference Acceleration
// of LLMs via Training-Time Test", 2025): one Llama decoder layer whose attention reads
// [input_layernorm(token embedding) | hidden_norm(fused target features)] (width 2H), an `fc`
// that fuses three target hidden states (3 * target_hidden_size -> H), and a reduced-vocabulary
// lm_head. Parsed from / written to the published config.json layout (architectures
// ["LlamaForCausalLMEagle3"]), also accepting the vLLM "speculators" wrapper.
// Checked by: tests/methods/eagle3_head_test.cpp (round trip, real-layout parsing, every error).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/llama_config.h"

namespace specbed {

// Number of target hidden states the head fuses (low, middle, high layer).
constexpr int64_t kEagle3AuxLayers = 3;

struct Eagle3Config {
  int64_t hidden_size = 0;         // H: the draft layer's width (= the target's embedding width)
  int64_t intermediate_size = 0;   // SwiGLU inner width
  int64_t n_heads = 0;             // num_attention_heads
  int64_t n_kv_heads = 0;          // num_key_value_heads (GQA when < n_heads)
  int64_t head_dim = 0;            // explicit head_dim, else hidden_size / n_heads
  int64_t target_hidden_size = 0;  // Ht: width of one target hidden state (default H)
  int64_t vocab_size = 0;          // V: target vocabulary (token ids fed to the head)
  int64_t draft_vocab_size = 0;    // Vd: lm_head rows (default V)
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // Target hidden-state indices in Hugging Face output_hidden_states numbering (index i = the
  // input of decoder layer i, 0 = embeddings), low to high. Empty = DefaultEagle3AuxLayers of
  // the target (decided by whoever pairs the head with a target).
  std::vector<int64_t> aux_layer_ids;
  // true: the attention residual is hidden_norm(g) instead of g (some newer checkpoints).
  bool norm_before_residual = false;
  int64_t bos_token_id = -1;            // -1 = none
  std::vector<int64_t> eos_token_ids;   // may be empty
  std::string torch_dtype = "float32";  // as stored in the checkpoint

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }
  int64_t fc_in_dim() const { return kEagle3AuxLayers * target_hidden_size; }

  // Throws specbed::Error naming `source` and the field for a non-positive size, draft vocab
  // larger than the vocab, n_heads not a multiple of n_kv_heads, odd head_dim, bad rope values,
  // aux_layer_ids not empty and not exactly 3 non-negative ids.
  void Validate(const std::string& source) const;
  // Parameters of the head itself (fc, layer, norm, lm_head), without any token embedding.
  int64_t ParameterCount() const;
  // The RoPE-relevant part as a LlamaConfig (head_dim, theta, scaling, rotate_half pairing), so
  // RopeInverseFrequencies applies unchanged.
  LlamaConfig RopeConfig() const;
};

// Parses an EAGLE-3 head config.json object. `source` (usually the file path) is named in errors.
// Accepted layouts:
// - published (SafeAILab/EAGLE, SpecForge, SGLang): architectures[0] "LlamaForCausalLMEagle3"
//   (or vLLM's "Eagle3LlamaForCausalLM"), Llama fields at top level, draft_vocab_size,
//   target_hidden_size, norm_before_residual, eagle_config.eagle_aux_hidden_state_layer_ids (or
//   a top-level eagle_aux_hidden_state_layer_ids);
// - vLLM speculators: speculators_model_type "eagle3" with the Llama fields under
//   transformer_layer_config and the EAGLE-3 fields at top level (norm_before_residual defaults
//   to true there, as in vLLM).
// Llama fields (sizes, rms_norm_eps, rope_theta default 10000, rope_scaling / rope_parameters of
// type default / linear / llama3, bos/eos, hidden_act silu) go through ParseHfConfig.
// num_hidden_layers must be 1; fc_norm = true and norm_output = true are rejected as unsupported.
Eagle3Config ParseEagle3Config(const nlohmann::json& j, const std::string& source);

// The published config.json layout for `config` (architectures ["LlamaForCausalLMEagle3"],
// model_type llama, num_hidden_layers 1, tie_word_embeddings false, torch_dtype, and
// eagle_config.eagle_aux_hidden_state_layer_ids when aux_layer_ids is set).
// ParseEagle3Config(Eagle3ConfigToJson(c)) == c.
nlohmann::ordered_json Eagle3ConfigToJson(const Eagle3Config& config);

// The EAGLE-3 default target layers for a target with `target_layers` decoder layers:
// {2, L/2, L-3} in Hugging Face hidden-state numbering (index i = input of decoder layer i), as
// in SafeAILab/EAGLE, vLLM and SGLang. Llama-3.1-8B (L=32): {2, 16, 29}. The ids collapse for
// tiny targets (L=5 -> {2, 2, 2}; L=4 -> {2, 2, 1}); a checkpoint's own
// eagle_aux_hidden_state_layer_ids (Eagle3Config::aux_layer_ids) wins over this default.
// Throws specbed::Error when target_layers < 3.
std::vector<int64_t> DefaultEagle3AuxLayers(int64_t target_layers);

}  // namespace specbed
