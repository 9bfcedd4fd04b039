// Shared helpers for the tests of the DFlash-head methods (dflash_drafter_test.cpp,
// jetspec_test.cpp): a method context over a loaded target, seeded random DFlash heads written
// as checkpoints, a tiny random target (vocabulary 4) with its own head, and the chi-square test
// of a decoder's exact 3-token output distribution on that target.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "harness/engine/method.h"
#include "methods/dflash/dflash_checkpoint.h"
#include "methods/dflash/dflash_config.h"
#include "methods/method_registry.h"
#include "models/llama_model.h"
#include "tests/engine/engine_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace testing_util {

// A method context for `target`; drafters named by registry name load (cached) in float32.
inline MethodContext DflashContextFor(LoadedTarget& target) {
  MethodContext c;
  c.target = &target;
  c.load_model = [](const std::string& name) -> LoadedTarget& {
    static std::map<std::string, LoadedTarget> cache;
    auto it = cache.find(name);
    if (it == cache.end()) it = cache.emplace(name, LoadModel(name, at::kFloat)).first;
    return it->second;
  };
  return c;
}

// A DFlash head (2 layers, block size 6, mask token 0) shaped for a target of width `dim`,
// vocabulary `vocab` and `layers` layers, reading target layers {0, layers - 1}.
inline DflashConfig DflashHeadConfig(int64_t dim, int64_t vocab, int64_t layers, int64_t heads,
                                     int64_t kv_heads, bool causal = false) {
  DflashConfig c;
  c.hidden_size = dim;
  c.intermediate_size = 2 * dim;
  c.n_layers = 2;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = dim / heads;
  c.vocab_size = vocab;
  c.max_position_embeddings = 1024;
  c.rms_norm_eps = 1e-5;
  c.block_size = 6;
  c.mask_token_id = 0;
  c.num_target_layers = layers;
  c.target_layer_ids = {0, layers - 1};
  c.causal = causal;
  return c;
}

// Writes RandomDflashTensors(c, seed) (matrices times `scale`) as a checkpoint in a scratch
// directory `name`; returns the directory.
inline std::string WriteDflashHead(const DflashConfig& c, uint64_t seed, const std::string& name,
                                   double scale = 1.0) {
  const std::string dir = ScratchDir(name);
  auto tensors = RandomDflashTensors(c, seed);
  if (scale != 1.0) {
    for (auto& [n, t] : tensors) {
      if (t.dim() == 2) t = t * scale;
    }
  }
  WriteDflashCheckpoint(dir, c, tensors);
  return dir;
}

// A tiny random target (vocabulary 4, width 16, 2 layers, max 32 positions) with sharp next-token
// distributions, and a random head for it (scaled by 20 so its drafts are far from uniform).
struct TinyDflashTarget {
  std::shared_ptr<LlamaModel> target;
  std::string head_dir;
};

inline TinyDflashTarget MakeTinyDflashTarget(bool causal_head = false,
                                             const std::string& name = "dflash_drafter_tiny") {
  LlamaConfig c;
  c.architecture = "LlamaForCausalLM";
  c.dim = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.hidden_dim = 32;
  c.vocab_size = 4;
  c.max_seq_len = 32;
  c.tie_embeddings = false;
  c.Validate("tiny target");
  LlamaWeights w = RandomLlamaWeights(c, 21);
  w.lm_head = w.lm_head * 60;  // sharper distributions than the 0.02 init gives
  TinyDflashTarget t;
  t.target = std::make_shared<LlamaModel>(c, w);
  t.head_dir = WriteDflashHead(DflashHeadConfig(16, 4, 2, 2, 1, causal_head), 9, name, 20.0);
  return t;
}

// Chi-square p-value of the distribution of the 3 tokens `decoder` generates at T = 1 from the
// prompt {1, 3} on `target` (vocabulary 4: 64 cells) over 30000 generations with seeds 777 + i,
// against the target's exact distribution. Adds the accepted draft tokens to *accepted.
inline double TinyOutputPValue(LlamaModel& target, Decoder& decoder, int64_t* accepted) {
  auto next_probs = [&](const std::vector<int32_t>& ids) {
    KvCache cache = target.NewCache(1, 8);
    return at::softmax(target.Forward(Ids(ids), cache).logits.reshape({-1}), 0);
  };
  std::vector<double> expected(64, 0);
  const at::Tensor pa = next_probs({1, 3});
  for (int a = 0; a < 4; ++a) {
    const at::Tensor pb = next_probs({1, 3, a});
    for (int b = 0; b < 4; ++b) {
      const at::Tensor pc = next_probs({1, 3, a, b});
      for (int c = 0; c < 4; ++c) {
        expected[a * 16 + b * 4 + c] =
            pa[a].item<double>() * pb[b].item<double>() * pc[c].item<double>();
      }
    }
  }
  const int kDraws = 30000;
  std::vector<double> counts(64, 0);
  KvCache cache = target.NewCache(1, 16);
  for (int i = 0; i < kDraws; ++i) {
    GenerationConfig g;
    g.sampling.temperature = 1.0;
    g.seed = 777 + i;
    g.stop.max_new_tokens = 3;
    g.stop.stop_on_eos = false;
    DecodeResult r;
    decoder.Generate({1, 3}, g, cache, r);
    EXPECT_EQ(r.generation.tokens.size(), 3u);
    const auto& t = r.generation.tokens;
    counts[t[0] * 16 + t[1] * 4 + t[2]] += 1;
    for (const StepStats& s : r.steps) *accepted += s.n_accepted;
  }
  double chi2 = 0;
  int cells = 0;
  for (int i = 0; i < 64; ++i) {
    const double e = expected[i] * kDraws;
    if (e < 1e-9) {
      EXPECT_EQ(counts[i], 0);
      continue;
    }
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  return ChiSquareSf(chi2, cells - 1);
}

}  // namespace testing_util
}  // namespace specbed
