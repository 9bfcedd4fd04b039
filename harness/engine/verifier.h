// The one verifier every speculative method uses.
//
// TreeVerifier::Verify runs the target once over [root, node 0 .. node n-1] (padded up to the
// target's captured step width when it replays steps: kernels/step_graph.h) appended after the
// committed cache (tree positions from depths; the tree as 64-bit rows over the new tokens,
// ForwardOptions::tree_bits, where the target takes them, else the ancestor mask from
// kernels/tree_mask; a chain uses the plain causal path), chooses the accepted path with the
// rule, samples the bonus / correction token, and compacts the target KV cache to committed +
// root + accepted path (kernels/kv_compact; on the ATen path on the device from the walk's
// verdict, before the step's one copy back). AcceptTree is the rule alone over given target logits,
// so the sampling rules can be tested statistically without a model.
//
// Rules (method.h VerifyRule). Greedy follows the target argmax (kernels/greedy_verify). The
// sampling rules are lossless: the committed tokens are distributed exactly as sampling the
// target token by token with the same SamplingParams (temperature, top-k, top-p).
// - chain_rs / tree_rrs: at slot s with target distribution p and children c_1..c_m (increasing
//   index) drafted i.i.d. from q = draft_probs row s: for each child, accept with probability
//   min(1, p(x)/q(x)) (kernels/rejection_step); on rejection p <- norm(max(p - q, 0)). The first
//   accepted child is descended into; if none is accepted, the correction token is sampled from
//   the residual p. After an accepted leaf, the bonus is sampled from the target at the leaf.
//   (chain_rs is tree_rrs restricted to chains.)
// - sample_follow: sample y from the target at slot s; descend into the first child carrying y,
//   else y is the bonus. Needs no draft distributions.
// Checked by: tests/engine/verifier_test.cpp (chi-square losslessness on a tiny vocabulary with
// duplicate siblings and zero-mass draft tokens; greedy path; compaction vs a fresh forward).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <random>
#include <vector>

#include "harness/engine/device_sampling.h"
#include "harness/engine/method.h"
#include "harness/engine/sampler.h"
#include "models/llama_model.h"

namespace specbed {

// Chooses the path and bonus for `tree` from the target logits at every slot.
// logits: float32 [n + 1, vocab] row-major (row s = slot s; CPU). At sampler.params().greedy()
// every rule acts as kGreedy. Fills verdict.path/bonus/tokens (hidden untouched).
void AcceptTree(const DraftTree& tree, const float* logits, int64_t vocab, VerifyRule rule,
                Sampler& sampler, Verdict& verdict);

// Synthetic acceptance (for measuring system overhead apart from draft quality; NOT lossless and
// not a real measurement): ignores the target's verdict on draft tokens and walks down the tree
// from the root, at depth d taking the first child of the current slot with probability
// acceptance[d - 1] (the last entry repeats for deeper positions; draws from `rng`); the bonus is
// then sampled from the target at the final slot as usual. Fills verdict.path/bonus/tokens.
void AcceptSynthetic(const DraftTree& tree, const float* logits, int64_t vocab,
                     const std::vector<double>& acceptance, std::mt19937_64& rng, Sampler& sampler,
                     Verdict& verdict);

// Deliberately wrong acceptance rules: the negative controls of the losslessness tests (each
// method-level chi-square test shows it fails under them). Process-wide; never set outside tests.
enum class VerifierFault {
  kNone,
  // Sampling rules: at each slot descend into the child carrying the target's argmax token; when
  // no child does, the bonus is sampled from the target distribution at the slot.
  kGreedyAcceptance,
  // chain_rs / tree_rrs: after every child is rejected the correction is sampled from the
  // target's p instead of the residual norm(max(p - q, 0)).
  kTargetAsResidual,
};
void SetVerifierFaultForTesting(VerifierFault fault);
VerifierFault VerifierFaultForTesting();

// Sets a fault for its lifetime (tests).
using ScopedVerifierFault = ScopedFault<VerifierFault, &SetVerifierFaultForTesting>;

class TreeVerifier {
 public:
  explicit TreeVerifier(LlamaModel& target) : target_(target) {}

  // Turns synthetic acceptance on (non-empty `acceptance`, probabilities in [0, 1]) or off
  // (empty) for the following Verify calls; `seed` seeds its draws.
  void SetSyntheticAcceptance(std::vector<double> acceptance, uint64_t seed);

  // `cache` holds the committed tokens except `root` (cache.length() = L). Runs the target over
  // root + tree, accepts with `rule`, compacts the cache to L + 1 + path length and fills
  // `verdict` (with hidden states of `hidden_layers` at the committed slots).
  void Verify(int32_t root, const DraftTree& tree, VerifyRule rule, Sampler& sampler,
              KvCache& cache, const std::vector<int64_t>& hidden_layers, Verdict& verdict);

  // Verify cut at the target forward, for a batch of sequences that share one
  // LlamaModel::ForwardRagged (batch_engine.h). StageChunk: the verify rows of root + tree
  // appended after `cache`'s committed tokens (tokens, and for a tree its positions and ancestor
  // mask) as a chunk, in this verifier's buffers (valid until the next StageChunk).
  SeqChunk StageChunk(int32_t root, const DraftTree& tree, KvCache& cache);
  // Conclude: after the forward advanced `cache` by tree.size() + 1, accepts with `rule` from the
  // chunk's `logits` (float32 [n + 1, vocab], any device; acceptance on the host), compacts the
  // cache and fills `verdict` (hidden: the chunk's [1, n + 1, dim] states of the requested
  // layers). Exactly what Verify does with the row kernels' logits.
  void Conclude(const DraftTree& tree, VerifyRule rule, Sampler& sampler, KvCache& cache,
                const at::Tensor& logits, const std::vector<at::Tensor>& hidden, Verdict& verdict);

  // Acceptance and sampling on the target's device (the ATen path), reusable by the decoder for
  // its first token.
  DeviceVerifier& device() { return device_; }

 private:
  // The rows the target runs: n + 1, or StepBucket(n + 1) when the target replays steps of
  // that width and `room` (free cache slots) holds them.
  int64_t PaddedWidth(int64_t n_slots, int64_t room) const;
  void GatherHidden(const std::vector<at::Tensor>& hidden, Verdict& verdict, int64_t walked);
  // Writes the verify rows' tokens (root, nodes, pad rows) and, for a tree, their positions and
  // tree bits (or mask) into the reused buffers; returns the tokens [1, width].
  // `bits`: a target that takes tree bits gets them instead of the mask.
  at::Tensor StageRows(int32_t root, const DraftTree& tree, int64_t committed, int64_t width,
                       bool bits, ForwardOptions& options);
  void GrowBuffers(int64_t width);
  // Acceptance on the host from the verify rows' logits [n + 1, V] (any device), then the
  // compaction to committed + root + path and the hidden states at the committed rows.
  void AcceptOnHost(const DraftTree& tree, VerifyRule rule, Sampler& sampler, KvCache& cache,
                    int64_t committed, const at::Tensor& logits,
                    const std::vector<at::Tensor>& hidden, Verdict& verdict);
  void BuildMask(const DraftTree& tree, int64_t committed, ForwardOptions& options);

  LlamaModel& target_;
  // Reused buffers (grown, never shrunk): no data allocation per step once warm.
  at::Tensor tokens_buf_, positions_buf_, parent_buf_, mask_buf_, keep_buf_, bits_buf_;
  DeviceVerifier device_;  // the ATen path's acceptance
  std::vector<int64_t> positions_;
  std::vector<double> synthetic_;
  std::mt19937_64 synthetic_rng_;
};

}  // namespace specbed
