// Hugging Face checkpoint directories (config.json + model.safetensors, or sharded
// model-0000i-of-0000n.safetensors + model.safetensors.index.json) for Llama / Qwen2 / Qwen3:
// reading into HF-named tensors, mapping those to the engine's fused LlamaWeights, writing, and
// random HF-named tensors for tests and benchmark shapes. Formats: models/checkpoint/README.md.
// Checked by: tests/models/hf_checkpoint_test.cpp (round trips single-file/sharded, fp32/bf16/fp16,
// fusion layout, every missing/wrong-shape/extra-tensor and malformed-config error).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

#include "models/llama_config.h"
#include "models/llama_weights.h"

namespace specbed {

// The Hugging Face layout's file names (model and head checkpoints alike).
inline constexpr const char* kHfConfigFile = "config.json";
inline constexpr const char* kHfSingleFile = "model.safetensors";

// A checkpoint as stored: config plus tensors under their HF names, each a contiguous CPU tensor
// of one dtype (float32 or bfloat16) in the stored shape.
struct HfModel {
  LlamaConfig config;
  std::map<std::string, at::Tensor> tensors;
};

// Reads dir/config.json and dir/model.safetensors, or (when that file is absent) the shards
// listed in dir/model.safetensors.index.json ("weight_map"). Stored F32/F16/BF16 tensors are
// converted to `dtype` (at::kFloat or at::kBFloat16; F16 goes through float). Throws
// specbed::Error naming the file (and tensor) for missing files, malformed JSON/safetensors,
// non-float tensors, a tensor in two shards, or weight_map entries missing from their shard.
HfModel ReadHfCheckpoint(const std::string& dir, at::ScalarType dtype = at::kFloat);

// The HF tensor names `config` needs, with their shapes (lm_head.weight omitted when tied).
std::map<std::string, std::vector<int64_t>> ExpectedHfTensorShapes(const LlamaConfig& config);

// Engine weights from HF-named `tensors` (all one dtype, float32 or bfloat16, on one device).
// Checks every expected tensor exists with the expected shape, fuses q/k/v (+ Qwen2 biases) and
// gate/up, keeps Qwen3 q_norm/k_norm, ties lm_head to the embeddings when config.tie_embeddings
// and lm_head.weight is absent (if present while tied it must equal the embeddings). Tensors
// not used by `config` are an error unless known-ignorable ("*rotary_emb.inv_freq").
// Errors name `source`, the tensor and the expected/actual shape.
LlamaWeights WeightsFromHfTensors(const LlamaConfig& config,
                                  const std::map<std::string, at::Tensor>& tensors,
                                  const std::string& source);

struct LoadedModel {
  LlamaConfig config;
  LlamaWeights weights;
};

// ReadHfCheckpoint + WeightsFromHfTensors (CPU tensors of `dtype`).
LoadedModel LoadHfCheckpoint(const std::string& dir, at::ScalarType dtype = at::kFloat);

// Writes dir/config.json (config.ToHfJson(), torch_dtype set from `store_dtype`) and the tensors
// (any float dtype, any device, real HF names) stored as `store_dtype` (kFloat, kBFloat16 or
// kHalf): one dir/model.safetensors when max_shard_bytes == 0, else shards of at most
// max_shard_bytes each (a larger single tensor gets its own shard) named
// model-00001-of-0000n.safetensors plus model.safetensors.index.json. Creates `dir`; removes a
// stale single file / index of the other layout. Does not check the tensors against `config`.
void WriteHfCheckpoint(const std::string& dir, const LlamaConfig& config,
                       const std::map<std::string, at::Tensor>& tensors,
                       at::ScalarType store_dtype = at::kFloat, int64_t max_shard_bytes = 0);

// out[i] = mean + stddev * N(0, 1) for i < n: Box-Muller over counter-based uniforms keyed by
// `key` (splitmix64), so the values depend only on (key, i) — not on threads, LibTorch's RNG or
// its version. Used for every seeded random init (HF tensors, EAGLE-3 heads).
void FillSeededNormal(float* out, int64_t n, uint64_t key, double mean, double stddev);
// out[i] uniform in [-bound, bound) from the same counter-based uniforms (PyTorch nn.Linear's
// default bias init is bound = 1 / sqrt(fan_in)).
void FillSeededUniform(float* out, int64_t n, uint64_t key, double bound);

// Random HF-named tensors for `config` (CPU, `dtype` kFloat or kBFloat16): normal(0, 0.02) for
// embeddings/projections/head, 1 + 0.1*normal for RMSNorm weights (incl. q/k norms),
// normal(0, 0.02) biases. Deterministic in (seed, tensor name) and independent of the LibTorch
// version and thread count (own counter-based generator).
std::map<std::string, at::Tensor> RandomHfTensors(const LlamaConfig& config, uint64_t seed,
                                                  at::ScalarType dtype = at::kFloat);

}  // namespace specbed
