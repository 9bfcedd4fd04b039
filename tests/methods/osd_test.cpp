// OSD (methods/osd): divergences against closed forms; the recorded correction positions of
// `sps+osd` equal the positions where the served draft's greedy token was rejected, and a warm-up
// generation (GenerationConfig::adapt false) records nothing; on a stream
// that repeats a prompt, online updates raise the acceptance length while every output stays
// token-identical to AR at T = 0 (for `sps+osd` and `eagle3+osd`); the update time is charged to
// the request that triggered it. Deterministic (T = 0, fixed seeds): false-failure rate 0.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/runner/runner.h"
#include "methods/method_registry.h"
#include "methods/osd/osd_adapter.h"
#include "methods/sps/sps_drafter.h"
#include "tests/engine/engine_test_util.h"
#include "tests/methods/method_test_util.h"

namespace specbed {
namespace {

MethodContext ContextFor(LoadedTarget& target) {
  return testing_util::CachingContextFor(target);
}

TEST(OsdDivergence, MatchesClosedForms) {
  const at::Tensor a = at::tensor({0.0f, 1.0f, 2.0f, 1.0f, 1.0f, 1.0f}).view({2, 3});
  const at::Tensor b = at::tensor({2.0f, 1.0f, 0.0f, 0.0f, 0.5f, 3.0f}).view({2, 3});
  auto probs = [](const at::Tensor& x) { return at::softmax(x, -1); };
  const at::Tensor p = probs(a), q = probs(b);
  const double fkl = (p * (p.log() - q.log())).sum(-1).mean().item<double>();
  const double rkl = (q * (q.log() - p.log())).sum(-1).mean().item<double>();
  const at::Tensor m = 0.5 * (p + q);
  const double jsd =
      (0.5 * (p * (p.log() - m.log())).sum(-1) + 0.5 * (q * (q.log() - m.log())).sum(-1))
          .mean()
          .item<double>();
  EXPECT_NEAR(DivergenceLoss(a, b, Divergence::kForwardKl).item<double>(), fkl, 1e-6);
  EXPECT_NEAR(DivergenceLoss(a, b, Divergence::kReverseKl).item<double>(), rkl, 1e-6);
  EXPECT_NEAR(DivergenceLoss(a, b, Divergence::kJsd).item<double>(), jsd, 1e-6);
  EXPECT_NEAR(DivergenceLoss(b, a, Divergence::kJsd).item<double>(), jsd, 1e-6);  // symmetric
  EXPECT_LT(jsd, std::log(2.0));
  EXPECT_NEAR(DivergenceLoss(a, a, Divergence::kForwardKl).item<double>(), 0, 1e-7);
  EXPECT_THROW(ParseDivergence("kl", "osd"), Error);
}

struct Stream {
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  std::vector<std::vector<int32_t>> prompts;
  Stream() {
    for (const Prompt& p : LoadDataset("stories", {})) {
      prompts.push_back(BuildPromptIds(target, {{"user", p.turns[0]}}));
    }
  }
};

GenerationConfig Greedy(const LoadedTarget& target, int64_t max_new) {
  GenerationConfig g;
  g.stop = StopConfigFor(target, max_new, {});
  return g;
}

TEST(Osd, SpsRecordsTheRejectedDraftPositions) {
  at::set_num_threads(1);
  Stream s;
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = ContextFor(s.target);
  auto decoder = registry.Build("sps+osd", context, {{"gamma", 4}, {"osd_interval", 1000}});
  auto& spec = dynamic_cast<SpeculativeDecoder&>(*decoder);
  auto& adapter = dynamic_cast<OsdAdapter&>(*spec.adapter());
  auto& drafter = dynamic_cast<SpsDrafter&>(spec.drafter());
  const std::vector<int32_t>& prompt = s.prompts[3];
  GenerationConfig g = Greedy(s.target, 64);
  KvCache cache = s.target.model->NewCache(1, static_cast<int64_t>(prompt.size()) + 65);
  DecodeResult r;
  // A warm-up generation (GenerationConfig::adapt false, as the runner's) does not reach the
  // adapter: no request counted, nothing recorded.
  g.adapt = false;
  decoder->Generate(prompt, g, cache, r);
  EXPECT_EQ(adapter.stats().requests, 0);
  EXPECT_TRUE(adapter.corrections().empty());
  g.adapt = true;
  decoder->Generate(prompt, g, cache, r);
  EXPECT_EQ(adapter.stats().requests, 1);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), r.generation.tokens.begin(), r.generation.tokens.end());
  // Independently: the served draft's greedy prediction at every position.
  KvCache dc = drafter.model().NewCache(1, static_cast<int64_t>(all.size()));
  ForwardOptions fo;
  fo.logits = LogitsMode::kAll;
  const at::Tensor logits =
      const_cast<LlamaModel&>(drafter.model()).Forward(testing_util::Ids(all), dc, fo).logits;
  const at::Tensor argmax = logits[0].argmax(-1);
  int64_t rejected_steps = 0;
  for (const StepStats& st : r.steps) rejected_steps += st.n_accepted < st.n_drafted ? 1 : 0;
  ASSERT_FALSE(adapter.corrections().empty());
  EXPECT_EQ(static_cast<int64_t>(adapter.corrections().size()), rejected_steps);
  for (int64_t p : adapter.corrections()) {
    ASSERT_LT(p, static_cast<int64_t>(all.size()));
    EXPECT_NE(argmax[p - 1].item<int64_t>(), all[p]) << "position " << p;
  }
  // osd_supervise round_end (the reference's rule): the last token of every step, the bonus
  // after a fully accepted draft included.
  auto round_end = registry.Build(
      "sps+osd", context, {{"gamma", 4}, {"osd_interval", 1000}, {"osd_supervise", "round_end"}});
  DecodeResult r2;
  round_end->Generate(prompt, g, cache, r2);
  ASSERT_EQ(r2.generation.tokens, r.generation.tokens);
  const auto& every =
      dynamic_cast<OsdAdapter&>(*dynamic_cast<SpeculativeDecoder&>(*round_end).adapter())
          .corrections();
  ASSERT_EQ(every.size(), r2.steps.size());
  ASSERT_LT(rejected_steps, static_cast<int64_t>(r2.steps.size()));  // some full accepts
  int64_t p = static_cast<int64_t>(prompt.size()) + 1;  // first root after the prefill token
  for (size_t i = 0; i < r2.steps.size(); ++i) {
    EXPECT_EQ(every[i], p + r2.steps[i].n_accepted) << "step " << i;
    p += r2.steps[i].n_emitted;
  }
}

// Serves one prompt `repeats` times; returns tau per request and checks every output against AR.
std::vector<double> RepeatedPromptTau(const std::string& method, const nlohmann::json& knobs,
                                      int repeats, OsdStats* stats) {
  Stream s;
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = ContextFor(s.target);
  auto decoder = registry.Build(method, context, knobs);
  const std::vector<int32_t>& prompt = s.prompts[5];
  const GenerationConfig g = Greedy(s.target, 96);
  KvCache cache = s.target.model->NewCache(1, static_cast<int64_t>(prompt.size()) + 97);
  const GenerationResult ar =
      GenerateAr(*s.target.model, s.target.tokenizer.get(), prompt, g, cache);
  std::vector<double> taus;
  double adapt_us = 0;
  for (int i = 0; i < repeats; ++i) {
    DecodeResult r;
    decoder->Generate(prompt, g, cache, r);
    EXPECT_EQ(r.generation.tokens, ar.tokens) << method << " request " << i;
    int64_t emitted = 0;
    for (const StepStats& st : r.steps) {
      emitted += st.n_emitted;
      adapt_us += st.t_adapt_us;
      EXPECT_LE(st.t_adapt_us, st.t_draft_us);
    }
    taus.push_back(static_cast<double>(emitted) / r.steps.size());
  }
  auto& spec = dynamic_cast<SpeculativeDecoder&>(*decoder);
  *stats = dynamic_cast<OsdAdapter&>(*spec.adapter()).stats();
  EXPECT_NEAR(adapt_us * 1e-6, stats->update_seconds, 0.01 + 0.05 * stats->update_seconds);
  return taus;
}

TEST(Osd, SpsUpdatesRaiseAcceptanceOnARepeatedPromptAndStayLossless) {
  at::set_num_threads(1);
  OsdStats stats;
  const auto taus = RepeatedPromptTau(
      "sps+osd", {{"gamma", 4}, {"osd_interval", 2}, {"osd_steps", 4}, {"osd_lr", 3e-3}}, 12,
      &stats);
  EXPECT_EQ(stats.requests, 12);
  EXPECT_EQ(stats.updates, 6);
  EXPECT_GT(stats.supervised_positions, 0);
  EXPECT_GT(taus.back(), taus.front() + 0.3) << "first " << taus.front() << " last " << taus.back();
}

TEST(Osd, Eagle3UpdatesRaiseAcceptanceOnARepeatedPromptAndStayLossless) {
  at::set_num_threads(1);
  OsdStats stats;
  const auto taus = RepeatedPromptTau("eagle3+osd",
                                      {{"depth", 3},
                                       {"top_k", 4},
                                       {"total_tokens", 12},
                                       {"osd_interval", 2},
                                       {"osd_steps", 4},
                                       {"osd_lr", 3e-3}},
                                      12, &stats);
  EXPECT_EQ(stats.updates, 6);
  EXPECT_GT(taus.back(), taus.front() + 0.2) << "first " << taus.front() << " last " << taus.back();
}

}  // namespace
}  // namespace specbed
