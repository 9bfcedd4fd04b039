// Independent, slow reference forward pass of a Llama-family decoder written as plain C++ loops
// with double accumulation over the ORIGINAL Hugging Face-named, unfused tensors. It shares no
// code with the engine (only RopeInverseFrequencies from the config), so the engine's fused,
// batched forward can be checked against it.
// Checked by: tests/models/reference_forward_test.cpp (against an ATen formulation written in the
// test, hand-computable MLP-only case, RoPE pairing / GQA / q-k norm invariances).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/llama_config.h"

namespace specbed {

// Logits for every position of `tokens`, a fresh sequence starting at position 0 with causal
// attention: result[t][v], t < tokens.size(), v < config.vocab_size.
// `hf_tensors`: HF names (see ExpectedHfTensorShapes), any float dtype and device; each is read
// once as float32. lm_head.weight is used unless config.tie_embeddings (then the embeddings).
// Covers: RMSNorm, RoPE in both pairings (config.rope_interleaved) with RopeInverseFrequencies
// (linear/llama3 scaling), GQA, Qwen2 q/k/v biases, Qwen3 per-head q/k RMSNorm before RoPE,
// SwiGLU MLP, tied/untied head. Throws specbed::Error for a missing or mis-shaped tensor or a
// token outside the vocabulary.
std::vector<std::vector<float>> ReferenceForward(
    const LlamaConfig& config, const std::map<std::string, at::Tensor>& hf_tensors,
    const std::vector<int32_t>& tokens);

}  // namespace specbed
