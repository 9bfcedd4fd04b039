// SpecBlock (methods/specblock):
// - the shipped stories260K drafter reproduces AR token for token at T = 0 in fp32 on every story
//   prompt, with drafts accepted (tau > 1.5), under both branching maps;
// - one iteration makes exactly M drafter forward calls (catch-up batched with the first block);
// - T = 1 with sample_follow on a tiny random target (vocabulary 4) matches the exact 3-token
//   distribution (chi-square, reject at p < 1e-4), and the same test with greedy acceptance
//   fails (p < 1e-4): the negative control;
// - real online updates (specblock+osd, and specblock+bandit with the bandit on and off) on a
//   repeated prompt raise acceptance, change the served weights, stay token-identical to AR and
//   charge their time to the triggering request's draft time; the bandit's throughput reward
//   reads a cost-model clock (target forwards and update events, WorkClock), so its choices, and
//   the test's outcome, do not depend on the machine's load (deterministic: seeded,
//   single-threaded);
// - the drafter cache path equals the training layout (incremental == full), and the online slot
//   logits of a request supervised late (its earlier starts as cached keys/values, no gradient)
//   equal one forward over every start, on a batch of two (dropping the cache fails it);
// - a bad checkpoint is refused naming the tensor / field; the registry knobs;
// - the training loss goes down; the bandit's decision logic with fixed seeds.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/engine/verifier.h"
#include "harness/runner/runner.h"
#include "methods/common/train/train_loop.h"
#include "methods/method_registry.h"
#include "methods/osd/osd_adapter.h"
#include "methods/specblock/specblock_bandit.h"
#include "methods/specblock/specblock_drafter.h"
#include "methods/specblock/specblock_method.h"
#include "methods/specblock/specblock_model.h"
#include "methods/specblock/specblock_trainer.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/checkpoint/safetensors.h"
#include "tests/engine/engine_test_util.h"
#include "tests/methods/method_test_util.h"
#include "tests/methods/story_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using testing::HasSubstr;
using testing_util::CachingContextFor;

TEST(SpecBlock, ShippedDrafterMatchesArOnEveryStoryPrompt) {
  at::set_num_threads(1);
  testing_util::StoriesMethods s;
  for (const nlohmann::json& knobs :
       {nlohmann::json::object(), nlohmann::json{{"branching", "2,4,6,4"}},
        nlohmann::json{{"budget", 8}, {"blocks", 3}}}) {
    std::unique_ptr<Decoder> decoder = s.registry.Build("specblock", s.context, knobs);
    testing_util::StoryTotals totals;
    ASSERT_NO_FATAL_FAILURE(testing_util::ExpectStoriesMatchAr(
        s.target, *decoder, knobs.dump(),
        [&](const StepStats& s) { EXPECT_LE(s.n_drafted, knobs.value("budget", 60)); }, &totals));
    ASSERT_EQ(totals.prompts, 32);
    EXPECT_GT(totals.accepted, 0) << knobs.dump();
    EXPECT_GT(totals.tau(), 1.5) << knobs.dump();
  }
}

TEST(SpecBlock, OneIterationIsExactlyMDrafterCalls) {
  at::set_num_threads(1);
  testing_util::StoriesMethods s;
  for (int64_t m : {1, 2, 3}) {
    const nlohmann::json knobs = s.registry.ResolveKnobsFor(
        "specblock", {{"blocks", m}, {"branching", "2,4,6,4"}}, "stories260K");
    SpecBlockDrafter* drafter = nullptr;
    std::unique_ptr<Decoder> decoder = MakeSpecBlockDecoder(s.context, knobs, &drafter);
    const std::vector<int32_t> ids =
        BuildPromptIds(s.target, {{"user", "Once upon a time, there was a little dog named"}});
    GenerationConfig g;
    g.stop = StopConfigFor(s.target, 64, {});
    KvCache cache = s.target.model->NewCache(1, static_cast<int64_t>(ids.size()) + 65);
    DecodeResult spec;
    const int64_t before = drafter->calls_total();
    decoder->Generate(ids, g, cache, spec);
    // The prompt's catch-up, each verdict's accepted tokens and the first block share call 1;
    // every step whose depth budget allows more than one block (the decoder lowers it to the
    // tokens left near max_new_tokens) makes exactly M calls.
    const std::vector<int64_t>& calls = drafter->step_calls();
    const std::vector<int64_t>& depths = drafter->step_depth_budgets();
    ASSERT_EQ(calls.size(), spec.steps.size());
    int64_t total = 0, full = 0;
    for (size_t s = 0; s < calls.size(); ++s) {
      total += calls[s];
      if (depths[s] > (m - 1) * 4) {
        EXPECT_EQ(calls[s], m) << "M = " << m << " step " << s;
        ++full;
      } else {
        EXPECT_GE(calls[s], 1);
        EXPECT_LE(calls[s], m);
      }
    }
    EXPECT_EQ(drafter->calls_total() - before, total);
    EXPECT_GT(full, static_cast<int64_t>(calls.size()) / 2) << "M = " << m;
  }
}

// A tiny random target (vocabulary 4) and a random SpecBlock drafter over 3 of its tokens.
struct TinySetup {
  std::shared_ptr<LlamaModel> target;
  SpecBlockConfig config;
  std::map<std::string, at::Tensor> tensors;
};

TinySetup MakeTiny() {
  TinySetup p;
  p.target = testing_util::TinyRandomTarget(21, 60.0);  // engine_test_util.h
  SpecBlockConfig& s = p.config;
  testing_util::SetTinyHeadShape(s);  // method_test_util.h
  s.block_size = 2;
  s.rank_hidden = 8;
  p.tensors = RandomSpecBlockTensors(s, 5);
  p.tensors["lm_head.weight"] = p.tensors["lm_head.weight"] * 80;
  return p;
}

// Chi-square p of the 3-token outputs at T = 1 (sample_follow) against the exact distribution
// (TinyOutputPValue, engine_test_util.h: cells with expected count < 5 pooled). Adds the accepted
// draft tokens to *accepted.
double TinyChiSquareP(int draws, int64_t* accepted) {
  TinySetup tiny = MakeTiny();
  LlamaModel& target = *tiny.target;
  SpecBlockDraftOptions o;
  o.blocks = 2;
  o.budget = 6;
  o.branching = {2, 2, 2, 1};
  auto model = std::make_unique<SpecBlockModel>(tiny.config, tiny.tensors,
                                                target.weights().tok_embeddings, false);
  SpeculativeOptions so;
  so.budget = {o.budget, 4};
  so.sampling_rule = VerifyRule::kSampleFollow;
  SpeculativeDecoder decoder(target, nullptr,
                             std::make_unique<SpecBlockDrafter>(std::move(model), o), so);
  return testing_util::TinyOutputPValue(target, decoder, {1, 3}, 3, draws, 1000, accepted);
}

// Observes every verified tree: a slot must report a draft distribution exactly when the tree
// kept a child there (the bandit's signal reads it at the bonus's slot).
class SlotDistributionCheck : public Adapter {
 public:
  explicit SlotDistributionCheck(const SpecBlockDrafter& drafter) : drafter_(drafter) {}
  void Observe(const DraftTree& tree, const Verdict& verdict) override {
    std::vector<uint8_t> has_child(tree.size() + 1, 0);
    for (int32_t p : tree.parent) has_child[p + 1] = 1;
    for (int64_t s = 0; s <= tree.size(); ++s) {
      if ((drafter_.SlotDistribution(s) >= 0) != (has_child[s] == 1)) ++mismatches;
      ++slots;
    }
  }
  int64_t mismatches = 0, slots = 0;

 private:
  const SpecBlockDrafter& drafter_;
};

TEST(SpecBlock, OnlySlotsThatKeptAChildReportADraftDistribution) {
  at::set_num_threads(1);
  testing_util::StoriesMethods s;
  const nlohmann::json knobs = s.registry.ResolveKnobsFor(
      "specblock", {{"budget", 12}, {"branching", "2,4,6,4"}}, "stories260K");
  SpecBlockDrafter* drafter = nullptr;
  std::unique_ptr<Decoder> decoder = MakeSpecBlockDecoder(s.context, knobs, &drafter);
  auto* spec = dynamic_cast<SpeculativeDecoder*>(decoder.get());
  ASSERT_NE(spec, nullptr);
  auto check = std::make_unique<SlotDistributionCheck>(*drafter);
  SlotDistributionCheck* seen = check.get();
  spec->SetAdapter(std::move(check));
  const std::vector<int32_t> ids =
      BuildPromptIds(s.target, {{"user", "Once upon a time, there was a little dog named"}});
  GenerationConfig g;
  g.stop = StopConfigFor(s.target, 64, {});
  KvCache cache = s.target.model->NewCache(1, static_cast<int64_t>(ids.size()) + 65 + 12);
  DecodeResult r;
  decoder->Generate(ids, g, cache, r);
  EXPECT_GT(seen->slots, 4 * static_cast<int64_t>(r.steps.size()));
  EXPECT_EQ(seen->mismatches, 0) << "of " << seen->slots << " slots";
}

TEST(SpecBlock, LosslessAtTemperatureOneWithSampleFollow) {
  at::set_num_threads(1);
  int64_t accepted = 0;
  const int kDraws = 20000;
  const double p = TinyChiSquareP(kDraws, &accepted);
  EXPECT_GT(p, 1e-4);
  EXPECT_GT(accepted, kDraws / 4);  // drafts are taken often: the tree path matters
}

TEST(SpecBlock, GreedyAcceptanceAtTemperatureOneFailsTheSameTest) {
  // Negative control: the same drafts and test with greedy acceptance (descend into the child
  // carrying the target's argmax; VerifierFault) instead of sample_follow is rejected.
  at::set_num_threads(1);
  ScopedVerifierFault inject(VerifierFault::kGreedyAcceptance);
  int64_t accepted = 0;
  EXPECT_LT(TinyChiSquareP(20000, &accepted), 1e-4);
}

TEST(SpecBlock, DrafterCachePathEqualsTrainingLayout) {
  // Slot-1 logits of every position from the training layout (one forward over the sequence)
  // equal those the serving drafter computes step by step (catch-up batched with block 1).
  at::set_num_threads(1);
  TinySetup tiny = MakeTiny();
  SpecBlockModel model(tiny.config, tiny.tensors, tiny.target->weights().tok_embeddings, false);
  const std::vector<int32_t> seq = {1, 3, 0, 2, 2, 1, 0, 3};
  const int64_t t = static_cast<int64_t>(seq.size());
  KvCache cache = tiny.target->NewCache(1, t);
  ForwardOptions fo;
  fo.logits = LogitsMode::kAll;
  fo.hidden_layers = tiny.config.aux_layer_ids;
  ForwardOutput out = tiny.target->Forward(testing_util::Ids(seq), cache, fo);
  std::vector<at::Tensor> hidden;
  for (const at::Tensor& h : out.hidden) hidden.push_back(h.clone());
  const at::Tensor aux = at::cat(hidden, -1).to(at::kFloat);
  at::NoGradGuard no_grad;
  const at::Tensor full =
      SpecBlockNextTokenLogits(model, aux, testing_util::Ids(seq).to(at::kLong), true);
  // Serving: prompt of 3 tokens, then two verdicts accepting 1 and 2 tokens.
  SpecBlockDraftOptions o;
  o.blocks = 2;
  o.budget = 6;
  o.branching = {1, 1, 1, 1};
  SpecBlockDrafter drafter(
      std::make_unique<SpecBlockModel>(tiny.config, tiny.tensors,
                                       tiny.target->weights().tok_embeddings, false),
      o);
  std::vector<int32_t> prompt(seq.begin(), seq.begin() + 3);
  DraftBegin begin;
  begin.prompt = &prompt;
  begin.root = seq[3];
  begin.max_len = 16;
  for (const at::Tensor& h : hidden) begin.hidden.push_back(h.narrow(1, 0, 3));
  drafter.Begin(begin);
  int64_t root = 3;
  for (int64_t a : {1, 2}) {
    DraftTree tree;
    DraftStep step;
    step.root = seq[root];
    step.budget = {6, 4};
    drafter.Draft(step, tree);
    // Root slot distribution = full slot-1 logits at row root (distribution of token root + 1).
    const at::Tensor lp = at::log_softmax(full[0][root], -1);
    for (int32_t v = 0; v < 4; ++v) {
      const int32_t d = drafter.model().target_to_draft()[v];
      const double expect = d < 0 ? 0 : std::exp(lp[d].item<double>());
      EXPECT_NEAR(drafter.SlotProb(0, v), expect, 1e-5) << "root " << root << " token " << v;
    }
    // Every first-block slot k of the served tree equals the training layout's slot k of the
    // same root (SpecBlockSlotLogits, the rows online adaptation trains). Start root - 1 there.
    int64_t checked = 0;
    for (int64_t s = 0; s <= tree.size(); ++s) {
      const int64_t di = drafter.SlotDistribution(s);
      if (di < 0 || di >= tiny.config.block_size) continue;
      SpecBlockSlotRows rows;
      rows.slot = at::tensor({(root - 1) * tiny.config.block_size + di}, at::kLong);
      rows.seq = at::tensor({root + di}, at::kLong);
      const at::Tensor slp = at::log_softmax(
          SpecBlockSlotLogits(model, aux, testing_util::Ids(seq).to(at::kLong), rows, true)[0], -1);
      for (int32_t v = 0; v < 4; ++v) {
        const int32_t d = drafter.model().target_to_draft()[v];
        const double expect = d < 0 ? 0 : std::exp(slp[d].item<double>());
        EXPECT_NEAR(drafter.SlotProb(s, v), expect, 1e-5) << "root " << root << " slot " << di;
      }
      ++checked;
    }
    EXPECT_GE(checked, 2) << "root " << root;
    // Verdict: accept a tokens (fake path of fresh nodes is fine for the drafter's state).
    Verdict verdict;
    for (int64_t i = 0; i < a; ++i) verdict.tokens.push_back(seq[root + 1 + i]);
    verdict.path.assign(a, 0);
    verdict.bonus = seq[root + 1 + a];
    verdict.tokens.push_back(verdict.bonus);
    for (const at::Tensor& h : hidden) verdict.hidden.push_back(h.narrow(1, root, 1 + a));
    drafter.Accept(tree, verdict);
    root += 1 + a;
  }
}

TEST(SpecBlock, BadCheckpointsAreRefusedByName) {
  TinySetup tiny = MakeTiny();
  const std::string dir = testing_util::ScratchDir("specblock_bad_ckpt");
  WriteSpecBlockCheckpoint(dir, tiny.config, tiny.tensors);
  EXPECT_NO_THROW(LoadSpecBlockCheckpoint(dir));
  // Missing tensor.
  auto broken = tiny.tensors;
  broken.erase("shift.1.weight");
  EXPECT_THROW(WriteSpecBlockCheckpoint(dir + "_w", tiny.config, broken), Error);
  // Drop a tensor from the stored file by rewriting it without that name.
  std::map<std::string, at::Tensor> stored = LoadSpecBlockCheckpoint(dir).tensors;
  stored.erase("rank_head.fc2.bias");
  std::vector<SafetensorsTensorView> views;
  for (auto& [name, t] : stored) {
    views.push_back({name,
                     t.scalar_type() == at::kFloat  ? SafetensorsDtype::kF32
                     : t.scalar_type() == at::kLong ? SafetensorsDtype::kI64
                                                    : SafetensorsDtype::kBool,
                     t.sizes().vec(), t.data_ptr(), static_cast<size_t>(t.nbytes())});
  }
  WriteSafetensors(dir + "/model.safetensors", views);
  try {
    LoadSpecBlockCheckpoint(dir);
    FAIL() << "a missing tensor was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("rank_head.fc2.bias"));
  }
  // Not a SpecBlock config.
  std::ofstream(dir + "/config.json") << R"({"model_type": "llama"})";
  try {
    LoadSpecBlockCheckpoint(dir);
    FAIL() << "a llama config was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("model_type 'llama'"));
  }
  // The registry refuses a path that is not there and a K mismatch.
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  const MethodInfo& info = registry.Info("specblock");
  EXPECT_THROW(info.validate(registry.ResolveKnobs("specblock", {{"drafter", dir + "/nope"}})),
               Error);
  EXPECT_THROW(registry.ResolveKnobs("specblock", {{"budget", 0}}), Error);
  EXPECT_THROW(ParseBranching("2,4,10", "t"), Error);
  EXPECT_THROW(ParseBranching("0,4,10,0", "t"), Error);
  EXPECT_EQ(ParseBranching("2,4,6,4", "t"), (std::array<int64_t, 4>{2, 4, 6, 4}));
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  MethodContext context = CachingContextFor(target);
  try {
    registry.Build("specblock", context, {{"block_size", 3}});
    FAIL() << "a K mismatch was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'block_size' is 3"));
  }
}

TEST(SpecBlock, RegistryKnobsAndTraits) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  for (const char* name : {"specblock", "specblock+osd", "specblock+bandit"}) {
    const MethodInfo& info = registry.Info(name);
    EXPECT_TRUE(info.traits.tree) << name;
    EXPECT_TRUE(info.traits.lossless) << name;
    EXPECT_EQ(info.traits.sampling_verifier, "sample_follow") << name;
    const nlohmann::json k = registry.ResolveKnobs(name, {});
    EXPECT_EQ(k["block_size"], 4);
    EXPECT_EQ(k["blocks"], 2);
    EXPECT_EQ(k["budget"], 60);
    EXPECT_EQ(k["branching"], "2,4,10,0");
  }
  EXPECT_EQ(registry.ResolveKnobs("specblock+osd", {})["osd_interval"], 8);
  EXPECT_TRUE(registry.Info("specblock+bandit").traits.trains_online);
  EXPECT_EQ(registry.ResolveKnobsFor("specblock", {}, "stories260K")["drafter"],
            "stories260K-specblock");
  EXPECT_EQ(registry.ResolveKnobsFor("specblock+bandit", {}, "stories260K-twin")["drafter"],
            "stories260K-twin-specblock");
}

TEST(SpecBlock, TrainingLossGoesDownAndBucketsAreRanks) {
  at::set_num_threads(1);
  TinySetup tiny = MakeTiny();
  SpecBlockModel model(tiny.config, tiny.tensors, tiny.target->weights().tok_embeddings, true);
  // Buckets from ranks.
  {
    const at::Tensor logits = at::tensor({3.0f, 2.0f, 1.0f}).view({1, 3});
    const auto& d2t = model.draft_to_target();
    for (int64_t r = 0; r < 3; ++r) {
      const at::Tensor lab = at::full({1}, d2t[r], at::kLong);
      EXPECT_EQ(SpecBlockBucketLabels(logits, lab, model).item<int64_t>(), r == 0 ? 0 : 1);
    }
    int32_t outside = -1;
    for (int32_t v = 0; v < 4; ++v)
      if (model.target_to_draft()[v] < 0) outside = v;
    EXPECT_EQ(
        SpecBlockBucketLabels(logits, at::full({1}, outside, at::kLong), model).item<int64_t>(), 3);
  }
  EXPECT_EQ(SpecBlockBucketOfRank(1), 0);
  EXPECT_EQ(SpecBlockBucketOfRank(4), 1);
  EXPECT_EQ(SpecBlockBucketOfRank(10), 2);
  EXPECT_EQ(SpecBlockBucketOfRank(11), 3);
  // Sequences sampled from the tiny target.
  at::Tensor tokens = at::zeros({4, 10}, at::kLong);
  std::mt19937_64 gen(3);
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t t = 0; t < 10; ++t) tokens[b][t] = static_cast<int64_t>(gen() % 4);
  KvCache cache = tiny.target->NewCache(4, 10);
  ForwardOptions fo;
  fo.logits = LogitsMode::kAll;
  fo.hidden_layers = tiny.config.aux_layer_ids;
  ForwardOutput out = tiny.target->Forward(tokens, cache, fo);
  std::vector<at::Tensor> hs;
  for (auto& h : out.hidden) hs.push_back(h.clone());
  const at::Tensor aux = at::cat(hs, -1).to(at::kFloat);
  const at::Tensor tl = out.logits.clone();
  at::Tensor mask = at::ones({4, 10}, at::kFloat);
  mask.narrow(1, 9, 1).zero_();
  std::vector<bool> decay(model.named_parameters().size(), false);
  AdamWOptimizer opt(model.named_parameters(), decay, 0.9, 0.999, 0);
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    std::mt19937_64 rng(step);
    SpecBlockLossOptions lo;
    const SpecBlockLossResult r = SpecBlockLoss(model, aux, tokens, tl, mask, lo, rng);
    if (step == 0) first = r.loss.item<double>();
    last = r.loss.item<double>();
    ASSERT_TRUE(std::isfinite(last));
    r.loss.backward();
    opt.Step(1e-2, 0.5);
  }
  EXPECT_LT(last, 0.8 * first);
}

// The default run trains the rank head: the rank loss starts inside it (it started at step 2000
// of an 800-step run before), and a start outside the run is refused naming the flag.
TEST(SpecBlockTrainer, DefaultSettingsTrainTheRankHead) {
  SpecBlockTrainConfig c;
  c.optim = DefaultSpecBlockOptim();
  EXPECT_EQ(SpecBlockRankWarmup(c), 300);
  EXPECT_LT(SpecBlockRankWarmup(c), c.optim.steps);
  c.rank_warmup = 800;
  try {
    SpecBlockRankWarmup(c);
    FAIL() << "a rank warmup at the last step was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--rank-warmup 800"));
  }
  c.rank_warmup = 0;
  EXPECT_EQ(SpecBlockRankWarmup(c), 0);
}

// `n` queries of signal `s` to `p`, each reported back as an event: none is skipped, and both
// head and full are chosen at least once.
void ExpectBothActionsAndNoSkip(BanditPolicy& p, int64_t n, double s) {
  std::array<int, 3> seen{};
  for (int64_t e = 0; e < n; ++e) {
    const BanditAction a = p.Choose(s);
    ASSERT_NE(a, BanditAction::kSkip);
    ++seen[static_cast<int>(a)];
    p.OnEvent(a);
  }
  EXPECT_GT(seen[1], 0);
  EXPECT_GT(seen[2], 0);
}

TEST(SpecBlockBandit, ColdStartExploresBothActionsThenFollowsValues) {
  BanditOptions o;
  o.seed = 7;
  o.explore = 0;  // the paper's rule after the cold start: argmax of s·v only
  BanditPolicy p(o);
  // Below s_min nothing fires during the cold start.
  EXPECT_EQ(p.Choose(1.0), BanditAction::kSkip);
  // The cold start never skips a query with enough signal and samples both actions.
  ASSERT_NO_FATAL_FAILURE(ExpectBothActionsAndNoSkip(p, o.cold_start, 20.0));
  EXPECT_NEAR(p.epsilon(), 0.10, 1e-12);
  // Values: both <= 0 -> skip.
  EXPECT_EQ(p.Choose(20.0), BanditAction::kSkip);
  // A measured gain for head moves its EWMA: v = 0.1 * delta / s.
  p.OnMeasured(BanditAction::kHead, 50.0, 10.0);
  EXPECT_NEAR(p.value(BanditAction::kHead), 0.5, 1e-12);
  p.OnMeasured(BanditAction::kHead, 50.0, 4.0);  // s_trig < s_min: ignored
  EXPECT_NEAR(p.value(BanditAction::kHead), 0.5, 1e-12);
  EXPECT_EQ(p.Choose(20.0), BanditAction::kHead);
  p.OnMeasured(BanditAction::kFull, 200.0, 10.0);  // v_full = 2
  EXPECT_EQ(p.Choose(20.0), BanditAction::kFull);
  p.OnMeasured(BanditAction::kFull, -1000.0, 10.0);  // v_full = 0.9 * 2 - 10 = -8.2
  EXPECT_NEAR(p.value(BanditAction::kFull), -8.2, 1e-9);
  EXPECT_EQ(p.Choose(20.0), BanditAction::kHead);
  p.Reset();
  EXPECT_EQ(p.value(BanditAction::kHead), 0);
  EXPECT_EQ(p.events(), 0);
  // The "- cost-aware bandit" ablation never skips, whatever the signal and values, and its
  // cold start explores both actions too (head/full routing is kept).
  BanditOptions off = o;
  off.gating = false;
  BanditPolicy q(off);
  ASSERT_NO_FATAL_FAILURE(ExpectBothActionsAndNoSkip(q, 20, 0.0));
}

// Exploration never dies (issue 26): after the cold start, with both values <= 0 (skip), a query
// with enough signal still probes head or full with probability `explore`; with explore = 0 (the
// paper's rule, the negative control) skip is absorbing. Over 400 queries at explore = 0.1 the
// chance of no probe is 0.9^400 < 1e-18.
TEST(SpecBlockBandit, ExploresAgainAfterALongSkipStreak) {
  for (const double explore : {0.0, 0.1}) {
    BanditOptions o;
    o.seed = 5;
    o.explore = explore;
    BanditPolicy p(o);
    for (int e = 0; e < o.cold_start; ++e) p.OnEvent(p.Choose(20.0));
    p.OnMeasured(BanditAction::kHead, -50.0, 10.0);
    p.OnMeasured(BanditAction::kFull, -50.0, 10.0);
    std::array<int, 3> seen{};
    for (int q = 0; q < 400; ++q) ++seen[static_cast<int>(p.Choose(20.0))];
    if (explore == 0) {
      EXPECT_EQ(seen[0], 400) << "skip is absorbing without the floor";
    } else {
      EXPECT_GT(seen[1] + seen[2], 0) << "no probe in 400 skipped queries";
      EXPECT_GT(seen[0], 300);                        // still mostly skip: the values say so
      EXPECT_EQ(p.Choose(1.0), BanditAction::kSkip);  // below s_min: never a probe
    }
  }
}

// A rollback resets the values and reopens the cold start: a policy that skipped every query
// picks head or full for the next query with enough signal.
TEST(SpecBlockBandit, ExploresAgainAfterARollback) {
  BanditOptions o;
  o.seed = 9;
  o.explore = 0;
  BanditPolicy p(o);
  for (int e = 0; e < o.cold_start; ++e) p.OnEvent(p.Choose(20.0));
  p.OnMeasured(BanditAction::kHead, -50.0, 10.0);
  p.OnMeasured(BanditAction::kFull, -50.0, 10.0);
  for (int q = 0; q < 50; ++q) ASSERT_EQ(p.Choose(20.0), BanditAction::kSkip);
  p.Reset();
  EXPECT_EQ(p.events(), 0);
  EXPECT_NEAR(p.epsilon(), o.eps_start, 1e-12);
  EXPECT_NE(p.Choose(20.0), BanditAction::kSkip);
}

// The per-category reward (spec G10): a switch from fast prompts to slow ones with no drafter
// change is no loss (the interval's mean reward stays 1), while raw tokens/s halves; a real
// speed-up of one category shows up in both.
TEST(SpecBlockBandit, CategoryRewardIgnoresAChangeOfPromptMix) {
  auto interval = [](QueryReward& r, const std::string& category, double tps, int n) {
    double num = 0, den = 0;
    for (int i = 0; i < n; ++i) {
      const auto [a, b] = r.Add(category, tps * 2.0, 2.0);
      num += a;
      den += b;
    }
    return num / den;
  };
  QueryReward per_category(true), raw(false);
  const double before = interval(per_category, "writing", 100, 8);
  const double after = interval(per_category, "math", 50, 8);
  EXPECT_NEAR(before, 1.0, 1e-12);
  EXPECT_NEAR(after - before, 0.0, 1e-12);
  EXPECT_NEAR(interval(raw, "math", 50, 8) - interval(raw, "writing", 100, 8), -50, 1e-9);
  const double faster = interval(per_category, "math", 60, 8);  // the drafter got better
  EXPECT_GT(faster - after, 0.1);
}

TEST(SpecBlockBandit, SameSeedSameChoices) {
  BanditOptions o;
  o.seed = 11;
  BanditPolicy a(o), b(o);
  for (int i = 0; i < 8; ++i) {
    const BanditAction x = a.Choose(10.0), y = b.Choose(10.0);
    EXPECT_EQ(x, y);
    a.OnEvent(x);
    b.OnEvent(y);
  }
}

TEST(SpecBlockBandit, RollbackAfterThreeFallingWindows) {
  RollbackTracker r(3);
  bool best = false;
  EXPECT_FALSE(r.AddWindow(3.0, false, &best));
  EXPECT_TRUE(best);
  EXPECT_FALSE(r.AddWindow(3.5, false, &best));
  EXPECT_TRUE(best);
  EXPECT_FALSE(r.AddWindow(3.4, true, &best));
  EXPECT_FALSE(best);
  EXPECT_FALSE(r.AddWindow(3.3, false, &best));
  EXPECT_FALSE(r.AddWindow(3.3, true, &best));  // flat: not a fall
  EXPECT_FALSE(r.AddWindow(3.2, false, &best));
  EXPECT_FALSE(r.AddWindow(3.1, false, &best));
  EXPECT_TRUE(r.AddWindow(3.0, false, &best));   // 3.3 (updated) > 3.2 > 3.1 > 3.0
  EXPECT_FALSE(r.AddWindow(2.9, false, &best));  // history restarted
}

// The rollback keys on an update: three falling windows with no training event in them or in
// the window before (a harder stretch of prompts) leave the weights alone.
TEST(SpecBlockBandit, NoRollbackWhenTauFallsWithoutAnUpdate) {
  RollbackTracker r(3);
  bool best = false;
  for (double tau : {3.6, 3.5, 3.4, 3.3, 3.2, 3.1, 3.0})
    EXPECT_FALSE(r.AddWindow(tau, false, &best));
  // An update, then three falls: the update is undone.
  EXPECT_FALSE(r.AddWindow(3.0, true, &best));
  EXPECT_FALSE(r.AddWindow(2.9, false, &best));
  EXPECT_FALSE(r.AddWindow(2.8, false, &best));
  EXPECT_TRUE(r.AddWindow(2.7, false, &best));
}

// The decision clock of RepeatedPromptTau (base/clock.h): a cost model of the work done,
// 1 ms per target forward (TargetForwardClock) plus, for a bandit adapter, 50 ms per head-only
// and 180 ms per full update event: about the ratios measured on the 2-core CPU (a query of ~27
// forwards ~45 ms, a head update ~0.09 s, a full one ~0.3 s), so updates cost what they cost in
// production, but the same on every run whatever the machine's load.
class WorkClock final : public Clock {
 public:
  explicit WorkClock(const LoadedTarget& target)
      : forwards_(testing_util::TargetForwardClock(target)) {}
  // The bandit whose events are charged (null: none). Its counters start at 0: switch only
  // between two adapters' lifetimes.
  void Charge(const SpecBlockBanditAdapter* bandit) { bandit_ = bandit; }
  double Now() const override {
    double s = forwards_.Now();
    if (bandit_ != nullptr) {
      s += 0.05 * static_cast<double>(bandit_->stats().head_events) +
           0.18 * static_cast<double>(bandit_->stats().full_events);
    }
    return s;
  }

 private:
  CostModelClock forwards_;
  const SpecBlockBanditAdapter* bandit_ = nullptr;
};

// Serves one story prompt `repeats` times with `method`;
// returns tau per request. Every output must equal AR's, and the decoder's per-step adaptation
// time must stay inside draft time. `adapt_s` receives the summed adaptation time. Timing-driven
// decisions (the bandit's throughput reward) read WorkClock, not the wall clock: the outcome
// does not depend on the machine's load.
std::vector<double> RepeatedPromptTau(const std::string& method, const nlohmann::json& knobs,
                                      int repeats, Decoder** out, double* adapt_s,
                                      std::unique_ptr<Decoder>* keep) {
  static LoadedTarget target = LoadModel("stories260K", at::kFloat);
  static WorkClock clock(target);  // outlives every kept decoder
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = CachingContextFor(target);
  context.clock = &clock;
  *keep = registry.Build(method, context, knobs);
  *out = keep->get();
  clock.Charge(dynamic_cast<const SpecBlockBanditAdapter*>(
      dynamic_cast<SpeculativeDecoder&>(**out).adapter()));
  const auto prompts = LoadDataset("stories", {});
  const std::vector<int32_t> ids = BuildPromptIds(target, {{"user", prompts[5].turns[0]}});
  GenerationConfig g;
  g.stop = StopConfigFor(target, 64, {});
  KvCache cache = target.model->NewCache(1, static_cast<int64_t>(ids.size()) + 65);
  const GenerationResult ar = GenerateAr(*target.model, target.tokenizer.get(), ids, g, cache);
  std::vector<double> taus;
  *adapt_s = 0;
  for (int i = 0; i < repeats; ++i) {
    DecodeResult r;
    (*out)->Generate(ids, g, cache, r);
    EXPECT_EQ(r.generation.tokens, ar.tokens) << method << " request " << i;
    int64_t emitted = 0;
    for (const StepStats& st : r.steps) {
      emitted += st.n_emitted;
      *adapt_s += st.t_adapt_us * 1e-6;
      EXPECT_LE(st.t_adapt_us, st.t_draft_us);
    }
    taus.push_back(static_cast<double>(emitted) / r.steps.size());
  }
  return taus;
}

double Mean(const std::vector<double>& v, size_t from, size_t to) {
  double s = 0;
  for (size_t i = from; i < to; ++i) s += v[i];
  return s / (to - from);
}

TEST(SpecBlockAdapt, SlotsDraftingATokenAreEveryBlockOneSlotThatReachesIt) {
  // T = 8, K = 4: row 1 (token 2) is reachable only from the root at 1 (slot 0); row 5 (token 6)
  // from the roots at 5, 4, 3, 2 (slots 0..3). Layout index (start * K + k), start = root - 1.
  at::Tensor mask = at::zeros({2, 8}, at::kFloat);
  mask[0][1] = 1;
  mask[0][5] = 1;
  mask[1][7] = 1;  // the last row has no next token: ignored
  mask[1][0] = 1;  // row 0: no root before it: ignored
  const SpecBlockSlotRows rows = SpecBlockSlotsDrafting(mask, 4);
  const auto vec = [](const at::Tensor& x) {
    return std::vector<int64_t>(x.data_ptr<int64_t>(), x.data_ptr<int64_t>() + x.numel());
  };
  EXPECT_EQ(vec(rows.slot), (std::vector<int64_t>{0, 16, 13, 10, 7}));
  EXPECT_EQ(vec(rows.seq), (std::vector<int64_t>{1, 5, 5, 5, 5}));
}

// The online slot logits see each request's whole context: a request whose slots start late runs
// its earlier starts once without gradients as cached keys/values, and its rows equal those of a
// single forward over every start (a request supervised from its first root), on a batch of two
// requests; the late span still carries gradients into the trunk.
TEST(SpecBlockAdapt, SlotLogitsSeeTheWholeContextThroughTheCachedStarts) {
  at::set_num_threads(1);
  TinySetup tiny = MakeTiny();
  SpecBlockModel model(tiny.config, tiny.tensors, tiny.target->weights().tok_embeddings, true);
  const std::vector<int32_t> seq = {1, 3, 0, 2, 2, 1, 0, 3, 1, 2};
  const int64_t t = static_cast<int64_t>(seq.size());
  KvCache cache = tiny.target->NewCache(1, t);
  ForwardOptions fo;
  fo.hidden_layers = tiny.config.aux_layer_ids;
  ForwardOutput out = tiny.target->Forward(testing_util::Ids(seq), cache, fo);
  std::vector<at::Tensor> hidden;
  for (const at::Tensor& h : out.hidden) hidden.push_back(h.clone());
  const at::Tensor aux = at::cat(hidden, -1).to(at::kFloat).expand({2, t, -1}).contiguous();
  const at::Tensor tokens = testing_util::Ids(seq).to(at::kLong).expand({2, t}).contiguous();
  auto rows_at = [&](std::vector<std::vector<int64_t>> supervised) {
    at::Tensor mask = at::zeros({2, t}, at::kFloat);
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t r : supervised[b]) mask[b][r] = 1;
    }
    return SpecBlockSlotsDrafting(mask, tiny.config.block_size);
  };
  const SpecBlockSlotRows late = rows_at({{7}, {8}});         // starts 5..7: the context split
  const SpecBlockSlotRows whole = rows_at({{1, 7}, {1, 8}});  // start 0: one forward
  const at::Tensor late_logits = SpecBlockSlotLogits(model, aux, tokens, late, false);
  at::Tensor whole_logits;
  {
    at::NoGradGuard no_grad;
    whole_logits = SpecBlockSlotLogits(model, aux, tokens, whole, false);
  }
  // whole's rows: request 0 {r 1: 1 slot, r 7: K}, request 1 {r 1: 1, r 8: K}.
  const int64_t k = tiny.config.block_size;
  ASSERT_EQ(late_logits.size(0), 2 * k);
  const at::Tensor expect =
      at::cat({whole_logits.narrow(0, 1, k), whole_logits.narrow(0, 2 + k, k)});
  EXPECT_TRUE(at::allclose(late_logits.detach(), expect, 1e-5, 1e-5))
      << (late_logits.detach() - expect).abs().max().item<float>();
  late_logits.logsumexp(-1).sum().backward();
  const at::Tensor& q = model.Param("layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(q.grad().defined());
  EXPECT_GT(q.grad().abs().sum().item<double>(), 0);
}

// Without adaptation nothing carries over between requests: the same prompt gives the same trees.
TEST(SpecBlockAdapt, StaticDrafterGivesTheSameAcceptanceOnEveryRepeat) {
  at::set_num_threads(1);
  Decoder* decoder = nullptr;
  std::unique_ptr<Decoder> keep;
  double adapt_s = 0;
  const auto taus = RepeatedPromptTau("specblock", {{"budget", 12}}, 3, &decoder, &adapt_s, &keep);
  EXPECT_EQ(taus[1], taus[0]);
  EXPECT_EQ(taus[2], taus[0]);
  EXPECT_EQ(adapt_s, 0);
}

TEST(SpecBlockAdapt, OsdUpdatesRaiseAcceptanceOnARepeatedPromptAndStayLossless) {
  at::set_num_threads(1);
  Decoder* decoder = nullptr;
  std::unique_ptr<Decoder> keep;
  double adapt_s = 0;
  const auto taus = RepeatedPromptTau(
      "specblock+osd", {{"budget", 12}, {"osd_interval", 2}, {"osd_steps", 16}, {"osd_lr", 3e-4}},
      10, &decoder, &adapt_s, &keep);
  const OsdStats& stats =
      dynamic_cast<OsdAdapter&>(*dynamic_cast<SpeculativeDecoder&>(*decoder).adapter()).stats();
  EXPECT_EQ(stats.requests, 10);
  EXPECT_EQ(stats.updates, 5);
  EXPECT_GT(stats.supervised_positions, 0);
  EXPECT_NEAR(adapt_s, stats.update_seconds, 0.01 + 0.05 * stats.update_seconds);
  EXPECT_GT(Mean(taus, 8, 10), Mean(taus, 0, 2) + 0.3)
      << "first " << taus.front() << " last " << taus.back();
}

// The window log holds one case's windows: a case starts it afresh (it appended across runs
// before), and a path that cannot be written is refused naming it.
TEST(SpecBlockBandit, WindowLogStartsAfreshPerCaseAndRefusesAnUnwritablePath) {
  at::set_num_threads(1);
  const std::string log = std::string(SPECBED_TEST_TMPDIR) + "/bandit_windows.jsonl";
  std::ofstream(log) << "{\"window\": 0, \"from\": \"an earlier run\"}\n";
  Decoder* decoder = nullptr;
  std::unique_ptr<Decoder> keep;
  double adapt_s = 0;
  const nlohmann::json knobs = {{"budget", 12}, {"interval", 2}, {"log", log}};
  RepeatedPromptTau("specblock+bandit", knobs, 4, &decoder, &adapt_s, &keep);  // 2 windows
  std::ifstream in(log);
  std::string line;
  int64_t lines = 0;
  while (std::getline(in, line)) {
    EXPECT_EQ(line.find("an earlier run"), std::string::npos) << line;
    ++lines;
  }
  const auto& adapter =
      dynamic_cast<SpecBlockBanditAdapter&>(*dynamic_cast<SpeculativeDecoder&>(*decoder).adapter());
  EXPECT_EQ(lines, static_cast<int64_t>(adapter.stats().windows.size()));
  EXPECT_EQ(lines, 2);
  static LoadedTarget target = LoadModel("stories260K", at::kFloat);
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = CachingContextFor(target);
  try {
    registry.Build("specblock+bandit", context, {{"log", "/nonexistent/dir/windows.jsonl"}});
    FAIL() << "an unwritable log path was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/dir/windows.jsonl"));
  }
}

// With the bandit off (the "- cost-aware bandit" ablation) every saturated buffer fires (head and
// full queries fill separate buffers of 2 after a warm-up of 2 queries); with it on, the cold
// start explores and post-event blocking holds some buffers back. Either way the served weights
// change, acceptance on the repeated prompt rises, and the decoder's adaptation time covers the
// adapter's own update time (wall clock). The reward reads WorkClock (RepeatedPromptTau), so
// which action each query takes is the same on every run, whatever the machine's load: off fires
// one full event, then head events only (tau 2.17 -> 2.63), on one full then one head event
// (2.17 -> 2.52), for any update costs from 10/30 ms to 200/600 ms (head/full). With free
// updates (target forwards only) the full event looks profitable, off fires a second one and
// tau ends at 2.03: what the wall clock gave once with the other core busy. 4 AdamW steps per
// event: the buffer holds the rejected positions only (a leaf whose children were pruned drafted
// nothing there), and 16 steps at lr 3e-4 overfit those few rows (tau fell from 2.17 to 1.4 on this
// prompt); 4 steps raise it (2.17 -> 2.4-2.5).
TEST(SpecBlockAdapt, BanditUpdatesRaiseAcceptanceOnARepeatedPromptAndStayLossless) {
  at::set_num_threads(1);
  for (const std::string bandit : {"off", "on"}) {
    Decoder* decoder = nullptr;
    std::unique_ptr<Decoder> keep;
    double adapt_s = 0;
    const nlohmann::json knobs = {
        {"budget", 12}, {"bandit", bandit}, {"warmup", 2}, {"cold_start", 4},
        {"buffer", 2},  {"interval", 5},    {"lr", 3e-4},  {"steps", 4},
        {"s_min", 0.0}, {"reward", "tps"}};  // the paper's reward: this test is about updates
    const auto taus = RepeatedPromptTau("specblock+bandit", knobs, 10, &decoder, &adapt_s, &keep);
    const auto& adapter = dynamic_cast<SpecBlockBanditAdapter&>(
        *dynamic_cast<SpeculativeDecoder&>(*decoder).adapter());
    const BanditStats& stats = adapter.stats();
    // Off: every saturated buffer fires. Head and full queries fill separate buffers of 2.
    std::array<int64_t, 3> actions{};
    for (const BanditWindow& w : stats.windows)
      for (int a = 0; a < 3; ++a) actions[a] += w.actions[a];
    if (bandit == "off") {
      EXPECT_EQ(actions[0], 2);  // the warm-up queries only
      EXPECT_EQ(stats.events, actions[1] / 2 + actions[2] / 2);
      EXPECT_GE(stats.events, 3);
      // Events fire inside each other's measurement intervals; each closes the previous one
      // early, so the head/full values still learn from measured throughput.
      EXPECT_TRUE(adapter.policy().value(BanditAction::kHead) != 0 ||
                  adapter.policy().value(BanditAction::kFull) != 0);
    }
    // On: the cold start (4 events) explores without skipping; post-event blocking (2 queries)
    // and the measurement interval keep the buffer from firing on every saturation.
    if (bandit == "on") {
      EXPECT_GE(stats.events, 1);
      EXPECT_LT(stats.events, 4);
    }
    EXPECT_EQ(stats.windows.size(), 2u);  // 10 queries, windows of 5
    EXPECT_GT(stats.update_seconds, 0);
    EXPECT_GE(adapt_s + 1e-6, stats.update_seconds) << bandit;
    EXPECT_GT(Mean(taus, 8, 10), Mean(taus, 0, 2) + 0.2)
        << bandit << ": first " << taus.front() << " last " << taus.back() << " all "
        << ::testing::PrintToString(taus);
  }
}

}  // namespace
}  // namespace specbed
