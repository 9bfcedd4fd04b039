// Tests for metrics/metrics.h: every metric of the report against hand-computed values on the
// synthetic samples/steps of synthetic_db.h (decode tok/s excluding the first token, mean prefill,
// stop reasons, tau with the bonus token, T_D, other share, per-step phase costs, rollback rate
// and events, per-position acceptance r_i / alpha_i for chains and trees, per-prompt speedup and
// its geometric mean, ratio of totals, their bootstrap CIs (deterministic, contain the estimate,
// cluster by prompt), exact match vs. AR with divergence position and margin, workload matching
// and the choice of the AR baseline).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "base/error.h"

#include "metrics/metrics.h"
#include "tests/common/test_util.h"
#include "tests/reports/synthetic_db.h"

namespace specbed {
namespace {

using testing::ArSamplesT0;
using testing::ErrorOf;
using testing::FakeSamples;
using testing::FakeSteps;
using testing::PairWithAr;
using testing::Sample;
using testing::TestCase;
using testing::TreeSamples;
using testing::TreeSteps;

TEST(Metrics, DecodeTokensExcludeTheFirstToken) {
  EXPECT_EQ(DecodeTokens(Sample("a", 11, 1, 10, 10, "eos")), 10);
  EXPECT_EQ(DecodeTokens(Sample("a", 1, 1, 0, 0, "eos")), 0);
  EXPECT_EQ(DecodeTokens(Sample("a", 0, 1, 0, 0, "eos")), 0);
  EXPECT_DOUBLE_EQ(SampleDecodeTokensPerS(Sample("a", 11, 1, 100, 10, "eos")), 100.0);
  EXPECT_TRUE(std::isnan(SampleDecodeTokensPerS(Sample("a", 1, 1, 0, 0, "eos"))));
}

TEST(Metrics, GeometricMeanSkipsNonPositiveValues) {
  EXPECT_NEAR(GeometricMean({2, 4, 1}), 2.0, 1e-12);
  EXPECT_NEAR(GeometricMean({9, 0, -1, kNoValue, 1}), 3.0, 1e-12);
  EXPECT_TRUE(std::isnan(GeometricMean({})));
  EXPECT_TRUE(std::isnan(GeometricMean({0, -2})));
}

TEST(Metrics, ArCaseHasThroughputButNoSpeculativeMetrics) {
  const CaseMetrics m = ComputeCaseMetrics(ArSamplesT0(), {});
  EXPECT_EQ(m.n_samples, 3);
  EXPECT_EQ(m.n_prompts, 3);
  EXPECT_EQ(m.output_tokens, 37);
  EXPECT_EQ(m.decode_tokens, 34);
  EXPECT_DOUBLE_EQ(m.decode_ms, 340);
  EXPECT_NEAR(m.decode_tokens_per_s, 100.0, 1e-9);
  EXPECT_NEAR(m.prefill_ms_mean, 3.0, 1e-12);
  EXPECT_EQ(m.stop_reasons.at("eos"), 2);
  EXPECT_EQ(m.stop_reasons.at("max_new_tokens"), 1);
  EXPECT_EQ(FormatStopReasons(m.stop_reasons), "eos 2, max_new_tokens 1");
  EXPECT_EQ(m.n_steps, 0);
  EXPECT_TRUE(std::isnan(m.tau));
  EXPECT_TRUE(std::isnan(m.draft_fraction));
  EXPECT_TRUE(std::isnan(m.rollback_rate));
  EXPECT_EQ(FormatStopReasons({}), "—");
}

TEST(Metrics, SpeculativeCaseTauDraftShareRollback) {
  const CaseMetrics m = ComputeCaseMetrics(FakeSamples(), FakeSteps());
  EXPECT_NEAR(m.decode_tokens_per_s, 34.0 / 0.140, 1e-9);
  EXPECT_EQ(m.n_steps, 11);
  EXPECT_EQ(m.emitted, 34);
  EXPECT_EQ(m.drafted, 44);
  EXPECT_EQ(m.accepted, 23);
  EXPECT_NEAR(m.tau, 34.0 / 11.0, 1e-12);              // includes the bonus token
  EXPECT_NEAR(m.draft_ms, 22.0, 1e-9);                 // 11 steps x 2000 us
  EXPECT_NEAR(m.draft_fraction, 22.0 / 140.0, 1e-12);  // of decode time, not of wall time
  EXPECT_NEAR(m.rollback_rate, 21.0 / 44.0, 1e-12);
  EXPECT_NEAR(m.verify_ms, 16.5, 1e-9);
  EXPECT_NEAR(m.other_ms, 1.1, 1e-9);
}

// Schema v6: the spec's rollback rate (rolled-back / generated draft tokens, parallel work
// included), target forwards per answer and per-side busy time; rows that did not record them
// (-1, from older files) are left out, and without any the figures are NaN.
TEST(Metrics, SpecRollbackRateTargetForwardsAndBusyTimes) {
  std::vector<StepRecord> steps = FakeSteps();
  const CaseMetrics old = ComputeCaseMetrics(FakeSamples(), steps);  // v5-like rows: -1
  EXPECT_TRUE(std::isnan(old.spec_rollback_rate));
  EXPECT_TRUE(std::isnan(old.draft_busy_us_per_step));
  EXPECT_TRUE(std::isnan(old.target_forwards_per_sample));
  for (size_t i = 0; i < steps.size(); ++i) {
    steps[i].n_draft_generated = 4;
    steps[i].n_rolled_back = i % 2 == 0 ? 4 : 0;  // 6 of 11 steps roll back everything
    steps[i].n_target_forwards = 1;
    steps[i].t_draft_busy_us = 3000;
    steps[i].t_verify_busy_us = 1500;
  }
  steps[3].n_rolled_back = -1;  // not recorded: the row is left out of the rate
  const CaseMetrics m = ComputeCaseMetrics(FakeSamples(), steps);
  EXPECT_EQ(m.draft_generated, 40);
  EXPECT_EQ(m.rolled_back, 24);
  EXPECT_NEAR(m.spec_rollback_rate, 24.0 / 40.0, 1e-12);
  EXPECT_EQ(m.target_forwards, 11);
  EXPECT_NEAR(m.target_forwards_per_sample, 11.0 / m.n_samples, 1e-12);
  EXPECT_NEAR(m.draft_busy_us_per_step, 3000, 1e-9);
  EXPECT_NEAR(m.verify_busy_us_per_step, 1500, 1e-9);
}

// The drafter prefill share (v10): Σ t_draft_prefill_us over decode time, NaN while any step did
// not record it (older rows), and part of T_D%.
TEST(Metrics, DrafterPrefillShareOfDecodeTime) {
  std::vector<StepRecord> steps = FakeSteps();
  EXPECT_TRUE(std::isnan(ComputeCaseMetrics(FakeSamples(), steps).draft_prefill_fraction));
  for (StepRecord& st : steps) st.t_draft_prefill_us = 0;
  steps[0].t_draft_prefill_us = 1500;
  steps[0].t_draft_us = std::max(steps[0].t_draft_us, 1500.0);
  const CaseMetrics m = ComputeCaseMetrics(FakeSamples(), steps);
  EXPECT_NEAR(m.draft_prefill_ms, 1.5, 1e-12);
  EXPECT_NEAR(m.draft_prefill_fraction, 1.5 / m.decode_ms, 1e-12);
  EXPECT_LE(m.draft_prefill_fraction, m.draft_fraction);
  steps[4].t_draft_prefill_us = -1;
  EXPECT_TRUE(std::isnan(ComputeCaseMetrics(FakeSamples(), steps).draft_prefill_fraction));
}

TEST(Metrics, NothingDraftedMeansNoRollbackRate) {
  std::vector<StepRecord> steps = FakeSteps();
  for (auto& s : steps) s.n_drafted = s.n_accepted = 0;
  const CaseMetrics m = ComputeCaseMetrics(FakeSamples(), steps);
  EXPECT_TRUE(std::isnan(m.rollback_rate));
  EXPECT_NEAR(m.tau, 34.0 / 11.0, 1e-12);
}

TEST(Metrics, SpeedupIsPerPromptGeometricMeanAndRatioOfTotals) {
  const Speedup s = ComputeSpeedup(ArSamplesT0(), FakeSamples());
  EXPECT_EQ(s.n_matched, 3);
  ASSERT_EQ(s.per_prompt.size(), 3u);
  EXPECT_DOUBLE_EQ(s.per_prompt[0], 2.0);
  EXPECT_DOUBLE_EQ(s.per_prompt[1], 4.0);
  EXPECT_DOUBLE_EQ(s.per_prompt[2], 1.0);
  EXPECT_NEAR(s.geomean, 2.0, 1e-12);
  EXPECT_NEAR(s.total_ratio, 340.0 / 140.0, 1e-12);
}

// Spec-Bench's figure (mean over prompts of tok/s with a prompt's turns summed, method mean over AR
// mean) beside the main speedup, in both scopes. p0 has two turns.
TEST(Metrics, SpecBenchFigureAndEndToEndScope) {
  std::vector<SampleRecord> ar = {Sample("p0", 11, 2, 100, 10, "eos"),
                                  Sample("p0", 11, 2, 50, 10, "eos"),
                                  Sample("p1", 21, 4, 200, 20, "eos")};
  std::vector<SampleRecord> method = {Sample("p0", 21, 1, 100, 5, "eos"),
                                      Sample("p0", 6, 3, 25, 2, "eos"),
                                      Sample("p1", 9, 5, 20, 3, "eos")};
  ar[1].turn = method[1].turn = 1;
  // Decode: per answer 2, 1, 4; Spec-Bench: p0 method 25 tokens / 125 ms, AR 20 / 150; p1
  // method 8 / 20, AR 20 / 200.
  const Speedup d = ComputeSpeedup(ar, method);
  EXPECT_EQ(d.scope, SpeedupScope::kDecode);
  EXPECT_NEAR(d.geomean, 2.0, 1e-12);
  EXPECT_NEAR(d.spec_bench, (25.0 / 125 + 8.0 / 20) / (20.0 / 150 + 20.0 / 200), 1e-12);
  EXPECT_LE(d.spec_bench_ci.lo, d.spec_bench);
  EXPECT_GE(d.spec_bench_ci.hi, d.spec_bench);
  // End to end: every output token over prefill + decode.
  const Speedup e = ComputeSpeedup(ar, method, {}, SpeedupScope::kEndToEnd);
  EXPECT_EQ(e.scope, SpeedupScope::kEndToEnd);
  const double r0 = (21.0 / 101) / (11.0 / 102), r1 = (6.0 / 28) / (11.0 / 52),
               r2 = (9.0 / 25) / (21.0 / 204);
  EXPECT_NEAR(e.geomean, std::cbrt(r0 * r1 * r2), 1e-12);
  EXPECT_NEAR(e.total_ratio, (36.0 / 154) / (43.0 / 358), 1e-12);
  EXPECT_NEAR(e.spec_bench, (27.0 / 129 + 9.0 / 25) / (22.0 / 154 + 21.0 / 204), 1e-12);
  EXPECT_EQ(e.pairs[0].method_tokens, 21);
  EXPECT_DOUBLE_EQ(e.pairs[0].ar_ms, 102.0);
  // Paired samples: the AR side is the paired run; without its prefill (written before schema
  // v6) an answer is left out of the end-to-end figure only.
  std::vector<SampleRecord> paired = method;
  for (SampleRecord& s : paired) {
    PairWithAr(s, 100, 11, /*first=*/0);
    s.paired_ar_prefill_ms = 10;
  }
  paired[2].paired_ar_prefill_ms = kNoValue;
  const Speedup pd = ComputeSpeedup({}, paired);
  EXPECT_EQ(pd.n_paired, 3);
  const Speedup pe = ComputeSpeedup({}, paired, {}, SpeedupScope::kEndToEnd);
  EXPECT_EQ(pe.n_paired, 2);
  EXPECT_NEAR(pe.per_prompt[0], (21.0 / 101) / (11.0 / 110), 1e-12);
  // Scope names.
  EXPECT_EQ(ParseSpeedupScope("e2e", "--scope"), SpeedupScope::kEndToEnd);
  EXPECT_EQ(ParseSpeedupScope("end_to_end", "--scope"), SpeedupScope::kEndToEnd);
  EXPECT_STREQ(SpeedupScopeName(SpeedupScope::kDecode), "decode");
  EXPECT_CONTAINS(ErrorOf([] { ParseSpeedupScope("wall", "--scope"); }),
                  "--scope: unknown speedup scope 'wall'");
}

TEST(Metrics, SpeedupMatchesPromptsByIdAndTurn) {
  std::vector<SampleRecord> method = FakeSamples();
  method.push_back(Sample("only_in_method", 9, 1, 10, 2, "eos"));  // no AR answer: ignored
  method[1].turn = 1;                                              // p1 turn 1: not in AR
  std::vector<SampleRecord> ar = ArSamplesT0();
  std::swap(ar[0], ar[2]);  // order does not matter
  const Speedup s = ComputeSpeedup(ar, method);
  EXPECT_EQ(s.n_matched, 2);
  EXPECT_NEAR(s.geomean, std::sqrt(2.0 * 1.0), 1e-12);
  EXPECT_NEAR(s.total_ratio, 140.0 / 90.0, 1e-12);
  const Speedup none = ComputeSpeedup(ar, {Sample("zz", 3, 1, 5, 2, "eos")});
  EXPECT_EQ(none.n_matched, 0);
  EXPECT_TRUE(std::isnan(none.geomean));
  EXPECT_TRUE(std::isnan(none.total_ratio));
}

TEST(Metrics, SpeedupIsTheTokensPerSecondRatioWhenLengthsDiffer) {
  // T > 0: answers of different lengths. p0: AR 10 decode tokens in 100 ms (100 tok/s), method
  // 20 in 100 ms (200 tok/s) -> 2 (the time ratio would say 1). p1: AR 20 in 200 ms (100 tok/s),
  // method 5 in 25 ms (200 tok/s) -> 2 (the time ratio would say 8). p2: AR 4 in 40 ms
  // (100 tok/s), method 8 in 20 ms (400 tok/s) -> 4. Geometric mean (2 * 2 * 4)^(1/3) = 2.5198;
  // totals: method 33 tokens / 145 ms = 227.586 tok/s, AR 34 / 340 ms = 100 tok/s -> 2.27586.
  const std::vector<SampleRecord> ar = ArSamplesT0();
  const std::vector<SampleRecord> method = {Sample("p0", 21, 2, 100, 5, "eos"),
                                            Sample("p1", 6, 4, 25, 2, "eos"),
                                            Sample("p2", 9, 3, 20, 3, "eos")};
  const Speedup s = ComputeSpeedup(ar, method);
  EXPECT_EQ(s.n_matched, 3);
  EXPECT_EQ(s.n_paired, 0);
  ASSERT_EQ(s.per_prompt.size(), 3u);
  EXPECT_NEAR(s.per_prompt[0], 2.0, 1e-12);
  EXPECT_NEAR(s.per_prompt[1], 2.0, 1e-12);
  EXPECT_NEAR(s.per_prompt[2], 4.0, 1e-12);
  EXPECT_NEAR(s.geomean, std::cbrt(16.0), 1e-12);
  EXPECT_NEAR(s.total_ratio, (33.0 / 145.0) / (34.0 / 340.0), 1e-12);
  EXPECT_EQ(s.pairs[1].ar_tokens, 20);
  EXPECT_EQ(s.pairs[1].method_tokens, 5);
  EXPECT_FALSE(s.pairs[1].paired);
  // An answer without a decode token on either side has no rate: left out.
  const Speedup one = ComputeSpeedup(ar, {Sample("p0", 1, 2, 3, 0, "eos"), method[1]});
  EXPECT_EQ(one.n_matched, 1);
  EXPECT_NEAR(one.geomean, 2.0, 1e-12);
}

TEST(Metrics, SpeedupUsesThePairedArRunsWhenSamplesCarryThem) {
  // p0 paired: AR 15 decode tokens in 50 ms (300 tok/s), method 20 in 100 ms (200 tok/s) ->
  // 2/3, whatever the AR case says (100 tok/s there would give 2). p1 paired: AR output 21
  // tokens (20 decode) in 100 ms, method 20 in 50 ms -> 2. p2 not paired: the AR case's answer,
  // 4 tokens in 40 ms vs the method's 4 in 10 ms -> 4.
  std::vector<SampleRecord> method = {Sample("p0", 21, 2, 100, 5, "eos"),
                                      Sample("p1", 21, 4, 50, 2, "eos"),
                                      Sample("p2", 5, 3, 10, 3, "eos")};
  PairWithAr(method[0], 50, 16, /*first=*/1);
  PairWithAr(method[1], 100, 21, /*first=*/0);
  const Speedup s = ComputeSpeedup(ArSamplesT0(), method);
  EXPECT_EQ(s.n_matched, 3);
  EXPECT_EQ(s.n_paired, 2);
  ASSERT_EQ(s.per_prompt.size(), 3u);
  EXPECT_NEAR(s.per_prompt[0], 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(s.per_prompt[1], 2.0, 1e-12);
  EXPECT_NEAR(s.per_prompt[2], 4.0, 1e-12);
  EXPECT_NEAR(s.geomean, std::cbrt(16.0 / 3.0), 1e-12);
  // Totals: method 44 tokens / 160 ms; AR 15 + 20 + 4 = 39 tokens / 190 ms.
  EXPECT_NEAR(s.total_ratio, (44.0 / 160.0) / (39.0 / 190.0), 1e-12);
  EXPECT_TRUE(s.pairs[0].paired);
  EXPECT_EQ(s.pairs[0].ar_tokens, 15);
  EXPECT_FALSE(s.pairs[2].paired);
  // Paired samples need no AR case at all.
  const Speedup alone = ComputeSpeedup({}, method);
  EXPECT_EQ(alone.n_matched, 2);
  EXPECT_EQ(alone.n_paired, 2);
  EXPECT_NEAR(alone.geomean, std::sqrt(4.0 / 3.0), 1e-12);
}

TEST(Metrics, DraftedNodesPerStep) {
  // FakeSteps: 44 drafted nodes over 11 steps.
  EXPECT_NEAR(ComputeCaseMetrics(FakeSamples(), FakeSteps()).drafted_per_step, 4.0, 1e-12);
  EXPECT_TRUE(std::isnan(ComputeCaseMetrics(ArSamplesT0(), {}).drafted_per_step));
}

TEST(Metrics, SameWorkloadComparesEverythingButMethodAndKnobs) {
  const CaseRecord ar = TestCase("a", "ar", 0);
  EXPECT_TRUE(SameWorkload(ar, TestCase("b", "fake", 0)));
  EXPECT_FALSE(SameWorkload(ar, TestCase("b", "fake", 1)));
  EXPECT_FALSE(SameWorkload(ar, TestCase("b", "fake", 0, 64)));
  CaseRecord other = TestCase("b", "fake", 0);
  other.threads = 2;
  EXPECT_FALSE(SameWorkload(ar, other));
  other = TestCase("b", "fake", 0);
  other.seed = 1;
  EXPECT_FALSE(SameWorkload(ar, other));
  other = TestCase("b", "fake", 0);
  other.dataset = "other";
  EXPECT_FALSE(SameWorkload(ar, other));
  // config_json fields that are not columns: compared when both carry them.
  CaseRecord a2 = ar;
  a2.config_json = R"({"chat_template":"llama2","stop_strings":[]})";
  other = TestCase("b", "fake", 0);
  other.config_json = R"({"chat_template":"chatml","stop_strings":[]})";
  EXPECT_FALSE(SameWorkload(a2, other));
  other.config_json = R"({"chat_template":"llama2","stop_strings":[]})";
  EXPECT_TRUE(SameWorkload(a2, other));
}

TEST(Metrics, PerPositionAcceptanceOfAChainUsesNDraftedAsDepth) {
  // FakeSteps: 11 steps drafting 4 (depth not recorded -> 4), accepted 3,3,1,4,4,4,4,0,0,0,0.
  const PositionAcceptance p = ComputePositionAcceptance(FakeSteps());
  ASSERT_EQ(p.max_depth(), 4);
  EXPECT_EQ(p.n_reached, (std::vector<int64_t>{11, 11, 11, 11}));
  EXPECT_EQ(p.n_accepted, (std::vector<int64_t>{7, 6, 6, 4}));
  EXPECT_EQ(p.n_conditional, (std::vector<int64_t>{11, 7, 6, 6}));
  EXPECT_NEAR(p.r[0], 7.0 / 11, 1e-12);
  EXPECT_NEAR(p.r[1], 6.0 / 11, 1e-12);
  EXPECT_NEAR(p.r[2], 6.0 / 11, 1e-12);
  EXPECT_NEAR(p.r[3], 4.0 / 11, 1e-12);
  EXPECT_NEAR(p.alpha[0], 7.0 / 11, 1e-12);  // alpha_1 = r_1
  EXPECT_NEAR(p.alpha[1], 6.0 / 7, 1e-12);
  EXPECT_NEAR(p.alpha[2], 1.0, 1e-12);
  EXPECT_NEAR(p.alpha[3], 4.0 / 6, 1e-12);
  // Product of the conditional rates = the unconditional rate when every step drafts to depth 4.
  EXPECT_NEAR(p.alpha[0] * p.alpha[1] * p.alpha[2] * p.alpha[3], p.r[3], 1e-12);
}

TEST(Metrics, PerPositionAcceptanceOfATreeUsesTheDraftDepth) {
  const PositionAcceptance p = ComputePositionAcceptance(TreeSteps());
  ASSERT_EQ(p.max_depth(), 4);  // not 8: n_drafted counts tree nodes
  EXPECT_EQ(p.n_reached, (std::vector<int64_t>{5, 5, 4, 1}));
  EXPECT_EQ(p.n_accepted, (std::vector<int64_t>{4, 3, 1, 0}));
  EXPECT_EQ(p.n_conditional, (std::vector<int64_t>{5, 4, 2, 0}));
  EXPECT_NEAR(p.r[0], 0.8, 1e-12);
  EXPECT_NEAR(p.r[1], 0.6, 1e-12);
  EXPECT_NEAR(p.r[2], 0.25, 1e-12);
  EXPECT_NEAR(p.r[3], 0.0, 1e-12);
  EXPECT_NEAR(p.alpha[0], 0.8, 1e-12);
  EXPECT_NEAR(p.alpha[1], 0.75, 1e-12);
  EXPECT_NEAR(p.alpha[2], 0.5, 1e-12);
  EXPECT_TRUE(std::isnan(p.alpha[3]));  // no step accepted 3 and drafted 4 deep
  EXPECT_EQ(ComputePositionAcceptance({}).max_depth(), 0);
}

TEST(Metrics, TreeCaseTimeSharesPhaseCostsAndRollback) {
  const CaseMetrics m = ComputeCaseMetrics(TreeSamples(), TreeSteps());
  EXPECT_NEAR(m.decode_ms, 190.0, 1e-12);
  EXPECT_NEAR(m.decode_tokens_per_s, 34.0 / 0.190, 1e-9);
  EXPECT_NEAR(m.tau, 13.0 / 5.0, 1e-12);
  EXPECT_NEAR(m.draft_fraction, 5.0 / 190.0, 1e-12);
  EXPECT_NEAR(m.verify_fraction, 10.0 / 190.0, 1e-12);
  EXPECT_NEAR(m.other_fraction, 2.5 / 190.0, 1e-12);
  EXPECT_NEAR(m.draft_us_per_step, 1000.0, 1e-9);
  EXPECT_NEAR(m.verify_us_per_step, 2000.0, 1e-9);
  EXPECT_NEAR(m.other_us_per_step, 500.0, 1e-9);
  EXPECT_NEAR(m.rollback_rate, 30.0 / 38.0, 1e-12);
  EXPECT_EQ(m.rollback_events, 3);
  EXPECT_NEAR(m.rollback_events_per_step, 0.6, 1e-12);
  EXPECT_EQ(m.positions.max_depth(), 4);
  EXPECT_NEAR(m.positions.alpha[1], 0.75, 1e-12);
  // The chain case: other = 11 x 0.1 ms of 140 ms.
  EXPECT_NEAR(ComputeCaseMetrics(FakeSamples(), FakeSteps()).other_fraction, 1.1 / 140.0, 1e-12);
  // AR: no steps, no shares.
  const CaseMetrics ar = ComputeCaseMetrics(ArSamplesT0(), {});
  EXPECT_TRUE(std::isnan(ar.other_fraction));
  EXPECT_TRUE(std::isnan(ar.other_us_per_step));
  EXPECT_TRUE(std::isnan(ar.rollback_events_per_step));
  EXPECT_EQ(ar.positions.max_depth(), 0);
}

TEST(Metrics, SortedQuantileInterpolatesLinearly) {
  EXPECT_DOUBLE_EQ(SortedQuantile({1, 2, 3, 4}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(SortedQuantile({1, 2, 3, 4}, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(SortedQuantile({1, 2, 3, 4}, 1.0), 4.0);
  EXPECT_NEAR(SortedQuantile({1, 2, 3, 4}, 0.025), 1.075, 1e-12);  // h = 3 x 0.025
  EXPECT_DOUBLE_EQ(SortedQuantile({7}, 0.975), 7.0);
  EXPECT_TRUE(std::isnan(SortedQuantile({}, 0.5)));
}

// GeomeanClusterInterval (the report's tie rule) is the speedup's own bootstrap: given a speedup's
// per-prompt clusters it returns its geomean interval bit for bit (same stream, same draws).
TEST(Metrics, GeomeanClusterIntervalEqualsTheSpeedupsOwnInterval) {
  BootstrapOptions seeded;
  seeded.seed = 777;
  std::vector<SampleRecord> ar, method;  // 24 prompts, ratios spread over 1.2 .. 1.98
  for (int i = 0; i < 24; ++i) {
    const std::string id = "q" + std::to_string(i);
    ar.push_back(
        testing::Sample(id, 20, 1, 100.0 * (1.2 + 0.8 * ((i * 37) % 40) / 40.0), 19, "eos"));
    method.push_back(testing::Sample(id, 20, 1, 100.0, 5, "eos"));
  }
  const Speedup s = ComputeSpeedup(ar, method, seeded);
  std::map<std::string, LogCluster> by_prompt;
  std::vector<std::string> order;
  for (const Speedup::Pair& p : s.pairs) {
    if (!by_prompt.count(p.prompt_id)) order.push_back(p.prompt_id);
    by_prompt[p.prompt_id].log_sum += std::log(p.ratio());
    ++by_prompt[p.prompt_id].n;
  }
  std::vector<LogCluster> clusters;
  for (const std::string& id : order) clusters.push_back(by_prompt[id]);
  const Interval ci = GeomeanClusterInterval(clusters, seeded);
  EXPECT_EQ(ci.lo, s.geomean_ci.lo);
  EXPECT_EQ(ci.hi, s.geomean_ci.hi);
  EXPECT_TRUE(std::isnan(GeomeanClusterInterval({}, seeded).lo));
}

// The bootstrap uses a fixed seed, so every assertion below is deterministic (no false failures).
TEST(Metrics, SpeedupBootstrapIntervalsAreDeterministicAndContainTheEstimate) {
  const Speedup a = ComputeSpeedup(ArSamplesT0(), TreeSamples());
  const Speedup b = ComputeSpeedup(ArSamplesT0(), TreeSamples());
  EXPECT_EQ(a.n_prompts, 3);
  EXPECT_EQ(a.bootstrap.n_resamples, 2000);
  EXPECT_NEAR(a.geomean, std::pow(2.0, 2.0 / 3.0), 1e-12);
  EXPECT_NEAR(a.total_ratio, 340.0 / 190.0, 1e-12);
  // Identical on every call (bit for bit).
  EXPECT_EQ(a.geomean_ci.lo, b.geomean_ci.lo);
  EXPECT_EQ(a.geomean_ci.hi, b.geomean_ci.hi);
  EXPECT_EQ(a.total_ratio_ci.lo, b.total_ratio_ci.lo);
  EXPECT_EQ(a.total_ratio_ci.hi, b.total_ratio_ci.hi);
  // Per-prompt ratios 2, 2, 1: a resample of three prompts ranges from all-p2 (1.0, probability
  // 1/27 = 3.7% > 2.5%) to only p0/p1 (2.0, probability 8/27), so the 95% interval is [1, 2]
  // for both statistics.
  EXPECT_DOUBLE_EQ(a.geomean_ci.lo, 1.0);
  EXPECT_DOUBLE_EQ(a.geomean_ci.hi, 2.0);
  EXPECT_DOUBLE_EQ(a.total_ratio_ci.lo, 1.0);
  EXPECT_DOUBLE_EQ(a.total_ratio_ci.hi, 2.0);
  // Another seed may move the bounds but the interval is still a valid percentile interval.
  BootstrapOptions other;
  other.seed = 12345;
  const Speedup c = ComputeSpeedup(ArSamplesT0(), TreeSamples(), other);
  EXPECT_LE(c.geomean_ci.lo, c.geomean);
  EXPECT_GE(c.geomean_ci.hi, c.geomean);

  // A larger spread of 40 prompts: a proper interval around the estimate, narrower with 4x the
  // prompts (~1/sqrt(4)).
  auto make = [](int n_prompts, std::vector<SampleRecord>& ar, std::vector<SampleRecord>& m) {
    for (int i = 0; i < n_prompts; ++i) {
      const double ratio = 1.2 + 0.8 * ((i * 37) % 40) / 40.0;  // 1.2 .. 1.98
      const std::string id = "q" + std::to_string(i);
      ar.push_back(testing::Sample(id, 20, 1, 100.0 * ratio, 19, "eos"));
      m.push_back(testing::Sample(id, 20, 1, 100.0, 5, "eos"));
    }
  };
  std::vector<SampleRecord> ar40, m40, ar160, m160;
  make(40, ar40, m40);
  make(160, ar160, m160);
  const Speedup s40 = ComputeSpeedup(ar40, m40);
  const Speedup s160 = ComputeSpeedup(ar160, m160);
  for (const Speedup* s : {&s40, &s160}) {
    EXPECT_LT(s->geomean_ci.lo, s->geomean);
    EXPECT_GT(s->geomean_ci.hi, s->geomean);
    EXPECT_LT(s->total_ratio_ci.lo, s->total_ratio);
    EXPECT_GT(s->total_ratio_ci.hi, s->total_ratio);
    EXPECT_GT(s->geomean_ci.lo, 1.2);
    EXPECT_LT(s->geomean_ci.hi, 1.98);
  }
  const double ratio =
      (s160.geomean_ci.hi - s160.geomean_ci.lo) / (s40.geomean_ci.hi - s40.geomean_ci.lo);
  EXPECT_GT(ratio, 0.35);
  EXPECT_LT(ratio, 0.65);

  // Turned off: no intervals; one prompt: a point interval.
  BootstrapOptions off;
  off.n_resamples = 0;
  const Speedup d = ComputeSpeedup(ArSamplesT0(), TreeSamples(), off);
  EXPECT_NEAR(d.geomean, a.geomean, 1e-15);
  EXPECT_TRUE(std::isnan(d.geomean_ci.lo));
  EXPECT_TRUE(std::isnan(d.total_ratio_ci.hi));
  const Speedup one = ComputeSpeedup({ArSamplesT0()[0]}, {TreeSamples()[0]});
  EXPECT_DOUBLE_EQ(one.geomean_ci.lo, 2.0);
  EXPECT_DOUBLE_EQ(one.geomean_ci.hi, 2.0);
  BootstrapOptions bad;
  bad.level = 1.5;
  EXPECT_CONTAINS(ErrorOf([&] { ComputeSpeedup(ArSamplesT0(), TreeSamples(), bad); }),
                  "bootstrap level 1.5");
}

TEST(Metrics, SpeedupBootstrapResamplesPromptsWithAllTheirTurns) {
  // Two prompts with two turns each; per-turn speedups 4 and 1 within every prompt, so every
  // prompt has the same per-prompt geometric mean (2) and the same totals: a bootstrap over
  // prompts has zero spread (one over answers would not).
  std::vector<SampleRecord> ar, m;
  for (const std::string id : {"a", "b"}) {
    for (int turn = 0; turn < 2; ++turn) {
      SampleRecord x = testing::Sample(id, 10, 1, turn == 0 ? 400 : 100, 9, "eos");
      x.turn = turn;
      ar.push_back(x);
      x.decode_ms = 100;
      m.push_back(x);
    }
  }
  const Speedup s = ComputeSpeedup(ar, m);
  EXPECT_EQ(s.n_matched, 4);
  EXPECT_EQ(s.n_prompts, 2);
  EXPECT_NEAR(s.geomean, 2.0, 1e-12);
  EXPECT_NEAR(s.total_ratio, 2.5, 1e-12);
  EXPECT_NEAR(s.geomean_ci.lo, 2.0, 1e-12);
  EXPECT_NEAR(s.geomean_ci.hi, 2.0, 1e-12);
  EXPECT_NEAR(s.total_ratio_ci.lo, 2.5, 1e-12);
  EXPECT_NEAR(s.total_ratio_ci.hi, 2.5, 1e-12);
  ASSERT_EQ(s.pairs.size(), 4u);
  EXPECT_EQ(s.pairs[1].prompt_id, "a");
  EXPECT_EQ(s.pairs[1].turn, 1);
  EXPECT_DOUBLE_EQ(s.pairs[1].ar_ms, 100);
}

TEST(Metrics, ExactMatchFindsFirstDivergenceAndArMargin) {
  const ExactMatch e = ComputeExactMatch(testing::ArSamplesWithMargins(), TreeSamples());
  EXPECT_EQ(e.n_matched, 3);
  EXPECT_EQ(e.n_exact, 1);
  EXPECT_NEAR(e.rate, 1.0 / 3.0, 1e-12);
  ASSERT_EQ(e.divergences.size(), 2u);
  EXPECT_EQ(e.divergences[0].prompt_id, "p1");
  EXPECT_EQ(e.divergences[0].position, 3);
  EXPECT_EQ(e.divergences[0].ar_token, 4);
  EXPECT_EQ(e.divergences[0].method_token, 9);
  EXPECT_DOUBLE_EQ(e.divergences[0].margin, 0.125);
  EXPECT_EQ(e.divergences[1].prompt_id, "p2");
  EXPECT_EQ(e.divergences[1].position, 2);  // the method stopped after 2 tokens
  EXPECT_EQ(e.divergences[1].ar_token, 3);
  EXPECT_EQ(e.divergences[1].method_token, -1);
  EXPECT_DOUBLE_EQ(e.divergences[1].margin, 0.5);
  EXPECT_EQ(e.min_position, 2);
  EXPECT_DOUBLE_EQ(e.median_position, 2.5);
  EXPECT_DOUBLE_EQ(e.min_margin, 0.125);

  // Identical outputs; AR without margins; AR shorter (no margin past its end); unmatched and
  // id-less answers left out.
  std::vector<SampleRecord> ar = testing::ArSamplesWithMargins();
  ar[1].token_margins_json = "";
  ar[2].output_ids_json = "[1,2]";
  std::vector<SampleRecord> m = TreeSamples();
  m[2].output_ids_json = "[1,2,3]";
  m.push_back(testing::Sample("only_in_method", 3, 1, 5, 2, "eos"));
  m[0].output_ids_json = "";
  const ExactMatch f = ComputeExactMatch(ar, m);
  EXPECT_EQ(f.n_matched, 2);
  EXPECT_EQ(f.n_exact, 0);
  ASSERT_EQ(f.divergences.size(), 2u);
  EXPECT_EQ(f.divergences[0].position, 3);
  EXPECT_TRUE(std::isnan(f.divergences[0].margin));  // AR stored no margins
  EXPECT_EQ(f.divergences[1].position, 2);
  EXPECT_EQ(f.divergences[1].ar_token, -1);
  EXPECT_EQ(f.divergences[1].method_token, 3);
  EXPECT_TRUE(std::isnan(f.divergences[1].margin));  // AR ended there
  EXPECT_TRUE(std::isnan(f.min_margin));

  const ExactMatch same = ComputeExactMatch(ArSamplesT0(), FakeSamples());
  EXPECT_EQ(same.n_exact, 3);
  EXPECT_DOUBLE_EQ(same.rate, 1.0);
  EXPECT_EQ(same.min_position, -1);
  EXPECT_TRUE(std::isnan(same.median_position));
  EXPECT_TRUE(std::isnan(ComputeExactMatch(ArSamplesT0(), {}).rate));

  m = TreeSamples();
  m[1].output_ids_json = "[1,2,oops]";
  const std::string err = ErrorOf([&] { ComputeExactMatch(testing::ArSamplesWithMargins(), m); });
  EXPECT_CONTAINS(err, "method sample (prompt 'p1' turn 0) output_ids_json");
  EXPECT_CONTAINS(err, "expected a JSON array");
  EXPECT_EQ(ParseMarginsJson("[1.5,null]", "x").size(), 2u);
  EXPECT_TRUE(std::isnan(ParseMarginsJson("[1.5,null]", "x")[1]));
  EXPECT_CONTAINS(ErrorOf([] { ParseTokenIdsJson("[1,2.5]", "ids of p"); }),
                  "ids of p: element 1 is 2.5");
}

// The baseline is known by its stored traits, not its name: a non-speculative method under
// another name is the baseline, a speculative one named "ar" is not; without traits (schema v1)
// the name decides.
TEST(Metrics, TheArBaselineIsKnownByItsStoredTraits) {
  CaseRecord c = TestCase("k", "ar", 0);
  c.method_traits_json = "";
  EXPECT_TRUE(IsArBaseline(c));
  c.method = "plain-decode";
  EXPECT_FALSE(IsArBaseline(c));
  c.method_traits_json = R"({"speculative":false,"lossless":true})";
  EXPECT_TRUE(IsArBaseline(c));
  c.method = "ar";
  c.method_traits_json = R"({"speculative":true})";
  EXPECT_FALSE(IsArBaseline(c));
  c.method_traits_json = "not json";  // unreadable traits: the name decides
  EXPECT_TRUE(IsArBaseline(c));
}

TEST(Metrics, ArBaselinePrefersTheSameRunThenAnyRun) {
  auto row = [](int64_t case_id, int64_t run_id, const std::string& method, double t) {
    ResultsStore::CaseRow r{};
    r.case_id = case_id;
    r.run_id = run_id;
    r.record = TestCase("k" + std::to_string(case_id), method, t);
    return r;
  };
  const std::vector<ResultsStore::CaseRow> cases = {row(1, 1, "ar", 0),   row(2, 1, "fake", 0),
                                                    row(3, 2, "fake", 0), row(4, 2, "ar", 0),
                                                    row(5, 3, "fake", 0), row(6, 3, "fake", 1)};
  EXPECT_EQ(FindArBaseline(cases, 0).index, -1);  // AR itself
  EXPECT_EQ(FindArBaseline(cases, 1).index, 0);
  EXPECT_TRUE(FindArBaseline(cases, 1).same_run);
  EXPECT_EQ(FindArBaseline(cases, 2).index, 3);  // run 2 has its own AR (listed later)
  EXPECT_TRUE(FindArBaseline(cases, 2).same_run);
  EXPECT_EQ(FindArBaseline(cases, 4).index, 0);  // run 3 has none: first AR of any run
  EXPECT_FALSE(FindArBaseline(cases, 4).same_run);
  EXPECT_TRUE(FindArBaseline(cases, 4).same_machine);  // all rows: machine ""
  EXPECT_EQ(FindArBaseline(cases, 5).index, -1);       // T=1: no AR with the same workload
}

TEST(Metrics, ArBaselineFromAnotherMachineOnlyWhenAsked) {
  auto row = [](int64_t case_id, int64_t run_id, const std::string& method,
                const std::string& machine) {
    ResultsStore::CaseRow r{};
    r.case_id = case_id;
    r.run_id = run_id;
    r.record = TestCase("k" + std::to_string(case_id), method, 0);
    r.machine = machine;
    return r;
  };
  // Shard runs 1 and 2 on machines A and B (each with its AR), run 3 on B without an AR, run 4
  // on C without an AR.
  const std::vector<ResultsStore::CaseRow> cases = {row(1, 1, "ar", "A"),   row(2, 1, "fake", "A"),
                                                    row(3, 2, "fake", "B"), row(4, 2, "ar", "B"),
                                                    row(5, 3, "fake", "B"), row(6, 4, "fake", "C")};
  BaselineMatch m = FindArBaseline(cases, 2);
  EXPECT_EQ(m.index, 3);  // its own shard's AR, not the first AR of the database
  EXPECT_TRUE(m.same_run);
  m = FindArBaseline(cases, 4);
  EXPECT_EQ(m.index, 3);  // a resumed run on machine B: B's AR, not A's (listed first)
  EXPECT_FALSE(m.same_run);
  EXPECT_TRUE(m.same_machine);
  m = FindArBaseline(cases, 5);
  EXPECT_EQ(m.index, -1);  // only other machines' AR cases: none by default...
  EXPECT_EQ(m.refused_index, 0);
  BaselinePolicy cross;
  cross.cross_machine = true;
  m = FindArBaseline(cases, 5, cross);  // ...the first of them when asked
  EXPECT_EQ(m.index, 0);
  EXPECT_FALSE(m.same_machine);
  EXPECT_EQ(m.refused_index, -1);
}

}  // namespace
}  // namespace specbed
