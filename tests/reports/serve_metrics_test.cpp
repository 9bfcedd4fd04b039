// Tests for metrics/serve_metrics.h: a hand-computed cell (throughputs, TTFT / TPOT / ITL / E2E
// with linear-interpolation percentiles, goodput, τ, acceptance, step means, the makespan
// fallback), emits parsing, and the crossover concurrency C* on synthetic closed-loop cells
// (tests/reports/serve_synthetic.h): a method 2x faster than AR at C=1 and 0.5x at C=8 crosses at
// the right C; an identical A/A pair holds 1 exactly and crosses at the smallest C; a noisy A/A
// pair's 99% ratio intervals hold 1 (a priori each fails with probability about 1%; the noise and
// bootstrap seeds are fixed, so the test is deterministic); the tie margin; the TPOT crossover;
// pairing by seed and request index. Negative controls: AR and the method swapped cross at C=1, a
// method 2x faster everywhere fails the "holds 1" check and never crosses.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "metrics/serve_metrics.h"
#include "tests/common/test_util.h"
#include "tests/reports/serve_synthetic.h"

namespace specbed {
namespace {

using testing::ErrorOf;
using testing::SyntheticClosedCell;
using testing::SyntheticServe;

constexpr double kInf = std::numeric_limits<double>::infinity();

ServeRequestRecord Request(int64_t index, double arrival, double first, double finish,
                           int64_t n_out, const std::string& emits, int64_t n_steps,
                           int64_t drafted, int64_t accepted) {
  ServeRequestRecord r;
  r.request_index = index;
  r.prompt_id = "p" + std::to_string(index);
  r.arrival_ms = arrival;
  r.admitted_ms = arrival;
  r.first_token_ms = first;
  r.finish_ms = finish;
  r.n_output_tokens = n_out;
  r.emits_json = emits;
  r.n_steps = n_steps;
  r.n_drafted = drafted;
  r.n_accepted = accepted;
  return r;
}

ServeStepRecord Step(int64_t index, int64_t batch, int64_t verify, int64_t k) {
  ServeStepRecord st;
  st.step_index = index;
  st.batch_size = batch;
  st.n_verify_tokens = verify;
  st.k_chosen = k;
  return st;
}

// Three requests (values in the comments of each expectation) and a prefill step plus three
// decode steps, over a makespan of 100 ms.
struct HandCell {
  ServeCellRecord cell;
  std::vector<ServeRequestRecord> requests;
  std::vector<ServeStepRecord> steps;
  HandCell() {
    cell.makespan_ms = 100;
    requests = {Request(0, 0, 10, 40, 4, "[[20,1],[40,2]]", 2, 6, 1),
                Request(1, 5, 20, 80, 7, "[[50,3],[80,3]]", 2, 6, 4),
                Request(2, 30, 60, 60, 1, "", 0, 0, 0)};
    steps = {Step(0, 0, 0, 0), Step(1, 2, 8, 3), Step(2, 1, 4, 3), Step(3, 2, 6, 2)};
  }
};

TEST(ServeMetrics, HandComputedCell) {
  const HandCell h;
  const ServeMetrics m = ComputeServeMetrics(h.cell, h.requests, h.steps);
  EXPECT_EQ(m.n_requests, 3);
  EXPECT_EQ(m.output_tokens, 12);
  EXPECT_DOUBLE_EQ(m.output_throughput, 120.0);  // 12 tokens / 0.1 s
  EXPECT_DOUBLE_EQ(m.request_throughput, 30.0);
  // TTFT 10, 15, 30 (queueing included): type-7 percentiles.
  EXPECT_DOUBLE_EQ(m.ttft_ms.mean, 55.0 / 3);
  EXPECT_DOUBLE_EQ(m.ttft_ms.p50, 15);
  EXPECT_DOUBLE_EQ(m.ttft_ms.p95, 28.5);  // 15 + 0.9 x 15
  EXPECT_DOUBLE_EQ(m.ttft_ms.p99, 29.7);  // 15 + 0.98 x 15
  // TPOT: 30 / 3 and 60 / 6; the one-token request has none.
  EXPECT_EQ(m.tpot_ms.n, 2);
  EXPECT_DOUBLE_EQ(m.tpot_ms.p50, 10);
  // ITL: 20 - 10, 40 - 20, 50 - 20, 80 - 50 (a chunk of 3 tokens is one gap).
  EXPECT_EQ(m.itl_ms.n, 4);
  EXPECT_DOUBLE_EQ(m.itl_ms.mean, 22.5);
  EXPECT_DOUBLE_EQ(m.itl_ms.p50, 25);
  EXPECT_DOUBLE_EQ(m.itl_ms.p99, 30);
  // E2E 40, 75, 30.
  EXPECT_DOUBLE_EQ(m.e2e_ms.p50, 40);
  EXPECT_DOUBLE_EQ(m.e2e_ms.mean, 145.0 / 3);
  // No SLO: every request is good.
  EXPECT_EQ(m.n_good, 3);
  EXPECT_DOUBLE_EQ(m.goodput, 30.0);
  // τ per request: (1 + 2) / 2 and (4 + 2) / 2; the request without steps is left out.
  EXPECT_DOUBLE_EQ(m.mean_tau, 2.25);
  EXPECT_DOUBLE_EQ(m.acceptance_rate, 5.0 / 12);
  // The three decode steps (the prefill-only step left out).
  EXPECT_EQ(m.n_decode_steps, 3);
  EXPECT_DOUBLE_EQ(m.mean_batch_size, 5.0 / 3);
  EXPECT_DOUBLE_EQ(m.mean_verify_tokens, 6);
  EXPECT_DOUBLE_EQ(m.mean_k, 8.0 / 3);
}

TEST(ServeMetrics, GoodputCountsRequestsWithinTheSlo) {
  const HandCell h;
  // TTFT <= 20 and TPOT <= 10: requests 0 and 1 (request 2 waited 30 ms).
  EXPECT_EQ(ComputeServeMetrics(h.cell, h.requests, h.steps, {20, 10}).n_good, 2);
  EXPECT_DOUBLE_EQ(ComputeServeMetrics(h.cell, h.requests, h.steps, {20, 10}).goodput, 20.0);
  // TPOT <= 9.9 fails both multi-token requests; a TTFT bound alone keeps request 2 out.
  EXPECT_EQ(ComputeServeMetrics(h.cell, h.requests, h.steps, {0, 9.9}).n_good, 1);
  EXPECT_EQ(ComputeServeMetrics(h.cell, h.requests, h.steps, {20, 0}).n_good, 2);
}

TEST(ServeMetrics, MakespanFallsBackToTheRequestsAndArHasNoAcceptance) {
  HandCell h;
  h.cell.makespan_ms = 0;  // not recorded: last finish 80 - first arrival 0
  const ServeMetrics m = ComputeServeMetrics(h.cell, h.requests, h.steps);
  EXPECT_DOUBLE_EQ(m.makespan_ms, 80);
  EXPECT_DOUBLE_EQ(m.output_throughput, 150.0);
  const ServeCellData ar = SyntheticClosedCell(SyntheticServe{});
  const ServeMetrics a = ComputeServeMetrics(ar.cell, ar.requests, {});
  EXPECT_TRUE(std::isnan(a.acceptance_rate));
  EXPECT_DOUBLE_EQ(a.mean_tau, 1.0);
  EXPECT_TRUE(std::isnan(a.mean_batch_size));
  const ServeMetrics none = ComputeServeMetrics(ServeCellRecord{}, {}, {});
  EXPECT_TRUE(std::isnan(none.output_throughput));
  EXPECT_TRUE(std::isnan(none.ttft_ms.p50));
}

TEST(ServeMetrics, PercentilesInterpolateLikeNumpyAndSkipNaN) {
  const LatencySummary s = SummarizeLatencies({5, 1, 4, std::nan(""), 2, 3});
  EXPECT_EQ(s.n, 5);
  EXPECT_DOUBLE_EQ(s.mean, 3);
  EXPECT_DOUBLE_EQ(s.p50, 3);
  EXPECT_DOUBLE_EQ(s.p95, 4.8);   // numpy.percentile([1,2,3,4,5], 95)
  EXPECT_DOUBLE_EQ(s.p99, 4.96);  // numpy.percentile([1,2,3,4,5], 99)
  EXPECT_TRUE(std::isnan(SummarizeLatencies({}).p50));
}

TEST(ServeMetrics, EmitsJsonErrorsNameTheRequest) {
  EXPECT_EQ(ParseEmitsJson("[[1.5,2],[3,1]]", "r").size(), 2u);
  EXPECT_TRUE(ParseEmitsJson("", "r").empty());
  EXPECT_CONTAINS(ErrorOf([] { ParseEmitsJson("{}", "request p3"); }), "request p3: emits_json");
  EXPECT_CONTAINS(ErrorOf([] { ParseEmitsJson("[[1.5]]", "r"); }), "is not [t_ms, n_tokens]");
}

// ---- Crossover ------------------------------------------------------------------------------

// AR's token time per concurrency (batching makes each token cheaper per sequence).
const std::map<int64_t, double> kArMsPerToken = {{1, 10}, {2, 6}, {4, 4}, {8, 3}};

// Closed-loop cells of `method` at every C of kArMsPerToken and every seed, its token time AR's
// divided by `factor[C]` (factor 2 = twice as fast).
std::vector<ServeCellData> Cells(const std::string& method, const std::map<int64_t, double>& factor,
                                 const std::vector<uint64_t>& seeds, double noise,
                                 uint64_t noise_seed, double extra_ttft_ms = 0) {
  std::vector<ServeCellData> out;
  for (const auto& [c, ms] : kArMsPerToken) {
    for (uint64_t seed : seeds) {
      SyntheticServe s;
      s.method = method;
      s.concurrency = c;
      s.seed = seed;
      s.ms_per_token = ms / factor.at(c);
      s.noise = noise;
      s.noise_seed = noise_seed;
      s.extra_ttft_ms = extra_ttft_ms;
      s.tokens_per_step = method == "ar" ? 1 : 3;
      out.push_back(SyntheticClosedCell(s));
    }
  }
  return out;
}

const std::map<int64_t, double> kSame = {{1, 1}, {2, 1}, {4, 1}, {8, 1}};

std::vector<ServeCellData> ArCells(double noise = 0.05, uint64_t noise_seed = 1) {
  return Cells("ar", kSame, {1, 2}, noise, noise_seed);
}

// Every ratio interval holds 1 (an A/A pair); one failure naming every interval that does not.
void ExpectEveryIntervalHoldsOne(const CrossoverResult& r) {
  std::string misses;
  for (const CrossoverPoint& p : r.points) {
    if (p.ratio_ci.lo <= 1 && 1 <= p.ratio_ci.hi) continue;
    misses += StrCat(" C=", p.concurrency, ": [", p.ratio_ci.lo, ", ", p.ratio_ci.hi, "]");
  }
  EXPECT_TRUE(misses.empty()) << "ratio intervals that do not hold 1:" << misses;
}

TEST(Crossover, MethodTwiceAsFastAtC1AndHalfAtC8CrossesAtTheRightC) {
  const auto method = Cells("spec", {{1, 2.0}, {2, 1.5}, {4, 0.8}, {8, 0.5}}, {1, 2}, 0.05, 2);
  const CrossoverResult r = ComputeCrossover(method, ArCells());
  ASSERT_EQ(r.points.size(), 4u);
  EXPECT_EQ(r.c_star, 4);
  EXPECT_EQ(r.c_star_ci.lo, 4);
  EXPECT_EQ(r.c_star_ci.hi, 4);
  EXPECT_EQ(r.max_concurrency(), 8);
  EXPECT_EQ(r.n_unpaired_cells, 0);
  const double want[] = {2.0, 1.5, 0.8, 0.5};
  for (size_t i = 0; i < 4; ++i) {
    const CrossoverPoint& p = r.points[i];
    EXPECT_EQ(p.n_seeds, 2);
    EXPECT_EQ(p.n_pairs, 96);
    EXPECT_NEAR(p.ratio, want[i], 0.03 * want[i]) << "C=" << p.concurrency;
    EXPECT_TRUE(p.ratio_ci.lo <= p.ratio && p.ratio <= p.ratio_ci.hi) << "C=" << p.concurrency;
    EXPECT_FALSE(p.ratio_ci.lo <= 1 && 1 <= p.ratio_ci.hi) << "C=" << p.concurrency;
    EXPECT_EQ(p.crossed, i >= 2);
    // Little's law: C x tokens / E2E; AR's at C=1 is 1000 / 10 ms per token (±5% noise).
    if (i == 0) {
      EXPECT_NEAR(p.ar, 100, 3);
    }
  }
  // Negative control: AR and the method swapped cross at once (the AR side is 2x faster at C=1).
  const CrossoverResult swapped = ComputeCrossover(ArCells(), method);
  EXPECT_EQ(swapped.c_star, 1);
}

TEST(Crossover, IdenticalAaPairHoldsOneExactlyAndCrossesAtTheSmallestC) {
  std::vector<ServeCellData> copy = ArCells();
  for (ServeCellData& d : copy) d.cell.method = "ar-copy";
  const CrossoverResult r = ComputeCrossover(copy, ArCells());
  ASSERT_EQ(r.points.size(), 4u);
  for (const CrossoverPoint& p : r.points) {
    EXPECT_DOUBLE_EQ(p.ratio, 1.0);
    EXPECT_DOUBLE_EQ(p.ratio_ci.lo, 1.0);  // paired resampling: every resample gives 1
    EXPECT_DOUBLE_EQ(p.ratio_ci.hi, 1.0);
    EXPECT_TRUE(p.crossed);
  }
  EXPECT_EQ(r.c_star, 1);  // it never pays: crossed from the smallest C on
  EXPECT_EQ(r.c_star_ci.lo, 1);
  EXPECT_EQ(r.c_star_ci.hi, 1);
}

TEST(Crossover, NoisyAaPairIntervalsHoldOneAndAFasterMethodFailsThatCheck) {
  CrossoverOptions options;
  options.bootstrap.level = 0.99;
  // Two independent noisy runs of AR (noise seeds 1 and 2).
  const CrossoverResult aa =
      ComputeCrossover(Cells("ar-again", kSame, {1, 2}, 0.05, 2), ArCells(0.05, 1), options);
  ASSERT_EQ(aa.points.size(), 4u);
  ExpectEveryIntervalHoldsOne(aa);
  EXPECT_EQ(aa.c_star, 1);  // within the 2% tie margin at C=1
  // Negative control: a method twice as fast everywhere fails the check and never crosses.
  const std::map<int64_t, double> twice = {{1, 2}, {2, 2}, {4, 2}, {8, 2}};
  const CrossoverResult fast =
      ComputeCrossover(Cells("spec", twice, {1, 2}, 0.05, 2), ArCells(0.05, 1), options);
  EXPECT_NONFATAL_FAILURE(ExpectEveryIntervalHoldsOne(fast), "do not hold 1");
  EXPECT_EQ(fast.c_star, kInf);  // "> max C"
  EXPECT_EQ(fast.c_star_ci.lo, kInf);
  EXPECT_EQ(fast.c_star_ci.hi, kInf);
}

TEST(Crossover, TieMarginDecidesANearTie) {
  // 1% faster at C=4: within the default 2% margin (crossed there), not with a zero margin.
  const auto method = Cells("spec", {{1, 2.0}, {2, 1.5}, {4, 1.01}, {8, 0.5}}, {1, 2}, 0, 0);
  const auto ar = ArCells(0, 0);
  EXPECT_EQ(ComputeCrossover(method, ar).c_star, 4);
  CrossoverOptions strict;
  strict.tie_margin = 0;
  const CrossoverResult r = ComputeCrossover(method, ar, strict);
  EXPECT_EQ(r.c_star, 8);
  EXPECT_FALSE(r.points[2].crossed);
  EXPECT_NEAR(r.points[2].ratio, 1.01, 1e-12);  // no noise: exactly the token-time ratio
}

TEST(Crossover, TpotCrossoverLeavesQueueingOut) {
  // Faster tokens but 10 ms more to the first token: throughput (E2E) crosses at C=4, the p50
  // TPOT (first token excluded) never does.
  const std::map<int64_t, double> f = {{1, 2.0}, {2, 1.5}, {4, 1.2}, {8, 1.1}};
  const auto method = Cells("spec", f, {1, 2}, 0, 0, /*extra_ttft_ms=*/10);
  const auto ar = ArCells(0, 0);
  EXPECT_EQ(ComputeCrossover(method, ar).c_star, 4);
  CrossoverOptions tpot;
  tpot.metric = CrossoverMetric::kTpot;
  const CrossoverResult r = ComputeCrossover(method, ar, tpot);
  EXPECT_EQ(r.c_star, kInf);
  EXPECT_NEAR(r.points[0].ratio, 2.0, 1e-9);
  EXPECT_NEAR(r.points[0].ar, 10, 1e-9);  // AR's p50 TPOT at C=1, ms
  EXPECT_EQ(ParseCrossoverMetric("tpot", "test"), CrossoverMetric::kTpot);
  EXPECT_STREQ(CrossoverMetricName(CrossoverMetric::kThroughput), "throughput");
  EXPECT_CONTAINS(ErrorOf([] { ParseCrossoverMetric("ttft", "--crossover"); }), "ttft");
}

TEST(Crossover, PairsBySeedAndRequestIndex) {
  auto method = Cells("spec", kSame, {1, 2, 3}, 0, 0);  // seed 3 has no AR cells
  auto ar = ArCells(0, 0);
  ar[0].requests.pop_back();  // C=1 seed 1: the last request missing on AR's side
  ServeCellData open = method[0];
  open.cell.mode = "open";  // open-loop cells are not part of the crossover
  open.cell.concurrency = 0;
  method.push_back(open);
  const CrossoverResult r = ComputeCrossover(method, ar);
  EXPECT_EQ(r.n_unpaired_cells, 4);  // seed 3 at each C
  ASSERT_EQ(r.points.size(), 4u);
  EXPECT_EQ(r.points[0].n_seeds, 2);
  EXPECT_EQ(r.points[0].n_pairs, 95);
  EXPECT_EQ(r.points[1].n_pairs, 96);
  // Deterministic: the same bootstrap seed gives the same intervals.
  EXPECT_EQ(ComputeCrossover(method, ar).c_star_ci.hi, r.c_star_ci.hi);
  EXPECT_EQ(ComputeCrossover(method, ar).points[3].ratio_ci.lo, r.points[3].ratio_ci.lo);
  // No intervals without resamples; nothing without AR.
  CrossoverOptions none;
  none.bootstrap.n_resamples = 0;
  EXPECT_TRUE(std::isnan(ComputeCrossover(method, ar, none).points[0].ratio_ci.lo));
  const CrossoverResult alone = ComputeCrossover(method, {});
  EXPECT_TRUE(alone.points.empty());
  EXPECT_TRUE(std::isnan(alone.c_star));
  // Two cells of the method at one (C, seed) are ambiguous.
  method.push_back(method[1]);
  method.back().cell.cell_key = "dup";
  EXPECT_CONTAINS(ErrorOf([&] { ComputeCrossover(method, ar); }), "and 'dup' both ran");
}

}  // namespace
}  // namespace specbed
