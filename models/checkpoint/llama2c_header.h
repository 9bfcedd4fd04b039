// The llama2.c legacy checkpoint header (7 int32: dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size, seq_len) read into a LlamaConfig, without LibTorch so it can be fuzzed.
// Checked by: tests/engine/llama_model_test.cpp (malformed headers) and
// tests/fuzz/fuzz_llama2c_header.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "models/llama_config.h"

namespace specbed {

// Validates the 28-byte header at `data` (`size` bytes available) and returns its config.
// Throws specbed::Error naming `path` for a short file, the versioned (ak42) format, an
// implausible size or an inconsistent head layout.
LlamaConfig ParseLlama2cHeader(const uint8_t* data, size_t size, const std::string& path);

}  // namespace specbed
