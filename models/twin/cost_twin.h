// Cost twins: checkpoints that compute *exactly* a small model's function at the cost of a much
// larger one, so that speedups measured on a CPU see the cost structure of a real-size target
// (verifying n tokens costs far less than n single steps) while every output stays that of the
// small, real, pretrained model.
//
// How a checkpoint in the Hugging Face layout is padded (one generic path for targets and every
// drafter SpecBed writes; the rule is chosen by the tensor's HF name, not by the method):
// - width x f: hidden size, attention heads, KV heads and FFN width are multiplied by the width
//   factor f. New residual dims, heads (head_dim and RoPE unchanged) and FFN columns get zero
//   weights, so they stay exactly zero and never feed the original ones. Inputs that are a
//   concatenation of k hidden-sized vectors (EAGLE-3's q/k/v over [embedding | hidden], fc over
//   fused target features) are padded block by block.
// - RMSNorm over the padded width: weights scaled by sqrt(d/D) and rms_norm_eps by d/D, so
//   x / sqrt(mean_D(x^2) + eps d/D) * w sqrt(d/D) == x / sqrt(mean_d(x^2) + eps) * w. With f a
//   power of 4 the scale is a power of 2 and the norm is bit-exact in every float format; GEMMs
//   then differ from the original only by the order of summation (zeros added), ~1e-7 relative.
//   Per-head q/k norms (Qwen3, DFlash heads) share rms_norm_eps in the HF config, so their eps is
//   scaled too: a relative change of about eps / mean(q^2) (~1e-6), not bit-exact.
// - depth: identity layers appended after the original ones (zero o_proj and down_proj, so the
//   residual passes through; all their weights are zero, which costs the same in dense kernels).
//   Appending keeps the absolute ids of the original layers, so drafters that read target layers
//   keep their ids; the original depth is recorded as "feature_depth" and every rule that picks
//   layers (EAGLE-3 low/mid/high, DFlash's target_layer_ids) uses it (LlamaConfig::FeatureDepth).
// - llama2.c checkpoints (interleaved RoPE pairs) have their q/k rows permuted to the HF
//   rotate_half pairing first.
// The recipe goes to config.json under "specbed_twin" (of, label, width, depth, factors, the
// original shape, feature_depth). Every result on a twin is labelled "cost twin of <of>".
// Checked by: tests/methods/cost_twin_test.cpp (padded stories260K vs. stories260K: logits within
// 1e-4 and identical greedy ids; every drafter twin drafts what its original drafts; the padding
// rules on hand-made tensors; refusals of tensors with no rule).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/checkpoint/safetensors.h"

namespace specbed {

// Key of the recipe in config.json.
inline constexpr const char* kTwinRecipeKey = "specbed_twin";

// What one tensor axis is, for padding.
enum class TwinAxis {
  kKeep,            // unchanged (vocabulary, per-head norms)
  kHidden,          // k blocks of hidden_size
  kTargetHidden,    // k blocks of the target's hidden size (fused target features)
  kQHeads,          // num_attention_heads * head_dim
  kKvHeads,         // num_key_value_heads * head_dim
  kFfn,             // intermediate_size
  kHiddenThenRest,  // hidden_size (an RMS-normalised input: scaled by sqrt(d/D)), then extra
                    // columns kept as they are (SpecBlock's rank head input [h ; psi(p)])
};

// How the tensors of one name are padded. The generic rules (the Llama / HF names every drafter
// shares) live in cost_twin.cpp; a method whose drafter has tensors of its own declares rules for
// them with its registration (MethodRegistry::AddTwinPadRules), and every twin SpecBed builds
// pads with all of them.
struct TwinPadRule {
  // An ECMAScript regular expression matched against the whole HF name (TwinSuffixPattern for
  // "this suffix after a dot").
  std::string pattern;
  std::vector<TwinAxis> axes;  // one per tensor dimension
  bool hidden_norm = false;    // an RMSNorm weight over the hidden width (scaled by sqrt(d/D))
};

// The pattern of the names that are `suffix` or end with "." + `suffix`.
std::string TwinSuffixPattern(const std::string& suffix);

struct TwinShape {
  // Multiplies hidden size, heads, KV heads and FFN width (>= 1). Powers of 4 keep RMSNorm
  // bit-exact (see above); other factors are exact up to float rounding.
  int64_t width_factor = 1;
  // Width factor of the target whose hidden states this checkpoint reads (drafter heads with
  // `fc` / target_hidden_size); 0 = same as width_factor.
  int64_t target_width_factor = 0;
  // Total decoder layers after padding (0 = keep). Must be >= the original depth.
  int64_t depth = 0;
  // An explicit attention shape instead of heads x width_factor (0 = that default), e.g. a
  // Llama-3-8B shape from stories260K: width_factor 64, head_dim 128, heads 32, kv_heads 8,
  // ffn 14336. Original KV head j stays KV head j; original q head h (group h / G) becomes head
  // (h / G) * G' + h % G of the new grouping G' = heads / kv_heads >= G; head dims are spread so
  // every rotate_half RoPE pair i lands on the padded pair of equal frequency (i * head_dim /
  // original head_dim), and q is scaled by sqrt(head_dim / original head_dim) so the attention
  // scale is unchanged (exact when that ratio is a power of 4). Models with q/k norms keep their
  // head_dim.
  int64_t head_dim = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t ffn = 0;  // intermediate size (0 = original x width_factor); >= the original
};

// A checkpoint in the Hugging Face layout: the config.json object and the tensors by HF name
// (float tensors: any float dtype, CPU; integer / bool tensors such as EAGLE-3's d2t / t2d are
// kept as they are).
struct HfCheckpointFiles {
  nlohmann::ordered_json config;
  std::map<std::string, at::Tensor> tensors;
};

// A weight [out, k * block] whose input is k concatenated hidden-sized vectors, padded to
// [out, k * padded]: each block's columns first, zeros after (the twin's hidden vectors carry the
// original in their first `block` dims and zeros elsewhere, so the product is unchanged). For the
// small learned parts outside the HF layout that read hidden states (H-RAD, SpecDec++).
at::Tensor PadInputBlocks(const at::Tensor& weight, int64_t block, int64_t padded);

// Reads a checkpoint directory (config.json + model.safetensors or *.safetensors shards) of any
// SpecBed-written model or drafter head; floats become float32. `where` names it in errors.
HfCheckpointFiles ReadCheckpointFiles(const std::string& dir);

// A llama2.c checkpoint (e.g. stories260K.bin) as an HF "LlamaForCausalLM" checkpoint: q/k rows
// permuted from interleaved RoPE pairs to rotate_half, config via LlamaConfig::ToHfJson.
HfCheckpointFiles Llama2cAsHf(const std::string& path);

// Pads `in` to `shape` (see the file comment). `of` names the original in the recipe and label
// ("stories260K"); `source` names `in` in errors; `method_rules` are tried after the generic
// rules (the rules methods declare). Throws specbed::Error for a factor < 1, a depth below the
// original, a float tensor no rule covers (naming it), or a tensor whose shape does not fit the
// config it claims.
HfCheckpointFiles PadToCostTwin(const HfCheckpointFiles& in, const TwinShape& shape,
                                const std::string& of, const std::string& source,
                                const std::vector<TwinPadRule>& method_rules = {});

// Writes `files` as `dir`/config.json + `dir`/model.safetensors, floats stored as `float_dtype`
// (kF32, kBF16 or kF16; config.json's torch_dtype says which). Creates `dir`.
void WriteCheckpointFiles(const std::string& dir, const HfCheckpointFiles& files,
                          SafetensorsDtype float_dtype = SafetensorsDtype::kF32);

// The plain-words label of a twin recipe ("cost twin of stories260K (width 512, 16 layers; ...)"),
// or "" for a config without one.
std::string TwinLabel(const nlohmann::json& config);

}  // namespace specbed
