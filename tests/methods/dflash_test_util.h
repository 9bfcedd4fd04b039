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
#include "methods/drafter_catalog.h"
#include "methods/method_registry.h"
#include "models/checkpoint/head_checkpoint.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/llama_model.h"
#include "tests/engine/engine_test_util.h"
#include "tests/methods/method_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace testing_util {

// Noise of the nudged stories260K heads (WriteNudgedStoriesHead; times each matrix's RMS): tau
// about 1.5-2, so steps accept all, part or none of their drafts.
constexpr double kNudge = 0.3;

// A method context for `target`; drafters named by registry name load (cached) in float32.
inline MethodContext DflashContextFor(LoadedTarget& target) {
  return CachingContextFor(target);
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

// A "nudged" head for stories260K: the shipped head `shipped` (a drafter name, e.g.
// "stories260K-dflash" or the causal "stories260K-jetspec") with every matrix perturbed by seeded
// Gaussian noise of `noise` times the matrix's own RMS, drafting blocks of `block_size`; written
// as a checkpoint in scratch directory `name`. A seeded random head accepts nothing on
// stories260K (tau = 1, every draft rejected), so the exact-match tests would never commit a
// drafted token; the nudged head accepts some drafts and rejects others, reaching partial
// acceptance, ragged best-first trees and the KV compaction of non-prefix paths.
inline std::string WriteNudgedStoriesHead(const std::string& shipped, int64_t block_size,
                                          double noise, uint64_t seed, const std::string& name) {
  DflashCheckpoint ckpt = LoadDflashCheckpoint(ResolveDrafterDir(shipped));
  ckpt.config.block_size = block_size;
  for (auto& [n, t] : ckpt.tensors) {
    if (t.dim() != 2) continue;
    at::Tensor e = at::empty_like(t);
    FillSeededNormal(e.data_ptr<float>(), e.numel(), TensorNameSeed(seed, n), 0.0, 1.0);
    const double rms = t.pow(2).mean().sqrt().item<double>();
    t = t + e * (noise * rms);
  }
  const std::string dir = ScratchDir(name);
  WriteDflashCheckpoint(dir, ckpt.config, ckpt.tensors);
  return dir;
}

// Acceptance summary of speculative steps, for asserting that a test exercised acceptance:
// accepted draft tokens, steps that rejected every drafted node, steps that accepted some but not
// all of their deepest chain (partial acceptance; possible only in steps drafting deeper than one
// token, counted in `deep`).
struct AcceptanceCounts {
  int64_t accepted = 0, none_accepted = 0, partial = 0, deep = 0;
  void Add(const std::vector<StepStats>& steps) {
    for (const StepStats& s : steps) {
      accepted += s.n_accepted;
      if (s.draft_depth >= 2) ++deep;
      if (s.n_drafted > 0 && s.n_accepted == 0) ++none_accepted;
      if (s.n_accepted > 0 && s.n_accepted < s.draft_depth) ++partial;
    }
  }
};

// A tiny random target (vocabulary 4, width 16, 2 layers, max 32 positions) with sharp next-token
// distributions, and a random head for it (scaled by 20 so its drafts are far from uniform).
struct TinyDflashTarget {
  std::shared_ptr<LlamaModel> target;
  std::string head_dir;
};

inline TinyDflashTarget MakeTinyDflashTarget(bool causal_head = false,
                                             const std::string& name = "dflash_drafter_tiny") {
  TinyDflashTarget t;
  t.target = TinyRandomTarget(21, 20.0);  // sharper distributions than the 0.02 init gives
  t.head_dir = WriteDflashHead(DflashHeadConfig(16, 4, 2, 2, 1, causal_head), 9, name, 20.0);
  return t;
}

// Chi-square p-value of the distribution of the 3 tokens `decoder` generates at `temperature`
// from the prompt {1, 3} on `target` (vocabulary 4: 64 cells) over `draws` generations with
// seeds 777 + i, against the target's exact distribution (engine_test_util.h). Adds the accepted
// draft tokens to *accepted.
inline double TinyOutputPValue(LlamaModel& target, Decoder& decoder, int64_t* accepted,
                               int draws = 30000, double temperature = 1.0) {
  return TinyOutputPValue(target, decoder, {1, 3}, 3, draws, 777, accepted, temperature);
}
// The negative controls' form of the same draws (TinyFaultPValue, engine_test_util.h).
inline double TinyFaultPValue(LlamaModel& target, Decoder& decoder, int64_t* accepted,
                              int draws = 30000, double temperature = 1.0) {
  return TinyFaultPValue(target, decoder, {1, 3}, 3, draws, 777, accepted, temperature);
}
// The drafter-side controls of the same check (ExpectDraftFaultsFail, engine_test_util.h).
inline void ExpectDraftFaultsFail(LlamaModel& target, Decoder& decoder, double temperature,
                                  int draws = 30000) {
  ExpectDraftFaultsFail(target, decoder, {1, 3}, 3, draws, 777, temperature);
}

}  // namespace testing_util
}  // namespace specbed
