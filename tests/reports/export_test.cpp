// Tests for `specbed export` (reports/export.h) on the synthetic summary database
// (tests/reports/synthetic_db.h: 5 cases in 2 runs, one tree case that diverges from AR, one case
// without a baseline): the cases CSV has one row per case and every cell equals the number of
// `summary --json` at the column's dotted path (intervals as .lo/.hi, JSON-text columns equal as
// JSON), CSV quoting, the samples and steps tables (row counts = stored rows; the header = every
// field of results/record_schema.h), the JSON forms,
// and the errors for unknown formats and tables.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include <sqlite3.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "metrics/vllm_metrics.h"
#include "reports/export.h"
#include "results/record_schema.h"
#include "tests/reports/synthetic_db.h"

namespace specbed {
namespace {

using Json = nlohmann::json;
using testing::FreshDbPath;
using testing::WriteSummaryDb;

// RFC 4180 parser: rows of cells.
std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string cell;
  bool quoted = false, any = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        cell += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cell += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      rows.back().push_back(cell);
      cell.clear();
    } else if (c == '\n') {
      rows.back().push_back(cell);
      cell.clear();
      rows.emplace_back();
    } else {
      cell += c;
    }
    any = true;
  }
  if (any && rows.back().empty()) rows.pop_back();
  return rows;
}

// The value of the summary JSON case at a CSV column's dotted path ("speedup.geomean_ci.lo" ->
// ["speedup"]["geomean_ci"][0]); `found` false when the path does not exist.
Json At(const Json& c, const std::string& column, bool* found) {
  const Json* j = &c;
  size_t start = 0;
  *found = true;
  while (start <= column.size()) {
    const size_t dot = column.find('.', start);
    const std::string part = column.substr(start, dot == std::string::npos ? dot : dot - start);
    if (j->is_array() && (part == "lo" || part == "hi")) {
      j = &(*j)[part == "lo" ? 0 : 1];
    } else if (j->is_object() && j->contains(part)) {
      j = &(*j)[part];
    } else if (j->is_null()) {
      return nullptr;  // e.g. speedup.* of a case without a baseline
    } else {
      *found = false;
      return nullptr;
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return *j;
}

TEST(Export, CasesCsvEqualsSummaryJson) {
  const std::string db = FreshDbPath("export_cases");
  WriteSummaryDb(db);
  const Summary summary = BuildSummary(db);
  const Json doc = Json::parse(SummaryJson(summary));
  const auto rows = ParseCsv(ExportResults(summary, ExportTable::kCases, ExportFormat::kCsv));
  ASSERT_EQ(rows.size(), 1 + doc["cases"].size());  // header + one row per case
  ASSERT_EQ(doc["cases"].size(), 5u);
  const std::vector<std::string>& header = rows[0];
  for (const char* needed :
       {"case_id", "method", "knobs", "tau", "decode_tokens_per_s", "speedup.geomean",
        "speedup.geomean_ci.lo", "speedup.geomean_ci.hi", "speedup.total_ratio_ci.hi",
        "speedup.spec_bench", "exact_match.rate", "acceptance.max_depth", "draft_fraction",
        "acceptance_rate", "mean_acceptance_length"}) {
    EXPECT_NE(std::find(header.begin(), header.end(), needed), header.end()) << needed;
  }
  size_t compared_numbers = 0;
  for (size_t r = 1; r < rows.size(); ++r) {
    ASSERT_EQ(rows[r].size(), header.size()) << "row " << r;
    const Json& c = doc["cases"][r - 1];
    for (size_t k = 0; k < header.size(); ++k) {
      bool found = false;
      const Json want = At(c, header[k], &found);
      const std::string& cell = rows[r][k];
      SCOPED_TRACE("case " + c["case_id"].dump() + " column " + header[k] + " cell '" + cell + "'");
      if (!found || want.is_null()) {
        EXPECT_EQ(cell, "");
      } else if (want.is_number()) {
        ASSERT_NE(cell, "");
        EXPECT_EQ(Json::parse(cell), want);  // same number, exactly (round-trip form)
        ++compared_numbers;
      } else if (want.is_string()) {
        EXPECT_EQ(cell, want.get<std::string>());
      } else if (want.is_boolean()) {
        EXPECT_EQ(cell, want.get<bool>() ? "true" : "false");
      } else {
        ASSERT_NE(cell, "");
        EXPECT_EQ(Json::parse(cell), want);  // JSON-text column
      }
    }
  }
  EXPECT_GT(compared_numbers, 100u);
  // The tree case (3) and the no-baseline case (5).
  const auto col = [&](const std::string& name) {
    return std::find(header.begin(), header.end(), name) - header.begin();
  };
  EXPECT_EQ(rows[3][col("method")], "tree");
  EXPECT_EQ(Json::parse(rows[3][col("knobs")]), Json::parse(R"({"depth":4,"topk":2})"));
  EXPECT_NE(rows[3][col("speedup.geomean")], "");
  EXPECT_EQ(rows[5][col("speedup.geomean")], "");
}

TEST(Export, SamplesStepsJsonAndErrors) {
  const std::string db = FreshDbPath("export_rows");
  WriteSummaryDb(db);
  const Summary summary = BuildSummary(db);
  auto store = ResultsStore::Open(db);
  size_t n_samples = 0, n_steps = 0;
  for (const auto& c : store->ListCases()) {
    n_samples += store->LoadSamples(c.case_id).size();
    n_steps += store->LoadSteps(c.case_id).size();
  }
  ASSERT_GT(n_steps, 0u);
  const auto samples = ParseCsv(ExportResults(summary, ExportTable::kSamples, ExportFormat::kCsv));
  EXPECT_EQ(samples.size(), 1 + n_samples);
  EXPECT_EQ(samples[0][0], "case_id");
  // "once upon a time" has no comma; output ids "[1,2,3]" do: quoted and read back whole.
  const auto ids_col = std::find(samples[0].begin(), samples[0].end(), "output_ids_json");
  ASSERT_NE(ids_col, samples[0].end());
  EXPECT_EQ(samples[1][ids_col - samples[0].begin()].front(), '[');
  const auto steps = ParseCsv(ExportResults(summary, ExportTable::kSteps, ExportFormat::kCsv));
  EXPECT_EQ(steps.size(), 1 + n_steps);
  const Json steps_json =
      Json::parse(ExportResults(summary, ExportTable::kSteps, ExportFormat::kJson));
  ASSERT_EQ(steps_json.size(), n_steps);
  EXPECT_TRUE(steps_json[0].contains("n_accepted"));
  // Every field of the one record schema reaches the export under its column's name (and
  // nothing else does): the CSV header is the ids then the field table, in order.
  std::vector<std::string> sample_header = {"case_id", "run_id"};
  for (const auto& f : SampleFields()) sample_header.push_back(f.name);
  EXPECT_EQ(samples[0], sample_header);
  std::vector<std::string> step_header = {"case_id", "run_id", "prompt_id", "turn"};
  for (const auto& f : StepFields()) step_header.push_back(f.name);
  EXPECT_EQ(steps[0], step_header);
  // Every case field with a summary key is in each case of the summary document.
  const Json summary_doc = Json::parse(SummaryJson(summary));
  for (const auto& f : CaseFields()) {
    if (f.summary != nullptr) {
      EXPECT_TRUE(summary_doc["cases"][0].contains(f.summary)) << f.name;
    }
  }
  const Json cases_json =
      Json::parse(ExportResults(summary, ExportTable::kCases, ExportFormat::kJson));
  EXPECT_EQ(cases_json, Json::parse(SummaryJson(summary)));

  auto error_of = [](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("<no error>");
  };
  EXPECT_NE(error_of([] { ParseExportFormat("xlsx", "--format"); }).find("--format"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              ParseExportTable("runs", "--table");
            }).find("cases, positions, samples, steps or serve"),
            std::string::npos);
}

// The SQL views (schema v7) give summary's point estimates: per case decode tok/s, τ, the AR
// baseline and the speedup (geometric mean and ratio of totals), on the summary database plus a
// paired-timing case without an AR case (its speedup from the paired AR runs only).
TEST(Export, SqlViewsGiveTheSummaryPointEstimates) {
  const std::string db = FreshDbPath("export_views");
  WriteSummaryDb(db);
  {
    auto store = ResultsStore::Open(db);
    const int64_t run = store->BeginRun(testing::TestRun());
    CaseRecord c = testing::TestCase("paired0", "fake", 0, 128);  // no AR with max new 128
    c.timing_mode = "paired";
    std::vector<SampleRecord> samples = testing::FakeSamples();
    const double ar_ms[] = {90, 170, 45};
    for (size_t i = 0; i < samples.size(); ++i) {
      testing::PairWithAr(samples[i], ar_ms[i],
                          samples[i].n_output_tokens + static_cast<int64_t>(i),
                          static_cast<int32_t>(i % 2));
      samples[i].paired_ar_prefill_ms = 2;
    }
    store->WriteCase(run, c, samples, testing::FakeSteps());
    // Other machines: a method case on machine B whose AR ran in a later run on B (its baseline,
    // although the first run's AR on testhost is listed first), and one on machine D with no AR
    // of its machine (no baseline: none crosses machines unless asked).
    RunInfo b = testing::TestRun();
    b.host = "machine-b";
    const int64_t run_b = store->BeginRun(b);
    store->WriteCase(run_b, testing::TestCase("fake_b", "fake", 0), testing::FakeSamples(),
                     testing::FakeSteps());
    b.started_at = "2026-11-21T09:00:00Z";
    const int64_t run_b2 = store->BeginRun(b);
    store->WriteCase(run_b2, testing::TestCase("ar_b", "ar", 0), testing::ArSamplesT0(), {});
    RunInfo d = testing::TestRun();
    d.host = "machine-d";
    store->WriteCase(store->BeginRun(d), testing::TestCase("fake_d", "fake", 0),
                     testing::FakeSamples(), testing::FakeSteps());
  }
  const Summary summary = BuildSummary(db);
  ASSERT_EQ(summary.rows.size(), 9u);
  {
    const ResultsStore::CaseRow& fake_b = summary.rows[6].row;
    ASSERT_EQ(fake_b.record.case_key, "fake_b");
    EXPECT_EQ(summary.rows[6].baseline_case_id, summary.rows[7].row.case_id);
    EXPECT_TRUE(summary.rows[6].baseline_same_machine);
    EXPECT_FALSE(summary.rows[6].baseline_same_run);
    ASSERT_EQ(summary.rows[8].row.record.case_key, "fake_d");
    EXPECT_EQ(summary.rows[8].baseline_case_id, -1);
    SummaryOptions cross;
    cross.baseline.cross_machine = true;
    EXPECT_EQ(BuildSummary(db, cross).rows[8].baseline_case_id, summary.rows[0].row.case_id);
  }
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* s = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(handle,
                               "SELECT case_id, decode_tok_per_s, tau, baseline_case_id, speedup, "
                               "speedup_total_ratio, n_matched, acceptance_rate, "
                               "mean_acceptance_length FROM case_summary ORDER BY case_id",
                               -1, &s, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(handle);
  auto value = [&](int col) {
    return sqlite3_column_type(s, col) == SQLITE_NULL ? std::nan("")
                                                      : sqlite3_column_double(s, col);
  };
  auto expect_same = [](double view, double summary_value, const std::string& what) {
    if (std::isnan(summary_value)) {
      EXPECT_TRUE(std::isnan(view)) << what << ": view " << view << ", summary none";
    } else {
      EXPECT_NEAR(view, summary_value, 1e-9 * std::max(1.0, std::fabs(summary_value))) << what;
    }
  };
  size_t n = 0, n_speedups = 0;
  while (sqlite3_step(s) == SQLITE_ROW) {
    ASSERT_LT(n, summary.rows.size());
    const SummaryRow& r = summary.rows[n++];
    const std::string what = "case " + std::to_string(r.row.case_id);
    EXPECT_EQ(sqlite3_column_int64(s, 0), r.row.case_id);
    expect_same(value(1), r.metrics.decode_tokens_per_s, what + " decode tok/s");
    expect_same(value(2), r.metrics.tau, what + " tau");
    const VllmMetrics vllm = VllmCompatibleMetrics(r.metrics);
    expect_same(value(7), vllm.acceptance_rate, what + " acceptance rate");
    expect_same(value(8), vllm.mean_acceptance_length, what + " mean acceptance length");
    if (r.is_baseline) {
      EXPECT_EQ(sqlite3_column_type(s, 3), SQLITE_NULL) << what;
      continue;
    }
    EXPECT_EQ(sqlite3_column_type(s, 3) == SQLITE_NULL ? -1 : sqlite3_column_int64(s, 3),
              r.baseline_case_id)
        << what;
    expect_same(value(4), r.speedup.geomean, what + " speedup");
    expect_same(value(5), r.speedup.total_ratio, what + " speedup total ratio");
    EXPECT_EQ(sqlite3_column_int64(s, 6), r.speedup.n_matched) << what;
    n_speedups += std::isfinite(r.speedup.geomean);
  }
  sqlite3_finalize(s);
  // position_acceptance: r, α and vLLM's per-position rate of every case and position, as the
  // summary computes them.
  ASSERT_EQ(sqlite3_prepare_v2(handle,
                               "SELECT case_id, position, r, alpha, per_position_acceptance_rate "
                               "FROM position_acceptance ORDER BY case_id, position",
                               -1, &s, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(handle);
  std::map<int64_t, const SummaryRow*> by_id;
  for (const SummaryRow& r : summary.rows) by_id[r.row.case_id] = &r;
  size_t n_positions = 0, expected_positions = 0;
  for (const SummaryRow& r : summary.rows) expected_positions += r.metrics.positions.r.size();
  while (sqlite3_step(s) == SQLITE_ROW) {
    const SummaryRow& r = *by_id.at(sqlite3_column_int64(s, 0));
    const int64_t i = sqlite3_column_int64(s, 1) - 1;
    ASSERT_LT(i, r.metrics.positions.max_depth());
    const std::string what =
        "case " + std::to_string(r.row.case_id) + " position " + std::to_string(i + 1);
    expect_same(value(2), r.metrics.positions.r[i], what + " r");
    expect_same(value(3), r.metrics.positions.alpha[i], what + " alpha");
    expect_same(value(4), VllmCompatibleMetrics(r.metrics).per_position_acceptance_rate[i],
                what + " per-position rate");
    ++n_positions;
  }
  sqlite3_finalize(s);
  EXPECT_EQ(n_positions, expected_positions);
  EXPECT_GT(n_positions, 4u);
  sqlite3_close(handle);
  EXPECT_EQ(n, summary.rows.size());
  // tree (same run), fake (other run's AR), paired (no AR case), fake_b (its machine's AR);
  // fake_d has none (its only AR candidates ran on other machines).
  EXPECT_EQ(n_speedups, 4u);
}

}  // namespace
}  // namespace specbed
