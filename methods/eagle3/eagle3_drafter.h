// EAGLE-3 drafter (Li et al. 2025, arXiv:2503.01840): an Eagle3Head fed with three fused target
// hidden states drafts an EAGLE-2 dynamic tree every step (top-k expansion per depth, beam of
// width top_k, reranking of all candidates by cumulative log-prob to the node budget;
// BeamTreeBuilder in methods/common/tree_builders.h). Drafts are deterministic top-k (no
// sampling, no temperature), so at T > 0 the tree is verified with sample-then-follow (EAGLE's
// q = 1 rule), which is lossless for any deterministic tree.
//
// State per sequence: the head's KV cache holds one "context" row per target position already in
// the target cache (row t = (target features at t, token t+1)); tree rows of a step are appended
// after the context and dropped after the tree is built. After a verdict, the rows for the root
// and the accepted path (target hidden states from the verifier) are queued and run at the next
// Draft together with the first expansion.
// Placement: the head's (its placement()); features and the tree's hidden states stay on the
// head's device. With the head on the ATen path the tree grows on the device
// (Eagle3DeviceFrontier: no host read until one download of every candidate per step); otherwise
// (row loops, or a Controller's hooks) per tree layer one upload of the expansion's inputs
// (parent and node indices; the head uploads tokens, positions and mask) and one download of the
// layer's top-k (target ids and log-probs, [rows, k]; a host pass over the rows on the CPU).
// Equal logits rank the smaller draft id first, except in the host path off the CPU (ATen's topk
// order).
// Checked by: tests/methods/eagle3_drafter_test.cpp (exact match with AR at T = 0 on stories260K
// with the trained head; T = 1 distribution tests: 3 tokens on a tiny target, and the third
// token with the shipped head, which depends on the tree's mask, positions and compaction, each
// with a greedy-acceptance negative control); the tree builder alone against a brute-force
// reimplementation in tests/methods/draft_tree_test.cpp; the device frontier against the host path
// (Eagle3DeviceFrontier.* in eagle3_drafter_test.cpp); the head's forward against a plain-loop
// reference in tests/methods/eagle3_head_test.cpp; drafts made together (DraftBatch) against
// drafts made alone in tests/methods/batch_engine_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "harness/engine/method.h"
#include "methods/common/tree_builders.h"
#include "methods/eagle3/eagle3_device_frontier.h"
#include "methods/eagle3/eagle3_head.h"

namespace specbed {

struct Eagle3DraftOptions {
  // BeamTreeOptions semantics: tree layers (EAGLE's `depth` + 1), children per node / beam
  // width, drafted nodes kept (EAGLE's `total_token` - 1). The step budget can lower them.
  int64_t depth = 8;
  int64_t top_k = 10;
  int64_t nodes = 59;
  // Report every generated candidate (top_k + (layers - 1) * top_k^2) as the step's generated
  // draft tokens (Drafter::GeneratedLastStep), so the tree depth a Controller chose can be read
  // back from the steps table (LTD and its baselines); false = the offered nodes.
  bool report_generated = false;
  // Where the tree grows: kHost = BeamTreeBuilder with a host top-k per layer (one download a
  // layer off the CPU); kDevice = Eagle3DeviceFrontier (every layer on the head's device, one
  // download a step; needs the head on the ATen path); kAuto = kDevice when the head is on the
  // ATen path, else kHost. A Controller's draft hooks (LTD) read host scores after every layer,
  // so a step with hooks always grows on the host.
  enum class Frontier { kAuto, kHost, kDevice };
  Frontier frontier = Frontier::kAuto;
};

class Eagle3Drafter : public Drafter, private TopKExpander {
 public:
  // `head`: the head to serve (owned; its KV cache is this drafter's). Its aux_layer_ids must be
  // set (3 target hidden-state indices).
  Eagle3Drafter(std::unique_ptr<Eagle3Head> head, Eagle3DraftOptions options);

  std::vector<int64_t> TargetHiddenLayers() const override;
  void Begin(const DraftBegin& begin) override;
  // Runs the prompt's context rows through the head (otherwise the first Draft does).
  void Prefill() override { FlushContext(); }
  void Draft(const DraftStep& step, DraftTree& tree) override;
  // On the ATen path (device frontier) the drafters over one Eagle3Weights (a case's batch slots)
  // draft a step together: every sequence's queued context rows in one head forward, then the
  // trees in lockstep, one head forward per tree layer (Eagle3DeviceFrontier::GrowBatch). A step
  // with a Controller's hooks (LTD) drafts alone; the row loops always do.
  const void* DraftBatchKey() const override;
  void DraftBatch(const std::vector<DraftJob>& jobs) override;
  void Accept(const DraftTree& tree, const Verdict& verdict) override;
  int64_t GeneratedLastStep() const override { return options_.report_generated ? generated_ : -1; }

  // Replaces the served head between sequences (online adaptation); same config required.
  void ReplaceHead(std::unique_ptr<Eagle3Head> head);
  const Eagle3Head& head() const { return *head_; }
  const Eagle3DraftOptions& options() const { return options_; }

 private:
  void Expand(const DraftTree& candidates, const std::vector<int32_t>& frontier, int64_t k,
              std::vector<int32_t>& tokens, std::vector<float>& logp) override;
  // The Controller's draft hooks (DraftStep::controller), when one is installed.
  bool ContinueGrowing(const std::vector<float>& scores, int64_t layer_begin,
                       int64_t layer) override;
  int64_t KeepBudget(const std::vector<float>& scores, int64_t layers, int64_t budget) override;
  // Entropy (nats) of the softmax of draft logits `row` [vd_].
  double Entropy(const float* row) const;
  // The same for float32 [vd_] on the head's device (one host sync off the CPU).
  double Entropy(const at::Tensor& row) const;
  // Top-k of the log-softmax of draft logits `row` (log-partition log_z) into (target ids,
  // log-probs).
  void TopK(const float* row, float log_z, int64_t k, int32_t* tokens, float* logp);
  // TopK of every row of float32 [n, vd_] logits on the head's device into [n, k] host arrays.
  void TopKRows(const at::Tensor& logits, int64_t k, int32_t* tokens, float* logp);
  // True when this step's tree grows on the device (options_.frontier, the head, the hooks).
  bool GrowsOnDevice(const DraftStep& step) const;
  // Room for the root and every candidate of a tree (rows like out_.hidden).
  void EnsureNodeRows(int64_t rows);
  // Appends the context rows of target positions [first, first + n) from hidden states `hidden`
  // (each [1, >= offset + n, Ht]) starting at index `offset`, with next tokens `next`.
  void QueueContext(const std::vector<at::Tensor>& hidden, int64_t offset, int64_t n,
                    const int32_t* next);
  // Runs the queued context rows through the head (into the cache; out_ row last_row_ is the
  // newest); nothing when none is queued.
  void FlushContext();
  // The queued context rows' features [n, 3 * Ht], and the bookkeeping once the head ran them.
  at::Tensor PendingFeatures() const;
  void ContextAppended();
  // The steps of a Draft: PlanTree (the step's node and depth caps; false = no draft), the
  // context flushed, TakeRoot (the root row's hidden and logits, the layer limit), the tree grown
  // (host builder, or the device frontier then BuildFromFrontier), EndTree (the tree rows
  // dropped from the head's cache).
  bool PlanTree(const DraftStep& step);
  void TakeRoot();
  void BuildFromFrontier(DraftTree& tree);
  void EndTree();

  std::unique_ptr<Eagle3Head> head_;
  Eagle3DraftOptions options_;
  std::vector<int64_t> layers_;
  int64_t ht_ = 0, h_ = 0, vd_ = 0;
  Eagle3HeadOutput out_;
  BeamTreeBuilder builder_;
  Eagle3DeviceFrontier device_frontier_;
  // Context rows waiting to be run: fused features (chunks of [n_i, 3 * Ht], target dtype and
  // device) and next tokens.
  std::vector<at::Tensor> pending_features_;
  std::vector<int32_t> pending_tokens_;
  int64_t context_len_ = 0;
  // Row of out_ holding the newest context row (the root's), -1 once a Draft used it.
  int64_t last_row_ = -1;  // context rows in the head cache (= target positions covered)
  // Per step: the root's draft logits [1, Vd]; output hidden of the root (row 0) and of every
  // candidate run (row c + 1), [rows, H] like out_.hidden; per candidate its cache slot once run
  // (-1 = not run yet).
  at::Tensor root_logits_;
  at::Tensor node_hidden_;
  std::vector<int64_t> candidate_slot_;
  HostStaging staging_;  // an expansion's parent rows and node rows
  std::vector<int32_t> tokens_;
  std::vector<int64_t> positions_;
  std::vector<uint8_t> mask_;
  std::vector<int32_t> order_;
  // The step being drafted (during Draft only), its layer limit, the entropy below the best
  // node of the latest expansion, and the beam scores handed to the depth hook.
  const DraftStep* step_ = nullptr;
  int64_t layer_limit_ = 0, nodes_ = 0, depth_ = 0;
  double best_entropy_ = 0;
  std::vector<float> best_hidden_;  // host copy of the best frontier node's hidden state
  std::vector<float> beam_scores_;
  int64_t generated_ = 0;
};

}  // namespace specbed
