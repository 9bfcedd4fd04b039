// Pure metric functions over raw results rows (results/store.h records): decode throughput, mean
// prefill time, stop-reason counts, tau (tokens emitted per verify step), drafting-time share,
// rollback rate, and speedup over an autoregressive (AR) baseline on the same prompts. No I/O.
// Definitions and conventions: reports/README.md. A metric with no data is NaN (shown as "—").
// Checked by: tests/reports/metrics_test.cpp (hand-computed values).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "results/store.h"

namespace specbed {

inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

// Tokens decoded after prefill for one sample: n_output_tokens - 1 (the first token of every
// answer is sampled from the prefill logits and its time is part of prefill_ms), at least 0.
int64_t DecodeTokens(const SampleRecord& sample);

// Decode throughput of one sample, tokens/s: DecodeTokens / decode_ms. NaN when decode_ms <= 0
// or is NaN.
double SampleDecodeTokensPerS(const SampleRecord& sample);

// Geometric mean of positive finite values (others are skipped); NaN when none is left.
double GeometricMean(const std::vector<double>& values);

// Aggregates of one case. Speculative fields are NaN when the case has no steps rows (AR).
struct CaseMetrics {
  int64_t n_samples = 0;
  int64_t n_prompts = 0;      // distinct prompt ids
  int64_t output_tokens = 0;  // sum of n_output_tokens
  int64_t decode_tokens = 0;  // sum of DecodeTokens
  double decode_ms = 0;       // sum of decode_ms
  // decode_tokens / decode_ms * 1000 (NaN when decode_ms <= 0).
  double decode_tokens_per_s = kNoValue;
  double prefill_ms_mean = kNoValue;  // mean prefill_ms over samples (NaN without samples)
  std::map<std::string, int64_t> stop_reasons;  // stop_reason -> number of samples
  // From the steps table (speculative methods only).
  int64_t n_steps = 0;  // steps rows
  int64_t drafted = 0, accepted = 0, emitted = 0;
  double draft_ms = 0, verify_ms = 0, other_ms = 0;  // sums of t_*_us, in milliseconds
  double tau = kNoValue;             // emitted / n_steps (includes the bonus/correction token)
  double draft_fraction = kNoValue;  // draft_ms / decode_ms (0..1; shown as T_D%)
  double rollback_rate = kNoValue;   // (drafted - accepted) / drafted; NaN when none drafted
};

CaseMetrics ComputeCaseMetrics(const std::vector<SampleRecord>& samples,
                               const std::vector<StepRecord>& steps);

// "eos 3, max_new_tokens 1" (reasons in name order); "—" when empty.
std::string FormatStopReasons(const std::map<std::string, int64_t>& stop_reasons);

// True when two cases ran the same workload, so that one can be the AR baseline of the other:
// same target, dataset, categories, prompt_limit, temperature, top_p, top_k, seed, max_new_tokens,
// batch_size, dtype, device and threads, and (when both config_json objects carry them) the same
// stop_strings, chat_template and system_prompt. Method, knobs and run are not compared.
bool SameWorkload(const CaseRecord& a, const CaseRecord& b);

// Speedup of a method over AR on the prompts both answered, matched by (prompt_id, turn).
// Uses decode time only (prefill is the same computation for both).
struct Speedup {
  int64_t n_matched = 0;           // (prompt_id, turn) pairs present in both with decode_ms > 0
  std::vector<double> per_prompt;  // ar decode_ms / method decode_ms, in method sample order
  double geomean = kNoValue;       // GeometricMean(per_prompt); NaN when n_matched == 0
  double total_ratio = kNoValue;   // sum ar decode_ms / sum method decode_ms over matched pairs
};
Speedup ComputeSpeedup(const std::vector<SampleRecord>& ar_samples,
                       const std::vector<SampleRecord>& method_samples);

}  // namespace specbed
