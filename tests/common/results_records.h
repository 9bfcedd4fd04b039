// Builders of results-store records for tests (header only): a run's provenance, a CPU case, a
// finished answer (and its paired AR run), a chain verify step, a bench row and a verify-width
// point with the fields most tests set, for the callers to adjust (the braced ones list the
// record's fields in store.h's order). Used by tests/results/ and by the synthetic databases of
// tests/reports/synthetic_db.h.
//
// Checked by: tests/results/store_test.cpp
#pragma once

#include <cstdint>
#include <string>

#include "results/store.h"

namespace specbed::testing {

// A run on "testhost" built from commit c9810f3abcde (Release -O3) at 2026-11-21T08:05:00Z, with
// the given resolved config and command line.
inline RunInfo TypicalRunInfo(const std::string& config_json, const std::string& repro_command) {
  RunInfo r;
  r.started_at = "2026-11-21T08:05:00Z";
  r.specbed_version = "0.1.0";
  r.git_commit = "c9810f3abcde";
  r.build_flags = "Release -O3";
  r.host = "testhost";
  r.cpu = "Some CPU @ 3GHz (16 cores)";
  r.library_versions_json = R"({"torch":"2.11.0","sqlite":"3.40.1"})";
  r.config_json = config_json;
  r.repro_command = repro_command;
  return r;
}

// A float32 CPU case on the "stories" dataset that took 1.5 s (seed 0, one thread, no knobs).
inline CaseRecord CpuCase(const std::string& key, const std::string& target,
                          const std::string& method, double temperature, int64_t max_new_tokens) {
  CaseRecord c;
  c.case_key = key;
  c.target = target;
  c.method = method;
  c.dataset = "stories";
  c.temperature = temperature;
  c.max_new_tokens = max_new_tokens;
  c.dtype = "float32";
  c.device = "cpu";
  c.wall_s = 1.5;
  return c;
}

// One answer (turn 0, output hash 0123456789abcdef) with its sizes, decode time and stop reason.
inline SampleRecord Answer(const std::string& prompt_id, int64_t n_prompt_tokens,
                           int64_t n_output_tokens, double decode_ms, int64_t n_steps,
                           const std::string& stop_reason) {
  return SampleRecord{prompt_id,
                      /*turn=*/0,
                      /*category=*/"",
                      n_prompt_tokens,
                      n_output_tokens,
                      /*prefill_ms=*/0,
                      decode_ms,
                      n_steps,
                      stop_reason,
                      /*output_hash=*/"0123456789abcdef",
                      /*output_text=*/"",
                      /*output_ids_json=*/"",
                      /*token_margins_json=*/""};
}

// Gives `s` a paired AR run (the AR generation timed back to back with it, schema v4) that decoded
// `output_tokens` tokens in `decode_ms` and ran first (1) or second (0).
inline void PairWithAr(SampleRecord& s, double decode_ms, int64_t output_tokens, int32_t first) {
  s.paired_ar_decode_ms = decode_ms;
  s.paired_ar_output_tokens = output_tokens;
  s.paired_ar_first = first;
}

// Verify step `step_idx` of the answer to `prompt_id` (turn 0), with its token counts.
inline StepRecord ChainStep(const std::string& prompt_id, int64_t step_idx, int64_t drafted,
                            int64_t accepted, int64_t emitted) {
  StepRecord st;
  st.prompt_id = prompt_id;
  st.step_idx = step_idx;
  st.n_drafted = drafted;
  st.n_accepted = accepted;
  st.n_emitted = emitted;
  return st;
}

// The decode speed of a `specbed bench` row: tokens per second and their std over the
// repetitions, and the time per step with its forward-pass and other parts.
struct BenchSpeed {
  double tokens_per_s, tokens_per_s_std, ms_per_step, forward_ms_per_step, other_ms_per_step;
};

// Sets the speed fields of `b` to `speed`.
inline void SetSpeed(BenchRecord& b, const BenchSpeed& speed) {
  b.tokens_per_s = speed.tokens_per_s;
  b.tokens_per_s_std = speed.tokens_per_s_std;
  b.ms_per_step = speed.ms_per_step;
  b.forward_ms_per_step = speed.forward_ms_per_step;
  b.other_ms_per_step = speed.other_ms_per_step;
}

// A `specbed bench` row of `model` in `dtype`: n_tokens decoded at `speed` over `reps` repetitions
// (one thread, batch 1, no cached context, no parameter count, the schema-v5 fields unmeasured).
inline BenchRecord BenchRow(const std::string& model, const std::string& dtype, int64_t n_tokens,
                            int64_t reps, const BenchSpeed& speed) {
  BenchRecord b;
  b.model = model;
  b.dtype = dtype;
  b.n_tokens = n_tokens;
  b.reps = reps;
  SetSpeed(b, speed);
  return b;
}

// A `specbed bench --verify-widths` point of `model`: n_query new tokens after context_len cached
// ones took forward_ms, ratio_to_one times the n_query = 1 time (dtype and BLAS core unnamed, one
// thread, batch 1, one repetition, ATen/BLAS only).
inline BenchVerifyRecord VerifyPoint(const std::string& model, int64_t context_len, int64_t n_query,
                                     double forward_ms, double ratio_to_one) {
  BenchVerifyRecord r;
  r.model = model;
  r.context_len = context_len;
  r.n_query = n_query;
  r.forward_ms = forward_ms;
  r.ratio_to_one = ratio_to_one;
  return r;  // dtype '', 1 thread, batch 1, 1 rep, no GEMV threshold, blas_core and kernel ''
}

}  // namespace specbed::testing
