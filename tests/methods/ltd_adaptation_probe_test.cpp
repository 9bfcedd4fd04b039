// LTD's adaptation probe (methods/ltd/ltd_adaptation_probe.h):
// - Pearson correlation (exact cases, NaN for a constant side);
// - the summary on hand-made logs: a constant policy has one distinct V and D, sd 0 and no
//   correlation, and is reported as not adapting; a policy whose V follows the best score has a
//   strong correlation, and CONTINUE that follows the score correlates with it;
// - the probe on the shipped stories260K-twin policies: one size decision per verify step, equal
//   to the verified size the step reports, depth decisions within the policy's range, and what
//   the README reports for them (neither adapts: V = 3 always, STOP after round 1 always).
// Deterministic (T = 0, fixed prompts): false-failure rate 0.
#include <gtest/gtest.h>

#include <cmath>

#include "methods/ltd/ltd_adaptation_probe.h"

namespace specbed {
namespace {

LtdDecision Size(float top, int64_t context, int64_t rounds, int64_t v) {
  LtdDecision d;
  d.kind = 'V';
  d.top_score = top;
  d.context_len = context;
  d.rounds = rounds;
  d.value = v;
  return d;
}

LtdDecision Depth(float top, int64_t rounds, bool go) {
  LtdDecision d;
  d.kind = 'D';
  d.top_score = top;
  d.rounds = rounds;
  d.value = go ? 1 : 0;
  return d;
}

TEST(LtdAdaptation, PearsonCorrelation) {
  EXPECT_NEAR(PearsonCorrelation({1, 2, 3}, {2, 4, 6}), 1.0, 1e-12);
  EXPECT_NEAR(PearsonCorrelation({1, 2, 3}, {3, 2, 1}), -1.0, 1e-12);
  EXPECT_NEAR(PearsonCorrelation({1, 2, 3, 4}, {1, 3, 2, 4}), 0.8, 1e-12);
  EXPECT_TRUE(std::isnan(PearsonCorrelation({1, 1, 1}, {1, 2, 3})));
  EXPECT_TRUE(std::isnan(PearsonCorrelation({1}, {1})));
}

TEST(LtdAdaptation, SummaryTellsAConstantPolicyFromAnAdaptiveOne) {
  std::vector<LtdDecision> constant;
  for (int i = 0; i < 20; ++i) constant.push_back(Size(-0.1f * i, 10 + i, 1, 3));
  const LtdAdaptationSummary c = SummarizeLtdDecisions(constant);
  EXPECT_EQ(c.size.n, 20);
  EXPECT_EQ(c.size.distinct, 1);
  EXPECT_DOUBLE_EQ(c.size.sd, 0.0);
  EXPECT_EQ(c.size.min, 3);
  EXPECT_TRUE(std::isnan(c.size.corr_top_score));
  EXPECT_EQ(c.depth.distinct, 1);
  EXPECT_FALSE(c.adapts());
  std::vector<LtdDecision> always_stop = constant;
  for (int i = 0; i < 5; ++i) always_stop.push_back(Depth(-0.1f * i, 1, false));
  always_stop.push_back(Size(-3.f, 10, 0, 3));  // an answer's last step: its end capped D
  const LtdAdaptationSummary st = SummarizeLtdDecisions(always_stop);
  EXPECT_EQ(st.depth.distinct, 2);
  EXPECT_EQ(st.continue_rate, 0.0);
  EXPECT_FALSE(st.adapts()) << "D moved only because an answer ended";
  EXPECT_TRUE(c.ToJson()["size_per_step"]["corr_top_score"].is_null());

  std::vector<LtdDecision> adaptive;
  for (int i = 0; i < 20; ++i) {
    const float top = -0.2f * static_cast<float>(i);
    adaptive.push_back(Depth(top, 1, top > -2.f));
    adaptive.push_back(Size(top, 10 + i, top > -2.f ? 2 : 1, 2 + i / 2));  // V grows as top falls
  }
  const LtdAdaptationSummary a = SummarizeLtdDecisions(adaptive);
  EXPECT_TRUE(a.adapts());
  EXPECT_EQ(a.size.distinct, 10);
  EXPECT_EQ(a.size.min, 2);
  EXPECT_EQ(a.size.max, 11);
  EXPECT_LT(a.size.corr_top_score, -0.95);
  EXPECT_GT(a.size.corr_context, 0.95);
  EXPECT_EQ(a.depth.distinct, 2);
  EXPECT_EQ(a.depth_calls, 20);
  EXPECT_DOUBLE_EQ(a.continue_rate, 0.5);
  EXPECT_GT(a.corr_continue_top_score, 0.8);
}

TEST(LtdAdaptation, ProbeOfTheShippedTwinPolicies) {
  LtdProbeConfig c;
  c.limit = 3;
  c.max_new_tokens = 32;
  const LtdProbeResult p = ProbeLtdDecisions(c);
  ASSERT_GT(p.steps, 0);
  int64_t sizes = 0;
  for (const LtdDecision& d : p.log) {
    if (d.kind == 'V') {
      ASSERT_LT(sizes, static_cast<int64_t>(p.step_verified.size()));
      EXPECT_EQ(d.value, p.step_verified[sizes]) << "size decision " << sizes;
      EXPECT_GE(d.value, 1);
      EXPECT_LE(d.value, 16);  // the shipped action map: V = a + 1, a < 16
      ++sizes;
    } else {
      EXPECT_EQ(d.kind, 'D');
      EXPECT_GE(d.rounds, 1);
      EXPECT_LE(d.rounds, 12);
    }
    EXPECT_GE(d.prompt, 0);
    EXPECT_LT(d.prompt, 3);
  }
  EXPECT_EQ(sizes, p.steps) << "one size decision per verify step";
  const LtdAdaptationSummary s = SummarizeLtdDecisions(p.log);
  // What methods/ltd/README.md and results/ltd_twin_table.md report for the shipped pair: neither
  // policy adapts (V = 3 at every step; STOP after the first round at every depth decision).
  EXPECT_EQ(s.size.distinct, 1) << "the shipped size policy now varies V: update the README";
  EXPECT_EQ(s.size.min, 3);
  EXPECT_GT(s.depth_calls, 0);
  EXPECT_EQ(s.continue_rate, 0.0) << "the shipped depth policy now continues: update the README";
  EXPECT_FALSE(s.adapts());
}

}  // namespace
}  // namespace specbed
