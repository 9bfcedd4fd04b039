// Pure metric functions over raw results rows (results/store.h records): decode throughput, mean
// prefill time, stop-reason counts, tau (tokens emitted per verify step), drafting/other time
// shares and per-step phase costs, rollback rate, per-position acceptance (unconditional r_i and
// conditional alpha_i), speedup over autoregressive (AR) decoding (per-answer decode tok/s ratio
// against the paired AR run or the AR case's answer, geometric mean) with bootstrap confidence
// intervals, exact match against AR (first divergence and the target's top-2
// logit margin there), and the choice of the AR baseline. No I/O.
// Definitions and conventions: reports/README.md. A metric with no data is NaN (shown as "—").
// Checked by: tests/reports/metrics_test.cpp (hand-computed values).
#pragma once

#include <cstddef>
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

// The method name of the autoregressive baseline.
inline constexpr const char* kArMethod = "ar";

// Whether a case is the autoregressive baseline: its stored traits say it does not speculate
// (method_traits_json "speculative": false), or, for a case stored without traits (schema v1),
// its method is kArMethod. Reports and metrics ask this, not the method's name.
bool IsArBaseline(const CaseRecord& c);

// Depth of a step's draft as used by the metrics: draft_depth, or n_drafted when it was not
// recorded (-1, rows from schema v1: a chain is assumed).
int64_t StepDraftDepth(const StepRecord& step);

// Per-position acceptance over the steps of a case, for positions i = 1..max depth (index i-1).
// Both rates of the glossary (docs: reports/README.md):
//   unconditional r_i = #steps with n_accepted >= i / #steps with depth >= i;
//   conditional alpha_i = #steps with n_accepted >= i / #steps with n_accepted >= i-1 and
//                         depth >= i  (P(accept at i | accepted up to i-1 and drafted to i)).
// A rate whose denominator is 0 is NaN (cannot happen for i <= max depth with r_i).
struct PositionAcceptance {
  std::vector<int64_t> n_reached;      // #steps with depth >= i          (denominator of r_i)
  std::vector<int64_t> n_accepted;     // #steps with n_accepted >= i     (numerator of both)
  std::vector<int64_t> n_conditional;  // #steps with n_accepted >= i-1 and depth >= i
  std::vector<double> r;               // unconditional r_i
  std::vector<double> alpha;           // conditional alpha_i
  int64_t max_depth() const { return static_cast<int64_t>(r.size()); }
};
PositionAcceptance ComputePositionAcceptance(const std::vector<StepRecord>& steps);

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
  double tau = kNoValue;               // emitted / n_steps (includes the bonus/correction token)
  double draft_fraction = kNoValue;    // draft_ms / decode_ms (0..1; shown as T_D%)
  double rollback_rate = kNoValue;     // (drafted - accepted) / drafted; NaN when none drafted
  double drafted_per_step = kNoValue;  // drafted / n_steps: mean drafted nodes per verify step
  // Added with schema v2 (extensions; NaN without steps rows):
  double verify_fraction = kNoValue;  // verify_ms / decode_ms
  double other_fraction = kNoValue;   // other_ms / decode_ms ("other" share of decode time)
  // Mean per-step phase costs, microseconds (sum of t_*_us / n_steps).
  double draft_us_per_step = kNoValue, verify_us_per_step = kNoValue, other_us_per_step = kNoValue;
  // Added with schema v3: online adaptation (OSD updates), already inside draft_ms.
  double adapt_ms = 0;                         // sum of t_adapt_us, in milliseconds
  double adapt_fraction = kNoValue;            // adapt_ms / decode_ms
  int64_t rollback_events = 0;                 // sum of n_rollback_events
  double rollback_events_per_step = kNoValue;  // rollback_events / n_steps
  PositionAcceptance positions;                // per-position acceptance (empty without steps)
  // Added with schema v6 (NaN / 0 when no step recorded them): the spec's rollback rate
  // (specs/specbranch.md 1.4, 5) = rolled_back / draft_generated, i.e. rolled-back draft tokens
  // over every drafted token including discarded parallel work; target forwards; per-side busy.
  int64_t rolled_back = 0, draft_generated = 0, target_forwards = 0;
  double spec_rollback_rate = kNoValue;
  double target_forwards_per_sample = kNoValue;  // target_forwards / n_samples
  // Mean per-step busy time of each side, microseconds (their sum exceeds the per-step wall
  // time when drafting overlapped verification).
  double draft_busy_us_per_step = kNoValue, verify_busy_us_per_step = kNoValue;
  // Added with schema v10 (NaN / 0 when not recorded). The rollback rate (RB) of every method:
  // wasted draft positions (rolled back + trimmed by the draft side) over drafted positions, each
  // position once (methods/common/draft_ledger.h); spec_rollback_rate above is the SpecBranch
  // paper's variant, trimming left out. NaN when a step counted rollbacks but not trimming.
  int64_t trimmed = 0;
  double draft_waste_rate = kNoValue;
  // The drafter's catch-up over the prompt (sum of t_draft_prefill_us; inside draft_ms), and its
  // share of decode time, shown beside T_D% (NaN unless every step recorded it).
  double draft_prefill_ms = 0;
  double draft_prefill_fraction = kNoValue;
  // Added with schema v12 (issue 45, step 6; NaN unless every step recorded them): per verify
  // step, the engine's launching calls (only under SPECBED_COUNT_OPS=on), captured-step replays,
  // copies host -> device and device -> host; and the phases' device time over their wall time.
  double launches_per_step = kNoValue, replays_per_step = kNoValue;
  double h2d_per_step = kNoValue, d2h_per_step = kNoValue;
  double device_time_fraction = kNoValue;
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

// Which AR cases may be a baseline. An AR case of the same run is always preferred, then one of
// another run on the same machine (a resumed run; CaseRow::machine equal). One measured on another
// machine (a shard of a sweep merged from elsewhere, a database from a colleague) is used only
// when `cross_machine` is set: by default no speedup or exact match crosses machines.
struct BaselinePolicy {
  bool cross_machine = false;
};

// The AR baseline of `cases[i]`: the first case (in the given order) other than it with method
// "ar" and SameWorkload, in the same run; else in another run on the same machine; else, when the
// policy allows, on another machine. index -1 when there is none (or none allowed) or cases[i] is
// itself an AR case; `refused_index` then names the first AR case the policy refused (-1 = none).
struct BaselineMatch {
  int64_t index = -1;  // into `cases`
  bool same_run = false;
  bool same_machine = false;
  int64_t refused_index = -1;  // an AR case on another machine, not used (policy.cross_machine off)
};
BaselineMatch FindArBaseline(const std::vector<ResultsStore::CaseRow>& cases, size_t i,
                             const BaselinePolicy& policy = {});

// A confidence interval; NaN bounds when there is no data.
struct Interval {
  double lo = kNoValue, hi = kNoValue;
};

// Percentile bootstrap over prompts: each resample draws as many prompt ids as were matched, with
// replacement, and takes all matched turns of each drawn prompt (a cluster bootstrap, so the turns
// of a multi-turn prompt stay together); the interval is the (1-level)/2 and (1+level)/2 quantiles
// (linear interpolation between order statistics) of the statistic over the resamples. The
// random stream is SplitMix64 from `seed` with an exact multiply-shift index draw, so intervals
// are identical on every platform and run. n_resamples == 0 turns the intervals off (NaN).
struct BootstrapOptions {
  int64_t n_resamples = 2000;
  uint64_t seed = 0x5bec'bed0'c1c1'0001ULL;
  double level = 0.95;
};

// One bootstrap cluster (a prompt) of a geometric mean over answers: the sum of the log ratios of
// its answers and their count.
struct LogCluster {
  double log_sum = 0;
  int64_t n = 0;
};
// The bootstrap interval (above) of exp(Σ log_sum / Σ n) over resampled clusters, with the same
// random stream as the speedup intervals (the report's tie rule uses it); NaN with no clusters or
// n_resamples == 0.
Interval GeomeanClusterInterval(const std::vector<LogCluster>& clusters,
                                const BootstrapOptions& bootstrap);

// What a speedup's times and tokens cover. kDecode (the default): decode tokens (every generated
// token but the first, which the prefill produces) over decode time; kEndToEnd: every generated
// token over prefill + decode time (wall time of the answer, as Spec-Bench times it).
enum class SpeedupScope { kDecode, kEndToEnd };
const char* SpeedupScopeName(SpeedupScope scope);  // "decode" | "end_to_end"
// Parses "decode" | "end_to_end" (also "e2e"); errors name `context` and the choices.
SpeedupScope ParseSpeedupScope(const std::string& name, const std::string& context);

// Speedup of a method over AR — the one definition SpecBed uses everywhere (summary, report,
// compare, paper tables): per answer, method tok/s / AR tok/s for the same prompt and turn
// (tok/s over the scope's tokens and time, so answers of different lengths at T > 0 compare per
// token); the geometric mean over answers, with the bootstrap CI. At T = 0 with identical
// outputs it equals the time ratio AR ms / method ms. Decode only by default (SpeedupScope).
// The AR side of an answer is its paired AR run when the method sample carries one (paired
// timing: AR timed on the same prompt back to back, SampleRecord::has_paired_ar), else the
// `ar_samples` answer with the same (prompt_id, turn). Answers with no token or no time on
// either side are left out (so are end-to-end pairs whose paired AR prefill was not recorded,
// i.e. written before schema v6).
//
// Beside it, labelled, Spec-Bench's own figure (evaluation/speed.py): per question (prompt), its
// tokens summed over turns / its time summed over turns, for the method and for AR; the
// arithmetic mean of the method's per-question speeds divided by the arithmetic mean of AR's, over
// the same matched answers and in the same scope (Spec-Bench itself reports it end to end).
struct Speedup {
  SpeedupScope scope = SpeedupScope::kDecode;
  int64_t n_matched = 0;           // answers with an AR side (paired or matched by prompt/turn)
  int64_t n_paired = 0;            // of those, timed against their paired AR run
  std::vector<double> per_prompt;  // per-answer tok/s ratios, in method sample order
  double geomean = kNoValue;       // GeometricMean(per_prompt); NaN when n_matched == 0
  // Ratio of aggregate throughputs: (sum method tokens / sum method ms) /
  // (sum AR tokens / sum AR ms) over the matched answers.
  double total_ratio = kNoValue;
  // Spec-Bench's figure (above).
  double spec_bench = kNoValue;
  // Extensions: the matched pairs (parallel to per_prompt) and the bootstrap intervals.
  struct Pair {
    std::string prompt_id;
    int32_t turn = 0;
    double ar_ms = 0, method_ms = 0;           // times in the scope
    int64_t ar_tokens = 0, method_tokens = 0;  // tokens in the scope
    bool paired = false;                       // AR side = the paired AR run
    // method tok/s / AR tok/s.
    double ratio() const {
      return (static_cast<double>(method_tokens) / method_ms) /
             (static_cast<double>(ar_tokens) / ar_ms);
    }
  };
  std::vector<Pair> pairs;
  int64_t n_prompts = 0;    // distinct prompt ids among the matched pairs (bootstrap units)
  Interval geomean_ci;      // bootstrap interval of geomean
  Interval total_ratio_ci;  // bootstrap interval of total_ratio
  Interval spec_bench_ci;   // bootstrap interval of spec_bench
  BootstrapOptions bootstrap;
};
Speedup ComputeSpeedup(const std::vector<SampleRecord>& ar_samples,
                       const std::vector<SampleRecord>& method_samples,
                       const BootstrapOptions& bootstrap = {},
                       SpeedupScope scope = SpeedupScope::kDecode);

// Quantile q (0..1) of `sorted` (ascending) with linear interpolation between order statistics
// (Hyndman-Fan type 7); NaN when empty.
double SortedQuantile(const std::vector<double>& sorted, double q);

// Token ids of output_ids_json ("[12,7,...]"); margins of token_margins_json ("[1.5,0.25,...]",
// null entries read as NaN). "" gives an empty vector. Fail (specbed::Error naming `what`) on
// text that is not a JSON array of numbers.
std::vector<int64_t> ParseTokenIdsJson(const std::string& json, const std::string& what);
std::vector<double> ParseMarginsJson(const std::string& json, const std::string& what);

// Exact match of a method's outputs against AR's on the answers both produced, matched by
// (prompt_id, turn); answers without stored token ids on either side are left out. Meaningful as a
// losslessness check at T = 0 (at T > 0 different random streams make outputs differ).
struct ExactMatch {
  struct Divergence {
    std::string prompt_id;
    int32_t turn = 0;
    // First index where the token ids differ; when one output is a prefix of the other, the
    // length of the shorter one (where one stopped and the other went on).
    int64_t position = 0;
    int64_t ar_token = -1, method_token = -1;  // the tokens at `position`, -1 past an output's end
    // AR's token_margins_json[position]: the target's top-2 logit gap where the outputs part;
    // NaN when AR stored no margins or its output ends at `position`.
    double margin = kNoValue;
  };
  int64_t n_matched = 0;                // compared answers
  int64_t n_exact = 0;                  // identical token ids
  double rate = kNoValue;               // n_exact / n_matched
  std::vector<Divergence> divergences;  // the other answers, in method sample order
  int64_t min_position = -1;            // smallest divergence position (-1 = none)
  double median_position = kNoValue;    // median divergence position
  double min_margin = kNoValue;         // smallest finite margin at a divergence
};
ExactMatch ComputeExactMatch(const std::vector<SampleRecord>& ar_samples,
                             const std::vector<SampleRecord>& method_samples);

}  // namespace specbed
