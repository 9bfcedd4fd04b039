// Synthetic `specbed serve` cells for the serve metrics and report tests (header only): a
// closed-loop cell whose request i takes slot i % C (it arrives when request i - C finishes),
// emits its first token one token time after it arrives (plus an optional extra TTFT) and the
// rest in chunks of `tokens_per_step` tokens, one token time per token. A request's token time is
// ms_per_token x (1 + noise x u), u uniform in [-1, 1] drawn from (noise_seed, seed, C, i), so two
// noise seeds are two independent runs of the same system. Output lengths depend on the trace
// (seed, i) only, so AR and a method on the same seed serve the identical trace; without noise
// the Little's-law throughput ratio of two cells is exactly their token-time ratio.
// Checked by: tests/reports/serve_metrics_test.cpp, tests/reports/serve_report_test.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "base/names.h"
#include "metrics/serve_metrics.h"
#include "metrics/split_mix.h"

namespace specbed::testing {

struct SyntheticServe {
  std::string method = "ar";
  std::string knobs = "{}";
  int64_t concurrency = 1;
  uint64_t seed = 1;  // the trace
  int64_t n_requests = 48;
  double ms_per_token = 10;
  double extra_ttft_ms = 0;     // added to every request's time to first token
  double noise = 0;             // relative jitter of a request's token time
  uint64_t noise_seed = 0;      // the jitter's stream
  int64_t tokens_per_step = 1;  // tokens per emission (> 1: speculation)
  std::string schedule = "fixed";
};

// Uniform in [-1, 1] from a key.
inline double SyntheticJitter(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  SplitMix64 rng(a * 0x9e3779b97f4a7c15ULL ^ (b << 40) ^ (c << 20) ^ d);
  return static_cast<double>(rng.Next() >> 11) / static_cast<double>(uint64_t{1} << 53) * 2 - 1;
}

// Request i of a synthetic cell, arriving at `arrival_ms`.
inline ServeRequestRecord SyntheticRequest(const SyntheticServe& s, int64_t i, double arrival_ms) {
  ServeRequestRecord r;
  r.request_index = i;
  r.prompt_id = StrCat("p", (i * 5 + static_cast<int64_t>(s.seed)) % 97);
  r.n_prompt_tokens = 20;
  r.n_output_tokens = 8 + (i * 7 + static_cast<int64_t>(s.seed)) % 9;
  const double token_ms =
      s.ms_per_token *
      (1 + s.noise * SyntheticJitter(s.noise_seed, s.seed, static_cast<uint64_t>(s.concurrency),
                                     static_cast<uint64_t>(i)));
  r.arrival_ms = arrival_ms;
  r.admitted_ms = arrival_ms;
  r.first_token_ms = arrival_ms + s.extra_ttft_ms + token_ms;
  std::string emits = "[";
  int64_t emitted = 1;
  double t = r.first_token_ms;
  while (emitted < r.n_output_tokens) {
    const int64_t n = std::min(s.tokens_per_step, r.n_output_tokens - emitted);
    t += token_ms * static_cast<double>(n);
    emits += StrCat(r.n_steps > 0 ? "," : "", "[", t, ",", n, "]");
    emitted += n;
    ++r.n_steps;
    r.n_drafted += s.tokens_per_step - 1;
    r.n_accepted += n - 1;
    r.n_drafts += s.tokens_per_step > 1 ? 1 : 0;
  }
  r.emits_json = emits + "]";
  r.finish_ms = t;
  r.stop_reason = "max_new_tokens";
  return r;
}

inline ServeCellData SyntheticClosedCell(const SyntheticServe& s) {
  ServeCellData d;
  ServeCellRecord& c = d.cell;
  c.cell_key = StrCat(s.method, s.knobs, "/", s.schedule, "/C", s.concurrency, "/seed", s.seed,
                      "/noise", s.noise_seed);
  c.target = "tiny";
  c.method = s.method;
  c.method_knobs_json = s.knobs;
  c.dataset = "stories";
  c.mode = "closed";
  c.concurrency = s.concurrency;
  c.max_running = s.concurrency;
  c.schedule = s.schedule;
  c.schedule_json = StrCat(R"({"policy":")", s.schedule, R"(","k":)", s.tokens_per_step - 1, "}");
  c.n_requests = s.n_requests;
  c.max_new_tokens = 16;
  c.seed = s.seed;
  c.dtype = "float32";
  c.device = "cpu";
  c.method_traits_json = StrCat(R"({"speculative":)", s.method == "ar" ? "false" : "true", "}");
  for (int64_t i = 0; i < s.n_requests; ++i) {
    const double arrival = i < s.concurrency ? 0.0 : d.requests[i - s.concurrency].finish_ms;
    d.requests.push_back(SyntheticRequest(s, i, arrival));
  }
  for (const ServeRequestRecord& r : d.requests)
    c.makespan_ms = std::max(c.makespan_ms, r.finish_ms);
  c.wall_s = c.makespan_ms / 1000.0 + 0.5;
  return d;
}

}  // namespace specbed::testing
