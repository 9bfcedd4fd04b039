// Shared helpers for tests/models: small configs of each family and scratch directories.
// Used by config_test.cpp, hf_checkpoint_test.cpp and reference_forward_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

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

// Llama-3 style: GQA (8 heads, 2 kv heads), untied head, llama3 rope scaling.
inline LlamaConfig SmallLlama3Config() {
  LlamaConfig c;
  c.architecture = "LlamaForCausalLM";
  c.dim = 64;
  c.n_layers = 2;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.hidden_dim = 96;
  c.vocab_size = 128;
  c.max_seq_len = 256;
  c.rope_theta = 500000.0;
  c.norm_eps = 1e-5;
  c.tie_embeddings = false;
  c.rope_scaling.type = RopeScalingType::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 64;
  c.bos_token_id = 1;
  c.eos_token_ids = {2, 3};
  return c;
}

// Qwen2 style: q/k/v biases, tied embeddings.
inline LlamaConfig SmallQwen2Config() {
  LlamaConfig c;
  c.architecture = "Qwen2ForCausalLM";
  c.dim = 48;
  c.n_layers = 2;
  c.n_heads = 6;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.hidden_dim = 80;
  c.vocab_size = 100;
  c.max_seq_len = 512;
  c.rope_theta = 1000000.0;
  c.norm_eps = 1e-6;
  c.tie_embeddings = true;
  c.qkv_bias = true;
  c.bos_token_id = -1;
  c.eos_token_ids = {5};
  return c;
}

// Qwen3 style: per-head q/k RMSNorm, explicit head_dim (16) != dim / n_heads (10).
inline LlamaConfig SmallQwen3Config() {
  LlamaConfig c;
  c.architecture = "Qwen3ForCausalLM";
  c.dim = 40;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.hidden_dim = 72;
  c.vocab_size = 90;
  c.max_seq_len = 1024;
  c.rope_theta = 1000000.0;
  c.norm_eps = 1e-6;
  c.tie_embeddings = false;
  c.qk_norm = true;
  c.bos_token_id = 7;
  c.eos_token_ids = {8};
  return c;
}

// llama2.c style: interleaved RoPE pairing, plain multi-head attention, tied head.
inline LlamaConfig SmallLlama2cConfig() {
  LlamaConfig c;
  c.architecture = "llama2c";
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.head_dim = 8;
  c.hidden_dim = 64;
  c.vocab_size = 64;
  c.max_seq_len = 128;
  c.norm_eps = 1e-5;
  c.tie_embeddings = true;
  c.rope_interleaved = true;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

}  // namespace testing_util
}  // namespace specbed
