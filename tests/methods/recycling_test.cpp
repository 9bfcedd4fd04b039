// The `recycling` method (Token Recycling, methods/recycling/): TopkRows against at::topk, the
// template's order and shape, the matrix's undo log, drafting through the matrix and learning
// from every verify slot, a repeated prompt never drafting from its own earlier run, the scope
// knob, token identity with AR at T = 0 on every story prompt and on Spec-Bench prompts (drafts
// accepted), and the T = 1 chi-square test with a negative control.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "harness/engine/speculative_decoder.h"
#include "methods/common/logits_rows.h"
#include "methods/method_registry.h"
#include "methods/recycling/recycling_drafter.h"
#include "tests/methods/lookup_test_util.h"
#include "tests/methods/method_test_util.h"

namespace specbed {
namespace {

TEST(TopkRows, CpuPassMatchesAtenTopkOnChosenRows) {
  at::manual_seed(3);
  const at::Tensor logits = at::randn({9, 300});  // continuous values: no ties
  const std::vector<int64_t> rows = {4, 0, 8, 4};
  for (int64_t k : {1, 3, 8}) {
    std::vector<int32_t> got;
    TopkRows(logits, rows, k, got);
    ASSERT_EQ(got.size(), rows.size() * k);
    for (size_t i = 0; i < rows.size(); ++i) {
      const at::Tensor want = std::get<1>(logits[rows[i]].topk(k)).to(at::kInt);
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_EQ(got[i * k + j], want[j].item<int32_t>()) << "row " << rows[i] << " k " << k;
      }
    }
  }
  std::vector<int32_t> ties;
  TopkRows(at::zeros({1, 5}), {0}, 2, ties);
  EXPECT_EQ(ties, (std::vector<int32_t>{0, 1}));  // ties to the lower id
  EXPECT_THROW(TopkRows(logits, {9}, 1, ties), Error);
  EXPECT_THROW(TopkRows(logits, {0}, 301, ties), Error);
}

TEST(RankTemplate, MostLikelyRankPathsParentsFirst) {
  const std::vector<TemplateNode> t = BuildRankTemplate(80, 8);
  ASSERT_EQ(t.size(), 80u);
  // Cost 1: rank 0 at depth 1; cost 2: rank 1 at depth 1 (shallower first), then (0, 0).
  EXPECT_EQ(t[0].parent, -1);
  EXPECT_EQ(t[0].rank, 0);
  EXPECT_EQ(t[1].parent, -1);
  EXPECT_EQ(t[1].rank, 1);
  EXPECT_EQ(t[2].parent, 0);
  EXPECT_EQ(t[2].rank, 0);
  EXPECT_EQ(t[2].depth, 2);
  std::vector<int64_t> cost(t.size());
  std::set<std::pair<int32_t, int32_t>> seen;
  for (size_t i = 0; i < t.size(); ++i) {
    ASSERT_LT(t[i].parent, static_cast<int32_t>(i));
    ASSERT_LT(t[i].rank, 8);
    EXPECT_TRUE(seen.insert({t[i].parent, t[i].rank}).second) << "node " << i << " repeated";
    EXPECT_EQ(t[i].depth, t[i].parent < 0 ? 1 : t[t[i].parent].depth + 1);
    cost[i] = t[i].rank + 1 + (t[i].parent < 0 ? 0 : cost[t[i].parent]);
    if (i > 0) {
      EXPECT_GE(cost[i], cost[i - 1]) << "node " << i;
    }
  }
  // Every rank path of cost <= 6 (2^6 - 1 = 63 compositions) is in, the rest have cost 7.
  EXPECT_EQ(std::count_if(cost.begin(), cost.end(), [](int64_t c) { return c <= 6; }), 63);
  EXPECT_EQ(cost.back(), 7);
  // top_k 1: a chain.
  for (const TemplateNode& n : BuildRankTemplate(5, 1)) EXPECT_EQ(n.rank, 0);
  // A depth bound (Medusa: one depth per head) leaves fewer paths: 2 + 4 of depth <= 2, k = 2.
  const std::vector<TemplateNode> shallow = BuildRankTemplate(100, 2, 2);
  EXPECT_EQ(shallow.size(), 6u);
  for (const TemplateNode& n : shallow) EXPECT_LE(n.depth, 2);
}

// The paper's published tree (Figure 5) as the default template: 80 nodes, 8 / 21 / 25 / 15 / 8 /
// 3 per depth, the root's children its top 8, every node's children ranks 0, 1, ... in order,
// parents first; a smaller tree_nodes takes a breadth-first prefix; top_k < 8 is refused.
TEST(RankTemplate, TokenRecyclingPaperTreeAsPublished) {
  const std::vector<TemplateNode> t = TokenRecyclingPaperTemplate();
  ASSERT_EQ(t.size(), 80u);
  std::vector<int> per_depth(7, 0);
  std::vector<int32_t> next_rank(t.size() + 1, 0);  // per parent (+1: the root)
  for (size_t i = 0; i < t.size(); ++i) {
    ++per_depth[t[i].depth];
    EXPECT_LT(t[i].parent, static_cast<int32_t>(i));
    EXPECT_EQ(t[i].depth, t[i].parent < 0 ? 1 : t[t[i].parent].depth + 1);
    EXPECT_EQ(t[i].rank, next_rank[t[i].parent + 1]++) << "node " << i;
    if (i > 0) {
      EXPECT_GE(t[i].depth, t[i - 1].depth);  // breadth-first
    }
  }
  EXPECT_EQ(per_depth, (std::vector<int>{0, 8, 21, 25, 15, 8, 3}));
  EXPECT_EQ(next_rank[0], 8);
  const std::vector<TemplateNode> prefix = TokenRecyclingPaperTemplate(12);
  ASSERT_EQ(prefix.size(), 12u);
  for (size_t i = 0; i < prefix.size(); ++i) EXPECT_EQ(prefix[i].parent, t[i].parent);
  RecyclingOptions o;
  o.top_k = 4;
  EXPECT_THROW(RecyclingDrafter{o}, Error);
  o.tree_template = RecyclingTemplate::kGeometric;
  EXPECT_NO_THROW(RecyclingDrafter{o});
}

TEST(AdjacencyMatrix, UndoRestoresTheRequestsWrites) {
  AdjacencyMatrix m;
  m.Resize(4, 2);
  const int32_t a[2] = {1, 2}, b[2] = {3, 0}, c[2] = {2, 2};
  m.SetRow(0, a);
  m.BeginLog();  // row 0 = {1, 2} is now permanent
  m.SetRow(0, b);
  m.SetRow(0, c);
  m.SetRow(3, b);
  EXPECT_EQ(m.Row(0)[0], 2);
  m.Undo();
  EXPECT_EQ(m.Row(0)[0], 1);
  EXPECT_EQ(m.Row(0)[1], 2);
  EXPECT_EQ(m.Row(3)[0], -1);
}

// Begin with prefill logits over a 6-token vocabulary favouring `best` (then `best` + 1, ...).
DraftBegin TinyBegin(const std::vector<int32_t>& prompt, int32_t root, at::Tensor& logits,
                     int32_t best) {
  logits = at::zeros({6});
  for (int32_t i = 0; i < 6; ++i) logits[(best + i) % 6] = 6.0f - i;
  DraftBegin b;
  b.prompt = &prompt;
  b.root = root;
  b.last_logits = logits;
  return b;
}

TEST(RecyclingDrafter, DraftsThroughTheMatrixAndLearnsFromEverySlot) {
  RecyclingOptions o;
  o.top_k = 2;
  o.tree_nodes = 3;  // template: (root, rank 0), (root, rank 1), (node 0, rank 0)
  o.tree_template = RecyclingTemplate::kGeometric;
  RecyclingDrafter d(o);
  const std::vector<int32_t> prompt = {5, 1};
  at::Tensor prefill;
  d.Begin(TinyBegin(prompt, 3, prefill, 3));  // M[1] = {3, 4}
  std::vector<int32_t> committed = {5, 1, 3};
  DraftStep step;
  step.root = 1;  // pretend the root is 1: M[1] is the only known row
  step.committed = &committed;
  step.budget = {3, 3};
  DraftTree tree;
  d.Draft(step, tree);
  ASSERT_EQ(tree.size(), 2);  // node 2 needs M[3], unknown: left out
  EXPECT_EQ(tree.token, (std::vector<int32_t>{3, 4}));
  // Verify slots: root 1, node 3, node 4; slot s favours (s + 2) % 6. Path = node 0 (token 3).
  Verdict v;
  v.logits = at::zeros({3, 6});
  for (int s = 0; s < 3; ++s) {
    for (int i = 0; i < 6; ++i) v.logits[s][(s + 2 + i) % 6] = 6.0f - i;
  }
  v.path = {0};
  d.Accept(tree, v);
  EXPECT_EQ(d.matrix().Row(1)[0], 2);  // root slot
  EXPECT_EQ(d.matrix().Row(3)[0], 3);  // accepted node's slot
  EXPECT_EQ(d.matrix().Row(4)[0], 4);  // the rejected node's slot is learned from too
  EXPECT_EQ(d.matrix().Row(4)[1], 5);
  tree.Clear();
  step.budget = {3, 1};  // depth 1: the template's depth-2 node is skipped
  d.Draft(step, tree);
  EXPECT_EQ(tree.token, (std::vector<int32_t>{2, 3}));
}

DecodeResult Decode(Decoder& decoder, LoadedTarget& target, const std::vector<int32_t>& ids) {
  GenerationConfig g;
  g.stop = StopConfigFor(target, 48, {});
  KvCache cache = target.model->NewCache(1, target.model->config().max_seq_len);
  DecodeResult r;
  decoder.Generate(ids, g, cache, r);
  return r;
}

int64_t Sum(const DecodeResult& r, int64_t StepStats::*field) {
  int64_t total = 0;
  for (const StepStats& s : r.steps) total += s.*field;
  return total;
}

std::vector<int64_t> Accepted(const DecodeResult& r) {
  std::vector<int64_t> out;
  for (const StepStats& s : r.steps) out.push_back(s.n_accepted);
  return out;
}

// scope dataset: a repeat of the previous prompt (the runner's warmup) drafts exactly as its
// first run did, and a new prompt starts from what earlier requests taught the matrix (more
// accepted than scope none, which starts every request empty).
TEST(Recycling, ScopeCarriesTheMatrixButNeverARequestsOwnRun) {
  at::set_num_threads(1);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  MethodContext context = testing_util::CachingContextFor(target);
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  const auto stories = testing_util::StoryIds(target);
  auto dataset = registry.Build("recycling", context, {{"tree_nodes", 16}});
  const DecodeResult first = Decode(*dataset, target, stories[0]);
  const DecodeResult again = Decode(*dataset, target, stories[0]);
  EXPECT_EQ(again.generation.tokens, first.generation.tokens);
  EXPECT_EQ(Accepted(again), Accepted(first));
  const DecodeResult next = Decode(*dataset, target, stories[1]);
  auto none = registry.Build("recycling", context, {{"tree_nodes", 16}, {"scope", "none"}});
  Decode(*none, target, stories[0]);
  const DecodeResult fresh = Decode(*none, target, stories[1]);
  // Learned rows from the earlier request: more accepted, fewer steps (T = 0: deterministic;
  // on stories260K 30 vs. 24 accepted, 17 vs. 23 steps).
  EXPECT_GT(Sum(next, &StepStats::n_accepted), Sum(fresh, &StepStats::n_accepted));
  EXPECT_LT(next.steps.size(), fresh.steps.size());
  EXPECT_GT(Sum(fresh, &StepStats::n_drafted), 0);  // it still learns within the request
  EXPECT_EQ(fresh.generation.tokens, next.generation.tokens);
  EXPECT_THROW(registry.ResolveKnobs("recycling", {{"scope", "run"}}), Error);
  EXPECT_THROW(registry.ResolveKnobs("recycling", {{"top_k", 0}}), Error);
}

TEST(Recycling, MatchesArOnEveryStoryPromptAndOnSpecBench) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  EXPECT_TRUE(registry.Info("recycling").traits.tree);
  testing_util::ExpectMatchesArOnStoriesAndSpecBench(
      "recycling", {nlohmann::json::object(), {{"template", "geometric"}}});
}

// At T = 1 (sample_follow over deterministic trees) the output is the target's distribution;
// the greedy-acceptance negative control fails (testing_util::ExpectLosslessAtTemperatureOne).
TEST(Recycling, LosslessAtTemperatureOne) {
  at::set_num_threads(1);
  RecyclingOptions o;
  o.top_k = 2;
  o.tree_nodes = 6;
  o.tree_template = RecyclingTemplate::kGeometric;
  testing_util::ExpectLosslessAtTemperatureOne(std::make_unique<RecyclingDrafter>(o), 6);
}

}  // namespace
}  // namespace specbed
