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

// W = 3, N = 4 (3 levels), G = 2 on an empty pool: the window alone. Node (level l, column j)
// must see exactly the root, level 1 of columns 0..j and its own column's levels below l: the
// paper's lookahead mask.
TEST(LookaheadDrafter, WindowTreeIsThePapersMask) {
  LookaheadDrafter d(LookaheadOptions{3, 4, 2, false});
  const std::vector<int32_t> prompt = {9, 8, 7, 6};
  DraftBegin begin;
  begin.prompt = &prompt;
  begin.seed = 5;
  d.Begin(begin);
  std::vector<int32_t> committed = prompt;
  DraftStep step;
  step.root = 6;
  step.committed = &committed;
  step.budget = LookaheadBudget(LookaheadOptions{3, 4, 2, false});
  DraftTree tree;
  d.Draft(step, tree);
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
  for (int32_t t : tree.token) EXPECT_NE(std::find(prompt.begin(), prompt.end(), t), prompt.end());
}

TEST(LookaheadDrafter, JacobiUpdateFillsThePoolAndMovesTheWindow) {
  const LookaheadOptions o{2, 3, 2, false};  // 2 columns, 2 levels, 2 guesses
  LookaheadDrafter d(o);
  const std::vector<int32_t> prompt = {1, 2, 3};
  DraftBegin begin;
  begin.prompt = &prompt;
  d.Begin(begin);
  const std::vector<int32_t> l0 = d.level_tokens(0), l1 = d.level_tokens(1);
  std::vector<int32_t> committed = prompt;
  DraftStep step;
  step.root = 3;
  step.committed = &committed;
  step.budget = LookaheadBudget(o);
  DraftTree tree;
  d.Draft(step, tree);
  ASSERT_EQ(tree.size(), 4);  // empty pool: the window only; top levels are nodes 2, 3
  Verdict v;
  v.logits = at::zeros({5, 6});
  v.logits[3][4] = 1.0f;  // column 0's next token: 4
  v.logits[4][5] = 1.0f;  // column 1's: 5
  d.Accept(tree, v);
  EXPECT_EQ(d.level_tokens(0), l1);
  EXPECT_EQ(d.level_tokens(1), (std::vector<int32_t>{4, 5}));
  // Column 0's 3-gram (l0[0], l1[0], 4) is in the pool under l0[0].
  const std::vector<int32_t>* list = d.pool().Find(l0[0]);
  ASSERT_NE(list, nullptr);
  bool found = false;
  for (size_t i = 0; i + 1 < list->size(); i += 2) {
    found = found || ((*list)[i] == l1[0] && (*list)[i + 1] == 4);
  }
  EXPECT_TRUE(found);
  // Next step from root l0[0]: its candidates come first as a trie, then the window.
  step.root = l0[0];
  tree.Clear();
  d.Draft(step, tree);
  EXPECT_GE(d.last_candidates(), 1);
  EXPECT_EQ(tree.parent[0], -1);
  EXPECT_EQ(tree.token[0], (*list)[0]);
  // A depth budget of 2 holds one column (depth 1 + 1), a node budget of 2 none.
  tree.Clear();
  step.budget = {8, 2};
  d.Draft(step, tree);
  EXPECT_EQ(tree.max_depth(), 2);
  tree.Clear();
  step.root = 0;  // no candidates
  step.budget = {1, 8};
  d.Draft(step, tree);
  EXPECT_EQ(tree.size(), 0);
}

TEST(Lookahead, MatchesArOnEveryStoryPromptAndOnSpecBench) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  EXPECT_TRUE(registry.Info("lookahead").traits.tree);
  EXPECT_THROW(registry.ResolveKnobs("lookahead", {{"level", 1}}), Error);
  testing_util::ExpectMatchesArOnStoriesAndSpecBench(
      "lookahead", {nlohmann::json::object(), {{"pool_from_prompt", true}}});
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
