// Draft hooks: how a Controller steers a top-k tree drafter inside one step (LTD's depth policy
// pi_D between expansion rounds, its size policy pi_V after the last one, and the baselines it is
// compared with: DDD, SVIP, Gammatune, Disco / SpecDec++, C2T in methods/ltd). A Controller that
// has them returns them from Controller::draft_hooks(); the decoder passes them to the drafter in
// DraftStep::hooks, and a drafter that supports them (EAGLE-3) calls them while it drafts.
// Checked by: tests/methods/ltd_test.cpp (every controller's decisions on hand-made rounds, the
// hooks reached through EAGLE-3).
#pragma once

#include <cstdint>

namespace specbed {

// Draft hook 1 (depth, LTD's pi_D): the state after one expansion round of a top-k tree drafter
// (EAGLE-3). Pointers are valid only during the call.
struct DraftRoundInfo {
  int64_t rounds = 0;      // expansion rounds done after the first layer (tree layers - 1), >= 1
  int64_t max_rounds = 0;  // the most rounds this step may run (budget depth - 1)
  int64_t top_k = 0;       // beam width W (= children per expanded node)
  // Cumulative draft log-probs (root to node) of every child the latest round generated,
  // row-major [expanded nodes (best first), top_k]: W^2 values when the beam is full.
  const float* child_scores = nullptr;
  int64_t n_child_scores = 0;
  // Cumulative log-probs of the beam kept for the next round (the W best children, best first).
  const float* beam_scores = nullptr;
  int64_t n_beam = 0;
  // Entropy (nats) of the draft distribution below the best node of the latest expanded layer.
  double best_entropy = 0;
  int64_t context_len = 0;  // L: committed tokens (prompt + generated, root included)
  // The drafter's hidden state at that best node, float32 host [hidden_size]; only when the
  // hooks ask for it (DraftHooks::WantsDraftHidden), else nullptr / 0.
  const float* best_hidden = nullptr;
  int64_t hidden_size = 0;
};

// Draft hook 2 (size, LTD's pi_V): every candidate of the finished tree, before reranking.
struct DraftTreeInfo {
  int64_t rounds = 0;  // expansion rounds run (tree layers - 1)
  int64_t top_k = 0;
  // Cumulative log-probs of all candidates in generation order (layer 1, then W^2 per round).
  const float* scores = nullptr;
  int64_t n_scores = 0;
  int64_t budget_nodes = 0;  // the step's node budget (the most nodes that may be verified)
  int64_t context_len = 0;
};

class DraftHooks {
 public:
  virtual ~DraftHooks() = default;
  // After every expansion round while more rounds are allowed: false = stop growing the tree now.
  virtual bool ContinueDrafting(const DraftRoundInfo& info) { return true; }
  // Once after the last round, before reranking: the number of drafted nodes (root excluded) the
  // target verifies, clipped by the drafter to [1, candidates] and to the step budget.
  virtual int64_t VerifySize(const DraftTreeInfo& info) { return info.budget_nodes; }
  // Whether ContinueDrafting reads DraftRoundInfo::best_hidden (a host copy per round).
  virtual bool WantsDraftHidden() const { return false; }
};

}  // namespace specbed
