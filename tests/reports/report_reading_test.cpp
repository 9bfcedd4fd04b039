// Tests that the report reads as users rely on (issue 49, items 4 and 6): the headline marks cases
// tied with the leader (paired ratio interval holding 1), shows the AR tok/s a speedup is paired
// with, opens with a setup line linking the method settings, notes adaptation that never ran and
// a cost twin's asset named for its original; index.html has the viewport tag, no Markdown syntax,
// images with their natural size and, at 390 px, the headline's method and speedup in view; a
// 19-method database gives no plot with more than 8 case series, no budget plot of one point per
// method, one style per method in every plot, and the unconditional per-position acceptance by
// default. Synthetic databases built here and in tests/reports/synthetic_db.h.
// Checked by: itself (the test target reports_test).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "base/locale_pin.h"
#include "base/mapped_file.h"
#include "reports/plots.h"
#include "reports/report.h"
#include "tests/common/test_util.h"
#include "tests/reports/report_test_util.h"
#include "tests/reports/synthetic_db.h"

namespace specbed {
namespace {

using testing::FreshDbPath;
using testing::QuietReportOptions;
using testing::Sample;
using testing::TestCase;
using testing::TestRun;

// Eight answers of 20 decode tokens each; decode time `ms * factor[i]` for prompt i.
std::vector<SampleRecord> EightAnswers(double ms, const std::vector<double>& factor) {
  std::vector<SampleRecord> out;
  for (size_t i = 0; i < 8; ++i) {
    out.push_back(Sample(StrCat("p", i), 21, 2, ms * factor[i], 4, "eos"));
  }
  return out;
}

const std::vector<double> kOnes(8, 1.0);
// "lead" and "close" differ per prompt but not overall: lead/close per prompt f/g.
const std::vector<double> kLead = {1.0, 0.9, 1.1, 1.0, 0.95, 1.05, 1.0, 1.0};
const std::vector<double> kClose = {1.1, 0.85, 1.0, 1.05, 1.0, 1.0, 0.95, 1.1};

// AR at 100 ms per answer; "lead" ~2.00×, "close" ~1.99×, "slow" 1.43× (70 ms), 8 prompts.
std::string WriteTieDb(const std::string& name) {
  const std::string db = FreshDbPath(name);
  auto store = ResultsStore::Open(db);
  const int64_t run = store->BeginRun(TestRun());
  store->WriteCase(run, TestCase("ar", "ar", 0), EightAnswers(100, kOnes), {});
  store->WriteCase(run, TestCase("lead", "lead", 0), EightAnswers(50, kLead), {});
  store->WriteCase(run, TestCase("close", "close", 0), EightAnswers(50, kClose), {});
  store->WriteCase(run, TestCase("slow", "slow", 0), EightAnswers(70, kOnes), {});
  return db;
}

TEST(HeadlineTies, OverlappingPairedIntervalIsATieOthersAreSlower) {
  const ReportData data = LoadReportData(WriteTieDb("ties"));  // h points into it
  const std::vector<HeadlineTable> h = BuildHeadlineTables(data);
  ASSERT_EQ(h.size(), 1u);
  const ReportTable& t = h[0].table;
  ASSERT_EQ(t.rows.size(), 3u);
  ASSERT_EQ(t.columns[2].header, "vs. leader [95% CI]");
  EXPECT_EQ(t.rows[0][0], "lead");
  EXPECT_EQ(t.rows[0][2], "leader");
  EXPECT_EQ(t.rows[1][0], "close");
  EXPECT_EQ(t.rows[1][2].rfind("tied 1.00× [", 0), 0u) << t.rows[1][2];
  EXPECT_EQ(t.rows[2][0], "slow");
  EXPECT_EQ(t.rows[2][2].rfind("slower 0.71× [", 0), 0u) << t.rows[2][2];
  // The paired ratio by hand: close/lead per answer = f/g, geometric mean over the 8 answers.
  double log_sum = 0;
  for (size_t i = 0; i < 8; ++i) log_sum += std::log(kLead[i] / kClose[i]);
  const LeaderComparison v = CompareWithLeader(h[0].cases[0]->speedup, h[0].cases[1]->speedup);
  EXPECT_NEAR(v.ratio, std::exp(log_sum / 8), 1e-12);
  EXPECT_EQ(v.n_prompts, 8);
  EXPECT_TRUE(v.tied());
  EXPECT_FALSE(CompareWithLeader(h[0].cases[0]->speedup, h[0].cases[2]->speedup).tied());
  // The AR tok/s of the same answers: 160 tokens in 800 ms.
  EXPECT_EQ(t.rows[1][4], "200.0");
  // The rule is stated where the table is read.
  const ReportResult r = WriteReport(WriteTieDb("ties_report"), testing::ScratchDir("ties_report"),
                                     QuietReportOptions("/nonexistent/gnuplot"));
  EXPECT_CONTAINS(ReadFileToString(r.report_md), "**tied** when that interval holds 1");
  EXPECT_CONTAINS(ReadFileToString(r.report_md), "need not equal the geometric mean");
}

// A cost-twin target with an OSD case that never adapted, one that did, and a BlockPilot case
// whose predictor is the original's asset.
std::string WriteTwinDb(const std::string& name) {
  const std::string db = FreshDbPath(name);
  auto store = ResultsStore::Open(db);
  const int64_t run = store->BeginRun(TestRun());
  auto twin_case = [](const std::string& key, const std::string& method, const std::string& knobs) {
    CaseRecord c = TestCase(key, method, 0);
    c.target = "stories260K-twin";
    c.method_knobs_json = knobs;
    c.config_json =
        R"j({"target_info":{"label":"cost twin of stories260K (width 4096, 32 layers)"}})j";
    return c;
  };
  store->WriteCase(run, twin_case("ar", "ar", "{}"), testing::ArSamplesT0(), {});
  store->WriteCase(run, twin_case("osd", "sps+osd", R"({"gamma":3})"), testing::FakeSamples(),
                   testing::FakeSteps());
  std::vector<StepRecord> adapted = testing::FakeSteps();
  adapted[0].t_adapt_us = 500;
  store->WriteCase(run, twin_case("osd2", "eagle3+osd", R"({"depth":2})"), testing::FakeSamples(),
                   adapted);
  store->WriteCase(
      run,
      twin_case("bp", "dflash+blockpilot",
                R"({"drafter":"stories260K-twin-dflash","predictor":"stories260K-blockpilot"})"),
      testing::FakeSamples(), testing::FakeSteps());
  // eagle3+osd adapted (time recorded) but every step equals static eagle3's: it never acted.
  // specblock+bandit adapted and one step accepted one token more than specblock: it acted.
  store->WriteCase(run, twin_case("e3", "eagle3", R"({"depth":2})"), testing::FakeSamples(),
                   testing::FakeSteps());
  store->WriteCase(run, twin_case("sb", "specblock", "{}"), testing::FakeSamples(),
                   testing::FakeSteps());
  std::vector<StepRecord> acted = adapted;
  acted.back().n_accepted += 1;
  store->WriteCase(run, twin_case("sbb", "specblock+bandit", "{}"), testing::FakeSamples(), acted);
  return db;
}

TEST(HeadlineSetup, SetupLineMethodSettingsAndCaseNotes) {
  const std::string dir = testing::ScratchDir("twin_report");
  const ReportResult r =
      WriteReport(WriteTwinDb("twin_report"), dir, QuietReportOptions("/nonexistent/gnuplot"));
  const std::string md = ReadFileToString(r.report_md), html = ReadFileToString(r.index_html);
  EXPECT_CONTAINS(md,
                  "Setup: target stories260K-twin (cost twin of stories260K) · device cpu · dtype "
                  "float32 · 1 thread · 3 prompts × 32 new tokens · T = 0 · every method at "
                  "small, CPU-sized settings");
  EXPECT_CONTAINS(md, "[Method settings](#method-settings)");
  EXPECT_CONTAINS(html, "<a href=\"#method-settings\">Method settings</a>");
  EXPECT_CONTAINS(html, "<h2 id=\"method-settings\">Method settings</h2>");
  EXPECT_CONTAINS(md,
                  "| dflash+blockpilot | drafter=stories260K-twin-dflash, "
                  "predictor=stories260K-blockpilot | 4 |");
  EXPECT_CONTAINS(md, "sps+osd (case 2): its online adaptation never ran in this run");
  EXPECT_NOT_CONTAINS(md, "eagle3+osd (case 3): its online adaptation never ran");
  EXPECT_CONTAINS(md,
                  "eagle3+osd (case 3): its online adaptation ran but never acted: every one of "
                  "its 11 verify steps drafted and accepted exactly what eagle3 (case 5) did");
  EXPECT_NOT_CONTAINS(md, "specblock+bandit (case 7): its online adaptation");
  EXPECT_CONTAINS(md,
                  "dflash+blockpilot (case 4): knob predictor = stories260K-blockpilot is an asset "
                  "named for stories260K (the model this cost twin copies)");
  EXPECT_NOT_CONTAINS(md, "knob drafter = stories260K-twin-dflash");
  // The setup line is the headline's first paragraph (the first screen).
  EXPECT_LT(html.find("<p id=\"setup\""), html.find("<div class=\"headline\">"));
}

TEST(ReportHtml, ViewportNoMarkdownSyntaxNaturalSizeImages) {
  const std::string db = FreshDbPath("html_hygiene");
  testing::WritePaperDb(db);
  const std::string dir = testing::ScratchDir("html_hygiene");
  const bool gnuplot = testing::HasGnuplot();
  const ReportResult r =
      WriteReport(db, dir, QuietReportOptions(gnuplot ? "gnuplot" : "/nonexistent/gnuplot"));
  const std::string html = ReadFileToString(r.index_html);
  EXPECT_CONTAINS(html, "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
  EXPECT_EQ(html.find('`'), std::string::npos) << "a Markdown backtick in index.html";
  EXPECT_EQ(html.find("**"), std::string::npos) << "Markdown bold in index.html";
  EXPECT_CONTAINS(html, "<code>specbed report --scope e2e</code>");  // the conventions' code
  EXPECT_CONTAINS(ReadFileToString(r.report_md), "`specbed report --scope e2e`");
  if (!gnuplot) GTEST_SKIP() << "gnuplot is not installed: no images to check";
  const std::regex img("<img [^>]*>");
  size_t n = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), img); it != std::sregex_iterator();
       ++it, ++n) {
    EXPECT_CONTAINS(it->str(), " width=\"960\" height=\"540\"");
  }
  EXPECT_EQ(n, r.images.size());
}

// 19 methods at T = 0 and 1 with steps, each a little faster than the last.
std::string Write19MethodDb(const std::string& name) {
  const std::string db = FreshDbPath(name);
  auto store = ResultsStore::Open(db);
  const int64_t run = store->BeginRun(TestRun());
  for (const double t : {0.0, 1.0}) {
    store->WriteCase(run, TestCase(StrCat("ar", t), "ar", t), testing::ArSamplesT0(), {});
    for (int m = 0; m < 19; ++m) {
      std::vector<SampleRecord> samples = testing::FakeSamples();
      for (SampleRecord& s : samples) s.decode_ms *= 1.0 + 0.05 * m;
      store->WriteCase(run, TestCase(StrCat("m", m, "_", t), StrCat("method", 10 + m), t), samples,
                       testing::FakeSteps());
    }
  }
  return db;
}

// The plot commands of a gnuplot script, one string per plot (from "plot " to its last line).
std::vector<std::string> PlotCommands(const std::string& gp) {
  std::vector<std::string> out;
  for (size_t at = gp.find("\nplot "); at != std::string::npos; at = gp.find("\nplot ", at + 1)) {
    size_t end = at + 1;
    do {
      end = gp.find('\n', end + 1);
    } while (end != std::string::npos && gp[end - 1] == '\\');
    out.push_back(gp.substr(at + 1, end - at - 1));
  }
  return out;
}

// Legend entries of cases in a plot command: titled series but the reference lines.
size_t CaseSeries(const std::string& command) {
  size_t n = 0;
  const std::regex titled(R"(title (columnheader\(|'([^']*)'))");
  for (auto it = std::sregex_iterator(command.begin(), command.end(), titled);
       it != std::sregex_iterator(); ++it) {
    const std::string title = (*it)[2];
    if (title.rfind("AR", 0) == 0 || title.rfind("step = ", 0) == 0 ||
        title.rfind("best speedup", 0) == 0 || title == "95% CI") {
      continue;
    }
    ++n;
  }
  return n;
}

TEST(ReportPlots, NineteenMethodsAtMostEightSeriesNoOnePointBudgetOneStylePerMethod) {
  const std::string dir = testing::ScratchDir("nineteen");
  const bool gnuplot = testing::HasGnuplot();  // when installed, it draws them without a warning
  const ReportResult r =
      WriteReport(Write19MethodDb("nineteen"), dir,
                  QuietReportOptions(gnuplot ? "gnuplot" : "/nonexistent/gnuplot"));
  if (gnuplot) {
    EXPECT_TRUE(r.warnings.empty()) << r.warnings.front();
  }
  const std::string gp = ReadFileToString(dir + "/plots.gp");
  const std::vector<std::string> commands = PlotCommands(gp);
  ASSERT_GT(commands.size(), 10u);
  for (const std::string& c : commands) EXPECT_LE(CaseSeries(c), 8u) << c.substr(0, 300);
  // Split per temperature where one plot would carry every case.
  EXPECT_CONTAINS(gp, "set output 'decode_scatter_1_t0.png'");
  EXPECT_CONTAINS(gp, "set output 'decode_scatter_1_t1.png'");
  const ReportData data = LoadReportData(Write19MethodDb("nineteen_data"));
  std::vector<std::string> labels;
  for (const CaseReport& c : data.groups[0].cases) labels.push_back(c.label);
  for (const Plot& p : BuildGroupPlots(data.groups[0], labels, 1)) {
    if (p.name == "decode_scatter_1_t0") {
      EXPECT_CONTAINS(p.caption, "Shown: 8 of 20 cases (AR and the best speedups)");
    }
  }
  // Every method ran at one budget: no budget plot (one x value per line), a note instead.
  EXPECT_NOT_CONTAINS(gp, "speedup_vs_budget_1");
  EXPECT_NOT_CONTAINS(gp, "tau_vs_budget_1");
  EXPECT_CONTAINS(ReadFileToString(r.report_md), "skipped (no method ran at two budgets or more");
  // One style per method in every plot: a colour always comes with the same marker.
  std::map<std::string, std::set<std::string>> markers_of;
  const std::regex style("lc rgb '(#[0-9a-f]{6})' pt (\\d+)");
  for (auto it = std::sregex_iterator(gp.begin(), gp.end(), style); it != std::sregex_iterator();
       ++it) {
    markers_of[(*it)[1]].insert((*it)[2]);
  }
  EXPECT_GE(markers_of.size(), 8u);
  for (const auto& [colour, markers] : markers_of) EXPECT_EQ(markers.size(), 1u) << colour;
}

TEST(ReportPlots, PerPositionAcceptanceDefaultIsUnconditional) {
  // Five shallow steps that accept nothing and five deep ones that accept all three: r_i rises
  // (0.5, 1, 1: the deep positions are reached only by the good steps); vLLM's P(position i
  // accepted) over all steps falls or stays (0.5, 0.5, 0.5).
  std::vector<StepRecord> steps;
  for (int i = 0; i < 5; ++i) steps.push_back(testing::TreeStep("p0", i, 1, 1, 0, 0));
  for (int i = 0; i < 5; ++i) steps.push_back(testing::TreeStep("p1", i, 3, 3, 3, 0));
  const std::string db = FreshDbPath("uncond");
  {
    auto store = ResultsStore::Open(db);
    const int64_t run = store->BeginRun(TestRun());
    store->WriteCase(run, TestCase("ar", "ar", 0), testing::ArSamplesT0(), {});
    store->WriteCase(run, TestCase("tree", "tree", 0), testing::TreeSamples(), steps);
  }
  const std::string dir = testing::ScratchDir("uncond");
  WriteReport(db, dir, QuietReportOptions("/nonexistent/gnuplot"));
  const std::string gp = ReadFileToString(dir + "/plots.gp");
  EXPECT_CONTAINS(gp, "$acceptance_1_t0_1 << EOD\n1 0.5\n2 0.5\n3 0.5\nEOD");
  EXPECT_CONTAINS(gp, "set ylabel 'P(position i accepted), all verify steps'");
  EXPECT_CONTAINS(gp, "$acceptance_cond_1_t0_1 << EOD\n1 0.5\n2 1\n3 1\nEOD");
  EXPECT_CONTAINS(gp, "set title 'Conditional per-position acceptance r_i at T=0");
}

}  // namespace
}  // namespace specbed
