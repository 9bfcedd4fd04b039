// Shared helpers for tests/models: small configs of each family and scratch directories.
// Used by config_test.cpp, hf_checkpoint_test.cpp and reference_forward_test.cpp (and method,
// engine and train tests).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "models/llama_config.h"

namespace specbed {
namespace testing_util {

// A fresh (emptied) scratch directory under SPECBED_TEST_TMPDIR.
inline std::string ScratchDir(const std::string& name) {
  const std::string dir = std::string(SPECBED_TEST_TMPDIR) + "/models_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The current test's name, for unique scratch paths (tests may run in parallel processes).
inline std::string TestName() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "_" + info->name();
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return name;
}

// The sizes of a small test config (two layers).
struct SmallShape {
  int64_t dim, n_heads, n_kv_heads, head_dim, hidden_dim, vocab_size, max_seq_len;
};

// A two-layer `architecture` config of `shape`; every other field keeps its default (untied
// embeddings, no special tokens).
inline LlamaConfig SmallConfigOf(const std::string& architecture, const SmallShape& shape) {
  LlamaConfig c;
  c.architecture = architecture;
  c.dim = shape.dim;
  c.n_layers = 2;
  c.n_heads = shape.n_heads;
  c.n_kv_heads = shape.n_kv_heads;
  c.head_dim = shape.head_dim;
  c.hidden_dim = shape.hidden_dim;
  c.vocab_size = shape.vocab_size;
  c.max_seq_len = shape.max_seq_len;
  return c;
}

// A two-layer `architecture` config of `shape` with the given RMSNorm epsilon, embedding tying and
// special tokens; every family-specific field keeps its default.
inline LlamaConfig SmallConfigOf(const std::string& architecture, const SmallShape& shape,
                                 double norm_eps, bool tie_embeddings, int64_t bos_token_id,
                                 std::vector<int64_t> eos_token_ids) {
  LlamaConfig c = SmallConfigOf(architecture, shape);
  c.norm_eps = norm_eps;
  c.tie_embeddings = tie_embeddings;
  c.bos_token_id = bos_token_id;
  c.eos_token_ids = std::move(eos_token_ids);
  return c;
}

// Llama-3 style: GQA (8 heads, 2 kv heads), untied head, llama3 rope scaling.
inline LlamaConfig SmallLlama3Config() {
  LlamaConfig c = SmallConfigOf("LlamaForCausalLM",
                                {/*dim=*/64, /*n_heads=*/8, /*n_kv_heads=*/2,
                                 /*head_dim=*/8, /*hidden_dim=*/96,
                                 /*vocab_size=*/128, /*max_seq_len=*/256},
                                1e-5, /*tie_embeddings=*/false, 1, {2, 3});
  c.rope_theta = 500000.0;
  c.rope_scaling = {RopeScalingType::kLlama3, /*factor=*/8.0, /*low_freq_factor=*/1.0,
                    /*high_freq_factor=*/4.0, /*original_max_position_embeddings=*/64};
  return c;
}

// Qwen2 style: q/k/v biases, tied embeddings.
inline LlamaConfig SmallQwen2Config() {
  LlamaConfig c = SmallConfigOf("Qwen2ForCausalLM", {48, 6, 2, 8, 80, 100, 512}, 1e-6,
                                /*tie_embeddings=*/true, -1, {5});
  c.rope_theta = 1000000.0;
  c.qkv_bias = true;
  return c;
}

// Qwen3 style: per-head q/k RMSNorm, explicit head_dim (16) != dim / n_heads (10).
inline LlamaConfig SmallQwen3Config() {
  LlamaConfig c = SmallConfigOf("Qwen3ForCausalLM", {40, 4, 2, 16, 72, 90, 1024}, 1e-6,
                                /*tie_embeddings=*/false, 7, {8});
  c.rope_theta = 1000000.0;
  c.qk_norm = true;
  return c;
}

// Mistral style: Llama's math (GQA, untied head) with a 96-position sliding window, which caps
// the context (max_seq_len) at 96.
inline LlamaConfig SmallMistralConfig() {
  LlamaConfig c = SmallConfigOf("MistralForCausalLM", {48, 4, 2, 12, 64, 80, 96}, 1e-5,
                                /*tie_embeddings=*/false, 1, {2});
  c.rope_theta = 1000000.0;
  c.sliding_window = 96;
  return c;
}

// llama2.c style: interleaved RoPE pairing, plain multi-head attention, tied head.
inline LlamaConfig SmallLlama2cConfig() {
  LlamaConfig c = SmallConfigOf("llama2c", {32, 4, 4, 8, 64, 64, 128}, 1e-5,
                                /*tie_embeddings=*/true, 1, {2});
  c.rope_interleaved = true;
  return c;
}

}  // namespace testing_util
}  // namespace specbed
