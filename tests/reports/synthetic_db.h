// Small synthetic results databases for the metrics, report and summary tests, with
// hand-computable values (see the comments on each case). Used by metrics_test.cpp,
// report_test.cpp, paper_report_test.cpp, summary_test.cpp and tests/cli/summary_cli_test.cpp.
#pragma once

#include <string>
#include <vector>

#include "results/store.h"
#include "tests/common/results_records.h"
#include "tests/common/test_util.h"

namespace specbed::testing {

// A fresh database path under the test scratch dir (old files of the same name are removed).
inline std::string FreshDbPath(const std::string& name) {
  return ScratchDb("reports_" + name);
}

inline SampleRecord Sample(const std::string& id, int64_t out_tokens, double prefill_ms,
                           double decode_ms, int64_t n_steps, const std::string& stop) {
  SampleRecord s = Answer(id, 7, out_tokens, decode_ms, n_steps, stop);
  s.category = "story";
  s.prefill_ms = prefill_ms;
  s.output_text = "once upon a time";
  s.output_ids_json = "[1,2,3]";
  return s;
}

inline StepRecord Step(const std::string& id, int64_t idx, int64_t drafted, int64_t accepted,
                       int64_t emitted) {
  StepRecord st = ChainStep(id, idx, drafted, accepted, emitted);
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
  return TypicalRunInfo("{}", "specbed run configs/test.json -o test.db");
}

inline CaseRecord TestCase(const std::string& key, const std::string& method, double temperature,
                           int64_t max_new_tokens = 32) {
  CaseRecord c = CpuCase(key, "tiny", method, temperature, max_new_tokens);
  c.method_knobs_json = method == "ar" ? "{}" : R"({"k":4})";
  c.config_json = "{}";
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
    BenchRecord b = BenchRow("tiny", "float32", /*n_tokens=*/64, /*reps=*/3,
                             {/*tokens_per_s=*/1000, /*tokens_per_s_std=*/10, /*ms_per_step=*/1.0,
                              /*forward_ms_per_step=*/0.8, /*other_ms_per_step=*/0.2});
    b.n_params = 260000;
    BenchRecord b2 = b;
    b2.context_len = 128;
    SetSpeed(b2, {800, 10, 1.25, 1.0, 0.25});
    store->WriteBench(run, {b, b2});
  }
}

// ---- Schema-v2 data for per-position acceptance, exact match and `specbed summary` ----------

// A tree-method step: n_drafted nodes, the deepest `depth` deep, `accepted` kept (+1 emitted).
// 1 ms drafting, 2 ms verify, 0.5 ms other.
inline StepRecord TreeStep(const std::string& id, int64_t idx, int64_t drafted, int64_t depth,
                           int64_t accepted, int64_t rollback_events) {
  StepRecord st = Step(id, idx, drafted, accepted, accepted + 1);
  st.draft_depth = depth;
  st.n_rollback_events = rollback_events;
  st.t_draft_us = 1000;
  st.t_verify_us = 2000;
  st.t_other_us = 500;
  return st;
}

// Five tree steps (drafted, depth, accepted): (8,3,3) (8,3,1) (8,3,0) (6,2,2) (8,4,2).
//   i=1: reached 5, accepted>=1: 4                 -> r_1 = 0.8,  alpha_1 = 4/5 = 0.8
//   i=2: reached 5, accepted>=2: 3, acc>=1&d>=2: 4 -> r_2 = 0.6,  alpha_2 = 3/4 = 0.75
//   i=3: reached 4, accepted>=3: 1, acc>=2&d>=3: 2 -> r_3 = 0.25, alpha_3 = 1/2 = 0.5
//   i=4: reached 1, accepted>=4: 0, acc>=3&d>=4: 0 -> r_4 = 0,    alpha_4 = NaN
// emitted 4+2+1+3+3 = 13 -> tau 2.6; drafted 38, accepted 8 -> rollback 30/38 = 78.95 %;
// rollback events 0+2+1+0+0 = 3; per step 1000 / 2000 / 500 us.
inline std::vector<StepRecord> TreeSteps() {
  return {TreeStep("p0", 0, 8, 3, 3, 0), TreeStep("p0", 1, 8, 3, 1, 2),
          TreeStep("p1", 0, 8, 3, 0, 1), TreeStep("p1", 1, 6, 2, 2, 0),
          TreeStep("p2", 0, 8, 4, 2, 0)};
}

// AR at T=0 with token ids and the target's top-2 logit margins per generated token.
inline std::vector<SampleRecord> ArSamplesWithMargins() {
  std::vector<SampleRecord> s = ArSamplesT0();
  s[0].output_ids_json = "[1,2,3]";
  s[0].token_margins_json = "[4.0,3.0,2.0]";
  s[1].output_ids_json = "[1,2,3,4,5]";
  s[1].token_margins_json = "[2.0,1.5,1.0,0.125,3.0]";
  s[2].output_ids_json = "[1,2,3,4]";
  s[2].token_margins_json = "[1.0,0.75,0.5,0.25]";
  return s;
}

// The tree method at T=0: decode 50 + 100 + 40 = 190 ms against AR's 100, 200, 40 -> per-prompt
// speedups 2, 2, 1, geometric mean 2^(2/3) = 1.5874, ratio of totals 340 / 190 = 1.7895; 34
// decode tokens / 0.19 s = 178.9 tok/s; drafting 5 ms = 2.63 %, other 2.5 ms = 1.32 % of decode.
// Outputs vs. ArSamplesWithMargins: p0 identical; p1 diverges at position 3 (AR token 4, method
// token 9, AR margin 0.125); p2 stops after 2 tokens (position 2, AR token 3, margin 0.5).
// -> exact 1/3, first divergence min 2, median 2.5, smallest margin 0.125.
inline std::vector<SampleRecord> TreeSamples() {
  std::vector<SampleRecord> s = {Sample("p0", 11, 2, 50, 2, "eos"),
                                 Sample("p1", 21, 4, 100, 2, "max_new_tokens"),
                                 Sample("p2", 5, 3, 40, 1, "eos")};
  s[0].output_ids_json = "[1,2,3]";
  s[1].output_ids_json = "[1,2,3,9,9]";
  s[2].output_ids_json = "[1,2]";
  return s;
}

// The `specbed summary` database:
//   run 1: case 1 AR T=0 (ids + margins), case 2 AR T=1, case 3 "tree" T=0 (TreeSamples,
//          TreeSteps; baseline case 1, same run);
//   run 2: case 4 "fake" T=0 (FakeSamples/FakeSteps; no AR in run 2 -> baseline case 1 of run 1;
//          outputs "[1,2,3]": p0 exact, p1 and p2 diverge at 3 with margins 0.125 and 0.25),
//          case 5 "fake" T=0 max_new_tokens 64 (no baseline anywhere).
inline void WriteSummaryDb(const std::string& path) {
  auto store = ResultsStore::Open(path);
  const int64_t run1 = store->BeginRun(TestRun());
  CaseRecord ar = TestCase("ar0", "ar", 0);
  ar.method_traits_json = R"({"lossless":true,"tree":false,"needs_drafter":false})";
  store->WriteCase(run1, ar, ArSamplesWithMargins(), {});
  store->WriteCase(run1, TestCase("ar1", "ar", 1), ArSamplesT1(), {});
  CaseRecord tree = TestCase("tree0", "tree", 0);
  tree.method_knobs_json = R"({"depth":4,"topk":2})";
  tree.drafter = "tiny-head";
  tree.method_traits_json = R"({"lossless":true,"tree":true,"needs_drafter":true})";
  store->WriteCase(run1, tree, TreeSamples(), TreeSteps());
  const int64_t run2 = store->BeginRun(TestRun());
  store->WriteCase(run2, TestCase("fake0", "fake", 0), FakeSamples(), FakeSteps());
  store->WriteCase(run2, TestCase("fake0_64", "fake", 0, 64), FakeSamples(), FakeSteps());
}

// ---- Paper-layout database: methods x budgets x two datasets x two temperatures ---------------

// Answers p0, p1, p2 with the given decode times (ms) and categories (dataset "beta" has two:
// p0 and p1 are "math", p2 is "code"; dataset "alpha" has only "story").
inline std::vector<SampleRecord> PaperSamples(const std::string& dataset, double ms0, double ms1,
                                              double ms2) {
  std::vector<SampleRecord> s = {Sample("p0", 11, 2, ms0, 2, "eos"),
                                 Sample("p1", 21, 4, ms1, 2, "eos"),
                                 Sample("p2", 5, 3, ms2, 2, "eos")};
  if (dataset == "beta") {
    s[0].category = s[1].category = "math";
    s[2].category = "code";
  }
  return s;
}

// Two chain steps per answer drafting `k` tokens (2 ms draft, 1.5 ms verify, 0.1 ms other each):
// p0 and p1 accept `a` per step, p2 accepts `a2` per step (emitted = accepted + 1).
inline std::vector<StepRecord> PaperSteps(int64_t k, int64_t a, int64_t a2) {
  std::vector<StepRecord> out;
  for (const char* id : {"p0", "p1", "p2"}) {
    const int64_t acc = std::string(id) == "p2" ? a2 : a;
    for (int64_t i = 0; i < 2; ++i) out.push_back(Step(id, i, k, acc, acc + 1));
  }
  return out;
}

// The paper-layout database (one run, target "tiny", max_new_tokens 32, threads 1), for each
// T in {0, 1} (T = 1 doubles every decode time, so speedups and τ stay, T_D halves) and each
// dataset in {alpha, beta}:
//   ar:              decode 100, 200, 40 ms
//   sps {"k":2}:     decode 50, 100, 40 -> ratios 2, 2, 1; steps k=2, a=2, a2=0
//   sps {"k":4}:     decode 25, 50, 40  -> ratios 4, 4, 1; steps k=4, a=4, a2=1
//   tree {"depth":3,"top_k":2} (alpha only, config flagged "synthetic_acceptance"):
//                    decode 50, 50, 40  -> ratios 2, 4, 1; steps k=6, a=3, a2=3
// Benchmarks: alpha, beta/code (p2), beta/math (p0, p1). Hand-computed (T = 0):
//   sps k=2: alpha Spd 2^(2/3) = 1.59×, τ 14/6 = 2.33; beta/code 1.00×, τ 1.00; beta/math 2.00×,
//            τ 3.00; mean Spd (1.5874 + 1 + 2) / 3 = 1.53×, mean τ (2.333 + 1 + 3) / 3 = 2.11;
//            T_D = 2 x 12 ms / 2 x 190 ms = 6.3 %; rollback (24 - 16) / 24 = 33.3 %.
//   sps k=4: alpha 4^(2/3) = 2.52×, τ 24/6 = 4.00; beta/code 1.00×, τ 2.00; beta/math 4.00×,
//            τ 5.00; mean 2.51×, τ 3.67; T_D 24 / 230 = 10.4 %; rollback (48 - 36) / 48 = 25.0 %.
//   tree:    alpha 2.00×, τ 4.00; beta —; mean 2.00×* and 4.00*; T_D 12 / 140 = 8.6 %;
//            rollback (36 - 18) / 36 = 50.0 %.
// At T = 1: sps k=2 T_D = 24 / 760 = 3.2 %.
inline void WritePaperDb(const std::string& path, const std::string& run_config_json = "{}") {
  auto store = ResultsStore::Open(path);
  RunInfo info = TestRun();
  info.config_json = run_config_json;
  const int64_t run = store->BeginRun(info);
  for (const double t : {0.0, 1.0}) {
    const double f = t == 0 ? 1.0 : 2.0;
    for (const std::string dataset : {"alpha", "beta"}) {
      const std::string tag = dataset + (t == 0 ? "0" : "1");
      CaseRecord ar = TestCase("ar_" + tag, "ar", t);
      ar.dataset = dataset;
      store->WriteCase(run, ar, PaperSamples(dataset, 100 * f, 200 * f, 40 * f), {});
      CaseRecord k2 = TestCase("k2_" + tag, "sps", t);
      k2.dataset = dataset;
      k2.method_knobs_json = R"({"k":2})";
      store->WriteCase(run, k2, PaperSamples(dataset, 50 * f, 100 * f, 40 * f),
                       PaperSteps(2, 2, 0));
      CaseRecord k4 = TestCase("k4_" + tag, "sps", t);
      k4.dataset = dataset;
      k4.method_knobs_json = R"({"k":4})";
      store->WriteCase(run, k4, PaperSamples(dataset, 25 * f, 50 * f, 40 * f), PaperSteps(4, 4, 1));
      if (dataset == "alpha") {
        CaseRecord tree = TestCase("tree_" + tag, "tree", t);
        tree.dataset = dataset;
        tree.method_knobs_json = R"({"depth":3,"top_k":2})";
        tree.config_json = R"({"knobs":{"depth":3,"top_k":2},"synthetic_acceptance":{"p":0.8}})";
        store->WriteCase(run, tree, PaperSamples(dataset, 50 * f, 50 * f, 40 * f),
                         PaperSteps(6, 3, 3));
      }
    }
  }
}

}  // namespace specbed::testing
