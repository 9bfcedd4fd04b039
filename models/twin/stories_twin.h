// The built-in cost twin of stories260K and of its shipped drafters ("stories260K-twin",
// "stories260K-twin-draft", and the "stories260K-twin-<family>" drafters the methods declare):
// each piece built on first use in a few seconds into the cache ($SPECBED_CACHE, else
// $SPECBED_HOME/.cache; outside git) and reused while its sources and the recipe are unchanged
// (a fingerprint of both is checked on every first use in a process). Concurrent builders (sweep
// shards, parallel tests) take a file lock; a build is written to a temporary folder and renamed
// into place, so a half-built twin is never read.
//
// The shape (measured with `specbed bench`, 1 thread, on the 2-core development machines; see
// results/bench_issue12_twin_cpu.md):
// - target: width x8 (64 -> 512; 64 heads of head_dim 8, 32 KV heads, FFN 1376) and depth 16
//   (the 5 real layers + 11 identity layers): ~47M parameters of cost, 186 MB in fp32. A 1-token
//   fp32 forward is memory-bound (~7-8 ms, ~0.8 of the measured memory bandwidth with SpecBed's
//   GEMV, models/gemv.h); 4 tokens cost ~1.1x, 8 ~2x and 16 ~4.5x one token. Width buys the
//   memory-bound regime (on a CPU verifying more than a few tokens turns compute-bound however
//   large the model), depth buys realistic drafter/target cost ratios:
//   the alternative width x16, depth 5 (58M) verifies as well but makes a one-layer EAGLE-3 head
//   1/4 of the target instead of ~1/10. (x8 is not a power of 4, so the RMSNorm scale sqrt(1/8)
//   rounds: logits agree to ~1e-6, not bit for bit.)
// - drafter twins keep the papers' draft/target cost ratios as far as the shared embedding
//   allows: the EAGLE-3 head and the DFlash / JetSpec heads share the target's embedding, so they
//   take its width (x8): the EAGLE-3 head (one layer + fc over 3 features + lm_head) costs ~1.5
//   target layers, ~1/10 of the target (papers: ~1/32 on 8B targets); the 2-layer DFlash / JetSpec
//   heads ~1/8 (DFlash paper: 5 draft layers on 36, ~1/7); the SpS draft LM is padded x4
//   (48 -> 192), ~1/47 of the target's cost (the papers' SpS drafts are 1/8 to 1/100).
// Checked by: tests/methods/cost_twin_test.cpp.
#pragma once

#include <string>
#include <vector>

#include "models/twin/cost_twin.h"

namespace specbed {

inline constexpr int64_t kStoriesTwinWidthFactor = 8;
inline constexpr int64_t kStoriesTwinDepth = 16;
inline constexpr int64_t kStoriesTwinDraftWidthFactor = 4;

// One drafter of the twin set: the cost twin of the shipped drafter models/stories260K/<folder>.
// The method that reads it declares it with its registration (MethodRegistry::AddShippedDrafter);
// the SpS draft LM is also a registry model (models/model_registry.h: stories260K-twin-draft).
struct TwinDrafterSpec {
  std::string folder;                              // under models/stories260K, and in the set
  int64_t width_factor = kStoriesTwinWidthFactor;  // its own width factor
  std::string tensor_file = "model.safetensors";   // the shipped weights (Medusa's published name
                                                   // is medusa_lm_head.safetensors)
};

// The SpS draft LM's twin: models/stories260K/draft padded x4.
TwinDrafterSpec StoriesTwinDraftLm();

// The cache root: $SPECBED_CACHE when set, else SpecBedHome() + "/.cache".
std::string SpecBedCacheDir();

// The twin set's folder in the cache (each piece below it is built on first use).
std::string StoriesTwinRoot();

// The twin target's HF checkpoint directory (StoriesTwinRoot()/target), built on first use from
// models/stories260K/stories260K.bin (thread- and process-safe). Throws specbed::Error naming the
// cache folder when it cannot be written.
std::string StoriesTwinTarget();

// The twin of one drafter (StoriesTwinRoot()/<folder>), built on first use with the generic
// padding rules and `method_rules` (the rules the methods declare), as StoriesTwinTarget.
std::string StoriesTwinDrafter(const TwinDrafterSpec& spec,
                               const std::vector<TwinPadRule>& method_rules);

}  // namespace specbed
