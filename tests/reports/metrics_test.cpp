// Tests for metrics/metrics.h: every metric of the report against hand-computed values on the
// synthetic samples/steps of synthetic_db.h (decode tok/s excluding the first token, mean prefill,
// stop reasons, tau with the bonus token, T_D, rollback, per-prompt speedup and its geometric
// mean, ratio of totals, workload matching).
#include <gtest/gtest.h>

#include <cmath>

#include "metrics/metrics.h"
#include "tests/reports/synthetic_db.h"

namespace specbed {
namespace {

using testing::ArSamplesT0;
using testing::FakeSamples;
using testing::FakeSteps;
using testing::Sample;
using testing::TestCase;

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

}  // namespace
}  // namespace specbed
