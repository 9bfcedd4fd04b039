// `specbed compare` end to end (the regression gate): two runs of the same small stories260K
// config compare clean (exit 0), a deliberately worse candidate — SpS with a lowered draft budget
// (gamma 1 instead of 4), matched by workload — fails on τ at T = 0 (exit 3), a candidate missing
// a baseline case fails, and bad arguments exit 1. T = 0 is deterministic; the speed gate uses a
// tolerant threshold so timing noise cannot flip these verdicts (false-failure rate ~0: the
// speed interval would have to lie entirely below 0.5). Two bench databases compare row by row.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include "tests/cli/cli_test_util.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

using specbed::cli_test::ReadAll;

specbed::cli_test::ProcResult Specbed(const std::string& args, const std::string& dir) {
  return specbed::cli_test::RunSpecbedLine(args, dir);
}

// A run config: AR + SpS(gamma) on 4 story prompts, 32 tokens, T = 0.
std::string WriteConfig(const std::string& dir, const std::string& name, int gamma,
                        bool with_sps = true) {
  const std::string path = dir + "/" + name + ".json";
  std::ofstream f(path);
  f << R"({"name": ")" << name << R"(", "output": ")" << dir << "/" << name << R"(.db",
          "methods": ["ar")"
    << (with_sps ? R"(, {"name": "sps", "knobs": {"gamma": )" + std::to_string(gamma) + "}}" : "")
    << R"(], "datasets": [{"name": "stories", "limit": 4}], "temperatures": [0],
          "max_new_tokens": 32, "warmup": 0})";
  return path;
}

TEST(CompareCli, SelfComparePassesAndALoweredBudgetFails) {
  const std::string dir = std::string(SPECBED_TEST_TMPDIR) + "/compare_cli";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (auto [name, gamma] : {std::pair<const char*, int>{"base", 4}, {"again", 4}, {"worse", 1}}) {
    const auto r = Specbed("run --quiet " + WriteConfig(dir, name, gamma), dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const std::string gate = " --speedup-threshold 0.5";
  auto r = Specbed("compare --baseline " + dir + "/base.db --candidate " + dir + "/again.db" + gate,
                   dir);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("verdict: no regression"), std::string::npos) << r.out;

  r = Specbed("compare --match workload --baseline " + dir + "/base.db --candidate " + dir +
                  "/worse.db" + gate,
              dir);
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("REGRESSED (τ"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verdict: REGRESSION"), std::string::npos) << r.out;

  // Matched by key, the lowered budget is another configuration: the baseline case has no
  // match, which also fails (a configuration change must update the baseline explicitly).
  r = Specbed("compare --baseline " + dir + "/base.db --candidate " + dir + "/worse.db" + gate,
              dir);
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("baseline case without a match"), std::string::npos) << r.out;

  r = Specbed(
      "compare --json --baseline " + dir + "/base.db --candidate " + dir + "/again.db" + gate, dir);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.out.find("\"regressed\": false"), std::string::npos) << r.out;

  r = Specbed("compare --baseline " + dir + "/missing.db --candidate " + dir + "/again.db", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing.db"), std::string::npos) << r.err;

  // The two databases as positionals (baseline, candidate): the same gate.
  r = Specbed("compare " + dir + "/base.db " + dir + "/again.db" + gate, dir);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("verdict: no regression"), std::string::npos) << r.out;
  r = Specbed("compare " + dir + "/base.db", dir);  // one database without --cases
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("give two databases"), std::string::npos) << r.err;
  r = Specbed("compare " + dir + "/base.db " + dir + "/again.db --candidate " + dir + "/worse.db",
              dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("give two databases"), std::string::npos) << r.err;
}

// A vs B inside one database: SpS γ 1 (case 3) against γ 4 (case 2) on the same prompts is a report
// by default (exit 0, lines <= 120 columns); with --gate it loses τ at T = 0 (exit 3) with the
// speed ratio's paired bootstrap interval; an AR case against a speculative one, a case id the
// database lacks, or --gate without --cases is an error.
TEST(CompareCli, TwoCasesOfOneDatabase) {
  const std::string dir = std::string(SPECBED_TEST_TMPDIR) + "/compare_cli_cases";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string config = dir + "/ab.json";
  std::ofstream(config) << R"({"name": "ab", "output": ")" << dir << R"(/ab.db",
      "methods": ["ar", {"name": "sps", "knobs": {"gamma": 4}}, {"name": "sps", "knobs": {"gamma": 1}}],
      "datasets": [{"name": "stories", "limit": 6}], "temperatures": [0], "max_new_tokens": 32,
      "warmup": 0})";
  auto r = Specbed("run --no-summary " + config, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The progress line names a case by the knob that tells it apart, not by its knob JSON.
  EXPECT_NE(r.err.find("case 3/3 stories260K sps gamma=1 stories T=0"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("{\"gamma\""), std::string::npos) << r.err;
  // By default a report: exit 0, A and B named on their own lines, B/A with its interval read as
  // faster / slower / tied, no line over 120 columns.
  r = Specbed("compare " + dir + "/ab.db --cases 2,3", dir);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* part :
       {"case 3 (B) against case 2 (A)", "A = case 2: sps(drafter=stories260K-draft,gamma=4)",
        "B = case 3: sps(drafter=stories260K-draft,gamma=1)", "on stories260K stories T=0 seed=0",
        "B/A", "A report, not a gate (exit 0); --gate gates it"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }
  EXPECT_TRUE(r.out.find("B faster") != std::string::npos ||
              r.out.find("B slower") != std::string::npos ||
              r.out.find("tied (the interval holds 1)") != std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("REGRESS"), std::string::npos) << r.out;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    size_t columns = 0;  // UTF-8 code points
    for (unsigned char ch : line) columns += (ch & 0xC0) != 0x80;
    EXPECT_LE(columns, 120u) << line;
  }
  // --gate: the regression check (τ lost at T = 0: exit 3), with the ratio's interval.
  r = Specbed("compare " + dir + "/ab.db --cases 2,3 --gate --speedup-threshold 0.5", dir);
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("verdict: REGRESSION (B against A)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" ["), std::string::npos) << r.out;  // the ratio's interval (6 prompts)
  r = Specbed("compare " + dir + "/ab.db " + dir + "/ab.db --gate", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--gate goes with --cases"), std::string::npos) << r.err;
  r = Specbed("compare " + dir + "/ab.db --cases 2,2 --gate", dir);  // against itself: no change
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  r = Specbed("compare " + dir + "/ab.db --cases 1,2", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("must both be speculative"), std::string::npos) << r.err;
  r = Specbed("compare " + dir + "/ab.db --cases 2,9", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("case 9 is not in results database"), std::string::npos) << r.err;
  r = Specbed("compare " + dir + "/ab.db --cases 2", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("two case ids"), std::string::npos) << r.err;
}

// Two `specbed bench` databases (llama-bench's compare): rows matched on model, dtype, threads,
// batch, test and context; A and B tok/s and B/A; rows of one side only named; a bench database
// against a run database is an error naming both.
TEST(CompareCli, TwoBenchDatabases) {
  const std::string dir = std::string(SPECBED_TEST_TMPDIR) + "/compare_cli_bench";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string bench = "bench -q -r 1 -n 8 --bandwidth-mib 0 -p 16 ";
  auto r = Specbed(bench + "-c 0 -o " + dir + "/a.db", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Specbed(bench + "-c 0,4 -o " + dir + "/b.db", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Specbed("compare " + dir + "/a.db " + dir + "/b.db", dir);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (const char* part :
       {"| model | dtype | threads | batch | test | context | A tok/s | B tok/s | B/A |",
        "| stories260K | float32 | 1 | 1 | pp16 | 0 | ",
        "| stories260K | float32 | 1 | 1 | tg8 | 0 | ",
        "only in B: stories260K float32 t=1 b=1 tg8 ctx=4"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("only in A"), std::string::npos) << r.out;
  const std::string config = WriteConfig(dir, "run", 4, /*with_sps=*/false);
  r = Specbed("run --no-summary " + config, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Specbed("compare " + dir + "/a.db " + dir + "/run.db", dir);
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.err.find("holds bench rows (specbed bench) and '" + dir + "/run.db' does not"),
            std::string::npos)
      << r.err;
}

}  // namespace

namespace {

// Synthetic-acceptance mode end to end: the forced pattern shows in the measured per-position
// acceptance, and the summary and the report flag the cases as not real measurements (the AR
// baseline stays real). α_1 over ~100 draft steps at p = 0.9 lies in [0.75, 1] except with
// probability < 1e-5 (binomial tail): that is this test's false-failure rate.
TEST(SyntheticAcceptanceCli, FlaggedInSummaryAndReport) {
  const std::string dir = std::string(SPECBED_TEST_TMPDIR) + "/synthetic_cli";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string config = dir + "/synthetic.json";
  {
    std::ofstream f(config);
    f << R"({"output": ")" << dir
      << R"(/synthetic.db", "methods": ["ar", {"name": "sps", "knobs": {"gamma": 3}}],
            "datasets": [{"name": "stories", "limit": 4}], "max_new_tokens": 96, "warmup": 0,
            "synthetic_acceptance": [0.9, 0.0]})";
  }
  auto r = Specbed("run --quiet " + config, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = Specbed("summary " + dir + "/synthetic.db --json", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("SYNTHETIC ACCEPTANCE"), std::string::npos) << r.out;
  // Position 2 is never accepted (p = 0), position 1 about 90% of the time.
  const size_t alpha = r.out.rfind("\"alpha\": [");  // the sps case (AR has none)
  ASSERT_NE(alpha, std::string::npos) << r.out;
  const double a1 = std::stod(r.out.substr(alpha + 10));
  EXPECT_GE(a1, 0.75);
  EXPECT_LE(a1, 1.0);
  r = Specbed("summary " + dir + "/synthetic.db", dir);
  EXPECT_NE(r.out.find("sps(drafter=stories260K-draft,gamma=3) [SYNTHETIC]"), std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("ar [SYNTHETIC]"), std::string::npos) << r.out;
  r = Specbed("report " + dir + "/synthetic.db -o " + dir + "/report", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(ReadAll(dir + "/report/index.html").find("SYNTHETIC ACCEPTANCE"), std::string::npos);
}

}  // namespace
