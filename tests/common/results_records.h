// Builders of results-store records for tests (header only): a run's provenance, a CPU case, a
// finished answer and a chain verify step with the fields most tests set, for the callers to
// adjust. Used by tests/results/ and by the synthetic databases of tests/reports/synthetic_db.h.
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
  r.library_versions_json = R"({"torch":"1.13.0","sqlite":"3.40.1"})";
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
  SampleRecord s;
  s.prompt_id = prompt_id;
  s.n_prompt_tokens = n_prompt_tokens;
  s.n_output_tokens = n_output_tokens;
  s.decode_ms = decode_ms;
  s.n_steps = n_steps;
  s.stop_reason = stop_reason;
  s.output_hash = "0123456789abcdef";
  return s;
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

}  // namespace specbed::testing
