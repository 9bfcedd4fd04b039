// Tests for results/merge.h: merging shard databases copies runs, cases, samples, steps and bench
// rows with remapped ids (steps stay attached to their own samples), never duplicates a case_key,
// adds nothing when the same input is merged again, and fails naming a missing or bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "results/merge.h"
#include "results/store.h"
#include "tests/common/results_records.h"
#include "tests/common/test_util.h"

namespace specbed {
namespace {

using testing::ErrorOf;

// Every count of a merge, for comparing a summary with the expected one in one EXPECT_EQ (which
// prints both on a difference).
auto Counts(const MergeSummary& s) {
  return std::make_tuple(s.runs_copied, s.cases_copied, s.cases_skipped, s.samples_copied,
                         s.steps_copied, s.bench_copied);
}

std::string FreshPath(const std::string& name) {
  return testing::ScratchDb("merge_" + name);
}

RunInfo MakeRun(const std::string& started_at) {
  RunInfo r;
  r.started_at = started_at;
  r.host = "host-" + started_at;
  r.config_json = R"({"name":"shard"})";
  r.repro_command = "specbed sweep x.json --shard 0/2";
  return r;
}

CaseRecord Case(const std::string& key) {
  CaseRecord c = testing::CpuCase(key, "stories260K", "sps", 0.5, 8);
  c.method_knobs_json = R"({"gamma":2})";
  c.seed = 7;
  c.config_json = R"({"key":")" + key + R"("})";
  return c;
}

// `n` samples whose texts and step timings carry `tag`, so copied rows can be told apart.
void WriteTaggedCase(ResultsStore& store, int64_t run_id, const std::string& key, int n,
                     double tag) {
  std::vector<SampleRecord> samples;
  std::vector<StepRecord> steps;
  for (int i = 0; i < n; ++i) {
    SampleRecord s = testing::Answer("p" + std::to_string(i), 3, 2, tag + i, 2, "eos");
    s.output_text = key + "/" + s.prompt_id;
    s.output_ids_json = "[1,2]";
    samples.push_back(s);
    for (int k = 0; k < 2; ++k) {
      StepRecord st = testing::ChainStep(s.prompt_id, k, 2, 1, 2);
      st.draft_depth = 2;
      st.t_verify_us = tag * 100 + i * 10 + k;
      steps.push_back(st);
    }
  }
  store.WriteCase(run_id, Case(key), samples, steps);
}

TEST(MergeResults, CopiesShardsOnceWithRemappedIds) {
  const std::string a_path = FreshPath("a"), b_path = FreshPath("b"), out_path = FreshPath("out");
  {
    auto a = ResultsStore::Open(a_path);
    const int64_t run = a->BeginRun(MakeRun("2026-01-01T00:00:00Z"));
    WriteTaggedCase(*a, run, "k1", 2, 1.0);
    WriteTaggedCase(*a, run, "k2", 3, 2.0);
    BenchRecord bench;
    bench.model = "stories260K";
    bench.dtype = "float32";
    bench.tokens_per_s = 1234;
    a->WriteBench(run, {bench});
    auto b = ResultsStore::Open(b_path);
    b->BeginRun(MakeRun("2026-01-01T00:00:01Z"));  // a run with nothing to copy
    const int64_t run_b = b->BeginRun(MakeRun("2026-01-01T00:00:02Z"));
    WriteTaggedCase(*b, run_b, "k2", 1, 9.0);  // same key as in a: skipped
    WriteTaggedCase(*b, run_b, "k3", 1, 3.0);
  }
  auto out = ResultsStore::Open(out_path);
  // Occupy run id 1 and case ids so the copied ones must be remapped.
  const int64_t own_run = out->BeginRun(MakeRun("2025-12-31T00:00:00Z"));
  WriteTaggedCase(*out, own_run, "k0", 1, 0.0);

  const MergeSummary sa = MergeResults(*out, a_path);
  EXPECT_EQ(Counts(sa), Counts({/*runs_copied=*/1, /*cases_copied=*/2, /*cases_skipped=*/0,
                                /*samples_copied=*/5, /*steps_copied=*/10, /*bench_copied=*/1}));
  const MergeSummary sb = MergeResults(*out, b_path);
  EXPECT_EQ(sb.runs_copied, 1) << "the run with nothing new is not copied";
  EXPECT_EQ(sb.cases_copied, 1);
  EXPECT_EQ(sb.cases_skipped, 1);

  EXPECT_EQ(out->CountRows("runs"), 3);
  EXPECT_EQ(out->CountRows("cases"), 4);
  EXPECT_EQ(out->CountRows("samples"), 1 + 5 + 1);
  EXPECT_EQ(out->CountRows("steps"), 2 * 7);
  EXPECT_EQ(out->CountRows("bench"), 1);
  std::map<std::string, int64_t> run_of;
  for (const auto& c : out->ListCases()) {
    run_of[c.record.case_key] = c.run_id;
    EXPECT_EQ(c.record.config_json, R"({"key":")" + c.record.case_key + R"("})");
    const auto samples = out->LoadSamples(c.case_id);
    const auto steps = out->LoadSteps(c.case_id);
    ASSERT_EQ(steps.size(), 2 * samples.size()) << c.record.case_key;
    for (size_t i = 0; i < samples.size(); ++i) {
      EXPECT_EQ(samples[i].output_text, c.record.case_key + "/p" + std::to_string(i));
      const double tag = samples[i].decode_ms - static_cast<double>(i);
      for (int k = 0; k < 2; ++k) {
        EXPECT_EQ(steps[2 * i + k].prompt_id, samples[i].prompt_id);
        EXPECT_EQ(steps[2 * i + k].t_verify_us, tag * 100 + i * 10 + k);
      }
    }
  }
  ASSERT_EQ(run_of.size(), 4u);
  EXPECT_EQ(run_of["k1"], run_of["k2"]);
  EXPECT_NE(run_of["k1"], own_run);
  EXPECT_NE(run_of["k3"], run_of["k1"]);
  EXPECT_EQ(out->LoadSamples(out->ListCases()[2].case_id)[0].decode_ms, 2.0)
      << "k2 comes from a (the first input), not b";

  // Merging the same inputs again adds nothing at all.
  const MergeSummary again = MergeResults(*out, a_path);
  EXPECT_EQ(again.runs_copied + again.cases_copied + again.bench_copied, 0);
  EXPECT_EQ(again.cases_skipped, 2);
  MergeResults(*out, b_path);
  EXPECT_EQ(out->CountRows("runs"), 3);
  EXPECT_EQ(out->CountRows("cases"), 4);
  EXPECT_EQ(out->CountRows("bench"), 1);
}

TEST(MergeResults, BadInputsFailNamingTheFile) {
  const std::string out_path = FreshPath("bad_out");
  auto out = ResultsStore::Open(out_path);
  const std::string missing = std::string(SPECBED_TEST_TMPDIR) + "/merge_missing.db";
  std::remove(missing.c_str());
  EXPECT_NE(ErrorOf([&] { MergeResults(*out, missing); }).find(missing), std::string::npos);
  const std::string junk = std::string(SPECBED_TEST_TMPDIR) + "/merge_junk.db";
  std::ofstream(junk) << "not a database at all, just text long enough to be read as a header";
  const std::string e = ErrorOf([&] { MergeResults(*out, junk); });
  EXPECT_NE(e.find(junk), std::string::npos) << e;
  EXPECT_NE(e.find("not a SQLite database"), std::string::npos) << e;
  EXPECT_NE(ErrorOf([&] { MergeResults(*out, out_path); }).find("into itself"), std::string::npos);
  EXPECT_EQ(out->CountRows("runs"), 0);
}

}  // namespace
}  // namespace specbed
