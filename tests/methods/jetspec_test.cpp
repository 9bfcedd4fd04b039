// JetSpec (methods/jetspec) and DFlash blocks larger than the head's, end to end on the
// speculative decoder (verification is lossless whatever the head's quality; on stories260K the
// shipped heads nudged by seeded noise, so steps accept all, part or none of their drafts, and
// on the tiny target seeded random CAUSAL heads):
// - stories260K at T = 0, fp32: `jetspec` (several budgets and widths, both budget conventions,
//   a block larger than the head's, a non-causal head), `ddtree` under the jetspec convention
//   and `dflash` with block_size 10 and 16 (head block 6) are token-identical to AR on 8 story
//   prompts; every step drafts exactly the nodes the convention gives (budget - 1 for "jetspec",
//   budget for "ddtree", capped by the full tree and the block's depth) and no deeper than
//   block_size - 1;
// - DflashDrafter::set_block_size changes the rows drafted between prompts and stays exact;
// - a tiny random target (vocabulary 4): the distribution of 3-token outputs over 30000 seeded
//   generations at T = 1 matches the target's exact distribution for `jetspec` (sample-then-
//   follow, built through the registry) and for `dflash` with block_size 9 > 6 (chain rejection
//   sampling); chi-square over 64 cells, reject at p < 1e-4 (false-failure rate about 1e-4 per
//   check, 2 checks; seeds fixed, so a given build either passes or fails deterministically);
//   negative controls: both fail (p < 1e-4) under greedy acceptance, `dflash` also under a
//   correction drawn from the target instead of the residual (VerifierFault);
// - knob defaults, the budget conventions and their errors.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/engine/verifier.h"
#include "harness/runner/runner.h"
#include "methods/dflash/dflash_drafter.h"
#include "methods/dflash/dflash_method.h"
#include "methods/method_registry.h"
#include "tests/methods/dflash_test_util.h"
#include "tests/methods/story_test_util.h"

namespace specbed {
namespace {

using testing::HasSubstr;
using testing_util::DflashContextFor;
using testing_util::DflashHeadConfig;
using testing_util::WriteDflashHead;

// K + K^2 + ... + K^D.
int64_t FullTreeSize(int64_t K, int64_t D) {
  int64_t total = 0, layer = 1;
  for (int64_t d = 0; d < D; ++d) total += (layer *= K);
  return total;
}

struct StoryCase {
  std::string method;
  nlohmann::json knobs;
  int64_t depth;      // block_size - 1
  int64_t n_drafted;  // nodes every step with room for the full depth drafts
};

// Runs `decoder` on 8 story prompts at T = 0 and checks AR equality and the per-step counts.
void ExpectExactOnStories(LoadedTarget& target, Decoder& decoder, const StoryCase& c) {
  SCOPED_TRACE(c.method + " " + c.knobs.dump());
  const auto prompts = LoadDataset("stories", {});
  int64_t steps = 0;
  testing_util::AcceptanceCounts counts;
  for (size_t i = 0; i < 8; ++i) {
    // Room for every step's full tree after the last committed token.
    const testing_util::StoryRun run =
        testing_util::RunStoryPrompt(target, decoder, prompts[i], {48, /*extra_cache=*/80, 0});
    const DecodeResult& spec = run.spec;
    ASSERT_EQ(spec.generation.tokens, run.ar.tokens) << "prompt " << i;
    int64_t generated = 1;  // the first token comes from the prefill
    for (const StepStats& s : spec.steps) {
      // Near the end only the depth is limited, by the tokens still allowed.
      const int64_t depth_room = 48 - generated;
      if (depth_room >= c.depth) {
        EXPECT_EQ(s.n_drafted, c.n_drafted) << "prompt " << i;
      }
      EXPECT_LE(s.n_drafted, c.n_drafted) << "prompt " << i;
      EXPECT_LE(s.draft_depth, std::min(c.depth, depth_room)) << "prompt " << i;
      generated += s.n_emitted;
    }
    counts.Add(spec.steps);
    steps += static_cast<int64_t>(spec.steps.size());
  }
  EXPECT_GT(steps, 0);
  // The nudged heads make the test reach every verification outcome.
  EXPECT_GT(counts.accepted, 0);
  EXPECT_GT(counts.none_accepted, 0);
  if (counts.deep > 0) {
    EXPECT_GT(counts.partial, 0);
  }
}

class JetspecStories : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    at::set_num_threads(1);
    target_ = new LoadedTarget(LoadModel("stories260K", at::kFloat));
    // Nudged shipped heads (dflash_test_util.h): they accept some drafts and reject others.
    causal_dir_ = new std::string(testing_util::WriteNudgedStoriesHead(
        "stories260K-jetspec", 6, testing_util::kNudge, 5, "jetspec_stories_causal"));
    bidir_dir_ = new std::string(testing_util::WriteNudgedStoriesHead(
        "stories260K-dflash", 6, testing_util::kNudge, 6, "jetspec_stories_bidir"));
  }
  static void TearDownTestSuite() {
    delete target_;
    delete causal_dir_;
    delete bidir_dir_;
  }

  static LoadedTarget* target_;
  static std::string* causal_dir_;
  static std::string* bidir_dir_;
};

LoadedTarget* JetspecStories::target_ = nullptr;
std::string* JetspecStories::causal_dir_ = nullptr;
std::string* JetspecStories::bidir_dir_ = nullptr;

TEST_F(JetspecStories, TreesAndLongBlocksMatchArWithConventionBudgets) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = DflashContextFor(*target_);
  const std::string& dir = *causal_dir_;
  // Head block 6: depth 5 unless block_size says otherwise.
  const std::vector<StoryCase> cases = {
      // jetspec convention: budget counts the root -> budget - 1 drafted nodes.
      {"jetspec", {{"drafter", dir}}, 5, 31},
      {"jetspec", {{"drafter", dir}, {"budget", 16}, {"width", 7}}, 5, 15},
      {"jetspec", {{"drafter", dir}, {"budget", 4}, {"width", 3}}, 5, 3},
      {"jetspec", {{"drafter", dir}, {"budget", 33}, {"width", 1}}, 5, 5},  // chain of depth 5
      {"jetspec", {{"drafter", dir}, {"budget", 2}, {"width", 2}}, 5, 1},
      // ddtree convention: budget = drafted nodes.
      {"jetspec",
       {{"drafter", dir}, {"budget", 16}, {"width", 4}, {"budget_convention", "ddtree"}},
       5,
       16},
      // A block larger than the head's: 11 rows, depth 10.
      {"jetspec", {{"drafter", dir}, {"budget", 64}, {"width", 2}, {"block_size", 11}}, 10, 63},
      {"jetspec", {{"drafter", dir}, {"budget", 40}, {"width", 1}, {"block_size", 11}}, 10, 10},
      // A non-causal head runs the same tree over its marginals.
      {"jetspec", {{"drafter", *bidir_dir_}, {"budget", 24}, {"width", 3}}, 5, 23},
      // ddtree with the jetspec convention.
      {"ddtree",
       {{"drafter", dir}, {"budget", 12}, {"top_k", 3}, {"budget_convention", "jetspec"}},
       5,
       11},
      {"ddtree", {{"drafter", dir}, {"budget", 12}, {"top_k", 3}}, 5, 12},
      // dflash chains longer than the head's block (causal head).
      {"dflash", {{"drafter", dir}, {"block_size", 10}}, 9, 9},
      {"dflash", {{"drafter", dir}, {"block_size", 16}}, 15, 15},
  };
  for (const StoryCase& c : cases) {
    // The expected count is the convention's node budget capped by the full tree.
    if (c.method != "dflash") {
      const nlohmann::json k = registry.ResolveKnobs(c.method, c.knobs);
      const int64_t nodes = DraftedNodesForBudget(
          k["budget"].get<int64_t>(), k["budget_convention"].get<std::string>(), c.method);
      const int64_t width = k[c.method == "jetspec" ? "width" : "top_k"].get<int64_t>();
      ASSERT_EQ(c.n_drafted, std::min(nodes, FullTreeSize(width, std::min(c.depth, nodes))))
          << c.knobs.dump();
    }
    auto decoder = registry.Build(c.method, context, c.knobs);
    ExpectExactOnStories(*target_, *decoder, c);
  }
}

TEST_F(JetspecStories, SetBlockSizeBetweenPrompts) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = DflashContextFor(*target_);
  auto decoder = registry.Build("dflash", context, {{"drafter", *causal_dir_}, {"block_size", 12}});
  auto* spec = dynamic_cast<SpeculativeDecoder*>(decoder.get());
  ASSERT_NE(spec, nullptr);
  auto* drafter = dynamic_cast<DflashDrafter*>(&spec->drafter());
  ASSERT_NE(drafter, nullptr);
  EXPECT_EQ(drafter->block_size(), 12);
  drafter->set_block_size(4);
  EXPECT_EQ(drafter->block_size(), 4);
  ExpectExactOnStories(*target_, *decoder, {"dflash", {{"block_size", 4}}, 3, 3});
  drafter->set_block_size(9);  // within the decoder's depth budget (11)
  ExpectExactOnStories(*target_, *decoder, {"dflash", {{"block_size", 9}}, 8, 8});
  drafter->set_block_size(12);
  ExpectExactOnStories(*target_, *decoder, {"dflash", {{"block_size", 12}}, 11, 11});
  EXPECT_THROW(drafter->set_block_size(1), Error);
  EXPECT_EQ(drafter->block_size(), 12);
}

TEST(Jetspec, KnobsAndBudgetConventions) {
  // Drafter "auto": the target's shipped head, resolved per case.
  ASSERT_NO_FATAL_FAILURE(testing_util::ExpectBuiltin(
      "jetspec", {{"tree", true}, {"lossless", true}, {"sampling_verifier", "sample_follow"}}, "",
      {{"drafter", "auto"},
       {"budget", 32},
       {"width", 7},
       {"budget_convention", "jetspec"},
       {"block_size", 0}}));
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  EXPECT_EQ(registry.ResolveKnobs("ddtree", nlohmann::json::object())["budget_convention"],
            "ddtree");
  // The paper sweep's values resolve.
  EXPECT_EQ(registry.ResolveKnobs("jetspec", {{"budget", 256}, {"width", 7}})["budget"], 256);
  EXPECT_EQ(registry.ResolveKnobs("dflash", {{"block_size", 32}})["block_size"], 32);
  try {
    registry.ResolveKnobs("jetspec", {{"budget_convention", "jetspc"}});
    FAIL() << "expected an unknown convention";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("budget_convention"));
    EXPECT_THAT(e.what(), HasSubstr("jetspec"));
  }
  EXPECT_EQ(DraftedNodesForBudget(255, "jetspec", "jetspec"), 254);
  EXPECT_EQ(DraftedNodesForBudget(256, "ddtree", "ddtree"), 256);
  EXPECT_EQ(DraftedNodesForBudget(1, "jetspec", "jetspec"), 0);
  EXPECT_THROW(DraftedNodesForBudget(0, "ddtree", "ddtree"), Error);
  EXPECT_THROW(DraftedNodesForBudget(8, "root", "jetspec"), Error);

  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  MethodContext context = DflashContextFor(target);
  EXPECT_THROW(registry.Build("jetspec", context, {{"drafter", ""}}), Error);
  const LlamaConfig& t = target.model->config();
  const std::string dir = WriteDflashHead(
      DflashHeadConfig(t.dim, t.vocab_size, t.n_layers, t.n_heads, t.n_kv_heads, true), 2,
      "jetspec_knobs");
  try {
    registry.Build("jetspec", context, {{"drafter", dir}, {"block_size", 1}});
    FAIL() << "expected a block-size error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("block_size 1 must be >= 2"));
  }
}

TEST(Jetspec, LosslessAtTemperatureOne) {
  at::set_num_threads(1);
  testing_util::TinyDflashTarget tiny = testing_util::MakeTinyDflashTarget(true, "jetspec_tiny");
  LoadedTarget target;
  target.spec.name = "tiny";
  target.model = tiny.target;
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = DflashContextFor(target);
  for (const auto& [method, knobs] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"jetspec", {{"drafter", tiny.head_dir}, {"budget", 6}, {"width", 2}}},
           {"dflash", {{"drafter", tiny.head_dir}, {"block_size", 9}}}}) {
    SCOPED_TRACE(method + " " + knobs.dump());
    auto decoder = registry.Build(method, context, knobs);
    int64_t accepted = 0;
    const double p = testing_util::TinyOutputPValue(*tiny.target, *decoder, &accepted);
    EXPECT_GT(p, 1e-4);
    EXPECT_GT(accepted, 1000);  // drafts are taken often enough for the test to mean something
    // Negative controls: a wrong acceptance rule fails the same check.
    std::vector<VerifierFault> faults = {VerifierFault::kGreedyAcceptance};
    if (method == "dflash") faults.push_back(VerifierFault::kTargetAsResidual);
    for (VerifierFault fault : faults) {
      ScopedVerifierFault inject(fault);
      int64_t ignored = 0;
      EXPECT_LT(testing_util::TinyFaultPValue(*tiny.target, *decoder, &ignored), 1e-4)
          << "fault " << static_cast<int>(fault);
    }
  }
}

}  // namespace
}  // namespace specbed
