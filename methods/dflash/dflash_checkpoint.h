// DFlash draft checkpoints in the published layout (z-lab/*-DFlash-*): a directory with
// config.json and model.safetensors (or several *.safetensors shards) holding `fc.weight`,
// `hidden_norm.weight`, `layers.{i}.*` (Qwen3 decoder layers with q_norm / k_norm) and
// `norm.weight` — no embedding and no lm_head (the target's are shared). Reading validates every
// name and shape; writing validates first. Also: seeded random draft tensors. Pickled
// `pytorch_model.bin` files are never read.
// Checked by: tests/methods/dflash_head_test.cpp (round trips F32/BF16/F16, every missing /
// unknown / misshaped / non-float tensor, duplicates across shards, the pickle-only directory).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/common/head_config.h"
#include "methods/dflash/dflash_config.h"
#include "models/checkpoint/safetensors.h"

namespace specbed {

// Canonical tensor names (per-layer names are "layers.{i}." + the suffix).
inline constexpr const char* kDflashFc = "fc.weight";
inline constexpr const char* kDflashHiddenNorm = "hidden_norm.weight";
inline constexpr const char* kDflashFinalNorm = "norm.weight";
inline constexpr const char* kDflashInputNorm = "input_layernorm.weight";
inline constexpr const char* kDflashQProj = "self_attn.q_proj.weight";
inline constexpr const char* kDflashKProj = "self_attn.k_proj.weight";
inline constexpr const char* kDflashVProj = "self_attn.v_proj.weight";
inline constexpr const char* kDflashOProj = "self_attn.o_proj.weight";
inline constexpr const char* kDflashQNorm = "self_attn.q_norm.weight";
inline constexpr const char* kDflashKNorm = "self_attn.k_norm.weight";
inline constexpr const char* kDflashPostNorm = "post_attention_layernorm.weight";
inline constexpr const char* kDflashGateProj = "mlp.gate_proj.weight";
inline constexpr const char* kDflashUpProj = "mlp.up_proj.weight";
inline constexpr const char* kDflashDownProj = "mlp.down_proj.weight";

// "layers.{layer}.{suffix}".
std::string DflashLayerTensorName(int64_t layer, const char* suffix);

// Canonical name -> shape for `config` (H = hidden_size, I = intermediate_size, n = number of
// fused target layers, q = n_heads*head_dim, kv = n_kv_heads*head_dim, d = head_dim):
//   fc.weight [H, n*H]; hidden_norm.weight [H]; norm.weight [H]; for i < num_hidden_layers:
//   layers.{i}.input_layernorm.weight [H]; .self_attn.q_proj.weight [q, H]; k_proj / v_proj
//   [kv, H]; o_proj [H, q]; q_norm / k_norm [d]; .post_attention_layernorm.weight [H];
//   .mlp.{gate,up}_proj.weight [I, H]; .mlp.down_proj.weight [H, I].
std::map<std::string, std::vector<int64_t>> ExpectedDflashTensorShapes(const DflashConfig& config);

struct DflashCheckpoint {
  DflashConfig config;
  std::map<std::string, at::Tensor> tensors;  // canonical names; float32 contiguous CPU
  nlohmann::json recipe;  // config.json "specbed_recipe" (training recipe), null when absent
  std::string source;     // the directory it was read from
};

// Reads `dir`/config.json (ParseDflashConfig) and `dir`/model.safetensors, or when that file is
// absent every `dir`/*.safetensors shard. Accepts F32 / F16 / BF16 (converted to float32); stored
// `*rotary_emb.inv_freq` buffers are skipped. Throws specbed::Error naming the file and tensor,
// with expected vs actual, for: a missing tensor, an unknown name (with the nearest expected
// name), a tensor in two files, a wrong shape, a non-float tensor. A directory with only
// pytorch_model.bin fails: pickles are never read.
DflashCheckpoint LoadDflashCheckpoint(const std::string& dir);

// Checks `tensors` (canonical names, any float dtype/device) against `config`: every expected
// name present, no other name, shapes, float dtypes. Errors name `source` and the tensor
// (`where(name)`, default TensorOf(source), names the input holding it).
void ValidateDflashTensors(const DflashConfig& config,
                           const std::map<std::string, at::Tensor>& tensors,
                           const std::string& source, const TensorWhere& where = {});

// Writes `dir`/config.json (DflashConfigToJson with torch_dtype of `float_dtype`, plus
// "specbed_recipe": recipe when not null) and `dir`/model.safetensors in the published layout,
// every tensor (any float dtype, any device) stored as `float_dtype` (kF32, kBF16 or kF16).
// Validates with ValidateDflashTensors first. Creates `dir`.
void WriteDflashCheckpoint(const std::string& dir, const DflashConfig& config,
                           const std::map<std::string, at::Tensor>& tensors,
                           const nlohmann::json& recipe = nullptr,
                           SafetensorsDtype float_dtype = SafetensorsDtype::kF32);

// Fresh draft tensors for `config` (float32 CPU): normal(0, 0.02) matrices and RMSNorm weights 1
// (including q_norm / k_norm). Deterministic in (seed, tensor name), independent of the LibTorch
// version and thread count.
std::map<std::string, at::Tensor> RandomDflashTensors(const DflashConfig& config, uint64_t seed);

}  // namespace specbed
