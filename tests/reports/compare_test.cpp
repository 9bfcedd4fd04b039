// The regression gate's library (reports/compare.h) on synthetic databases: identical databases
// pass; a candidate whose method is consistently slower relative to its own AR fails the speed
// gate with an interval below 1; a candidate with lower τ at T = 0 fails the τ gate while the same
// loss at T = 1 is only reported; a missing case fails; AR's absolute speed is not gated unless
// asked. Deterministic (fixed bootstrap seed): false-failure rate 0.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "base/error.h"
#include "reports/compare.h"
#include "tests/reports/synthetic_db.h"

namespace specbed {
namespace {

using testing::FreshDbPath;
using testing::Sample;
using testing::Step;
using testing::TestCase;
using testing::TestRun;

// AR and a speculative case at T = 0 and T = 1 on 8 prompts. The method's decode time per prompt
// is `method_scale` x AR's (with a small per-prompt wobble); each prompt takes 4 steps emitting
// `emit` tokens each.
// `engine`: when given, each case's config_json is a sweep case's ({"repeat": 0, method, T})
// with this engine block (what the runner records beside the configuration) if non-null.
void WriteDb(const std::string& path, double method_scale, int64_t emit_t0, int64_t emit_t1,
             bool with_t1 = true, int64_t threads = 1, const std::string& knobs = "",
             const nlohmann::json* engine = nullptr) {
  auto store = ResultsStore::Open(path);
  const int64_t run = store->BeginRun(TestRun());
  for (double t : {0.0, 1.0}) {
    if (t == 1.0 && !with_t1) continue;
    std::vector<SampleRecord> ar, spec;
    std::vector<StepRecord> steps;
    const int64_t emit = t == 0 ? emit_t0 : emit_t1;
    for (int p = 0; p < 8; ++p) {
      const std::string id = "p" + std::to_string(p);
      const double ar_ms = 100 + 10 * p;
      ar.push_back(Sample(id, 4 * emit + 1, 2, ar_ms, 4 * emit, "max_new_tokens"));
      const double wobble = 1.0 + 0.02 * ((p % 3) - 1);
      spec.push_back(
          Sample(id, 4 * emit + 1, 2, ar_ms * method_scale * wobble, 4, "max_new_tokens"));
      for (int k = 0; k < 4; ++k) steps.push_back(Step(id, k, 4, emit - 1, emit));
    }
    const std::string suffix = t == 0 ? "0" : "1";
    // The case key hashes the configuration: another thread count or knobs is another key.
    const std::string key_suffix =
        suffix + (threads == 1 ? "" : "_t" + std::to_string(threads)) + knobs;
    CaseRecord ar_case = TestCase("ar" + key_suffix, "ar", t);
    CaseRecord spec_case = TestCase("spec" + key_suffix, "fake", t);
    ar_case.threads = spec_case.threads = threads;
    if (!knobs.empty()) spec_case.method_knobs_json = knobs;
    if (engine != nullptr) {
      for (CaseRecord* c : {&ar_case, &spec_case}) {
        nlohmann::json config = {{"repeat", 0}, {"method", c->method}, {"temperature", t}};
        if (!engine->is_null()) config["engine"] = *engine;
        c->config_json = config.dump();
      }
    }
    store->WriteCase(run, ar_case, ar, {});
    store->WriteCase(run, spec_case, spec, steps);
  }
}

CompareResult Compare(const std::string& a, const std::string& b) {
  CompareOptions o;
  o.speedup_threshold = 0.10;
  return CompareDatabases(a, b, o);
}

const CompareRow& RowOf(const CompareResult& r, const std::string& method, double t) {
  for (const CompareRow& row : r.rows) {
    if (row.method == method && row.temperature == t) return row;
  }
  ADD_FAILURE() << "no row " << method << " T=" << t;
  return r.rows.front();
}

TEST(Compare, IdenticalDatabasesPass) {
  const std::string a = FreshDbPath("cmp_a"), b = FreshDbPath("cmp_b");
  WriteDb(a, 0.5, 3, 3);
  WriteDb(b, 0.5, 3, 3);
  const CompareResult r = Compare(a, b);
  EXPECT_FALSE(r.regressed);
  ASSERT_EQ(r.rows.size(), 4u);
  const CompareRow& spec = RowOf(r, "fake", 0);
  EXPECT_NEAR(spec.speed_baseline, 2.0, 0.01);  // AR / method ~ 1 / 0.5
  EXPECT_DOUBLE_EQ(spec.speed_ratio, 1.0);
  EXPECT_DOUBLE_EQ(spec.tau_baseline, 3.0);
  EXPECT_EQ(spec.n_prompts, 8);
  EXPECT_NE(FormatCompareTable(r).find("verdict: no regression"), std::string::npos);
}

TEST(Compare, ConsistentlySlowerMethodFailsTheSpeedGate) {
  const std::string a = FreshDbPath("cmp_slow_a"), b = FreshDbPath("cmp_slow_b");
  WriteDb(a, 0.5, 3, 3);
  WriteDb(b, 0.8, 3, 3);  // speedup 1.25 instead of 2: ratio 0.625
  const CompareResult r = Compare(a, b);
  EXPECT_TRUE(r.regressed);
  const CompareRow& spec = RowOf(r, "fake", 0);
  EXPECT_NEAR(spec.speed_ratio, 0.625, 1e-3);
  EXPECT_LT(spec.speed_ratio_ci.hi, 0.9);
  EXPECT_TRUE(spec.speed_regressed);
  EXPECT_FALSE(spec.tau_regressed);
  // A 5% slowdown stays within the 10% threshold.
  const std::string c = FreshDbPath("cmp_slow_c");
  WriteDb(c, 0.525, 3, 3);
  EXPECT_FALSE(Compare(a, c).regressed);
}

TEST(Compare, TauLossFailsAtTemperatureZeroOnly) {
  const std::string a = FreshDbPath("cmp_tau_a"), b = FreshDbPath("cmp_tau_b");
  WriteDb(a, 0.5, 3, 3);
  WriteDb(b, 0.5, 3, 2);  // τ lower at T = 1 only: reported, not gated
  CompareResult r = Compare(a, b);
  EXPECT_FALSE(r.regressed);
  EXPECT_DOUBLE_EQ(RowOf(r, "fake", 1).tau_candidate, 2.0);
  const std::string c = FreshDbPath("cmp_tau_c");
  WriteDb(c, 0.5, 2, 3);  // τ lower at T = 0
  r = Compare(a, c);
  EXPECT_TRUE(r.regressed);
  EXPECT_TRUE(RowOf(r, "fake", 0).tau_regressed);
}

TEST(Compare, MissingCaseFailsAndArSpeedIsGatedOnlyOnRequest) {
  const std::string a = FreshDbPath("cmp_miss_a"), b = FreshDbPath("cmp_miss_b");
  WriteDb(a, 0.5, 3, 3);
  WriteDb(b, 0.5, 3, 3, /*with_t1=*/false);
  CompareResult r = Compare(a, b);
  EXPECT_TRUE(r.regressed);
  EXPECT_EQ(r.unmatched_baseline.size(), 2u);
  EXPECT_TRUE(r.unmatched_candidate.empty());
  // Identical AR speeds: the AR rows never regress; the option only turns the gate on.
  CompareOptions o;
  o.gate_absolute_speed = true;
  EXPECT_FALSE(CompareDatabases(a, a, o).regressed);
  EXPECT_THROW(CompareDatabases(a, FreshDbPath("cmp_none"), o), Error);
  // Databases without cases are an error, not "no regression".
  const std::string empty = FreshDbPath("cmp_empty");
  ResultsStore::Open(empty);
  try {
    CompareDatabases(empty, empty, o);
    ADD_FAILURE() << "two empty databases compared";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds no cases"), std::string::npos) << e.what();
  }
  EXPECT_THROW(CompareDatabases(a, empty, o), Error);
}

// A changed setting (threads) leaves every baseline case unmatched: each one names the closest
// candidate case and the setting that differs; the table prints it.
TEST(Compare, UnmatchedCasesNameTheSettingsThatDiffer) {
  const std::string a = FreshDbPath("cmp_diff_a"), b = FreshDbPath("cmp_diff_b");
  WriteDb(a, 0.5, 3, 3);
  WriteDb(b, 0.5, 3, 3, true, /*threads=*/2);
  const CompareResult r = Compare(a, b);
  EXPECT_TRUE(r.regressed);
  ASSERT_EQ(r.unmatched_baseline.size(), 4u);
  ASSERT_EQ(r.unmatched_baseline_diffs.size(), 4u);
  for (const std::string& d : r.unmatched_baseline_diffs) {
    EXPECT_NE(d.find("differs in: threads 1 → 2"), std::string::npos) << d;
    EXPECT_EQ(d.find("temperature"), std::string::npos) << d;  // the same-T case is the closest
  }
  const std::string table = FormatCompareTable(r);
  EXPECT_NE(table.find("differs in: threads 1 → 2"), std::string::npos) << table;
  EXPECT_NE(CompareJson(r).find("unmatched_baseline_diffs"), std::string::npos);
}

// The engine block the runner records with every case (forward path, graphs, capture counts) is
// not part of a case's identity: a baseline written before it matches a candidate that has it.
TEST(Compare, TheRecordedEngineIsNotPartOfTheMatch) {
  const std::string a = FreshDbPath("cmp_engine_a"), b = FreshDbPath("cmp_engine_b");
  const nlohmann::json none;
  const nlohmann::json engine = {{"forward_path", "rows"},
                                 {"graphs", "off"},
                                 {"graphs_timed", {{"captures", 0}, {"replays", 0}}}};
  WriteDb(a, 0.5, 3, 3, true, 1, "", &none);
  WriteDb(b, 0.5, 3, 3, true, 1, "", &engine);
  const CompareResult r = Compare(a, b);
  EXPECT_FALSE(r.regressed) << FormatCompareTable(r);
  EXPECT_TRUE(r.unmatched_baseline.empty());
  EXPECT_EQ(r.rows.size(), 4u);
}

// --match workload pairs cases whose knobs differ: the row shows both sides' knobs.
TEST(Compare, WorkloadMatchShowsBothSidesKnobs) {
  const std::string a = FreshDbPath("cmp_knobs_a"), b = FreshDbPath("cmp_knobs_b");
  WriteDb(a, 0.5, 3, 3);
  WriteDb(b, 0.5, 3, 3, true, 1, R"({"k":8})");
  CompareOptions o;
  o.match = "workload";
  const CompareResult r = CompareDatabases(a, b, o);
  EXPECT_TRUE(r.unmatched_baseline.empty());
  const CompareRow& row = RowOf(r, "fake", 0);
  EXPECT_NE(row.label.find("fake(k=4)"), std::string::npos) << row.label;
  EXPECT_NE(row.candidate_label.find("fake(k=8)"), std::string::npos) << row.candidate_label;
  const std::string table = FormatCompareTable(r);
  EXPECT_NE(table.find("| candidate: fake(k=8)"), std::string::npos) << table;
}

}  // namespace
}  // namespace specbed
