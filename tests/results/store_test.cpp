// Tests for results/store.h: round trips of every record type, no duplicate cases, resume via
// HasCompletedCase, crash safety (a writer SIGKILLed mid-case leaves nothing), lock waiting and
// the locked error, append-only enforcement, the errors for bad paths/files/schema versions, step
// sanity checks, and the migration of a hand-made schema-v1 file to v2 (read-only opens read it
// as is).
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "base/timer.h"
#include "results/record_schema.h"
#include "results/store.h"
#include "tests/common/results_records.h"
#include "tests/common/test_util.h"

namespace specbed {
namespace {

using testing::ErrorOf;

// A fresh database path under the test scratch dir (old files of the same name are removed).
std::string FreshDbPath(const std::string& name) {
  return testing::ScratchDb("results_" + name);
}

RunInfo MakeRun() {
  return testing::TypicalRunInfo(R"({"sweep":{"methods":["ar","eagle"]}})",
                                 "specbed sweep --config configs/x.yaml --results out.db");
}

CaseRecord MakeCase(const std::string& key) {
  CaseRecord c = testing::CpuCase(key, "tiny-llama", "eagle", 0.7, 256);
  c.method_knobs_json = R"({"depth":5,"top_k":8})";
  c.dataset = "mt_bench";
  c.categories = "writing,coding";
  c.top_p = 0.95;
  c.top_k = 40;
  c.seed = std::numeric_limits<uint64_t>::max() - 4;  // does not fit in int64
  c.threads = 4;
  c.dtype = "bfloat16";
  c.config_json = R"({"case":")" + key + R"("})";
  c.wall_s = 12.5;
  c.method_traits_json = R"({"lossless":true,"tree":true,"needs_drafter":true})";
  c.drafter = "tiny-eagle-head";
  c.timing_mode = "paired";
  return c;
}

std::vector<SampleRecord> MakeSamples(int n) {
  std::vector<SampleRecord> out;
  for (int i = 0; i < n; ++i) {
    SampleRecord s = testing::Answer("p" + std::to_string(i / 2), 100 + i, 50 + i, 1000.0 / 3.0 + i,
                                     20 + i, i % 2 ? "eos" : "max_new_tokens");
    s.turn = i % 2;
    s.category = i % 3 == 0 ? "writing" : "coding";
    s.prefill_ms = 3.25 + i;
    s.output_text = "answer " + std::to_string(i) + " \xC3\xA9\xF0\x9F\x98\x80";
    s.output_ids_json = "[12,7," + std::to_string(i) + "]";
    s.token_margins_json = i % 2 ? "" : "[1.5,0.25," + std::to_string(i) + "]";
    if (i % 3 != 2) {  // paired timing on most samples; the rest read back as "none"
      testing::PairWithAr(s, 500.0 / 3.0 + i, 40 + i, (i + 1) % 2);
    }
    out.push_back(s);
  }
  return out;
}

// `per_sample` steps for every sample, grouped by sample.
std::vector<StepRecord> MakeSteps(const std::vector<SampleRecord>& samples, int per_sample) {
  std::vector<StepRecord> out;
  for (const SampleRecord& s : samples) {
    for (int k = 0; k < per_sample; ++k) {
      StepRecord st = testing::ChainStep(s.prompt_id, k, 5, k % 6, k % 6 + 1);
      st.turn = s.turn;
      st.t_draft_us = 100.5 + k;
      st.t_verify_us = 2000.25 + k;
      st.t_other_us = 0.125 * k;
      st.draft_depth = k % 2 ? 5 : -1;  // n_accepted <= depth <= n_drafted; -1 = not recorded
      st.n_rollback_events = k % 3;
      st.n_rolled_back = k % 3 == 0 ? -1 : k % 4;  // -1 = not recorded
      st.n_draft_generated = 5 + k;
      st.n_trimmed = k % 2 ? k : -1;
      st.t_draft_prefill_us = k == 0 ? 40.75 : 0;
      out.push_back(st);
    }
  }
  return out;
}

// Every stored field of a record, for comparing a loaded record with the written one (EXPECT_EQ
// on two of these compares field by field and prints both on a difference).
auto Fields(const RunInfo& r) {
  return std::tie(r.started_at, r.specbed_version, r.git_commit, r.build_flags, r.host, r.cpu,
                  r.gpu, r.library_versions_json, r.config_json, r.repro_command);
}
auto Fields(const CaseRecord& c) {
  return std::tie(c.case_key, c.target, c.method, c.method_knobs_json, c.dataset, c.categories,
                  c.prompt_limit, c.temperature, c.top_p, c.top_k, c.seed, c.max_new_tokens,
                  c.batch_size, c.threads, c.dtype, c.device, c.config_json, c.wall_s,
                  c.method_traits_json, c.drafter, c.timing_mode);
}
// Without the paired AR run's fields (compared only where both samples have one).
auto Fields(const SampleRecord& s) {
  return std::tie(s.prompt_id, s.turn, s.category, s.n_prompt_tokens, s.n_output_tokens,
                  s.prefill_ms, s.decode_ms, s.n_steps, s.stop_reason, s.output_hash, s.output_text,
                  s.output_ids_json, s.token_margins_json);
}
// The fields of the throughput rows (the v4 roofline fields aside).
auto Fields(const BenchRecord& b) {
  return std::tie(b.model, b.dtype, b.threads, b.batch_size, b.context_len, b.n_tokens, b.reps,
                  b.tokens_per_s, b.tokens_per_s_std, b.ms_per_step, b.forward_ms_per_step,
                  b.other_ms_per_step, b.n_params);
}
auto Fields(const StepRecord& st) {
  return std::tie(st.prompt_id, st.turn, st.step_idx, st.n_drafted, st.n_accepted, st.n_emitted,
                  st.t_draft_us, st.t_verify_us, st.t_other_us, st.draft_depth,
                  st.n_rollback_events, st.t_adapt_us, st.n_rolled_back, st.n_draft_generated,
                  st.n_trimmed, st.t_draft_prefill_us);
}

void ExpectSameSample(const SampleRecord& a, const SampleRecord& b) {
  EXPECT_EQ(Fields(a), Fields(b));
  EXPECT_EQ(a.has_paired_ar(), b.has_paired_ar());
  if (a.has_paired_ar() && b.has_paired_ar()) {
    EXPECT_EQ(std::tie(a.paired_ar_decode_ms, a.paired_ar_output_tokens, a.paired_ar_first),
              std::tie(b.paired_ar_decode_ms, b.paired_ar_output_tokens, b.paired_ar_first));
  }
}

// Runs one SQL statement on a raw connection (outside the store); returns the error or "".
std::string RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string out = rc == SQLITE_OK ? "" : (err ? err : "error");
  sqlite3_free(err);
  sqlite3_close(db);
  return out;
}

std::string RawQueryText(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* s = nullptr;
  std::string out = "<error>";
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr) == SQLITE_OK &&
      sqlite3_step(s) == SQLITE_ROW) {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    out = text ? text : "<null>";
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return out;
}

TEST(ResultsStore, RoundTripsBenchV4RooflineVerifyAndBandwidthRows) {
  const std::string path = FreshDbPath("bench_v4");
  BenchRecord row = testing::BenchRow("m", "bfloat16", /*n_tokens=*/0, /*reps=*/1, /*speed=*/{});
  row.weight_bytes = 123456789;
  row.bandwidth_gb_s = 21.5;
  row.roofline_fraction = 0.78;
  row.blas_core = "Haswell";
  row.gemv_kernel = "avx512bf16";
  row.huge_page_bytes = int64_t{186} << 20;
  BenchRecord unmeasured = row;  // --bandwidth-mib 0: NaN round-trips
  unmeasured.bandwidth_gb_s = std::numeric_limits<double>::quiet_NaN();
  unmeasured.roofline_fraction = std::numeric_limits<double>::quiet_NaN();
  BenchVerifyRecord v = testing::VerifyPoint("m", /*context_len=*/64, /*n_query=*/16, 3.25, 1.5);
  v.dtype = "float32";
  v.threads = 2;
  v.reps = 5;
  v.gemv_max_rows = 4;
  v.blas_core = "Zen";
  v.gemv_kernel = "x86-64-v4";
  BenchBandwidthRecord b;
  b.threads = 2;
  b.array_bytes = int64_t{256} << 20;
  b.reps = 5;
  b.copy_gb_s = 30.5;
  b.triad_gb_s = 33.25;
  int64_t run_id = 0;
  {
    auto store = ResultsStore::Open(path);
    run_id = store->BeginRun(MakeRun());
    store->WriteBench(run_id, {row});
    store->WriteBench(run_id, {unmeasured});
    store->WriteBenchVerify(run_id, {v, v});
    store->WriteBenchBandwidth(run_id, {b});
    EXPECT_THROW(store->WriteBenchVerify(run_id + 7, {v}), Error);
    EXPECT_THROW(store->WriteBenchBandwidth(run_id + 7, {b}), Error);
  }
  StoreOptions ro;
  ro.read_only = true;
  auto store = ResultsStore::Open(path, ro);
  const auto bench = store->LoadBench(run_id);
  ASSERT_EQ(bench.size(), 2u);
  EXPECT_EQ(bench[0].weight_bytes, 123456789);
  EXPECT_DOUBLE_EQ(bench[0].bandwidth_gb_s, 21.5);
  EXPECT_DOUBLE_EQ(bench[0].roofline_fraction, 0.78);
  EXPECT_EQ(bench[0].blas_core, "Haswell");
  EXPECT_EQ(bench[0].gemv_kernel, "avx512bf16");
  EXPECT_EQ(bench[0].huge_page_bytes, int64_t{186} << 20);
  EXPECT_TRUE(std::isnan(bench[1].bandwidth_gb_s));
  EXPECT_TRUE(std::isnan(bench[1].roofline_fraction));
  const auto verify = store->LoadBenchVerify();
  ASSERT_EQ(verify.size(), 2u);
  EXPECT_EQ(verify[1].n_query, 16);
  EXPECT_EQ(verify[1].context_len, 64);
  EXPECT_EQ(verify[1].threads, 2);
  EXPECT_DOUBLE_EQ(verify[1].forward_ms, 3.25);
  EXPECT_DOUBLE_EQ(verify[1].ratio_to_one, 1.5);
  EXPECT_EQ(verify[1].gemv_max_rows, 4);
  EXPECT_EQ(verify[1].blas_core, "Zen");
  EXPECT_EQ(verify[1].gemv_kernel, "x86-64-v4");
  const auto bw = store->LoadBenchBandwidth(run_id);
  ASSERT_EQ(bw.size(), 1u);
  EXPECT_EQ(bw[0].array_bytes, int64_t{256} << 20);
  EXPECT_DOUBLE_EQ(bw[0].copy_gb_s, 30.5);
  EXPECT_DOUBLE_EQ(bw[0].triad_gb_s, 33.25);
  EXPECT_EQ(store->CountRows("bench_verify"), 2);
  EXPECT_EQ(store->CountRows("bench_bandwidth"), 1);
}

TEST(ResultsStore, RoundTripsEveryRecordTypeAcrossReopen) {
  const std::string path = FreshDbPath("roundtrip");
  RunInfo run = MakeRun();
  CaseRecord c = MakeCase("key-roundtrip");
  std::vector<SampleRecord> samples = MakeSamples(6);
  // Raw bytes must survive: invalid UTF-8 and an embedded NUL from a byte-level tokenizer.
  // Every byte of the literal, the embedded NUL included (sizeof, not a hand count: the count
  // once read past the literal's end, which ASan reports).
  static const char kOddBytes[] = "bad \xFF\xFE utf8 and a \0 nul";
  samples[1].output_text = std::string(kOddBytes, sizeof(kOddBytes) - 1);
  ASSERT_EQ(samples[1].output_text.size(), 23u);
  samples[2].prefill_ms = std::numeric_limits<double>::quiet_NaN();
  std::vector<StepRecord> steps = MakeSteps(samples, 7);
  std::vector<BenchRecord> bench(
      2, testing::BenchRow("tiny-llama", "float32", /*n_tokens=*/128, /*reps=*/5,
                           {123.456, 1.5, /*ms_per_step=*/8.1, 7.9, 0.2}));
  bench[0].threads = 8;
  bench[0].batch_size = 2;
  bench[0].context_len = 512;
  bench[0].n_params = 1100000000;
  bench[1] = bench[0];
  bench[1].context_len = 2048;
  bench[1].tokens_per_s_std = std::numeric_limits<double>::quiet_NaN();

  int64_t run_id = 0, case_id = 0;
  {
    auto store = ResultsStore::Open(path);
    EXPECT_EQ(store->schema_version(), kResultsSchemaVersion);
    EXPECT_EQ(store->path(), path);
    run_id = store->BeginRun(run);
    case_id = store->WriteCase(run_id, c, samples, steps);
    store->WriteBench(run_id, bench);
  }
  for (bool read_only : {false, true}) {
    SCOPED_TRACE(read_only ? "read-only" : "read-write");
    StoreOptions options;
    options.read_only = read_only;
    auto store = ResultsStore::Open(path, options);
    EXPECT_EQ(store->ListRunIds(), std::vector<int64_t>{run_id});
    const auto runs = store->ListRuns();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].run_id, run_id);
    const RunInfo& got = runs[0].info;
    EXPECT_EQ(Fields(got), Fields(run));
    EXPECT_EQ(RawQueryText(path, "SELECT repro_command FROM runs"), run.repro_command);
    EXPECT_EQ(RawQueryText(path,
                           "SELECT cpu || '|' || gpu || '|' || library_versions_json || "
                           "'|' || started_at || '|' || git_commit FROM runs"),
              run.cpu + "|" + run.gpu + "|" + run.library_versions_json + "|" + run.started_at +
                  "|" + run.git_commit);
    auto cases = store->ListCases();
    ASSERT_EQ(cases.size(), 1u);
    EXPECT_EQ(cases[0].case_id, case_id);
    EXPECT_EQ(cases[0].run_id, run_id);
    EXPECT_EQ(cases[0].n_samples, 6);
    EXPECT_EQ(Fields(cases[0].record), Fields(c));

    auto loaded_samples = store->LoadSamples(case_id);
    ASSERT_EQ(loaded_samples.size(), samples.size());
    for (size_t i = 0; i < samples.size(); ++i) {
      SCOPED_TRACE(i);
      if (i == 2) {
        EXPECT_TRUE(std::isnan(loaded_samples[i].prefill_ms));
        loaded_samples[i].prefill_ms = samples[i].prefill_ms;
        EXPECT_TRUE(std::isnan(loaded_samples[i].prefill_ms));
        continue;
      }
      ExpectSameSample(loaded_samples[i], samples[i]);
    }
    EXPECT_EQ(loaded_samples[1].output_text.size(), 23u);  // every byte, the NUL included

    auto loaded_steps = store->LoadSteps(case_id);
    ASSERT_EQ(loaded_steps.size(), steps.size());
    for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(Fields(loaded_steps[i]), Fields(steps[i]));

    auto loaded_bench = store->LoadBench(run_id);
    ASSERT_EQ(loaded_bench.size(), 2u);
    EXPECT_EQ(Fields(loaded_bench[0]), Fields(bench[0]));
    EXPECT_EQ(loaded_bench[1].context_len, 2048);
    EXPECT_TRUE(std::isnan(loaded_bench[1].tokens_per_s_std));
    EXPECT_EQ(store->LoadBench().size(), 2u);
    EXPECT_TRUE(store->LoadBench(run_id + 1).empty());

    EXPECT_EQ(store->CountRows("runs"), 1);
    EXPECT_EQ(store->CountRows("cases"), 1);
    EXPECT_EQ(store->CountRows("samples"), 6);
    EXPECT_EQ(store->CountRows("steps"), 42);
    EXPECT_EQ(store->CountRows("bench"), 2);
  }
}

TEST(ResultsStore, DatabaseIsWalWithVersionAndMeta) {
  const std::string path = FreshDbPath("pragmas");
  ResultsStore::Open(path);
  EXPECT_EQ(RawQueryText(path, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(RawQueryText(path, "PRAGMA user_version"), std::to_string(kResultsSchemaVersion));
  EXPECT_EQ(RawQueryText(path, "SELECT value FROM meta WHERE key = 'format'"), "specbed_results");
  EXPECT_EQ(RawQueryText(path, "SELECT value FROM meta WHERE key = 'schema_version'"),
            std::to_string(kResultsSchemaVersion));
  EXPECT_EQ(RawQueryText(path,
                         "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND "
                         "name = 'cases_by_key' AND sql LIKE '%UNIQUE%'"),
            "1");
  // Reopening an existing database works and keeps the version.
  EXPECT_EQ(ResultsStore::Open(path)->schema_version(), kResultsSchemaVersion);
}

TEST(ResultsStore, WriteCaseTwiceWithSameKeyStoresOneCase) {
  const std::string path = FreshDbPath("twice");
  auto store = ResultsStore::Open(path);
  const int64_t run1 = store->BeginRun(MakeRun());
  const auto samples = MakeSamples(4);
  const int64_t first = store->WriteCase(run1, MakeCase("same"), samples, MakeSteps(samples, 3));
  // Same key again, even from another run with different data: nothing is written.
  const int64_t run2 = store->BeginRun(MakeRun());
  const auto other_samples = MakeSamples(9);
  const int64_t second =
      store->WriteCase(run2, MakeCase("same"), other_samples, MakeSteps(other_samples, 5));
  EXPECT_EQ(first, second);
  EXPECT_EQ(store->CountRows("cases"), 1);
  EXPECT_EQ(store->CountRows("samples"), 4);
  EXPECT_EQ(store->CountRows("steps"), 12);
  ASSERT_EQ(store->ListCases().size(), 1u);
  EXPECT_EQ(store->ListCases()[0].run_id, run1);
  // A different key is a different case.
  EXPECT_NE(store->WriteCase(run2, MakeCase("other"), samples, {}), first);
  EXPECT_EQ(store->CountRows("cases"), 2);
}

TEST(ResultsStore, ResumeSkipsCompletedCases) {
  const std::string path = FreshDbPath("resume");
  const std::vector<std::string> keys = {"case-a", "case-b", "case-c"};
  const auto samples = MakeSamples(2);
  // First sweep completes a and b, then "dies".
  {
    auto store = ResultsStore::Open(path);
    const int64_t run = store->BeginRun(MakeRun());
    for (const auto& key : keys) EXPECT_FALSE(store->HasCompletedCase(key));
    store->WriteCase(run, MakeCase("case-a"), samples, {});
    store->WriteCase(run, MakeCase("case-b"), samples, {});
  }
  // The resumed sweep skips what is stored and does only c.
  auto store = ResultsStore::Open(path);
  const int64_t run = store->BeginRun(MakeRun());
  std::vector<std::string> done_now;
  for (const auto& key : keys) {
    if (store->HasCompletedCase(key)) continue;
    store->WriteCase(run, MakeCase(key), samples, {});
    done_now.push_back(key);
  }
  EXPECT_EQ(done_now, std::vector<std::string>{"case-c"});
  EXPECT_EQ(store->CountRows("runs"), 2);
  EXPECT_EQ(store->CountRows("cases"), 3);
  EXPECT_EQ(store->CountRows("samples"), 6);
  for (const auto& key : keys) EXPECT_TRUE(store->HasCompletedCase(key));
  EXPECT_FALSE(store->HasCompletedCase("case-d"));
  EXPECT_EQ(store->ListCases().back().run_id, run);
}

TEST(ResultsStore, FailureInsideCaseTransactionLeavesNothing) {
  const std::string path = FreshDbPath("rollback");
  auto store = ResultsStore::Open(path);
  const int64_t run = store->BeginRun(MakeRun());
  const auto samples = MakeSamples(4);
  auto steps = MakeSteps(samples, 100);
  // The very last step names a prompt with no sample: found only after everything else is written.
  steps.back().prompt_id = "nope";
  const std::string err = ErrorOf([&] { store->WriteCase(run, MakeCase("k"), samples, steps); });
  EXPECT_CONTAINS(err, path);
  EXPECT_CONTAINS(err, "prompt 'nope'");
  EXPECT_CONTAINS(err, "no sample");
  // Duplicate step index within a sample (a UNIQUE constraint inside the transaction).
  steps = MakeSteps(samples, 100);
  steps.back().step_idx = 0;
  EXPECT_CONTAINS(ErrorOf([&] { store->WriteCase(run, MakeCase("k"), samples, steps); }),
                  "two steps with step_idx 0");
  // Duplicate (prompt, turn) sample.
  auto dup = samples;
  dup.push_back(samples[0]);
  EXPECT_CONTAINS(ErrorOf([&] { store->WriteCase(run, MakeCase("k"), dup, {}); }),
                  "two samples for prompt 'p0' turn 0");
  EXPECT_EQ(store->CountRows("cases"), 0);
  EXPECT_EQ(store->CountRows("samples"), 0);
  EXPECT_EQ(store->CountRows("steps"), 0);
  EXPECT_FALSE(store->HasCompletedCase("k"));
  // The store is still usable and the key is free.
  store->WriteCase(run, MakeCase("k"), samples, MakeSteps(samples, 100));
  EXPECT_EQ(store->CountRows("steps"), 400);
}

TEST(ResultsStore, RejectsBadRecordsWithClearErrors) {
  const std::string path = FreshDbPath("bad_records");
  auto store = ResultsStore::Open(path);
  const int64_t run = store->BeginRun(MakeRun());
  CaseRecord c = MakeCase("k");
  c.dtype = "float64";
  std::string err = ErrorOf([&] { store->WriteCase(run, c, {}, {}); });
  EXPECT_CONTAINS(err, "dtype 'float64'");
  EXPECT_CONTAINS(err, "float32, bfloat16, float16");
  for (const char* bad : {"tpu", "cuda:", "cuda:x"}) {
    c = MakeCase("k");
    c.device = bad;
    EXPECT_CONTAINS(ErrorOf([&] { store->WriteCase(run, c, {}, {}); }),
                    std::string("device '") + bad + "'");
  }
  c = MakeCase("");
  EXPECT_CONTAINS(ErrorOf([&] { store->WriteCase(run, c, {}, {}); }), "empty case_key");
  auto samples = MakeSamples(1);
  samples[0].stop_reason = "eof";
  EXPECT_CONTAINS(ErrorOf([&] { store->WriteCase(run, MakeCase("k"), samples, {}); }),
                  "stop_reason 'eof'");
  err = ErrorOf([&] { store->WriteCase(run + 100, MakeCase("k"), {}, {}); });
  EXPECT_CONTAINS(err, "run_id " + std::to_string(run + 100) + " does not exist");
  EXPECT_CONTAINS(ErrorOf([&] { store->WriteBench(run + 100, {BenchRecord{}}); }),
                  "does not exist");
  err = ErrorOf([&] { store->CountRows("cases; DROP TABLE cases"); });
  EXPECT_CONTAINS(err, "unknown results table");
  EXPECT_CONTAINS(err, "runs, cases, samples, steps, bench");
  EXPECT_CONTAINS(ErrorOf([&] { store->CountRows("sample"); }), "did you mean 'samples'");
  // Steps that cannot happen: more accepted than the drafted depth, a depth beyond the drafted
  // nodes, negative counts.
  samples = MakeSamples(2);
  for (const auto& mutate : std::vector<std::function<void(StepRecord&)>>{
           [](StepRecord& st) { st.n_accepted = 6; },  // n_drafted 5, depth not recorded
           [](StepRecord& st) { st.draft_depth = 2, st.n_accepted = 3; },
           [](StepRecord& st) { st.draft_depth = 6; }, [](StepRecord& st) { st.draft_depth = -2; },
           [](StepRecord& st) { st.n_rollback_events = -1; },
           [](StepRecord& st) { st.n_accepted = -1; }}) {
    auto steps = MakeSteps(samples, 3);
    mutate(steps[4]);
    err = ErrorOf([&] { store->WriteCase(run, MakeCase("k"), samples, steps); });
    EXPECT_CONTAINS(err, "case 'k', step 4 (prompt 'p0' turn 1, step_idx 1)");
    EXPECT_CONTAINS(err, "expected 0 <= n_accepted <= draft_depth <= n_drafted");
  }
  EXPECT_EQ(store->CountRows("cases"), 0);
  EXPECT_EQ(store->CountRows("bench"), 0);
  // A tree step: 12 nodes, 3 deep, 3 accepted.
  auto tree_steps = MakeSteps(samples, 3);
  tree_steps[4].n_drafted = 12;
  tree_steps[4].draft_depth = 3;
  tree_steps[4].n_accepted = 3;
  const int64_t tree_case = store->WriteCase(run, MakeCase("tree"), samples, tree_steps);
  EXPECT_EQ(store->LoadSteps(tree_case)[4].draft_depth, 3);
}

TEST(ResultsStore, StoredResultsAreAppendOnly) {
  const std::string path = FreshDbPath("append_only");
  {
    auto store = ResultsStore::Open(path);
    const int64_t run = store->BeginRun(MakeRun());
    const auto samples = MakeSamples(2);
    store->WriteCase(run, MakeCase("k"), samples, MakeSteps(samples, 2));
    store->WriteBench(run, {BenchRecord{}});
  }
  const std::vector<std::pair<std::string, std::string>> table_columns = {
      {"runs", "host"},
      {"cases", "wall_s"},
      {"samples", "output_text"},
      {"steps", "n_accepted"},
      {"bench", "tokens_per_s"}};
  for (const auto& [table, column] : table_columns) {
    SCOPED_TRACE(table);
    EXPECT_CONTAINS(RawExec(path, "DELETE FROM " + table), "append-only");
    EXPECT_CONTAINS(RawExec(path, "UPDATE " + table + " SET " + column + " = " + column),
                    "append-only");
  }
  auto store = ResultsStore::Open(path);
  EXPECT_EQ(store->CountRows("steps"), 4);
  EXPECT_EQ(store->CountRows("runs"), 1);
}

// A writer SIGKILLed in the middle of WriteCase (with a huge steps vector) leaves no partial case.
TEST(ResultsStore, WriterKilledMidCaseLeavesNoPartialRows) {
  const std::string path = FreshDbPath("killed");
  int64_t run = 0;
  {
    auto store = ResultsStore::Open(path);
    run = store->BeginRun(MakeRun());
  }
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(ready[0]);
    auto store = ResultsStore::Open(path);
    const auto samples = MakeSamples(20);
    const auto steps = MakeSteps(samples, 50000);  // 1M steps: seconds of inserting
    const char byte = 'R';
    if (write(ready[1], &byte, 1) != 1) _exit(3);
    store->WriteCase(run, MakeCase("big"), samples, steps);
    _exit(0);  // reaching this means the parent failed to kill us in time
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  // Wait until the child holds the write lock, i.e. is inside the case transaction.
  sqlite3* probe = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &probe, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
  bool in_transaction = false;
  const int64_t deadline = NowMicros() + 30 * 1000 * 1000;
  while (!in_transaction && NowMicros() < deadline) {
    const int rc = sqlite3_exec(probe, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
    if (rc == SQLITE_BUSY) {
      in_transaction = true;
    } else {
      sqlite3_exec(probe, "ROLLBACK", nullptr, nullptr, nullptr);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  sqlite3_close(probe);
  kill(pid, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(in_transaction) << "child never started its write transaction";
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << "child finished before it was killed; status " << status;

  auto store = ResultsStore::Open(path);
  EXPECT_EQ(store->CountRows("cases"), 0);
  EXPECT_EQ(store->CountRows("samples"), 0);
  EXPECT_EQ(store->CountRows("steps"), 0);
  EXPECT_EQ(store->CountRows("runs"), 1);
  EXPECT_FALSE(store->HasCompletedCase("big"));
  EXPECT_EQ(RawQueryText(path, "PRAGMA integrity_check"), "ok");
  // The resumed run writes the case normally.
  const auto samples = MakeSamples(2);
  store->WriteCase(store->BeginRun(MakeRun()), MakeCase("big"), samples, MakeSteps(samples, 3));
  EXPECT_EQ(store->CountRows("steps"), 6);
}

// Another process holding the write lock: writes wait busy_timeout_ms, then fail clearly; reads
// still work (WAL); after the lock is released writes succeed.
TEST(ResultsStore, LockedDatabaseWaitsThenFailsClearly) {
  const std::string path = FreshDbPath("locked");
  ResultsStore::Open(path)->BeginRun(MakeRun());
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(to_parent[0]);
    close(to_child[1]);
    sqlite3* db = nullptr;
    char status = 'L';
    if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK ||
        sqlite3_exec(db, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr) != SQLITE_OK) {
      status = 'E';
    }
    if (write(to_parent[1], &status, 1) != 1) _exit(3);
    char go = 0;
    if (read(to_child[0], &go, 1) != 1) _exit(4);
    sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr);
    sqlite3_close(db);
    _exit(status == 'L' ? 0 : 2);
  }
  close(to_parent[1]);
  close(to_child[0]);
  char status = 0;
  ASSERT_EQ(read(to_parent[0], &status, 1), 1);
  ASSERT_EQ(status, 'L') << "child could not lock the database";

  StoreOptions options;
  options.busy_timeout_ms = 300;
  auto store = ResultsStore::Open(path, options);  // opening only reads: works while locked
  int64_t t0 = NowMicros();
  std::string err = ErrorOf([&] { store->BeginRun(MakeRun()); });
  int64_t waited_ms = (NowMicros() - t0) / 1000;
  EXPECT_CONTAINS(err, "results database '" + path + "' is locked by another process (waited ");
  EXPECT_GE(waited_ms, 300);
  t0 = NowMicros();
  err = ErrorOf([&] { store->WriteCase(1, MakeCase("k"), MakeSamples(1), {}); });
  EXPECT_CONTAINS(err, "is locked by another process");
  EXPECT_GE((NowMicros() - t0) / 1000, 300);
  // Readers are not blocked by a writer in WAL mode (`specbed summary` during a sweep).
  EXPECT_FALSE(store->HasCompletedCase("k"));
  EXPECT_EQ(store->CountRows("runs"), 1);

  // Release the lock: the same store now writes.
  const char go = 'G';
  ASSERT_EQ(write(to_child[1], &go, 1), 1);
  int child_status = 0;
  ASSERT_EQ(waitpid(pid, &child_status, 0), pid);
  EXPECT_TRUE(WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0);
  close(to_parent[0]);
  close(to_child[1]);
  const int64_t run = store->BeginRun(MakeRun());
  store->WriteCase(run, MakeCase("k"), MakeSamples(1), {});
  EXPECT_TRUE(store->HasCompletedCase("k"));
}

TEST(ResultsStore, UnwritablePathsNameThePath) {
  const std::string file = std::string(SPECBED_TEST_TMPDIR) + "/results_plain_file.txt";
  std::ofstream(file) << "just a file\n";
  for (const std::string& path :
       {file + "/x.db", std::string("/nonexistent_specbed_dir/sub/x.db")}) {
    SCOPED_TRACE(path);
    const std::string err = ErrorOf([&] { ResultsStore::Open(path); });
    EXPECT_CONTAINS(err, "cannot create results database '" + path + "': ");
  }
  EXPECT_CONTAINS(ErrorOf([&] { ResultsStore::Open("/nonexistent_specbed_dir/sub/x.db"); }),
                  "directory '/nonexistent_specbed_dir/sub' does not exist");
  EXPECT_CONTAINS(ErrorOf([&] { ResultsStore::Open(SPECBED_TEST_TMPDIR); }), "is a directory");
}

TEST(ResultsStore, NotADatabaseFileIsRejectedUntouched) {
  const std::string path = std::string(SPECBED_TEST_TMPDIR) + "/results_not_a_db.db";
  const std::string content(4096, 'x');
  std::ofstream(path) << content;
  const std::string err = ErrorOf([&] { ResultsStore::Open(path); });
  EXPECT_CONTAINS(err, "'" + path + "' is not a SQLite database");
  std::ifstream in(path);
  std::stringstream after;
  after << in.rdbuf();
  EXPECT_EQ(after.str(), content);
}

TEST(ResultsStore, ForeignSqliteDatabaseIsRejected) {
  const std::string path = FreshDbPath("foreign");
  ASSERT_EQ(RawExec(path, "CREATE TABLE notes(x TEXT); INSERT INTO notes VALUES ('keep')"), "");
  EXPECT_CONTAINS(ErrorOf([&] { ResultsStore::Open(path); }),
                  "'" + path + "' is a SQLite database but not a SpecBed results database");
  // Someone else's table with a user_version set is rejected as well.
  ASSERT_EQ(RawExec(path, "PRAGMA user_version = 1"), "");
  EXPECT_CONTAINS(ErrorOf([&] { ResultsStore::Open(path); }), "not a SpecBed results database");
  EXPECT_EQ(RawQueryText(path, "PRAGMA journal_mode"), "delete");  // not switched to WAL
}

TEST(ResultsStore, NewerSchemaVersionIsRejected) {
  const std::string path = FreshDbPath("newer");
  ResultsStore::Open(path);
  ASSERT_EQ(RawExec(path, "PRAGMA user_version = " + std::to_string(kResultsSchemaVersion + 1)),
            "");
  for (bool read_only : {false, true}) {
    StoreOptions options;
    options.read_only = read_only;
    const std::string err = ErrorOf([&] { ResultsStore::Open(path, options); });
    EXPECT_CONTAINS(err, "results database '" + path + "' has schema version " +
                             std::to_string(kResultsSchemaVersion + 1) + ", newer than this build");
  }
}

// Schema version 1 exactly as SpecBed wrote it (a frozen copy: the fixture for the migration
// test; never change it).
constexpr const char* kSchemaV1Fixture = R"sql(
PRAGMA journal_mode = WAL;
CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL) STRICT;
CREATE TABLE runs (
  run_id INTEGER PRIMARY KEY, started_at TEXT NOT NULL, specbed_version TEXT NOT NULL,
  git_commit TEXT NOT NULL, build_flags TEXT NOT NULL, host TEXT NOT NULL, cpu TEXT NOT NULL,
  gpu TEXT NOT NULL, library_versions_json TEXT NOT NULL, config_json TEXT NOT NULL,
  repro_command TEXT NOT NULL) STRICT;
CREATE TABLE cases (
  case_id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(run_id),
  case_key TEXT NOT NULL, target TEXT NOT NULL, method TEXT NOT NULL,
  method_knobs_json TEXT NOT NULL, dataset TEXT NOT NULL, categories TEXT NOT NULL,
  prompt_limit INTEGER NOT NULL, temperature REAL, top_p REAL, top_k INTEGER NOT NULL,
  seed INTEGER NOT NULL, max_new_tokens INTEGER NOT NULL, batch_size INTEGER NOT NULL,
  threads INTEGER NOT NULL, dtype TEXT NOT NULL, device TEXT NOT NULL, config_json TEXT NOT NULL,
  wall_s REAL, n_samples INTEGER NOT NULL, n_steps INTEGER NOT NULL,
  completed_at TEXT NOT NULL) STRICT;
CREATE UNIQUE INDEX cases_by_key ON cases(case_key);
CREATE INDEX cases_by_run ON cases(run_id);
CREATE TABLE samples (
  sample_id INTEGER PRIMARY KEY, case_id INTEGER NOT NULL REFERENCES cases(case_id),
  prompt_id TEXT NOT NULL, turn INTEGER NOT NULL, category TEXT NOT NULL,
  n_prompt_tokens INTEGER NOT NULL, n_output_tokens INTEGER NOT NULL, prefill_ms REAL,
  decode_ms REAL, n_steps INTEGER NOT NULL, stop_reason TEXT NOT NULL, output_hash TEXT NOT NULL,
  output_text TEXT NOT NULL, output_ids_json TEXT NOT NULL) STRICT;
CREATE UNIQUE INDEX samples_by_case ON samples(case_id, prompt_id, turn);
CREATE TABLE steps (
  step_id INTEGER PRIMARY KEY, case_id INTEGER NOT NULL REFERENCES cases(case_id),
  sample_id INTEGER NOT NULL REFERENCES samples(sample_id), step_idx INTEGER NOT NULL,
  n_drafted INTEGER NOT NULL, n_accepted INTEGER NOT NULL, n_emitted INTEGER NOT NULL,
  t_draft_us REAL, t_verify_us REAL, t_other_us REAL) STRICT;
CREATE UNIQUE INDEX steps_by_sample ON steps(sample_id, step_idx);
CREATE INDEX steps_by_case ON steps(case_id);
CREATE TABLE bench (
  bench_id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(run_id),
  model TEXT NOT NULL, dtype TEXT NOT NULL, threads INTEGER NOT NULL, batch_size INTEGER NOT NULL,
  context_len INTEGER NOT NULL, n_tokens INTEGER NOT NULL, reps INTEGER NOT NULL,
  tokens_per_s REAL, tokens_per_s_std REAL, ms_per_step REAL, forward_ms_per_step REAL,
  other_ms_per_step REAL, n_params INTEGER NOT NULL) STRICT;
CREATE INDEX bench_by_run ON bench(run_id);
CREATE VIEW steps_v AS
  SELECT st.*, s.prompt_id, s.turn FROM steps st JOIN samples s USING (sample_id);
CREATE TRIGGER samples_no_update BEFORE UPDATE ON samples
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
CREATE TRIGGER steps_no_update BEFORE UPDATE ON steps
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
CREATE TRIGGER cases_no_update BEFORE UPDATE ON cases
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
INSERT INTO meta VALUES ('format', 'specbed_results'), ('schema_version', '1'),
  ('created_at', '2026-11-01T00:00:00Z'), ('created_with_sqlite', '3.40.1');
INSERT INTO runs VALUES (1, '2026-11-01T00:00:00Z', '0.1.0', 'abc', 'Release', 'h', 'cpu', '',
  '{}', '{}', 'specbed run x');
INSERT INTO cases VALUES (1, 1, 'v1case', 'stories260K', 'sps', '{"k":4}', 'tinystories', '', -1,
  0.0, 1.0, 0, 7, 32, 1, 1, 'float32', 'cpu', '{}', 1.5, 1, 2, '2026-11-01T00:00:01Z');
INSERT INTO samples VALUES (1, 1, 'p0', 0, 'story', 5, 9, 1.0, 8.0, 2, 'eos', '0011223344556677',
  'once', '[1,2,3,4,5,6,7,8,9]');
INSERT INTO steps VALUES (1, 1, 1, 0, 4, 4, 5, 10.0, 20.0, 1.0),
                         (2, 1, 1, 1, 4, 2, 3, 10.0, 20.0, 1.0);
PRAGMA user_version = 1;
)sql";

// "name type notnull default" of every column of `table`, in order.
std::vector<std::string> TableColumns(const std::string& path, const std::string& table) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* s = nullptr;
  std::vector<std::string> out;
  sqlite3_prepare_v2(db, ("PRAGMA table_info(" + table + ")").c_str(), -1, &s, nullptr);
  while (sqlite3_step(s) == SQLITE_ROW) {
    std::string col;
    for (int i : {1, 2, 3, 4}) {
      const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
      col += std::string(t ? t : "NULL") + " ";
    }
    out.push_back(col);
  }
  sqlite3_finalize(s);
  sqlite3_close(db);
  return out;
}

TEST(ResultsStore, MigratesSchemaV1ToCurrent) {
  const std::string path = FreshDbPath("v1");
  ASSERT_EQ(RawExec(path, kSchemaV1Fixture), "");
  ASSERT_EQ(RawQueryText(path, "PRAGMA user_version"), "1");

  // A read-only open reads the v1 file as it is: new fields come back as their defaults.
  {
    StoreOptions options;
    options.read_only = true;
    auto store = ResultsStore::Open(path, options);
    EXPECT_EQ(store->schema_version(), 1);
    const auto cases = store->ListCases();
    ASSERT_EQ(cases.size(), 1u);
    EXPECT_EQ(cases[0].record.method, "sps");
    EXPECT_EQ(cases[0].record.method_traits_json, "");
    EXPECT_EQ(cases[0].record.drafter, "");
    EXPECT_EQ(cases[0].record.timing_mode, "");
    EXPECT_EQ(store->LoadSamples(1).at(0).token_margins_json, "");
    EXPECT_FALSE(store->LoadSamples(1).at(0).has_paired_ar());
    const auto steps = store->LoadSteps(1);
    ASSERT_EQ(steps.size(), 2u);
    EXPECT_EQ(steps[1].n_accepted, 2);
    EXPECT_EQ(steps[1].draft_depth, -1);
    EXPECT_EQ(steps[1].n_rollback_events, 0);
  }
  EXPECT_EQ(RawQueryText(path, "PRAGMA user_version"), "1");  // untouched

  // A read-write open migrates in place; old rows keep their values and get the defaults.
  {
    auto store = ResultsStore::Open(path);
    EXPECT_EQ(store->schema_version(), kResultsSchemaVersion);
    EXPECT_EQ(RawQueryText(path, "PRAGMA user_version"), std::to_string(kResultsSchemaVersion));
    EXPECT_EQ(RawQueryText(path, "SELECT value FROM meta WHERE key = 'schema_version'"),
              std::to_string(kResultsSchemaVersion));
    EXPECT_EQ(RawQueryText(path, "SELECT value FROM meta WHERE key = 'created_at'"),
              "2026-11-01T00:00:00Z");
    const auto samples = store->LoadSamples(1);
    ASSERT_EQ(samples.size(), 1u);
    EXPECT_EQ(samples[0].output_ids_json, "[1,2,3,4,5,6,7,8,9]");
    EXPECT_EQ(samples[0].token_margins_json, "");
    EXPECT_FALSE(samples[0].has_paired_ar());  // v4: not paired
    EXPECT_TRUE(std::isnan(samples[0].paired_ar_decode_ms));
    EXPECT_EQ(store->ListCases().at(0).record.timing_mode, "");
    EXPECT_EQ(RawQueryText(path, "SELECT count(*) FROM samples WHERE paired_ar_decode_ms IS NULL"),
              "1");
    const auto steps = store->LoadSteps(1);
    ASSERT_EQ(steps.size(), 2u);
    EXPECT_EQ(steps[0].n_drafted, 4);
    EXPECT_EQ(steps[0].draft_depth, -1);
    EXPECT_EQ(steps[0].n_rollback_events, 0);
    EXPECT_EQ(steps[0].t_adapt_us, 0);
    EXPECT_EQ(steps[0].n_trimmed, -1);  // v10 columns of migrated rows: not recorded
    EXPECT_EQ(steps[0].t_draft_prefill_us, -1);
    EXPECT_EQ(store->ListCases().at(0).record.drafter, "");
    EXPECT_TRUE(store->ListTrainRuns().empty());
    // New cases carry the v2 fields.
    auto new_samples = MakeSamples(2);
    auto new_steps = MakeSteps(new_samples, 4);
    const int64_t case_id = store->WriteCase(1, MakeCase("v2case"), new_samples, new_steps);
    const auto cases = store->ListCases();
    ASSERT_EQ(cases.size(), 2u);
    EXPECT_EQ(Fields(cases[1].record), Fields(MakeCase("v2case")));
    const auto loaded_samples = store->LoadSamples(case_id);
    ASSERT_EQ(loaded_samples.size(), 2u);
    for (size_t i = 0; i < 2; ++i) ExpectSameSample(loaded_samples[i], new_samples[i]);
    const auto loaded_steps = store->LoadSteps(case_id);
    ASSERT_EQ(loaded_steps.size(), new_steps.size());
    for (size_t i = 0; i < new_steps.size(); ++i) {
      EXPECT_EQ(Fields(loaded_steps[i]), Fields(new_steps[i]));
    }
  }
  // Still append-only, new columns included; reopening does not migrate again.
  EXPECT_CONTAINS(RawExec(path, "UPDATE steps SET draft_depth = 1"), "append-only");
  EXPECT_CONTAINS(RawExec(path, "UPDATE samples SET token_margins_json = '[]'"), "append-only");
  EXPECT_EQ(ResultsStore::Open(path)->schema_version(), kResultsSchemaVersion);
  EXPECT_EQ(
      RawQueryText(path, "SELECT count(*) FROM steps_v WHERE case_id = 1 AND draft_depth = -1"),
      "2");  // the view shows the new columns

  // The migrated file has the same columns (names, types, NOT NULL, defaults, order) as a new one.
  const std::string fresh = FreshDbPath("v2_fresh");
  ResultsStore::Open(fresh);
  for (const std::string table :
       {"meta", "runs", "cases", "samples", "steps", "bench", "bench_verify", "bench_bandwidth",
        "train_runs", "train_log", "train_eval", "serve_cells", "serve_requests", "serve_steps"}) {
    SCOPED_TRACE(table);
    EXPECT_EQ(TableColumns(path, table), TableColumns(fresh, table));
  }
  // Every step field (results/record_schema.h) and the three keys step_id, case_id, sample_id.
  EXPECT_EQ(TableColumns(fresh, "steps").size(), StepFields().size() + 3);
}

TEST(ResultsStore, ReadOnlyStoreRefusesWritesAndMissingFiles) {
  const std::string path = FreshDbPath("read_only");
  StoreOptions options;
  options.read_only = true;
  EXPECT_CONTAINS(ErrorOf([&] { ResultsStore::Open(path, options); }),
                  "results database '" + path + "' does not exist");
  ResultsStore::Open(path)->BeginRun(MakeRun());
  auto store = ResultsStore::Open(path, options);
  EXPECT_EQ(store->CountRows("runs"), 1);
  EXPECT_CONTAINS(ErrorOf([&] { store->BeginRun(MakeRun()); }), "opened read-only");
  EXPECT_CONTAINS(ErrorOf([&] { store->WriteCase(1, MakeCase("k"), {}, {}); }), "opened read-only");
  EXPECT_CONTAINS(ErrorOf([&] { store->WriteBench(1, {}); }), "opened read-only");
}

// Every column of every table must be documented (as `name`) in results/README.md.
TEST(ResultsStore, ReadmeDocumentsEveryColumn) {
  const std::string path = FreshDbPath("readme");
  ResultsStore::Open(path);
  std::ifstream in(std::string(SPECBED_SOURCE_DIR) + "/results/README.md");
  ASSERT_TRUE(in) << "results/README.md missing";
  std::stringstream readme;
  readme << in.rdbuf();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  int n_columns = 0;
  for (const std::string table :
       {"meta", "runs", "cases", "samples", "steps", "bench", "bench_verify", "bench_bandwidth",
        "train_runs", "train_log", "train_eval", "serve_cells", "serve_requests", "serve_steps"}) {
    sqlite3_stmt* s = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db, ("PRAGMA table_info(" + table + ")").c_str(), -1, &s, nullptr),
              SQLITE_OK);
    while (sqlite3_step(s) == SQLITE_ROW) {
      const std::string column = reinterpret_cast<const char*>(sqlite3_column_text(s, 1));
      ++n_columns;
      EXPECT_NE(readme.str().find("`" + column + "`"), std::string::npos)
          << table << "." << column << " is not documented in results/README.md";
    }
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
  EXPECT_GT(n_columns, 60);
}

// Thousands of steps per case must write fast (one transaction, reused prepared statements).
TEST(ResultsStore, WritesManyStepsFast) {
  const std::string path = FreshDbPath("speed");
  auto store = ResultsStore::Open(path);
  const int64_t run = store->BeginRun(MakeRun());
  const auto samples = MakeSamples(80);
  const auto steps = MakeSteps(samples, 2500);  // 200k steps
  const int64_t t0 = NowMicros();
  const int64_t case_id = store->WriteCase(run, MakeCase("speed"), samples, steps);
  const double write_s = (NowMicros() - t0) / 1e6;
  const int64_t t1 = NowMicros();
  const auto loaded = store->LoadSteps(case_id);
  const double load_s = (NowMicros() - t1) / 1e6;
  ASSERT_EQ(loaded.size(), steps.size());
  EXPECT_EQ(Fields(loaded[123457]), Fields(steps[123457]));
  std::printf("[ perf ] WriteCase: %zu steps in %.3f s = %.0f steps/s; LoadSteps: %.0f steps/s\n",
              steps.size(), write_s, steps.size() / write_s, steps.size() / load_s);
  RecordProperty("write_steps_per_s", static_cast<int>(steps.size() / write_s));
  // Generous bound (shared 2-core machine); a statement-per-transaction write would be ~100x
  // slower.
  EXPECT_LT(write_s, 20.0);
}

}  // namespace
}  // namespace specbed

namespace specbed {
namespace {

// Runs `fn` in a child process that cannot bypass file permissions (as root it drops to the
// unprivileged uid/gid 65534 first); returns the specbed::Error text the child reported.
std::string ErrorOfUnprivileged(const std::function<void()>& fn) {
  int fds[2];
  if (pipe(fds) != 0) return "<pipe failed>";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    std::string out;
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) {
      out = "<cannot drop privileges>";
    } else {
      out = ErrorOf(fn);
    }
    const ssize_t written = write(fds[1], out.data(), out.size());
    (void)written;
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return out;
}

// A writable database in a read-only folder: SQLite cannot create its journal there, and the
// error says the folder is the problem (it used to say the database was not writable); a new
// database in that folder names the folder's permission, not "No such file or directory".
TEST(ResultsStore, ReadOnlyFolderErrorNamesTheFolder) {
  char tmpl[] = "/tmp/specbed_rofolder_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const std::string path = dir + "/results.db";
  {
    auto store = ResultsStore::Open(path);
    store->BeginRun(MakeRun());
  }
  ASSERT_EQ(chmod(path.c_str(), 0666), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0555), 0);
  const std::string existing =
      ErrorOfUnprivileged([&] { ResultsStore::Open(path)->BeginRun(MakeRun()); });
  EXPECT_CONTAINS(existing, "results database '" + path + "'");
  EXPECT_CONTAINS(existing, "its folder '" + dir + "' is not writable");
  EXPECT_CONTAINS(existing, "journal");
  const std::string fresh = ErrorOfUnprivileged([&] { ResultsStore::Open(dir + "/new.db"); });
  EXPECT_CONTAINS(fresh, "cannot create results database '" + dir + "/new.db'");
  EXPECT_CONTAINS(fresh, "folder '" + dir + "' is not writable");
  EXPECT_EQ(fresh.find("No such file"), std::string::npos) << fresh;
  chmod(dir.c_str(), 0755);
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace specbed
