// The built-in cost twin of stories260K and of its shipped drafters ("stories260K-twin",
// "stories260K-twin-draft", "-eagle3", "-dflash", "-jetspec", "-specblock", "-medusa"): built on
// first use in a few seconds into the cache ($SPECBED_CACHE, else $SPECBED_HOME/.cache; outside
// git) and reused while the sources and the recipe are unchanged (a fingerprint of both is checked
// on every first use in a process). Concurrent builders (sweep shards, parallel tests) take a file
// lock; a build is written to a temporary folder and renamed into place, so a half-built twin is
// never read.
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

#include "models/twin/cost_twin.h"

namespace specbed {

inline constexpr int64_t kStoriesTwinWidthFactor = 8;
inline constexpr int64_t kStoriesTwinDepth = 16;
inline constexpr int64_t kStoriesTwinDraftWidthFactor = 4;

struct StoriesTwinPaths {
  std::string root;       // the twin set's folder in the cache
  std::string target;     // HF checkpoint directories:
  std::string draft;      //   SpS draft LM
  std::string eagle3;     //   EAGLE-3 head
  std::string dflash;     //   DFlash head
  std::string jetspec;    //   JetSpec head
  std::string specblock;  // SpecBlock drafter
  std::string medusa;     // Medusa heads
};

// The cache root: $SPECBED_CACHE when set, else SpecBedHome() + "/.cache".
std::string SpecBedCacheDir();

// Builds the twin set into `root` (overwriting): the target from models/stories260K/stories260K.bin
// and each shipped drafter from models/stories260K/<draft|eagle3|dflash|jetspec>.
StoriesTwinPaths BuildStoriesTwin(const std::string& root);

// The cached twin set, built on first use (thread- and process-safe). Throws specbed::Error
// naming the cache folder when it cannot be written.
const StoriesTwinPaths& StoriesTwin();

}  // namespace specbed
