// A small synthetic results database for the metrics and report tests, with hand-computable
// values (see the comments on each case). Used by metrics_test.cpp and report_test.cpp.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "results/store.h"

namespace specbed::testing {

// A fresh database path under the test scratch dir (old files of the same name are removed).
inline std::string FreshDbPath(const std::string& name) {
  const std::string path = std::string(SPECBED_TEST_TMPDIR) + "/reports_" + name + ".db";
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::remove((path + suffix).c_str());
  return path;
}

inline SampleRecord Sample(const std::string& id, int64_t out_tokens, double prefill_ms,
                           double decode_ms, int64_t n_steps, const std::string& stop) {
  SampleRecord s;
  s.prompt_id = id;
  s.turn = 0;
  s.category = "story";
  s.n_prompt_tokens = 7;
  s.n_output_tokens = out_tokens;
  s.prefill_ms = prefill_ms;
  s.decode_ms = decode_ms;
  s.n_steps = n_steps;
  s.stop_reason = stop;
  s.output_hash = "0123456789abcdef";
  s.output_text = "once upon a time";
  s.output_ids_json = "[1,2,3]";
  return s;
}

inline StepRecord Step(const std::string& id, int64_t idx, int64_t drafted, int64_t accepted,
                       int64_t emitted) {
  StepRecord st;
  st.prompt_id = id;
  st.turn = 0;
  st.step_idx = idx;
  st.n_drafted = drafted;
  st.n_accepted = accepted;
  st.n_emitted = emitted;
  st.t_draft_us = 2000;  // 2 ms per step
  st.t_verify_us = 1500;
  st.t_other_us = 100;
  return st;
}

// AR at T=0: decode tokens 10 + 20 + 4 = 34 in 100 + 200 + 40 = 340 ms -> 100 tok/s;
// prefill 2, 4, 3 ms -> mean 3 ms; stop reasons eos 2, max_new_tokens 1.
inline std::vector<SampleRecord> ArSamplesT0() {
  return {Sample("p0", 11, 2, 100, 10, "eos"), Sample("p1", 21, 4, 200, 20, "max_new_tokens"),
          Sample("p2", 5, 3, 40, 4, "eos")};
}
// AR at T=1: 34 decode tokens in 680 ms -> 50 tok/s.
inline std::vector<SampleRecord> ArSamplesT1() {
  return {Sample("p0", 11, 2, 200, 10, "eos"), Sample("p1", 21, 4, 400, 20, "max_new_tokens"),
          Sample("p2", 5, 3, 80, 4, "eos")};
}
// "fake" speculative method at T=0: decode 50 + 50 + 40 = 140 ms -> 34 / 0.14 = 242.857 tok/s.
// Per-prompt speedups vs. AR T=0: 100/50 = 2, 200/50 = 4, 40/40 = 1 -> geometric mean 2;
// ratio of totals 340 / 140 = 2.428571.
inline std::vector<SampleRecord> FakeSamples() {
  return {Sample("p0", 11, 2, 50, 3, "eos"), Sample("p1", 21, 4, 50, 4, "max_new_tokens"),
          Sample("p2", 5, 3, 40, 4, "eos")};
}
// Steps of "fake": 11 steps emitting 10 + 20 + 4 = 34 tokens -> tau = 34/11 = 3.0909;
// drafted 12 + 16 + 16 = 44, accepted 7 + 16 + 0 = 23 -> rollback 21/44 = 47.73 %;
// drafting 11 x 2 ms = 22 ms of 140 ms decode -> T_D = 15.71 %.
inline std::vector<StepRecord> FakeSteps() {
  return {Step("p0", 0, 4, 3, 4), Step("p0", 1, 4, 3, 4), Step("p0", 2, 4, 1, 2),
          Step("p1", 0, 4, 4, 5), Step("p1", 1, 4, 4, 5), Step("p1", 2, 4, 4, 5),
          Step("p1", 3, 4, 4, 5), Step("p2", 0, 4, 0, 1), Step("p2", 1, 4, 0, 1),
          Step("p2", 2, 4, 0, 1), Step("p2", 3, 4, 0, 1)};
}

inline RunInfo TestRun() {
  RunInfo r;
  r.started_at = "2026-11-21T08:05:00Z";
  r.specbed_version = "0.1.0";
  r.git_commit = "c9810f3abcde";
  r.build_flags = "Release -O3";
  r.host = "testhost";
  r.cpu = "Some CPU @ 3GHz (16 cores)";
  r.library_versions_json = R"({"torch":"1.13.0","sqlite":"3.40.1"})";
  r.config_json = "{}";
  r.repro_command = "specbed run configs/test.json -o test.db";
  return r;
}

inline CaseRecord TestCase(const std::string& key, const std::string& method, double temperature,
                           int64_t max_new_tokens = 32) {
  CaseRecord c;
  c.case_key = key;
  c.target = "tiny";
  c.method = method;
  c.method_knobs_json = method == "ar" ? "{}" : R"({"k":4})";
  c.dataset = "stories";
  c.temperature = temperature;
  c.seed = 0;
  c.max_new_tokens = max_new_tokens;
  c.threads = 1;
  c.dtype = "float32";
  c.device = "cpu";
  c.config_json = "{}";
  c.wall_s = 1.5;
  return c;
}

// The full synthetic database: AR T=0, AR T=1, fake T=0 (baseline AR T=0), fake T=0 with
// max_new_tokens 64 (no AR baseline -> no speedup), and two bench rows.
inline void WriteSyntheticDb(const std::string& path, bool with_speculative = true,
                             bool with_bench = true) {
  auto store = ResultsStore::Open(path);
  const int64_t run = store->BeginRun(TestRun());
  store->WriteCase(run, TestCase("ar0", "ar", 0), ArSamplesT0(), {});
  store->WriteCase(run, TestCase("ar1", "ar", 1), ArSamplesT1(), {});
  if (with_speculative) {
    store->WriteCase(run, TestCase("fake0", "fake", 0), FakeSamples(), FakeSteps());
    store->WriteCase(run, TestCase("fake0_64", "fake", 0, 64), FakeSamples(), FakeSteps());
  }
  if (with_bench) {
    BenchRecord b;
    b.model = "tiny";
    b.dtype = "float32";
    b.n_tokens = 64;
    b.reps = 3;
    b.tokens_per_s = 1000;
    b.tokens_per_s_std = 10;
    b.ms_per_step = 1.0;
    b.forward_ms_per_step = 0.8;
    b.other_ms_per_step = 0.2;
    b.n_params = 260000;
    BenchRecord b2 = b;
    b2.context_len = 128;
    b2.tokens_per_s = 800;
    b2.ms_per_step = 1.25;
    b2.forward_ms_per_step = 1.0;
    b2.other_ms_per_step = 0.25;
    store->WriteBench(run, {b, b2});
  }
}

}  // namespace specbed::testing
