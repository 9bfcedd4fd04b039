// The shipped stories260K block drafters (models/stories260K/dflash, trained by
// `specbed train dflash`; models/stories260K/jetspec, by `specbed train jetspec`;
// models/stories260K/blockpilot, by `specbed blockpilot label` + `train`) on the speculative
// decoder: for `dflash` (block sizes 8 and 16), `ddtree`, `jetspec` (both budget conventions)
// and `dflash+blockpilot`, every story prompt reproduces AR token for token at T = 0 in fp32, the
// per-step node counts respect the budget, and tau clears a floor that an untrained head
// (tau ~ 1.0) cannot reach; with honest budgets (cache sized for the largest tree), ddtree/jetspec
// at budget 128 and eagle3 at 60 tokens draft their full budget on every step with room for it.
// Deterministic (greedy, fp32, one thread): false-failure rate 0.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/runner/runner.h"
#include "methods/dflash/dflash_checkpoint.h"
#include "methods/method_registry.h"
#include "tests/methods/dflash_test_util.h"
#include "tests/methods/story_test_util.h"

namespace specbed {
namespace {

std::string Shipped(const std::string& name) {
  return std::string(SPECBED_SOURCE_DIR) + "/models/stories260K/" + name;
}

struct ShippedCase {
  std::string method;
  nlohmann::json knobs;
  int64_t max_nodes;  // drafted nodes per step at most
  double min_tau;     // floor on tokens per verify step over all prompts
};

TEST(ShippedBlockDrafters, HeadsAreTrainedAsRecorded) {
  const DflashCheckpoint dflash = LoadDflashCheckpoint(Shipped("dflash"));
  EXPECT_FALSE(dflash.config.causal);
  EXPECT_EQ(dflash.config.block_size, 16);
  EXPECT_EQ(dflash.recipe["loss"], "ce");
  EXPECT_EQ(dflash.recipe["gamma"], 7.0);
  const DflashCheckpoint jetspec = LoadDflashCheckpoint(Shipped("jetspec"));
  EXPECT_TRUE(jetspec.config.causal);
  EXPECT_EQ(jetspec.recipe["loss"], "forward_kl");
  EXPECT_EQ(jetspec.recipe["gamma"], 0.0);
}

TEST(ShippedBlockDrafters, MatchArOnEveryStoryPrompt) {
  at::set_num_threads(1);
  testing_util::StoriesMethods s(testing_util::DflashContextFor);
  const std::string dflash = Shipped("dflash"), jetspec = Shipped("jetspec");
  const std::vector<ShippedCase> cases = {
      {"dflash", {{"drafter", dflash}, {"block_size", 8}}, 7, 1.6},
      {"dflash", {{"drafter", dflash}}, 15, 1.8},
      {"ddtree", {{"drafter", dflash}, {"budget", 32}}, 32, 2.3},
      {"jetspec", {{"drafter", jetspec}, {"budget", 32}}, 31, 2.2},
      {"jetspec", {{"drafter", jetspec}, {"budget", 64}, {"budget_convention", "ddtree"}}, 64, 2.3},
      {"dflash+blockpilot", {{"drafter", dflash}, {"predictor", Shipped("blockpilot")}}, 17, 1.8},
  };
  for (const ShippedCase& c : cases) {
    std::unique_ptr<Decoder> decoder = s.registry.Build(c.method, s.context, c.knobs);
    testing_util::StoryTotals totals;
    ASSERT_NO_FATAL_FAILURE(testing_util::ExpectStoriesMatchAr(
        s.target, *decoder, c.method + c.knobs.dump(),
        [&](const StepStats& s) {
          EXPECT_LE(s.n_drafted, c.max_nodes) << c.method << c.knobs.dump();
        },
        &totals));
    EXPECT_GT(totals.tau(), c.min_tau) << c.method << c.knobs.dump();
  }
}

// Honest budgets: with the cache sized by CacheLengthFor (room for the largest tree), ddtree and
// jetspec at budget 128 and eagle3 at total_tokens 60 draft their full node budget on every step
// whose depth limit (tokens still allowed) leaves room for the full tree depth,
// never more than the budget, and reproduce AR token for token at T = 0.
TEST(ShippedBlockDrafters, DraftTheFullBudgetOnEveryStepWithRoom) {
  at::set_num_threads(1);
  testing_util::StoriesMethods s(testing_util::DflashContextFor);
  struct BudgetCase {
    std::string method;
    nlohmann::json knobs;
    int64_t nodes, depth;  // the full tree: drafted nodes (root excluded) and depth
  };
  const std::vector<BudgetCase> cases = {
      {"ddtree", {{"drafter", Shipped("dflash")}, {"budget", 128}}, 128, 15},
      {"jetspec", {{"drafter", Shipped("jetspec")}, {"budget", 128}}, 127, 15},
      {"eagle3", {{"total_tokens", 60}}, 59, 8},
  };
  const int64_t max_new = 64;
  const auto prompts = LoadDataset("stories", {});
  for (const BudgetCase& c : cases) {
    std::unique_ptr<Decoder> decoder = s.registry.Build(c.method, s.context, c.knobs);
    EXPECT_EQ(decoder->MaxDraftNodes(), c.nodes) << c.method;
    int64_t full = 0, limited = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const testing_util::StoryRun run = testing_util::RunStoryPrompt(
          s.target, *decoder, prompts[i], {max_new, /*extra_cache=*/-1, i});
      ASSERT_EQ(run.spec.generation.tokens, run.ar.tokens) << c.method << " prompt " << i;
      int64_t generated = 1;  // the first token comes from the prefill
      for (const StepStats& s : run.spec.steps) {
        const int64_t depth_room = max_new - generated;
        EXPECT_LE(s.n_drafted, c.nodes) << c.method;
        EXPECT_LE(s.draft_depth, std::min(c.depth, depth_room)) << c.method;
        if (depth_room >= c.depth) {
          EXPECT_EQ(s.n_drafted, c.nodes)
              << c.method << " prompt " << i << " step at " << generated;
          ++full;
        } else {
          ++limited;
        }
        generated += s.n_emitted;
      }
    }
    EXPECT_GT(full, limited) << c.method << ": most steps have room for the full tree";
  }
}

}  // namespace
}  // namespace specbed
