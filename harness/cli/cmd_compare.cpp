// `specbed compare A.db B.db` (or --baseline A.db --candidate B.db): the regression gate
// (reports/compare.h). Prints the matched cases with τ and speed deltas (bootstrap CIs) and exits 3
// when the candidate regresses (τ lost at T = 0, speed confidently below the threshold, or a
// baseline case without a match), 0 otherwise, 1 on errors. `specbed compare DB --cases A,B`
// compares two cases of one database (B against A, same statistics) as a report (exit 0; lines
// <= 120 columns); with --gate it gates like two databases. Two `specbed bench` databases are
// compared row by row instead (reports/bench_compare.h: A and B tok/s, B/A; exit 0).
// Checked by: tests/cli/compare_cli_test.cpp (self-compare passes, a lowered budget fails; two
// bench databases).
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "base/error.h"
#include "harness/cli/cli_flags.h"
#include "harness/cli/commands.h"
#include "reports/bench_compare.h"
#include "reports/compare.h"

namespace specbed::cli {
namespace {

struct CompareCommandOptions {
  std::vector<std::string> databases;  // positional: BASELINE CANDIDATE, or DB with --cases
  std::string baseline, candidate;
  std::vector<int64_t> cases;  // --cases A,B
  CompareOptions options;
  bool json = false;
  bool no_tau = false, no_speed = false;
  bool gate = false;  // --cases: gate like two databases
  std::string scope = "decode";
};

constexpr const char* kUsage =
    "give two databases (specbed compare BASELINE.db CANDIDATE.db, or --baseline/--candidate), "
    "or one database and two of its cases (specbed compare DB --cases A,B)";

std::string Baseline(const CompareCommandOptions& o) {
  SPECBED_CHECK(o.databases.size() + !o.baseline.empty() + !o.candidate.empty() == 2,
                "compare: ", kUsage);
  return o.baseline.empty() ? o.databases[0] : o.baseline;
}

std::string Candidate(const CompareCommandOptions& o) {
  Baseline(o);  // checks the count
  if (!o.candidate.empty()) return o.candidate;
  return o.databases.back();
}

std::string WithinDatabase(const CompareCommandOptions& o) {
  SPECBED_CHECK(o.cases.size() == 2, "compare --cases takes two case ids, A,B (got ",
                o.cases.size(), ")");
  SPECBED_CHECK(o.databases.size() == 1 && o.baseline.empty() && o.candidate.empty(),
                "compare --cases: ", kUsage);
  return o.databases[0];
}

// Two `specbed bench` databases: their rows side by side (no gate). True when that ran.
bool CompareBenchRuns(const CompareCommandOptions& o) {
  if (!o.cases.empty()) return false;
  const std::string a = Baseline(o), b = Candidate(o);
  const bool a_bench = IsBenchDatabase(a), b_bench = IsBenchDatabase(b);
  if (!a_bench && !b_bench) return false;
  SPECBED_CHECK(a_bench && b_bench, "compare: '", a_bench ? a : b,
                "' holds bench rows (specbed bench) and '", a_bench ? b : a,
                "' does not: compare takes two run databases or two bench databases");
  SPECBED_CHECK(!o.json && !o.gate, "compare: --json and --gate are for run databases, not for ",
                "two bench databases");
  WriteToStdout(FormatBenchComparison(CompareBenchDatabases(a, b)));
  return true;
}

void RunCompare(const CompareCommandOptions& o) {
  if (CompareBenchRuns(o)) return;
  CompareOptions options = o.options;
  // Two cases of one database are usually two methods: a report unless --gate asks for a gate.
  const bool gates = o.cases.empty() || o.gate;
  SPECBED_CHECK(!o.gate || !o.cases.empty(),
                "compare --gate goes with --cases (two databases "
                "are always gated)");
  options.gate_tau = gates && !o.no_tau;
  options.gate_speed = gates && !o.no_speed;
  options.scope = ParseSpeedupScope(o.scope, "--scope");
  const CompareResult r = o.cases.empty()
                              ? CompareDatabases(Baseline(o), Candidate(o), options)
                              : CompareCases(WithinDatabase(o), o.cases[0], o.cases[1], options);
  WriteToStdout(o.json ? CompareJson(r) : FormatCompareTable(r));
  std::fflush(stdout);
  if (r.regressed) std::exit(kRegressionExitCode);
}

}  // namespace

void AddCompareCommand(CLI::App& app) {
  auto [cmd, o] = AddSubcommand(&app, "compare", RunCompare,
                                "Regression gate: baseline vs candidate results databases (τ exact "
                                "at T=0, speed with bootstrap CIs); exit 3 on a regression");
  cmd->add_option("databases", o->databases, "BASELINE.db CANDIDATE.db, or one DB with --cases")
      ->expected(0, 2);
  cmd->add_option("--baseline", o->baseline, "Baseline results database (or the first positional)");
  cmd->add_option("--candidate", o->candidate,
                  "Candidate results database (or the second positional)");
  cmd->add_option("--cases", o->cases,
                  "Two case ids A,B of one database: B against A (speedups over AR, paired "
                  "bootstrap CI)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--match", o->options.match,
                  "key: same resolved case config (repeats pooled); workload: same method and "
                  "workload, knobs ignored")
      ->check(CLI::IsMember({"key", "workload"}))
      ->capture_default_str();
  cmd->add_option("--tau-tolerance", o->options.tau_tolerance, "Allowed τ loss at T=0")
      ->capture_default_str();
  cmd->add_option("--speedup-threshold", o->options.speedup_threshold,
                  "Allowed relative slowdown: fail when the whole 95% CI of the speed ratio is "
                  "below 1 - threshold")
      ->capture_default_str();
  cmd->add_option("--resamples", o->options.bootstrap.n_resamples, "Bootstrap resamples")
      ->capture_default_str();
  cmd->add_flag("--gate", o->gate,
                "With --cases: gate B against A like two databases (exit 3 on a regression); "
                "without it --cases only reports");
  cmd->add_flag("--no-tau-gate", o->no_tau, "Report τ but do not gate on it");
  cmd->add_flag("--no-speed-gate", o->no_speed, "Report speed but do not gate on it");
  cmd->add_flag("--gate-ar-speed", o->options.gate_absolute_speed,
                "Also gate AR rows' absolute decode tok/s (same machine only)");
  cmd->add_flag("--json", o->json, "Print the comparison as JSON");
  AddBaselineFlags(cmd, o->options.baseline.cross_machine, o->scope, "Speed");
}

}  // namespace specbed::cli
