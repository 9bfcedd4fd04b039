// SpecBlock drafting (spec §2.8, §2.9, §3): each step runs exactly M drafter forwards.
//   call 1: the catch-up starts (committed tokens not yet in the drafter cache: the prompt at the
//           first step, then the tokens accepted by the last verdict, each with the target
//           features of the position before it) batched with the first block of this step
//           (start = root, condition = target features of the position before the root);
//   call m = 2..M: the next-block starts chosen from the previous round's blocks, batched.
// Drafter cache: K rows (one per slot) per committed start, all visible to later rows. Rows of
// the current step's blocks are visible only along the branch path (a block started from slot s
// of an earlier block sees that block's slots 1..s and what that block saw), causal within a
// block. The root's own block-1 rows become committed context; rows of later blocks are dropped
// after the tree is built.
// Tree (spec §3.3–3.5): a block attaches at slot k the top-b tokens of p_k (b = branching[bucket
// of slot k], b = 0 ends the block's spine) below the spine node of slot k - 1; the spine goes on
// through the top-1 token. Next-block starts: every block's spine tip plus every non-top-1
// candidate at a slot of bucket 1 or 2 (bucket 3 too when its width is > 0), ranked by cumulative
// draft log-probability, at most `max_starts`; a start's condition is the cached h^(L) of the
// slot that produced its token. After every block the tree keeps its `budget` nodes with the
// highest cumulative log-probability (a closed subtree: a child never scores above its parent).
// Every node's children come from one slot distribution, so at T > 0 the tree is verified with
// sample-then-follow (lossless for any deterministic tree).
// Checked by: tests/methods/specblock_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "harness/engine/method.h"
#include "methods/specblock/specblock_model.h"

namespace specbed {

struct SpecBlockDraftOptions {
  int64_t blocks = 2;                             // M (drafter calls per step)
  int64_t budget = 60;                            // drafted nodes, root excluded
  std::array<int64_t, 4> branching{2, 4, 10, 0};  // width per rank bucket b0..b3
  int64_t max_starts = 4;                         // starts per later block
};

// "2,4,10,0" -> {2, 4, 10, 0}; errors name `context`.
std::array<int64_t, 4> ParseBranching(const std::string& text, const std::string& context);

class SpecBlockDrafter : public Drafter {
 public:
  SpecBlockDrafter(std::unique_ptr<SpecBlockModel> model, SpecBlockDraftOptions options);

  std::vector<int64_t> TargetHiddenLayers() const override;
  void Begin(const DraftBegin& begin) override;
  // Runs the step's first call (catch-up over the prompt + the root's first block) now, so the
  // decoder times it as the drafter prefill; the first Draft then reuses its outputs.
  void Prefill() override {
    if (!first_call_ready_) RunFirstCall();
  }
  void Draft(const DraftStep& step, DraftTree& tree) override;
  void Accept(const DraftTree& tree, const Verdict& verdict) override;

  SpecBlockModel& model() { return *model_; }
  const SpecBlockDraftOptions& options() const { return options_; }
  // Drafter forwards of the last Draft and in total.
  int64_t calls_last_step() const { return calls_last_step_; }
  int64_t calls_total() const { return calls_total_; }
  // Draft probability, at tree slot `slot` (0 = root, i + 1 = node i), of target token `token`
  // under the distribution the slot's children were drawn from; -1 when the slot has no children
  // in the last drafted tree.
  double SlotProb(int64_t slot, int32_t token) const;
  // The distribution behind tree slot `slot` (as SlotProb): block * K + k for slot k (0-based)
  // of the step's block `block`, or -1 when the slot has no children.
  int64_t SlotDistribution(int64_t slot) const {
    return slot >= 0 && slot < static_cast<int64_t>(slot_dist_.size()) ? slot_dist_[slot] : -1;
  }
  // Rank buckets predicted for the slots of the last step's first block (K entries).
  const std::vector<int64_t>& first_block_buckets() const { return first_buckets_; }
  // Per Draft of the current sequence: drafter forwards and the step's depth budget.
  const std::vector<int64_t>& step_calls() const { return step_calls_; }
  const std::vector<int64_t>& step_depth_budgets() const { return step_depths_; }

 private:
  struct Start {
    at::Tensor cond;  // [3 Ht] (target features) or [d] (a cached h), on the model's device
    int32_t token = 0;
    int64_t position = 0;          // absolute index of the token
    int32_t node = -1;             // scratch node of the token (-1 = root)
    std::vector<int64_t> visible;  // temporary cache rows on its branch path
    double cum_logp = 0;
  };
  struct Node {
    int32_t token, parent, depth;
    float logp;
    double cum;
    int64_t dist = -1;  // index into dists_ of its children's distribution (-1 = none)
    bool alive = true;
  };
  struct Candidate {
    int32_t node;
    at::Tensor cond;  // [d], a row of out_h_
    std::vector<int64_t> visible;
  };
  // Runs one forward over `starts` (first `n_commit` of them are committed catch-up starts with
  // target conditions; `target_cond` says which kind the call has). Appends the rows to the
  // cache. Returns h [N*K, d], logp [N*K, Vd], buckets [N*K].
  void Run(const std::vector<Start>& starts, bool target_cond, int64_t n_committed_rows_before);
  // Call 1 of a step: the queued catch-up starts and the root's first block, committed.
  void RunFirstCall();
  void AttachBlock(const Start& start, int64_t row0, std::vector<Candidate>& next);
  // Emits the alive scratch nodes within `max_depth` into `tree` (creation order keeps parents
  // first) and the slots' distributions (slot_dist_).
  void EmitTree(int64_t max_depth, DraftTree& tree);
  // Keeps the `budget` nodes of highest cumulative log-prob, the root path of `protect` (>= 0)
  // first, so the next round always has its best start.
  void Prune(int32_t protect = -1);
  // Queues catch-up starts for rows [0, tokens.size()) of target hidden states `hidden` (3 of
  // [1, >= rows, Ht]): row i conditions `tokens[i]` at position first_position + i.
  void QueueCatchUps(const std::vector<at::Tensor>& hidden, const std::vector<int32_t>& tokens,
                     int64_t first_position);
  // The step's inputs on the model's device: tokens, positions and the attention mask in one
  // upload.
  std::vector<at::Tensor> UploadInputs(const std::vector<Start>& starts, bool target_cond,
                                       int64_t n_committed_rows_before);
  // Reads the last Run's buckets and top-k ids / log-probs to the host (one copy).
  void ReadRunOutputs(const at::Tensor& logits);

  std::unique_ptr<SpecBlockModel> model_;
  SpecBlockDraftOptions options_;
  int64_t k_ = 0, d_ = 0, ht_ = 0, vd_ = 0;
  SpecBlockKv cache_;
  int64_t cache_len_ = 0;       // rows in use (committed + this step's temporary rows)
  int64_t committed_ = 0;       // committed rows
  std::vector<Start> pending_;  // catch-up starts (committed tokens)
  bool has_first_ = false;
  Start first_;  // the next step's first-block start
  // Call 1 already run (by Prefill) for the coming Draft: its starts and the root's start.
  bool first_call_ready_ = false;
  int64_t first_call_starts_ = 0;
  Start first_call_root_;
  int64_t root_position_ = 0;
  // Output of the last Run: h [R, d] and log-probs [R, Vd] on the model's device; on the host
  // the buckets [R] and each row's top-`top_width_` draft ids and log-probs [R, top_width_].
  at::Tensor out_h_, out_logp_;
  std::vector<int64_t> out_bucket_;
  std::vector<int32_t> out_top_ids_;
  std::vector<float> out_top_logp_;
  int64_t top_width_ = 0;
  HostStaging staging_;
  std::vector<at::Tensor> dists_;  // per block of this step: log-probs [K, Vd] (model device)
  mutable std::vector<at::Tensor> dists_host_;  // their host copies, made when SlotProb asks
  std::vector<Node> nodes_;                     // scratch tree of this step
  std::vector<int64_t> slot_dist_;  // per slot of the emitted tree: index into dists_ or -1
  std::vector<int64_t> first_buckets_;
  int64_t root_dist_ = -1, budget_ = 0, start_row_base_ = 0;
  int64_t calls_last_step_ = 0, calls_total_ = 0;
  std::vector<int64_t> step_calls_, step_depths_;
};

}  // namespace specbed
