// Tests for reports/summary.h (`specbed summary`): on the summary database of synthetic_db.h (AR
// with token margins, a tree method whose outputs diverge from AR, a run without AR whose cases
// fall back to the AR case of another run, a case without any baseline) every row carries the
// hand-computed metrics (speedup and its bootstrap CI, exact match with the divergence position
// and margin, r_i / alpha_i, time shares), the table and the JSON show them, --run / --case
// select rows, and bad databases or ids fail naming them.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "base/error.h"
#include "reports/summary.h"
#include "tests/common/test_util.h"
#include "tests/reports/synthetic_db.h"

namespace specbed {
namespace {

using Json = nlohmann::json;
using testing::ErrorOf;
using testing::FreshDbPath;
using testing::WriteSummaryDb;

const SummaryRow& RowOf(const Summary& s, int64_t case_id) {
  for (const auto& r : s.rows) {
    if (r.row.case_id == case_id) return r;
  }
  ADD_FAILURE() << "no row for case " << case_id;
  static const SummaryRow kEmpty{};
  return kEmpty;
}

// The table line of one case (it starts with the right-aligned case id).
std::string LineOf(const std::string& table, int64_t case_id) {
  std::istringstream in(table);
  std::string line;
  while (std::getline(in, line)) {
    const size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos && line.compare(first, std::to_string(case_id).size() + 2,
                                                   std::to_string(case_id) + "  ") == 0) {
      return line;
    }
  }
  return "<no line for case " + std::to_string(case_id) + ">";
}

TEST(Summary, RowsCarryHandComputedMetrics) {
  const std::string db = FreshDbPath("summary_rows");
  WriteSummaryDb(db);
  const Summary s = BuildSummary(db);
  EXPECT_EQ(s.schema_version, kResultsSchemaVersion);
  EXPECT_EQ(s.run_ids, (std::vector<int64_t>{1, 2}));
  ASSERT_EQ(s.rows.size(), 5u);

  const SummaryRow& ar = RowOf(s, 1);
  EXPECT_TRUE(ar.is_baseline);
  EXPECT_EQ(ar.baseline_case_id, -1);
  EXPECT_NEAR(ar.metrics.decode_tokens_per_s, 100.0, 1e-9);

  const SummaryRow& tree = RowOf(s, 3);
  EXPECT_FALSE(tree.is_baseline);
  EXPECT_EQ(tree.baseline_case_id, 1);
  EXPECT_TRUE(tree.baseline_same_run);
  EXPECT_NEAR(tree.speedup.geomean, std::pow(2.0, 2.0 / 3.0), 1e-12);
  EXPECT_NEAR(tree.speedup.total_ratio, 340.0 / 190.0, 1e-12);
  EXPECT_DOUBLE_EQ(tree.speedup.geomean_ci.lo, 1.0);
  EXPECT_DOUBLE_EQ(tree.speedup.geomean_ci.hi, 2.0);
  EXPECT_EQ(tree.exact_match.n_exact, 1);
  EXPECT_EQ(tree.exact_match.min_position, 2);
  EXPECT_DOUBLE_EQ(tree.exact_match.min_margin, 0.125);
  EXPECT_NEAR(tree.metrics.tau, 2.6, 1e-12);
  EXPECT_NEAR(tree.metrics.other_fraction, 2.5 / 190.0, 1e-12);
  ASSERT_EQ(tree.metrics.positions.max_depth(), 4);
  EXPECT_NEAR(tree.metrics.positions.alpha[2], 0.5, 1e-12);

  // Run 2 has no AR case: its fake case is compared with case 1 of run 1, and says so.
  const SummaryRow& fake = RowOf(s, 4);
  EXPECT_EQ(fake.baseline_case_id, 1);
  EXPECT_EQ(fake.baseline_run_id, 1);
  EXPECT_FALSE(fake.baseline_same_run);
  EXPECT_NEAR(fake.speedup.geomean, 2.0, 1e-12);
  EXPECT_EQ(fake.exact_match.n_exact, 1);
  EXPECT_EQ(fake.exact_match.min_position, 3);
  EXPECT_DOUBLE_EQ(fake.exact_match.median_position, 3.0);
  EXPECT_DOUBLE_EQ(fake.exact_match.min_margin, 0.125);

  const SummaryRow& lone = RowOf(s, 5);
  EXPECT_EQ(lone.baseline_case_id, -1);
  EXPECT_TRUE(std::isnan(lone.speedup.geomean));
  EXPECT_EQ(lone.exact_match.n_matched, 0);

  ASSERT_EQ(s.notes.size(), 2u);
  EXPECT_EQ(s.notes[0],
            "case 4 (fake(k=4), run 2): AR baseline is case 1 from run 1 on the same machine (no "
            "AR case with the same workload in run 2).");
  EXPECT_CONTAINS(s.notes[1], "case 5 (fake(k=4), run 2): no AR case with the same workload");
}

SummaryTableOptions Wide() {
  SummaryTableOptions o;
  o.wide = true;
  return o;
}

TEST(Summary, WideTableShowsEveryColumn) {
  const std::string db = FreshDbPath("summary_table");
  WriteSummaryDb(db);
  const std::string table = FormatSummaryTable(BuildSummary(db), Wide());
  for (const char* header : {"method",
                             "drafter",
                             "target",
                             "dataset",
                             "timing",
                             "tok/s",
                             "nodes/step",
                             "τ",
                             "acc%",
                             "T_D%",
                             "other%",
                             "rollback%",
                             "speedup [95% CI]",
                             "Σ ratio [95% CI]",
                             "Spec-Bench [95% CI]",
                             "exact",
                             "div min/med",
                             "margin",
                             "r_1..r_4",
                             "α_1..α_4"}) {
    EXPECT_CONTAINS(table, header);
  }
  const std::string tree = LineOf(table, 3);
  for (const char* cell :
       {"tree(depth=4,topk=2)", "tiny-head", "tiny", "stories", "178.9", "2.60", "2.6", "1.3",
        "78.9", "1.59 (n<5)", "1.79 (n<5)", "1/3", "2/2.5", "0.125", "0.80 0.60 0.25 0.00",
        "0.80 0.75 0.50 —", "7.6"}) {  // nodes/step: 38 drafted nodes / 5 steps
    EXPECT_CONTAINS(tree, cell);
  }
  EXPECT_CONTAINS(LineOf(table, 1), "1.00 (baseline)");
  EXPECT_CONTAINS(table,
                  "speedup (decode) = geometric mean over answers of method decode tok/s "
                  "(tokens after the first / decode time) / AR's");
  EXPECT_CONTAINS(table, "Spec-Bench = Spec-Bench's own figure (evaluation/speed.py)");
  {
    SummaryOptions e2e;
    e2e.scope = SpeedupScope::kEndToEnd;
    const Summary s = BuildSummary(db, e2e);
    const std::string t = FormatSummaryTable(s, Wide());
    EXPECT_CONTAINS(t, "speedup (end_to_end) = geometric mean over answers of method end-to-end");
    EXPECT_CONTAINS(SummaryJson(s), "\"scope\": \"end_to_end\"");
  }
  const std::string fake = LineOf(table, 4);
  EXPECT_CONTAINS(fake, "2.00 (n<5) *");  // * = baseline from another run; 3 prompts < 5
  EXPECT_CONTAINS(fake, "1/3");
  EXPECT_CONTAINS(fake, "3/3");  // divergence min 3 / median 3
  EXPECT_CONTAINS(fake, "0.64 0.55 0.55 0.36");
  EXPECT_CONTAINS(LineOf(table, 5), "fake(k=4)");
  EXPECT_CONTAINS(table, "2000 resamples");
  EXPECT_CONTAINS(table, "Notes:\n- case 4 (fake(k=4), run 2): AR baseline is case 1 from run 1");
  // Columns are aligned: every row line has the header's width or less, and the `run` column
  // starts at the same offset in every line.
  std::istringstream in(table);
  std::string line;
  std::getline(in, line);  // title
  std::getline(in, line);  // header
  const size_t run_end = line.find("run") + 3;
  for (int64_t id = 1; id <= 5; ++id) {
    const std::string row = LineOf(table, id);
    EXPECT_EQ(row.substr(run_end - 1, 1), id <= 3 ? "1" : "2") << row;
  }
}

// The default table fits a terminal: short labels, the columns read first, configuration that
// is the same in every row stated once above the table; --columns, --sort and their errors.
TEST(Summary, CompactTableFitsATerminalAndSorts) {
  const std::string db = FreshDbPath("summary_compact");
  WriteSummaryDb(db);
  const Summary s = BuildSummary(db);
  const std::string table = FormatSummaryTable(s);
  std::istringstream in(table);
  size_t widest = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find("specbed summary:") == 0 || line.find("- ") == 0) continue;  // title, notes
    size_t width = 0;
    for (unsigned char c : line) width += (c & 0xC0) != 0x80;
    widest = std::max(widest, width);
  }
  EXPECT_LE(widest, 120u) << table;
  for (const char* header : {"case", "method", "T", "n", "nodes/step", "τ", "acc%",
                             "speedup [95% CI]", "T_D%", "exact"}) {
    EXPECT_CONTAINS(table, header);
  }
  for (const char* wide_only : {"Σ ratio", "Spec-Bench [95% CI]", "div min/med", "r_1..r_4"}) {
    EXPECT_EQ(table.find(wide_only), std::string::npos) << wide_only;
  }
  // The tree case: short label (the knobs differ from no other case of its method), τ 2.60,
  // acceptance rate 8 accepted / 38 drafted = 21.1%, speedup without an interval (3 prompts).
  const std::string tree = LineOf(table, 3);
  for (const char* cell : {"tree", "2.60", "21.1", "1.59 (n<5)", "1/3"}) {
    EXPECT_CONTAINS(tree, cell);
  }
  EXPECT_EQ(tree.find("depth=4"), std::string::npos) << tree;
  const Json tree_json = Json::parse(SummaryJson(s))["cases"][2];
  EXPECT_EQ(tree_json["case_id"], 3);
  EXPECT_DOUBLE_EQ(tree_json["acceptance_rate"].get<double>(), 8.0 / 38.0);  // vLLM's name
  EXPECT_DOUBLE_EQ(tree_json["mean_acceptance_length"].get<double>(), 1.0 + 8.0 / 5.0);
  // vLLM's per-position rate: steps accepting >= i / all 5 steps (4, 3, 1, 0).
  EXPECT_EQ(tree_json["acceptance"]["per_position_acceptance_rate"],
            Json::parse("[0.8, 0.6, 0.2, 0.0]"));

  SummaryTableOptions sorted;
  sorted.sort = "speedup";
  sorted.columns = {"case", "speedup"};
  const std::string by_speedup = FormatSummaryTable(s, sorted);
  // Descending: the 2.00 case first, NaN speedups last.
  EXPECT_LT(by_speedup.find(LineOf(by_speedup, 4)), by_speedup.find(LineOf(by_speedup, 3)));
  EXPECT_EQ(LineOf(by_speedup, 3).find("0.7"), std::string::npos);  // only the chosen columns
  sorted.sort = "speedup:asc";
  const std::string ascending = FormatSummaryTable(s, sorted);
  EXPECT_LT(ascending.find(LineOf(ascending, 3)), ascending.find(LineOf(ascending, 4)));
  sorted.sort = "speed";
  EXPECT_CONTAINS(ErrorOf([&] { FormatSummaryTable(s, sorted); }),
                  "unknown column 'speed' (columns: case, run, method");
  sorted.sort = "tau:up";
  EXPECT_CONTAINS(ErrorOf([&] { FormatSummaryTable(s, sorted); }), "KEY:asc or KEY:desc");
}

TEST(Summary, IntervalsNeedFivePrompts) {
  const Interval ci{1.1, 1.35};
  EXPECT_EQ(SpeedupWithInterval(1.234, ci, 5), "1.23 [1.10, 1.35]");
  EXPECT_EQ(SpeedupWithInterval(1.234, ci, 4), "1.23 (n<5)");
  EXPECT_EQ(SpeedupWithInterval(1.234, ci, 1), "1.23 (n<5)");
  EXPECT_EQ(SpeedupWithInterval(1.234, Interval{}, 9), "1.23");
  EXPECT_EQ(SpeedupWithInterval(kNoValue, ci, 9), "—");
}

// A --category no answer carries is an error naming the categories there are.
TEST(Summary, UnknownCategoryIsAnError) {
  const std::string db = FreshDbPath("summary_category");
  WriteSummaryDb(db);
  SummaryOptions o;
  o.category = "stroy";
  EXPECT_CONTAINS(
      ErrorOf([&] { BuildSummary(db, o); }),
      "no answer of category 'stroy' in results database '" + db + "' (categories: story)");
}

TEST(Summary, JsonHasAllNumbers) {
  const std::string db = FreshDbPath("summary_json");
  WriteSummaryDb(db);
  const Json j = Json::parse(SummaryJson(BuildSummary(db)));
  EXPECT_EQ(j["schema_version"], kResultsSchemaVersion);
  EXPECT_EQ(j["bootstrap"]["n_resamples"], 2000);
  ASSERT_EQ(j["cases"].size(), 5u);
  const Json& tree = j["cases"][2];
  EXPECT_EQ(tree["case_id"], 3);
  EXPECT_EQ(tree["method"], "tree");
  EXPECT_EQ(tree["knobs"]["depth"], 4);
  EXPECT_EQ(tree["knobs_short"], "depth=4,topk=2");
  EXPECT_EQ(tree["drafter"], "tiny-head");
  EXPECT_EQ(tree["method_traits"]["tree"], true);
  EXPECT_NEAR(tree["tau"].get<double>(), 2.6, 1e-12);
  EXPECT_NEAR(tree["other_fraction"].get<double>(), 2.5 / 190.0, 1e-12);
  EXPECT_NEAR(tree["draft_us_per_step"].get<double>(), 1000.0, 1e-9);
  EXPECT_EQ(tree["rollback_events"], 3);
  EXPECT_EQ(tree["acceptance"]["max_depth"], 4);
  EXPECT_NEAR(tree["acceptance"]["r"][2].get<double>(), 0.25, 1e-12);
  EXPECT_TRUE(tree["acceptance"]["alpha"][3].is_null());  // NaN
  EXPECT_EQ(tree["acceptance"]["n_reached"], Json({5, 5, 4, 1}));
  EXPECT_EQ(tree["baseline"]["case_id"], 1);
  EXPECT_EQ(tree["baseline"]["same_run"], true);
  EXPECT_NEAR(tree["speedup"]["geomean"].get<double>(), std::pow(2.0, 2.0 / 3.0), 1e-12);
  EXPECT_EQ(tree["speedup"]["geomean_ci"], Json({1.0, 2.0}));
  EXPECT_EQ(tree["speedup"]["total_ratio_ci"], Json({1.0, 2.0}));
  EXPECT_EQ(tree["speedup"]["n_prompts"], 3);
  const Json& e = tree["exact_match"];
  EXPECT_EQ(e["n_matched"], 3);
  EXPECT_EQ(e["n_exact"], 1);
  EXPECT_EQ(e["min_divergence_position"], 2);
  EXPECT_EQ(e["median_divergence_position"], 2.5);
  EXPECT_EQ(e["min_margin"], 0.125);
  ASSERT_EQ(e["divergences"].size(), 2u);
  EXPECT_EQ(e["divergences"][0]["prompt_id"], "p1");
  EXPECT_EQ(e["divergences"][0]["position"], 3);
  EXPECT_EQ(e["divergences"][0]["margin"], 0.125);
  EXPECT_EQ(e["divergences"][0]["ar_token"], 4);
  EXPECT_EQ(e["divergences"][0]["method_token"], 9);
  EXPECT_TRUE(e["divergences"][1]["method_token"].is_null());  // the method stopped there
  const Json& ar = j["cases"][0];
  EXPECT_EQ(ar["is_baseline"], true);
  EXPECT_TRUE(ar["speedup"].is_null());
  EXPECT_TRUE(ar["tau"].is_null());
  EXPECT_EQ(ar["acceptance"]["max_depth"], 0);
  EXPECT_EQ(j["cases"][3]["baseline"]["same_run"], false);
  EXPECT_TRUE(j["cases"][4]["baseline"].is_null());
  EXPECT_EQ(j["notes"].size(), 2u);
}

TEST(Summary, RunAndCaseSelectRows) {
  const std::string db = FreshDbPath("summary_select");
  WriteSummaryDb(db);
  SummaryOptions run2;
  run2.run_id = 2;
  const Summary s2 = BuildSummary(db, run2);
  ASSERT_EQ(s2.rows.size(), 2u);
  EXPECT_EQ(s2.rows[0].row.case_id, 4);
  EXPECT_EQ(s2.rows[0].baseline_case_id, 1);  // baselines still come from any run
  SummaryOptions one;
  one.case_id = 3;
  const Summary s3 = BuildSummary(db, one);
  ASSERT_EQ(s3.rows.size(), 1u);
  EXPECT_EQ(s3.rows[0].exact_match.min_position, 2);
  EXPECT_TRUE(s3.notes.empty());

  SummaryOptions bad;
  bad.run_id = 7;
  EXPECT_CONTAINS(ErrorOf([&] { BuildSummary(db, bad); }),
                  "run 7 is not in results database '" + db + "' (runs: 1, 2)");
  bad = {};
  bad.case_id = 9;
  EXPECT_CONTAINS(ErrorOf([&] { BuildSummary(db, bad); }),
                  "case 9 is not in results database '" + db + "' (cases: 1, 2, 3, 4, 5)");
  bad.case_id = 3;
  bad.run_id = 2;
  EXPECT_CONTAINS(ErrorOf([&] { BuildSummary(db, bad); }), "belongs to run 1, not to run 2");
}

TEST(Summary, EmptyMissingAndForeignDatabases) {
  const std::string empty = FreshDbPath("summary_empty");
  ResultsStore::Open(empty);
  const Summary s = BuildSummary(empty);
  EXPECT_TRUE(s.rows.empty());
  EXPECT_CONTAINS(FormatSummaryTable(s), "No cases recorded.");
  EXPECT_EQ(Json::parse(SummaryJson(s))["cases"].size(), 0u);

  const std::string missing = FreshDbPath("summary_missing");
  EXPECT_CONTAINS(ErrorOf([&] { BuildSummary(missing); }),
                  "results database '" + missing + "' does not exist");
  const std::string text = std::string(SPECBED_TEST_TMPDIR) + "/reports_summary_text.db";
  std::ofstream(text) << "not a database at all, just some text that is long enough\n";
  EXPECT_CONTAINS(ErrorOf([&] { BuildSummary(text); }), "is not a SQLite database");
}

TEST(Summary, KnobsShortForm) {
  EXPECT_EQ(KnobsShort(R"({"k":4,"tree":"static","temps":[1,2]})"), "k=4,temps=[1,2],tree=static");
  EXPECT_EQ(KnobsShort("{}"), "");
  EXPECT_EQ(KnobsShort(""), "");
  EXPECT_EQ(KnobsShort("null"), "");
  EXPECT_EQ(KnobsShort("not json"), "not json");
}

// AR's roofline note divides by the bandwidth recorded with the case and names what was measured:
// the CPU's STREAM triad (and older records, which carry no kind) or a GPU's device copy.
TEST(Summary, RooflineNoteNamesTheMeasuredBandwidth) {
  auto note_for = [](const Json& machine) {
    CaseRecord record;
    record.target = "t";
    record.method = "ar";
    record.dtype = "bfloat16";
    record.threads = 1;
    record.config_json =
        Json{{"target_info", {{"weight_bytes", 1e9}}}, {"machine", machine}}.dump();
    const std::vector<std::string> notes = CostRegimeNotes({{1, &record, 50.0}});
    return notes.empty() ? std::string() : notes.back();
  };
  const std::string gpu =
      note_for({{"memory_bandwidth_gb_s", 2000.0}, {"memory_bandwidth_kind", "device_copy"}});
  EXPECT_CONTAINS(gpu,
                  "50.00 GB/s = 0.03 of the measured memory bandwidth (2000.00 GB/s, device copy)");
  EXPECT_CONTAINS(note_for({{"memory_bandwidth_gb_s", 100.0}}), "(100.00 GB/s, STREAM triad)");
  EXPECT_EQ(note_for(Json::object()), "");
}

// Captures that fell inside a case's timed prompts are named (they are in its decode time); none
// in the warm-up alone, or no engine record (older databases), give no note.
TEST(Summary, NotesCudaGraphCapturesInsideTimedPrompts) {
  auto notes_for = [](const Json& engine) {
    CaseRecord record;
    record.target = "stories260K-twin";
    record.method = "eagle3";
    record.config_json = Json{{"engine", engine}}.dump();
    return CostRegimeNotes({{4, &record, 50.0}});
  };
  const std::vector<std::string> timed =
      notes_for({{"graphs_warmup", {{"captures", 5}}},
                 {"graphs_timed", {{"captures", 2}, {"capture_s", 0.25}}}});
  ASSERT_EQ(timed.size(), 1u);
  EXPECT_CONTAINS(timed[0],
                  "case 4 (eagle3): 2 CUDA graph captures (0.250 s) fell inside the timed");
  EXPECT_TRUE(notes_for({{"graphs_warmup", {{"captures", 5}}}, {"graphs_timed", {{"captures", 0}}}})
                  .empty());
  EXPECT_TRUE(notes_for(Json::object()).empty());
}

// Schema v12 steps: the engine's per-step means and the device-time share, noted for a case that
// counted its launches or ran on a GPU; none for a CPU case without op counts, nor when one step
// did not record them (rows before v12 mixed in).
TEST(Summary, NotesTheEngineCountersOfCasesThatCountedThem) {
  std::vector<StepRecord> steps;
  for (int64_t i = 0; i < 4; ++i) {
    StepRecord st = testing::Step("p0", i, 4, 2, 3);  // 2000 + 1500 + 100 us of wall time
    st.t_draft_device_us = 1000;
    st.t_verify_device_us = 1400;
    st.t_other_device_us = 200;
    st.n_launches = 100 + i;  // mean 101.5
    st.n_host_reads = 0;
    st.n_graph_replays = 2;
    st.n_graph_captures = 0;
    st.n_h2d_copies = 3;
    st.n_d2h_copies = i % 2;  // mean 0.5
    steps.push_back(st);
  }
  const CaseMetrics m = ComputeCaseMetrics(testing::ArSamplesT0(), steps);
  EXPECT_DOUBLE_EQ(m.launches_per_step, 101.5);
  EXPECT_DOUBLE_EQ(m.replays_per_step, 2.0);
  EXPECT_DOUBLE_EQ(m.h2d_per_step, 3.0);
  EXPECT_DOUBLE_EQ(m.d2h_per_step, 0.5);
  EXPECT_DOUBLE_EQ(m.device_time_fraction, 2600.0 / 3600.0);
  CaseRecord record;
  record.device = "cpu";
  EXPECT_EQ(EngineNote("case 3 (sps)", record, m),
            "case 3 (sps): per verify step 101.5 launching calls, 2.00 captured-step replays, "
            "3.00 host-to-device and 0.50 device-to-host copies; device time 0.72 of the steps' "
            "wall time.");
  for (StepRecord& st : steps) st.n_launches = -1;  // SPECBED_COUNT_OPS off
  const CaseMetrics uncounted = ComputeCaseMetrics(testing::ArSamplesT0(), steps);
  EXPECT_EQ(EngineNote("case 3 (sps)", record, uncounted), "");
  record.device = "cuda";
  EXPECT_CONTAINS(EngineNote("case 3 (sps)", record, uncounted),
                  "case 3 (sps): per verify step 2.00 captured-step replays, 3.00 host-to-device");
  steps[1].n_h2d_copies = -1;  // one step from before v12
  EXPECT_EQ(EngineNote("case 3 (sps)", record, ComputeCaseMetrics(testing::ArSamplesT0(), steps)),
            "");
}

// A target whose weights stay in cache (stories260K: ~1 MB) gets one warning that speculation
// cannot pay on it; a memory-bound one (the twin's ~190 MB) none.
TEST(Summary, WarnsWhenTheTargetIsTooSmallForSpeculation) {
  auto notes_for = [](double weight_bytes) {
    CaseRecord record;
    record.target = "stories260K";
    record.method = "sps";
    record.config_json = Json{{"target_info", {{"weight_bytes", weight_bytes}}}}.dump();
    return CostRegimeNotes({{1, &record, 50.0}, {2, &record, 60.0}});
  };
  const std::vector<std::string> small = notes_for(1.1e6);
  ASSERT_EQ(small.size(), 1u);  // once per target
  EXPECT_CONTAINS(small[0], "WARNING: target stories260K reads only 1.1 MB of weights per token");
  EXPECT_CONTAINS(small[0], "No speculative method can beat AR on it");
  EXPECT_TRUE(notes_for(190e6).empty());
}

}  // namespace
}  // namespace specbed
