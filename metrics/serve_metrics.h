// Metrics of `specbed serve` (batched serving under load) from its raw rows (results/
// serve_records.h), with vLLM's names (benchmarks/benchmark_serving.py): per cell the output and
// request throughput, TTFT, TPOT, ITL and E2E latency (mean, p50, p95, p99), goodput under an SLO,
// and the speculative figures (τ per request, acceptance rate, batch size, verify rows and the
// draft length K per step); across cells the crossover concurrency C*: the smallest concurrency
// at which a method's advantage over AR on the identical trace is gone. No I/O.
//
// Percentiles: linear interpolation between order statistics (Hyndman-Fan type 7, numpy's
// default; SortedQuantile). A figure with no data is NaN.
//
// Statistical conventions of the crossover (ComputeCrossover):
// - Resampling unit: the trace seed, then the request within a seed (a two-stage bootstrap:
//   seeds with replacement, then as many request positions as the seed's trace has, with
//   replacement). The draw is paired: a drawn request counts for the method and for AR at once
//   (same seed, same request_index = the same prompt and arrival), and the same draw serves every
//   concurrency, so the per-C ratios of one resample are coherent and C* is read off them.
// - Intervals are two-sided percentile bootstrap intervals at BootstrapOptions::level (default
//   95%; 2000 resamples, SplitMix64 from a fixed seed, so identical on every platform). Coverage
//   is nominal and per concurrency, not simultaneous over the grid: for an A/A pair (the method is
//   AR) each ratio interval misses 1 with probability about 1 - level, so over k concurrencies
//   some interval misses 1 with probability up to 1 - level^k. With few seeds (1-2) the seed
//   stage adds little and the intervals reflect request-to-request variation only.
// - Ties: a concurrency counts as crossed when the ratio (method over AR, > 1 = the method is
//   better) is <= 1 + tie_margin (default 0.02): a gain under 2% does not count as speculation
//   paying. So an A/A pair crosses at the smallest tested C (it never pays), deterministically
//   and not by the coin flip a strict "<= 1" rule would make of noise around 1. tie_margin = 0
//   gives the strict rule.
// Checked by: tests/reports/serve_metrics_test.cpp (hand-computed cells, a method 2x faster at
// C=1 and 0.5x at C=8 crossing at the right C, A/A pairs, the tie rule, the TPOT crossover, and
// negative controls that make each check fail).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "metrics/metrics.h"
#include "results/serve_records.h"

namespace specbed {

// Mean and percentiles of a set of latencies (milliseconds); NaN without values.
struct LatencySummary {
  int64_t n = 0;
  double mean = kNoValue, p50 = kNoValue, p95 = kNoValue, p99 = kNoValue;
};
LatencySummary SummarizeLatencies(std::vector<double> values);

// A service-level objective for goodput; a bound <= 0 does not constrain.
struct ServeSlo {
  double ttft_ms = 0;
  double tpot_ms = 0;
};

// The emissions of a request's emits_json ("[[t_ms, n_tokens], ...]"); "" gives none. Fails
// (specbed::Error naming `what`) on other text.
std::vector<std::pair<double, int64_t>> ParseEmitsJson(const std::string& json,
                                                       const std::string& what);

// One cell's figures. Per request: TTFT = first_token_ms - arrival_ms (queueing included); TPOT =
// (finish_ms - first_token_ms) / (n_output_tokens - 1), requests with at least 2 output tokens;
// E2E = finish_ms - arrival_ms. ITL: every gap between consecutive emissions of a request, the
// first measured from its first_token_ms (an emission of several tokens is one gap, as vLLM
// counts a speculative step's chunk), pooled over the requests.
struct ServeMetrics {
  int64_t n_requests = 0;
  int64_t output_tokens = 0;  // Σ n_output_tokens
  // The cell's makespan_ms (first arrival to last finish); when it recorded none (<= 0 or NaN),
  // the last finish_ms minus the first arrival_ms of its requests.
  double makespan_ms = kNoValue;
  double output_throughput = kNoValue;   // output_tokens / makespan, tokens/s
  double request_throughput = kNoValue;  // n_requests / makespan, requests/s
  LatencySummary ttft_ms, tpot_ms, itl_ms, e2e_ms;
  // Requests meeting the SLO (TTFT <= slo.ttft_ms and TPOT <= slo.tpot_ms; a request with fewer
  // than 2 output tokens has no TPOT and meets that bound) and their rate over the makespan.
  int64_t n_good = 0;
  double goodput = kNoValue;  // requests/s
  // Speculation. τ per request = (n_accepted + n_steps) / n_steps (accepted tokens plus one
  // bonus/correction token per step; 1 for AR), the mean over requests with steps.
  double mean_tau = kNoValue;
  int64_t n_drafted = 0, n_accepted = 0;  // Σ over requests
  double acceptance_rate = kNoValue;      // n_accepted / n_drafted (vLLM's names); NaN for AR
  // Over the steps that verified something (n_verify_tokens > 0; a step that only prefilled
  // admitted requests is left out): mean batch_size, n_verify_tokens and k_chosen.
  int64_t n_decode_steps = 0;
  double mean_batch_size = kNoValue, mean_verify_tokens = kNoValue, mean_k = kNoValue;
};
ServeMetrics ComputeServeMetrics(const ServeCellRecord& cell,
                                 const std::vector<ServeRequestRecord>& requests,
                                 const std::vector<ServeStepRecord>& steps,
                                 const ServeSlo& slo = {});

// A cell with its rows (the crossover reads the cell and its requests).
struct ServeCellData {
  ServeCellRecord cell;
  std::vector<ServeRequestRecord> requests;
  std::vector<ServeStepRecord> steps;
};

// What the crossover compares. kThroughput: output tokens/s, estimated with Little's law as
// C * Σ n_output_tokens / Σ E2E over the (resampled) requests of the closed-loop cells at
// concurrency C: with C requests always in flight the request rate is C / mean E2E, so this is
// the throughput the cell sustains, free of the drain at the end of a trace (when fewer than C
// remain) that divides the makespan-based output_throughput; it is also a smooth statistic of the
// resampled requests, which a makespan is not. ratio = method / AR. kTpot: the p50 TPOT of the
// requests (ms); ratio = AR / method, so > 1 is again the method being better, and a crossing
// (ratio <= 1) is a p50 TPOT no better than AR's.
enum class CrossoverMetric { kThroughput, kTpot };
const char* CrossoverMetricName(CrossoverMetric metric);  // "throughput" | "tpot"
// Parses "throughput" | "tpot"; errors name `context` and the choices.
CrossoverMetric ParseCrossoverMetric(const std::string& name, const std::string& context);

struct CrossoverOptions {
  CrossoverMetric metric = CrossoverMetric::kThroughput;
  // A concurrency is crossed when ratio <= 1 + tie_margin (see the header comment).
  double tie_margin = 0.02;
  BootstrapOptions bootstrap;  // resamples (0 = no intervals), seed, level
};

// One tested concurrency.
struct CrossoverPoint {
  int64_t concurrency = 0;
  int64_t n_seeds = 0;  // trace seeds with both a method and an AR cell at this C
  int64_t n_pairs = 0;  // requests present in both (by seed and request_index)
  double method = kNoValue, ar = kNoValue;  // the metric's value (tokens/s, or p50 TPOT ms)
  double ratio = kNoValue;                  // > 1: the method is better
  Interval ratio_ci;
  bool crossed = false;  // ratio <= 1 + tie_margin
};

struct CrossoverResult {
  CrossoverOptions options;
  std::vector<CrossoverPoint> points;  // ascending concurrency
  // The smallest crossed concurrency; +infinity when no tested C crosses (shown "> max C");
  // NaN when no method cell has an AR partner.
  double c_star = kNoValue;
  // Percentile interval of the resamples' C* over the tested grid (values of the grid or
  // +infinity, the inverse of the empirical CDF: the smallest C* at or below which at least
  // (1 - level) / 2, resp. (1 + level) / 2, of the resamples lie).
  Interval c_star_ci;
  int64_t n_unpaired_cells = 0;  // closed-loop method cells without an AR cell at (C, seed)
  int64_t max_concurrency() const { return points.empty() ? 0 : points.back().concurrency; }
};

// C* of a method against AR. `method_cells` are the closed-loop cells of ONE method configuration
// (open-loop cells are ignored; two cells at the same concurrency and seed are an error naming
// them); `ar_cells` the AR cells on the identical traces (the first one at each (C, seed) is
// used). A method cell pairs with the AR cell of the same concurrency and seed, and their
// requests pair by request_index.
CrossoverResult ComputeCrossover(const std::vector<ServeCellData>& method_cells,
                                 const std::vector<ServeCellData>& ar_cells,
                                 const CrossoverOptions& options = {});

}  // namespace specbed
