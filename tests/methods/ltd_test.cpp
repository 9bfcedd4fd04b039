// LTD's policies, controllers and methods (methods/ltd):
// - observation layout (spec §3.1 / §3.2), action map, checkpoint round trip and malformed files;
// - the inference forward (LtdPolicy::Act) agrees with the training forward (PpoAgent::Greedy);
// - DDD / SVIP / Gammatune / LTD controller decisions on hand-made rounds, and the budgets;
// - T = 0: `ltd` (policies both / size / depth, random policies scaled so that their decisions
//   vary) and every baseline are token-identical to AR on 8 story prompts with the shipped
//   stories260K EAGLE-3 head, the depth hook really stops trees (generated candidates vary), and
//   the verified sizes stay within the action map;
// - T = 1: on a tiny random target (vocabulary 4) `ltd` with random policies keeps the target's
//   3-token output distribution (chi-square over 64 cells, 40000 seeded draws, reject at
//   p < 1e-4: false-failure rate ~1e-4, deterministic for the fixed seeds), and greedy acceptance
//   (VerifierFault) fails it.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/engine/verifier.h"
#include "harness/runner/runner.h"
#include "methods/eagle3/eagle3_checkpoint.h"
#include "methods/eagle3/eagle3_drafter.h"
#include "methods/ltd/ltd_controllers.h"
#include "methods/ltd/ltd_method.h"
#include "methods/ltd/ltd_policy.h"
#include "methods/ltd/ltd_ppo.h"
#include "methods/method_registry.h"
#include "tests/engine/engine_test_util.h"
#include "tests/methods/method_test_util.h"
#include "tests/methods/story_test_util.h"

namespace specbed {
namespace {

using testing::HasSubstr;
namespace fs = std::filesystem;

LtdPolicyConfig SmallConfig(LtdPolicyKind kind, int64_t w, int64_t dmax) {
  LtdPolicyConfig c = DefaultLtdPolicyConfig(kind);
  c.top_k = w;
  c.max_depth = dmax;
  c.actor_hidden =
      kind == LtdPolicyKind::kDepth ? std::vector<int64_t>{16} : std::vector<int64_t>{16, 8};
  c.critic_hidden = {16, 8};
  if (kind == LtdPolicyKind::kSize) {
    c.size_step = 1;
    c.n_actions = 16;
  }
  c.depth_every = 1;
  return c;
}

// Random policy tensors with a large output gain, so argmax decisions depend on the observation.
std::map<std::string, at::Tensor> VariedTensors(const LtdPolicyConfig& c, uint64_t seed) {
  auto t = RandomLtdPolicyTensors(c, seed);
  t["actor_out.weight"] = t["actor_out.weight"] * 300.0;
  t["actor_out.bias"] = at::zeros_like(t["actor_out.bias"]);
  return t;
}

std::string WritePolicyPair(const std::string& name, int64_t w, int64_t dmax, uint64_t seed) {
  const std::string dir = ::testing::TempDir() + "/ltd_test_" + name;
  const auto d = SmallConfig(LtdPolicyKind::kDepth, w, dmax);
  const auto s = SmallConfig(LtdPolicyKind::kSize, w, dmax);
  WriteLtdPolicy(dir + "/depth", d, VariedTensors(d, seed));
  WriteLtdPolicy(dir + "/size", s, VariedTensors(s, seed + 1));
  return dir;
}

TEST(LtdPolicy, ObservationLayoutAndActionMap) {
  const LtdPolicyConfig d = DefaultLtdPolicyConfig(LtdPolicyKind::kDepth);
  const LtdPolicyConfig s = DefaultLtdPolicyConfig(LtdPolicyKind::kSize);
  EXPECT_EQ(d.obs_dim(), 128);   // spec §3.1
  EXPECT_EQ(s.obs_dim(), 1268);  // spec §3.2
  std::vector<float> obs(128, -7.f);
  std::vector<float> scores = {-0.5f, -1.f, -2.f};
  EncodeDepthObservation(d, scores.data(), 3, 250, 6, obs.data());
  EXPECT_EQ(obs[0], -0.5f);
  EXPECT_EQ(obs[2], -2.f);
  EXPECT_EQ(obs[3], 0.f);  // zero padding
  EXPECT_EQ(obs[99], 0.f);
  for (int i = 100; i < 114; ++i) EXPECT_FLOAT_EQ(obs[i], 0.25f);  // L / 1000
  for (int i = 114; i < 128; ++i) EXPECT_FLOAT_EQ(obs[i], 0.6f);   // D / 10
  std::vector<float> so(1268, -7.f);
  EncodeSizeObservation(s, scores.data(), 3, 1000, 12, so.data());
  EXPECT_EQ(so[1], -1.f);
  EXPECT_EQ(so[1209], 0.f);
  EXPECT_FLOAT_EQ(so[1210], 1.f);
  EXPECT_FLOAT_EQ(so[1238], 1.f);
  EXPECT_FLOAT_EQ(so[1239], 1.2f);
  EXPECT_FLOAT_EQ(so[1267], 1.2f);
  LtdPolicyConfig bug = d;
  bug.length_feature = "constant";  // the released inference code's constant (spec §9.5)
  EncodeDepthObservation(bug, scores.data(), 3, 250, 6, obs.data());
  EXPECT_FLOAT_EQ(obs[100], 0.01f);
  EXPECT_EQ(LtdVerifySize(s, 0), 10);  // code: V = 10 (a + 1)
  EXPECT_EQ(LtdVerifySize(s, 23), 240);
}

TEST(LtdPolicy, CheckpointRoundTripAndErrors) {
  const LtdPolicyConfig c = SmallConfig(LtdPolicyKind::kSize, 3, 4);
  const auto tensors = RandomLtdPolicyTensors(c, 5);
  const std::string dir = ::testing::TempDir() + "/ltd_policy_roundtrip";
  WriteLtdPolicy(dir, c, tensors);
  const LtdPolicyCheckpoint back = LoadLtdPolicy(dir);
  EXPECT_EQ(back.config.obs_dim(), c.obs_dim());
  EXPECT_EQ(back.config.n_actions, 16);
  for (const auto& [name, t] : tensors) EXPECT_TRUE(at::equal(t, back.tensors.at(name))) << name;
  // A wrong kind / bad field / missing tensor names the file and the field.
  auto j = LtdPolicyConfigToJson(c);
  j["kind"] = "width";
  std::ofstream(dir + "/config.json") << j.dump();
  try {
    LoadLtdPolicy(dir);
    ADD_FAILURE() << "bad kind accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("config.json"));
    EXPECT_THAT(e.what(), HasSubstr("'kind'"));
  }
  auto fewer = tensors;
  fewer.erase("critic_out.bias");
  EXPECT_THROW(WriteLtdPolicy(dir, c, fewer), Error);
}

TEST(LtdPolicy, InferenceMatchesTheTrainingForward) {
  at::set_num_threads(1);
  for (LtdPolicyKind kind : {LtdPolicyKind::kDepth, LtdPolicyKind::kSize}) {
    const LtdPolicyConfig c = SmallConfig(kind, 3, 4);
    const auto tensors = VariedTensors(c, 9);
    PpoArch arch;
    arch.obs_dim = c.obs_dim();
    arch.actions = c.actions();
    arch.actor_hidden = c.actor_hidden;
    arch.critic_hidden = c.critic_hidden;
    PpoAgent agent(arch, tensors, PpoConfig());
    LtdPolicyCheckpoint ck;
    ck.config = c;
    ck.tensors = tensors;
    LtdPolicy policy(ck);
    std::set<int64_t> seen;
    for (int r = 0; r < 50; ++r) {
      const at::Tensor obs = at::randn({c.obs_dim()});
      const int64_t a = policy.Act(obs.data_ptr<float>());
      EXPECT_EQ(a, agent.Greedy(obs.data_ptr<float>()));
      seen.insert(a);
    }
    EXPECT_GE(seen.size(), 2u) << "decisions should depend on the observation";
  }
}

DraftRoundInfo Round(int64_t rounds, const std::vector<float>& beam, double entropy) {
  DraftRoundInfo info;
  info.rounds = rounds;
  info.max_rounds = 12;
  info.top_k = static_cast<int64_t>(beam.size());
  info.child_scores = beam.data();
  info.n_child_scores = static_cast<int64_t>(beam.size());
  info.beam_scores = beam.data();
  info.n_beam = static_cast<int64_t>(beam.size());
  info.best_entropy = entropy;
  info.context_len = 10;
  return info;
}

TEST(LtdControllers, BaselineDecisions) {
  // DDD: checks only at rounds 5, 7, 9; stops when log sum exp(beam) < -0.3.
  DddController ddd(12, 60, {5, 7, 9}, -0.3);
  const std::vector<float> confident = {-0.1f, -3.f}, unsure = {-1.f, -2.f};
  EXPECT_TRUE(ddd.ContinueDrafting(Round(4, unsure, 0)));
  EXPECT_FALSE(ddd.ContinueDrafting(Round(5, unsure, 0)));
  EXPECT_TRUE(ddd.ContinueDrafting(Round(5, confident, 0)));
  EXPECT_NEAR(LogSumExp(unsure.data(), 2), std::log(std::exp(-1.0) + std::exp(-2.0)), 1e-6);
  DraftBudget b;
  ddd.BeforeStep(DraftStep(), b);
  EXPECT_EQ(b.depth, 13);
  EXPECT_EQ(b.nodes, 60);
  // SVIP: bound 1 - sqrt(0.15 * max(H, 0.3)) must stay >= 1/2, i.e. H <= 1/0.6.
  SvipController svip(12, 60, 0.15, 0.3);
  EXPECT_NEAR(svip.AcceptanceBound(0.0), 1 - std::sqrt(0.045), 1e-12);
  EXPECT_TRUE(svip.ContinueDrafting(Round(3, unsure, 1.6)));
  EXPECT_FALSE(svip.ContinueDrafting(Round(3, unsure, 1.7)));
  // Gammatune, gamma in rounds (tree depth gamma + 1), in [4, 12] from 8: a fully accepted tree
  // deepens it by `grow` (2) up to 12 and leaves the smoothed count; a rejection sets the smoothed
  // count s <- 0.8 s + 0.2 accepted and gamma = ceil(s), down to 4. It both deepens and shrinks.
  GammatuneController gt(60, 8, 4, 12, 0.2, 2);
  gt.BeginSequence(DraftBegin(), b);
  EXPECT_EQ(b.depth, 9);  // 8 rounds, as the other baselines' D = 8
  EXPECT_EQ(gt.max_rounds(), 12);
  auto accepted = [](int n) {
    Verdict v;
    for (int i = 0; i < n; ++i) v.path.push_back(i);
    return v;
  };
  gt.AfterStep(DraftTree(), accepted(9));  // all 9 drafted levels taken
  EXPECT_EQ(gt.gamma(), 10);
  EXPECT_DOUBLE_EQ(gt.smoothed(), 8.0);
  gt.AfterStep(DraftTree(), accepted(11));
  EXPECT_EQ(gt.gamma(), 12);
  gt.AfterStep(DraftTree(), accepted(13));
  EXPECT_EQ(gt.gamma(), 12);  // the ceiling
  gt.BeforeStep(DraftStep(), b);
  EXPECT_EQ(b.depth, 13);
  gt.AfterStep(DraftTree(), accepted(6));  // a rejection: back to the smoothed count
  EXPECT_DOUBLE_EQ(gt.smoothed(), 0.8 * 8 + 0.2 * 6);
  EXPECT_EQ(gt.gamma(), 8);  // ceil(7.6)
  for (int i = 0; i < 50; ++i) gt.AfterStep(DraftTree(), accepted(2));
  EXPECT_DOUBLE_EQ(gt.smoothed(), 4.0);
  EXPECT_EQ(gt.gamma(), 4);                // the floor
  gt.AfterStep(DraftTree(), accepted(5));  // a full tree of 4 rounds deepens again
  EXPECT_EQ(gt.gamma(), 6);
  gt.BeginSequence(DraftBegin(), b);  // each sequence starts at depth
  EXPECT_EQ(gt.gamma(), 8);
  // grow = 0 is the LTD appendix's smoothing alone: a full tree moves gamma by eta only.
  GammatuneController smooth(60, 8, 4, 12, 0.2, 0);
  smooth.BeginSequence(DraftBegin(), b);
  smooth.AfterStep(DraftTree(), accepted(9));
  EXPECT_DOUBLE_EQ(smooth.smoothed(), 0.8 * 8 + 0.2 * 9);
  EXPECT_EQ(smooth.gamma(), 9);
  EXPECT_THROW(GammatuneController(60, 8, 4, 12, 0.2, -1), Error);
  // LTD without policies: static depth and size.
  LtdController fixed(nullptr, nullptr, 12, 3, 7, 0);
  EXPECT_TRUE(fixed.ContinueDrafting(Round(2, unsure, 0)));
  EXPECT_FALSE(fixed.ContinueDrafting(Round(3, unsure, 0)));
  DraftTreeInfo ti;
  ti.budget_nodes = 100;
  EXPECT_EQ(fixed.VerifySize(ti), 7);
}

TEST(Ltd, EveryVariantAndBaselineMatchesArAtTemperatureZero) {
  at::set_num_threads(1);
  testing_util::StoriesMethods s;
  const std::string pair = WritePolicyPair("exact", 10, 12, 21);
  struct Case {
    std::string method;
    nlohmann::json knobs;
  };
  const std::vector<Case> cases = {
      {"ltd", {{"policy", pair}, {"policies", "both"}}},
      {"ltd", {{"policy", pair}, {"policies", "size"}, {"depth", 3}}},
      {"ltd", {{"policy", pair}, {"policies", "depth"}, {"total_tokens", 17}}},
      {"eagle3+ddd", {{"total_tokens", 17}}},
      {"eagle3+svip", {{"total_tokens", 17}}},
      {"eagle3+gammatune", {{"total_tokens", 17}}},
  };
  const auto prompts = LoadDataset("stories", {});
  for (const Case& c : cases) {
    std::unique_ptr<Decoder> decoder = s.registry.Build(c.method, s.context, c.knobs);
    std::set<int64_t> generated;
    int64_t steps = 0, emitted = 0;
    for (size_t i = 0; i < 8; ++i) {
      const testing_util::StoryRun run =
          testing_util::RunStoryPrompt(s.target, *decoder, prompts[i], {64, /*extra_cache=*/-1, 0});
      const DecodeResult& spec = run.spec;
      ASSERT_EQ(spec.generation.tokens, run.ar.tokens)
          << c.method << " " << c.knobs.dump() << " " << i;
      int64_t done = 1;  // tokens generated before the step (the prefill's first token)
      for (const StepStats& s : spec.steps) {
        EXPECT_GE(s.n_drafted, 1);
        // Steps where the tokens still allowed did not cap the depth (at most 13 layers).
        if (64 - done > 13) generated.insert(s.n_draft_generated);
        done += s.n_emitted;
        EXPECT_LE(s.n_drafted, 16);  // the action map's largest V, or total_tokens 17
        EXPECT_EQ((s.n_draft_generated - 10) % 100, 0) << "W + D W^2 candidates";
        emitted += s.n_emitted;
        ++steps;
      }
    }
    EXPECT_GT(static_cast<double>(emitted) / steps, 1.3) << c.method;
    if (c.method == "ltd" && c.knobs["policies"] == "size") {
      EXPECT_EQ(generated, std::set<int64_t>({310}));  // static depth 3
    } else if (c.method == "eagle3+ddd") {
      // The story head's beam mass at round 5 is below exp(-0.3) here: DDD stops at its first
      // checkpoint (never at the 12-round ceiling).
      EXPECT_EQ(generated, std::set<int64_t>({510}));
    } else {
      EXPECT_GE(generated.size(), 2u) << c.method << " " << c.knobs.dump() << ": the depth hook "
                                      << "never varied the depth (" << *generated.begin() << ")";
    }
  }
}

TEST(Ltd, KnobErrorsNameTheProblem) {
  testing_util::StoriesMethods s;
  const std::string pair = WritePolicyPair("errors", 10, 12, 3);
  // A max_depth the policies were not trained for, a missing policy, bad check rounds.
  testing_util::ExpectBuildError(s, "ltd", {{"policy", pair}, {"max_depth", 8}}, "max_depth");
  testing_util::ExpectBuildError(s, "ltd", {{"policy", "/nonexistent/ltd"}}, "/nonexistent/ltd");
  testing_util::ExpectBuildError(s, "eagle3+ddd", {{"check_rounds", "5,x"}}, "check_rounds");
}

TEST(Ltd, LosslessAtTemperatureOne) {
  at::set_num_threads(1);
  std::shared_ptr<LlamaModel> target = testing_util::TinyRandomTarget(21, 60.0);
  const testing_util::TinyEagle3Head tiny = testing_util::MakeTinyEagle3Head();
  const Eagle3Config& h = tiny.config;
  const auto& tensors = tiny.tensors;
  const auto dc = SmallConfig(LtdPolicyKind::kDepth, 2, 3);
  const auto sc = SmallConfig(LtdPolicyKind::kSize, 2, 3);
  LtdPolicyCheckpoint dck{dc, VariedTensors(dc, 1)}, sck{sc, VariedTensors(sc, 2)};
  auto controller = std::make_unique<LtdController>(std::make_shared<LtdPolicy>(dck),
                                                    std::make_shared<LtdPolicy>(sck), 3, 3, 5, 1);
  Eagle3DraftOptions o;
  o.depth = 4;
  o.top_k = 2;
  o.nodes = 6;
  o.report_generated = true;
  auto head = std::make_unique<Eagle3Head>(h, tensors, target->weights().tok_embeddings);
  SpeculativeOptions so;
  so.budget = {o.nodes, o.depth};
  so.sampling_rule = VerifyRule::kSampleFollow;
  SpeculativeDecoder decoder(*target, nullptr, std::make_unique<Eagle3Drafter>(std::move(head), o),
                             so, std::move(controller));
  int64_t accepted = 0;
  EXPECT_GT(testing_util::TinyOutputPValue(*target, decoder, {1, 3}, 3, 40000, 1000, &accepted),
            1e-4);
  EXPECT_GT(accepted, 40000 / 8);  // drafts are accepted often enough to matter
  ScopedVerifierFault inject(VerifierFault::kGreedyAcceptance);
  int64_t ignored = 0;
  EXPECT_LT(testing_util::TinyFaultPValue(*target, decoder, {1, 3}, 3, 40000, 1000, &ignored),
            1e-4);
}

}  // namespace
}  // namespace specbed
