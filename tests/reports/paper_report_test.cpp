// Tests for the paper-facing parts of `specbed report` (reports/report.h, paper_reference.h): on
// the synthetic paper database (sps k=2/k=4 and a tree method x datasets alpha/beta x T=0/1, see
// tests/reports/synthetic_db.h) the paper-layout table values (hand-computed, with per-category
// benchmarks and incomplete means), the hidden-constant statement, LaTeX escaping and tables.tex,
// every figure (PNG signature + SVG), the paper-vs-measured table from a small reference file (by
// --paper and by the run config), reference-file errors, the synthetic-acceptance banner, and a
// headless-browser check of index.html (Chromium screenshot not blank, every <img> loads, the
// layout by element order, not pixel offsets: only the page header and the headline's heading
// above the headline table and chart, every other section and the collapsed provenance below
// them, both on the first screen; no legend with `{`).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/locale_pin.h"
#include "base/mapped_file.h"
#include "reports/paper_reference.h"
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
using testing::ImageSources;
using testing::IsPngFile;
using testing::WritePaperDb;

std::string FreshDir(const std::string& name) {
  return testing::ScratchDir("paper_report_" + name, /*create=*/true);
}

ReportOptions Options(const std::string& gnuplot, std::vector<std::string> paper = {}) {
  ReportOptions o = testing::QuietReportOptions(gnuplot);
  o.paper_references = std::move(paper);
  return o;
}

// The cells of `t` as "group header" -> value for the row whose method cell starts with `method`
// and whose knobs cell is `knobs`.
std::map<std::string, std::string> RowOf(const ReportTable& t, const std::string& method,
                                         const std::string& knobs) {
  int knobs_col = -1;
  for (size_t c = 0; c < t.columns.size(); ++c) {
    if (t.columns[c].header == "knobs") knobs_col = static_cast<int>(c);
  }
  std::map<std::string, std::string> out;
  int found = 0;
  for (const auto& row : t.rows) {
    if (row[0].rfind(method, 0) != 0 || (knobs_col >= 0 && row[knobs_col] != knobs)) continue;
    ++found;
    for (size_t c = 0; c < row.size(); ++c) {
      const auto& col = t.columns[c];
      out[col.group.empty() ? col.header : col.group + " " + col.header] = row[c];
    }
  }
  EXPECT_EQ(found, 1) << method << " " << knobs;
  return out;
}

// Expects every (key, value) of `expected` in `cells`.
void ExpectEntries(const std::map<std::string, std::string>& cells,
                   const std::vector<std::pair<std::string, std::string>>& expected) {
  for (const auto& [key, value] : expected) {
    const auto it = cells.find(key);
    EXPECT_EQ(it == cells.end() ? "<missing>" : it->second, value) << key;
  }
}

TEST(PaperTables, HandComputedValuesPerBenchmarkAndHiddenConstants) {
  const std::string db = FreshDbPath("paper_tables");
  WritePaperDb(db);
  const std::vector<PaperTable> tables = BuildPaperTables(LoadReportData(db));
  ASSERT_EQ(tables.size(), 2u);  // (tiny, T=0) and (tiny, T=1)
  EXPECT_EQ(tables[0].title, "tiny · T=0");
  EXPECT_EQ(tables[1].title, "tiny · T=1");
  const ReportTable& t = tables[0].table;
  ASSERT_EQ(t.rows.size(), 3u);  // sps k=2, sps k=4, tree; AR has no row

  // Columns: method, knobs, then per benchmark (beta split into its categories) Spd and τ.
  std::vector<std::string> headers;
  for (const auto& c : t.columns)
    headers.push_back(c.group.empty() ? c.header : c.group + " " + c.header);
  EXPECT_EQ(headers, (std::vector<std::string>{
                         "method", "knobs", "alpha Spd", "alpha τ", "beta/code Spd", "beta/code τ",
                         "beta/math Spd", "beta/math τ", "All Spd", "All τ",
                         "Mean of benchmarks Spd", "Mean of benchmarks τ", "T_D%", "rollback%"}));
  // Constant configuration columns are hidden and stated once.
  std::map<std::string, std::string> constants(t.constants.begin(), t.constants.end());
  ExpectEntries(constants,
                {{"threads", "1"}, {"max new", "32"}, {"dtype", "float32"}, {"run", "1"}});
  EXPECT_EQ(constants.count("knobs"), 0u);

  auto k2 = RowOf(t, "sps", "k=2");
  ExpectEntries(k2, {{"alpha Spd", "1.59×"},
                     {"alpha τ", "2.33"},
                     {"beta/code Spd", "1.00×"},
                     {"beta/code τ", "1.00"},
                     {"beta/math Spd", "2.00×"},
                     {"beta/math τ", "3.00"},
                     {"Mean of benchmarks Spd", "1.53×"},
                     {"Mean of benchmarks τ", "2.11"},
                     {"T_D%", "6.3"},
                     {"rollback%", "33.3"}});
  ExpectEntries(RowOf(t, "sps", "k=4"), {{"alpha Spd", "2.52×"},
                                         {"alpha τ", "4.00"},
                                         {"beta/code τ", "2.00"},
                                         {"beta/math Spd", "4.00×"},
                                         {"beta/math τ", "5.00"},
                                         {"Mean of benchmarks Spd", "2.51×"},
                                         {"Mean of benchmarks τ", "3.67"},
                                         {"T_D%", "10.4"},
                                         {"rollback%", "25.0"}});
  ExpectEntries(RowOf(t, "tree", "depth=3,top_k=2"),
                {{"method", std::string("tree [") + kSyntheticMarker + "]"},
                 {"alpha Spd", "2.00×"},
                 {"beta/math Spd", "—"},
                 {"Mean of benchmarks Spd", "2.00×*"},
                 {"Mean of benchmarks τ", "4.00*"},
                 {"T_D%", "8.6"},
                 {"rollback%", "50.0"}});
  // All = over every answer of the row: the geometric mean of the cases' per-answer speedups
  // (one figure per case everywhere) and Σ emitted / Σ steps, computed here from the cases.
  const ReportData data = LoadReportData(db);
  std::vector<double> ratios;
  int64_t emitted = 0, steps = 0;
  for (const ReportGroup& g : data.groups) {
    for (const CaseReport& c : g.cases) {
      if (c.row.record.method != "sps" || c.row.record.temperature != 0 ||
          c.row.record.method_knobs_json.find("\"k\":2") == std::string::npos) {
        continue;
      }
      ratios.insert(ratios.end(), c.speedup.per_prompt.begin(), c.speedup.per_prompt.end());
      emitted += c.metrics.emitted;
      steps += c.metrics.n_steps;
    }
  }
  ASSERT_GT(ratios.size(), 3u);
  char all_spd[32];
  std::snprintf(all_spd, sizeof(all_spd), "%.2f×", GeometricMean(ratios));
  EXPECT_EQ(k2["All Spd"], all_spd);
  char all_tau[32];
  std::snprintf(all_tau, sizeof(all_tau), "%.2f", static_cast<double>(emitted) / steps);
  EXPECT_EQ(k2["All τ"], all_tau);
  EXPECT_NE(k2["All Spd"], k2["Mean of benchmarks Spd"]);  // the two definitions differ here
  ASSERT_EQ(tables[0].notes.size(), 2u);
  EXPECT_CONTAINS(tables[0].notes[0], "so it differs from All whenever the benchmarks' speedups");
  EXPECT_CONTAINS(tables[0].notes[1], "mean over the benchmarks with a value");

  // T = 1 doubles every decode time: same speedups, T_D halves.
  ExpectEntries(RowOf(tables[1].table, "sps", "k=2"), {{"alpha Spd", "1.59×"}, {"T_D%", "3.2"}});
}

// A 5-answer stream (categories a, a, a, b, b): AR 10 ms per decode token; "static" 5 ms per
// token, 2 tokens per step; "adapt" 10 ms then 4 ms per token, 1 then 3 tokens per step, with 0.5 s
// of online update charged to answer 2. Windows of 2 answers: [1-2], [3-4], [5], all.
TEST(StreamTables, WindowsOfAnswersWithTauSpeedupAndUpdateTime) {
  const std::string db = FreshDbPath("stream");
  {
    auto store = ResultsStore::Open(db);
    const int64_t run = store->BeginRun(testing::TestRun());
    std::vector<SampleRecord> ar, stat, adapt;
    std::vector<StepRecord> stat_steps, adapt_steps;
    for (int i = 0; i < 5; ++i) {
      const std::string id = "p" + std::to_string(i);
      SampleRecord a = testing::Sample(id, 7, 1, 60, 0, "max_new_tokens");  // 6 decode tokens
      a.category = i < 3 ? "a" : "b";
      ar.push_back(a);
      SampleRecord s = a;
      s.decode_ms = 30;
      stat.push_back(s);
      for (int k = 0; k < 3; ++k) stat_steps.push_back(testing::Step(id, k, 2, 1, 2));
      SampleRecord d = a;
      d.decode_ms = i < 2 ? 60 : 24;
      adapt.push_back(d);
      const int per = i < 2 ? 1 : 3;
      for (int k = 0; k < 6 / per; ++k) {
        StepRecord st = testing::Step(id, k, 3, per - 1, per);
        if (i == 1 && k == 5) st.t_adapt_us = 5e5;
        adapt_steps.push_back(st);
      }
    }
    store->WriteCase(run, testing::TestCase("ar", "ar", 0), ar, {});
    CaseRecord cs = testing::TestCase("static", "static", 0);
    store->WriteCase(run, cs, stat, stat_steps);
    CaseRecord ca = testing::TestCase("adapt", "adapt", 0);
    ca.method_knobs_json = R"({"osd_interval":2})";
    store->WriteCase(run, ca, adapt, adapt_steps);
  }
  const ReportData data = LoadReportData(db);
  const std::vector<StreamTable> tables = BuildStreamTables(data, 2);
  ASSERT_EQ(tables.size(), 1u);
  const ReportTable& t = tables[0].table;
  EXPECT_EQ(tables[0].title, "tiny / stories · T=0 · windows of 2 answers");
  ASSERT_EQ(t.rows.size(), 4u);
  // Columns: window, answers, category, then (τ, Spd, upd s) per case in report order (method
  // name): case 3 (adapt), case 2 (static).
  ASSERT_EQ(t.columns.size(), 9u);
  EXPECT_EQ(t.columns[3].group, "case 3 adapt");
  EXPECT_EQ(t.columns[6].group, "case 2 static");
  using Row = std::vector<std::string>;
  EXPECT_EQ(t.rows[0], (Row{"1", "1–2", "a", "1.00", "1.00", "0.5", "2.00", "2.00", "0.0"}));
  EXPECT_EQ(t.rows[1], (Row{"2", "3–4", "a+b", "3.00", "2.50", "0.0", "2.00", "2.00", "0.0"}));
  EXPECT_EQ(t.rows[2], (Row{"3", "5", "b", "3.00", "2.50", "0.0", "2.00", "2.00", "0.0"}));
  // All: adapt τ = 30 tokens / 18 steps; Spd = geomean(1, 1, 2.5, 2.5, 2.5) = 2.5^(3/5).
  EXPECT_EQ(t.rows[3], (Row{"all", "1–5", "a+b", "1.67", "1.73", "0.5", "2.00", "2.00", "0.0"}));
  ASSERT_EQ(tables[0].case_notes.size(), 2u);
  EXPECT_CONTAINS(tables[0].case_notes[0], "osd_interval=2");
  // The report shows it (markdown, HTML, LaTeX), with the window from the options.
  ReportOptions o = Options("/nonexistent/gnuplot");
  o.stream_window = 2;
  const ReportResult r = WriteReport(db, FreshDir("stream"), o);
  EXPECT_CONTAINS(ReadFileToString(r.report_md), "## Adaptation over the stream");
  EXPECT_CONTAINS(ReadFileToString(r.report_md), "windows of 2 answers");
  EXPECT_CONTAINS(ReadFileToString(r.index_html), "id=\"stream\"");
  EXPECT_CONTAINS(ReadFileToString(r.tables_tex), "Adaptation over the stream");
  ASSERT_EQ(tables[0].tau.size(), 2u);
  EXPECT_EQ(tables[0].tau[0], (std::vector<double>{1.0, 3.0, 3.0}));
  const Plot plot = BuildStreamPlot(tables[0], 1);
  EXPECT_EQ(plot.name, "stream_tau_1");
  EXPECT_CONTAINS(plot.script, "$stream_tau_1_0 << EOD\n1 1\n2 3\n3 3\nEOD");
  // No online training in a database: no stream table; a window of 0 is refused.
  const std::string plain = FreshDbPath("stream_plain");
  testing::WriteSyntheticDb(plain);
  EXPECT_TRUE(BuildStreamTables(LoadReportData(plain), 8).empty());
  EXPECT_CONTAINS(ErrorOf([&] { BuildStreamTables(data, 0); }), "window must be >= 1");
}

TEST(PaperTables, LatexEscapingAndTable) {
  EXPECT_EQ(LatexEscape("a_b & 50% $x$ #1 {y} ~ ^ \\"),
            "a\\_b \\& 50\\% \\$x\\$ \\#1 \\{y\\} \\textasciitilde{} \\textasciicircum{} "
            "\\textbackslash{}");
  EXPECT_EQ(LatexEscape("τ — 2.00× ± 1 · Σ"),
            "$\\tau$ --- 2.00$\\times$ $\\pm$ 1 $\\cdot$ $\\Sigma$");
  ReportTable t;
  t.columns = {{"method", false, false},
               {"knobs", false, true},
               {"Spd", true, false, "mt_bench"},
               {"τ", true, false, "mt_bench"}};
  t.rows = {{"sps", "top_k=2", "1.50×", "2.00"}, {"sps", "top_k=2", "—", "3.00"}};
  const std::string tex = LatexTable(HideConstantColumns(t), "T=0 & co");
  EXPECT_CONTAINS(tex, "\\caption{T=0 \\& co. Same in every row: knobs top\\_k=2}");
  EXPECT_CONTAINS(tex, "\\begin{tabular}{lrr}");
  EXPECT_CONTAINS(tex, " & \\multicolumn{2}{c}{mt\\_bench} \\\\\n\\cmidrule(lr){2-3}");
  EXPECT_CONTAINS(tex, "method & Spd & $\\tau$ \\\\\n\\midrule\n");
  EXPECT_CONTAINS(tex, "sps & 1.50$\\times$ & 2.00 \\\\\nsps & --- & 3.00 \\\\\n\\bottomrule");
}

std::string WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
  return path;
}

// clang-format off
const char* kReference = R"json({
  "paper": "SpecTest (arXiv:0000.00000)", "table": "Table 2", "hardware": "1x A100-80G",
  "notes": "Numbers from Table 2 of the paper.",
  "rows": [
    {"method": "sps", "knobs": {"k": 4}, "dataset": "alpha", "temperature": 0, "speedup": 2.6, "tau": 4.1},
    {"method": "sps", "knobs": {"k": 2}, "target": "tiny", "dataset": "beta", "temperature": 1, "tau": 2.5},
    {"method": "sps", "target": "other-model", "dataset": "alpha", "temperature": 0, "speedup": 3.0}
  ]})json";
// clang-format on

TEST(PaperReference, LoadMatchAndComparisonTable) {
  const std::string dir = FreshDir("reference");
  const std::string path = WriteText(dir + "/ref.json", kReference);
  const PaperReference ref = LoadPaperReference(path);
  EXPECT_EQ(ref.paper, "SpecTest (arXiv:0000.00000)");
  ASSERT_EQ(ref.rows.size(), 3u);
  EXPECT_TRUE(std::isnan(ref.rows[1].speedup));
  CaseRecord c = testing::TestCase("x", "sps", 0);
  c.dataset = "data/alpha.jsonl";
  EXPECT_TRUE(MatchesPaperRow(ref.rows[0], c));  // knobs {"k":4} is a subset; dataset file stem
  c.method_knobs_json = R"({"k":2})";
  EXPECT_FALSE(MatchesPaperRow(ref.rows[0], c));

  const std::string db = FreshDbPath("paper_reference");
  WritePaperDb(db);
  const PaperComparison pc = BuildPaperComparison(LoadReportData(db), ref);
  EXPECT_EQ(pc.heading, "SpecTest (arXiv:0000.00000), Table 2 (1x A100-80G)");
  const ReportTable& t = pc.table;
  ASSERT_EQ(t.rows.size(), 3u);
  auto cell = [&](size_t r, const std::string& h) {
    for (size_t c = 0; c < t.columns.size(); ++c) {
      if (t.columns[c].header == h) return t.rows[r][c];
    }
    return "<no column " + h + ">";
  };
  EXPECT_EQ(cell(0, "paper Spd"), "2.60×");
  EXPECT_EQ(cell(0, "measured Spd"), "2.52×");
  EXPECT_EQ(cell(0, "paper τ"), "4.10");
  EXPECT_EQ(cell(0, "measured τ"), "4.00");
  EXPECT_EQ(cell(1, "paper Spd"), "—");
  EXPECT_EQ(cell(1, "measured Spd"), "1.59×");  // whole beta case at T=1: ratios 2, 2, 1
  EXPECT_EQ(cell(1, "measured τ"), "2.33");
  EXPECT_EQ(cell(2, "measured Spd"), "—");  // no case of target other-model
  EXPECT_EQ(cell(2, "measured case"), "—");
}

TEST(PaperReference, ErrorsNameTheFileAndField) {
  const std::string dir = FreshDir("reference_errors");
  const std::string unknown = WriteText(
      dir + "/unknown.json",
      R"({"rows": [{"method": "sps", "dataset": "d", "temperature": 0, "speedup": 1, "spedup": 2}]})");
  std::string e = ErrorOf([&] { LoadPaperReference(unknown); });
  EXPECT_CONTAINS(e, unknown);
  EXPECT_CONTAINS(e, "rows[0]");
  EXPECT_CONTAINS(e, "unknown field 'spedup'");
  const std::string top = WriteText(dir + "/top.json", R"({"rows": [], "year": 2025})");
  EXPECT_CONTAINS(ErrorOf([&] { LoadPaperReference(top); }), "unknown field 'year'");
  const std::string neither = WriteText(
      dir + "/neither.json", R"({"rows": [{"method": "a", "dataset": "d", "temperature": 0}]})");
  EXPECT_CONTAINS(ErrorOf([&] { LoadPaperReference(neither); }), "'speedup' and 'tau'");
  const std::string type =
      WriteText(dir + "/type.json",
                R"({"rows": [{"method": "a", "dataset": "d", "temperature": "0", "tau": 1}]})");
  EXPECT_CONTAINS(ErrorOf([&] { LoadPaperReference(type); }), "'temperature' must be a number");
  // A --paper file that is missing fails the report, before anything is written.
  const std::string db = FreshDbPath("paper_missing_ref");
  WritePaperDb(db);
  const std::string out = dir + "/out";
  EXPECT_CONTAINS(ErrorOf([&] { WriteReport(db, out, Options("", {dir + "/nope.json"})); }),
                  dir + "/nope.json");
}

// Writes the report of the paper database with the reference named in the run config (relative
// to the database's directory) into `dir`.
ReportResult WritePaperReport(const std::string& name, const std::string& dir,
                              const std::string& gnuplot) {
  const std::string db = FreshDbPath(name);
  WriteText(std::string(SPECBED_TEST_TMPDIR) + "/paper_report_ref.json", kReference);
  WritePaperDb(db, R"({"name":"paper-test","paper":{"reference":"paper_report_ref.json"}})");
  return WriteReport(db, dir, Options(gnuplot));
}

TEST(PaperReport, DocumentsTablesBannerAndPaperVsMeasured) {
  const std::string dir = FreshDir("docs");
  const ReportResult r = WritePaperReport("paper_docs", dir, "/nonexistent/gnuplot");
  const std::string html = ReadFileToString(r.index_html);
  const std::string md = ReadFileToString(r.report_md);
  const std::string tex = ReadFileToString(r.tables_tex);
  EXPECT_EQ(r.tables_tex, dir + "/tables.tex");
  // Synthetic banner at the top and on the flagged rows.
  EXPECT_CONTAINS(html,
                  "<p class=\"synthetic\" id=\"synthetic-banner\">SYNTHETIC ACCEPTANCE — not a "
                  "real measurement");
  EXPECT_LT(html.find("synthetic-banner"), html.find("<h2>Provenance</h2>"));
  EXPECT_CONTAINS(md, "> **SYNTHETIC ACCEPTANCE — not a real measurement: cases ");
  EXPECT_CONTAINS(html, "<td>tree [SYNTHETIC ACCEPTANCE — not a real measurement]</td>");
  // Paper-layout table with group headers, the constants statement, in all three formats.
  EXPECT_CONTAINS(html, "<h2>Results (paper layout)</h2>");
  EXPECT_CONTAINS(html, "<th class=\"group\" colspan=\"2\">beta/math</th>");
  EXPECT_CONTAINS(html, "<b>threads</b> 1");
  EXPECT_CONTAINS(md, "### tiny · T=0");
  EXPECT_CONTAINS(md, "| method | knobs | alpha Spd | alpha τ | beta/code Spd |");
  EXPECT_CONTAINS(md,
                  "| sps | k=2 | 1.59× | 2.33 | 1.00× | 1.00 | 2.00× | 3.00 | 1.59× | 2.33 | 1.53× "
                  "| 2.11 | 6.3 "
                  "| 33.3 |");
  EXPECT_CONTAINS(
      md, "Same in every row: **run** 1 · **top_p** 1 · **top_k** 0 · **seed** 0 · **max new** 32");
  EXPECT_CONTAINS(tex, "\\toprule");
  EXPECT_CONTAINS(tex, "\\multicolumn{2}{c}{beta/code}");
  EXPECT_CONTAINS(
      tex,
      "tree [SYNTHETIC ACCEPTANCE --- not a real measurement] & depth=3,top\\_k=2 & 2.00$\\times$");
  EXPECT_CONTAINS(tex, "threads 1");
  // Paper vs measured from the run config's reference.
  EXPECT_CONTAINS(md, "## Paper vs measured: SpecTest (arXiv:0000.00000), Table 2 (1x A100-80G)");
  EXPECT_CONTAINS(html, "<td class=\"num\">2.60×</td><td class=\"num\">2.52×</td>");
  EXPECT_CONTAINS(tex, "Paper vs measured");
  // Provenance carries the run config; details sections stay.
  EXPECT_CONTAINS(html, "<td>config</td>");
  EXPECT_CONTAINS(md, "## Details: tiny / alpha");
  EXPECT_CONTAINS(md, "## Details: tiny / beta");
}

// Every figure of the paper database: PNG signature, SVG with an <svg element, embedded with
// alt text in index.html and report.md.
TEST(PaperReport, EveryFigureIsWritten) {
  if (FindExecutable("gnuplot").empty()) GTEST_SKIP() << "gnuplot is not installed (gnuplot-nox)";
  const std::string dir = FreshDir("figures");
  const ReportResult r = WritePaperReport("paper_figures", dir, "gnuplot");
  EXPECT_TRUE(r.warnings.empty()) << r.warnings[0];
  std::set<std::string> expected;
  for (const char* stem :
       {"decode_speed_", "decode_scatter_", "speedup_vs_draft_", "tau_", "speedup_vs_tau_",
        "speedup_per_answer_", "speedup_vs_budget_", "tau_vs_budget_", "phase_time_",
        "tau_vs_temperature_", "headline_speedup_"}) {
    for (const char* g : {"1", "2"}) expected.insert(std::string(stem) + g + ".png");
  }
  // Per-position acceptance: one panel per temperature, unconditional (vLLM's) and conditional
  // (r_i); per category only where the answers
  // carry several categories (group 2: two benchmarks; group 1 gets a note instead).
  for (const char* facet :
       {"acceptance_1_t0", "acceptance_1_t1", "acceptance_2_t0", "acceptance_2_t1",
        "acceptance_cond_1_t0", "acceptance_cond_1_t1", "acceptance_cond_2_t0",
        "acceptance_cond_2_t1", "speedup_per_category_2"}) {
    expected.insert(std::string(facet) + ".png");
  }
  EXPECT_EQ(std::set<std::string>(r.images.begin(), r.images.end()), expected);
  const std::string html = ReadFileToString(r.index_html);
  const std::string md = ReadFileToString(r.report_md);
  for (const std::string& png : expected) {
    EXPECT_TRUE(IsPngFile(dir + "/" + png)) << png;
    const std::string svg = dir + "/" + png.substr(0, png.size() - 4) + ".svg";
    ASSERT_TRUE(fs::exists(svg)) << svg;
    const std::string text = ReadFileToString(svg);
    EXPECT_CONTAINS(text.substr(0, 2000), "<svg");
    EXPECT_CONTAINS(text, "</svg>");
    EXPECT_CONTAINS(html, "<img src=\"" + png + "\" alt=\"");
    EXPECT_CONTAINS(md, "](" + png + ")");
  }
  const std::string gp = ReadFileToString(dir + "/plots.gp");
  EXPECT_CONTAINS(gp, "set xlabel 'draft budget (mean drafted nodes per verify step)'");
  EXPECT_CONTAINS(gp, "best speedup (per temperature)");
  // Iso-cost lines of the speedup-vs-τ plot; per-position acceptance counts in the legend.
  EXPECT_CONTAINS(gp, "x / 2 with lines dt 2 lc rgb 'gray60' title 'step = 2 AR steps'");
  EXPECT_CONTAINS(gp, " (n=");
  EXPECT_CONTAINS(ReadFileToString(r.report_md),
                  "Speedup per prompt category — ");  // group 1 has one category: a note
  EXPECT_CONTAINS(ReadFileToString(r.report_md), "skipped (the answers carry one category).");
  EXPECT_CONTAINS(gp, "set style histogram rowstacked");
  // Budgets of alpha at T=0: sps k=2 -> 2, k=4 -> 4 (speedups 1.5874, 2.51984); best = k=4.
  EXPECT_CONTAINS(gp, "2 1.5874\n4 2.51984\nEOD");
}

TEST(PaperReport, OneTemperatureSkipsTauVsTemperatureWithANote) {
  if (FindExecutable("gnuplot").empty()) GTEST_SKIP() << "gnuplot is not installed (gnuplot-nox)";
  const std::string db = FreshDbPath("paper_one_t");
  testing::WriteSyntheticDb(db);  // speculative cases only at T=0
  const std::string dir = FreshDir("one_t");
  const ReportResult r = WriteReport(db, dir, Options("gnuplot"));
  EXPECT_FALSE(fs::exists(dir + "/tau_vs_temperature_1.png"));
  EXPECT_TRUE(IsPngFile(dir + "/phase_time_1.png"));
  EXPECT_CONTAINS(ReadFileToString(r.report_md),
                  "τ vs. temperature — tiny / stories: skipped (one temperature only).");
  EXPECT_NOT_CONTAINS(ReadFileToString(r.index_html), "synthetic-banner");
}

// ---- Headless browser ------------------------------------------------------------------------

std::string Shell(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  pclose(pipe);
  return out;
}

// Chromium in the C.UTF-8 locale whatever the test's (base/locale_pin.h).
std::string Chromium(const std::string& profile, const std::string& args) {
  return Shell(ChildLocaleShellPrefix() +
               "timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
               "--user-data-dir='" +
               profile + "' " + args + " 2>/dev/null");
}

// Width and height from a PNG's IHDR chunk (0 x 0 when it is not a PNG).
std::pair<uint32_t, uint32_t> PngSize(const std::string& path) {
  if (!IsPngFile(path)) return {0, 0};
  const std::string b = ReadFileToString(path);
  auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(b[at])) << 24) | (uint32_t(uint8_t(b[at + 1])) << 16) |
           (uint32_t(uint8_t(b[at + 2])) << 8) | uint32_t(uint8_t(b[at + 3]));
  };
  return {be32(16), be32(20)};
}

TEST(PaperReport, HeadlessBrowserRendersPageAndEveryImage) {
  if (FindExecutable("chromium").empty()) {
    GTEST_SKIP() << "chromium is not installed (Debian package chromium)";
  }
  if (FindExecutable("gnuplot").empty()) GTEST_SKIP() << "gnuplot is not installed (gnuplot-nox)";
  const std::string dir = FreshDir("browser");
  const std::string work = FreshDir("browser_work");
  const ReportResult r = WritePaperReport("paper_browser", dir, "gnuplot");
  ASSERT_FALSE(r.images.empty());
  // Warnings are shown above the headline; this report has none (gnuplot's included).
  EXPECT_TRUE(r.warnings.empty()) << r.warnings[0];

  // Screenshot of the report vs. a blank page of the same size: PNG compresses a blank page to
  // almost nothing, so a rendered report (tables, text, images) is many times larger.
  const std::string blank_html =
      WriteText(work + "/blank.html", "<!DOCTYPE html><html><body></body></html>");
  const std::string shot = work + "/report.png", blank = work + "/blank.png";
  Chromium(work + "/profile", "--window-size=1280,2000 --screenshot='" + shot + "' 'file://" +
                                  fs::absolute(r.index_html).string() + "'");
  Chromium(work + "/profile", "--window-size=1280,2000 --screenshot='" + blank + "' 'file://" +
                                  fs::absolute(blank_html).string() + "'");
  ASSERT_TRUE(IsPngFile(shot)) << "chromium wrote no screenshot";
  ASSERT_TRUE(IsPngFile(blank));
  EXPECT_EQ(PngSize(shot), std::make_pair(1280u, 2000u));
  EXPECT_GT(fs::file_size(shot), 10 * fs::file_size(blank))
      << "report screenshot " << fs::file_size(shot) << " bytes vs. blank " << fs::file_size(blank);

  // Every <img> resolves: a copy of index.html (same directory, so relative paths hold) with a
  // script that records each image's natural size after load; --dump-dom prints the DOM.
  std::string html = ReadFileToString(r.index_html);
  const std::string probe =
      "<script>window.addEventListener('load', function () {"
      " for (const img of document.images) {"
      "  img.setAttribute('data-natural', img.naturalWidth > 0 && img.naturalHeight > 0"
      "   ? img.naturalWidth + 'x' + img.naturalHeight : 'broken'); }"
      " document.body.setAttribute('data-images', String(document.images.length)); });</script>";
  html.insert(html.rfind("</body>"), probe);
  const std::string check = WriteText(dir + "/_img_check.html", html);
  const std::string dom =
      Chromium(work + "/profile", "--virtual-time-budget=10000 --dump-dom 'file://" +
                                      fs::absolute(check).string() + "'");
  fs::remove(check);
  EXPECT_CONTAINS(dom, "data-images=\"" + std::to_string(r.images.size()) + "\"");
  EXPECT_NOT_CONTAINS(dom, "data-natural=\"broken\"");
  const std::regex natural("data-natural=\"(\\d+)x(\\d+)\"");
  size_t loaded = 0;
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), natural);
       it != std::sregex_iterator(); ++it) {
    EXPECT_EQ((*it)[1], "960");
    EXPECT_EQ((*it)[2], "540");
    ++loaded;
  }
  // Each <img> states that natural size (width and height attributes).
  EXPECT_EQ(std::regex_search(html, std::regex("<img src=\"[^\"]+\" alt=\"[^\"]*\">")), false);
  EXPECT_EQ(loaded, r.images.size());
  // And the files behind the DOM's <img> elements exist and are PNGs.
  for (const std::string& src : ImageSources(dom)) EXPECT_TRUE(IsPngFile(dir + "/" + src)) << src;
  EXPECT_EQ(ImageSources(dom).size(), r.images.size());

  // Layout, measured in the rendered page (getBoundingClientRect, written into the DOM) as order
  // and position relative to other elements, not as pixel offsets that depend on the installed
  // fonts: (1) the only elements laid out above the headline table and its speedup chart are the
  // page header (title, database line, synthetic banner) and the headline's own heading, setup
  // line, intro and table title; (2) the table comes first in reading order (left of the chart,
  // or above it when they wrap: method and speedup first on a narrow screen) and the chart is
  // shown at its natural size (not squeezed); (3) every other section heading, and the collapsed
  // provenance, are laid out below both; (4) the provenance comes after every table and figure
  // of the results; (5) with that, the table starts on the first screen (a 1280x900 window: its
  // innerHeight, not a constant), the natural-size chart beside or right after it.
  std::string layout = ReadFileToString(r.index_html);
  layout.insert(layout.rfind("</body>"),
                "<script>window.addEventListener('load', function () {"
                " const box = (e) => e.getBoundingClientRect();"
                " const top = (e) => box(e).top + scrollY;"
                " const set = (k, v) => document.body.setAttribute('data-' + k, String(v));"
                " const table = document.querySelector('.headline-table table');"
                " const chart = document.querySelector('img[src^=\"headline_speedup_\"]');"
                " const provenance = document.getElementById('provenance');"
                " if (!table || !chart || !provenance) { set('layout', 'missing'); return; }"
                " set('layout', 'measured');"
                " const first = Math.min(top(table), top(chart));"
                " const last = Math.max(top(table), top(chart));"
                " const above = [];"
                " for (const e of document.body.children) {"
                "  if (e.tagName === 'SCRIPT' || e.contains(table) || e.contains(chart)) continue;"
                "  if (top(e) < first) above.push(e.tagName + (e.id ? '#' + e.id : '')"
                "   + (e.className && !e.id ? '.' + e.className : ''));"
                " }"
                " set('above-headline', above.join(' '));"
                " set('table-first',"
                "  box(table).right <= box(chart).left || box(table).bottom <= box(chart).top);"
                " set('chart-natural', Math.round(chart.width) === chart.naturalWidth);"
                " let early = 0;"
                " for (const h of document.querySelectorAll('h2')) {"
                "  if (h.id !== 'headline' && top(h) <= last) ++early;"
                " }"
                " set('sections-above-headline', early);"
                " let after = 0;"
                " for (const e of document.querySelectorAll('table, figure')) {"
                "  if (!provenance.contains(e) && !e.closest('details') && top(e) >= "
                "top(provenance)) ++after;"
                " }"
                " set('results-after-provenance', after);"
                " set('first-screen', top(table) < innerHeight);"
                " set('provenance-open', provenance.open); });</script>");
  const std::string layout_file = WriteText(dir + "/_layout_check.html", layout);
  const std::string layout_dom = Chromium(
      work + "/profile", "--window-size=1280,900 --virtual-time-budget=10000 --dump-dom 'file://" +
                             fs::absolute(layout_file).string() + "'");
  fs::remove(layout_file);
  auto attribute = [&](const std::string& name) {
    std::smatch m;
    const std::regex re("data-" + name + "=\"([^\"]*)\"");
    return std::regex_search(layout_dom, m, re) ? m[1].str() : std::string("(no attribute)");
  };
  ASSERT_EQ(attribute("layout"), "measured") << "headline table, chart or provenance missing";
  EXPECT_EQ(attribute("above-headline"),
            "H1 P P#synthetic-banner H2#headline P#setup H3");  // how to read: after the tables
  EXPECT_EQ(attribute("table-first"), "true");
  EXPECT_EQ(attribute("chart-natural"), "true");
  EXPECT_EQ(attribute("sections-above-headline"), "0");
  EXPECT_EQ(attribute("results-after-provenance"), "0");
  EXPECT_EQ(attribute("first-screen"), "true") << "headline table below the first screen";
  EXPECT_EQ(attribute("provenance-open"), "false");  // collapsed

  // No figure legend (or any other text gnuplot drew) contains '{' (raw JSON knobs): the SVGs'
  // text elements, and the plot titles of the script. The database's knobs are JSON objects
  // ({"k":2}, {"k":4}), so raw knobs would show up here.
  const std::regex svg_text("<text[^>]*>([^<]*)</text>");
  for (const std::string& png : r.images) {
    const std::string svg = dir + "/" + png.substr(0, png.size() - 4) + ".svg";
    const std::string text = ReadFileToString(svg);
    size_t n_text = 0;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), svg_text);
         it != std::sregex_iterator(); ++it, ++n_text) {
      EXPECT_EQ((*it)[1].str().find('{'), std::string::npos) << svg << ": " << (*it)[1];
    }
    EXPECT_GT(n_text, 3u) << svg;
  }
  const std::string gp = ReadFileToString(dir + "/plots.gp");
  const std::regex title(" title '([^']*)'");
  for (auto it = std::sregex_iterator(gp.begin(), gp.end(), title); it != std::sregex_iterator();
       ++it) {
    EXPECT_EQ((*it)[1].str().find('{'), std::string::npos) << (*it)[1];
  }
}

// Knob strings as long as real ones (drafter names, templates): each case of a method gets a
// different drafter (a 60-character token), so the details table's knobs column shows that knob
// and keeps the rest for the hover text.
void LengthenKnobs(const std::string& db) {
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
  const char* sql =
      "DROP TRIGGER IF EXISTS cases_no_update; "  // results are append-only; this test edits
      "UPDATE cases SET method_knobs_json = '{\"block_size\":4,\"draft_sampling\":\"sample\","
      "\"drafter\":\"stories260K-twin-dflash-distilled-on-sharegpt-and-ultrachat-' || case_id || "
      "'\",\"tree\":\"best-first-expansion-by-path-log-probability\"}' WHERE method != 'ar'";
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(handle, sql, nullptr, nullptr, &error), SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  sqlite3_close(handle);
}

// The report lays out at 1280 and 1920 px: measured in the rendered page (a script writes its
// findings into the DOM), (1) the page does not scroll sideways (documentElement.scrollWidth <=
// innerWidth) and no element's box ends right of the viewport, except inside a table's own
// scroll box; (2) in the details table no knob token ("k=v", an inline span) is broken across
// lines (one client rect) or wider than its cell, i.e. the knobs column is wider than its longest
// token;
// (3) the knobs cells carry the full knobs as hover text.
TEST(PaperReport, LaysOutWithoutOverflowAt1280And1920) {
  if (FindExecutable("chromium").empty()) {
    GTEST_SKIP() << "chromium is not installed (Debian package chromium)";
  }
  const std::string db = FreshDbPath("report_layout");
  WritePaperDb(db, R"({"name":"layout-test"})");
  LengthenKnobs(db);
  const std::string dir = FreshDir("report_layout");
  const std::string work = FreshDir("report_layout_work");
  const ReportResult r =
      WriteReport(db, dir, Options(FindExecutable("gnuplot").empty() ? "no-gnuplot" : "gnuplot"));
  std::string html = ReadFileToString(r.index_html);
  EXPECT_CONTAINS(html, "title=\"block_size=4,");  // full knobs on hover
  html.insert(
      html.rfind("</body>"),
      "<script>window.addEventListener('load', function () {"
      " const set = (k, v) => document.body.setAttribute('data-' + k, String(v));"
      " const width = document.documentElement.clientWidth;"
      " const out = [];"
      " for (const e of document.body.querySelectorAll('*')) {"
      "  if (e.tagName === 'SCRIPT' || e.closest('.table-box') && !e.matches('.table-box')) "
      "continue;"
      "  if (e.closest('details:not([open])') && !e.matches('details')) continue;"
      "  const b = e.getBoundingClientRect();"
      "  if (b.width > 0 && b.right > width + 1) out.push(e.tagName + '.' + e.className);"
      " }"
      " set('overflowing', out.slice(0, 5).join(' '));"
      " set('page-wider', document.documentElement.scrollWidth > innerWidth);"
      " let cells = 0, split = 0;"
      " for (const table of document.querySelectorAll('table')) {"
      "  const heads = Array.from(table.querySelectorAll('thead tr:last-child th'));"
      "  const k = heads.findIndex((h) => h.textContent === 'knobs');"
      "  if (k < 0) continue;"
      "  for (const row of table.querySelectorAll('tbody tr')) {"
      "   const td = row.children[k];"
      "   const room = td.getBoundingClientRect().width;"
      "   for (const span of td.querySelectorAll('span.token')) {"
      "    ++cells;"
      "    if (span.getClientRects().length > 1 || span.getBoundingClientRect().width > room)"
      "     ++split; } } }"
      " set('knob-tokens', cells); set('knob-tokens-split', split); });</script>");
  const std::string check = WriteText(dir + "/_layout_width.html", html);
  for (const int px : {1280, 1920}) {
    const std::string dom =
        Chromium(work + "/profile", "--window-size=" + std::to_string(px) +
                                        ",1000 --virtual-time-budget=10000 --dump-dom 'file://" +
                                        fs::absolute(check).string() + "'");
    auto attribute = [&](const std::string& name) {
      std::smatch m;
      const std::regex re("data-" + name + "=\"([^\"]*)\"");
      return std::regex_search(dom, m, re) ? m[1].str() : std::string("(no attribute)");
    };
    EXPECT_EQ(attribute("overflowing"), "") << px << " px";
    EXPECT_EQ(attribute("page-wider"), "false") << px << " px";
    EXPECT_NE(attribute("knob-tokens"), "0") << px << " px: no knobs column measured";
    EXPECT_EQ(attribute("knob-tokens-split"), "0") << px << " px: a knob token wraps";
  }
  fs::remove(check);
}

// At a phone's 390 px: the page does not scroll sideways and, in every headline table, the first
// row's method and speedup cells lie inside the viewport (the table scrolls in its own box, its
// method column sticky).
TEST(PaperReport, NarrowScreenKeepsMethodAndSpeedupInView) {
  if (FindExecutable("chromium").empty()) {
    GTEST_SKIP() << "chromium is not installed (Debian package chromium)";
  }
  const std::string dir = FreshDir("narrow");
  const std::string work = FreshDir("narrow_work");
  const ReportResult r = WritePaperReport(
      "paper_narrow", dir, FindExecutable("gnuplot").empty() ? "no-gnuplot" : "gnuplot");
  std::string html = ReadFileToString(r.index_html);
  html.insert(
      html.rfind("</body>"),
      "<script>window.addEventListener('load', function () {"
      " const set = (k, v) => document.body.setAttribute('data-' + k, String(v));"
      " const width = document.documentElement.clientWidth;"
      " let tables = 0, hidden = 0;"
      " for (const t of document.querySelectorAll('.headline-table table')) {"
      "  ++tables;"
      "  const heads = Array.from(t.querySelectorAll('thead th'));"
      "  const k = heads.findIndex((h) => h.textContent.startsWith('speedup'));"
      "  const cells = t.querySelector('tbody tr').children;"
      "  if (k < 0) { ++hidden; continue; }"
      "  for (const c of [cells[0], cells[k]]) {"
      "   const b = c.getBoundingClientRect();"
      "   if (b.left < 0 || b.right > width + 1) ++hidden; } }"
      " set('tables', tables); set('hidden', hidden);"
      " set('page-wider', document.documentElement.scrollWidth > innerWidth); });</script>");
  const std::string check = WriteText(dir + "/_narrow.html", html);
  const std::string dom = Chromium(work + "/profile",
                                   "--window-size=390,844 --virtual-time-budget=10000 --dump-dom "
                                   "'file://" +
                                       fs::absolute(check).string() + "'");
  fs::remove(check);
  auto attribute = [&](const std::string& name) {
    std::smatch m;
    const std::regex re("data-" + name + "=\"([^\"]*)\"");
    return std::regex_search(dom, m, re) ? m[1].str() : std::string("(no attribute)");
  };
  EXPECT_EQ(attribute("tables"), "2");
  EXPECT_EQ(attribute("hidden"), "0") << "a method or speedup cell outside the 390 px view";
  EXPECT_EQ(attribute("page-wider"), "false");
}

}  // namespace
}  // namespace specbed
