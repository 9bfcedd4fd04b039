// Tests for reports/serve_report.h and the report's "Serving under load" section on synthetic
// serve cells (tests/reports/serve_synthetic.h): grouping by workload, one series per method
// configuration (AR first), ×AR per cell, the C* table (a method crossing at C=4, one that never
// crosses: "> 8"), the cell table with its schedules, the plain-text table `specbed serve`
// prints (aligned; "—" without an AR partner), and the report: the section, its plots in
// plots.gp (the open-loop cells' TPOT vs. λ among them; as PNGs with gnuplot), the reading note;
// a database without serve cells (and a schema-v13 file) gives no section; `specbed summary` and
// `specbed export --table serve` on the same cells.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"
#include "reports/export.h"
#include "reports/plots.h"
#include "reports/report.h"
#include "reports/serve_report.h"
#include "reports/summary.h"
#include "results/store.h"
#include "tests/common/test_util.h"
#include "tests/reports/report_test_util.h"
#include "tests/reports/serve_synthetic.h"
#include "tests/reports/synthetic_db.h"

namespace specbed {
namespace {

using testing::SyntheticClosedCell;
using testing::SyntheticServe;

// AR's token time per concurrency; a method's is AR's divided by its factor at C.
const std::map<int64_t, double> kArMs = {{1, 10}, {2, 6}, {4, 4}, {8, 3}};

void AddSeries(std::vector<ServeCellData>& cells, const std::string& method,
               const std::string& knobs, const std::string& schedule,
               const std::map<int64_t, double>& factor, const std::string& target = "tiny") {
  for (const auto& [c, ms] : kArMs) {
    for (uint64_t seed : {1, 2}) {
      SyntheticServe s;
      s.method = method;
      s.knobs = knobs;
      s.schedule = schedule;
      s.concurrency = c;
      s.seed = seed;
      s.ms_per_token = ms / factor.at(c);
      s.noise = 0.02;
      s.noise_seed = method == "ar" ? 1 : 2;
      s.tokens_per_step = method == "ar" ? 1 : 3;
      ServeCellData d = SyntheticClosedCell(s);
      d.cell.target = target;
      d.cell.cell_key += "/" + target;
      cells.push_back(d);
    }
  }
}

// An open-loop cell at 2 requests/s (arrivals every 500 ms), `ms_per_token` per token; "spec" has
// the knobs and schedule of the spec series.
ServeCellData OpenCell(const std::string& method, double ms_per_token) {
  SyntheticServe s;
  s.method = method;
  if (method == "spec") {
    s.knobs = R"({"k":2})";
    s.schedule = "by_batch";
  }
  s.ms_per_token = ms_per_token;
  s.tokens_per_step = method == "ar" ? 1 : 3;
  ServeCellData d = SyntheticClosedCell(s);
  d.cell.mode = "open";
  d.cell.concurrency = 0;
  d.cell.rate = 2;
  d.cell.cell_key += "/open";
  d.cell.makespan_ms = 0;
  for (size_t i = 0; i < d.requests.size(); ++i) {  // shift each request to its arrival
    ServeRequestRecord& r = d.requests[i];
    const double shift = 500.0 * static_cast<double>(i) - r.arrival_ms;
    r.arrival_ms += shift;
    r.admitted_ms += shift;
    r.first_token_ms += shift;
    r.finish_ms += shift;
    r.emits_json = "";
  }
  return d;
}

const std::map<int64_t, double> kOne = {{1, 1}, {2, 1}, {4, 1}, {8, 1}};
const std::map<int64_t, double> kCrossesAt4 = {{1, 2.0}, {2, 1.5}, {4, 0.8}, {8, 0.5}};
const std::map<int64_t, double> kTwice = {{1, 2}, {2, 2}, {4, 2}, {8, 2}};

std::vector<ServeCellData> ServeCells() {
  std::vector<ServeCellData> cells;
  AddSeries(cells, "spec", R"({"k":2})", "by_batch", kCrossesAt4);
  AddSeries(cells, "ar", "{}", "fixed", kOne);
  AddSeries(cells, "never", "{}", "fixed", kTwice);
  AddSeries(cells, "ar", "{}", "fixed", kOne, "other-target");
  cells.push_back(OpenCell("ar", 10));
  cells.push_back(OpenCell("spec", 5));
  return cells;
}

TEST(ServeReport, GroupsSeriesAndTheCrossoverTable) {
  const std::vector<ServeGroup> groups = BuildServeGroups(ServeCells());
  ASSERT_EQ(groups.size(), 2u);
  const ServeGroup& g = groups[0];
  EXPECT_EQ(g.title, "tiny / stories · T=0 · 48 requests × 16 new tokens · cpu float32 t1");
  ASSERT_EQ(g.series.size(), 3u);
  EXPECT_TRUE(g.series[0].is_ar);  // AR first, then by label
  EXPECT_EQ(g.series[1].label, "never");
  EXPECT_EQ(g.series[2].label, "spec k=2 · by_batch");
  EXPECT_EQ(g.series[0].cells.size(), 8u);  // closed loop only
  EXPECT_EQ(g.series[1].crossover.c_star, std::numeric_limits<double>::infinity());
  EXPECT_EQ(g.series[2].crossover.c_star, 4);
  ASSERT_EQ(g.cells.size(), 26u);
  for (size_t i = 0; i < g.cells.size(); ++i) {
    const ServeCellRecord& c = g.cells[i].cell;
    if (IsServeArBaseline(c)) {
      EXPECT_DOUBLE_EQ(g.x_ar[i], 1.0) << c.cell_key;
    } else if (c.method == "spec" && c.concurrency == 1) {
      EXPECT_NEAR(g.x_ar[i], 2.0, 0.1) << c.cell_key;
    } else if (c.method == "spec" && c.mode == "open") {
      EXPECT_GT(g.x_ar[i], 0) << c.cell_key;
    }
  }
  EXPECT_TRUE(g.notes.empty());
  EXPECT_EQ(groups[1].series.size(), 1u);

  const ReportTable t = ServeCrossoverTable(g);
  ASSERT_EQ(t.rows.size(), 2u);  // the speculative series
  EXPECT_EQ(t.columns[3].header, "C=1");
  EXPECT_EQ(t.columns[3].group, "×AR [95% CI]");
  EXPECT_EQ(t.rows[0][0], "never");
  EXPECT_EQ(t.rows[0][1], "> 8");
  EXPECT_EQ(t.rows[0][2], "> 8 – > 8");
  EXPECT_EQ(t.rows[1][1], "4");
  EXPECT_EQ(t.rows[1][2], "4 – 4");
  EXPECT_EQ(t.rows[1][3].rfind("2.0", 0), 0u) << t.rows[1][3];    // 2x at C=1, not crossed
  EXPECT_EQ(t.rows[1][6].rfind("≤ 0.5", 0), 0u) << t.rows[1][6];  // crossed at C=8
  EXPECT_EQ(FormatCStar(std::nan(""), 8), "—");
}

TEST(ServeReport, CellTableShowsEachCellsSchedule) {
  const std::vector<ServeGroup> groups = BuildServeGroups(ServeCells());
  const ReportTable t = ServeCellTable(groups[0]);
  ASSERT_EQ(t.rows.size(), groups[0].cells.size());
  EXPECT_EQ(t.columns.back().header, "schedule_json");
  bool by_batch = false, open = false;
  for (const auto& row : t.rows) {
    if (row[1] == "by_batch") {
      by_batch = true;
      EXPECT_EQ(row.back(), R"({"policy":"by_batch","k":2})");
    }
    if (row[2] == "λ=2/s") open = true;
  }
  EXPECT_TRUE(by_batch);
  EXPECT_TRUE(open);
}

// Display width of UTF-8 text.
size_t Width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

TEST(ServeReport, PlainTextTableIsAlignedAndComparesWithAr) {
  std::vector<ServeCellData> cells;
  AddSeries(cells, "ar", "{}", "fixed", kOne);
  AddSeries(cells, "spec", R"({"k":2})", "by_batch", kCrossesAt4);
  cells.push_back(OpenCell("spec", 5));  // no open-loop AR cell: no ×AR
  const std::string text = ServeTable(cells);
  std::istringstream in(text);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u + cells.size());
  EXPECT_EQ(lines[0].rfind("method", 0), 0u);
  for (const char* h : {"C / λ", "tok/s", "×AR", "TTFT p50", "TPOT p50", "TPOT p99", "ITL p50",
                        "E2E p99", "τ", "acc%"}) {
    EXPECT_CONTAINS(lines[0], h);
  }
  for (const std::string& line : lines) EXPECT_EQ(Width(line), Width(lines[0])) << line;
  EXPECT_CONTAINS(lines[1], "C=1");
  EXPECT_CONTAINS(lines[1], " 1.00 ");  // AR against itself
  EXPECT_CONTAINS(text, "spec k=2 · by_batch  by_batch  C=8");
  // The open-loop cell has no AR partner: "—" under ×AR (the 5th column).
  const std::string& open = lines.back();
  EXPECT_CONTAINS(open, "λ=2/s");
  EXPECT_EQ(open.find("—"), open.find("  —  ") + 2) << open;
}

// A results database with the serve cells of ServeCells().
std::string WriteServeDb(const std::string& name) {
  const std::string path = testing::FreshDbPath(name);
  auto store = ResultsStore::Open(path);
  const int64_t run = store->BeginRun(testing::TestRun());
  for (const ServeCellData& d : ServeCells()) store->AddServeCell(run, d.cell, d.requests, d.steps);
  return path;
}

TEST(ServeReport, ReportHasTheServingSectionWithPlotsAndTheReadingNote) {
  const std::string db = WriteServeDb("serve_section");
  const std::string dir = testing::ScratchDir("reports_serve_section");
  const ReportResult r = WriteReport(db, dir, testing::QuietReportOptions("/nonexistent/gnuplot"));
  const std::string md = ReadFileToString(r.report_md);
  EXPECT_CONTAINS(md, "## Serving under load");
  EXPECT_CONTAINS(md, "### tiny / stories · T=0");
  EXPECT_CONTAINS(md, "### other-target / stories");
  EXPECT_CONTAINS(md, "| spec k=2 · by_batch | 4 | 4 – 4 |");
  EXPECT_CONTAINS(md, "| never | > 8 |");
  EXPECT_CONTAINS(md, "AR on the identical trace");
  EXPECT_CONTAINS(md, "2-core CPU");
  EXPECT_NOT_CONTAINS(md, "No cases recorded.");
  const std::string gp = ReadFileToString(dir + "/plots.gp");
  EXPECT_CONTAINS(gp, "serve_throughput_1.png");
  EXPECT_CONTAINS(gp, "serve_tpot_1.png");
  EXPECT_CONTAINS(gp, "serve_open_1.png");  // the open-loop cells: TPOT vs. the arrival rate
  EXPECT_CONTAINS(gp, "request rate λ");
  EXPECT_NOT_CONTAINS(gp, "serve_open_2.png");  // other-target has no open-loop cell
  EXPECT_CONTAINS(gp, "title 'C* (crossover)'");
  EXPECT_CONTAINS(gp, "set logscale x 2");
  if (!testing::HasGnuplot()) {
    GTEST_SKIP()
        << "gnuplot not installed (Debian gnuplot-nox): the rendered plots are not checked";
  }
  const std::string drawn = testing::ScratchDir("reports_serve_section_gnuplot");
  const ReportResult g = WriteReport(db, drawn, testing::QuietReportOptions("gnuplot"));
  EXPECT_TRUE(g.warnings.empty()) << g.warnings.front();
  for (const char* name :
       {"serve_throughput_1", "serve_tpot_1", "serve_open_1", "serve_throughput_2"}) {
    EXPECT_TRUE(testing::IsPngFile(drawn + "/" + name + ".png")) << name;
  }
  EXPECT_CONTAINS(ReadFileToString(g.index_html), "src=\"serve_throughput_1.png\"");
}

// `specbed summary` and `specbed export --table serve` read the serve cells: the summary's text
// lists them (here without cases) with each method's C*, its JSON holds every cell's metrics and
// the series' C* (never crossed: "inf"), the export one row per cell with its method's C*; a run
// selection keeps that run's cells, a case selection none.
TEST(ServeReport, SummaryAndExportReadTheServeCells) {
  const std::string db = WriteServeDb("serve_summary");
  const Summary s = BuildSummary(db);
  EXPECT_TRUE(s.rows.empty());
  ASSERT_EQ(s.serve_cells.size(), 34u);  // 4 series x 4 concurrencies x 2 seeds, 2 open-loop
  const std::string text = FormatSummaryTable(s);
  EXPECT_CONTAINS(text, "0 cases, 34 serve cells; runs in the database: 1");
  EXPECT_NOT_CONTAINS(text, "No cases recorded.");
  EXPECT_CONTAINS(text, "Serving under load");
  EXPECT_CONTAINS(text, "C* spec k=2 · by_batch: 4 [95% CI 4, 4]");
  EXPECT_CONTAINS(text, "C* never: > 8 [95% CI > 8, > 8]");
  EXPECT_CONTAINS(text, "λ=2/s");

  const nlohmann::json doc = nlohmann::json::parse(SummaryJson(s));
  ASSERT_EQ(doc["serve"].size(), 2u);
  const nlohmann::json& tiny = doc["serve"][0];
  EXPECT_EQ(tiny["workload"],
            "tiny / stories · T=0 · 48 requests × 16 new tokens · cpu float32 t1");
  ASSERT_EQ(tiny["crossover"].size(), 2u);
  EXPECT_EQ(tiny["crossover"][0]["series"], "never");
  EXPECT_EQ(tiny["crossover"][0]["c_star"], "inf");
  EXPECT_EQ(tiny["crossover"][1]["c_star"], 4);
  EXPECT_EQ(tiny["crossover"][1]["metric"], "throughput");
  for (const nlohmann::json& cell : tiny["cells"]) {
    EXPECT_GT(cell["output_throughput"].get<double>(), 0) << cell["series"];
    EXPECT_TRUE(cell["ttft_ms"]["p50"].is_number()) << cell["series"];
  }

  const std::string csv = ExportResults(s, ExportTable::kServe, ExportFormat::kCsv);
  std::vector<std::string> lines;
  std::istringstream in(csv);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 35u);  // the header and one row per cell
  for (const char* column : {"workload", "cell_key", "series", "x_ar", "ttft_ms.p50", "tpot_ms.p99",
                             "c_star", "c_star_ci.lo", "c_star_ci.hi"}) {
    EXPECT_CONTAINS(lines[0], column);
  }
  EXPECT_EQ(
      nlohmann::json::parse(ExportResults(s, ExportTable::kServe, ExportFormat::kJson)).size(),
      34u);

  SummaryOptions one_run;
  one_run.run_id = 1;
  EXPECT_EQ(BuildSummary(db, one_run).serve_cells.size(), 34u);
  EXPECT_EQ(ParseExportTable("serve", "--table"), ExportTable::kServe);
}

TEST(ServeReport, ADatabaseWithoutServeCellsHasNoServingSection) {
  const std::string db = testing::FreshDbPath("serve_none");
  testing::WriteSyntheticDb(db);
  const std::string dir = testing::ScratchDir("reports_serve_none");
  const ReportResult r = WriteReport(db, dir, testing::QuietReportOptions("/nonexistent/gnuplot"));
  EXPECT_NOT_CONTAINS(ReadFileToString(r.report_md), "Serving under load");
  EXPECT_NOT_CONTAINS(ReadFileToString(dir + "/plots.gp"), "serve_");
  // A schema-v13 file (no serve tables) is read as it is.
  const std::string v13 = testing::FreshDbPath("serve_v13");
  CreateResultsDatabaseAtVersion(v13, 13);
  EXPECT_TRUE(LoadServeGroups(v13).empty());
  const ReportResult old = WriteReport(v13, testing::ScratchDir("reports_serve_v13"),
                                       testing::QuietReportOptions("/nonexistent/gnuplot"));
  EXPECT_CONTAINS(ReadFileToString(old.report_md), "No cases recorded.");
}

}  // namespace
}  // namespace specbed
