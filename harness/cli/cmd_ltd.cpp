// `specbed ltd-adaptation`: does an LTD policy pair adapt to what it observes? Runs `ltd` over a
// prompt set with the decision log on (methods/ltd/ltd_adaptation_probe.h) and writes
// OUT/decisions.tsv (one row per decision), OUT/adaptation.json (the summary), OUT/adaptation.md
// (spread and correlations, and a sentence saying whether the policies adapt) and
// OUT/adaptation.png (V and D per step against the step's best candidate score; skipped with a
// warning without gnuplot).
// Checked by: tests/cli/ltd_cli_test.cpp (LtdCliTest.AdaptationWritesItsFiles).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <sstream>

#include "base/error.h"
#include "base/mapped_file.h"
#include "harness/cli/cli_flags.h"
#include "harness/cli/commands.h"
#include "methods/ltd/ltd_adaptation_probe.h"
#include "reports/plots.h"

namespace specbed::cli {
namespace {

struct AdaptationOptions {
  LtdProbeConfig config;
  std::string out;
  std::string gnuplot;
};

std::string DecisionsTsv(const std::vector<LtdDecision>& log) {
  std::ostringstream s;
  s << "kind\tprompt\tcontext_len\trounds\ttop_score\tvalue\n";
  for (const LtdDecision& d : log) {
    s << d.kind << '\t' << d.prompt << '\t' << d.context_len << '\t' << d.rounds << '\t'
      << d.top_score << '\t' << d.value << '\n';
  }
  return s.str();
}

std::string Corr(double r) {
  if (std::isnan(r)) return "— (constant)";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%+.2f", r);
  return buf;
}

std::string SpreadRow(const char* what, const LtdSpread& s) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "| %s | %lld | %lld | %.2f | %.2f | %lld..%lld | %s | %s |\n",
                what, static_cast<long long>(s.n), static_cast<long long>(s.distinct), s.mean, s.sd,
                static_cast<long long>(s.min), static_cast<long long>(s.max),
                Corr(s.corr_top_score).c_str(), Corr(s.corr_context).c_str());
  return buf;
}

std::string Markdown(const AdaptationOptions& o, const LtdProbeResult& probe,
                     const LtdAdaptationSummary& s, bool has_png) {
  const LtdProbeConfig& c = o.config;
  std::ostringstream m;
  m << "# LTD adaptation: " << c.target << ", policy " << c.policy << " (" << c.policies << ")\n\n"
    << "Prompts: first " << c.limit << " of `" << c.prompts << "`, " << c.max_new_tokens
    << " new tokens, T = " << c.temperature << ", seed " << c.seed << "; " << probe.steps
    << " verify steps.\n\n"
    << "| per step | n | distinct | mean | sd | range | corr. with best score | corr. with L |\n"
    << "|---|---|---|---|---|---|---|---|\n"
    << SpreadRow("V (verified drafts)", s.size) << SpreadRow("D (expansion rounds)", s.depth)
    << "\nDepth decisions: " << s.depth_calls << ", CONTINUE in "
    << (s.depth_calls > 0 ? 100.0 * s.continue_rate : 0.0)
    << "%; correlation of CONTINUE with the round's best score: " << Corr(s.corr_continue_top_score)
    << ".\n\n";
  if (!s.adapts()) {
    m << "**The policies do not adapt here**: the size policy chose one V and the depth policy "
         "one decision (always STOP or always CONTINUE) over every prompt and step, whatever "
         "they observed (D per step moves only where the end of an answer capped the tree). A "
         "gain over a static grid then comes from the shape they settled on, not from "
         "adaptation.\n\n";
  } else {
    m << "The decisions vary with the observations (see the spread and correlations above).\n\n";
  }
  if (has_png) m << "![V and D per step against the best candidate score](adaptation.png)\n";
  return m.str();
}

std::string PlotScript(const std::vector<LtdDecision>& log) {
  std::ostringstream data;
  for (const LtdDecision& d : log) {
    if (d.kind == 'V') data << d.top_score << ' ' << d.value << ' ' << d.rounds << '\n';
  }
  std::ostringstream s;
  s << "$steps << EOD\n"
    << data.str() << "EOD\n"
    << "set terminal pngcairo size 1100,420\nset output 'adaptation.png'\n"
    << "set multiplot layout 1,2\nset grid\nset xlabel 'best candidate score (log-prob)'\n"
    << "set ylabel 'V (verified drafts)'\nset title 'size per step'\nset yrange [0:*]\n"
    << "plot $steps using 1:2 with points pt 7 ps 0.6 notitle\n"
    << "set ylabel 'D (expansion rounds)'\nset title 'depth per step'\nset yrange [-0.5:*]\n"
    << "plot $steps using 1:3 with points pt 7 ps 0.6 notitle\n"
    << "unset multiplot\nreset\n";
  return s.str();
}

void RunAdaptation(const AdaptationOptions& o) {
  std::filesystem::create_directories(o.out);
  const LtdProbeResult probe = ProbeLtdDecisions(o.config);
  const LtdAdaptationSummary summary = SummarizeLtdDecisions(probe.log);
  WriteFileAtomically(o.out + "/decisions.tsv", DecisionsTsv(probe.log));
  WriteFileAtomically(o.out + "/adaptation.json", summary.ToJson().dump(2) + "\n");
  const std::string err = RunGnuplot(GnuplotProgram(o.gnuplot), o.out, PlotScript(probe.log));
  if (!err.empty()) std::fprintf(stderr, "warning: no figure: %s\n", err.c_str());
  WriteFileAtomically(o.out + "/adaptation.md", Markdown(o, probe, summary, err.empty()));
  std::printf("%s: %s\n", o.out.c_str(), summary.ToJson().dump().c_str());
}

}  // namespace

void AddLtdCommand(CLI::App& app) {
  auto [cmd, o] =
      AddSubcommand(&app, "ltd-adaptation", RunAdaptation,
                    "Run `ltd` with its decision log on and report whether the policies' V and D "
                    "vary with what they observe -> OUT/decisions.tsv, adaptation.{json,md,png}");
  LtdProbeConfig& c = o->config;
  cmd->add_option("-o,--output", o->out, "Output directory")->required();
  cmd->add_option("-t,--target", c.target, "Target model")->capture_default_str();
  cmd->add_option("--policy", c.policy, "The ltd knob `policy`")->capture_default_str();
  cmd->add_option("--policies", c.policies, "both, size or depth")
      ->capture_default_str()
      ->check(CLI::IsMember({"both", "size", "depth"}));
  cmd->add_option("--prompts", c.prompts, "Prompt dataset")->capture_default_str();
  cmd->add_option("--limit", c.limit, "First prompts of the set")->capture_default_str();
  cmd->add_option("-n,--max-new-tokens", c.max_new_tokens, "Tokens per answer")
      ->capture_default_str();
  cmd->add_option("-T,--temperature", c.temperature, "Sampling temperature")->capture_default_str();
  cmd->add_option("--seed", c.seed, "Sampling seed of the first prompt (+1 per prompt)")
      ->capture_default_str();
  AddThreadsFlag(cmd, c.threads);
  cmd->add_option("--gnuplot", o->gnuplot, "gnuplot program (default: $SPECBED_GNUPLOT or PATH)");
}

}  // namespace specbed::cli
