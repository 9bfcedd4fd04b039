// DFlash, DDTree and JetSpec drafting with one DflashHead.
//
// Per sequence the head's context holds one row per target position already in the target cache
// (fused target hidden states at the head's target_layer_ids, HF hidden_states[id + 1]). Per
// step one block forward on [root, MASK × (B − 1)] at position context_length() gives, for block
// row d = 1 .. B − 1, the draft's distribution of the token at depth d below the root. The rows
// never condition on each other's drafted tokens (every row sees only MASK rows after the root):
// with a non-causal head they are block-diffusion marginals; with a causal head (JetSpec) row d
// sees rows <= d, still only the root and MASK rows, so they are single-pass per-depth marginals
// too (JetSpec spec G-1).
// B = the block size used (options.block_size, 0 = the head's trained block_size; changeable per
// prompt with set_block_size). B may exceed the trained block size: the extra rows are untrained
// mask positions (the head never saw them in training; with a non-causal head they also change
// the earlier rows). Exactly B rows are forwarded every step; the drafted depth is
// min(B − 1, budget.depth, budget.nodes).
// - DFlash (Chen et al., "DFlash: Block Diffusion for Flash Speculative Decoding"): a chain of
//   the per-row argmax at T = 0; at T > 0 each row is sampled from its own distribution (case
//   sampling settings) and recorded as the draft distribution, so chain rejection sampling is
//   lossless (a draft token may be drawn from any distribution known to the verifier). On the
//   ATen path the rows are sampled on the device (DeviceDraftSampler: one copy of the depth ids
//   back; the distributions stay there as DraftTree::draft_probs_device).
// - DDTree ("Diffusion Draft Tree"): the best-first tree over the per-depth top-K marginals to a
//   node budget (BestFirstTreeBuilder: the top-budget prefixes by summed log-prob, the optimal
//   prefix-closed tree under the draft's own factorised probabilities), log-softmax without
//   temperature; deterministic, verified with sample-then-follow at T > 0.
// - JetSpec (hao-ai-lab, "JetSpec: Breaking the Scaling Ceiling of Speculative Decoding with
//   Parallel Tree Drafting"): the same per-depth top-K log-softmax, grown by accum_logp group
//   expansion (GroupExpandTreeBuilder: pop the best frontier node, add its K children at once);
//   deterministic, verified with sample-then-follow at T > 0.
// After a verdict the rows of the root and the accepted nodes (target hidden states from the
// verifier) are queued and appended at the next Draft.
// Under load (the batch engine) every slot's drafter holds its own DflashHead over one shared
// DflashWeights; on the ATen path a step's drafts come from one head forward (DraftBatch).
// Checked by: tests/methods/dflash_drafter_test.cpp (exact match with AR at T = 0 for the chain
// and DDTree; T = 1 distribution tests on a tiny target; the budget is respected) and
// tests/methods/jetspec_test.cpp (JetSpec and blocks larger than the head's with causal heads),
// tests/methods/aten_path_test.cpp (the ATen path; DFlash at T = 1 there),
// tests/methods/batch_engine_test.cpp (drafts made together equal drafts made alone).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "harness/engine/device_sampling.h"
#include "harness/engine/method.h"
#include "methods/common/tree_builders.h"
#include "methods/dflash/dflash_head.h"

namespace specbed {

// How the drafted tokens become a tree.
enum class DflashTreeKind {
  kChain,        // DFlash: the chain of per-row choices
  kBestFirst,    // DDTree: BestFirstTreeBuilder over the per-depth top-K
  kGroupExpand,  // JetSpec: GroupExpandTreeBuilder over the per-depth top-K
};

struct DflashDraftOptions {
  DflashTreeKind kind = DflashTreeKind::kChain;
  // Rows forwarded per step (>= 2; 0 = the head's block size; may exceed it: untrained mask
  // rows); drafted depth <= block_size - 1.
  int64_t block_size = 0;
  int64_t top_k = 8;    // trees: candidates per depth (DDTree top_k, JetSpec width K)
  int64_t budget = 32;  // trees: drafted nodes (root excluded); chain: ignored
  // Chain at T > 0: false = sample each row from its distribution and record it (chain_rs);
  // true = argmax rows at every temperature, as the DFlash reference's spec_generate (verify
  // with sample_follow).
  bool argmax_drafts = false;
};

class DflashDrafter : public Drafter {
 public:
  DflashDrafter(std::unique_ptr<DflashHead> head, DflashDraftOptions options);

  std::vector<int64_t> TargetHiddenLayers() const override;
  void Begin(const DraftBegin& begin) override;
  // Appends the prompt's context rows to the head (otherwise the first Draft does).
  void Prefill() override { AppendPendingContext(); }
  void Draft(const DraftStep& step, DraftTree& tree) override;
  // On the ATen path the drafters over one DflashWeights (a case's batch slots) draft a step's
  // blocks in one head forward (DflashHead::ForwardBatch); the row loops draft alone (their block
  // GEMMs are per-sequence calls either way).
  const void* DraftBatchKey() const override;
  void DraftBatch(const std::vector<DraftJob>& jobs) override;
  void Accept(const DraftTree& tree, const Verdict& verdict) override;

  const DflashHead& head() const { return *head_; }
  // The block size (rows forwarded per step) used from the next Draft on; b >= 2 (may exceed the
  // head's trained block size). For a controller that picks the block size once per prompt.
  // Throws specbed::Error for b < 2.
  void set_block_size(int64_t b);
  int64_t block_size() const { return block_; }

 private:
  void QueueContext(const std::vector<at::Tensor>& hidden, int64_t n);
  // The step's drafted depth (0 = no draft); appends the queued context when it drafts.
  int64_t PrepareDraft(const DraftStep& step);
  // The draft from out_ (the block forward made): a chain or a tree of `depth` levels.
  void BuildDraft(const DraftStep& step, int64_t depth, DraftTree& tree);
  // Appends the queued context rows to the head's context (nothing when none is queued).
  void AppendPendingContext();
  // The drafted rows 1..depth of the block: chain tokens (argmax or sampled, with their draft
  // distributions) or the per-depth top-k (tokens_, logp_).
  void DraftChain(int64_t depth, DraftTree& tree);
  // The chain at T > 0 on the ATen path: rows [depth, V] (the head's dtype, on its device)
  // sampled there; their distributions stay in draws_ (tree.draft_probs_device).
  void SampleChainOnDevice(const at::Tensor& rows, int64_t depth, DraftTree& tree);
  void TopKPerDepth(int64_t depth, int64_t k);

  std::unique_ptr<DflashHead> head_;
  DflashDraftOptions options_;
  std::vector<int64_t> layers_;  // HF hidden_states indices
  int64_t h_ = 0, vocab_ = 0, block_ = 0;
  DflashHeadOutput out_;
  // Queued context feature rows, chunks of [n_i, n_layers * H] in the target's dtype and device.
  std::vector<at::Tensor> pending_;
  std::unique_ptr<Sampler> sampler_;
  DeviceDraftSampler draws_;  // the sampled chain on the ATen path
  std::vector<float> logp_;
  std::vector<int32_t> tokens_, order_;
  BestFirstTreeBuilder best_first_;
  GroupExpandTreeBuilder group_expand_;
};

}  // namespace specbed
