// Tests for methods/common/draft_tree.* and tree_builders.*: DraftTree bookkeeping and
// validation errors, PathTo, TreePositions, ChildrenLists, the chain builder, the EAGLE-2/3 beam
// tree against a brute-force reimplementation on toy expanders (its growth hooks, and its reranking
// alone over candidates grown elsewhere), the DDTree
// best-first tree against brute-force enumeration of all prefixes, the JetSpec group-expansion tree
// against hand examples and a heap-free reimplementation (and DDTree's top-budget optimality), and
// RandomTree. No LibTorch.
// All randomness uses fixed seeds, so every test is deterministic (false-failure rate 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "methods/common/draft_tree.h"
#include "methods/common/tree_builders.h"

namespace specbed {
namespace {

// Runs `fn`, expects specbed::Error whose message contains every one of `parts`.
void ExpectError(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected specbed::Error containing '" << parts.front() << "'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& part : parts) {
      EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg << "\nmissing: " << part;
    }
  }
}

// The tree used by several tests (vocab 10):
//   root -> 0(5) -> 2(7) -> 4(1)
//        -> 1(6) -> 3(8)
//                -> 5(9)
DraftTree SmallTree() {
  DraftTree tree;
  tree.AddNode(5, -1, -0.1f);
  tree.AddNode(6, -1, -0.2f);
  tree.AddNode(7, 0, -0.3f);
  tree.AddNode(8, 1, -0.4f);
  tree.AddNode(1, 2, -0.5f);
  tree.AddNode(9, 1, -0.6f);
  return tree;
}

// ---------------------------------------------------------------------------------------------
// DraftTree.

TEST(DraftTree, AddNodeComputesDepthsAndStoresLogp) {
  const DraftTree tree = SmallTree();
  EXPECT_EQ(tree.size(), 6);
  EXPECT_EQ(tree.parent, (std::vector<int32_t>{-1, -1, 0, 1, 2, 1}));
  EXPECT_EQ(tree.depth, (std::vector<int32_t>{1, 1, 2, 2, 3, 2}));
  EXPECT_EQ(tree.draft_logp, (std::vector<float>{-0.1f, -0.2f, -0.3f, -0.4f, -0.5f, -0.6f}));
  EXPECT_EQ(tree.max_depth(), 3);
  EXPECT_FALSE(tree.IsChain());
  tree.Validate(10);

  DraftTree plain;
  plain.AddNode(3, -1);
  plain.AddNode(4, 0);
  EXPECT_TRUE(plain.draft_logp.empty());
  EXPECT_TRUE(plain.IsChain());
  plain.Validate(5);
}

TEST(DraftTree, AddNodeRejectsBadParentAndToken) {
  DraftTree tree = SmallTree();
  ExpectError([&] { tree.AddNode(1, 6); }, {"parent index 6", "existing node"});
  ExpectError([&] { tree.AddNode(1, -2); }, {"parent index -2"});
  ExpectError([&] { tree.AddNode(-1, 0); }, {"token id -1"});
  EXPECT_EQ(tree.size(), 6);
}

TEST(DraftTree, ClearKeepsCapacityAndDropsDistributions) {
  DraftTree tree = SmallTree();
  tree.ResizeDraftProbs(10);
  const size_t capacity = tree.token.capacity();
  tree.Clear();
  EXPECT_TRUE(tree.empty());
  EXPECT_FALSE(tree.has_draft_probs());
  EXPECT_EQ(tree.vocab, 0);
  EXPECT_EQ(tree.token.capacity(), capacity);
  EXPECT_TRUE(tree.IsChain());  // vacuously
  EXPECT_EQ(tree.max_depth(), 0);
  tree.Validate(10);
}

TEST(DraftTree, LogpIsStoredForEveryNodeOrNone) {
  DraftTree tree;
  tree.AddNode(1, -1, -0.5f);
  ExpectError([&] { tree.AddNode(2, 0); }, {"node 1 has no log-prob", "every node or for none"});
  EXPECT_EQ(tree.size(), 1);
  tree.Clear();
  tree.AddNode(1, -1);  // after Clear the first node decides again
  ExpectError([&] { tree.AddNode(2, 0, -0.1f); }, {"node 1 has a log-prob"});
  tree.AddNode(2, 0);
  EXPECT_TRUE(tree.draft_logp.empty());
  tree.Clear();
  tree.AddNode(1, -1, 0.f);  // log-prob 0 (q = 1) is a log-prob
  EXPECT_EQ(tree.draft_logp, std::vector<float>{0.f});
}

TEST(DraftTree, DraftProbsRowsBySlot) {
  // Pattern 1: nodes first, then ResizeDraftProbs and fill.
  DraftTree tree;
  tree.AddNode(2, -1);
  tree.AddNode(3, 0);
  tree.ResizeDraftProbs(4);
  ASSERT_EQ(tree.draft_probs.size(), 12u);
  EXPECT_EQ(tree.draft_probs, std::vector<float>(12, 0.f));
  tree.DraftProbsRow(0)[2] = 1.f;
  tree.DraftProbsRow(1)[3] = 1.f;
  EXPECT_EQ(tree.draft_probs[4 + 3], 1.f);
  tree.Validate(4);  // the leaf's zero row (slot 2) is allowed
  // Pattern 2 (SpS): preallocate [n_max + 1, vocab], fill rows while adding; AddNode leaves
  // draft_probs alone.
  tree.Clear();
  tree.vocab = 4;
  tree.draft_probs.assign(3 * 4, 0.f);
  tree.DraftProbsRow(0)[1] = 1.f;
  tree.AddNode(1, -1);
  tree.DraftProbsRow(1)[0] = 1.f;
  tree.AddNode(0, 0);
  EXPECT_EQ(tree.draft_probs.size(), 12u);
  tree.Validate(4);
}

TEST(DraftTree, ValidateNamesBadParentOrder) {
  DraftTree tree = SmallTree();
  tree.parent[2] = 3;  // refers to a later node
  ExpectError([&] { tree.Validate(10); }, {"parent[2] = 3", "topological order"});
  tree.parent[2] = 2;  // itself
  ExpectError([&] { tree.Validate(10); }, {"parent[2] = 2"});
  tree.parent[2] = -3;
  ExpectError([&] { tree.Validate(10); }, {"parent[2] = -3"});
}

TEST(DraftTree, ValidateNamesDepthMismatch) {
  DraftTree tree = SmallTree();
  tree.depth[4] = 2;
  ExpectError([&] { tree.Validate(10); }, {"depth[4] = 2", "expected 3"});
  tree = SmallTree();
  tree.depth[1] = 2;
  ExpectError([&] { tree.Validate(10); }, {"depth[1] = 2", "expected 1", "root"});
}

TEST(DraftTree, ValidateNamesTokenOutOfRange) {
  DraftTree tree = SmallTree();
  ExpectError([&] { tree.Validate(9); }, {"token[5] = 9", "vocabulary [0, 9)"});
  tree.token[0] = -4;
  ExpectError([&] { tree.Validate(10); }, {"token[0] = -4"});
}

TEST(DraftTree, ValidateNamesArraySizes) {
  DraftTree tree = SmallTree();
  tree.parent.pop_back();
  ExpectError([&] { tree.Validate(10); }, {"parent has 5 entries", "expected 6"});
  tree = SmallTree();
  tree.depth.push_back(1);
  ExpectError([&] { tree.Validate(10); }, {"depth has 7 entries"});
  tree = SmallTree();
  tree.draft_logp.pop_back();
  ExpectError([&] { tree.Validate(10); }, {"draft_logp has 5 entries", "expected 0 or 6"});
  tree = SmallTree();
  tree.draft_logp[3] = 0.5f;
  ExpectError([&] { tree.Validate(10); }, {"draft_logp[3]", "log-probability"});
  tree.draft_logp[3] = std::nanf("");
  ExpectError([&] { tree.Validate(10); }, {"draft_logp[3]"});
}

TEST(DraftTree, ValidateNamesDraftProbsProblems) {
  RandomTreeOptions options;
  options.with_draft_probs = true;
  const DraftTree good = RandomTree(6, 10, 1, options);
  good.Validate(10);

  DraftTree tree = good;
  tree.draft_probs.resize(tree.draft_probs.size() - 10);  // one row short
  ExpectError([&] { tree.Validate(10); }, {"draft_probs has 60 floats", "7 x 10 = 70"});
  tree = good;
  tree.draft_probs.push_back(0.f);
  ExpectError([&] { tree.Validate(10); }, {"draft_probs has 71 floats"});
  tree = good;
  ExpectError([&] { tree.Validate(12); }, {"rows have 10 entries", "vocabulary size 12"});
  tree = good;
  tree.draft_probs.clear();  // vocab left at 10
  ExpectError([&] { tree.Validate(10); }, {"vocab = 10", "draft_probs is empty"});
  tree = good;
  tree.DraftProbsRow(0)[3] = -0.1f;
  ExpectError([&] { tree.Validate(10); }, {"draft_probs[slot 0, token 3]", "not a probability"});
  tree = good;
  for (int64_t v = 0; v < 10; ++v) tree.DraftProbsRow(0)[v] *= 2.f;  // the root has children
  ExpectError([&] { tree.Validate(10); }, {"row of slot 0 sums to 2", "expected 1"});
}

TEST(DraftTree, PathToListsAncestorsRootFirst) {
  const DraftTree tree = SmallTree();
  EXPECT_EQ(PathTo(tree, 4), (std::vector<int32_t>{0, 2, 4}));
  EXPECT_EQ(PathTo(tree, 5), (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(PathTo(tree, 1), (std::vector<int32_t>{1}));
  EXPECT_TRUE(PathTo(tree, -1).empty());
  ExpectError([&] { PathTo(tree, 6); }, {"PathTo: node 6"});
}

TEST(DraftTree, TreePositionsAreBasePlusDepth) {
  const DraftTree tree = SmallTree();
  std::vector<int64_t> positions;
  TreePositions(tree, 100, positions);
  EXPECT_EQ(positions, (std::vector<int64_t>{100, 101, 101, 102, 102, 103, 102}));
  TreePositions(DraftTree{}, 7, positions);
  EXPECT_EQ(positions, (std::vector<int64_t>{7}));
}

// ---------------------------------------------------------------------------------------------
// ChildrenLists.

TEST(ChildrenLists, SmallTree) {
  const DraftTree tree = SmallTree();
  std::vector<int32_t> first_child, next_sibling;
  ChildrenLists(tree, first_child, next_sibling);
  // Slots: 0 root, 1..6 = nodes 0..5.
  EXPECT_EQ(first_child, (std::vector<int32_t>{0, 2, 3, 4, -1, -1, -1}));
  EXPECT_EQ(next_sibling, (std::vector<int32_t>{1, -1, -1, 5, -1, -1}));
}

TEST(ChildrenLists, MatchesParentsOnRandomTrees) {
  std::vector<int32_t> first_child, next_sibling;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const DraftTree tree = RandomTree(1 + static_cast<int64_t>(seed) * 3, 50, seed);
    ChildrenLists(tree, first_child, next_sibling);
    ASSERT_EQ(first_child.size(), static_cast<size_t>(tree.size() + 1));
    ASSERT_EQ(next_sibling.size(), static_cast<size_t>(tree.size()));
    for (int64_t slot = 0; slot <= tree.size(); ++slot) {
      std::vector<int32_t> expected;
      for (int32_t i = 0; i < tree.size(); ++i) {
        if (tree.parent[i] + 1 == slot) expected.push_back(i);
      }
      std::vector<int32_t> listed;
      for (int32_t c = first_child[slot]; c >= 0; c = next_sibling[c]) listed.push_back(c);
      EXPECT_EQ(listed, expected) << "seed " << seed << " slot " << slot;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Chain.

TEST(BuildChain, PointerAndVectorForms) {
  const std::vector<int32_t> tokens = {4, 4, 2, 9};
  const std::vector<float> logp = {-0.5f, -1.f, -0.25f, -2.f};
  DraftTree tree = SmallTree();
  tree.ResizeDraftProbs(10);
  BuildChain(tokens.data(), 4, tree, logp.data());
  EXPECT_EQ(tree.token, tokens);
  EXPECT_EQ(tree.parent, (std::vector<int32_t>{-1, 0, 1, 2}));
  EXPECT_EQ(tree.depth, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(tree.draft_logp, logp);
  EXPECT_FALSE(tree.has_draft_probs());
  EXPECT_TRUE(tree.IsChain());
  tree.Validate(10);

  BuildChain(tokens, tree);
  EXPECT_EQ(tree.token, tokens);
  EXPECT_TRUE(tree.draft_logp.empty());
  EXPECT_TRUE(tree.IsChain());
  BuildChain(tokens, tree, logp);
  EXPECT_EQ(tree.draft_logp, logp);

  BuildChain(nullptr, 0, tree);
  EXPECT_TRUE(tree.empty());
  ExpectError([&] { BuildChain(tokens, tree, {-1.f}); }, {"logp has 1 entries", "expected 0 or 4"});
  ExpectError([&] { BuildChain(std::vector<int32_t>{1, -3}, tree); }, {"tokens[1] = -3"});
}

// ---------------------------------------------------------------------------------------------
// EAGLE-2/3 beam tree.

constexpr int32_t kToyVocab = 12;

// Deterministic top-k of a toy drafter at the end of `path` (tokens from the root's child).
// Log-probs come from a hash of (path, token): in "softmax" mode a log-softmax of quantised
// logits (many exact ties), in "ties" mode raw values in {0, -1, -2} (ties across depths too,
// since a log-prob of 0 keeps the parent's score). Sorted by (log-prob desc, token asc).
void ToyTopK(const std::vector<int32_t>& path, int64_t k, bool ties_mode, int32_t* tokens,
             float* logp) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : path) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ull;
  std::vector<float> lp(kToyVocab);
  for (int32_t v = 0; v < kToyVocab; ++v) {
    uint64_t x = (h ^ static_cast<uint64_t>(v + 7919)) * 0x9E3779B97F4A7C15ull;
    x ^= x >> 29;
    lp[v] = ties_mode ? -static_cast<float>(x % 3) : 0.75f * static_cast<float>(x % 4);
  }
  if (!ties_mode) {
    double sum = 0.0;
    const float max_logit = *std::max_element(lp.begin(), lp.end());
    for (float l : lp) sum += std::exp(static_cast<double>(l - max_logit));
    const float lse = max_logit + static_cast<float>(std::log(sum));
    for (float& l : lp) l = std::min(l - lse, 0.f);
  }
  std::vector<int32_t> order(kToyVocab);
  for (int32_t v = 0; v < kToyVocab; ++v) order[v] = v;
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return lp[a] > lp[b] || (lp[a] == lp[b] && a < b); });
  for (int64_t r = 0; r < k; ++r) {
    tokens[r] = order[r];
    logp[r] = lp[order[r]];
  }
}

std::vector<int32_t> PathTokens(const DraftTree& tree, int32_t node) {
  std::vector<int32_t> tokens;
  for (int32_t i : PathTo(tree, node)) tokens.push_back(tree.token[i]);
  return tokens;
}

class ToyExpander : public TopKExpander {
 public:
  explicit ToyExpander(bool ties_mode) : ties_mode_(ties_mode) {}
  void Expand(const DraftTree& tree, const std::vector<int32_t>& frontier_nodes, int64_t k,
              std::vector<int32_t>& tokens, std::vector<float>& logp) override {
    tree_sizes.push_back(tree.size());
    frontiers.push_back(frontier_nodes);
    EXPECT_EQ(tokens.size(), frontier_nodes.size() * static_cast<size_t>(k));
    EXPECT_EQ(logp.size(), frontier_nodes.size() * static_cast<size_t>(k));
    EXPECT_EQ(tree.draft_logp.size(), static_cast<size_t>(tree.size()));
    for (size_t f = 0; f < frontier_nodes.size(); ++f) {
      ToyTopK(PathTokens(tree, frontier_nodes[f]), k, ties_mode_, &tokens[f * k], &logp[f * k]);
    }
  }
  std::vector<int64_t> tree_sizes;
  std::vector<std::vector<int32_t>> frontiers;

 private:
  bool ties_mode_;
};

// Brute-force EAGLE-2 reimplementation over explicit token paths.
struct BruteCandidate {
  std::vector<int32_t> path;
  float score;
  float logp;
  int32_t depth;
  int32_t index;
};

std::vector<BruteCandidate> BruteBeam(const BeamTreeOptions& o, bool ties_mode,
                                      std::vector<BruteCandidate>* all_out) {
  std::vector<BruteCandidate> all;
  std::vector<int32_t> frontier = {-1};
  const int64_t layers = std::min(o.depth, o.budget);
  size_t layer_begin = 0;
  for (int64_t d = 1; d <= layers; ++d) {
    if (d > 1) {
      std::vector<BruteCandidate> layer(all.begin() + layer_begin, all.end());
      layer_begin = all.size();
      std::sort(layer.begin(), layer.end(), [](const BruteCandidate& a, const BruteCandidate& b) {
        return a.score > b.score || (a.score == b.score && a.index < b.index);
      });
      frontier.clear();
      for (size_t i = 0; i < layer.size() && i < static_cast<size_t>(o.top_k); ++i) {
        frontier.push_back(layer[i].index);
      }
    }
    for (int32_t f : frontier) {
      const std::vector<int32_t> base = f < 0 ? std::vector<int32_t>{} : all[f].path;
      const float base_score = f < 0 ? 0.f : all[f].score;
      std::vector<int32_t> tokens(o.top_k);
      std::vector<float> logp(o.top_k);
      ToyTopK(base, o.top_k, ties_mode, tokens.data(), logp.data());
      for (int64_t r = 0; r < o.top_k; ++r) {
        BruteCandidate c{base, base_score + logp[r], logp[r], static_cast<int32_t>(d),
                         static_cast<int32_t>(all.size())};
        c.path.push_back(tokens[r]);
        all.push_back(c);
      }
    }
  }
  std::vector<BruteCandidate> kept = all;
  std::sort(kept.begin(), kept.end(), [](const BruteCandidate& a, const BruteCandidate& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.depth != b.depth) return a.depth < b.depth;
    return a.index < b.index;
  });
  if (static_cast<int64_t>(kept.size()) > o.budget) kept.resize(o.budget);
  std::sort(kept.begin(), kept.end(), [](const BruteCandidate& a, const BruteCandidate& b) {
    if (a.depth != b.depth) return a.depth < b.depth;
    if (a.score != b.score) return a.score > b.score;
    return a.index < b.index;
  });
  if (all_out != nullptr) *all_out = all;
  return kept;
}

void CheckBeamAgainstBruteForce(const BeamTreeOptions& o, bool ties_mode) {
  SCOPED_TRACE(testing::Message() << "depth " << o.depth << " top_k " << o.top_k << " budget "
                                  << o.budget << (ties_mode ? " ties" : " softmax"));
  ToyExpander expander(ties_mode);
  BeamTreeBuilder builder;
  DraftTree tree;
  builder.Build(expander, o, tree);
  std::vector<BruteCandidate> all;
  const std::vector<BruteCandidate> kept = BruteBeam(o, ties_mode, &all);

  // Candidates (what the expander saw, plus the last layer).
  const DraftTree& cands = builder.candidates();
  ASSERT_EQ(cands.size(), static_cast<int64_t>(all.size()));
  ASSERT_EQ(builder.candidate_scores().size(), all.size());
  cands.Validate(kToyVocab);
  for (size_t c = 0; c < all.size(); ++c) {
    EXPECT_EQ(PathTokens(cands, static_cast<int32_t>(c)), all[c].path) << "candidate " << c;
    EXPECT_EQ(builder.candidate_scores()[c], all[c].score) << "candidate " << c;
  }
  // The expander saw every earlier candidate: call d got the tree of layers 1..d-1.
  const int64_t layers = std::min(o.depth, o.budget);
  ASSERT_EQ(static_cast<int64_t>(expander.tree_sizes.size()), layers);
  for (int64_t d = 0; d < layers; ++d) {
    EXPECT_EQ(expander.tree_sizes[d], d == 0 ? 0 : o.top_k + (d - 1) * o.top_k * o.top_k);
  }

  // Output tree: exactly min(budget, candidates) nodes, equal to the brute force, in order.
  ASSERT_EQ(tree.size(), std::min<int64_t>(o.budget, static_cast<int64_t>(all.size())));
  ASSERT_EQ(tree.size(), static_cast<int64_t>(kept.size()));
  tree.Validate(kToyVocab);
  ASSERT_EQ(tree.draft_logp.size(), static_cast<size_t>(tree.size()));
  for (int32_t i = 0; i < tree.size(); ++i) {
    EXPECT_EQ(PathTokens(tree, i), kept[i].path) << "node " << i;
    EXPECT_EQ(tree.draft_logp[i], kept[i].logp) << "node " << i;
    EXPECT_EQ(builder.node_scores()[i], kept[i].score) << "node " << i;
    EXPECT_EQ(builder.node_to_candidate()[i], kept[i].index) << "node " << i;
    EXPECT_EQ(builder.candidate_to_node()[kept[i].index], i) << "node " << i;
  }
  // Mapping is a bijection between kept candidates and nodes; pruned candidates map to -1.
  int64_t mapped = 0;
  for (int32_t node : builder.candidate_to_node()) mapped += node >= 0;
  EXPECT_EQ(mapped, tree.size());
  // Top-budget by score: no pruned candidate beats a kept one.
  float worst_kept = 0.f;
  for (float s : builder.node_scores()) worst_kept = std::min(worst_kept, s);
  for (size_t c = 0; c < all.size(); ++c) {
    if (builder.candidate_to_node()[c] < 0) {
      EXPECT_LE(builder.candidate_scores()[c], worst_kept) << "candidate " << c;
    }
  }
  // BFS order.
  for (int32_t i = 1; i < tree.size(); ++i) EXPECT_LE(tree.depth[i - 1], tree.depth[i]);
}

TEST(BeamTree, MatchesBruteForce) {
  const std::vector<BeamTreeOptions> configs = {{1, 3, 2},  {1, 3, 10},   {3, 2, 5},   {4, 3, 10},
                                                {5, 4, 25}, {6, 10, 59},  {3, 3, 100}, {7, 5, 1},
                                                {8, 4, 3},  {2, 12, 144}, {5, 1, 5},   {6, 6, 200}};
  for (const BeamTreeOptions& o : configs) {
    CheckBeamAgainstBruteForce(o, false);
    CheckBeamAgainstBruteForce(o, true);
  }
}

TEST(BeamTree, TiesAcrossDepthsStayAncestorClosed) {
  // In "ties" mode many children keep their parent's score (log-prob 0); the kept set must still
  // contain every kept node's parent (Validate checks parent order on the compact tree, and the
  // mapping checks the candidates).
  for (int64_t budget = 1; budget <= 60; ++budget) {
    ToyExpander expander(true);
    BeamTreeBuilder builder;
    DraftTree tree;
    builder.Build(expander, BeamTreeOptions{6, 4, budget}, tree);
    ASSERT_EQ(tree.size(), budget);
    tree.Validate(kToyVocab);
    for (int32_t i = 0; i < tree.size(); ++i) {
      const int32_t c = builder.node_to_candidate()[i];
      const int32_t parent_c = builder.candidates().parent[c];
      EXPECT_EQ(tree.parent[i], parent_c < 0 ? -1 : builder.candidate_to_node()[parent_c]);
    }
  }
}

TEST(BeamTree, BudgetZeroCallsNothing) {
  ToyExpander expander(false);
  DraftTree tree = SmallTree();
  BuildBeamTree(expander, BeamTreeOptions{5, 3, 0}, tree);
  EXPECT_TRUE(tree.empty());
  EXPECT_TRUE(expander.tree_sizes.empty());
}

TEST(BeamTree, BuilderIsReusable) {
  ToyExpander expander(false);
  BeamTreeBuilder builder;
  DraftTree first, second;
  builder.Build(expander, BeamTreeOptions{6, 10, 59}, first);
  builder.Build(expander, BeamTreeOptions{3, 2, 4}, second);
  builder.Build(expander, BeamTreeOptions{6, 10, 59}, second);
  EXPECT_EQ(first.token, second.token);
  EXPECT_EQ(first.parent, second.parent);
  EXPECT_EQ(first.draft_logp, second.draft_logp);
}

// The reranking alone (EAGLE-3's device frontier grows the candidates elsewhere): the candidates
// of a Build, handed back with their scores, give Build's tree at every budget (ties mode
// included); a candidate whose parent is not earlier is an error naming it.
TEST(BeamTree, BuildFromCandidatesKeepsWhatBuildKeeps) {
  for (bool ties : {false, true}) {
    for (int64_t budget : {1, 4, 17, 59, 400}) {
      ToyExpander expander(ties);
      BeamTreeBuilder grown, reranked;
      DraftTree expected, tree;
      grown.Build(expander, BeamTreeOptions{6, 4, budget}, expected);
      const DraftTree& c = grown.candidates();
      const std::vector<float> scores = grown.candidate_scores();
      reranked.BuildFromCandidates(c.token.data(), c.parent.data(), c.draft_logp.data(),
                                   scores.data(), c.size(), grown.layers_built(), budget, tree);
      EXPECT_EQ(tree.token, expected.token) << "budget " << budget;
      EXPECT_EQ(tree.parent, expected.parent) << "budget " << budget;
      EXPECT_EQ(tree.draft_logp, expected.draft_logp) << "budget " << budget;
      EXPECT_EQ(reranked.node_to_candidate(), grown.node_to_candidate());
      EXPECT_EQ(reranked.layers_built(), grown.layers_built());
    }
  }
  const int32_t tokens[] = {3, 4}, parents[] = {-1, 1};
  const float logp[] = {-0.5f, -0.1f}, scores[] = {-0.5f, -0.6f};
  BeamTreeBuilder builder;
  DraftTree tree;
  try {
    builder.BuildFromCandidates(tokens, parents, logp, scores, 2, 2, 2, tree);
    ADD_FAILURE() << "a candidate that is its own parent was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("candidate 1 has token 4, parent 1"), std::string::npos)
        << e.what();
  }
}

// The growth hooks (LTD's depth and size policies): stopping after layer L and keeping K nodes
// gives exactly the tree of options {depth L, budget K}; the hooks see the layers in order.
class StoppingExpander : public ToyExpander {
 public:
  StoppingExpander(int64_t stop_layer, int64_t keep)
      : ToyExpander(false), stop_(stop_layer), keep_(keep) {}
  bool ContinueGrowing(const std::vector<float>& scores, int64_t layer_begin,
                       int64_t layer) override {
    layers_seen.push_back(layer);
    EXPECT_EQ(static_cast<int64_t>(scores.size()) - layer_begin,
              layer == 1 ? 3 : 9);  // top_k 3: a full layer of 3 x 3 children
    return layer < stop_;
  }
  int64_t KeepBudget(const std::vector<float>& scores, int64_t layers, int64_t budget) override {
    keep_layers = layers;
    keep_budget = budget;
    return keep_;
  }
  std::vector<int64_t> layers_seen;
  int64_t keep_layers = 0, keep_budget = 0;

 private:
  int64_t stop_, keep_;
};

TEST(BeamTree, GrowthHooksStopAndTrim) {
  for (int64_t stop : {2, 3, 5}) {
    for (int64_t keep : {1, 4, 7}) {
      StoppingExpander hooked(stop, keep);
      BeamTreeBuilder builder;
      DraftTree tree;
      builder.Build(hooked, BeamTreeOptions{6, 3, 20}, tree);
      EXPECT_EQ(builder.layers_built(), stop);
      std::vector<int64_t> expected_layers;
      for (int64_t l = 2; l <= stop; ++l) expected_layers.push_back(l);
      EXPECT_EQ(hooked.layers_seen, expected_layers);
      EXPECT_EQ(hooked.keep_layers, stop);
      EXPECT_EQ(hooked.keep_budget, 20);
      ToyExpander plain(false);
      DraftTree reference;
      BuildBeamTree(plain, BeamTreeOptions{stop, 3, keep}, reference);
      EXPECT_EQ(tree.size(), keep);
      EXPECT_EQ(tree.token, reference.token) << stop << " " << keep;
      EXPECT_EQ(tree.parent, reference.parent);
    }
  }
  // A kept count above the budget is clipped to it; below 1 to 1.
  StoppingExpander greedy(6, 1000), stingy(6, 0);
  DraftTree a, b;
  BuildBeamTree(greedy, BeamTreeOptions{6, 3, 20}, a);
  BuildBeamTree(stingy, BeamTreeOptions{6, 3, 20}, b);
  EXPECT_EQ(a.size(), 20);
  EXPECT_EQ(b.size(), 1);
}

// An expander that returns fixed (bad) outputs.
class BadExpander : public TopKExpander {
 public:
  enum Mode { kResize, kPositive, kUnsorted, kNegativeToken, kUnset };
  explicit BadExpander(Mode mode) : mode_(mode) {}
  void Expand(const DraftTree&, const std::vector<int32_t>& frontier, int64_t k,
              std::vector<int32_t>& tokens, std::vector<float>& logp) override {
    for (size_t e = 0; e < tokens.size(); ++e) {
      tokens[e] = static_cast<int32_t>(e % k);
      logp[e] = -static_cast<float>(e % k);
    }
    switch (mode_) {
      case kResize:
        tokens.pop_back();
        break;
      case kPositive:
        logp[0] = 0.5f;
        break;
      case kUnsorted:
        logp[k - 1] = 0.f;
        break;
      case kNegativeToken:
        tokens[1] = -2;
        break;
      case kUnset:
        logp[frontier.size() * k - 1] = std::nanf("");
        break;
    }
  }

 private:
  Mode mode_;
};

TEST(BeamTree, BadExpanderOutputIsAnError) {
  DraftTree tree;
  const BeamTreeOptions o{3, 3, 5};
  BadExpander resize(BadExpander::kResize), positive(BadExpander::kPositive),
      unsorted(BadExpander::kUnsorted), negative(BadExpander::kNegativeToken),
      unset(BadExpander::kUnset);
  ExpectError([&] { BuildBeamTree(resize, o, tree); }, {"returned 2 tokens", "expected 3"});
  ExpectError([&] { BuildBeamTree(positive, o, tree); }, {"log-prob 0.5", "expected <= 0"});
  ExpectError([&] { BuildBeamTree(unsorted, o, tree); }, {"not sorted"});
  ExpectError([&] { BuildBeamTree(negative, o, tree); }, {"token -2"});
  ExpectError([&] { BuildBeamTree(unset, o, tree); }, {"log-prob nan"});
  ToyExpander toy(false);
  ExpectError([&] { BuildBeamTree(toy, BeamTreeOptions{0, 3, 5}, tree); }, {"depth must be >= 1"});
  ExpectError([&] { BuildBeamTree(toy, BeamTreeOptions{2, 0, 5}, tree); }, {"top_k must be >= 1"});
  ExpectError([&] { BuildBeamTree(toy, BeamTreeOptions{2, 2, -1}, tree); }, {"budget must be"});
}

// ---------------------------------------------------------------------------------------------
// DDTree best-first tree.

TEST(BestFirstTree, HandExample) {
  // Depth 1: tokens {10, 11} with log-probs {-0.1, -2}; depth 2: {20, 21} with {-0.5, -1}.
  const std::vector<float> logp = {-0.1f, -2.f, -0.5f, -1.f};
  const std::vector<int32_t> tokens = {10, 11, 20, 21};
  DraftTree tree;
  BuildBestFirstTree(logp.data(), tokens.data(), 2, 2, 3, tree);
  // Pops: 10 (-0.1), 10->20 (-0.6), 10->21 (-1.1); 11 (-2) is left out.
  EXPECT_EQ(tree.token, (std::vector<int32_t>{10, 20, 21}));
  EXPECT_EQ(tree.parent, (std::vector<int32_t>{-1, 0, 0}));
  EXPECT_EQ(tree.draft_logp, (std::vector<float>{-0.1f, -0.5f, -1.f}));
  BuildBestFirstTree(logp.data(), tokens.data(), 2, 2, 100, tree);  // all 2 + 4 prefixes
  EXPECT_EQ(tree.size(), 6);
  EXPECT_EQ(tree.token, (std::vector<int32_t>{10, 20, 21, 11, 20, 21}));
  EXPECT_EQ(tree.parent, (std::vector<int32_t>{-1, 0, 0, -1, 3, 3}));
}

// The total order of the header: score desc, depth asc, parent's order, rank asc.
struct Prefix {
  std::vector<int32_t> ranks;
  float score;
};

bool PrefixBefore(const std::vector<int32_t>& a, const std::vector<int32_t>& b, const float* logp,
                  int64_t K) {
  const auto score = [&](const std::vector<int32_t>& ranks, size_t len) {
    float s = 0.f;
    for (size_t d = 0; d < len; ++d) s = s + logp[d * K + ranks[d]];
    return s;
  };
  const float sa = score(a, a.size()), sb = score(b, b.size());
  if (sa != sb) return sa > sb;
  if (a.size() != b.size()) return a.size() < b.size();
  const std::vector<int32_t> pa(a.begin(), a.end() - 1), pb(b.begin(), b.end() - 1);
  if (pa != pb) return PrefixBefore(pa, pb, logp, K);
  return a.back() < b.back();
}

void CheckBestFirstAgainstBruteForce(const std::vector<float>& logp,
                                     const std::vector<int32_t>& tokens, int64_t D, int64_t K,
                                     int64_t budget) {
  SCOPED_TRACE(testing::Message() << "D " << D << " K " << K << " budget " << budget);
  // Every prefix of length 1..D over ranks [0, K).
  std::vector<Prefix> all;
  std::vector<std::vector<int32_t>> layer = {{}};
  for (int64_t d = 0; d < D; ++d) {
    std::vector<std::vector<int32_t>> next;
    for (const auto& p : layer) {
      for (int32_t r = 0; r < K; ++r) {
        std::vector<int32_t> q = p;
        q.push_back(r);
        float s = 0.f;
        for (size_t j = 0; j < q.size(); ++j) s = s + logp[j * K + q[j]];
        all.push_back({q, s});
        next.push_back(q);
      }
    }
    layer = next;
  }
  std::sort(all.begin(), all.end(), [&](const Prefix& a, const Prefix& b) {
    return PrefixBefore(a.ranks, b.ranks, logp.data(), K);
  });

  BestFirstTreeBuilder builder;
  DraftTree tree;
  builder.Build(logp.data(), tokens.data(), D, K, budget, tree);
  const int64_t expected_n = std::min<int64_t>(budget, static_cast<int64_t>(all.size()));
  ASSERT_EQ(tree.size(), expected_n);
  tree.Validate(1000);
  for (int32_t i = 0; i < tree.size(); ++i) {
    std::vector<int32_t> ranks;
    for (int32_t j : PathTo(tree, i)) ranks.push_back(builder.node_ranks()[j]);
    ASSERT_EQ(ranks, all[i].ranks) << "node " << i;
    EXPECT_EQ(builder.node_scores()[i], all[i].score) << "node " << i;
    const int64_t d = static_cast<int64_t>(ranks.size()) - 1;
    EXPECT_EQ(tree.token[i], tokens[d * K + ranks.back()]) << "node " << i;
    EXPECT_EQ(tree.draft_logp[i], logp[d * K + ranks.back()]) << "node " << i;
  }
  // Optimality without reference to tie order: no left-out prefix scores above a kept one.
  for (size_t j = static_cast<size_t>(expected_n); j < all.size(); ++j) {
    if (expected_n > 0) {
      EXPECT_LE(all[j].score, builder.node_scores()[expected_n - 1]);
    }
  }
}

// One randomized builder case: D x K log-prob rows (each sorted descending), their tokens and a
// node budget; total = the nodes of the full K-ary tree of depth D.
struct BuilderCase {
  int64_t D, K;
  int ties;
  std::vector<float> logp;
  std::vector<int32_t> tokens;
  int64_t budget, total;
};

// Runs `check` for D, K in [1, 4], ties 0 (continuous log-probs), 1 (values in {0, -0.5, -1,
// -1.5}: many exact ties) and 2 (every log-prob 0: everything ties; order decided by depth,
// parent, rank), and budgets 0, 1, 2, 5, total / 2, total - 1, total, total + 3; drawn from
// `seed`. Token [d, r] is 100 d plus a random draw below 100 (`random_tokens`) or r (distinct
// per depth).
void ForEachBuilderCase(uint64_t seed, bool random_tokens,
                        const std::function<void(const BuilderCase&)>& check) {
  std::mt19937_64 rng(seed);
  for (int64_t D = 1; D <= 4; ++D) {
    for (int64_t K = 1; K <= 4; ++K) {
      for (int ties = 0; ties < 3; ++ties) {
        BuilderCase c{D, K, ties, std::vector<float>(D * K), std::vector<int32_t>(D * K), 0, 0};
        for (int64_t d = 0; d < D; ++d) {
          for (int64_t r = 0; r < K; ++r) {
            const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
            c.logp[d * K + r] = ties == 0   ? static_cast<float>(-4.0 * u)
                                : ties == 1 ? -0.5f * static_cast<float>(rng() % 4)
                                            : 0.f;
            c.tokens[d * K + r] = static_cast<int32_t>(
                100 * d + (random_tokens ? static_cast<int64_t>(rng() % 100) : r));
          }
          std::sort(c.logp.begin() + d * K, c.logp.begin() + (d + 1) * K, std::greater<float>());
        }
        int64_t layer = 1;
        for (int64_t d = 0; d < D; ++d) c.total += (layer *= K);
        for (int64_t budget : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{5}, c.total / 2,
                               c.total - 1, c.total, c.total + 3}) {
          if (budget < 0) continue;
          SCOPED_TRACE(testing::Message()
                       << "D " << D << " K " << K << " ties " << ties << " budget " << budget);
          c.budget = budget;
          check(c);
        }
      }
    }
  }
}

TEST(BestFirstTree, EqualsBruteForceTopBudgetPrefixes) {
  int cases = 0;
  ForEachBuilderCase(20260501, /*random_tokens=*/true, [&](const BuilderCase& c) {
    CheckBestFirstAgainstBruteForce(c.logp, c.tokens, c.D, c.K, c.budget);
    ++cases;
  });
  EXPECT_EQ(cases, 4 * 4 * 3 * 8);
}

// A one-shot tree builder: (logp, tokens, D, K, budget, tree).
using TreeBuilderFn = void (*)(const float*, const int32_t*, int64_t, int64_t, int64_t, DraftTree&);

// The input errors every one-shot builder reports on D = K = 2 rows: an unsorted logp row (with
// `unsorted_message`), a positive logp, a negative token, D = 0 and a negative budget.
void ExpectBuilderInputErrors(TreeBuilderFn build, const std::string& unsorted_message) {
  DraftTree tree;
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const std::vector<float> unsorted = {-1.f, -0.5f, -0.1f, -0.2f};
  ExpectError([&] { build(unsorted.data(), tokens.data(), 2, 2, 3, tree); }, {unsorted_message});
  const std::vector<float> positive = {0.5f, -1.f, -0.1f, -0.2f};
  ExpectError([&] { build(positive.data(), tokens.data(), 2, 2, 3, tree); },
              {"logp[0, 0] = 0.5", "not a log-probability"});
  const std::vector<float> good = {-0.1f, -1.f, -0.1f, -0.2f};
  const std::vector<int32_t> negative = {1, 2, -3, 4};
  ExpectError([&] { build(good.data(), negative.data(), 2, 2, 3, tree); }, {"tokens[1, 0] = -3"});
  ExpectError([&] { build(good.data(), tokens.data(), 0, 2, 3, tree); }, {"depth D must be >= 1"});
  ExpectError([&] { build(good.data(), tokens.data(), 2, 2, -1, tree); }, {"budget must be >= 0"});
}

TEST(BestFirstTree, BadInputsAreErrors) {
  ExpectBuilderInputErrors(BuildBestFirstTree, "logp row 0 is not sorted");
}

TEST(BestFirstTree, LargeBudgetIsExactAndOrderedByScore) {
  // DDTree's paper setting: D = 15, K = budget = 512 (no brute force; checks the invariants).
  const int64_t D = 15, K = 512, budget = 512;
  std::mt19937_64 rng(7);
  std::vector<float> logp(D * K);
  std::vector<int32_t> tokens(D * K);
  for (int64_t d = 0; d < D; ++d) {
    for (int64_t r = 0; r < K; ++r) {
      logp[d * K + r] = -static_cast<float>((rng() >> 11) * 0x1.0p-53) * 8.f;
      tokens[d * K + r] = static_cast<int32_t>(r);
    }
    std::sort(logp.begin() + d * K, logp.begin() + (d + 1) * K, std::greater<float>());
  }
  BestFirstTreeBuilder builder;
  DraftTree tree;
  builder.Build(logp.data(), tokens.data(), D, K, budget, tree);
  ASSERT_EQ(tree.size(), budget);
  tree.Validate(K);
  for (int64_t i = 1; i < budget; ++i)
    EXPECT_LE(builder.node_scores()[i], builder.node_scores()[i - 1]);
  // Every prefix not in the tree whose parent is in the tree (the frontier) scores no better
  // than the worst node: the first child of each node and the next sibling of each node.
  std::vector<int32_t> first_child, next_sibling;
  ChildrenLists(tree, first_child, next_sibling);
  const float worst = builder.node_scores().back();
  for (int32_t i = 0; i < budget; ++i) {
    const int32_t d = tree.depth[i];
    const int32_t r = builder.node_ranks()[i];
    const float parent_score = tree.parent[i] < 0 ? 0.f : builder.node_scores()[tree.parent[i]];
    if (first_child[i + 1] < 0 && d < D) {
      EXPECT_LE(builder.node_scores()[i] + logp[d * K], worst);
    }
    bool has_next_rank = false;
    for (int32_t c = first_child[tree.parent[i] + 1]; c >= 0; c = next_sibling[c]) {
      has_next_rank |= builder.node_ranks()[c] == r + 1;
    }
    if (!has_next_rank && r + 1 < K) {
      EXPECT_LE(parent_score + logp[(d - 1) * K + r + 1], worst);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// JetSpec group-expansion tree.

TEST(GroupExpandTree, HandExampleAndDifferenceFromDdtree) {
  // The BestFirstTree hand example. Depth 1: tokens {10, 11} with log-probs {-0.1, -2}; depth 2:
  // {20, 21} with {-0.5, -1}.
  const std::vector<float> logp = {-0.1f, -2.f, -0.5f, -1.f};
  const std::vector<int32_t> tokens = {10, 11, 20, 21};
  GroupExpandTreeBuilder builder;
  DraftTree tree;
  // Budget 3: pop root -> group {10, 11}; pop 10 (-0.1) -> only its best child 20 fits.
  builder.Build(logp.data(), tokens.data(), 2, 2, 3, tree);
  EXPECT_EQ(tree.token, (std::vector<int32_t>{10, 11, 20}));
  EXPECT_EQ(tree.parent, (std::vector<int32_t>{-1, -1, 0}));
  EXPECT_EQ(tree.draft_logp, (std::vector<float>{-0.1f, -2.f, -0.5f}));
  EXPECT_TRUE(tree.draft_probs.empty());
  EXPECT_EQ(builder.node_scores(), (std::vector<float>{-0.1f, -2.f, -0.1f + -0.5f}));
  EXPECT_EQ(builder.node_ranks(), (std::vector<int32_t>{0, 1, 0}));
  EXPECT_EQ(builder.expanded(), 2);
  // DDTree with the same inputs and budget keeps the three best prefixes instead: 10, 10->20,
  // 10->21 (11 at -2 is worse than 10->21 at -1.1), so the trees differ.
  DraftTree ddtree;
  BuildBestFirstTree(logp.data(), tokens.data(), 2, 2, 3, ddtree);
  EXPECT_EQ(ddtree.token, (std::vector<int32_t>{10, 20, 21}));
  EXPECT_NE(ddtree.token, tree.token);
  // Budget 100: the full tree, creation order root group, then 10's group, then 11's group.
  builder.Build(logp.data(), tokens.data(), 2, 2, 100, tree);
  EXPECT_EQ(tree.token, (std::vector<int32_t>{10, 11, 20, 21, 20, 21}));
  EXPECT_EQ(tree.parent, (std::vector<int32_t>{-1, -1, 0, 0, 1, 1}));
  EXPECT_EQ(tree.depth, (std::vector<int32_t>{1, 1, 2, 2, 2, 2}));
  EXPECT_EQ(builder.expanded(), 3);  // root, 10, 11; depth-2 nodes are never expanded
  // Budget 0: empty.
  builder.Build(logp.data(), tokens.data(), 2, 2, 0, tree);
  EXPECT_EQ(tree.size(), 0);
}

TEST(GroupExpandTree, PopOrderAcrossDepthsAndTies) {
  // D = 3, K = 2. Depth 1 {-0.1, -0.2}, depth 2 {-1, -3}, depth 3 {-0.05, -4}.
  const std::vector<float> logp = {-0.1f, -0.2f, -1.f, -3.f, -0.05f, -4.f};
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
  DraftTree tree;
  // Pops: root -> n0 (1, -0.1), n1 (2, -0.2); n0 -> n2 (3, -1.1), n3 (4, -3.1);
  // n1 -> n4 (3, -1.2), n5 (4, -3.2); n2 (-1.1) -> n6 (5, -1.15) [last group cut to 1]. Budget 7.
  BuildGroupExpandTree(logp.data(), tokens.data(), 3, 2, 7, tree);
  EXPECT_EQ(tree.token, (std::vector<int32_t>{1, 2, 3, 4, 3, 4, 5}));
  EXPECT_EQ(tree.parent, (std::vector<int32_t>{-1, -1, 0, 0, 1, 1, 2}));
  // Budget 9: n6's group is complete (5, 6), then n4 (-1.2) brings 5.
  BuildGroupExpandTree(logp.data(), tokens.data(), 3, 2, 9, tree);
  EXPECT_EQ(tree.token, (std::vector<int32_t>{1, 2, 3, 4, 3, 4, 5, 6, 5}));
  EXPECT_EQ(tree.parent, (std::vector<int32_t>{-1, -1, 0, 0, 1, 1, 2, 2, 4}));

  // All log-probs 0: every score ties, so nodes are expanded in creation order (breadth first).
  const std::vector<float> zeros(6, 0.f);
  BuildGroupExpandTree(zeros.data(), tokens.data(), 3, 2, 8, tree);
  EXPECT_EQ(tree.parent, (std::vector<int32_t>{-1, -1, 0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(tree.token, (std::vector<int32_t>{1, 2, 3, 4, 3, 4, 5, 6}));
}

// Plain reference of the group expansion: a frontier list scanned for the best (score desc,
// creation index asc) node, no heap.
DraftTree ReferenceGroupExpand(const std::vector<float>& logp, const std::vector<int32_t>& tokens,
                               int64_t D, int64_t K, int64_t budget) {
  DraftTree tree;
  std::vector<float> score;
  std::vector<int32_t> frontier = {-1};  // -1 = root
  while (tree.size() < budget && !frontier.empty()) {
    size_t best = 0;
    for (size_t f = 1; f < frontier.size(); ++f) {
      const int32_t a = frontier[f], b = frontier[best];
      const float sa = a < 0 ? 0.f : score[a], sb = b < 0 ? 0.f : score[b];
      if (sa > sb || (sa == sb && a < b)) best = f;
    }
    const int32_t u = frontier[best];
    frontier.erase(frontier.begin() + static_cast<std::ptrdiff_t>(best));
    const int64_t d = u < 0 ? 0 : tree.depth[u];
    if (d >= D) continue;
    for (int64_t r = 0; r < K && tree.size() < budget; ++r) {
      const int32_t node = tree.AddNode(tokens[d * K + r], u, logp[d * K + r]);
      score.push_back((u < 0 ? 0.f : score[u]) + logp[d * K + r]);
      frontier.push_back(node);
    }
  }
  return tree;
}

TEST(GroupExpandTree, MatchesReferenceAndIsDominatedByDdtree) {
  int cases = 0;
  GroupExpandTreeBuilder builder;  // reused across every case
  ForEachBuilderCase(20260502, /*random_tokens=*/false, [&](const BuilderCase& c) {
    DraftTree tree;
    builder.Build(c.logp.data(), c.tokens.data(), c.D, c.K, c.budget, tree);
    const DraftTree want = ReferenceGroupExpand(c.logp, c.tokens, c.D, c.K, c.budget);
    EXPECT_EQ(tree.token, want.token);
    EXPECT_EQ(tree.parent, want.parent);
    EXPECT_EQ(tree.draft_logp, want.draft_logp);
    // Budget respected exactly, prefix-closed (parents first), depth <= D, width <= K,
    // siblings distinct.
    ASSERT_EQ(tree.size(), std::min(c.budget, c.total));
    tree.Validate(1000);
    std::vector<int32_t> first_child, next_sibling;
    ChildrenLists(tree, first_child, next_sibling);
    for (int64_t slot = 0; slot <= tree.size(); ++slot) {
      int64_t children = 0;
      std::vector<int32_t> seen;
      for (int32_t child = first_child[slot]; child >= 0; child = next_sibling[child]) {
        ++children;
        EXPECT_EQ(std::count(seen.begin(), seen.end(), tree.token[child]), 0);
        seen.push_back(tree.token[child]);
      }
      EXPECT_LE(children, c.K);
    }
    for (int32_t i = 0; i < tree.size(); ++i) {
      EXPECT_LE(tree.depth[i], c.D);
      const float parent = tree.parent[i] < 0 ? 0.f : builder.node_scores()[tree.parent[i]];
      EXPECT_EQ(builder.node_scores()[i], parent + tree.draft_logp[i]);
    }
    // DDTree keeps the top-budget prefixes, so its i-th best score is at least the
    // group-expansion tree's i-th best (same size, both prefix sets of the same inputs).
    BestFirstTreeBuilder ddtree;
    DraftTree dd;
    ddtree.Build(c.logp.data(), c.tokens.data(), c.D, c.K, c.budget, dd);
    ASSERT_EQ(dd.size(), tree.size());
    std::vector<float> a = ddtree.node_scores(), b = builder.node_scores();
    std::sort(a.begin(), a.end(), std::greater<float>());
    std::sort(b.begin(), b.end(), std::greater<float>());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_GE(a[i], b[i]) << "rank " << i;
    ++cases;
  });
  EXPECT_EQ(cases, 4 * 4 * 3 * 8);
}

TEST(GroupExpandTree, WidthOneIsTheArgmaxChain) {
  const std::vector<float> logp = {-0.3f, -2.f, -0.1f, -5.f};
  const std::vector<int32_t> tokens = {4, 9, 2, 7};
  for (int64_t budget : {1, 3, 4, 10}) {
    DraftTree tree;
    BuildGroupExpandTree(logp.data(), tokens.data(), 4, 1, budget, tree);
    const int64_t n = std::min<int64_t>(budget, 4);
    DraftTree chain;
    BuildChain(tokens.data(), n, chain, logp.data());
    EXPECT_EQ(tree.token, chain.token) << budget;
    EXPECT_EQ(tree.parent, chain.parent) << budget;
    EXPECT_EQ(tree.depth, chain.depth) << budget;
    EXPECT_EQ(tree.draft_logp, chain.draft_logp) << budget;
    // DDTree at K = 1 is the same chain.
    DraftTree dd;
    BuildBestFirstTree(logp.data(), tokens.data(), 4, 1, budget, dd);
    EXPECT_EQ(dd.token, chain.token) << budget;
    EXPECT_EQ(dd.parent, chain.parent) << budget;
  }
}

TEST(GroupExpandTree, LowProbabilitySiblingsUseBudget) {
  // JetSpec's paper setting K = 7, D = 15, budget 254 (255 verify tokens with the root): one
  // confident depth-1 token and six near-impossible ones. DDTree spends the budget deep below
  // the confident token; group expansion adds all 7 siblings of every expanded node.
  const int64_t D = 15, K = 7, budget = 254;
  std::vector<float> logp(D * K);
  std::vector<int32_t> tokens(D * K);
  for (int64_t d = 0; d < D; ++d) {
    for (int64_t r = 0; r < K; ++r) {
      logp[d * K + r] = r == 0 ? -0.01f : -10.f - static_cast<float>(r);
      tokens[d * K + r] = static_cast<int32_t>(r);
    }
  }
  GroupExpandTreeBuilder group;
  BestFirstTreeBuilder best;
  DraftTree g, b;
  group.Build(logp.data(), tokens.data(), D, K, budget, g);
  best.Build(logp.data(), tokens.data(), D, K, budget, b);
  ASSERT_EQ(g.size(), budget);
  ASSERT_EQ(b.size(), budget);
  // Group expansion: the argmax spine is expanded to depth 15 (15 groups of 7 = 105 nodes), the
  // rest goes to the siblings' groups; every expanded node has all 7 children except the last.
  const auto max_depth = [](const DraftTree& t) {
    return *std::max_element(t.depth.begin(), t.depth.end());
  };
  EXPECT_EQ(max_depth(g), 15);
  EXPECT_EQ(max_depth(b), 15);
  std::vector<int32_t> first_child, next_sibling;
  ChildrenLists(g, first_child, next_sibling);
  int64_t full = 0, partial = 0;
  for (int64_t slot = 0; slot <= g.size(); ++slot) {
    int64_t children = 0;
    for (int32_t c = first_child[slot]; c >= 0; c = next_sibling[c]) ++children;
    if (children == K) ++full;
    if (children > 0 && children < K) ++partial;
  }
  EXPECT_EQ(full, budget / K);
  EXPECT_EQ(partial, budget % K == 0 ? 0 : 1);
  // The top-budget prefixes score higher in total.
  double gs = 0, bs = 0;
  for (float x : group.node_scores()) gs += x;
  for (float x : best.node_scores()) bs += x;
  EXPECT_GT(bs, gs);
}

TEST(GroupExpandTree, BadInputsAreErrors) {
  ExpectBuilderInputErrors(BuildGroupExpandTree, "group-expand tree: logp row 0 is not sorted");
  DraftTree tree;
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const std::vector<float> good = {-0.1f, -1.f, -0.1f, -0.2f};
  ExpectError([&] { BuildGroupExpandTree(good.data(), tokens.data(), 2, 0, 3, tree); },
              {"top-K must be >= 1"});
}

// ---------------------------------------------------------------------------------------------
// RandomTree.

TEST(RandomTree, DeterministicGivenSeed) {
  RandomTreeOptions options;
  options.with_logp = true;
  options.with_draft_probs = true;
  const DraftTree a = RandomTree(40, 30, 123, options);
  const DraftTree b = RandomTree(40, 30, 123, options);
  const DraftTree c = RandomTree(40, 30, 124, options);
  EXPECT_EQ(a.token, b.token);
  EXPECT_EQ(a.parent, b.parent);
  EXPECT_EQ(a.draft_logp, b.draft_logp);
  EXPECT_EQ(a.draft_probs, b.draft_probs);
  // Two different seeds giving the same 40 parents and tokens has probability ~0.
  EXPECT_TRUE(a.token != c.token || a.parent != c.parent);
}

TEST(RandomTree, OptionsAreHonoured) {
  for (uint64_t seed = 0; seed < 30; ++seed) {
    RandomTreeOptions options;
    const DraftTree plain = RandomTree(60, 3, seed, options);  // forces re-drawn parents
    plain.Validate(3);
    EXPECT_TRUE(plain.draft_logp.empty());
    EXPECT_FALSE(plain.has_draft_probs());
    for (int32_t i = 0; i < plain.size(); ++i) {
      for (int32_t j = 0; j < i; ++j) {
        EXPECT_FALSE(plain.parent[i] == plain.parent[j] && plain.token[i] == plain.token[j])
            << "duplicate siblings " << j << ", " << i << " (seed " << seed << ")";
      }
    }

    options.max_depth = 2;
    const DraftTree shallow = RandomTree(20, 50, seed, options);
    shallow.Validate(50);
    EXPECT_LE(shallow.max_depth(), 2);

    options = RandomTreeOptions{};
    options.chain = true;
    const DraftTree chain = RandomTree(15, 50, seed, options);
    EXPECT_TRUE(chain.IsChain());
    EXPECT_EQ(chain.max_depth(), 15);

    options = RandomTreeOptions{};
    options.with_logp = true;
    options.with_draft_probs = true;
    const DraftTree probs = RandomTree(25, 16, seed, options);
    probs.Validate(16);
    for (int32_t i = 0; i < probs.size(); ++i) {
      const float q = probs.DraftProbsRow(probs.parent[i] + 1)[probs.token[i]];
      EXPECT_GT(q, 0.f);
      EXPECT_EQ(probs.draft_logp[i], std::log(q));
    }
  }
  // Duplicate siblings: with probability 1 every node after the first child copies a sibling.
  RandomTreeOptions dup;
  dup.duplicate_sibling_prob = 1.0;
  const DraftTree tree = RandomTree(50, 1000, 5, dup);
  tree.Validate(1000);
  int duplicates = 0;
  for (int32_t i = 0; i < tree.size(); ++i) {
    for (int32_t j = 0; j < i; ++j)
      duplicates += tree.parent[i] == tree.parent[j] && tree.token[i] == tree.token[j];
  }
  EXPECT_GT(duplicates, 0);
  ExpectError([] { RandomTree(5, 0, 1); }, {"vocabulary size must be >= 1"});
  RandomTreeOptions tight;
  tight.max_depth = 1;
  ExpectError([&] { RandomTree(4, 3, 1, tight); }, {"distinct sibling"});
}

}  // namespace
}  // namespace specbed
