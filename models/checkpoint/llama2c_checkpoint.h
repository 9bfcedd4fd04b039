// Reader for llama2.c "legacy" checkpoints (the stories260K / tinyllamas format): a header of 7
// int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative
// vocab_size means an unshared classifier follows) and float32 tensors in a fixed order.
// Tensors come out under Hugging Face names (unpermuted, so config.rope_interleaved = true), which
// lets the same fusing code and the same reference forward serve both formats.
// Checked by: tests/engine/llama_model_test.cpp (stories260K vs. the plain-loop reference and
// pinned greedy tokens) and the malformed-file tests there.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>

#include "models/llama_config.h"

namespace specbed {

struct Llama2cCheckpoint {
  LlamaConfig config;
  std::map<std::string, at::Tensor> tensors;  // HF names, float32, CPU
};

// Reads and validates a legacy llama2.c checkpoint. Throws specbed::Error naming the file when the
// header is implausible, the file size disagrees with the header, or it is a newer export version.
Llama2cCheckpoint ReadLlama2cCheckpoint(const std::string& path);

// The config from the header alone (same validation of the header, no tensor reads).
LlamaConfig ReadLlama2cConfig(const std::string& path);

}  // namespace specbed
