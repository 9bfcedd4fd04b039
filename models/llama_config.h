// Architecture description of one Llama-family decoder: llama2.c checkpoints (stories260K),
// Llama-2/3 (incl. `llama3` rope scaling), Qwen2 (q/k/v bias), Qwen3 (q/k RMSNorm, explicit
// head_dim) and Mistral (Llama's math; a sliding window caps the context). Parsed from Hugging
// Face config.json or from a llama2.c header.
// Checked by: tests/models/hf_checkpoint_test.cpp (round trips), tests/models/config_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace specbed {

// The attention-shape checks every Llama-style config shares (the target's LlamaConfig, the
// EAGLE-3 head's): heads a multiple of KV heads, an even head_dim (RoPE rotates pairs), finite
// positive rope_theta and rms_norm_eps. Errors name `source` and the HF field (with
// `llama2c_names`, also llama2.c's: "num_attention_heads (n_heads)").
void CheckAttentionShape(const std::string& source, int64_t n_heads, int64_t n_kv_heads,
                         int64_t head_dim, double rope_theta, double rms_norm_eps,
                         bool llama2c_names = false);

enum class RopeScalingType { kNone, kLinear, kLlama3 };

struct RopeScaling {
  RopeScalingType type = RopeScalingType::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;                     // llama3 only
  double high_freq_factor = 4.0;                    // llama3 only
  int64_t original_max_position_embeddings = 8192;  // llama3 only
};

// Upper bounds on config sizes, far above any published model (Llama-3.1-405B: 126 layers,
// hidden 16384, intermediate 53248, 128 heads; the largest vocabularies ~262k; 10M-token contexts).
// A config beyond them is refused before anything is allocated.
constexpr int64_t kMaxConfigLayers = 4096;
constexpr int64_t kMaxConfigDim = int64_t{1} << 18;
constexpr int64_t kMaxConfigHeads = 4096;
constexpr int64_t kMaxConfigVocab = int64_t{1} << 24;
constexpr int64_t kMaxConfigPositions = int64_t{1} << 26;

struct LlamaConfig {
  // "llama2c", "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM" or "MistralForCausalLM".
  std::string architecture = "LlamaForCausalLM";
  int64_t dim = 0;         // hidden_size
  int64_t n_layers = 0;    // num_hidden_layers
  int64_t n_heads = 0;     // num_attention_heads
  int64_t n_kv_heads = 0;  // num_key_value_heads (GQA when < n_heads)
  int64_t head_dim = 0;    // explicit in Qwen3 configs, else dim / n_heads
  int64_t hidden_dim = 0;  // intermediate_size (SwiGLU inner width)
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;  // max_position_embeddings (capped at sliding_window when set)
  // Mistral's attention window W (0 = none): a query attends to the W latest positions. SpecBed
  // attends to every earlier position, which is the same function while a sequence holds at most W
  // tokens, so ParseHfConfig caps max_seq_len at W (every cache and run respects max_seq_len).
  int64_t sliding_window = 0;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;       // rms_norm_eps
  bool tie_embeddings = false;  // lm_head shares tok_embeddings
  bool qkv_bias = false;        // Qwen2: q/k/v projections have a bias
  bool qk_norm = false;         // Qwen3: per-head RMSNorm on q and k before RoPE
  // RoPE pairing: true = adjacent pairs (2i, 2i+1) as in llama2.c / Meta checkpoints;
  // false = halves (i, i + head_dim/2) as in Hugging Face checkpoints ("rotate_half").
  bool rope_interleaved = false;
  RopeScaling rope_scaling;
  int64_t bos_token_id = -1;            // -1 = none
  std::vector<int64_t> eos_token_ids;   // may be empty
  std::string torch_dtype = "float32";  // as stored in the checkpoint
  // Cost twins (models/twin/cost_twin.h): the original model's depth, i.e. the layers that carry
  // features (the rest are appended identity layers), and the plain-words label of the twin.
  // 0 / "" for ordinary checkpoints.
  int64_t twin_feature_depth = 0;
  std::string twin_label;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }
  // Layers that carry features: the original depth of a cost twin, else n_layers. Every rule that
  // picks target layers (EAGLE-3 low/mid/high, DFlash target_layer_ids) applies to this depth.
  int64_t FeatureDepth() const { return twin_feature_depth > 0 ? twin_feature_depth : n_layers; }

  // Throws specbed::Error naming `source` when a field is missing, non-positive or inconsistent
  // (e.g. n_heads not a multiple of n_kv_heads, odd head_dim).
  // Also caps every size at a bound no real model reaches (kMaxConfig*), so a corrupt or
  // hostile config fails here instead of allocating.
  void Validate(const std::string& source) const;
  // Hugging Face config.json for this architecture (what the writer stores).
  nlohmann::json ToHfJson() const;
  // Approximate parameter count (embeddings counted once when tied).
  int64_t ParameterCount() const;
};

// Parses a Hugging Face config.json object. `source` (usually the file path) is named in errors.
// Supports model_type llama / qwen2 / qwen3 / mistral (and their *ForCausalLM architectures).
LlamaConfig ParseHfConfig(const nlohmann::json& json, const std::string& source);

// Inverse RoPE frequencies for `config` (head_dim/2 values, llama3/linear scaling applied).
std::vector<double> RopeInverseFrequencies(const LlamaConfig& config);

}  // namespace specbed
