// EAGLE-3 head checkpoints in the published layout: a directory with config.json and
// model.safetensors (or several *.safetensors shards) holding the tensors under their published
// names (`fc.weight`, `midlayer.*`, `norm.weight`, `lm_head.weight`, `d2t`, `t2d`, optional
// `embed_tokens.weight`; vLLM's `layers.0.` prefix is accepted for `midlayer.`). Reading
// validates every name, shape, dtype and the draft-vocabulary map; writing validates first.
// Also: seeded random head tensors and the EAGLE-3 draft-vocabulary construction from token
// counts. Pickled `pytorch_model.bin` files are never read (see methods/eagle3/README.md for the
// offline conversion).
// Checked by: tests/methods/eagle3_head_test.cpp (round trips F32/BF16/F16 and `layers.0.`,
// every missing/unknown/misshaped tensor, d2t/t2d dtype and consistency errors, the pickle-only
// directory, BuildDraftVocabMap).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/common/head_config.h"
#include "methods/eagle3/eagle3_config.h"
#include "models/checkpoint/safetensors.h"

namespace specbed {

// Canonical tensor names.
inline constexpr const char* kEagle3Fc = "fc.weight";
inline constexpr const char* kEagle3HiddenNorm = "midlayer.hidden_norm.weight";
inline constexpr const char* kEagle3InputNorm = "midlayer.input_layernorm.weight";
inline constexpr const char* kEagle3QProj = "midlayer.self_attn.q_proj.weight";
inline constexpr const char* kEagle3KProj = "midlayer.self_attn.k_proj.weight";
inline constexpr const char* kEagle3VProj = "midlayer.self_attn.v_proj.weight";
inline constexpr const char* kEagle3OProj = "midlayer.self_attn.o_proj.weight";
inline constexpr const char* kEagle3PostNorm = "midlayer.post_attention_layernorm.weight";
inline constexpr const char* kEagle3GateProj = "midlayer.mlp.gate_proj.weight";
inline constexpr const char* kEagle3UpProj = "midlayer.mlp.up_proj.weight";
inline constexpr const char* kEagle3DownProj = "midlayer.mlp.down_proj.weight";
inline constexpr const char* kEagle3FinalNorm = "norm.weight";
inline constexpr const char* kEagle3LmHead = "lm_head.weight";
inline constexpr const char* kEagle3D2t = "d2t";
inline constexpr const char* kEagle3T2d = "t2d";
inline constexpr const char* kEagle3Embed = "embed_tokens.weight";

// Canonical name -> shape for `config` (H = hidden_size, Ht = target_hidden_size, I =
// intermediate_size, V / Vd = vocab / draft vocab):
//   fc.weight [H, 3*Ht]; midlayer.{hidden_norm,input_layernorm,post_attention_layernorm}.weight
//   [H]; midlayer.self_attn.q_proj.weight [n_heads*head_dim, 2H]; k_proj / v_proj
//   [n_kv_heads*head_dim, 2H]; o_proj [H, n_heads*head_dim]; midlayer.mlp.{gate,up}_proj.weight
//   [I, H]; down_proj [H, I]; norm.weight [H]; lm_head.weight [Vd, H]; d2t [Vd] (int64);
//   t2d [V] (bool); with `with_embedding` also embed_tokens.weight [V, H].
// d2t / t2d are always listed; a checkpoint may omit them only when Vd == V (identity map).
std::map<std::string, std::vector<int64_t>> ExpectedEagle3TensorShapes(const Eagle3Config& config,
                                                                       bool with_embedding = false);

struct Eagle3Checkpoint {
  Eagle3Config config;
  // Canonical names; float tensors float32 contiguous CPU, d2t int64 [Vd] CPU, t2d bool [V] CPU
  // (both present even when the file had none: the identity map when Vd == V).
  // embed_tokens.weight only when the checkpoint has its own.
  std::map<std::string, at::Tensor> tensors;
  nlohmann::json recipe;  // config.json "specbed_recipe" (training recipe), null when absent
  std::string source;     // the directory it was read from
};

// Reads `dir`/config.json (ParseEagle3Config) and `dir`/model.safetensors, or when that file is
// absent every `dir`/*.safetensors shard. Accepts F32 / F16 / BF16 floats (converted to float32)
// and the `layers.0.` prefix for `midlayer.`. Throws specbed::Error naming the file and tensor,
// with expected vs actual, for: a missing tensor, an unknown name (with the nearest expected
// name), a tensor in two files, a wrong shape, a non-float weight, d2t not I64 or t2d not BOOL,
// d2t mapping outside [0, V), a t2d count != Vd or a t2d that does not mark exactly d2t's
// targets. A directory with only pytorch_model.bin fails: pickles are never read.
Eagle3Checkpoint LoadEagle3Checkpoint(const std::string& dir);

// Checks `tensors` (canonical names; float tensors of any float dtype; d2t int64, t2d bool;
// embed_tokens.weight optional; d2t / t2d optional only when Vd == V) against `config`:
// names, shapes, dtypes and the vocabulary-map consistency. Errors name `source` and the tensor
// (`where(name)`, default TensorOf(source), names the input holding it).
void ValidateEagle3Tensors(const Eagle3Config& config,
                           const std::map<std::string, at::Tensor>& tensors,
                           const std::string& source, const TensorWhere& where = {});

// Writes `dir`/config.json (Eagle3ConfigToJson with torch_dtype of `float_dtype`, plus
// "specbed_recipe": recipe when not null) and `dir`/model.safetensors in the published layout:
// float tensors (any float dtype, any device) stored as `float_dtype` (kF32, kBF16 or kF16),
// d2t as I64, t2d as BOOL. Validates with ValidateEagle3Tensors first. Creates `dir`.
void WriteEagle3Checkpoint(const std::string& dir, const Eagle3Config& config,
                           const std::map<std::string, at::Tensor>& tensors,
                           const nlohmann::json& recipe = nullptr,
                           SafetensorsDtype float_dtype = SafetensorsDtype::kF32);

// Fresh head tensors for `config` (float32 CPU): normal(0, 0.02) matrices, RMSNorm weights 1,
// and a draft vocabulary of Vd target ids drawn at random and sorted (the identity when
// Vd == V) as d2t / t2d; embed_tokens.weight (normal(0, 0.02)) only with `with_embedding`.
// Deterministic in (seed, tensor name), independent of the LibTorch version and thread count.
std::map<std::string, at::Tensor> RandomEagle3Tensors(const Eagle3Config& config, uint64_t seed,
                                                      bool with_embedding = false);

struct DraftVocabMap {
  at::Tensor d2t;  // int64 [Vd] CPU: target id of draft id d = d + d2t[d]
  at::Tensor t2d;  // bool [V] CPU: true for target ids in the draft vocabulary
};

// The EAGLE-3 draft vocabulary: the `draft_vocab_size` most frequent target ids of
// `target_token_counts` ([V] counts, >= 0; ties broken by the smaller id), sorted ascending
// (`used`); d2t[i] = used[i] - i, t2d[v] = v in used. Throws specbed::Error for a negative count
// or draft_vocab_size outside [1, V].
DraftVocabMap BuildDraftVocabMap(const std::vector<int64_t>& target_token_counts,
                                 int64_t draft_vocab_size);

}  // namespace specbed
