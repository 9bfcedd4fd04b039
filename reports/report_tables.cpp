// The report's tables (see report.h): the per-case details table, the bench table, the headline
// tables with their notes on slow cases, the provenance table and the conventions list, each
// with its constant columns hidden (llama-bench style). Checked by: tests/reports/report_test.cpp
// and tests/reports/headline_test.cpp.
#include "reports/format.h"
#include "reports/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/names.h"
#include "base/paths.h"
#include "metrics/metrics.h"
#include "metrics/vllm_metrics.h"
#include "reports/plots.h"
#include "reports/report_writers.h"
#include "reports/summary.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;

using report_format::kNone;

// Configuration columns of the case table (may be hidden when constant; used in plot labels).
const std::vector<std::string> kCaseConfigColumns = {
    "run",  "method",  "knobs", "categories", "limit",  "T",     "top_p", "top_k",
    "seed", "max new", "dtype", "threads",    "device", "batch", "timing"};

using report_format::Fixed;
using report_format::General;

// "[lo, hi]" with two decimals; "—" without an interval.
// "[1.10, 1.35]"; "n<5" for an interval over fewer than kMinPromptsForInterval prompts.
std::string Interval2(const Interval& ci, int64_t n_prompts) {
  if (n_prompts > 0 && n_prompts < kMinPromptsForInterval) return "n<5";
  if (!std::isfinite(ci.lo) || !std::isfinite(ci.hi)) return kNone;
  return "[" + Fixed(ci.lo, 2) + ", " + Fixed(ci.hi, 2) + "]";
}

// "2/3 (66.7%)": answers identical to AR / compared answers; "—" when nothing was compared; ""
// at T > 0, where exact match is no losslessness check (a lossless method samples other tokens).
std::string ExactMatchCell(const ExactMatch& e, double temperature) {
  if (temperature != 0) return "";
  if (e.n_matched == 0) return kNone;
  return StrCat(e.n_exact, "/", e.n_matched, " (", Fixed(100.0 * e.rate, 1), "%)");
}

// "3 (0.250)": earliest divergence position and the smallest AR top-2 logit margin at a
// divergence; "—" when every compared answer matched (or none was compared).
std::string DivergenceCell(const ExactMatch& e) {
  if (e.divergences.empty()) return kNone;
  return StrCat(e.min_position, " (", Fixed(e.min_margin, 3), ")");
}

// Method knobs as shown in the details table: short form "k=4,drafter=x", "none" for none.
std::string Knobs(const std::string& json) {
  const std::string s = KnobsShort(json);
  return s.empty() ? "none" : s;
}

const std::vector<std::string> kConventions = {
    "decode tok/s = Σ (output tokens − 1) / Σ decode time over the answers of a case: the first "
    "token of every answer comes from the prefill forward and its time is counted in prefill ms.",
    "prefill ms = mean prefill time per answer (prompt forward + first-token sampling).",
    "speedup = geometric mean over answers of method decode tok/s ÷ AR decode tok/s for the "
    "same prompt and turn (tok/s = (output tokens − 1) / decode time, so answers of different "
    "lengths at T > 0 compare per token; at T = 0 with identical outputs it is the decode-time "
    "ratio). The AR side is the paired AR run of each answer when the case was timed \"paired\" "
    "(AR on the same prompt back to back, alternating which runs first), else the AR case with "
    "the same target, dataset, categories, limit, T, top_p, top_k, seed, max new tokens, dtype, "
    "device, threads and batch. \"speedup Σ\" = total method tok/s ÷ total AR tok/s. AR rows "
    "are the baseline (1.00).",
    "One speedup per case: `speedup` (the geometric mean above) is the figure of the headline, "
    "the paper-layout tables, the plots and `specbed summary`. \"speedup Σ (secondary)\" and "
    "\"Spec-Bench (secondary)\" are other tools' definitions, kept for comparison: they weight "
    "answers by their length or time instead of counting each answer once, so they differ from "
    "the geometric mean whenever the per-answer speedups vary with the answer's length (e.g. "
    "long answers at a low speedup pull speedup Σ below it).",
    "τ = Σ tokens emitted / number of verify steps (emitted tokens include the bonus/correction "
    "token of every step, so a step that accepts nothing still counts 1).",
    "Spec-Bench = Spec-Bench's own speedup figure (evaluation/speed.py): the arithmetic mean over "
    "prompts of the method's tok/s (tokens and time summed over a prompt's turns) ÷ the same mean "
    "for AR, over the same answers and in the same scope as the speedup column (Spec-Bench itself "
    "times end to end: `specbed report --scope e2e`).",
    "speedup 95% CI / speedup Σ 95% CI / Spec-Bench 95% CI = percentile bootstrap intervals over "
    "prompts (2000 "
    "resamples of the prompts with replacement, all turns of a drawn prompt together, fixed "
    "seed).",
    "T_D (%) = Σ drafting time / Σ decode time; other (%) = Σ other step time (sampling, "
    "acceptance, cache bookkeeping) / Σ decode time.",
    "rollback (%) = (drafted − accepted) / drafted draft tokens (drafted = tree nodes, root "
    "excluded).",
    "rollback rate RB (%) = rolled-back draft tokens / all draft tokens generated, discarded "
    "parallel work included (the SpecBranch paper's rollback rate; PEARL and SpecBranch report "
    "it); target "
    "forwards / answer = verification passes per answer; busy draft / verify = what each side "
    "computed per step (their sum exceeds the step's wall time when they overlapped).",
    "exact match = answers whose token ids equal the AR baseline's (a losslessness check at "
    "T = 0); for the others the first divergence position (minimum) and the AR target's top-2 "
    "logit margin there (smallest).",
    "Per-position acceptance: r_i = steps accepting ≥ i tokens / steps drafting ≥ i deep; "
    "α_i = steps accepting ≥ i / steps that accepted ≥ i−1 and drafted ≥ i deep.",
    "Paper-layout tables: Spd = speedup (geometric mean over prompts, as above) per benchmark "
    "(a dataset, or one category of it when its prompts have several), τ as above; All = over "
    "every answer of the row (the case's speedup, as in the headline); Mean of benchmarks = the "
    "papers' arithmetic mean over the benchmarks (secondary; * = over those with a value); T_D% "
    "and rollback% are pooled over the row's cases. AR is the baseline and has no row.",
    "Budget (figures) and nodes/step (tables) = mean drafted nodes per verify step (Σ drafted / "
    "steps, root excluded); compare it with the configured budget in the knobs.",
    "timing = how a case was timed against AR: paired, per-case, or — (not recorded).",
    "— = no data (τ, T_D, rollback, other and per-position acceptance need per-step records, "
    "which only speculative methods write; speedup, its intervals and exact match need a "
    "matching AR case).",
};

}  // namespace

// Provenance: one column per run.
ReportTable RunsTable(const std::vector<ReportRun>& runs) {
  ReportTable t;
  t.columns.push_back({"", false, false});
  for (const auto& r : runs) t.columns.push_back({StrCat("run ", r.run_id), false, false});
  auto add = [&](const std::string& name, auto field) {
    std::vector<std::string> row = {name};
    for (const auto& r : runs) {
      const std::string v = field(r.info);
      row.push_back(v.empty() ? kNone : v);
    }
    t.rows.push_back(row);
  };
  add("started at", [](const RunInfo& i) { return i.started_at; });
  add("specbed version", [](const RunInfo& i) { return i.specbed_version; });
  add("git commit", [](const RunInfo& i) { return i.git_commit; });
  add("build flags", [](const RunInfo& i) { return i.build_flags; });
  add("host", [](const RunInfo& i) { return i.host; });
  add("cpu", [](const RunInfo& i) { return i.cpu; });
  add("gpu", [](const RunInfo& i) { return i.gpu.empty() ? std::string("none") : i.gpu; });
  add("libraries", [](const RunInfo& i) { return i.library_versions_json; });
  add("repro command", [](const RunInfo& i) { return i.repro_command; });
  add("config", [](const RunInfo& i) { return i.config_json; });
  return t;
}

ReportTable HideConstantColumns(ReportTable table) {
  if (table.rows.empty()) return table;
  std::vector<bool> keep(table.columns.size(), true);
  for (size_t c = 0; c < table.columns.size(); ++c) {
    if (!table.columns[c].hideable) continue;
    bool constant = true;
    for (const auto& row : table.rows) constant = constant && row[c] == table.rows[0][c];
    if (constant) {
      keep[c] = false;
      table.constants.emplace_back(table.columns[c].header, table.rows[0][c]);
    }
  }
  ReportTable out;
  out.constants = table.constants;
  for (size_t c = 0; c < table.columns.size(); ++c) {
    if (keep[c]) out.columns.push_back(table.columns[c]);
  }
  auto kept = [&](const std::vector<std::string>& row) {
    std::vector<std::string> r;
    for (size_t c = 0; c < row.size(); ++c) {
      if (keep[c]) r.push_back(row[c]);
    }
    return r;
  };
  for (const auto& row : table.rows) out.rows.push_back(kept(row));
  for (const auto& row : table.titles) out.titles.push_back(kept(row));
  return out;
}

namespace {

// The columns of the per-case details table (BuildCaseTable), in order.
ReportTable CaseTableColumns() {
  ReportTable t;
  t.columns.push_back({"case", true, false});
  t.columns.push_back({"label", false, false});
  for (const auto& h : kCaseConfigColumns) {
    const bool numeric = h != "method" && h != "knobs" && h != "categories" && h != "dtype" &&
                         h != "device" && h != "timing";
    t.columns.push_back({h, numeric, h != "method"});
    t.columns.back().whole_tokens = h == "knobs";
    if (h == "knobs") t.columns.push_back({"nodes/step", true, true});  // beside the budget
  }
  t.columns.push_back({"prompts", true, true});
  t.columns.push_back({"samples", true, true});
  t.columns.push_back({"output tokens", true, false});
  t.columns.push_back({"decode tok/s", true, false});
  t.columns.push_back({"prefill ms", true, false});
  t.columns.push_back({"speedup", true, true});
  t.columns.push_back({"speedup Σ (secondary)", true, true});
  t.columns.push_back({"Spec-Bench (secondary)", true, true});
  t.columns.push_back({"τ", true, true});
  t.columns.push_back({"T_D (%)", true, true});
  t.columns.push_back({"drafter prefill (%)", true, true});
  t.columns.push_back({"rollback (%)", true, true});
  t.columns.push_back({"rollback rate RB (%)", true, true});
  t.columns.push_back({"RB w/o trimming (%)", true, true});
  t.columns.push_back({"target forwards / answer", true, true});
  t.columns.push_back({"busy draft / verify (µs/step)", true, true});
  t.columns.push_back({"other (%)", true, true});
  t.columns.push_back({"speedup 95% CI", true, true});
  t.columns.push_back({"speedup Σ 95% CI", true, true});
  t.columns.push_back({"Spec-Bench 95% CI", true, true});
  t.columns.push_back({"exact match", true, true});
  t.columns.push_back({"first divergence (margin)", true, true});
  t.columns.push_back({"stop reasons", false, false});
  return t;
}

}  // namespace

std::vector<std::string> DecodeSettingCells(const CaseRecord& r) {
  return {General(r.top_p),
          std::to_string(r.top_k),
          std::to_string(r.seed),
          std::to_string(r.max_new_tokens),
          r.dtype,
          std::to_string(r.threads),
          r.device,
          std::to_string(r.batch_size)};
}

ReportTable BuildCaseTable(const ReportGroup& group) {
  ReportTable t = CaseTableColumns();
  std::vector<const ResultsStore::CaseRow*> rows;
  for (const CaseReport& c : group.cases) rows.push_back(&c.row);
  const std::vector<std::string> knobs = DifferingKnobs(rows);
  for (size_t ci = 0; ci < group.cases.size(); ++ci) {
    const CaseReport& c = group.cases[ci];
    const CaseRecord& r = c.row.record;
    const CaseMetrics& m = c.metrics;
    std::vector<std::string> titles(t.columns.size());
    titles[4] = Knobs(r.method_knobs_json);  // the knobs column: every knob on hover
    t.titles.push_back(std::move(titles));
    std::vector<std::string> row = {
        std::to_string(c.row.case_id),
        c.label,
        std::to_string(c.row.run_id),
        IsSyntheticCase(r) ? r.method + " [" + kSyntheticMarker + "]" : r.method,
        knobs[ci],
        Fixed(m.drafted_per_step, 1),
        r.categories.empty() ? "all" : r.categories,
        r.prompt_limit < 0 ? "all" : std::to_string(r.prompt_limit),
        General(r.temperature),
    };
    const std::vector<std::string> settings = DecodeSettingCells(r);
    row.insert(row.end(), settings.begin(), settings.end());
    row.insert(
        row.end(),
        {
            r.timing_mode.empty() ? kNone
                                  : (r.timing_mode == "per_case" ? "per-case" : r.timing_mode),
            std::to_string(m.n_prompts),
            std::to_string(m.n_samples),
            std::to_string(m.output_tokens),
            Fixed(m.decode_tokens_per_s, 1),
            Fixed(m.prefill_ms_mean, 3),
            c.is_ar ? "1.00" : Fixed(c.speedup.geomean, 2),
            c.is_ar ? "1.00" : Fixed(c.speedup.total_ratio, 2),
            c.is_ar ? "1.00" : Fixed(c.speedup.spec_bench, 2),
            Fixed(m.tau, 2),
            Fixed(100.0 * m.draft_fraction, 1),
            Fixed(100.0 * m.draft_prefill_fraction, 1),
            Fixed(100.0 * m.rollback_rate, 1),
            Fixed(100.0 * m.draft_waste_rate, 1),
            Fixed(100.0 * m.spec_rollback_rate, 1),
            Fixed(m.target_forwards_per_sample, 1),
            std::isfinite(m.draft_busy_us_per_step)
                ? Fixed(m.draft_busy_us_per_step, 0) + " / " + Fixed(m.verify_busy_us_per_step, 0)
                : std::string(kNone),
            Fixed(100.0 * m.other_fraction, 1),
            c.is_ar ? kNone : Interval2(c.speedup.geomean_ci, c.speedup.n_prompts),
            c.is_ar ? kNone : Interval2(c.speedup.total_ratio_ci, c.speedup.n_prompts),
            c.is_ar ? kNone : Interval2(c.speedup.spec_bench_ci, c.speedup.n_prompts),
            ExactMatchCell(c.exact_match, r.temperature),
            DivergenceCell(c.exact_match),
            FormatStopReasons(m.stop_reasons),
        });
    t.rows.push_back(std::move(row));
  }
  return HideConstantColumns(std::move(t));
}

ReportTable BuildBenchTable(const std::vector<BenchRow>& bench) {
  ReportTable t;
  t.columns = {{"run", true, true},      {"model", false, true},      {"dtype", false, true},
               {"threads", true, true},  {"batch", true, true},       {"context", true, true},
               {"tokens", true, true},   {"reps", true, true},        {"tok/s ± std", true, false},
               {"ms/step", true, false}, {"forward ms", true, false}, {"other ms", true, false},
               {"other %", true, false}};
  for (const BenchRow& b : bench) {
    const BenchRecord& r = b.record;
    t.rows.push_back(
        {std::to_string(b.run_id), r.model, r.dtype, std::to_string(r.threads),
         std::to_string(r.batch_size), std::to_string(r.context_len), std::to_string(r.n_tokens),
         std::to_string(r.reps), Fixed(r.tokens_per_s, 1) + " ± " + Fixed(r.tokens_per_s_std, 1),
         Fixed(r.ms_per_step, 4), Fixed(r.forward_ms_per_step, 4), Fixed(r.other_ms_per_step, 4),
         Fixed(r.ms_per_step > 0 ? 100.0 * r.other_ms_per_step / r.ms_per_step : kNoValue, 1)});
  }
  return HideConstantColumns(std::move(t));
}

namespace {

// The verify-width ratio (forward of n new tokens / forward of one) of `target` at `n` tokens,
// linear between measured widths; NaN when the curve has no rows for the target. Rows match
// when their model is the target or a path whose file name is the target; the rows with the
// given thread count are preferred, then the smallest context.
double VerifyRatio(const std::vector<BenchVerifyRecord>& curve, const std::string& target,
                   int64_t threads, double n, std::string* described) {
  std::vector<const BenchVerifyRecord*> rows;
  for (const BenchVerifyRecord& r : curve) {
    if (r.model == target || fs::path(r.model).filename().string() == target) rows.push_back(&r);
  }
  if (rows.empty()) return kNoValue;
  bool any_threads = false;
  for (const auto* r : rows) any_threads = any_threads || r->threads == threads;
  int64_t context = -1;
  for (const auto* r : rows) {
    if (any_threads && r->threads != threads) continue;
    if (context < 0 || r->context_len < context) context = r->context_len;
  }
  std::vector<std::pair<double, double>> pts;
  for (const auto* r : rows) {
    if ((any_threads && r->threads != threads) || r->context_len != context) continue;
    pts.push_back({static_cast<double>(r->n_query), r->ratio_to_one});
  }
  std::sort(pts.begin(), pts.end());
  if (pts.empty()) return kNoValue;
  if (described != nullptr) {
    *described = StrCat("verify-width curve of ", rows[0]->model, " at context ", context, ", ",
                        any_threads ? threads : rows[0]->threads, " thread(s)");
  }
  if (n <= pts.front().first) return pts.front().second;
  for (size_t i = 1; i < pts.size(); ++i) {
    if (n <= pts[i].first) {
      const double f = (n - pts[i - 1].first) / (pts[i].first - pts[i - 1].first);
      return pts[i - 1].second + f * (pts[i].second - pts[i - 1].second);
    }
  }
  return pts.back().second;  // beyond the curve: its last point (a lower bound)
}

}  // namespace

namespace {

// Why case `c` of `group` is below 1×: its step time in AR-token times and, when the database has
// a verify-width curve of its target, the cost of verifying its tokens per step relative to one
// token (else *no_curve is set).
std::string SlowCaseNote(const ReportData& data, const ReportGroup& group, const CaseReport& c,
                         bool* no_curve) {
  // Why: a step costs more AR-token times than it emits tokens.
  const CaseReport* base = nullptr;
  for (const CaseReport& o : group.cases) {
    if (o.row.case_id == c.baseline_case_id) base = &o;
  }
  const CaseMetrics& m = c.metrics;
  std::string note = StrCat(c.label, " (case ", c.row.case_id, ", ", group.dataset,
                            "): ", Fixed(c.speedup.geomean, 2), "×");
  if (base != nullptr && m.n_steps > 0 && base->metrics.decode_tokens_per_s > 0 &&
      m.decode_ms > 0) {
    const double step_ms = m.decode_ms / static_cast<double>(m.n_steps);
    const double ar_ms = 1000.0 / base->metrics.decode_tokens_per_s;
    note +=
        StrCat(" — a step emits τ = ", Fixed(m.tau, 2), " tokens but takes ",
               Fixed(step_ms / ar_ms, 2), " AR-token times (", Fixed(step_ms, 3), " ms vs. ",
               Fixed(ar_ms, 3), " ms per AR token; drafting ", Fixed(100.0 * m.draft_fraction, 0),
               "%, verifying ", Fixed(100.0 * m.verify_fraction, 0), "%)");
    std::string described;
    const double width = m.drafted_per_step + 1.0;
    const double ratio = VerifyRatio(data.verify_curve, c.row.record.target, c.row.record.threads,
                                     width, &described);
    if (std::isfinite(ratio)) {
      note += StrCat("; verifying ", Fixed(width, 1), " tokens at once costs ", Fixed(ratio, 2),
                     "× one token's forward (", described, ")");
    } else {
      *no_curve = true;
    }
    note += ".";
  } else {
    note += " (no AR baseline or no steps recorded to explain it).";
  }
  return note;
}

}  // namespace

namespace {

using HeadlineCase = std::pair<const ReportGroup*, const CaseReport*>;
using HeadlineKey = std::pair<std::string, double>;  // (target, temperature)

// The speculative cases per (target, temperature), in key order, each list best speedup first
// (cases without a speedup last).
std::vector<std::pair<HeadlineKey, std::vector<HeadlineCase>>> HeadlineCases(
    const ReportData& data) {
  std::map<HeadlineKey, std::vector<HeadlineCase>> cases;
  for (const ReportGroup& g : data.groups) {
    for (const CaseReport& c : g.cases) {
      if (!c.is_ar) cases[{g.target, c.row.record.temperature}].push_back({&g, &c});
    }
  }
  std::vector<std::pair<HeadlineKey, std::vector<HeadlineCase>>> out(cases.begin(), cases.end());
  for (auto& [key, list] : out) {
    std::stable_sort(list.begin(), list.end(), [](const HeadlineCase& a, const HeadlineCase& b) {
      const double x = a.second->speedup.geomean, y = b.second->speedup.geomean;
      if (std::isfinite(x) != std::isfinite(y)) return std::isfinite(x);
      return std::isfinite(x) && x > y;
    });
  }
  return out;
}

// The leader of `c`'s dataset in a best-first list: its first case with a speedup; null if none.
const CaseReport* LeaderOf(const std::vector<HeadlineCase>& list, const ReportGroup& g) {
  for (const auto& [group, c] : list) {
    if (group == &g && std::isfinite(c->speedup.geomean)) return c;
  }
  return nullptr;
}

// The "vs. leader" cell: "leader", "tied 0.99× [0.97, 1.02]", "slower 0.85× [0.80, 0.90]",
// "0.97× n<5" (too few shared prompts to decide), "—" (no speedup or no shared answer).
std::string VsLeaderCell(const CaseReport& c, const CaseReport* leader) {
  if (leader == nullptr || !std::isfinite(c.speedup.geomean)) return kNone;
  if (leader == &c) return "leader";
  const LeaderComparison v = CompareWithLeader(leader->speedup, c.speedup);
  if (v.n_prompts == 0) return kNone;
  const std::string ratio = Fixed(v.ratio, 2) + "×";
  if (!v.decided()) return ratio + " n<5";
  const std::string ci = " [" + Fixed(v.ci.lo, 2) + ", " + Fixed(v.ci.hi, 2) + "]";
  if (v.tied()) return "tied " + ratio + ci;
  return (v.ratio < 1 ? "slower " : "faster ") + ratio + ci;
}

ReportTable HeadlineColumns() {
  ReportTable t;
  t.columns = {{"method", false, false},
               {"dataset", false, true},
               {"speedup [95% CI]", true, false},
               {"vs. leader [95% CI]", true, false},
               {"tok/s", true, false},
               {"AR tok/s", true, false},
               {"nodes/step", true, false},
               {"τ", true, false},
               {"acc%", true, false},
               {"T_D%", true, false},
               {"exact match", true, false},
               {"case", true, false}};
  return t;
}

std::vector<std::string> HeadlineRow(const ReportGroup& g, const CaseReport& c,
                                     const CaseReport* leader) {
  const std::string spd = std::isfinite(c.speedup.geomean)
                              ? Fixed(c.speedup.geomean, 2) + "× " +
                                    Interval2(c.speedup.geomean_ci, c.speedup.n_prompts)
                              : std::string(kNone);
  const PairedSpeeds speeds = PairedTokensPerS(c.speedup);
  return {IsSyntheticCase(c.row.record) ? c.label + " [" + kSyntheticMarker + "]" : c.label,
          g.dataset,
          spd,
          VsLeaderCell(c, leader),
          Fixed(speeds.method, 1),
          Fixed(speeds.ar, 1),
          Fixed(c.metrics.drafted_per_step, 1),
          Fixed(c.metrics.tau, 2),
          Fixed(100.0 * VllmCompatibleMetrics(c.metrics).acceptance_rate, 1),
          Fixed(100.0 * c.metrics.draft_fraction, 1),
          ExactMatchCell(c.exact_match, c.row.record.temperature),
          std::to_string(c.row.case_id)};
}

// Said once above a table's notes on cases below 1×.
std::string SlowExplanation(const std::string& target, bool no_curve) {
  std::string text =
      "Speculation pays only when a step's τ tokens take less time than τ AR tokens (speedup "
      "≈ τ ÷ the step's cost in AR-token times). Below 1× the drafting plus the wider verify "
      "forward cost more than the tokens they save: the regime of a target whose forward is "
      "cheap next to that work (a small model on a CPU; see Cost regime).";
  if (no_curve) {
    text += StrCat(" The database has no verify-width curve of ", target,
                   ": `specbed bench --verify-widths` measures how a forward's cost grows with the "
                   "tokens it verifies.");
  }
  return text;
}

}  // namespace

std::vector<HeadlineTable> BuildHeadlineTables(const ReportData& data) {
  std::vector<HeadlineTable> out;
  for (const auto& [key, list] : HeadlineCases(data)) {
    HeadlineTable h;
    h.target = key.first;
    h.temperature = key.second;
    h.title = StrCat(key.first, " · T=", General(key.second));
    h.table = HeadlineColumns();
    bool no_curve = false;
    for (const auto& [g, c] : list) {
      h.table.rows.push_back(HeadlineRow(*g, *c, LeaderOf(list, *g)));
      h.cases.push_back(c);
      for (std::string& note : CaseNotes(*c, *g)) h.case_notes.push_back(std::move(note));
      if (c->speedup.geomean < 1.0) h.slow_notes.push_back(SlowCaseNote(data, *g, *c, &no_curve));
    }
    if (!h.slow_notes.empty()) h.slow_explanation = SlowExplanation(h.target, no_curve);
    h.table = HideConstantColumns(std::move(h.table));
    out.push_back(std::move(h));
  }
  return out;
}

// The conventions list for a report whose speedups are in `scope`.
std::vector<std::string> ConventionsFor(SpeedupScope scope) {
  std::vector<std::string> out = {
      scope == SpeedupScope::kEndToEnd
          ? "Scope: END TO END. Every speedup here (speedup, speedup Σ, Spec-Bench, the paper "
            "tables' Spd) uses every generated token over prefill + decode time for both the "
            "method and AR (the conventions below say \"decode\" for the default scope)."
          : "Scope: decode only. Every speedup here (speedup, speedup Σ, Spec-Bench, the paper "
            "tables' Spd) uses decode tokens over decode time, prefill excluded (`specbed report "
            "--scope e2e` includes it)."};
  out.insert(out.end(), kConventions.begin(), kConventions.end());
  return out;
}

}  // namespace specbed
