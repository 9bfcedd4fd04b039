// Tests for the report's headline and labels (reports/report.h, reports/plots.h): short case
// labels (ShortCaseLabels: only the knobs that differ within a method, abbreviated; other varying
// configuration fields; duplicates made unique by case id), the headline tables (one per target
// and temperature, best speedup first, speedup with its CI) and the below-1× note with the
// measured step cost and the verify-width curve, the section order of report.md (headline before
// provenance), gnuplot warnings counted as report warnings, plot styles (one colour per method,
// one marker per knob setting) and the headline chart's data-driven y range.
// Synthetic databases from tests/reports/synthetic_db.h.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/mapped_file.h"
#include "reports/plots.h"
#include "reports/report.h"
#include "tests/common/test_util.h"
#include "tests/reports/report_test_util.h"
#include "tests/reports/synthetic_db.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;
using testing::ArSamplesT0;
using testing::FakeSamples;
using testing::FakeSteps;
using testing::FreshDbPath;
using testing::Sample;
using testing::TestCase;
using testing::TestRun;
using testing::VerifyPoint;

ResultsStore::CaseRow Row(int64_t id, const std::string& method, const std::string& knobs,
                          double temperature = 0, int64_t threads = 1) {
  ResultsStore::CaseRow r;
  r.case_id = id;
  r.run_id = 1;
  r.record = TestCase(StrCat("c", id), method, temperature);
  r.record.method_knobs_json = knobs;
  r.record.threads = threads;
  return r;
}

std::vector<std::string> Labels(const std::vector<ResultsStore::CaseRow>& rows) {
  std::vector<const ResultsStore::CaseRow*> ptrs;
  for (const auto& r : rows) ptrs.push_back(&r);
  return ShortCaseLabels(ptrs);
}

TEST(ShortCaseLabels, OnlyKnobsThatDifferWithinAMethodAbbreviated) {
  const std::vector<ResultsStore::CaseRow> rows = {
      Row(1, "ar", "{}"),
      Row(2, "eagle3", R"({"depth":7,"head":"h","top_k":10,"total_tokens":60})"),
      Row(3, "eagle3", R"({"depth":2,"head":"h","top_k":2,"total_tokens":4})"),
      Row(4, "ddtree", R"({"block_size":0,"budget":32,"drafter":"models/x/dflash","top_k":0})"),
      Row(5, "ddtree", R"({"block_size":0,"budget":4,"drafter":"models/x/dflash","top_k":0})"),
      Row(6, "sps", R"({"drafter":"d","gamma":3})"),
      Row(7, "sps", R"({"drafter":"d","gamma":3,"osd_lr":0.001,"greedy":true})"),
  };
  const std::vector<std::string> l = Labels(rows);
  // Knobs present in one case only (the last two): nothing where missing (the default), a boolean
  // by its full name, other names by their initials.
  EXPECT_EQ(l, (std::vector<std::string>{"ar", "eagle3 d7 k10 n60", "eagle3 d2 k2 n4", "ddtree b32",
                                         "ddtree b4", "sps", "sps greedy ol0.001"}));
  for (const std::string& s : l) EXPECT_EQ(s.find('{'), std::string::npos) << s;
}

TEST(ShortCaseLabels, VaryingConfigurationFieldsAndDuplicates) {
  std::vector<ResultsStore::CaseRow> rows = {
      Row(1, "ar", "{}", 0, 1), Row(2, "ar", "{}", 0, 4), Row(3, "sps", R"({"gamma":3})", 0, 4),
      Row(4, "sps", R"({"gamma":3})", 0, 4), Row(5, "sps", R"({"gamma":3})", 1, 4)};
  // Cases 3 and 4 share label, target, dataset and T: the case id tells them apart; case 5 runs
  // at another temperature, which tables and plots show themselves.
  EXPECT_EQ(Labels(rows),
            (std::vector<std::string>{"ar t1", "ar t4", "sps t4 #3", "sps t4 #4", "sps t4"}));
}

// AR at T=0 (100 tok/s) and a "slow" method with FakeSteps (11 steps, 44 drafted, τ = 34/11)
// whose answers take 200 + 400 + 80 = 680 ms (speedup 0.5 on every prompt), the fake method
// (speedup 2.00), and a verify-width curve of "tiny": 1 token 1.0×, 8 tokens 3.0×.
std::string WriteSlowDb(const std::string& name, bool with_curve) {
  const std::string db = FreshDbPath(name);
  auto store = ResultsStore::Open(db);
  const int64_t run = store->BeginRun(TestRun());
  store->WriteCase(run, TestCase("ar0", "ar", 0), ArSamplesT0(), {});
  store->WriteCase(run, TestCase("fake0", "fake", 0), FakeSamples(), FakeSteps());
  CaseRecord slow = TestCase("slow0", "slow", 0);
  store->WriteCase(
      run, slow,
      {Sample("p0", 11, 2, 200, 3, "eos"), Sample("p1", 21, 4, 400, 4, "max_new_tokens"),
       Sample("p2", 5, 3, 80, 4, "eos")},
      FakeSteps());
  if (with_curve) {
    store->WriteBenchVerify(run, {VerifyPoint("models/tiny", 16, /*n_query=*/1, 1.0, 1.0),
                                  VerifyPoint("models/tiny", 16, /*n_query=*/8, 3.0, 3.0)});
  }
  return db;
}

TEST(Headline, OneTablePerTargetAndTemperatureBestSpeedupFirst) {
  const ReportData data = LoadReportData(WriteSlowDb("headline", true));
  const std::vector<HeadlineTable> h = BuildHeadlineTables(data);
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].title, "tiny · T=0");
  const ReportTable& t = h[0].table;
  ASSERT_EQ(t.rows.size(), 2u);  // AR is the baseline: no row
  std::vector<std::string> headers;
  for (const auto& c : t.columns) headers.push_back(c.header);
  // The budget actually drafted (nodes/step) and vLLM's acceptance rate beside τ, so cases with
  // different budgets are not read as alike.
  // Method and speedup first (the columns a narrow screen keeps), the paired comparison with the
  // leader and the tok/s the speedup is paired with beside it.
  EXPECT_EQ(headers, (std::vector<std::string>{"method", "speedup [95% CI]", "vs. leader [95% CI]",
                                               "tok/s", "AR tok/s", "nodes/step", "τ", "acc%",
                                               "T_D%", "exact match", "case"}));
  ASSERT_EQ(t.constants.size(), 1u);
  EXPECT_EQ(t.constants[0], (std::pair<std::string, std::string>{"dataset", "stories"}));
  EXPECT_EQ(t.rows[0][0], "fake");
  EXPECT_EQ(t.rows[0][1], "2.00× n<5");  // 3 prompts: no interval
  EXPECT_EQ(t.rows[0][2], "leader");
  // 34 decode tokens in 140 ms vs. AR's 34 in 340 ms (the same answers): 242.9 vs. 100.0 tok/s.
  EXPECT_EQ(t.rows[0][3], "242.9");
  EXPECT_EQ(t.rows[0][4], "100.0");
  EXPECT_EQ(t.rows[0][5], "4.0");
  EXPECT_EQ(t.rows[0][6], "3.09");
  EXPECT_EQ(t.rows[0][8], "15.7");
  EXPECT_EQ(t.rows[0][9], "3/3 (100.0%)");
  EXPECT_EQ(t.rows[1][0], "slow");
  EXPECT_EQ(t.rows[1][1], "0.50× n<5");
  // slow ÷ fake per answer: 0.25, 0.125, 0.5 -> geometric mean 0.25; 3 prompts: undecided.
  EXPECT_EQ(t.rows[1][2], "0.25× n<5");
  // The note on the slow case: 680 ms / 11 steps = 61.818 ms per step vs. 10 ms per AR token;
  // 44 / 11 = 4 drafted per step -> verify width 5 -> ratio 1 + 4/7 * 2 = 2.14 on the curve.
  ASSERT_EQ(h[0].slow_notes.size(), 1u);
  const std::string& n = h[0].slow_notes[0];
  EXPECT_CONTAINS(n, "slow (case 3, stories): 0.50×");
  EXPECT_CONTAINS(n, "τ = 3.09 tokens but takes 6.18 AR-token times (61.818 ms vs. 10.000 ms");
  EXPECT_CONTAINS(h[0].slow_explanation, "speedup ≈ τ ÷ the step's cost in AR-token times");
  EXPECT_NOT_CONTAINS(h[0].slow_explanation, "--verify-widths");
  EXPECT_CONTAINS(n, "verifying 5.0 tokens at once costs 2.14× one token's forward");
  EXPECT_CONTAINS(n, "verify-width curve of models/tiny at context 16");
}

TEST(Headline, NoteWithoutACurveSaysHowToMeasureOne) {
  const ReportData data = LoadReportData(WriteSlowDb("headline_nocurve", false));
  const std::vector<HeadlineTable> h = BuildHeadlineTables(data);
  ASSERT_EQ(h.size(), 1u);
  ASSERT_EQ(h[0].slow_notes.size(), 1u);
  EXPECT_CONTAINS(h[0].slow_notes[0], "6.18 AR-token times");
  EXPECT_NOT_CONTAINS(h[0].slow_notes[0], "verifying 5.0 tokens");
  EXPECT_CONTAINS(h[0].slow_explanation, "no verify-width curve of tiny");
  EXPECT_CONTAINS(h[0].slow_explanation, "specbed bench --verify-widths");
}

TEST(Headline, ReportStartsWithTheHeadlineAndEndsWithProvenance) {
  const std::string db = WriteSlowDb("headline_report", true);
  const std::string dir = testing::ScratchDir("headline_report");
  const ReportResult r =
      WriteReport(db, dir, testing::QuietReportOptions("/nonexistent/gnuplot"));  // tables only
  const std::string md = ReadFileToString(r.report_md), html = ReadFileToString(r.index_html);
  // The section headings in order, in both documents.
  const std::vector<std::pair<std::string, std::vector<std::string>>> docs = {
      {md,
       {"## Headline", "## Results (paper layout)", "## Details: tiny / stories", "## Provenance",
        "## Conventions"}},
      {html,
       {"<h2 id=\"headline\">Headline</h2>", "<h2>Results (paper layout)</h2>",
        "<h2 id=\"details-1\">Details: tiny / stories</h2>", "<h2>Provenance</h2>",
        "<h2>Conventions</h2>"}}};
  for (const auto& [doc, headings] : docs) {
    size_t at = 0;
    for (const std::string& h : headings) {
      const size_t found = doc.find(h);
      ASSERT_NE(found, std::string::npos) << h;
      EXPECT_GT(found, at) << h << " is out of order";
      at = found;
    }
    EXPECT_CONTAINS(doc, "Why some speedups are below 1×");
  }
  EXPECT_CONTAINS(html, "<details id=\"provenance\"");
  EXPECT_CONTAINS(html, "<details id=\"conventions\"");
}

TEST(Plots, OneColourPerMethodOneMarkerPerSettingGnuplotWarnings) {
  EXPECT_NE(MethodColor(0), MethodColor(1));
  EXPECT_EQ(MethodColor(0), MethodColor(20));  // a 20-colour palette
  std::set<std::string> colours;
  for (int i = 0; i < 20; ++i) colours.insert(MethodColor(i));
  EXPECT_EQ(colours.size(), 20u);
  EXPECT_NE(MethodMarker(0, 0), MethodMarker(0, 1));  // a method's settings: filled, open
  EXPECT_NE(MethodMarker(0, 0), MethodMarker(1, 0));  // methods: shapes
  const ReportData data = LoadReportData(WriteSlowDb("headline_styles", false));
  // Methods sorted: ar 0, fake 1, slow 2.
  for (const CaseReport& c : data.groups[0].cases) {
    const int want = c.row.record.method == "ar" ? 0 : c.row.record.method == "fake" ? 1 : 2;
    EXPECT_EQ(c.method_index, want) << c.row.record.method;
    EXPECT_EQ(c.setting_index, 0);
  }
  EXPECT_EQ(
      GnuplotWarnings("line 1\n\"plots.gp\" line 9: warning: Skipping data file\nok\n"
                      "WARNING: x\n"),
      (std::vector<std::string>{"plots.gp\" line 9: warning: Skipping data file", "WARNING: x"}));
  // The headline chart's y range comes from the data (max CI end / speedup / 1.0, plus 12%);
  // this database's cases rest on 3 prompts, under the 5 an interval needs: no whiskers.
  const std::vector<HeadlineTable> h = BuildHeadlineTables(data);
  const Plot p = BuildHeadlinePlot(h[0], 1);
  EXPECT_EQ(p.name, "headline_speedup_1");
  EXPECT_CONTAINS(p.script, "lc rgb variable");
  EXPECT_CONTAINS(p.script, "yerrorbars");
  EXPECT_CONTAINS(p.script, "\"fake\" 2 NaN NaN ");
  const double hi = 2.0;
  char want[64];
  std::snprintf(want, sizeof(want), "set yrange [0:%.6g]", hi * 1.12);
  EXPECT_CONTAINS(p.script, want);
}

TEST(Plots, GnuplotWarningsAreReportWarnings) {
  const std::string gnuplot = FindExecutable("gnuplot");
  if (gnuplot.empty()) GTEST_SKIP() << "gnuplot is not installed (gnuplot-nox)";
  // A gnuplot that draws the plots and then warns, as gnuplot does for e.g. an empty data set.
  const std::string wrapper = std::string(SPECBED_TEST_TMPDIR) + "/gnuplot_warns.sh";
  {
    std::ofstream w(wrapper);
    w << "#!/bin/sh\n"
      << gnuplot << " \"$@\"\nrc=$?\n"
      << "echo '\"plots.gp\" line 3: warning: Skipping data file with no valid points' >&2\n"
      << "exit $rc\n";
  }
  fs::permissions(wrapper, fs::perms::owner_all);
  const std::string dir = testing::ScratchDir("headline_gnuplot_warns");
  const ReportResult r =
      WriteReport(WriteSlowDb("headline_warns", false), dir, testing::QuietReportOptions(wrapper));
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_CONTAINS(r.warnings[0], "gnuplot: ");
  EXPECT_CONTAINS(r.warnings[0], "warning: Skipping data file with no valid points");
  EXPECT_CONTAINS(ReadFileToString(r.index_html), "Skipping data file with no valid points");
  EXPECT_FALSE(r.images.empty());
}

}  // namespace
}  // namespace specbed
