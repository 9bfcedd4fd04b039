// The regression gate (see compare.h).
// Checked by: tests/reports/compare_test.cpp, tests/cli/compare_cli_test.cpp.
#include "reports/compare.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/hash.h"
#include "base/names.h"
#include "metrics/metrics.h"
#include "reports/format.h"
#include "reports/summary.h"
#include "results/store.h"

namespace specbed {
namespace {

using json = nlohmann::json;
using report_format::Fixed;
using report_format::General;
using report_format::kNone;

// One configuration (all its repeats) of one database.
struct Group {
  std::string label;
  CaseRecord record;  // of the first case (the configuration's settings)
  std::string method;
  bool ar_baseline = false;  // metrics IsArBaseline
  double temperature = 0;
  int64_t repeats = 0;
  int64_t emitted = 0, steps = 0;
  // (prompt_id, turn) -> log speed per repeat.
  std::map<std::string, std::vector<double>> log_speed;
};

std::string GroupKey(const CaseRecord& c, const std::string& match) {
  if (match == "key") {
    // Repeats of one configuration differ only by their "repeat" index: pool them. What the
    // runner recorded beside the configuration (the target's cost, the machine's bandwidth, the
    // engine's settings and capture counts) is not part of it.
    json config = json::parse(c.config_json, nullptr, /*allow_exceptions=*/false);
    if (!config.is_object() || !config.contains("repeat")) return c.case_key;
    for (const char* measured : {"repeat", "target_info", "machine", "engine"}) {
      config.erase(measured);
    }
    const std::string text = config.dump();
    return Hex64(Fnv1a64(text.data(), text.size()));
  }
  std::ostringstream k;
  k << c.method << '|' << c.target << '|' << c.dataset << '|' << c.categories << '|'
    << c.prompt_limit << '|' << c.temperature << '|' << c.top_p << '|' << c.top_k << '|' << c.seed
    << '|' << c.max_new_tokens << '|' << c.batch_size << '|' << c.dtype << '|' << c.device;
  return k.str();
}

// "method(knobs)" and "target dataset T=t seed=s" of a case; its label is both.
std::string CompareMethodLabel(const CaseRecord& c) {
  const std::string knobs = KnobsShort(c.method_knobs_json);
  return knobs.empty() ? c.method : c.method + "(" + knobs + ")";
}

std::string WorkloadLabel(const CaseRecord& c) {
  return StrCat(c.target, " ", c.dataset, " T=", General(c.temperature), " seed=", c.seed);
}

std::string CaseLabel(const CaseRecord& c) {
  return CompareMethodLabel(c) + " " + WorkloadLabel(c);
}

// Flattens a JSON value into dotted settings ("knobs.k" -> "4").
void FlattenSettings(const json& j, const std::string& path,
                     std::map<std::string, std::string>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      FlattenSettings(*it, path.empty() ? it.key() : path + "." + it.key(), out);
    }
  } else {
    out[path] = j.is_string() ? j.get<std::string>() : j.dump();
  }
}

// Every setting of a case: the record's configuration fields, its knobs, and its resolved config
// (config_json, without the repeat index and what the runner measured beside it).
std::map<std::string, std::string> Settings(const CaseRecord& c) {
  std::map<std::string, std::string> s = {{"method", c.method},
                                          {"target", c.target},
                                          {"dataset", c.dataset},
                                          {"categories", c.categories},
                                          {"prompt_limit", std::to_string(c.prompt_limit)},
                                          {"temperature", General(c.temperature)},
                                          {"top_p", General(c.top_p)},
                                          {"top_k", std::to_string(c.top_k)},
                                          {"seed", std::to_string(c.seed)},
                                          {"max_new_tokens", std::to_string(c.max_new_tokens)},
                                          {"batch_size", std::to_string(c.batch_size)},
                                          {"dtype", c.dtype},
                                          {"device", c.device},
                                          {"threads", std::to_string(c.threads)},
                                          {"drafter", c.drafter},
                                          {"timing_mode", c.timing_mode}};
  const json knobs = json::parse(c.method_knobs_json, nullptr, false);
  if (knobs.is_object()) FlattenSettings(knobs, "knobs", s);
  json config = json::parse(c.config_json, nullptr, false);
  if (config.is_object()) {
    for (const char* measured : {"repeat", "target_info", "machine"}) config.erase(measured);
    if (config.contains("engine") && config["engine"].is_object()) {  // its settings only
      config["engine"].erase("graphs_warmup");
      config["engine"].erase("graphs_timed");
    }
    std::map<std::string, std::string> from_config;
    FlattenSettings(config, "config", from_config);
    for (auto& [k, v] : from_config) s.emplace(k, v);
  }
  return s;
}

// "threads 1 → 2, knobs.k 4 → 8" (settings missing on one side read "(none)").
std::vector<std::string> SettingDiffs(const CaseRecord& a, const CaseRecord& b) {
  const auto sa = Settings(a), sb = Settings(b);
  std::set<std::string> keys;
  for (const auto& [k, v] : sa) keys.insert(k);
  for (const auto& [k, v] : sb) keys.insert(k);
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    const auto ia = sa.find(k), ib = sb.find(k);
    const std::string va = ia == sa.end() ? "(none)" : ia->second;
    const std::string vb = ib == sb.end() ? "(none)" : ib->second;
    if (va != vb) out.push_back(k + " " + va + " → " + vb);
  }
  return out;
}

// The groups of a database; with `only_case` >= 0 only that case, under the key "case".
std::map<std::string, Group> LoadGroups(const std::string& path, const std::string& match,
                                        SpeedupScope scope, const BaselinePolicy& policy,
                                        int64_t only_case = -1) {
  StoreOptions so;
  so.read_only = true;
  auto store = ResultsStore::Open(path, so);
  const auto cases = store->ListCases();
  std::map<std::string, Group> groups;
  std::map<std::string, std::string> knobs_of_group;  // workload match: one configuration each
  for (size_t i = 0; i < cases.size(); ++i) {
    if (only_case >= 0 && cases[i].case_id != only_case) continue;
    const CaseRecord& c = cases[i].record;
    const std::string key = only_case >= 0 ? std::string("case") : GroupKey(c, match);
    Group& g = groups[key];
    if (match == "workload") {
      auto [it, inserted] = knobs_of_group.emplace(key, c.method_knobs_json);
      SPECBED_CHECK(inserted || it->second == c.method_knobs_json, "compare --match workload: '",
                    path, "' holds two configurations of method ", c.method,
                    " on one workload (knobs ", it->second, " and ", c.method_knobs_json,
                    "); compare by key instead");
    }
    g.label = CaseLabel(c);
    if (g.repeats == 0) g.record = c;
    g.method = c.method;
    g.ar_baseline = IsArBaseline(c);
    g.temperature = c.temperature;
    ++g.repeats;
    const std::vector<SampleRecord> samples = store->LoadSamples(cases[i].case_id);
    for (const StepRecord& st : store->LoadSteps(cases[i].case_id)) {
      g.emitted += st.n_emitted;
      ++g.steps;
    }
    if (g.ar_baseline) {
      for (const SampleRecord& s : samples) {
        const double v =
            scope == SpeedupScope::kEndToEnd
                ? static_cast<double>(s.n_output_tokens) / ((s.prefill_ms + s.decode_ms) / 1000.0)
                : SampleDecodeTokensPerS(s);
        if (std::isfinite(v) && v > 0) {
          g.log_speed[s.prompt_id + "#" + std::to_string(s.turn)].push_back(std::log(v));
        }
      }
      continue;
    }
    // The AR side: each sample's paired AR run when recorded, else the AR case's answer.
    const BaselineMatch base = FindArBaseline(cases, i, policy);
    const bool paired = !samples.empty() && samples.front().has_paired_ar();
    if (base.index < 0 && !paired) continue;
    BootstrapOptions none;
    none.n_resamples = 0;
    const Speedup sp =
        ComputeSpeedup(base.index < 0 ? std::vector<SampleRecord>{}
                                      : store->LoadSamples(cases[base.index].case_id),
                       samples, none, scope);
    for (const Speedup::Pair& p : sp.pairs) {  // valid pairs only (ComputeSpeedup)
      g.log_speed[p.prompt_id + "#" + std::to_string(p.turn)].push_back(std::log(p.ratio()));
    }
  }
  return groups;
}

double MeanOf(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? kNoValue : s / static_cast<double>(v.size());
}

// SplitMix64 stream with an exact multiply-shift draw in [0, n).
struct Stream {
  uint64_t state;
  uint64_t Next() { return Mix64(state += 0x9E3779B97F4A7C15ULL); }
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }
};

void CompareSpeed(const Group& b, const Group& c, const CompareOptions& o, CompareRow& row) {
  std::vector<const std::vector<double>*> lb, lc;
  for (const auto& [prompt, values] : b.log_speed) {
    auto it = c.log_speed.find(prompt);
    if (it == c.log_speed.end() || values.empty() || it->second.empty()) continue;
    lb.push_back(&values);
    lc.push_back(&it->second);
  }
  row.n_prompts = static_cast<int64_t>(lb.size());
  if (lb.empty()) {
    row.note = "no prompt answered by both";
    return;
  }
  double sum_b = 0, sum_c = 0;
  for (size_t i = 0; i < lb.size(); ++i) {
    sum_b += MeanOf(*lb[i]);
    sum_c += MeanOf(*lc[i]);
  }
  const double n = static_cast<double>(lb.size());
  row.speed_baseline = std::exp(sum_b / n);
  row.speed_candidate = std::exp(sum_c / n);
  row.speed_ratio = std::exp((sum_c - sum_b) / n);
  if (o.bootstrap.n_resamples <= 0 || lb.size() < 2) {
    if (lb.size() < 2) row.note = "one prompt: no interval, speed not gated";
    return;
  }
  Stream rng{o.bootstrap.seed};
  std::vector<double> stats;
  stats.reserve(o.bootstrap.n_resamples);
  for (int64_t r = 0; r < o.bootstrap.n_resamples; ++r) {
    double diff = 0;
    for (size_t k = 0; k < lb.size(); ++k) {
      const size_t p = rng.Below(lb.size());
      const double vb = (*lb[p])[rng.Below(lb[p]->size())];
      const double vc = (*lc[p])[rng.Below(lc[p]->size())];
      diff += vc - vb;
    }
    stats.push_back(std::exp(diff / n));
  }
  std::sort(stats.begin(), stats.end());
  row.speed_ratio_ci.lo = SortedQuantile(stats, (1.0 - o.bootstrap.level) / 2);
  row.speed_ratio_ci.hi = SortedQuantile(stats, (1.0 + o.bootstrap.level) / 2);
  const bool gated = row.ar_baseline ? o.gate_absolute_speed : o.gate_speed;
  row.speed_regressed = gated && row.speed_ratio_ci.hi < 1.0 - o.speedup_threshold;
}

// One row: τ and speed of the candidate group against the baseline group.
CompareRow CompareGroups(const Group& b, const Group& c, const CompareOptions& options) {
  CompareRow row;
  row.label = b.label;
  row.candidate_label = c.label;
  row.method = b.method;
  row.ar_baseline = b.ar_baseline;
  row.temperature = b.temperature;
  row.baseline_repeats = b.repeats;
  row.candidate_repeats = c.repeats;
  if (b.steps > 0) row.tau_baseline = static_cast<double>(b.emitted) / b.steps;
  if (c.steps > 0) row.tau_candidate = static_cast<double>(c.emitted) / c.steps;
  if (options.gate_tau && b.temperature == 0 && std::isfinite(row.tau_baseline)) {
    row.tau_regressed = !(row.tau_candidate >= row.tau_baseline - options.tau_tolerance);
  }
  CompareSpeed(b, c, options, row);
  if (row.ar_baseline && options.gate_speed && !options.gate_absolute_speed && row.note.empty()) {
    row.note = "absolute tok/s: reported, not gated";
  }
  return row;
}

// The group of one case of `path`; fails naming the case ids the database holds.
Group CaseGroup(const std::string& path, int64_t case_id, const CompareOptions& options) {
  auto groups = LoadGroups(path, "key", options.scope, options.baseline, case_id);
  if (groups.empty()) {
    StoreOptions so;
    so.read_only = true;
    std::vector<std::string> ids;
    for (const auto& c : ResultsStore::Open(path, so)->ListCases()) {
      ids.push_back(std::to_string(c.case_id));
    }
    Fail("compare --cases: case ", case_id, " is not in results database '", path,
         "' (cases: ", ids.empty() ? std::string("none") : Join(ids, ", "), ")");
  }
  return std::move(groups.begin()->second);
}

}  // namespace

CompareResult CompareCases(const std::string& db_path, int64_t case_a, int64_t case_b,
                           const CompareOptions& options) {
  const Group a = CaseGroup(db_path, case_a, options);
  const Group b = CaseGroup(db_path, case_b, options);
  SPECBED_CHECK(a.ar_baseline == b.ar_baseline, "compare --cases: case ", case_a, " (", a.label,
                ") and case ", case_b, " (", b.label,
                ") must both be speculative (their speedups over AR are compared) or both AR "
                "(tok/s); a method's speedup over AR is in `specbed summary`");
  CompareResult result;
  result.case_path = db_path;
  result.baseline_path = StrCat(db_path, " case ", case_a);
  result.candidate_path = StrCat(db_path, " case ", case_b);
  result.options = options;
  result.options.match = "cases";
  result.gated = options.gate_tau || options.gate_speed;
  CompareOptions within = options;
  within.gate_absolute_speed = options.gate_speed;  // one database, one machine: AR tok/s compare
  result.rows.push_back(CompareGroups(a, b, within));
  result.regressed = result.rows[0].tau_regressed || result.rows[0].speed_regressed;
  result.case_ids = {case_a, case_b};
  result.case_methods = {CompareMethodLabel(a.record), CompareMethodLabel(b.record)};
  result.case_workloads = {WorkloadLabel(a.record), WorkloadLabel(b.record)};
  return result;
}

CompareResult CompareDatabases(const std::string& baseline_path, const std::string& candidate_path,
                               const CompareOptions& options) {
  SPECBED_CHECK(options.match == "key" || options.match == "workload",
                "compare: --match must be 'key' or 'workload', got '", options.match, "'");
  SPECBED_CHECK(
      options.tau_tolerance >= 0 && options.speedup_threshold >= 0 && options.speedup_threshold < 1,
      "compare: need --tau-tolerance >= 0 and 0 <= --speedup-threshold < 1");
  CompareResult result;
  result.baseline_path = baseline_path;
  result.candidate_path = candidate_path;
  result.options = options;
  const auto base = LoadGroups(baseline_path, options.match, options.scope, options.baseline);
  const auto cand = LoadGroups(candidate_path, options.match, options.scope, options.baseline);
  SPECBED_CHECK(!base.empty(), "compare: baseline results database '", baseline_path,
                "' holds no cases: nothing to compare against");
  SPECBED_CHECK(!cand.empty(), "compare: candidate results database '", candidate_path,
                "' holds no cases: nothing to compare");
  for (const auto& [key, b] : base) {
    auto it = cand.find(key);
    if (it == cand.end()) {
      result.unmatched_baseline.push_back(b.label);
      continue;
    }
    CompareRow row = CompareGroups(b, it->second, options);
    result.regressed = result.regressed || row.tau_regressed || row.speed_regressed;
    result.rows.push_back(std::move(row));
  }
  std::vector<const Group*> cand_unmatched;
  for (const auto& [key, c] : cand) {
    if (!base.count(key)) {
      result.unmatched_candidate.push_back(c.label);
      cand_unmatched.push_back(&c);
    }
  }
  // For each unmatched baseline case: the unmatched candidate case of the same method with the
  // fewest differing settings, and those settings.
  for (const auto& [key, b] : base) {
    if (cand.count(key)) continue;
    const Group* best = nullptr;
    std::vector<std::string> best_diffs;
    for (const Group* c : cand_unmatched) {
      if (c->method != b.method) continue;
      std::vector<std::string> d = SettingDiffs(b.record, c->record);
      if (best == nullptr || d.size() < best_diffs.size()) best = c, best_diffs = std::move(d);
    }
    result.unmatched_baseline_diffs.push_back(
        best == nullptr ? std::string("no unmatched candidate case of method ") + b.method
                        : "closest candidate case " + best->label + " differs in: " +
                              (best_diffs.empty() ? std::string("(no setting: only the case key)")
                                                  : Join(best_diffs, ", ")));
  }
  if (!result.unmatched_baseline.empty()) result.regressed = true;
  std::sort(result.rows.begin(), result.rows.end(), [](const CompareRow& x, const CompareRow& y) {
    return std::make_pair(x.temperature, x.label) < std::make_pair(y.temperature, y.label);
  });
  return result;
}

namespace {

// `text` broken at ", " / "," / " " boundaries into lines of at most `width` columns, the first
// starting with `first`, the others with `indent` (a word longer than a line stays whole).
std::string Wrapped(const std::string& first, const std::string& text, const std::string& indent,
                    size_t width = 120) {
  std::string out = first;
  size_t column = first.size();
  size_t i = 0;
  while (i < text.size()) {
    size_t end = text.find_first_of(", ", i);
    end = end == std::string::npos ? text.size() : end + 1;
    const std::string piece = text.substr(i, end - i);
    if (column + piece.size() > width && column > indent.size() && column > first.size()) {
      while (!out.empty() && out.back() == ' ') out.pop_back();
      out += "\n" + indent;
      column = indent.size();
    }
    out += piece;
    column += piece.size();
    i = end;
  }
  return out + "\n";
}

// B against A within one database (--cases): the two cases named on their own lines, then τ and
// speed side by side and B/A with its CI read as faster / slower / tied; lines <= 120 columns.
std::string FormatCaseComparison(const CompareResult& r) {
  const CompareRow& x = r.rows[0];
  const bool ar = x.ar_baseline;
  std::ostringstream out;
  out << "specbed compare: " << r.case_path << ", case " << r.case_ids[1] << " (B) against case "
      << r.case_ids[0] << " (A)" << (r.gated ? ", gated as a regression check\n" : "\n");
  for (int i = 0; i < 2; ++i) {
    out << Wrapped(StrCat("  ", i == 0 ? "A" : "B", " = case ", r.case_ids[i], ": "),
                   r.case_methods[i], "      ");
    if (i == 0 || r.case_workloads[1] != r.case_workloads[0]) {
      out << "      on " << r.case_workloads[i] << "\n";
    }
  }
  const std::string unit = ar ? " tok/s" : "x";
  const int digits = ar ? 1 : 3;
  out << "\n       τ        " << (ar ? "decode tok/s" : "speedup over AR") << "\n";
  out << "  A    " << Fixed(x.tau_baseline, 3) << "    " << Fixed(x.speed_baseline, digits) << unit
      << "\n";
  out << "  B    " << Fixed(x.tau_candidate, 3) << "    " << Fixed(x.speed_candidate, digits)
      << unit << "\n";
  std::string ratio = Fixed(x.speed_ratio, 3);
  std::string reading = "no interval (under 2 prompts)";
  if (std::isfinite(x.speed_ratio_ci.lo)) {
    ratio += " [" + Fixed(x.speed_ratio_ci.lo, 3) + ", " + Fixed(x.speed_ratio_ci.hi, 3) + "]";
    reading = x.speed_ratio_ci.lo > 1.0   ? "B faster"
              : x.speed_ratio_ci.hi < 1.0 ? "B slower"
                                          : "tied (the interval holds 1)";
  }
  const double delta_tau = x.tau_candidate - x.tau_baseline;
  out << "  B/A  "
      << (std::isfinite(delta_tau) ? (delta_tau >= 0 ? "+" : "") + Fixed(delta_tau, 3)
                                   : std::string(kNone))
      << "   " << ratio << "  " << reading << ", " << x.n_prompts << " prompts\n";
  if (!x.note.empty()) out << "  note: " << x.note << "\n";
  out << "\n"
      << Wrapped("",
                 StrCat("τ = acceptance length (τ, Spec-Bench #MAT): tokens per verify step; ",
                        ar ? "tok/s" : "speedup", " = geometric mean over prompts (",
                        SpeedupScopeName(r.options.scope),
                        " scope, as specbed summary); B/A [95% CI] = paired bootstrap over "
                        "prompts and repeats."),
                 "");
  if (r.gated) {
    out << (r.regressed ? "verdict: REGRESSION (B against A)\n" : "verdict: no regression\n");
  } else {
    out << "A report, not a gate (exit 0); --gate gates it like two databases.\n";
  }
  return out.str();
}

}  // namespace

std::string FormatCompareTable(const CompareResult& r) {
  if (r.options.match == "cases") return FormatCaseComparison(r);
  std::ostringstream out;
  out << "specbed compare: baseline " << r.baseline_path << ", candidate " << r.candidate_path
      << " (match by " << r.options.match << ")\n";
  std::vector<std::vector<std::string>> rows = {{"case", "τ base", "τ cand", "Δτ", "speed base",
                                                 "speed cand", "ratio [95% CI]", "n", "verdict"}};
  for (const CompareRow& x : r.rows) {
    std::string verdict = "ok";
    if (x.tau_regressed) verdict = "REGRESSED (τ)";
    if (x.speed_regressed) verdict = x.tau_regressed ? "REGRESSED (τ, speed)" : "REGRESSED (speed)";
    if (!x.note.empty()) verdict += " — " + x.note;
    std::string ratio = Fixed(x.speed_ratio, 3);
    if (std::isfinite(x.speed_ratio_ci.lo)) {
      ratio += " [" + Fixed(x.speed_ratio_ci.lo, 3) + ", " + Fixed(x.speed_ratio_ci.hi, 3) + "]";
    }
    const bool ar = x.ar_baseline;
    // With --match workload the two sides may differ in knobs: show both.
    const std::string label = x.candidate_label.empty() || x.candidate_label == x.label
                                  ? x.label
                                  : x.label + " | candidate: " + x.candidate_label;
    rows.push_back({label, Fixed(x.tau_baseline, 3), Fixed(x.tau_candidate, 3),
                    std::isfinite(x.tau_baseline) && std::isfinite(x.tau_candidate)
                        ? Fixed(x.tau_candidate - x.tau_baseline, 3)
                        : kNone,
                    Fixed(x.speed_baseline, ar ? 0 : 3) + (ar ? " tok/s" : "x"),
                    Fixed(x.speed_candidate, ar ? 0 : 3) + (ar ? " tok/s" : "x"), ratio,
                    std::to_string(x.n_prompts), verdict});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  auto display = [](const std::string& s) {  // UTF-8 code points, for alignment
    size_t n = 0;
    for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
    return n;
  };
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], display(row[i]));
  }
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      out << row[i];
      if (i + 1 < row.size()) out << std::string(width[i] - display(row[i]) + 2, ' ');
    }
    out << "\n";
  }
  for (size_t i = 0; i < r.unmatched_baseline.size(); ++i) {
    out << "REGRESSED: baseline case without a match in the candidate: " << r.unmatched_baseline[i]
        << " (configuration changed? update the baseline explicitly)\n";
    if (i < r.unmatched_baseline_diffs.size()) {
      out << "  " << r.unmatched_baseline_diffs[i] << "\n";
    }
  }
  for (const std::string& l : r.unmatched_candidate) {
    out << "note: candidate case not in the baseline: " << l << "\n";
  }
  out << "\nτ is gated at T = 0 (deterministic; tolerance " << General(r.options.tau_tolerance)
      << "); speed = speedup vs the database's own AR (AR rows: tok/s), "
      << SpeedupScopeName(r.options.scope)
      << " scope (the speedup definition of specbed summary), ratio = candidate /"
         " baseline geometric mean over prompts, [95% CI] = paired bootstrap over prompts and "
         "repeats; gated when the whole interval is below "
      << General(1.0 - r.options.speedup_threshold) << ".\n"
      << (r.regressed ? "verdict: REGRESSION\n" : "verdict: no regression\n");
  return out.str();
}

std::string CompareJson(const CompareResult& r) {
  auto num = [](double v) { return std::isfinite(v) ? json(v) : json(nullptr); };
  json j;
  j["baseline"] = r.baseline_path;
  j["candidate"] = r.candidate_path;
  j["match"] = r.options.match;
  j["tau_tolerance"] = r.options.tau_tolerance;
  j["speedup_threshold"] = r.options.speedup_threshold;
  j["regressed"] = r.regressed;
  j["rows"] = json::array();
  for (const CompareRow& x : r.rows) {
    j["rows"].push_back({{"case", x.label},
                         {"candidate_case", x.candidate_label},
                         {"method", x.method},
                         {"temperature", x.temperature},
                         {"n_prompts", x.n_prompts},
                         {"baseline_repeats", x.baseline_repeats},
                         {"candidate_repeats", x.candidate_repeats},
                         {"tau_baseline", num(x.tau_baseline)},
                         {"tau_candidate", num(x.tau_candidate)},
                         {"speed_baseline", num(x.speed_baseline)},
                         {"speed_candidate", num(x.speed_candidate)},
                         {"speed_ratio", num(x.speed_ratio)},
                         {"speed_ratio_ci", {num(x.speed_ratio_ci.lo), num(x.speed_ratio_ci.hi)}},
                         {"tau_regressed", x.tau_regressed},
                         {"speed_regressed", x.speed_regressed},
                         {"note", x.note}});
  }
  j["unmatched_baseline"] = r.unmatched_baseline;
  j["unmatched_baseline_diffs"] = r.unmatched_baseline_diffs;
  j["unmatched_candidate"] = r.unmatched_candidate;
  return j.dump(2) + "\n";
}

}  // namespace specbed
