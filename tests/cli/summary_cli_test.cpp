// End-to-end tests of `specbed summary` (harness/cli/cmd_summary.cpp) and `specbed export`
// (cmd_export.cpp): runs the real binary as a child process on the synthetic summary database of
// tests/reports/synthetic_db.h and checks the table (the tree case whose outputs diverge from AR at
// position 2 with margin 0.125, its speedup CI, r_i / alpha_i, the note for a baseline from another
// run), --json, --run / --case, --method / --temperature, and the errors for a missing database, a
// non-SpecBed database and unknown ids (exit status 1).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "results/store.h"
#include "tests/reports/synthetic_db.h"

namespace specbed {
namespace {

using Json = nlohmann::json;

::testing::AssertionResult Contains(const std::string& haystack, const std::string& needle) {
  if (haystack.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected to find \"" << needle << "\" in:\n"
                                       << haystack.substr(0, 4000);
}

struct ProcResult {
  int exit_code = -1;  // -1 unless the child exited normally
  std::string out, err;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `specbed args...` with stdout/stderr captured in files; kills it after 60 s.
ProcResult RunSpecbed(const std::vector<std::string>& args) {
  static int counter = 0;
  // The process id keeps tests that ctest runs in parallel (one process each) apart.
  const std::string stem = std::string(SPECBED_TEST_TMPDIR) + "/summary_cli_" +
                           std::to_string(getpid()) + "_" + std::to_string(counter++);
  const std::string out_path = stem + ".stdout", err_path = stem + ".stderr";
  std::vector<std::string> argv_s = {SPECBED_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int out_fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err_fd = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ProcResult r;
  if (out_fd < 0 || err_fd < 0) {
    ADD_FAILURE() << "cannot create " << stem << ".*: " << std::strerror(errno);
    return r;
  }
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out_fd);
  close(err_fd);
  if (pid < 0) {
    ADD_FAILURE() << "fork failed: " << std::strerror(errno);
    return r;
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "specbed summary timed out";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  r.out = ReadAll(out_path);
  r.err = ReadAll(err_path);
  return r;
}

// The table line of one case (it starts with the right-aligned case id).
std::string LineOf(const std::string& table, int64_t case_id) {
  std::istringstream in(table);
  std::string line;
  const std::string prefix = std::to_string(case_id) + "  ";
  while (std::getline(in, line)) {
    const size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos && line.compare(first, prefix.size(), prefix) == 0) return line;
  }
  return "<no line for case " + std::to_string(case_id) + ">";
}

// `specbed export`: the cases CSV has one row per case of `summary --json` and its τ and speedup
// cells are the same numbers; -o creates its folder; bad --format fails naming the flag.
TEST(CliExport, CasesCsvMatchesSummaryJson) {
  const std::string db = testing::FreshDbPath("cli_export");
  testing::WriteSummaryDb(db);
  const ProcResult json = RunSpecbed({"summary", db, "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const Json doc = Json::parse(json.out);
  const std::string out = std::string(SPECBED_TEST_TMPDIR) + "/cli_export_dir/sub/cases.csv";
  std::remove(out.c_str());
  const ProcResult r = RunSpecbed({"export", db, "--format", "csv", "-o", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(ReadAll(out));
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    // The columns compared here hold no commas or quotes: split plainly up to the first quote.
    std::vector<std::string> cells;
    std::string cell;
    bool quoted = false;
    for (char c : line) {
      if (c == '"') {
        quoted = !quoted;
      } else if (c == ',' && !quoted) {
        cells.push_back(cell);
        cell.clear();
      } else {
        cell += c;
      }
    }
    cells.push_back(cell);
    rows.push_back(cells);
  }
  ASSERT_EQ(rows.size(), 1 + doc["cases"].size());
  auto col = [&](const std::string& name) {
    for (size_t c = 0; c < rows[0].size(); ++c) {
      if (rows[0][c] == name) return c;
    }
    ADD_FAILURE() << "no column " << name;
    return size_t{0};
  };
  for (size_t i = 0; i < doc["cases"].size(); ++i) {
    const Json& c = doc["cases"][i];
    const auto& row = rows[i + 1];
    EXPECT_EQ(row[col("case_id")], c["case_id"].dump());
    EXPECT_EQ(row[col("tau")], c["tau"].is_null() ? "" : c["tau"].dump());
    const Json spd = c["speedup"].is_null() ? Json() : c["speedup"]["geomean"];
    EXPECT_EQ(row[col("speedup.geomean")], spd.is_null() ? "" : spd.dump());
    const Json lo = c["speedup"].is_null() ? Json() : c["speedup"]["geomean_ci"][0];
    EXPECT_EQ(row[col("speedup.geomean_ci.lo")], lo.is_null() ? "" : lo.dump());
  }
  const ProcResult bad = RunSpecbed({"export", db, "--format", "xlsx"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(Contains(bad.err, "--format"));
  const ProcResult steps = RunSpecbed({"export", db, "--table", "steps", "--format", "json"});
  ASSERT_EQ(steps.exit_code, 0) << steps.err;
  EXPECT_GT(Json::parse(steps.out).size(), 10u);
  // Documented column order (the summary JSON's): identity first, no list in any cell, vLLM's
  // names beside SpecBed's.
  EXPECT_EQ(rows[0][0], "case_id");
  EXPECT_EQ(rows[0][1], "run_id");
  EXPECT_LT(col("tau"), col("acceptance_rate"));
  EXPECT_LT(col("acceptance_rate"), col("speedup.geomean"));
  EXPECT_LT(col("mean_acceptance_length"), col("exact_match.rate"));
  for (const std::string& header : rows[0]) {
    EXPECT_EQ(header.find("acceptance.r"), std::string::npos) << header;
    EXPECT_EQ(header.find("divergences"), std::string::npos) << header;
  }
  for (size_t i = 1; i < rows.size(); ++i) {
    for (size_t c = 0; c < rows[i].size(); ++c) {
      if (rows[0][c] != "knobs" && rows[0][c] != "method_traits" && rows[0][c] != "stop_reasons") {
        EXPECT_EQ(rows[i][c].find('['), std::string::npos) << rows[0][c] << ": " << rows[i][c];
      }
    }
  }
  // The per-position numbers are their own table: one row per case and position.
  const ProcResult positions = RunSpecbed({"export", db, "--table", "positions"});
  ASSERT_EQ(positions.exit_code, 0) << positions.err;
  EXPECT_TRUE(Contains(positions.out,
                       "case_id,run_id,position,r,alpha,per_position_acceptance_rate,n_reached,"
                       "n_accepted,n_conditional\n"));
  EXPECT_TRUE(Contains(positions.out, "\n3,1,1,0.8,0.8,0.8,5,4,5\n")) << positions.out;
}

// The default table fits ~120 columns; --wide, --columns and --sort choose what it shows.
TEST(CliSummary, CompactDefaultWideColumnsAndSort) {
  const std::string db = testing::FreshDbPath("cli_summary_compact");
  testing::WriteSummaryDb(db);
  ProcResult r = RunSpecbed({"summary", db});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "acc%"));
  EXPECT_TRUE(Contains(r.out, "--wide"));  // the legend says how to see every column
  EXPECT_EQ(r.out.find("Spec-Bench [95% CI]"), std::string::npos);
  r = RunSpecbed({"summary", db, "--wide"});
  EXPECT_TRUE(Contains(r.out, "Spec-Bench [95% CI]"));
  r = RunSpecbed({"summary", db, "--columns", "case,tau", "--sort", "tau"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "case     τ\n")) << r.out;
  EXPECT_LT(r.out.find("   4  3.09"), r.out.find("   3  2.60")) << r.out;  // τ high to low
  EXPECT_LT(r.out.find("   3  2.60"), r.out.find("   1     —")) << r.out;  // no τ last
  r = RunSpecbed({"summary", db, "--columns", "case,speed"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "unknown column 'speed'")) << r.err;
}

TEST(CliSummary, CategoryAndSliceSelectSamplesOfEveryCase) {
  const std::string db = testing::FreshDbPath("cli_summary_slice");
  testing::WriteSummaryDb(db);
  // The synthetic cases have 3 answers each, all of category "story".
  ProcResult r = RunSpecbed({"summary", db, "--wide", "--category", "story", "--slice", "1:"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(LineOf(r.out, 3), "stories  0  2 ")) << r.out;
  EXPECT_TRUE(Contains(LineOf(r.out, 1), "stories  0  2 ")) << r.out;  // baselines alike
  r = RunSpecbed({"summary", db, "--wide", "--slice", "5:"});          // past the end: no answer
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(LineOf(r.out, 3), "stories  0  0 ")) << r.out;
  r = RunSpecbed({"summary", db, "--category", "none"});  // a mistyped category is an error
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "no answer of category 'none'")) << r.err;
  EXPECT_TRUE(Contains(r.err, "(categories: story)")) << r.err;
  r = RunSpecbed({"summary", db, "--slice", "2"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "--slice must look like A:B")) << r.err;
  r = RunSpecbed({"summary", db, "--slice", "3:1"});
  EXPECT_EQ(r.exit_code, 1);
}

TEST(CliSummary, TableReportsDivergencePositionMarginAndCis) {
  const std::string db = testing::FreshDbPath("cli_summary_table");
  testing::WriteSummaryDb(db);
  const ProcResult r = RunSpecbed({"summary", db, "--wide"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "specbed summary: " + db + " (schema v" +
                                  std::to_string(kResultsSchemaVersion) + "), 5 cases"));
  const std::string tree = LineOf(r.out, 3);
  // The tree method diverges from AR: 1 of 3 answers identical, first divergence at position 2
  // (median 2.5), smallest AR top-2 logit margin at a divergence 0.125.
  for (const char* cell :
       {"tree(depth=4,topk=2)", "tiny-head", "1/3", "2/2.5", "0.125", "1.59 (n<5)", "1.79",
        "0.80 0.60 0.25 0.00", "0.80 0.75 0.50 —", "78.9"}) {
    EXPECT_TRUE(Contains(tree, cell));
  }
  EXPECT_TRUE(Contains(LineOf(r.out, 1), "1.00 (baseline)"));
  EXPECT_TRUE(Contains(LineOf(r.out, 4), "2.00 (n<5) *"));
  EXPECT_TRUE(Contains(r.out, "AR baseline is case 1 from run 1"));
  EXPECT_TRUE(Contains(r.out, "case 5 (fake(k=4), run 2): no AR case with the same workload"));
}

TEST(CliSummary, JsonRunAndCaseSelection) {
  const std::string db = testing::FreshDbPath("cli_summary_json");
  testing::WriteSummaryDb(db);
  ProcResult r = RunSpecbed({"summary", db, "--json", "--case", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json j = Json::parse(r.out);
  ASSERT_EQ(j["cases"].size(), 1u);
  const Json& e = j["cases"][0]["exact_match"];
  EXPECT_EQ(e["min_divergence_position"], 2);
  EXPECT_EQ(e["min_margin"], 0.125);
  EXPECT_EQ(e["divergences"][0]["position"], 3);
  EXPECT_EQ(e["divergences"][0]["margin"], 0.125);
  EXPECT_EQ(j["cases"][0]["speedup"]["geomean_ci"], Json({1.0, 2.0}));
  EXPECT_EQ(j["cases"][0]["speedup"]["scope"], "decode");
  EXPECT_TRUE(j["cases"][0]["speedup"]["spec_bench"].is_number());

  // End to end (prefill included): another figure, stated in the output.
  r = RunSpecbed({"summary", db, "--json", "--case", "3", "--scope", "e2e"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json e2e = Json::parse(r.out)["cases"][0]["speedup"];
  EXPECT_EQ(e2e["scope"], "end_to_end");
  EXPECT_NE(e2e["geomean"], j["cases"][0]["speedup"]["geomean"]);
  r = RunSpecbed({"summary", db, "--scope", "wall"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.err, "--scope")) << r.err;

  r = RunSpecbed({"summary", db, "--run", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "2 cases"));
  EXPECT_TRUE(Contains(LineOf(r.out, 4), "fake max32"));  // the knob that differs: max new
  EXPECT_TRUE(Contains(LineOf(r.out, 3), "<no line"));
}

// --method / --temperature keep those rows; speedups stay against each case's own AR baseline
// (the tree case keeps its 1.59); a method or temperature the database lacks is an error naming
// those it holds.
TEST(CliSummary, MethodAndTemperatureFilters) {
  const std::string db = testing::FreshDbPath("cli_summary_filters");
  testing::WriteSummaryDb(db);
  const auto case_ids = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> args = {"summary", db, "--json"};
    args.insert(args.end(), flags.begin(), flags.end());
    const ProcResult r = RunSpecbed(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::vector<int64_t> ids;
    const Json doc = Json::parse(r.out);
    for (const Json& c : doc["cases"]) ids.push_back(c["case_id"].get<int64_t>());
    return ids;
  };
  EXPECT_EQ(case_ids({}), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(case_ids({"--method", "tree,fake"}), (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(case_ids({"--method", "ar", "--temperature", "1"}), (std::vector<int64_t>{2}));
  EXPECT_EQ(case_ids({"--temperature", "0"}), (std::vector<int64_t>{1, 3, 4, 5}));
  ProcResult r = RunSpecbed({"summary", db, "--method", "tree"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "1.59")) << r.out;  // still against case 1
  EXPECT_FALSE(Contains(r.out, "(baseline)")) << r.out;
  r = RunSpecbed({"summary", db, "--method", "eagle3"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "--method eagle3")) << r.err;
  EXPECT_TRUE(Contains(r.err, "its methods: ar, fake, tree")) << r.err;
  r = RunSpecbed({"summary", db, "--temperature", "0.5"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "its temperatures: 0, 1")) << r.err;
}

// --columns / --sort take a header as printed (tok/s, acc%, or its first word) as well as the
// key; the wide table and --json carry vLLM's raw counters (num_drafts = verify steps, ...) and
// its per-position acceptance from position 0.
TEST(CliSummary, HeadersAsColumnKeysAndVllmCounters) {
  const std::string db = testing::FreshDbPath("cli_summary_vllm");
  testing::WriteSummaryDb(db);
  ProcResult r =
      RunSpecbed({"summary", db, "--columns", "case,tok/s,acc%,speedup", "--sort", "acc%"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "case  tok/s  acc%  speedup [95% CI]")) << r.out;
  r = RunSpecbed({"summary", db, "--json", "--case", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Json c = Json::parse(r.out)["cases"][0];
  EXPECT_EQ(c["vllm"]["num_drafts"], c["n_steps"]);
  EXPECT_EQ(c["vllm"]["num_draft_tokens"], c["drafted"]);
  EXPECT_EQ(c["vllm"]["num_accepted_tokens"], c["accepted"]);
  EXPECT_EQ(c["vllm"]["num_accepted_tokens_per_pos"], c["acceptance"]["n_accepted"]);
  r = RunSpecbed({"summary", db, "--wide", "--case", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Contains(r.out, "draft tokens")) << r.out;
  EXPECT_TRUE(Contains(r.out, "accept@pos 0..3")) << r.out;
  EXPECT_TRUE(Contains(r.out, "acceptance length (τ, Spec-Bench #MAT)")) << r.out;
}

TEST(CliSummary, ClearErrorsForBadDatabasesAndIds) {
  const std::string missing = testing::FreshDbPath("cli_summary_missing");
  ProcResult r = RunSpecbed({"summary", missing});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "specbed: error: results database '" + missing + "' does not exist"));
  EXPECT_TRUE(r.out.empty());

  const std::string foreign = testing::FreshDbPath("cli_summary_foreign");
  {
    std::ofstream text(foreign);
    text << "id,name\n1,not a database\n";
  }
  r = RunSpecbed({"summary", foreign});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "'" + foreign + "' is not a SQLite database"));

  const std::string db = testing::FreshDbPath("cli_summary_ids");
  testing::WriteSummaryDb(db);
  r = RunSpecbed({"summary", db, "--run", "9"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "run 9 is not in results database '" + db + "' (runs: 1, 2)"));
  r = RunSpecbed({"summary"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.err, "db is required"));
}

}  // namespace
}  // namespace specbed
