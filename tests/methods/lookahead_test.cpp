// The `lookahead` method (lookahead decoding, methods/lookahead/): the n-gram pool, the budget,
// the two-branch tree (the tree mask equals the paper's lookahead mask), the Jacobi update from
// the verify logits, budget clipping, token identity with AR at T = 0 on every story prompt and
// on Spec-Bench prompts (drafts accepted), and the T = 1 chi-square test with a negative control.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "harness/engine/speculative_decoder.h"
#include "methods/lookahead/lookahead_drafter.h"
#include "methods/method_registry.h"
#include "tests/methods/lookup_test_util.h"

namespace specbed {
namespace {

std::vector<int32_t> Entries(const NgramPool& pool, int32_t key) {
  const std::vector<int32_t>* list = pool.Find(key);
  return list == nullptr ? std::vector<int32_t>{} : *list;
}

TEST(NgramPool, MostRecentFirstDeduplicatedAndCapped) {
  NgramPool pool(2, 2);
  const int32_t a[2] = {1, 2}, b[2] = {3, 4}, c[2] = {5, 6};
  pool.Insert(7, a);
  pool.Insert(7, b);
  EXPECT_EQ(Entries(pool, 7), (std::vector<int32_t>{3, 4, 1, 2}));
  pool.Insert(7, a);  // present: moves to the front
  EXPECT_EQ(Entries(pool, 7), (std::vector<int32_t>{1, 2, 3, 4}));
  pool.Insert(7, c);  // full: the oldest ({3, 4}) goes
  EXPECT_EQ(Entries(pool, 7), (std::vector<int32_t>{5, 6, 1, 2}));
  EXPECT_EQ(pool.Find(8), nullptr);
  NgramPool none(2, 0);  // guess 0: nothing is kept
  none.Insert(7, a);
  EXPECT_EQ(none.Find(7), nullptr);
}

TEST(Lookahead, SpecBenchSettingBudget) {
  const DraftBudget b = LookaheadBudget(LookaheadOptions{7, 5, 7, false});
  EXPECT_EQ(b.nodes, 56);  // (W + G) (N - 1)
  EXPECT_EQ(b.depth, 10);  // W + N - 2
}

// A lookahead drafter begun on `prompt` (seed 5) and one step from the prompt's last token with
// the full budget of its options: Draft() drafts it (again) into `tree`.
struct WindowStep {
  WindowStep(const LookaheadOptions& o, std::vector<int32_t> p)
      : prompt(std::move(p)), committed(prompt), drafter(o) {
    DraftBegin begin;
    begin.prompt = &prompt;
    begin.seed = 5;
    drafter.Begin(begin);
    step.root = prompt.back();
    step.committed = &committed;
    step.budget = LookaheadBudget(o);
  }
  void Draft() {
    tree.Clear();
    drafter.Draft(step, tree);
  }
  std::vector<int32_t> prompt, committed;
  LookaheadDrafter drafter;
  DraftStep step;
  DraftTree tree;
};

// The own_column layout, W = 3, N = 4 (3 levels), G = 2 on an empty pool: the window alone. Node
// (level l, column j) must see exactly the root, level 1 of columns 0..j and its own column's
// levels below l.
TEST(LookaheadDrafter, OwnColumnWindowTree) {
  WindowStep w(LookaheadOptions{3, 4, 2, false, LookaheadLayout::kOwnColumn}, {9, 8, 7, 6});
  w.Draft();
  const LookaheadDrafter& d = w.drafter;
  const DraftTree& tree = w.tree;
  ASSERT_EQ(tree.size(), 9);
  // Level-1 chain: nodes 0, 1, 2; column j's levels 2, 3: nodes 3 + 2j, 4 + 2j.
  auto node = [](int l, int j) { return l == 1 ? j : 3 + 2 * j + (l - 2); };
  for (int j = 0; j < 3; ++j) {
    for (int l = 1; l <= 3; ++l) {
      const int32_t n = node(l, j);
      EXPECT_EQ(tree.token[n], d.level_tokens(l - 1)[j]);
      EXPECT_EQ(tree.depth[n], j + l) << "level " << l << " column " << j;
      std::vector<int32_t> want;
      for (int c = 0; c <= j; ++c) want.push_back(node(1, c));
      for (int m = 2; m <= l; ++m) want.push_back(node(m, j));
      EXPECT_EQ(PathTo(tree, n), want) << "level " << l << " column " << j;
    }
  }
  for (int32_t t : tree.token)
    EXPECT_NE(std::find(w.prompt.begin(), w.prompt.end(), t), w.prompt.end());
}

// Whether the pool holds the 3-gram (key; a, b).
bool PoolHas(const LookaheadDrafter& d, int32_t key, int32_t a, int32_t b) {
  const std::vector<int32_t>* list = d.pool().Find(key);
  for (size_t i = 0; list != nullptr && i + 1 < list->size(); i += 2) {
    if ((*list)[i] == a && (*list)[i + 1] == b) return true;
  }
  return false;
}

TEST(LookaheadDrafter, OwnColumnJacobiUpdateFillsThePoolAndMovesTheWindow) {
  // 2 columns, 2 levels, 2 guesses
  WindowStep w(LookaheadOptions{2, 3, 2, false, LookaheadLayout::kOwnColumn}, {1, 2, 3});
  LookaheadDrafter& d = w.drafter;
  const std::vector<int32_t> l0 = d.level_tokens(0), l1 = d.level_tokens(1);
  w.Draft();
  ASSERT_EQ(w.tree.size(), 4);  // empty pool: the window only; top levels are nodes 2, 3
  Verdict v;
  v.logits = at::zeros({5, 6});
  v.logits[3][4] = 1.0f;  // column 0's next token: 4
  v.logits[4][5] = 1.0f;  // column 1's: 5
  d.Accept(w.tree, v);
  EXPECT_EQ(d.level_tokens(0), l1);
  EXPECT_EQ(d.level_tokens(1), (std::vector<int32_t>{4, 5}));
  // Column 0's 3-gram (l0[0], l1[0], 4) is in the pool under l0[0].
  ASSERT_TRUE(PoolHas(d, l0[0], l1[0], 4));
  // Next step from root l0[0]: its candidates come first as a trie, then the window.
  w.step.root = l0[0];
  w.Draft();
  EXPECT_GE(d.last_candidates(), 1);
  EXPECT_EQ(w.tree.parent[0], -1);
  EXPECT_EQ(w.tree.token[0], (*d.pool().Find(l0[0]))[0]);
  // A depth budget of 2 holds one column (depth 1 + 1), a node budget of 2 none.
  w.step.budget = {8, 2};
  w.Draft();
  EXPECT_EQ(w.tree.max_depth(), 2);
  w.step.root = 0;  // no candidates
  w.step.budget = {1, 8};
  w.Draft();
  EXPECT_EQ(w.tree.size(), 0);
}

// The reference layout (hao-ai-lab/LookaheadDecoding), W = 3, N = 4, on an empty pool: a chain of
// W - 1 = 2 level-1 tokens from the root; column 0's levels 2, 3 hang below the root, column j's
// below chain token j - 1, so node (level l >= 2, column j) sees the root, chain tokens 0..j-1 and
// its column's levels below l (the reference's mask: level l of column j at depth j + l - 1).
TEST(LookaheadDrafter, ReferenceWindowTreeIsThePapersMask) {
  WindowStep w(LookaheadOptions{3, 4, 2, false}, {9, 8, 7, 6});
  w.Draft();
  const LookaheadDrafter& d = w.drafter;
  const DraftTree& tree = w.tree;
  ASSERT_EQ(tree.size(), 8);  // W (N - 1) - 1
  // Chain: nodes 0, 1; column j's levels 2, 3: nodes 2 + 2j, 3 + 2j.
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(tree.token[j], d.level_tokens(0)[j]);
    EXPECT_EQ(tree.depth[j], j + 1);
  }
  for (int j = 0; j < 3; ++j) {
    for (int l = 2; l <= 3; ++l) {
      const int32_t n = 2 + 2 * j + (l - 2);
      EXPECT_EQ(tree.token[n], d.level_tokens(l - 1)[j]);
      EXPECT_EQ(tree.depth[n], j + l - 1) << "level " << l << " column " << j;
      std::vector<int32_t> want;
      for (int c = 0; c < j; ++c) want.push_back(c);
      for (int m = 2; m <= l; ++m) want.push_back(2 + 2 * j + (m - 2));
      EXPECT_EQ(PathTo(tree, n), want) << "level " << l << " column " << j;
    }
  }
  // A depth budget of 3 holds two columns (column 1's top at depth 1 + 2: 5 nodes); a node
  // budget of 4 holds one (two need 2 (N - 1) - 1 = 5).
  w.step.budget = {56, 3};
  w.Draft();
  EXPECT_EQ(w.tree.size(), 5);
  EXPECT_EQ(w.tree.max_depth(), 3);
  w.step.budget = {4, 8};
  w.Draft();
  EXPECT_EQ(w.tree.size(), 2);  // column 0 alone: its two levels below the root
}

// The reference layout's Jacobi update (W = 2, N = 3, G = 4): column 0's n-gram is keyed on the
// root (the real last token), column 1's on chain token 0; the chain takes column 1's level 2 and R
// becomes level 2. With pool_from_prompt every committed token's N-gram enters the pool too.
TEST(LookaheadDrafter, ReferenceJacobiUpdateKeysColumnZeroOnTheRoot) {
  WindowStep w(LookaheadOptions{2, 3, 4, true}, {1, 2, 3});  // G 4: no n-gram is evicted
  LookaheadDrafter& d = w.drafter;
  const std::vector<int32_t> l0 = d.level_tokens(0), l1 = d.level_tokens(1);
  w.Draft();
  // The prompt's only 3-gram (1; 2, 3) is keyed on 1, not on the root 3: the window only.
  ASSERT_EQ(w.tree.size(), 3);  // chain token 0, column 0's level 2 (below the root), column 1's
  EXPECT_EQ(w.tree.parent[1], -1);
  EXPECT_EQ(w.tree.parent[2], 0);
  Verdict v;
  v.logits = at::zeros({4, 8});
  v.logits[2][4] = 1.0f;  // column 0's next token (its top is node 1, slot 2): 4
  v.logits[3][5] = 1.0f;  // column 1's (node 2, slot 3): 5
  v.tokens = {7, 6};      // committed this step
  d.Accept(w.tree, v);
  EXPECT_TRUE(PoolHas(d, 3, l1[0], 4));      // keyed on the root
  EXPECT_TRUE(PoolHas(d, l0[0], l1[1], 5));  // keyed on the token before column 1
  EXPECT_TRUE(PoolHas(d, 2, 3, 7));          // committed: (2, 3, 7) and (3, 7, 6)
  EXPECT_TRUE(PoolHas(d, 3, 7, 6));
  EXPECT_EQ(d.level_tokens(0)[0], l1[1]);
  EXPECT_EQ(d.level_tokens(1), (std::vector<int32_t>{4, 5}));
}

TEST(Lookahead, MatchesArOnEveryStoryPromptAndOnSpecBench) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  EXPECT_TRUE(registry.Info("lookahead").traits.tree);
  EXPECT_THROW(registry.ResolveKnobs("lookahead", {{"level", 1}}), Error);
  testing_util::ExpectMatchesArOnStoriesAndSpecBench(
      "lookahead", {nlohmann::json::object(),
                    {{"pool_from_prompt", true}},
                    {{"layout", "own_column"}, {"pool_from_prompt", true}}});
}

// At T = 1 (sample_follow over deterministic trees) the output is the target's distribution;
// the greedy-acceptance negative control fails (testing_util::ExpectLosslessAtTemperatureOne).
TEST(Lookahead, LosslessAtTemperatureOne) {
  at::set_num_threads(1);
  testing_util::ExpectLosslessAtTemperatureOne(
      std::make_unique<LookaheadDrafter>(LookaheadOptions{2, 3, 2, true}), 8);
}

}  // namespace
}  // namespace specbed
