// Draft-tree builders shared by the methods, and derived tree structures:
// - BuildChain: a chain from a token sequence (SpS, DFlash, any chain drafter).
// - BeamTreeBuilder: EAGLE-2/3 dynamic tree (top-k beam expansion, then reranking of every
//   generated candidate by cumulative log-probability down to a node budget). The drafter is a
//   TopKExpander callback, so this file has no model dependency.
// - BestFirstTreeBuilder: DDTree tree from per-depth top-K marginals (lazy best-first k-best
//   prefix enumeration with a max-heap).
// - GroupExpandTreeBuilder: JetSpec tree from the same per-depth top-K marginals (best-first
//   frontier, each popped node expanded with its K children at once).
// - ChildrenLists: first-child / next-sibling arrays for verifiers.
// - RandomTree: deterministic random trees for the tests of other modules.
// Everywhere, the *budget* is the number of drafted nodes, root excluded (DraftTree::size()).
// Plain std::vector code, no LibTorch. Builders keep their buffers between calls (one builder
// per drafter, reused every step, does not allocate once warm).
// Checked by: tests/methods/draft_tree_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "methods/common/draft_tree.h"

namespace specbed {

// ---------------------------------------------------------------------------------------------
// Chain.

// Replaces `tree` with the chain tokens[0] -> tokens[1] -> ... -> tokens[n-1] (parent[i] = i-1,
// depth[i] = i+1). draft_logp = logp[0..n) when logp is given, else empty. draft_probs are
// cleared. The budget of the result is n.
// tokens: [n] token ids; logp: [n] per-token log q(token | prefix), or nullptr.
void BuildChain(const int32_t* tokens, int64_t n, DraftTree& tree, const float* logp = nullptr);
// Same from vectors; `logp` is empty or has one entry per token.
void BuildChain(const std::vector<int32_t>& tokens, DraftTree& tree,
                const std::vector<float>& logp = {});

// ---------------------------------------------------------------------------------------------
// EAGLE-2/3 dynamic tree.

// The drafter seen by BeamTreeBuilder: proposes the top-k next tokens below given nodes.
class TopKExpander {
 public:
  virtual ~TopKExpander() = default;
  // tree: every candidate generated so far (all of them, not only the frontier, so a drafter can
  //   attend over them; see BeamTreeBuilder::candidates()), with draft_logp = per-node log-prob.
  //   Empty on the first call.
  // frontier_nodes: the nodes to expand, as indices into `tree`; -1 = the root (first call only,
  //   which is {-1}). Ordered by cumulative log-prob, best first.
  // k: children wanted per frontier node.
  // tokens, logp: [frontier_nodes.size() * k] outputs, already sized by the caller; entry
  //   f * k + r = the r-th most likely next token below frontier node f and its log-prob
  //   log q(token | path to f) (<= 0), sorted in non-increasing order of log-prob per node.
  //   Every entry must be written (the builder checks sizes, token ids >= 0, log-probs <= 0 and
  //   not NaN, and the order, and throws specbed::Error otherwise).
  virtual void Expand(const DraftTree& tree, const std::vector<int32_t>& frontier_nodes, int64_t k,
                      std::vector<int32_t>& tokens, std::vector<float>& logp) = 0;

  // Growth hooks (LTD's depth and size policies; the defaults change nothing).
  // ContinueGrowing: called after layer `layer` (>= 2) was generated whenever a deeper layer is
  //   allowed (layer < the builder's layer limit); false stops growing (no more Expand calls).
  //   scores: [candidates] cumulative log-prob of every candidate so far; the latest layer is
  //   [layer_begin, scores.size()).
  virtual bool ContinueGrowing(const std::vector<float>& scores, int64_t layer_begin,
                               int64_t layer) {
    return true;
  }
  // KeepBudget: called once after the last generated layer (`layers` of them), before reranking;
  //   returns how many candidates to keep, which the builder clips to [min(1, budget), budget].
  virtual int64_t KeepBudget(const std::vector<float>& scores, int64_t layers, int64_t budget) {
    return budget;
  }
};

struct BeamTreeOptions {
  // Number of layers = the largest node depth. The expander is called min(depth, budget) times:
  // once on the root, then once per further layer. (EAGLE's `depth` counts the expansions after
  // the first one, so EAGLE depth=5 is depth 6 here; its `total_token` = budget + 1.)
  int64_t depth = 6;
  int64_t top_k = 10;   // children per expanded node, and expanded nodes (beam width) per layer
  int64_t budget = 59;  // drafted nodes kept, root excluded
};

// EAGLE-2 dynamic draft tree:
//   Layer 1 = the top_k children of the root. For each further layer d <= depth, the top_k nodes
//   of layer d-1 by cumulative log-prob (ties: earlier candidate first) are expanded with top_k
//   children each. The score of a candidate is its cumulative log-prob, score(parent) + logp.
//   Every generated node is a candidate (top_k + (depth-1) * top_k^2 of them). Finally the
//   `budget` candidates with the highest score are kept (ties: shallower first, then earlier
//   candidate; candidates are numbered layer by layer, so "earlier" alone already implies it).
//   Layers deeper than `budget` are not generated: a kept node at depth d needs its d-1 ancestors
//   kept too (below), so they could never be kept. The expander's growth hooks may stop the
//   growth after any layer >= 2 (ContinueGrowing) and lower the kept count (KeepBudget).
// Candidate order: by layer; within a layer, by frontier node (best first) then by child rank.
// The kept set is ancestor-closed. Proof: rank candidates by the strict total order
//   (score desc, depth asc, candidate index asc) and keep a prefix of it. For a candidate c with
//   parent p, score(c) = fl(score(p) + logp(c)) with logp(c) <= 0; rounding is monotone and
//   score(p) is representable, so score(c) <= score(p). If score(c) < score(p), p ranks before c;
//   if equal, depth(p) < depth(c) and again p ranks before c. So every kept node's parent is kept.
//   The builder also checks it (specbed::Error "internal" if violated).
// Output: a fresh compact tree in topological BFS order (by depth, then score desc, then
//   candidate index), draft_logp = per-node (not cumulative) log-prob, no draft_probs (EAGLE's
//   top-k drafts are deterministic: verify with sample-then-follow / q = 1).
// Budget: the output has exactly min(budget, number of candidates) nodes; budget 0 gives an
//   empty tree without calling the expander.
class BeamTreeBuilder {
 public:
  // Builds into `tree` (cleared first). Throws specbed::Error on bad options or bad expander
  // output.
  void Build(TopKExpander& expander, const BeamTreeOptions& options, DraftTree& tree);

  // The reranking alone, over candidates grown elsewhere (EAGLE-3's device frontier,
  // methods/eagle3/eagle3_device_frontier.h): n candidates in candidate order (above) with
  // target tokens, parent candidate indices (-1 = the root, else an earlier candidate), per-node
  // log-probs (<= 0) and cumulative scores; `layers` = layers grown. Keeps min(budget, n) nodes
  // exactly as Build does without growth hooks. Throws specbed::Error on a bad candidate.
  void BuildFromCandidates(const int32_t* tokens, const int32_t* parents, const float* logp,
                           const float* scores, int64_t n, int64_t layers, int64_t budget,
                           DraftTree& tree);

  // After Build:
  // Every generated candidate, in candidate order (what the expander last saw plus the last
  // layer); draft_logp = per-node log-prob.
  const DraftTree& candidates() const { return candidates_; }
  // [candidates] cumulative log-prob of each candidate.
  const std::vector<float>& candidate_scores() const { return candidate_scores_; }
  // [candidates] index of each candidate in the output tree, -1 if pruned.
  const std::vector<int32_t>& candidate_to_node() const { return candidate_to_node_; }
  // [output nodes] candidate index of each output node.
  const std::vector<int32_t>& node_to_candidate() const { return node_to_candidate_; }
  // [output nodes] cumulative log-prob of each output node.
  const std::vector<float>& node_scores() const { return node_scores_; }
  // Layers generated by the last Build (fewer than the limit when ContinueGrowing stopped it).
  int64_t layers_built() const { return layers_built_; }

 private:
  // Keeps the `wanted` (>= 1) best candidates into `tree` in the output order.
  void Keep(int64_t wanted, DraftTree& tree);

  DraftTree candidates_;
  std::vector<float> candidate_scores_;
  std::vector<int32_t> candidate_to_node_;
  std::vector<int32_t> node_to_candidate_;
  std::vector<float> node_scores_;
  std::vector<int32_t> frontier_;
  std::vector<int32_t> order_;
  std::vector<int32_t> expand_tokens_;
  std::vector<float> expand_logp_;
  int64_t layers_built_ = 0;
};

// One-shot convenience (allocates a builder).
void BuildBeamTree(TopKExpander& expander, const BeamTreeOptions& options, DraftTree& tree);

// ---------------------------------------------------------------------------------------------
// DDTree best-first tree.

// What the builders over per-depth top-K marginals (DDTree best-first, JetSpec group expansion)
// share: the input contract of Build and the per-node records of the last Build.
class MarginalTreeBuilder {
 public:
  // After Build: [n] cumulative log-prob and rank (column in the [D, K] inputs) of each node.
  const std::vector<float>& node_scores() const { return node_scores_; }
  const std::vector<int32_t>& node_ranks() const { return node_ranks_; }

 protected:
  // Checks the [D, K] marginals and the budget (errors name `what`), clears `tree` and the
  // per-node records.
  void BeginBuild(const char* what, const float* logp, const int32_t* tokens, int64_t D, int64_t K,
                  int64_t budget, DraftTree& tree);

  std::vector<float> node_scores_;
  std::vector<int32_t> node_ranks_;
};

// DDTree tree from per-depth top-K marginals:
//   A node at depth d (1..D) picks one of the K tokens of depth d; its score is the sum of the
//   per-depth log-probs along its path (added root to leaf). The tree is grown best-first with a
//   max-heap seeded with (depth 1, rank 0): pop the best candidate, add it as a node, push its
//   next sibling (same parent, rank + 1, if rank + 1 < K) and its first child (depth + 1, rank 0,
//   if depth < D); stop after `budget` nodes or when the heap is empty (all K + K^2 + ... + K^D
//   prefixes taken).
// Ties: the heap orders candidates by (score desc, depth asc, parent node index asc, rank asc).
//   Because parent node indices follow pop order, this is the total order "u before v iff
//   score(u) > score(v), or equal and shallower, or equal depth and parent(u) before parent(v),
//   or same parent and lower rank". A candidate's generator (its parent for rank 0, its previous
//   sibling otherwise) comes strictly before it in that order (log-probs <= 0 and sorted), so the
//   best unpopped candidate is always in the heap: the nodes are exactly the first `budget`
//   prefixes in that order (the top-budget prefixes by score), and they are popped in it.
// Output: node order = pop order (non-increasing score; parents before children), draft_logp =
//   per-node log-prob (logp[d-1][rank]), no draft_probs.
class BestFirstTreeBuilder : public MarginalTreeBuilder {
 public:
  // logp: [D, K] row-major float32 log-probs of the top-K tokens at each depth, each row sorted
  //   in non-increasing order, all <= 0 (not NaN); tokens: [D, K] int32 token ids (>= 0).
  // Builds into `tree` (cleared first); exactly min(budget, K + ... + K^D) nodes. Throws
  // specbed::Error on bad arguments.
  void Build(const float* logp, const int32_t* tokens, int64_t D, int64_t K, int64_t budget,
             DraftTree& tree);

 private:
  struct Entry {
    float score;
    int32_t depth;
    int32_t parent;
    int32_t rank;
  };
  std::vector<Entry> heap_;
};

// One-shot convenience (allocates a builder).
void BuildBestFirstTree(const float* logp, const int32_t* tokens, int64_t D, int64_t K,
                        int64_t budget, DraftTree& tree);

// ---------------------------------------------------------------------------------------------
// JetSpec group-expansion tree.

// JetSpec tree from per-depth top-K marginals (the accum_logp scorer: Algorithm 1 of the JetSpec
// paper, App. B, as in the authors' jetflow/tree/baselines/accum_logp.py):
//   A max-heap of expandable nodes keyed by cumulative log-prob starts with the root (score 0,
//   depth 0). Repeatedly pop the best node u; if depth(u) < D, add its children *as a group*: the
//   K tokens of depth(u) + 1 in rank order, child score = score(u) + logp[depth(u)][rank], each
//   pushed onto the heap (children at depth D are not pushed: they could only be popped and
//   dropped). Stop when the tree has `budget` nodes or the heap is empty (the full K-ary tree of
//   depth D, K + K^2 + ... + K^D nodes, was built).
// Last group: when fewer than K nodes of budget are left, only the best (lowest-rank) children
//   that fit are added, as the repo's `for j in range(min(K, budget - len(nodes)))`; so the tree
//   has exactly min(budget, K + ... + K^D) nodes.
// Versus BestFirstTreeBuilder (DDTree): DDTree adds one prefix at a time in global score order,
//   so its tree is the top-budget prefixes; here a popped node brings all its K children at once,
//   so low-probability siblings may use budget that better, deeper prefixes would have used.
//   Both use the same score and the same [D, K] inputs; both cap a node's children at K (the
//   width). At K = 1 both give the chain of the per-depth argmax tokens.
// Ties: the heap pops by (score desc, node creation index asc), i.e. insertion order as in the
//   repo's heap; the root (index -1) is first. Deterministic.
// Output: node order = creation order (parents before children; each group contiguous, in rank
//   order), draft_logp = per-node log-prob (logp[d-1][rank]), no draft_probs.
// Budget = drafted nodes, root excluded (the repo's budget counts the root: pass budget - 1).
class GroupExpandTreeBuilder : public MarginalTreeBuilder {
 public:
  // logp: [D, K] row-major float32 log-probs of the top-K tokens at each depth, each row sorted
  //   in non-increasing order, all <= 0 (not NaN); tokens: [D, K] int32 token ids (>= 0).
  // Builds into `tree` (cleared first); exactly min(budget, K + ... + K^D) nodes. Throws
  // specbed::Error on bad arguments.
  void Build(const float* logp, const int32_t* tokens, int64_t D, int64_t K, int64_t budget,
             DraftTree& tree);

  // After Build: the number of nodes popped and expanded (root included; nodes at depth D are
  // never expanded).
  int64_t expanded() const { return expanded_; }

 private:
  struct Entry {
    float score;
    int32_t node;  // -1 = root
  };
  std::vector<Entry> heap_;
  int64_t expanded_ = 0;
};

// One-shot convenience (allocates a builder).
void BuildGroupExpandTree(const float* logp, const int32_t* tokens, int64_t D, int64_t K,
                          int64_t budget, DraftTree& tree);

// ---------------------------------------------------------------------------------------------
// Derived structures.

// Children of every verify slot, for verifiers: first_child[s] = the smallest node index whose
// slot-parent is s (slot 0 = root, slot i+1 = node i), or -1; next_sibling[i] = the next larger
// node index with the same parent as node i, or -1. So the children of a slot are listed in
// increasing node index. first_child: [n + 1], next_sibling: [n] (resized; no allocation once
// the capacity is there).
void ChildrenLists(const DraftTree& tree, std::vector<int32_t>& first_child,
                   std::vector<int32_t>& next_sibling);

// ---------------------------------------------------------------------------------------------
// Random trees for tests.

struct RandomTreeOptions {
  bool chain = false;  // parent[i] = i - 1 instead of random parents
  // 0 = unlimited; else no node deeper than this (ignored for chains: a chain of n has depth n).
  int64_t max_depth = 0;
  // Probability that a node copies the token of an existing sibling. With 0, sibling tokens are
  // distinct (then no node may have more than `vocab` children; parents are re-drawn if needed).
  double duplicate_sibling_prob = 0.0;
  bool with_logp = false;  // draft_logp filled (log of draft_probs entries if those are made)
  // draft_probs [n + 1, vocab]: random rows summing to 1 in which each child's token has
  // positive probability (at least 1 / (4 * vocab) before normalisation).
  bool with_draft_probs = false;
};

// A random valid tree with n nodes over tokens [0, vocab): parent of node i uniform over the root
// and the eligible earlier nodes, tokens uniform. Deterministic given the seed on every platform
// (std::mt19937_64 with SpecBed's own integer/real mapping, no std:: distributions). Throws
// specbed::Error when impossible (vocab < 1, or distinct siblings under max_depth cannot fit).
DraftTree RandomTree(int64_t n, int64_t vocab, uint64_t seed,
                     const RandomTreeOptions& options = {});

}  // namespace specbed
