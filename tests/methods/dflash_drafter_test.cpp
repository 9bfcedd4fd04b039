// DFlash / DDTree drafting end to end on the speculative decoder (the losslessness of
// verification does not depend on the head's quality):
// - stories260K at T = 0, fp32, with the shipped head nudged by seeded noise (steps accept all,
//   part or none of their drafts; a random head would accept nothing): `dflash` (chain) and
//   `ddtree` (best-first tree) outputs are token-identical to AR on 8 story prompts, every
//   verification outcome occurs, and the budget / block size bound every step;
// - a tiny random target (vocabulary 4) with seeded random heads: the distribution of 3-token
// outputs over 30000 seeded
//   generations matches the target's exact distribution for `dflash` (chain rejection sampling
//   with the recorded per-row distributions), `dflash` with argmax drafts (the reference's rule,
//   sample-then-follow) and `ddtree` (sample-then-follow); chi-square over
//   64 cells, reject at p < 1e-4 (false-failure rate about 1e-4 per test; seeds fixed); negative
//   controls: the check fails (p < 1e-4) under greedy acceptance and, for the chain, under a
//   correction drawn from the target instead of the residual (VerifierFault);
// - a head for another vocabulary or target layers beyond the target fail clearly.
// The head follows the target's path (TargetHeadPlacement): ctest AtenPath.DdtreeChiSquare reruns
// the T = 1 test with SPECBED_FORWARD=aten, where the chain samples on the device
// (DeviceDraftSampler) and the verifier reads its distributions there.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/engine/verifier.h"
#include "harness/runner/runner.h"
#include "methods/dflash/dflash_checkpoint.h"
#include "methods/dflash/dflash_drafter.h"
#include "methods/method_registry.h"
#include "tests/engine/engine_test_util.h"
#include "tests/methods/dflash_test_util.h"
#include "tests/methods/story_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using testing::HasSubstr;

using testing_util::DflashContextFor;

TEST(DflashDrafter, ChainAndTreeMatchArOnStoryPrompts) {
  at::set_num_threads(1);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  const std::string dir = testing_util::WriteNudgedStoriesHead(
      "stories260K-dflash", 6, testing_util::kNudge, 3, "dflash_drafter_stories");
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = DflashContextFor(target);
  const auto prompts = LoadDataset("stories", {});
  for (const auto& [method, knobs] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"dflash", {{"drafter", dir}}},
           {"dflash", {{"drafter", dir}, {"block_size", 3}}},
           {"ddtree", {{"drafter", dir}, {"budget", 12}, {"top_k", 3}}}}) {
    SCOPED_TRACE(method + knobs.dump());
    auto decoder = registry.Build(method, context, knobs);
    testing_util::AcceptanceCounts counts;
    int64_t steps = 0;
    for (size_t i = 0; i < 8; ++i) {
      const testing_util::StoryRun run =
          testing_util::RunStoryPrompt(target, *decoder, prompts[i], {48, 0, 0});
      const DecodeResult& spec = run.spec;
      ASSERT_EQ(spec.generation.tokens, run.ar.tokens) << " prompt " << i;
      const int64_t depth = knobs.value("block_size", 6) - 1;
      for (const StepStats& s : spec.steps) {
        EXPECT_LE(s.draft_depth, depth);
        EXPECT_LE(s.n_drafted, method == "ddtree" ? 12 : depth);
      }
      counts.Add(spec.steps);
      steps += static_cast<int64_t>(spec.steps.size());
    }
    // The nudged head makes the test reach every verification outcome.
    EXPECT_GT(counts.accepted, 0);
    EXPECT_GT(counts.none_accepted, 0);
    EXPECT_GT(counts.partial, 0);
  }
}

// The three ways DFlash drafts at T > 0 on the tiny pair (vocabulary 4, 3 tokens: 64 cells,
// 30000 seeded generations, chi-square p > 1e-4), each with negative controls that fail the same
// check: greedy acceptance (VerifierFault); for the sampled chain also the correction drawn from
// the target instead of the residual, and the drafter's side (a stale q row, q without the
// temperature: DraftFault).
enum class DflashT1Variant { kSampledChain, kBestFirstTree, kArgmaxChain };

void ExpectDflashVariantLossless(DflashT1Variant variant) {
  at::set_num_threads(1);
  testing_util::TinyDflashTarget tiny = testing_util::MakeTinyDflashTarget();
  const bool chain_rs = variant == DflashT1Variant::kSampledChain;
  // The sampled chain (chain_rs) at T = 1.4: the tempering of both sides checked.
  const double temperature = chain_rs ? 1.4 : 1.0;
  const DflashCheckpoint ckpt = LoadDflashCheckpoint(tiny.head_dir);
  const LlamaWeights& w = tiny.target->weights();
  DflashDraftOptions o;
  o.kind = variant == DflashT1Variant::kBestFirstTree ? DflashTreeKind::kBestFirst
                                                      : DflashTreeKind::kChain;
  o.top_k = 2;
  o.budget = 5;
  o.argmax_drafts = variant == DflashT1Variant::kArgmaxChain;
  auto drafter = std::make_unique<DflashDrafter>(
      std::make_unique<DflashHead>(ckpt.config, ckpt.tensors, w.tok_embeddings, w.lm_head,
                                   TargetHeadPlacement(*tiny.target)),
      o);
  SpeculativeOptions so;
  so.budget = {5, 5};
  so.sampling_rule = chain_rs ? VerifyRule::kChainRs : VerifyRule::kSampleFollow;
  SpeculativeDecoder decoder(*tiny.target, nullptr, std::move(drafter), so);
  int64_t accepted = 0;
  EXPECT_GT(testing_util::TinyOutputPValue(*tiny.target, decoder, &accepted, 30000, temperature),
            1e-4);
  EXPECT_GT(accepted, testing_util::ScaledDraws(30000) / 30);  // drafts are taken often enough
  std::vector<VerifierFault> faults = {VerifierFault::kGreedyAcceptance};
  if (chain_rs) faults.push_back(VerifierFault::kTargetAsResidual);
  for (VerifierFault fault : faults) {
    ScopedVerifierFault inject(fault);
    int64_t ignored = 0;
    EXPECT_LT(testing_util::TinyFaultPValue(*tiny.target, decoder, &ignored, 30000, temperature),
              1e-4)
        << "fault " << static_cast<int>(fault);
  }
  if (chain_rs) testing_util::ExpectDraftFaultsFail(*tiny.target, decoder, temperature);
}

TEST(DflashDrafter, SampledChainLosslessAtTemperatureOnePointFour) {
  ExpectDflashVariantLossless(DflashT1Variant::kSampledChain);
}

TEST(DflashDrafter, BestFirstTreeLosslessAtTemperatureOne) {
  ExpectDflashVariantLossless(DflashT1Variant::kBestFirstTree);
}

// The reference's draft_sampling "argmax": greedy rows, sample-then-follow.
TEST(DflashDrafter, ArgmaxChainLosslessAtTemperatureOne) {
  ExpectDflashVariantLossless(DflashT1Variant::kArgmaxChain);
}

TEST(DflashDrafter, MismatchedHeadsFailClearly) {
  testing_util::StoriesMethods s(DflashContextFor);
  const std::string tiny = testing_util::WriteDflashHead(
      testing_util::DflashHeadConfig(16, 4, 2, 2, 1), 1, "dflash_drafter_wrong");
  try {
    s.registry.Build("dflash", s.context, {{"drafter", tiny}});
    FAIL() << "expected a mismatch";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("does not match the target 'stories260K'"));
  }
  EXPECT_THROW(s.registry.Build("ddtree", s.context, {{"drafter", ""}}), Error);
  EXPECT_THROW(s.registry.Build("dflash", s.context, {{"drafter", tiny + "/missing"}}), Error);
}

}  // namespace
}  // namespace specbed
