// DFlash and DDTree drafting with one DflashHead.
//
// Per sequence the head's context holds one row per target position already in the target cache
// (fused target hidden states at the head's target_layer_ids, HF hidden_states[id + 1]). Per
// step one block forward on [root, MASK × (B − 1)] at position context_length() gives, for block
// row d = 1 .. B − 1, the draft's marginal distribution of the token at depth d below the root
// (the rows do not condition on each other's drafted tokens: block diffusion).
// - DFlash (Chen et al., "DFlash: Block Diffusion for Flash Speculative Decoding"): a chain of
//   the per-row argmax at T = 0; at T > 0 each row is sampled from its own distribution (case
//   sampling settings) and recorded as the draft distribution, so chain rejection sampling is
//   lossless (a draft token may be drawn from any distribution known to the verifier).
// - DDTree ("Diffusion Draft Tree"): the best-first tree over the per-depth top-K marginals to a
//   node budget (BestFirstTreeBuilder: the top-budget prefixes by summed log-prob, the optimal
//   prefix-closed tree under the draft's own factorised probabilities), log-softmax without
//   temperature; deterministic, verified with sample-then-follow at T > 0.
// After a verdict the rows of the root and the accepted nodes (target hidden states from the
// verifier) are queued and appended at the next Draft.
// Checked by: tests/methods/dflash_drafter_test.cpp (exact match with AR at T = 0 for both modes;
// T = 1 distribution tests on a tiny target; the budget is respected).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "harness/engine/method.h"
#include "methods/common/tree_builders.h"
#include "methods/dflash/dflash_head.h"

namespace specbed {

struct DflashDraftOptions {
  bool tree = false;       // false: DFlash chain; true: DDTree best-first tree
  int64_t block_size = 0;  // 0 = the head's block size; drafted depth <= block_size - 1
  int64_t top_k = 8;       // DDTree: candidates per depth
  int64_t budget = 32;     // DDTree: drafted nodes (root excluded); DFlash: ignored
};

class DflashDrafter : public Drafter {
 public:
  DflashDrafter(std::unique_ptr<DflashHead> head, DflashDraftOptions options);

  std::vector<int64_t> TargetHiddenLayers() const override;
  void Begin(const DraftBegin& begin) override;
  void Draft(const DraftStep& step, DraftTree& tree) override;
  void Accept(const DraftTree& tree, const Verdict& verdict) override;

  const DflashHead& head() const { return *head_; }

 private:
  void QueueContext(const std::vector<at::Tensor>& hidden, int64_t n);

  std::unique_ptr<DflashHead> head_;
  DflashDraftOptions options_;
  std::vector<int64_t> layers_;  // HF hidden_states indices
  int64_t h_ = 0, vocab_ = 0, block_ = 0;
  DflashHeadOutput out_;
  std::vector<float> pending_;  // queued context feature rows [n, n_layers * H]
  int64_t pending_rows_ = 0;
  std::unique_ptr<Sampler> sampler_;
  std::vector<float> probs_, logp_;
  std::vector<int32_t> tokens_, order_;
  BestFirstTreeBuilder builder_;
};

}  // namespace specbed
