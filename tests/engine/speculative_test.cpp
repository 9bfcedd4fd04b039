// The speculative decoding loop on the real stories260K model (fp32): every speculative decoder
// reproduces AR token for token at T = 0 (SpS with the shipped draft, with the target as its own
// draft, and a synthetic random-tree drafter with an "oracle" branch used only in tests), plus the
// loop's invariants: accepted nodes form root paths (checked in verifier_test), the KV cache
// after compaction equals a fresh forward over the committed tokens (target and SpS drafter),
// the counters add up (sum of emitted = output length - 1, the first token coming from prefill)
// and the phase times add up to the decode time; SpS at T = 1 on a tiny pair matches the target's
// exact 4-token distribution (chi-square, with negative controls); SpS at T > 0 on the ATen path
// keeps its draft distributions on the device, draws the row path's tokens, and a warm step
// allocates no tensor storage; every step's device time per phase and engine counters.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <optional>
#include <random>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/engine/verifier.h"
#include "harness/runner/runner.h"
#include "methods/common/registration_util.h"
#include "methods/method_registry.h"
#include "methods/sps/sps_drafter.h"
#include "metrics/metrics.h"
#include "models/op_trace.h"
#include "reports/summary.h"
#include "tests/common/test_util.h"
#include "tests/engine/engine_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

struct Fixture {
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  std::vector<std::vector<int32_t>> prompts = testing_util::StoryPromptIds(target);
};

Fixture& Shared() {
  static Fixture fixture;
  return fixture;
}

GenerationConfig Config(const LoadedTarget& target, double temperature, int64_t max_new_tokens,
                        uint64_t seed = 7) {
  GenerationConfig g;
  g.sampling.temperature = temperature;
  g.seed = seed;
  g.stop = StopConfigFor(target, max_new_tokens, {});
  return g;
}

KvCache CacheFor(LlamaModel& model, const std::vector<int32_t>& prompt, int64_t max_new) {
  return model.NewCache(1, std::min<int64_t>(model.config().max_seq_len,
                                             static_cast<int64_t>(prompt.size()) + max_new + 1));
}

std::unique_ptr<SpeculativeDecoder> MakeSps(LoadedTarget& target, std::shared_ptr<LlamaModel> draft,
                                            int64_t gamma) {
  SpeculativeOptions options;
  options.budget = {gamma, gamma};
  options.sampling_rule = VerifyRule::kChainRs;
  return std::make_unique<SpeculativeDecoder>(*target.model, target.tokenizer.get(),
                                              std::make_unique<SpsDrafter>(std::move(draft)),
                                              options);
}

// Loop invariants every speculative generation must satisfy.
void ExpectInvariants(const DecodeResult& r, const std::string& where) {
  int64_t emitted = 0;
  double phases_ms = 0;
  for (const StepStats& s : r.steps) {
    EXPECT_LE(s.n_accepted, s.n_drafted) << where;
    EXPECT_LE(s.n_emitted, s.n_accepted + 1) << where;
    EXPECT_LE(s.draft_depth, s.n_drafted) << where;
    EXPECT_GE(s.t_draft_us, 0) << where;
    EXPECT_GE(s.t_verify_us, 0) << where;
    EXPECT_GE(s.t_other_us, 0) << where;
    emitted += s.n_emitted;
    phases_ms += (s.t_draft_us + s.t_verify_us + s.t_other_us) * 1e-3;
  }
  const int64_t n_out = static_cast<int64_t>(r.generation.tokens.size());
  EXPECT_EQ(emitted, std::max<int64_t>(n_out - 1, 0)) << where;
  EXPECT_EQ(r.generation.n_steps, static_cast<int64_t>(r.steps.size())) << where;
  // Phases tile the decode time (up to the few instructions after the loop).
  EXPECT_NEAR(phases_ms, r.generation.decode_ms, 0.05 + 0.01 * r.generation.decode_ms) << where;
}

// The AR generation of `prompt` under `g` in `cache`, then `decoder`'s in the same cache.
std::pair<GenerationResult, DecodeResult> ArThenDecode(LoadedTarget& target, Decoder& decoder,
                                                       const std::vector<int32_t>& prompt,
                                                       const GenerationConfig& g, KvCache& cache) {
  std::pair<GenerationResult, DecodeResult> out;
  out.first = GenerateAr(*target.model, target.tokenizer.get(), prompt, g, cache);
  decoder.Generate(prompt, g, cache, out.second);
  return out;
}

void ExpectSameAsAr(Decoder& decoder, LoadedTarget& target, double temperature,
                    int64_t max_new_tokens, const std::string& name, double* tau = nullptr) {
  auto& prompts = Shared().prompts;
  int64_t steps = 0, emitted = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const GenerationConfig g = Config(target, temperature, max_new_tokens, 100 + i);
    KvCache cache = CacheFor(*target.model, prompts[i], max_new_tokens);
    const auto [ar, spec] = ArThenDecode(target, decoder, prompts[i], g, cache);
    const std::string where = name + " prompt " + std::to_string(i);
    ASSERT_EQ(spec.generation.tokens, ar.tokens) << where;
    EXPECT_EQ(spec.generation.stop_reason, ar.stop_reason) << where;
    EXPECT_EQ(spec.generation.text, ar.text) << where;
    ExpectInvariants(spec, where);
    steps += static_cast<int64_t>(spec.steps.size());
    for (const auto& s : spec.steps) emitted += s.n_emitted;
  }
  if (tau) *tau = static_cast<double>(emitted) / std::max<int64_t>(steps, 1);
}

TEST(Speculative, SpsWithShippedDraftMatchesArOnEveryStoryPrompt) {
  LoadedTarget& target = Shared().target;
  LoadedTarget draft = LoadModel("stories260K-draft", at::kFloat);
  for (int64_t gamma : {1, 4, 7}) {
    auto sps = MakeSps(target, draft.model, gamma);
    double tau = 0;
    ExpectSameAsAr(*sps, target, 0.0, 96, "sps gamma " + std::to_string(gamma), &tau);
    EXPECT_GT(tau, 1.2) << "gamma " << gamma;  // the shipped draft is useful
  }
}

TEST(Speculative, SelfDraftAcceptsEveryToken) {
  // The target as its own draft: at T = 0 every drafted token is accepted, so each step emits
  // gamma + 1 tokens (except where a stop rule cuts the step), exercising the "whole chain
  // accepted" path of the drafter cache.
  LoadedTarget& target = Shared().target;
  LoadedTarget self = LoadModel("stories260K", at::kFloat);
  auto sps = MakeSps(target, self.model, 3);
  double tau = 0;
  ExpectSameAsAr(*sps, target, 0.0, 64, "self-draft", &tau);
  EXPECT_GT(tau, 3.7);
  DecodeResult r;
  const auto& prompt = Shared().prompts[0];
  KvCache cache = CacheFor(*target.model, prompt, 64);
  sps->Generate(prompt, Config(target, 0.0, 64), cache, r);
  for (size_t k = 0; k + 1 < r.steps.size(); ++k) EXPECT_EQ(r.steps[k].n_accepted, 3);
}

// A test-only drafter: a random tree of `budget` nodes in which one branch follows the known AR
// continuation (each token right with probability 0.85) and the other nodes are random tokens
// under random parents (sometimes before the oracle branch, so the accepted path is not a
// prefix of the node order and KV compaction must gather).
class OracleRandomTreeDrafter : public Drafter {
 public:
  OracleRandomTreeDrafter(std::vector<int32_t> reference, size_t prompt_len, int64_t vocab,
                          uint64_t seed)
      : reference_(std::move(reference)), prompt_len_(prompt_len), vocab_(vocab), rng_(seed) {}
  void Begin(const DraftBegin&) override {}
  void Draft(const DraftStep& step, DraftTree& tree) override {
    const size_t generated = step.committed->size() - prompt_len_;  // includes the root
    std::uniform_real_distribution<double> u(0, 1);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab_ - 1));
    int32_t tip = -1;  // oracle branch tip (-1 = root)
    int64_t tip_depth = 0;
    while (tree.size() < step.budget.nodes) {
      const bool extend = u(rng_) < 0.5 && tip_depth < step.budget.depth;
      if (extend) {
        const size_t ref_index = generated + tip_depth;
        int32_t t = ref_index < reference_.size() ? reference_[ref_index] : token(rng_);
        if (u(rng_) > 0.85) t = token(rng_);
        tip = tree.AddNode(t, tip);
        ++tip_depth;
      } else {
        const int32_t parent =
            std::uniform_int_distribution<int32_t>(-1, static_cast<int32_t>(tree.size()) - 1)(rng_);
        const int32_t parent_depth = parent < 0 ? 0 : tree.depth[parent];
        if (parent_depth >= step.budget.depth) continue;
        tree.AddNode(token(rng_), parent);
      }
    }
  }
  void Accept(const DraftTree&, const Verdict&) override {}

 private:
  std::vector<int32_t> reference_;
  size_t prompt_len_;
  int64_t vocab_;
  std::mt19937_64 rng_;
};

// Target KV rows [0, n) equal those of a fresh prefill over `tokens`.
void ExpectCacheMatchesFreshForward(LlamaModel& model, const KvCache& cache,
                                    const std::vector<int32_t>& tokens, const std::string& where) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  ASSERT_LE(n, cache.length()) << where;
  KvCache fresh = model.NewCache(1, n + 1);
  at::Tensor ids = at::empty({1, n}, at::kLong);
  for (int64_t i = 0; i < n; ++i) ids[0][i] = tokens[i];
  ForwardOptions options;
  options.logits = LogitsMode::kNone;
  model.Forward(ids, fresh, options);
  for (int64_t l = 0; l < cache.n_layers(); ++l) {
    const at::Tensor a = cache.keys(l).narrow(2, 0, n), b = fresh.keys(l).narrow(2, 0, n);
    const at::Tensor va = cache.values(l).narrow(2, 0, n), vb = fresh.values(l).narrow(2, 0, n);
    EXPECT_TRUE(at::allclose(a, b, 1e-5, 1e-5)) << where << " keys layer " << l;
    EXPECT_TRUE(at::allclose(va, vb, 1e-5, 1e-5)) << where << " values layer " << l;
  }
}

TEST(Speculative, RandomTreeDrafterMatchesArAndCompactsKv) {
  LoadedTarget& target = Shared().target;
  auto& prompts = Shared().prompts;
  const int64_t max_new = 80;
  double total_emitted = 0, total_steps = 0;
  int64_t wider_than_deep = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const GenerationConfig g = Config(target, 0.0, max_new);
    KvCache cache = CacheFor(*target.model, prompts[i], max_new);
    const GenerationResult ar =
        GenerateAr(*target.model, target.tokenizer.get(), prompts[i], g, cache);
    SpeculativeOptions options;
    options.budget = {15, 6};
    options.sampling_rule = VerifyRule::kSampleFollow;
    SpeculativeDecoder decoder(
        *target.model, target.tokenizer.get(),
        std::make_unique<OracleRandomTreeDrafter>(ar.tokens, prompts[i].size(),
                                                  target.model->config().vocab_size, 1000 + i),
        options);
    DecodeResult spec;
    decoder.Generate(prompts[i], g, cache, spec);
    const std::string where = "random tree prompt " + std::to_string(i);
    ASSERT_EQ(spec.generation.tokens, ar.tokens) << where;
    ExpectInvariants(spec, where);
    for (const auto& s : spec.steps) {
      total_emitted += s.n_emitted;
      // Rollback in node units, as n_draft_generated: every verified node not kept (the
      // branches off the accepted path too, so not depth - accepted).
      EXPECT_EQ(s.n_rolled_back, s.n_drafted - s.n_accepted) << where;
      EXPECT_EQ(s.n_draft_generated, s.n_drafted) << where;
      wider_than_deep += s.n_drafted > s.draft_depth;
    }
    total_steps += static_cast<double>(spec.steps.size());
    if (i < 4) {
      // The cache holds prompt + every generated token but the last (the pending root), up to
      // the stop; beyond the stop a step may have kept more accepted rows.
      std::vector<int32_t> committed = prompts[i];
      committed.insert(committed.end(), ar.tokens.begin(), ar.tokens.end() - 1);
      ExpectCacheMatchesFreshForward(*target.model, cache, committed, where);
    }
  }
  EXPECT_GT(total_emitted / total_steps, 2.0);  // the oracle branch is really accepted
  EXPECT_GT(wider_than_deep, 0);                // real trees: node and depth units differ
}

TEST(Speculative, SpsDrafterCacheMatchesFreshDraftForward) {
  LoadedTarget& target = Shared().target;
  LoadedTarget draft = LoadModel("stories260K-draft", at::kFloat);
  SpeculativeOptions options;
  options.budget = {4, 4};
  auto owned = std::make_unique<SpsDrafter>(draft.model);
  SpsDrafter* drafter = owned.get();
  SpeculativeDecoder decoder(*target.model, target.tokenizer.get(), std::move(owned), options);
  const auto& prompt = Shared().prompts[3];
  KvCache cache = CacheFor(*target.model, prompt, 60);
  DecodeResult r;
  decoder.Generate(prompt, Config(target, 0.0, 60), cache, r);
  ASSERT_EQ(r.generation.stop_reason, StopReason::kMaxNewTokens);
  // After the last step the drafter cache holds the committed tokens minus its pending ones.
  std::vector<int32_t> committed = prompt;
  committed.insert(committed.end(), r.generation.tokens.begin(), r.generation.tokens.end());
  const int64_t n =
      std::min<int64_t>(drafter->cache().length(), static_cast<int64_t>(committed.size()) - 1);
  committed.resize(n);
  ExpectCacheMatchesFreshForward(*draft.model, drafter->cache(), committed, "sps drafter");
  ExpectCacheMatchesFreshForward(*target.model, cache,
                                 std::vector<int32_t>(committed.begin(), committed.begin() + n),
                                 "sps target");
}

TEST(Speculative, StopsLikeArAtContextLimitAndStopStrings) {
  LoadedTarget& target = Shared().target;
  LoadedTarget draft = LoadModel("stories260K-draft", at::kFloat);
  auto sps = MakeSps(target, draft.model, 5);
  const auto& prompt = Shared().prompts[1];
  // A cache only 9 positions longer than the prompt: the budget shrinks, then max_context.
  {
    GenerationConfig g = Config(target, 0.0, 100);
    KvCache cache = target.model->NewCache(1, static_cast<int64_t>(prompt.size()) + 9);
    const auto [ar, spec] = ArThenDecode(target, *sps, prompt, g, cache);
    EXPECT_EQ(ar.stop_reason, StopReason::kMaxContext);
    EXPECT_EQ(spec.generation.stop_reason, StopReason::kMaxContext);
    EXPECT_EQ(spec.generation.tokens, ar.tokens);
    ExpectInvariants(spec, "context limit");
  }
  // A stop string reached inside a step: the rest of the step is dropped.
  {
    GenerationConfig g = Config(target, 0.0, 100);
    g.stop.stop_strings = {"."};
    KvCache cache = CacheFor(*target.model, prompt, 100);
    const auto [ar, spec] = ArThenDecode(target, *sps, prompt, g, cache);
    EXPECT_EQ(ar.stop_reason, StopReason::kStopString);
    EXPECT_EQ(spec.generation.stop_reason, StopReason::kStopString);
    EXPECT_EQ(spec.generation.tokens, ar.tokens);
    EXPECT_EQ(spec.generation.text, ar.text);
    ExpectInvariants(spec, "stop string");
  }
}

TEST(Speculative, SpsSamplingIsSeededAndValid) {
  LoadedTarget& target = Shared().target;
  LoadedTarget draft = LoadModel("stories260K-draft", at::kFloat);
  auto sps = MakeSps(target, draft.model, 4);
  const auto& prompt = Shared().prompts[2];
  DecodeResult a, b, c;
  KvCache cache = CacheFor(*target.model, prompt, 64);
  sps->Generate(prompt, Config(target, 1.0, 64, 5), cache, a);
  sps->Generate(prompt, Config(target, 1.0, 64, 5), cache, b);
  sps->Generate(prompt, Config(target, 1.0, 64, 6), cache, c);
  EXPECT_EQ(a.generation.tokens, b.generation.tokens);
  EXPECT_NE(a.generation.tokens, c.generation.tokens);
  ExpectInvariants(a, "T=1");
  int64_t accepted = 0;
  for (const auto& s : a.steps) accepted += s.n_accepted;
  EXPECT_GT(accepted, 0);
}

// SpS at T > 0 on the ATen path (forced on the CPU) drafts on the draft model's device: the tree
// carries its distributions as draft_probs_device (no host rows), the tokens and distributions
// are the row path's from the same seed (one uniform per token, the same inverse CDF), and once
// warm a step (draft chain + chain_rs verify on the device) allocates no tensor storage.
TEST(Speculative, SpsSampledDraftsStayOnTheDeviceOnTheAtenPath) {
  SetCpuForwardPathOverride(ForwardPath::kAten);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  LoadedTarget aten_draft = LoadModel("stories260K-draft", at::kFloat);
  SetCpuForwardPathOverride(ForwardPath::kAuto);
  LoadedTarget row_draft = LoadModel("stories260K-draft", at::kFloat);
  ASSERT_EQ(aten_draft.model->forward_path(), ForwardPath::kAten);
  std::vector<int32_t> committed = Shared().prompts[2];
  const int32_t root = committed.back();
  SpsDrafter rows(row_draft.model), aten(aten_draft.model);
  DraftBegin begin;
  committed.pop_back();
  begin.prompt = &committed;
  begin.root = root;
  begin.sampling = testing_util::Temperature(1.0);
  begin.seed = 11;
  begin.max_len = 256;
  rows.Begin(begin);
  aten.Begin(begin);
  KvCache cache = target.model->NewCache(1, 256);
  target.model->Forward(testing_util::Ids(committed), cache);
  committed.push_back(root);
  TreeVerifier verifier(*target.model);
  Sampler sampler(begin.sampling, 3);
  DraftTree a, b;
  Verdict verdict;
  int64_t allocations = -1, accepted = 0;
  for (int step = 0; step < 12; ++step) {
    DraftStep draft_step;
    draft_step.root = committed.back();
    draft_step.committed = &committed;
    draft_step.budget = {4, 4};
    a.Clear();
    b.Clear();
    rows.Draft(draft_step, a);
    std::optional<AllocationCount> counting;
    if (step == 11) counting.emplace();  // the last step, warm
    aten.Draft(draft_step, b);
    verifier.Verify(draft_step.root, b, VerifyRule::kChainRs, sampler, cache, {}, verdict);
    if (counting) allocations = counting->count();
    counting.reset();
    ASSERT_EQ(a.token, b.token) << "step " << step;
    ASSERT_TRUE(b.draft_probs.empty());
    ASSERT_NE(b.draft_probs_device, nullptr);
    const at::Tensor host_rows = at::from_blob(a.draft_probs.data(), {5, a.vocab}, at::kFloat);
    EXPECT_LE((b.draft_probs_device->narrow(0, 0, 5) - host_rows).abs().max().item<float>(), 1e-5f);
    rows.Accept(a, verdict);
    aten.Accept(b, verdict);
    committed.insert(committed.end(), verdict.tokens.begin(), verdict.tokens.end());
    accepted += verdict.n_accepted();
  }
  EXPECT_GT(accepted, 0);
  EXPECT_EQ(allocations, 0) << "storage allocations in a warm sampled SpS step";
}

// Every step records its phases' device time and its engine counters (issue 45, step 6). On the
// CPU a device mark reads the host clock, so each phase's device time equals its synced wall time
// up to the work between a mark and the wall clock's read beside it (a few microseconds; 50
// allowed: CI saw 5.01 on a loaded runner, and a swapped or missing phase is off by milliseconds)
// (the first step's device time starts after the drafter's Begin, its wall time at the end of
// prefill: there device time is at most wall time). Greedy SpS (gamma 4) on the ATen path with
// graphs off: the draft chain's 4 forwards upload their inputs once each, the verify step its
// forward's inputs with the tree in them (5); the chain's tokens and the verdict come back (2).
// Launches and host reads are counted only under OpCounting: then a step launches ops and reads
// nothing on the host.
TEST(Speculative, StepsRecordDeviceTimeAndEngineCounters) {
  at::set_num_threads(1);
  SetCpuForwardPathOverride(ForwardPath::kAten);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  LoadedTarget draft = LoadModel("stories260K-draft", at::kFloat);
  SetCpuForwardPathOverride(ForwardPath::kAuto);
  auto decoder = MakeSps(target, draft.model, 4);
  const std::vector<int32_t>& prompt = Shared().prompts[1];
  const GenerationConfig g = Config(target, 0.0, 40);
  KvCache cache = CacheFor(*target.model, prompt, 40);
  for (bool count_ops : {false, true}) {
    std::optional<OpCounting> counting;
    if (count_ops) counting.emplace(/*force=*/true);
    DecodeResult r;
    decoder->Generate(prompt, g, cache, r);
    ASSERT_GT(r.steps.size(), 3u);
    int64_t full_steps = 0;  // steps that drafted the whole chain
    for (size_t i = 0; i < r.steps.size(); ++i) {
      const StepStats& s = r.steps[i];
      const std::string where = "step " + std::to_string(i);
      constexpr double kSkewUs = 50;
      EXPECT_NEAR(s.t_verify_device_us, s.t_verify_us, kSkewUs) << where;
      if (i == 0) {  // device time starts after the drafter's Begin; wall time at prefill's end
        EXPECT_LE(s.t_draft_device_us, s.t_draft_us + kSkewUs) << where;
        EXPECT_LE(s.t_other_device_us, s.t_other_us + kSkewUs) << where;
      } else {
        EXPECT_NEAR(s.t_draft_device_us, s.t_draft_us, kSkewUs) << where;
        EXPECT_NEAR(s.t_other_device_us, s.t_other_us, kSkewUs) << where;
      }
      EXPECT_GT(s.t_verify_device_us, 0) << where;
      EXPECT_EQ(s.n_graph_replays, 0) << where;
      EXPECT_EQ(s.n_graph_captures, 0) << where;
      if (s.n_drafted == 4) {
        ++full_steps;
        EXPECT_EQ(s.n_h2d_copies, 5) << where;
        EXPECT_EQ(s.n_d2h_copies, 2) << where;
      }
      if (count_ops) {
        EXPECT_GT(s.n_launches, 50) << where;
        EXPECT_EQ(s.n_host_reads, 0) << where;
      } else {
        EXPECT_EQ(s.n_launches, -1) << where;
        EXPECT_EQ(s.n_host_reads, -1) << where;
      }
    }
    EXPECT_GT(full_steps, 2);
  }
}

std::shared_ptr<LlamaModel> TinyModel(uint64_t seed, double sharpen) {
  return testing_util::TinyRandomTarget(seed, sharpen);
}

// SpS end to end on a tiny target with a tiny random draft LM (vocabulary 4): the distribution
// of 4 generated tokens (256 cells) over 40000 seeded generations matches the target's exact
// distribution for gamma 2 at T = 1 and gamma 3 at T = 1.4 (both sides tempered). Four tokens
// take one or two verification steps, so the draft-probability rows must line up with the
// chain's slots and the draft cache must be truncated correctly after a rejection for the second
// step to be right. Chi-square with cells of expected count < 5 pooled, reject at p < 1e-4
// (false-failure rate about 1e-4 per check, 2 checks; seeds fixed). Negative controls, each
// failing the same check: greedy acceptance and a correction drawn from the target instead of the
// residual (VerifierFault); a stale q row and, at T = 1.4, q without the temperature (DraftFault,
// the drafter's side; sps+osd drafts with the same SpsDrafter).
TEST(Speculative, SpsIsLosslessAtTemperatureOneOnATinyPair) {
  at::set_num_threads(1);
  std::shared_ptr<LlamaModel> target = TinyModel(21, 60.0);
  std::shared_ptr<LlamaModel> draft = TinyModel(33, 25.0);
  for (auto [gamma, temperature] : {std::pair<int64_t, double>{2, 1.0}, {3, 1.4}}) {
    SCOPED_TRACE("gamma " + std::to_string(gamma) + " T " + std::to_string(temperature));
    SpeculativeOptions options;
    options.budget = {gamma, gamma};
    options.sampling_rule = VerifyRule::kChainRs;
    SpeculativeDecoder sps(*target, nullptr, std::make_unique<SpsDrafter>(draft), options);
    int64_t accepted = 0;
    const double p =
        testing_util::TinyOutputPValue(*target, sps, {1, 3}, 4, 40000, 90, &accepted, temperature);
    EXPECT_GT(p, 1e-4);
    EXPECT_GT(accepted, testing_util::ScaledDraws(40000) / 4);  // accepted often enough to matter
    for (VerifierFault fault :
         {VerifierFault::kGreedyAcceptance, VerifierFault::kTargetAsResidual}) {
      ScopedVerifierFault inject(fault);
      int64_t ignored = 0;
      EXPECT_LT(
          testing_util::TinyFaultPValue(*target, sps, {1, 3}, 4, 40000, 90, &ignored, temperature),
          1e-4)
          << "fault " << static_cast<int>(fault);
    }
    testing_util::ExpectDraftFaultsFail(*target, sps, {1, 3}, 4, 40000, 90, temperature);
  }
}

TEST(SpeculativeRunner, StoresStepsMarginsAndTraits) {
  const std::string db = testing_util::ScratchDir(testing_util::TestName()) + "/run.db";
  RunConfig config;
  config.name = "spec";
  config.output = db;
  config.methods = {{"ar", nlohmann::json::object()}, {"sps", {{"gamma", 3}}}};
  config.datasets = {{"stories", 4, {}}};
  config.temperatures = {0.0};
  config.max_new_tokens = 40;
  config.warmup = 0;
  auto store = ResultsStore::Open(db);
  RunnerOptions options;
  options.show_progress = false;
  Runner(*store, options).Run(config);
  const auto cases = store->ListCases();
  ASSERT_EQ(cases.size(), 2u);
  for (const auto& c : cases) {
    const auto samples = store->LoadSamples(c.case_id);
    const auto steps = store->LoadSteps(c.case_id);
    ASSERT_EQ(samples.size(), 4u);
    const auto traits = nlohmann::json::parse(c.record.method_traits_json);
    if (c.record.method == "ar") {
      EXPECT_TRUE(steps.empty());
      EXPECT_FALSE(traits.at("speculative").get<bool>());
      for (const auto& s : samples) {
        const auto margins = nlohmann::json::parse(s.token_margins_json);
        EXPECT_EQ(static_cast<int64_t>(margins.size()), s.n_output_tokens);
      }
    } else {
      EXPECT_EQ(c.record.drafter, "stories260K-draft");
      EXPECT_EQ(traits.at("sampling_verifier"), "chain_rs");
      for (const auto& s : samples) {
        int64_t emitted = 0, n = 0;
        for (const auto& st : steps) {
          if (st.prompt_id != s.prompt_id) continue;
          EXPECT_EQ(st.step_idx, n);
          EXPECT_EQ(st.draft_depth, st.n_drafted);  // chains
          emitted += st.n_emitted;
          ++n;
        }
        EXPECT_EQ(emitted, s.n_output_tokens - 1) << s.prompt_id;
        EXPECT_EQ(n, s.n_steps);
      }
    }
  }
  // Same outputs for AR and SpS at T = 0.
  const auto a = store->LoadSamples(cases[0].case_id), b = store->LoadSamples(cases[1].case_id);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].output_ids_json, b[i].output_ids_json);
}

// Paired timing: with AR in the config (timing "auto"), the sps case runs AR on every prompt
// back to back (AR first on even answers, second on odd ones) and stores the paired AR decode
// time and output length with every sample; its speedup then uses those pairs. "per_case"
// stores none. The AR case itself runs and is stored as before.
TEST(SpeculativeRunner, PairedTimingStoresAnArRunWithEveryAnswer) {
  const std::string dir = testing_util::ScratchDir(testing_util::TestName());
  RunConfig config;
  config.methods = {{"ar", nlohmann::json::object()}, {"sps", {{"gamma", 3}}}};
  config.datasets = {{"stories", 5, {}}};
  config.temperatures = {0.0};
  config.max_new_tokens = 24;
  config.warmup = 1;
  for (const std::string mode : {"auto", "per_case"}) {
    SCOPED_TRACE(mode);
    const bool paired = mode == "auto";
    config.timing = mode;
    config.output = dir + "/" + mode + ".db";
    auto store = ResultsStore::Open(config.output);
    RunnerOptions options;
    options.show_progress = false;
    Runner(*store, options).Run(config);
    const auto cases = store->ListCases();
    ASSERT_EQ(cases.size(), 2u);
    EXPECT_EQ(cases[0].record.method, "ar");
    EXPECT_EQ(cases[0].record.timing_mode, "per_case");
    EXPECT_EQ(cases[1].record.timing_mode, paired ? "paired" : "per_case");
    const auto ar = store->LoadSamples(cases[0].case_id);
    const auto sps = store->LoadSamples(cases[1].case_id);
    ASSERT_EQ(ar.size(), 5u);
    ASSERT_EQ(sps.size(), 5u);
    for (const SampleRecord& s : ar) EXPECT_FALSE(s.has_paired_ar());
    for (size_t i = 0; i < sps.size(); ++i) {
      ASSERT_EQ(sps[i].has_paired_ar(), paired) << i;
      if (!paired) continue;
      EXPECT_EQ(sps[i].paired_ar_first, i % 2 == 0 ? 1 : 0) << i;  // alternates
      EXPECT_GT(sps[i].paired_ar_decode_ms, 0) << i;
      // T = 0: the paired AR run generates the AR case's answer.
      EXPECT_EQ(sps[i].paired_ar_output_tokens, ar[i].n_output_tokens) << i;
    }
    const Speedup speedup = ComputeSpeedup(ar, sps);
    EXPECT_EQ(speedup.n_matched, 5);
    EXPECT_EQ(speedup.n_paired, paired ? 5 : 0);
    const std::string table = FormatSummaryTable(BuildSummary(config.output));
    EXPECT_NE(table.find(paired ? " p " : "per-case"), std::string::npos) << table;
  }
}

TEST(MethodRegistry, ListsBuiltinsWithTraitsAndValidatesKnobs) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  EXPECT_TRUE(registry.Has("ar"));
  EXPECT_TRUE(registry.Has("sps"));
  const MethodInfo& sps = registry.Info("sps");
  EXPECT_TRUE(sps.traits.speculative);
  EXPECT_TRUE(sps.traits.needs_draft_probs);
  EXPECT_EQ(sps.traits.sampling_verifier, "chain_rs");
  const nlohmann::json knobs = registry.ResolveKnobs("sps", nlohmann::json::object());
  EXPECT_EQ(knobs.at("gamma"), 4);
  EXPECT_EQ(knobs.at("drafter"), "auto");  // resolved per target:
  EXPECT_EQ(registry.ResolveKnobsFor("sps", nlohmann::json::object(), "stories260K").at("drafter"),
            "stories260K-draft");
  auto message = [&](const nlohmann::json& k) -> std::string {
    try {
      registry.ResolveKnobs("sps", k);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(message({{"gamma", 0}}).find("'gamma'"), std::string::npos);
  EXPECT_NE(message({{"gamma", 2.5}}).find("expects a value like"), std::string::npos);
  EXPECT_NE(message({{"gama", 3}}).find("gamma"), std::string::npos);  // nearest match
  EXPECT_THROW(registry.Info("spss"), Error);
}

// SpeculativeTraits sets exactly the flagged traits; a drafter knob implies needs_drafter.
TEST(MethodRegistry, SpeculativeTraitsSetEachFlag) {
  const MethodTraits plain = SpeculativeTraits("sample_follow", 0u);
  EXPECT_TRUE(plain.speculative);
  EXPECT_TRUE(plain.lossless);
  EXPECT_FALSE(plain.tree || plain.needs_drafter || plain.needs_draft_probs ||
               plain.needs_target_hidden || plain.trains_online || plain.overlaps_verification);
  EXPECT_EQ(plain.sampling_verifier, "sample_follow");
  const MethodTraits all = SpeculativeTraits("chain_rs",
                                             kTraitTree | kTraitDraftProbs | kTraitTargetHidden |
                                                 kTraitTrainsOnline | kTraitOverlapsVerification,
                                             "drafter");
  EXPECT_TRUE(all.tree && all.needs_drafter && all.needs_draft_probs && all.needs_target_hidden &&
              all.trains_online && all.overlaps_verification);
  EXPECT_FALSE(all.supports_batch);  // overlapping verification: its own loop, batch 1
  EXPECT_TRUE(plain.supports_batch);
  EXPECT_EQ(all.drafter_knob, "drafter");
  const MethodTraits tree_only = SpeculativeTraits("sample_follow", kTraitTree);
  EXPECT_TRUE(tree_only.tree);
  EXPECT_FALSE(tree_only.needs_draft_probs || tree_only.needs_target_hidden);
}

TEST(MethodRegistry, DraftLmMethodsRejectADraftWithOtherVocabulary) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  LoadedTarget& target = Shared().target;
  LoadedTarget other = LoadModel("random-35m", at::kFloat);
  MethodContext context;
  context.target = &target;
  context.load_model = [&](const std::string&) -> LoadedTarget& { return other; };
  for (const std::string method : {"sps", "pearl", "specbranch"}) {
    SCOPED_TRACE(method);
    testing::ExpectError(
        [&] {
          registry.Build(method, context, {{"drafter", "random-35m"}});
        },
        {method + ": draft model 'random-35m' has vocabulary"});
  }
}

}  // namespace
}  // namespace specbed

namespace specbed {
namespace {

// Synthetic acceptance ignores the target's verdict: the per-position pattern is what is accepted.
TEST(Speculative, SyntheticAcceptanceForcesThePerPositionPattern) {
  LoadedTarget& target = Shared().target;
  LoadedTarget draft = LoadModel("stories260K-draft", at::kFloat);
  auto decoder = MakeSps(target, draft.model, 4);
  const std::vector<int32_t>& prompt = Shared().prompts[0];
  for (const auto& [pattern, expected] : std::vector<std::pair<std::vector<double>, int64_t>>{
           {{1.0}, 4}, {{0.0}, 0}, {{1.0, 1.0, 0.0}, 2}}) {
    GenerationConfig g = Config(target, 0.0, 64);
    g.stop.stop_on_eos = false;
    g.synthetic_acceptance = pattern;
    KvCache cache = CacheFor(*target.model, prompt, 64);
    DecodeResult r;
    decoder->Generate(prompt, g, cache, r);
    ASSERT_FALSE(r.steps.empty());
    for (size_t i = 0; i + 1 < r.steps.size(); ++i) {  // the last step may be cut by the budget
      EXPECT_EQ(r.steps[i].n_accepted, std::min(expected, r.steps[i].n_drafted)) << "step " << i;
    }
    ExpectInvariants(r, "synthetic");
  }
  // Probabilities outside [0, 1] are rejected.
  GenerationConfig bad = Config(target, 0.0, 8);
  bad.synthetic_acceptance = {1.5};
  KvCache cache = CacheFor(*target.model, prompt, 8);
  DecodeResult r;
  EXPECT_THROW(decoder->Generate(prompt, bad, cache, r), Error);
}

}  // namespace
}  // namespace specbed
