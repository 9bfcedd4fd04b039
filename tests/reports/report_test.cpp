// Tests for reports/report.h (`specbed report`): on a synthetic database (two AR cases at T=0 and
// T=1, a fake speculative method with steps, bench rows) the report directory gets report.md and
// index.html with the right metric values, constant columns hidden and stated once, every
// embedded PNG exists and is a PNG; an AR-only database skips the speculative plots; a missing
// gnuplot (SPECBED_GNUPLOT override) still writes the tables and warns naming the program; bad
// databases and uncreatable output directories fail naming the path.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>

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
using testing::ErrorOf;
using testing::FreshDbPath;
using testing::HasGnuplot;
using testing::ImageSources;
using testing::IsPngFile;
using testing::QuietReportOptions;
using testing::WriteSyntheticDb;

std::string FreshDir(const std::string& name) {
  return testing::ScratchDir("reports_" + name);
}

int Column(const ReportTable& t, const std::string& header) {
  for (size_t i = 0; i < t.columns.size(); ++i) {
    if (t.columns[i].header == header) return static_cast<int>(i);
  }
  return -1;
}

std::string Constant(const ReportTable& t, const std::string& header) {
  for (const auto& [h, v] : t.constants) {
    if (h == header) return v;
  }
  return "<not constant>";
}

// The row whose cells match all of `where` (header -> value); fails the test when not exactly one.
std::vector<std::string> Row(const ReportTable& t,
                             const std::vector<std::pair<std::string, std::string>>& where) {
  std::vector<std::vector<std::string>> found;
  for (const auto& row : t.rows) {
    bool ok = true;
    for (const auto& [h, v] : where) {
      const int c = Column(t, h);
      ok = ok && c >= 0 && row[c] == v;
    }
    if (ok) found.push_back(row);
  }
  EXPECT_EQ(found.size(), 1u);
  return found.empty() ? std::vector<std::string>(t.columns.size()) : found[0];
}

std::string Cell(const ReportTable& t, const std::vector<std::string>& row, const std::string& h) {
  const int c = Column(t, h);
  return c < 0 ? "<no column " + h + ">" : row[c];
}

// Expects every (header, value) of `cells` in `row` of `t`.
void ExpectCells(const ReportTable& t, const std::vector<std::string>& row,
                 const std::vector<std::pair<std::string, std::string>>& cells) {
  for (const auto& [header, value] : cells) EXPECT_EQ(Cell(t, row, header), value) << header;
}

TEST(ReportData, MetricsPerCaseAndAutomaticArBaseline) {
  const std::string db = FreshDbPath("data");
  WriteSyntheticDb(db);
  const ReportData data = LoadReportData(db);
  ASSERT_EQ(data.runs.size(), 1u);
  EXPECT_EQ(data.runs[0].info.git_commit, "c9810f3abcde");
  ASSERT_EQ(data.groups.size(), 1u);
  const ReportGroup& g = data.groups[0];
  EXPECT_EQ(g.target, "tiny");
  EXPECT_EQ(g.dataset, "stories");
  EXPECT_TRUE(g.has_steps());
  ASSERT_EQ(g.cases.size(), 4u);
  // Ordered by temperature, AR first.
  EXPECT_EQ(g.cases[0].row.record.case_key, "ar0");
  EXPECT_EQ(g.cases[3].row.record.case_key, "ar1");
  const CaseReport& fake = g.cases[1];
  EXPECT_EQ(fake.row.record.case_key, "fake0");
  EXPECT_EQ(fake.baseline_case_id, g.cases[0].row.case_id);
  EXPECT_NEAR(fake.speedup.geomean, 2.0, 1e-12);
  EXPECT_EQ(g.cases[2].row.record.case_key, "fake0_64");
  EXPECT_EQ(g.cases[2].baseline_case_id, -1);  // max_new_tokens differs from every AR case
  EXPECT_TRUE(std::isnan(g.cases[2].speedup.geomean));
  EXPECT_EQ(data.bench.size(), 2u);
}

TEST(ReportTables, ValuesAndConstantColumnsHidden) {
  const std::string db = FreshDbPath("tables");
  WriteSyntheticDb(db);
  const ReportData data = LoadReportData(db);
  const ReportTable t = BuildCaseTable(data.groups[0]);
  // Constant configuration columns are hidden and stated once.
  for (const char* hidden : {"run", "threads", "dtype", "seed", "device", "batch", "top_p",
                             "categories", "limit", "prompts"}) {
    EXPECT_EQ(Column(t, hidden), -1) << hidden;
  }
  EXPECT_EQ(Constant(t, "threads"), "1");
  EXPECT_EQ(Constant(t, "dtype"), "float32");
  EXPECT_EQ(Constant(t, "prompts"), "3");
  // Varying ones stay; measurement columns always stay.
  for (const char* shown :
       {"method", "knobs", "T", "max new", "output tokens", "decode tok/s", "prefill ms", "speedup",
        "speedup Σ (secondary)", "τ", "T_D (%)", "rollback (%)", "stop reasons"}) {
    EXPECT_GE(Column(t, shown), 0) << shown;
  }
  ExpectCells(t, Row(t, {{"method", "ar"}, {"T", "0"}}),
              {{"decode tok/s", "100.0"},
               {"prefill ms", "3.000"},
               {"output tokens", "37"},
               {"speedup", "1.00"},
               {"τ", "—"},
               {"T_D (%)", "—"},
               {"stop reasons", "eos 2, max_new_tokens 1"}});
  ExpectCells(t, Row(t, {{"method", "ar"}, {"T", "1"}}), {{"decode tok/s", "50.0"}});
  ExpectCells(t, Row(t, {{"method", "fake"}, {"max new", "32"}}),
              {{"knobs", "k=4"},
               {"label", "fake max32"},
               {"decode tok/s", "242.9"},
               {"speedup", "2.00"},
               {"speedup Σ (secondary)", "2.43"},
               {"τ", "3.09"},
               {"T_D (%)", "15.7"},
               {"rollback (%)", "47.7"}});
  ExpectCells(t, Row(t, {{"method", "fake"}, {"max new", "64"}}),
              {{"speedup", "—"}, {"τ", "3.09"}});

  const ReportTable b = BuildBenchTable(data.bench);
  EXPECT_EQ(Column(b, "model"), -1);
  EXPECT_EQ(Constant(b, "model"), "tiny");
  ASSERT_GE(Column(b, "context"), 0);
  ExpectCells(b, Row(b, {{"context", "128"}}),
              {{"tok/s ± std", "800.0 ± 10.0"}, {"other %", "20.0"}});
}

// Schema-v2 columns on the summary database: bootstrap CIs, the other-time share, exact match
// with the first divergence and its margin, baselines from another run, the acceptance plot.
TEST(ReportTables, CiOtherShareExactMatchAndCrossRunBaseline) {
  const std::string db = FreshDbPath("v2_columns");
  testing::WriteSummaryDb(db);
  const ReportData data = LoadReportData(db);
  ASSERT_EQ(data.groups.size(), 1u);
  const ReportTable t = BuildCaseTable(data.groups[0]);
  // 3 prompts: under the 5 an interval needs ("n<5").
  ExpectCells(t, Row(t, {{"method", "tree"}}),
              {{"speedup", "1.59"},
               {"speedup 95% CI", "n<5"},
               {"speedup Σ 95% CI", "n<5"},
               {"other (%)", "1.3"},
               {"exact match", "1/3 (33.3%)"},
               {"first divergence (margin)", "2 (0.125)"}});
  ExpectCells(t, Row(t, {{"method", "fake"}, {"max new", "32"}}),
              {{"speedup 95% CI", "n<5"},
               {"other (%)", "0.8"},
               {"first divergence (margin)", "3 (0.125)"}});
  ExpectCells(t, Row(t, {{"method", "ar"}, {"T", "0"}}),
              {{"speedup 95% CI", "—"}, {"exact match", "—"}});
  for (const CaseReport& c : data.groups[0].cases) {
    if (c.row.record.case_key == "fake0") {
      EXPECT_EQ(c.baseline_case_id, 1);
      EXPECT_FALSE(c.baseline_same_run);
    }
    if (c.row.record.case_key == "tree0") {
      EXPECT_TRUE(c.baseline_same_run);
    }
  }

  const std::string dir = FreshDir("v2_columns");
  const ReportResult r = WriteReport(db, dir, QuietReportOptions("/nonexistent/gnuplot"));
  const std::string md = ReadFileToString(r.report_md);
  EXPECT_CONTAINS(md, "case 4 (fake, run 2) is compared with AR case 1 of another run");
  EXPECT_CONTAINS(md, "percentile bootstrap intervals over prompts");
  const std::string gp = ReadFileToString(dir + "/plots.gp");
  // The default is vLLM's unconditional rate; r_i (conditional on the depth) is labelled so.
  EXPECT_CONTAINS(gp, "set title 'Per-position acceptance at T=0 — tiny / stories'");
  EXPECT_CONTAINS(gp,
                  "set title 'Conditional per-position acceptance r_i at T=0 — tiny / stories'");
  EXPECT_CONTAINS(gp, " (n=5)'");  // the case's verify steps in its legend entry
  // The tree case reaches positions 1..4 in 5, 5, 4, 1 steps: 1 and 2 reach the 5-step cutoff.
  EXPECT_CONTAINS(gp, "\n1 0.8\n2 0.6\nEOD");
}

// A case whose first draft position is reached by fewer than 5 steps (a lookup method that rarely
// drafts) is left out of the acceptance panel: no empty data block, which gnuplot warns about.
TEST(WriteReport, AcceptancePlotLeavesOutCasesWithoutAPlottablePosition) {
  const std::string db = FreshDbPath("sparse_acceptance");
  testing::WriteSummaryDb(db);
  {
    auto store = ResultsStore::Open(db);
    const int64_t run = store->BeginRun(testing::TestRun());
    std::vector<StepRecord> steps = testing::TreeSteps();
    steps.resize(3);  // position 1 reached by 3 steps
    store->WriteCase(run, testing::TestCase("sparse0", "sparse", 0), testing::TreeSamples(), steps);
  }
  const std::string dir = FreshDir("sparse_acceptance");
  const bool gnuplot = HasGnuplot();
  const ReportResult r =
      WriteReport(db, dir, QuietReportOptions(gnuplot ? "gnuplot" : "/nonexistent/gnuplot"));
  const std::string gp = ReadFileToString(dir + "/plots.gp");
  EXPECT_CONTAINS(gp, "set title 'Per-position acceptance at T=0");
  EXPECT_CONTAINS(gp, "\n1 0.8\n2 0.6\nEOD");  // the tree case is still there
  EXPECT_NOT_CONTAINS(gp, "<< EOD\nEOD");
  EXPECT_NOT_CONTAINS(gp, " (n=3)'");  // the sparse case's legend entry
  if (gnuplot) {
    EXPECT_TRUE(r.warnings.empty()) << r.warnings.front();
  }
}

TEST(ReportTables, HideConstantColumnsKeepsNonHideableColumns) {
  ReportTable t;
  t.columns = {{"a", false, true}, {"b", false, true}, {"c", true, false}};
  t.rows = {{"x", "1", "5"}, {"x", "2", "5"}};
  const ReportTable h = HideConstantColumns(t);
  ASSERT_EQ(h.columns.size(), 2u);
  EXPECT_EQ(h.columns[0].header, "b");
  EXPECT_EQ(h.columns[1].header, "c");  // constant but not hideable
  ASSERT_EQ(h.constants.size(), 1u);
  EXPECT_EQ(h.constants[0], std::make_pair(std::string("a"), std::string("x")));
  EXPECT_EQ(h.rows[1], (std::vector<std::string>{"2", "5"}));
}

TEST(WriteReport, WritesTablesAndValidPlots) {
  if (!HasGnuplot()) GTEST_SKIP() << "gnuplot is not installed (Debian: gnuplot-nox)";
  const std::string db = FreshDbPath("full");
  WriteSyntheticDb(db);
  const std::string dir = FreshDir("full") + "/nested/out";  // parents are created
  ReportOptions options;
  options.gnuplot = "gnuplot";
  const ReportResult r = WriteReport(db, dir, options);
  EXPECT_TRUE(r.warnings.empty()) << r.warnings[0];
  EXPECT_EQ(r.index_html, dir + "/index.html");
  const std::string html = ReadFileToString(r.index_html);
  const std::string md = ReadFileToString(r.report_md);

  // Every plot type, each embedded in both documents, each a real PNG with an SVG twin.
  // (No τ-vs-temperature figure: the speculative cases all ran at T=0.)
  // (One category: no per-category plot; one temperature: one acceptance panel of each kind,
  // "_t0"; every method ran at one budget: no budget plots, a note instead.)
  const std::set<std::string> expected = {
      "decode_speed_1.png",   "decode_scatter_1.png",     "speedup_vs_draft_1.png",
      "speedup_vs_tau_1.png", "speedup_per_answer_1.png", "tau_1.png",
      "acceptance_1_t0.png",  "acceptance_cond_1_t0.png", "bench_speed.png",
      "phase_time_1.png",     "headline_speedup_1.png"};
  EXPECT_EQ(std::set<std::string>(r.images.begin(), r.images.end()), expected);
  const std::vector<std::string> srcs = ImageSources(html);
  EXPECT_EQ(std::set<std::string>(srcs.begin(), srcs.end()), expected);
  for (const std::string& png : srcs) {
    EXPECT_TRUE(IsPngFile(dir + "/" + png)) << png;
    const std::string svg = png.substr(0, png.size() - 4) + ".svg";
    EXPECT_TRUE(fs::exists(dir + "/" + svg)) << svg;
    EXPECT_CONTAINS(md, "](" + png + ")");
  }
  EXPECT_TRUE(fs::exists(dir + "/plots.gp"));
  // Each plot has a title, axis labels and a legend (checked in the script).
  const std::string gp = ReadFileToString(dir + "/plots.gp");
  for (const char* needle :
       {"set title 'Decode throughput per case — tiny / stories'",
        "set ylabel 'decode throughput (tokens/s)'",
        "set xlabel 'decode tokens per answer (tokens)'", "set ylabel 'τ (tokens per verify step)'",
        "set xlabel 'T_D: drafting time / decode time (%)'", "set key outside right top box"}) {
    EXPECT_CONTAINS(gp, needle);
  }

  // Provenance, conventions, values and the hidden-column statement in both documents.
  for (const std::string& doc : {html, md}) {
    for (const char* needle :
         {"c9810f3abcde", "testhost", "Some CPU @ 3GHz (16 cores)", "Release -O3",
          "2026-11-21T08:05:00Z", "specbed run configs/test.json -o test.db", "tiny / stories",
          "242.9", "2.43", "3.09", "15.7", "47.7", "800.0 ± 10.0"}) {
      EXPECT_CONTAINS(doc, needle);
    }
    EXPECT_CONTAINS(doc, "output tokens − 1");  // the decode tok/s convention is stated
  }
  EXPECT_CONTAINS(md, "**threads** 1");
  EXPECT_CONTAINS(html, "<b>threads</b> 1");
  EXPECT_NOT_CONTAINS(html, "<th class=\"num\">threads</th>");
  EXPECT_CONTAINS(html, "<th class=\"num\">T</th>");
  EXPECT_CONTAINS(html, "<style>");      // self-contained CSS
  EXPECT_NOT_CONTAINS(html, "<link ");   // no external stylesheet
  EXPECT_NOT_CONTAINS(html, "src=\"/");  // images by relative path
  EXPECT_CONTAINS(md, "has no AR case with the same workload");
  EXPECT_CONTAINS(md,
                  "Speedup vs. draft budget — tiny / stories: skipped (no method ran at two "
                  "budgets or more");
}

TEST(WriteReport, ArOnlyDatabaseSkipsSpeculativePlots) {
  if (!HasGnuplot()) GTEST_SKIP() << "gnuplot is not installed (Debian: gnuplot-nox)";
  const std::string db = FreshDbPath("ar_only");
  WriteSyntheticDb(db, /*with_speculative=*/false, /*with_bench=*/false);
  const std::string dir = FreshDir("ar_only");
  const ReportResult r = WriteReport(db, dir, QuietReportOptions("gnuplot"));
  EXPECT_TRUE(r.warnings.empty());
  EXPECT_EQ(std::set<std::string>(r.images.begin(), r.images.end()),
            (std::set<std::string>{"decode_speed_1.png", "decode_scatter_1.png"}));
  EXPECT_FALSE(fs::exists(dir + "/tau_1.png"));
  const ReportData data = LoadReportData(db);
  const ReportTable t = BuildCaseTable(data.groups[0]);
  EXPECT_EQ(Column(t, "τ"), -1);
  EXPECT_EQ(Constant(t, "τ"), "—");
  EXPECT_EQ(Constant(t, "speedup"), "1.00");
  EXPECT_EQ(Constant(t, "knobs"), "none");
  const std::string md = ReadFileToString(r.report_md);
  EXPECT_CONTAINS(
      md, "No data (—) for: nodes/step, timing, τ, T_D (%), drafter prefill (%), rollback (%)");
  EXPECT_NOT_CONTAINS(md, "## Bench");
  for (const auto& png : ImageSources(ReadFileToString(r.index_html))) {
    EXPECT_TRUE(IsPngFile(dir + "/" + png)) << png;
  }
}

TEST(WriteReport, MissingGnuplotStillWritesTablesAndWarns) {
  const std::string db = FreshDbPath("no_gnuplot");
  WriteSyntheticDb(db);
  const std::string dir = FreshDir("no_gnuplot");
  ASSERT_EQ(setenv("SPECBED_GNUPLOT", "/nonexistent/gnuplot", 1), 0);
  ::testing::internal::CaptureStderr();
  const ReportResult r = WriteReport(db, dir);  // default options: $SPECBED_GNUPLOT
  const std::string err = ::testing::internal::GetCapturedStderr();
  unsetenv("SPECBED_GNUPLOT");
  EXPECT_CONTAINS(err, "warning: gnuplot program '/nonexistent/gnuplot' not found");
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_CONTAINS(r.warnings[0], "/nonexistent/gnuplot");
  EXPECT_TRUE(r.images.empty());
  const std::string html = ReadFileToString(r.index_html);
  EXPECT_CONTAINS(html, "<table>");
  EXPECT_CONTAINS(html, "242.9");
  EXPECT_CONTAINS(html, "not found");  // the warning is in the report too
  EXPECT_TRUE(ImageSources(html).empty());
  EXPECT_CONTAINS(ReadFileToString(r.report_md), "242.9");
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_NE(entry.path().extension(), ".png") << entry.path();
  }
}

TEST(WriteReport, FailingGnuplotIsAWarningWithItsStatus) {
  if (FindExecutable("false").empty()) GTEST_SKIP() << "no `false` program on PATH";
  const std::string db = FreshDbPath("gnuplot_fails");
  WriteSyntheticDb(db, false, false);
  const std::string dir = FreshDir("gnuplot_fails");
  const ReportResult r = WriteReport(db, dir, QuietReportOptions("false"));
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_CONTAINS(r.warnings[0], "gnuplot failed");
  EXPECT_CONTAINS(r.warnings[0], "exited with status 1");
  EXPECT_TRUE(r.images.empty());
  EXPECT_CONTAINS(ReadFileToString(r.index_html), "100.0");
}

TEST(WriteReport, BadDatabaseOrDirectoryFailsNamingIt) {
  const std::string dir = FreshDir("errors");
  const std::string missing = std::string(SPECBED_TEST_TMPDIR) + "/reports_no_such.db";
  std::remove(missing.c_str());
  EXPECT_CONTAINS(ErrorOf([&] { WriteReport(missing, dir); }), missing);
  EXPECT_FALSE(fs::exists(dir));  // nothing is created for a bad database
  EXPECT_FALSE(fs::exists(missing));

  const std::string text = std::string(SPECBED_TEST_TMPDIR) + "/reports_not_a_db.db";
  std::ofstream(text) << "this is not a database\n";
  const std::string e = ErrorOf([&] { WriteReport(text, dir); });
  EXPECT_CONTAINS(e, text);
  EXPECT_CONTAINS(e, "not a SQLite database");

  const std::string db = FreshDbPath("errors");
  WriteSyntheticDb(db, false, false);
  const std::string file = std::string(SPECBED_TEST_TMPDIR) + "/reports_a_file";
  std::ofstream(file) << "x";
  const std::string e2 = ErrorOf([&] { WriteReport(db, file + "/sub", QuietReportOptions("")); });
  EXPECT_CONTAINS(e2, "cannot create report directory '" + file + "/sub'");
  const std::string e3 = ErrorOf([&] { WriteReport(db, file, QuietReportOptions("")); });
  EXPECT_CONTAINS(e3, "cannot create report directory '" + file + "'");
}

}  // namespace
}  // namespace specbed
