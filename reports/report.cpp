// `specbed report`: loads a results database, computes per-case metrics (metrics/metrics.h),
// builds the tables (constant columns hidden, llama-bench style) and writes report.md, index.html,
// tables.tex and the gnuplot plots into the report directory (see report.h, reports/README.md).
// WriteReport runs named steps: LoadReferences, PrepareOutputDir, BuildSections (tables, notes,
// plot scripts), RenderPlots (plots.gp, gnuplot), BuildDocument (the one ReportDocument), then
// one writer per format walks it (reports/report_writers.h).
// Checked by: tests/reports/report_test.cpp, tests/reports/paper_report_test.cpp and
// tests/reports/headline_test.cpp.
#include "reports/report.h"
#include "reports/format.h"

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

std::string NowUtc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

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

// Case labels for plots and tables: the report-wide short labels (ShortCaseLabels).
std::vector<std::string> CaseLabels(const ReportGroup& group) {
  std::vector<std::string> labels;
  for (const CaseReport& c : group.cases) labels.push_back(c.label);
  return labels;
}

bool IsPng(const std::string& path) {
  static const unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::ifstream in(path, std::ios::binary);
  unsigned char head[8] = {};
  if (!in.read(reinterpret_cast<char*>(head), 8)) return false;
  return std::equal(head, head + 8, kSignature);
}

void WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SPECBED_CHECK(out.good(), "cannot write report file '", path, "'");
  out << text;
  out.close();
  SPECBED_CHECK(out.good(), "writing report file '", path, "' failed (disk full?)");
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

// Abbreviation of a knob name in a short label (ShortCaseLabels).
std::string KnobAbbreviation(const std::string& key) {
  static const std::map<std::string, std::string> kKnown = {
      {"depth", "d"},       {"top_k", "k"},  {"total_tokens", "n"}, {"budget", "b"},
      {"block_size", "bs"}, {"gamma", "g"},  {"width", "w"},        {"radius", "r"},
      {"blocks", "blk"},    {"branch", "br"}};
  const auto it = kKnown.find(key);
  if (it != kKnown.end()) return it->second;
  std::string out;
  bool start = true;
  for (char c : key) {
    if (c == '_' || c == '-') {
      start = true;
    } else if (start) {
      out += c;
      start = false;
    }
  }
  return out.empty() ? key : out;
}

// One knob as a label token: "d7", "greedy" / "no-greedy" for booleans, "drafter=stem" for
// strings.
std::string KnobToken(const std::string& key, const nlohmann::json& v) {
  if (v.is_boolean()) return v.get<bool>() ? key : "no-" + key;  // full name: flags are rare
  const std::string a = KnobAbbreviation(key);
  if (v.is_number_integer()) return a + std::to_string(v.get<int64_t>());
  if (v.is_number()) return a + General(v.get<double>());
  if (v.is_string()) {
    std::string text = v.get<std::string>();
    const fs::path path(text);
    if (text.find('/') != std::string::npos && !path.filename().empty()) {
      text = path.filename().string();
    }
    return a + "=" + (text.empty() ? "\"\"" : text);
  }
  std::string dumped = v.dump();
  std::replace(dumped.begin(), dumped.end(), '"', '\'');
  return a + "=" + dumped;
}

}  // namespace

bool ReportGroup::has_steps() const {
  for (const auto& c : cases) {
    if (c.metrics.n_steps > 0) return true;
  }
  return false;
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

// Every case's knobs as a JSON object (empty when none or unparsable).
std::vector<nlohmann::json> KnobObjects(const std::vector<const ResultsStore::CaseRow*>& cases) {
  std::vector<nlohmann::json> knobs;
  for (const auto* c : cases) {
    nlohmann::json j = nlohmann::json::parse(c->record.method_knobs_json, nullptr, false);
    knobs.push_back(j.is_object() ? j : nlohmann::json::object());
  }
  return knobs;
}

// Method -> knob keys whose value differs among the cases of that method (a missing key counts
// as null).
std::map<std::string, std::set<std::string>> VaryingKnobKeys(
    const std::vector<const ResultsStore::CaseRow*>& cases,
    const std::vector<nlohmann::json>& knobs) {
  std::map<std::string, std::map<std::string, std::set<std::string>>> values;
  for (size_t i = 0; i < cases.size(); ++i) {
    for (auto it = knobs[i].begin(); it != knobs[i].end(); ++it) {
      values[cases[i]->record.method][it.key()];
    }
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    for (auto& [key, seen] : values[cases[i]->record.method]) {
      seen.insert(knobs[i].contains(key) ? knobs[i][key].dump() : "null");
    }
  }
  std::map<std::string, std::set<std::string>> varying;
  for (auto& [m, keys] : values) {
    for (auto& [key, seen] : keys) {
      if (seen.size() > 1) varying[m].insert(key);
    }
  }
  return varying;
}

}  // namespace

// Knobs no case of the method changes are shown in full up to this length ("k=4"), else "…".
constexpr size_t kShortKnobsChars = 24;

std::vector<std::string> DifferingKnobs(const std::vector<const ResultsStore::CaseRow*>& cases) {
  const std::vector<nlohmann::json> knobs = KnobObjects(cases);
  auto varying = VaryingKnobKeys(cases, knobs);
  std::vector<std::string> out;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<std::string> parts;
    for (const std::string& key : varying[cases[i]->record.method]) {
      const nlohmann::json& v = knobs[i].contains(key) ? knobs[i][key] : nlohmann::json();
      parts.push_back(key + "=" + (v.is_string() ? v.get<std::string>() : v.dump()));
    }
    if (parts.empty()) {  // no knob differs: all of them when short, else "…" (all on hover)
      for (auto it = knobs[i].begin(); it != knobs[i].end(); ++it) {
        parts.push_back(it.key() + "=" + (it->is_string() ? it->get<std::string>() : it->dump()));
      }
      const std::string all = Join(parts, ", ");
      out.push_back(knobs[i].empty() ? "none" : all.size() <= kShortKnobsChars ? all : "…");
      continue;
    }
    out.push_back(Join(parts, ", "));
  }
  return out;
}

std::vector<std::string> ShortCaseLabels(const std::vector<const ResultsStore::CaseRow*>& cases) {
  using Json = nlohmann::json;
  const std::vector<Json> knobs = KnobObjects(cases);
  // Knob keys whose value differs among the cases of one method.
  auto varying = VaryingKnobKeys(cases, knobs);
  // Other configuration fields that differ among all the cases.
  struct Field {
    const char* name;
    std::function<std::string(const CaseRecord&)> text;
  };
  const std::vector<Field> fields = {
      {"threads", [](const CaseRecord& r) { return StrCat("t", r.threads); }},
      {"dtype", [](const CaseRecord& r) { return r.dtype; }},
      {"batch", [](const CaseRecord& r) { return StrCat("batch", r.batch_size); }},
      {"seed", [](const CaseRecord& r) { return StrCat("seed", r.seed); }},
      {"top_p", [](const CaseRecord& r) { return "top_p" + General(r.top_p); }},
      {"top_k", [](const CaseRecord& r) { return StrCat("top_k", r.top_k); }},
      {"max new", [](const CaseRecord& r) { return StrCat("max", r.max_new_tokens); }},
      {"limit",
       [](const CaseRecord& r) {
         return r.prompt_limit < 0 ? std::string("all") : StrCat("limit", r.prompt_limit);
       }},
      {"categories",
       [](const CaseRecord& r) {
         return r.categories.empty() ? std::string("all") : r.categories;
       }},
      {"device", [](const CaseRecord& r) { return r.device; }},
      {"shard",  // the AR case a shard of a sweep ran for its own cases (sweep.h): "" otherwise
       [](const CaseRecord& r) {
         const nlohmann::json c = nlohmann::json::parse(r.config_json, nullptr, false);
         const bool sharded = c.is_object() && c.contains("shard") && c["shard"].is_string();
         return sharded ? "[shard " + c["shard"].get<std::string>() + "]" : std::string();
       }},
  };
  std::vector<bool> field_varies(fields.size(), false);
  for (size_t f = 0; f < fields.size(); ++f) {
    std::set<std::string> seen;
    for (const auto* c : cases) seen.insert(fields[f].text(c->record));
    field_varies[f] = seen.size() > 1;
  }
  std::vector<std::string> labels;
  for (size_t i = 0; i < cases.size(); ++i) {
    const CaseRecord& r = cases[i]->record;
    std::string label = r.method;
    for (const std::string& key : varying[r.method]) {
      if (knobs[i].contains(key) && !knobs[i][key].is_null()) {
        label += " " + KnobToken(key, knobs[i][key]);  // a missing knob is the method's default
      }
    }
    for (size_t f = 0; f < fields.size(); ++f) {
      const std::string text = field_varies[f] ? fields[f].text(r) : std::string();
      if (!text.empty()) label += " " + text;
    }
    labels.push_back(label);
  }
  std::map<std::tuple<std::string, std::string, std::string, double>, int> seen;
  auto key_of = [&](size_t i) {
    const CaseRecord& r = cases[i]->record;
    return std::make_tuple(labels[i], r.target, r.dataset, r.temperature);
  };
  for (size_t i = 0; i < cases.size(); ++i) seen[key_of(i)]++;
  std::vector<std::string> out = labels;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (seen[key_of(i)] > 1) out[i] += StrCat(" #", cases[i]->case_id);
  }
  return out;
}

ReportData LoadReportData(const std::string& db_path, SpeedupScope scope,
                          const BaselinePolicy& policy) {
  StoreOptions options;
  options.read_only = true;
  auto store = ResultsStore::Open(db_path, options);
  ReportData data;
  data.db_path = db_path;
  data.scope = scope;
  data.runs = store->ListRuns();

  const std::vector<ResultsStore::CaseRow> all_cases = store->ListCases();
  std::map<int64_t, BaselineMatch> baseline_of;  // case_id -> its AR baseline in all_cases
  for (size_t i = 0; i < all_cases.size(); ++i) {
    baseline_of[all_cases[i].case_id] = FindArBaseline(all_cases, i, policy);
  }
  std::map<std::pair<std::string, std::string>, size_t> group_index;
  for (auto row : all_cases) {
    CaseReport c;
    c.samples = store->LoadSamples(row.case_id);
    c.steps = store->LoadSteps(row.case_id);
    c.metrics = ComputeCaseMetrics(c.samples, c.steps);
    c.is_ar = IsArBaseline(row.record);
    c.row = std::move(row);
    const auto key = std::make_pair(c.row.record.target, c.row.record.dataset);
    auto it = group_index.find(key);
    if (it == group_index.end()) {
      it = group_index.emplace(key, data.groups.size()).first;
      data.groups.push_back({key.first, key.second, {}});
    }
    data.groups[it->second].cases.push_back(std::move(c));
  }
  for (ReportGroup& g : data.groups) {
    std::stable_sort(g.cases.begin(), g.cases.end(), [](const CaseReport& a, const CaseReport& b) {
      const CaseRecord& x = a.row.record;
      const CaseRecord& y = b.row.record;
      if (x.temperature != y.temperature) return x.temperature < y.temperature;
      if (a.is_ar != b.is_ar) return a.is_ar;
      if (x.method != y.method) return x.method < y.method;
      if (x.method_knobs_json != y.method_knobs_json) {
        return x.method_knobs_json < y.method_knobs_json;
      }
      return a.row.case_id < b.row.case_id;
    });
    for (CaseReport& c : g.cases) {
      const BaselineMatch match = baseline_of.at(c.row.case_id);
      if (match.refused_index >= 0) {
        c.refused_baseline_case_id = all_cases[match.refused_index].case_id;
      }
      if (!c.is_ar && match.index < 0 && !c.samples.empty() && c.samples[0].has_paired_ar()) {
        c.speedup =
            ComputeSpeedup({}, c.samples, {}, scope);  // paired AR runs only, no exact match
      }
      if (c.is_ar || match.index < 0) continue;
      // The baseline has the same target and dataset, so it is in this group.
      for (const CaseReport& base : g.cases) {
        if (base.row.case_id != all_cases[match.index].case_id) continue;
        c.baseline_case_id = base.row.case_id;
        c.baseline_same_run = match.same_run;
        c.baseline_same_machine = match.same_machine;
        c.baseline_machine = base.row.machine;
        c.speedup = ComputeSpeedup(base.samples, c.samples, {}, scope);
        c.exact_match = ComputeExactMatch(base.samples, c.samples);
        break;
      }
    }
  }
  for (int64_t run_id : store->ListRunIds()) {
    for (auto& b : store->LoadBench(run_id)) data.bench.push_back({run_id, std::move(b)});
  }
  data.verify_curve = store->LoadBenchVerify();
  // Labels and plot styles over every case of the report.
  std::vector<const ResultsStore::CaseRow*> rows;
  std::vector<CaseReport*> reports;
  for (ReportGroup& g : data.groups) {
    for (CaseReport& c : g.cases) {
      rows.push_back(&c.row);
      reports.push_back(&c);
    }
  }
  const std::vector<std::string> labels = ShortCaseLabels(rows);
  std::set<std::string> methods;
  for (const CaseReport* c : reports) methods.insert(c->row.record.method);
  std::map<std::string, std::vector<std::string>> settings;  // method -> labels, first seen first
  for (size_t i = 0; i < reports.size(); ++i) {
    CaseReport& c = *reports[i];
    c.label = labels[i];
    c.method_index =
        static_cast<int>(std::distance(methods.begin(), methods.find(c.row.record.method)));
    auto& known = settings[c.row.record.method];
    auto it = std::find(known.begin(), known.end(), c.label);
    if (it == known.end()) it = known.insert(known.end(), c.label);
    c.setting_index = static_cast<int>(it - known.begin());
  }
  return data;
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

std::vector<HeadlineTable> BuildHeadlineTables(const ReportData& data) {
  std::vector<HeadlineTable> out;
  std::vector<std::pair<std::string, double>> keys;
  std::map<std::pair<std::string, double>,
           std::vector<std::pair<const ReportGroup*, const CaseReport*>>>
      cases;
  for (const ReportGroup& g : data.groups) {
    for (const CaseReport& c : g.cases) {
      if (c.is_ar) continue;
      const auto key = std::make_pair(g.target, c.row.record.temperature);
      if (!cases.count(key)) keys.push_back(key);
      cases[key].push_back({&g, &c});
    }
  }
  std::stable_sort(keys.begin(), keys.end());
  for (const auto& key : keys) {
    auto& list = cases[key];
    std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
      const double x = a.second->speedup.geomean, y = b.second->speedup.geomean;
      if (std::isfinite(x) != std::isfinite(y)) return std::isfinite(x);
      return std::isfinite(x) && x > y;
    });
    HeadlineTable h;
    h.target = key.first;
    h.temperature = key.second;
    h.title = StrCat(key.first, " · T=", General(key.second));
    ReportTable& t = h.table;
    t.columns = {
        {"method", false, false}, {"dataset", false, true},     {"nodes/step", true, false},
        {"τ", true, false},       {"acc%", true, false},        {"speedup [95% CI]", true, false},
        {"T_D%", true, false},    {"exact match", true, false}, {"case", true, false}};
    bool no_curve = false;
    for (const auto& [g, c] : list) {
      const std::string spd = std::isfinite(c->speedup.geomean)
                                  ? Fixed(c->speedup.geomean, 2) + "× " +
                                        Interval2(c->speedup.geomean_ci, c->speedup.n_prompts)
                                  : std::string(kNone);
      t.rows.push_back(
          {IsSyntheticCase(c->row.record) ? c->label + " [" + kSyntheticMarker + "]" : c->label,
           g->dataset, Fixed(c->metrics.drafted_per_step, 1), Fixed(c->metrics.tau, 2),
           Fixed(100.0 * VllmCompatibleMetrics(c->metrics).acceptance_rate, 1), spd,
           Fixed(100.0 * c->metrics.draft_fraction, 1),
           ExactMatchCell(c->exact_match, c->row.record.temperature),
           std::to_string(c->row.case_id)});
      h.cases.push_back(c);
      if (!(c->speedup.geomean < 1.0)) continue;
      h.slow_notes.push_back(SlowCaseNote(data, *g, *c, &no_curve));
    }
    if (!h.slow_notes.empty()) {
      h.slow_explanation =
          "Speculation pays only when a step's τ tokens take less time than τ AR tokens (speedup "
          "≈ τ ÷ the step's cost in AR-token times). Below 1× the drafting plus the wider verify "
          "forward cost more than the tokens they save: the regime of a target whose forward is "
          "cheap next to that work (a small model on a CPU; see Cost regime).";
      if (no_curve) {
        h.slow_explanation +=
            StrCat(" The database has no verify-width curve of ", h.target,
                   ": `specbed bench --verify-widths` measures how a forward's cost grows with the "
                   "tokens it verifies.");
      }
    }
    t = HideConstantColumns(std::move(t));
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

namespace {

using Warn = std::function<void(const std::string&)>;

// The paper references named by "paper": {"reference": PATH} in the runs' and cases' configs.
std::vector<std::string> ConfigReferencePaths(const ReportData& data) {
  std::vector<std::string> named;
  for (const ReportRun& r : data.runs) {
    for (const auto& p : PaperReferencePaths(r.info.config_json)) named.push_back(p);
  }
  for (const ReportGroup& g : data.groups) {
    for (const CaseReport& c : g.cases) {
      for (const auto& p : PaperReferencePaths(c.row.record.config_json)) named.push_back(p);
    }
  }
  return named;
}

// Relative paths (a config run from the SpecBed tree keeps them as written): as given (from the
// working directory), else next to the database, else in the SpecBed home.
std::string ResolveReferencePath(const std::string& name, const std::string& db_dir) {
  std::error_code ec;
  if (fs::exists(name, ec) || !fs::path(name).is_relative()) return name;
  for (const std::string& base : {db_dir, SpecBedHome()}) {
    if (base.empty() || !fs::exists(fs::path(base) / name, ec)) continue;
    return (fs::path(base) / name).string();
  }
  return name;
}

// Step 1: the paper references. Given ones must load (else this throws); ones named in a config
// that cannot be loaded are appended to *warnings.
std::vector<PaperReference> LoadReferences(const ReportData& data,
                                           const std::vector<std::string>& given,
                                           std::vector<std::string>* warnings) {
  std::vector<PaperReference> references;
  std::set<std::string> seen;
  for (const std::string& path : given) {
    if (seen.insert(path).second) references.push_back(LoadPaperReference(path));
  }
  const std::string db_dir = fs::path(data.db_path).parent_path().string();
  for (const std::string& name : ConfigReferencePaths(data)) {
    const std::string path = ResolveReferencePath(name, db_dir);
    if (!seen.insert(path).second) continue;
    try {
      references.push_back(LoadPaperReference(path));
    } catch (const Error& e) {
      warnings->push_back(
          StrCat("paper reference '", name, "' named in a config could not be loaded: ", e.what()));
    }
  }
  return references;
}

// Step 2: the report directory, created (with parents) when missing.
void PrepareOutputDir(const std::string& out_dir) {
  SPECBED_CHECK(!out_dir.empty(), "report directory is empty");
  std::error_code ec;
  if (fs::exists(out_dir, ec)) {
    SPECBED_CHECK(fs::is_directory(out_dir, ec), "cannot create report directory '", out_dir,
                  "': a file with that name exists");
  } else {
    fs::create_directories(out_dir, ec);
    SPECBED_CHECK(!ec, "cannot create report directory '", out_dir, "': ", ec.message());
  }
}

// The details of one (target, dataset) group (or the bench): its table, plots and notes.
struct GroupSection {
  std::string heading;
  ReportTable table;
  std::vector<Plot> plots;
  std::vector<std::string> notes;
};

// What the report shows, before its plots are rendered (BuildSections).
struct ReportSections {
  std::vector<PaperTable> paper_tables;
  std::vector<StreamTable> stream_tables;
  std::string stream_intro;
  std::vector<PaperComparison> comparisons;
  std::string synthetic_banner;  // "" when no case is synthetic
  std::vector<std::string> cost_notes;
  std::vector<GroupSection> groups;  // one per data.groups entry
  std::vector<Plot> stream_plots;
  std::vector<HeadlineTable> headlines;
  std::vector<Plot> headline_plots;  // one per headline; empty name: no chart
  GroupSection bench;
  std::vector<std::string> conventions;
};

// Notes on the cases of `group` whose AR baseline is from another run or missing.
std::vector<std::string> BaselineNotes(const ReportGroup& group) {
  std::vector<std::string> notes;
  for (const CaseReport& c : group.cases) {
    if (c.is_ar) continue;
    if (c.baseline_case_id >= 0 && !c.baseline_same_run) {
      notes.push_back(
          StrCat("case ", c.row.case_id, " (", c.row.record.method, ", run ", c.row.run_id,
                 ") is compared with AR case ", c.baseline_case_id, " of another run",
                 c.baseline_same_machine ? " on the same machine"
                                         : StrCat(" on another machine (", c.baseline_machine, ")"),
                 " (none with the same workload in its run)."));
    }
    if (c.baseline_case_id < 0 && c.refused_baseline_case_id >= 0) {
      notes.push_back(
          StrCat("case ", c.row.case_id, " (", c.row.record.method,
                 "): its only AR case with the same workload (case ", c.refused_baseline_case_id,
                 ") ran on another machine, used only with "
                 "--cross-machine-baseline: no speedup",
                 c.speedup.n_matched > 0 ? " but the paired one" : "", ", no exact match."));
    } else if (c.baseline_case_id < 0 && c.speedup.n_matched == 0) {
      notes.push_back(StrCat("case ", c.row.case_id, " (", c.row.record.method,
                             ") has no AR case with the same workload: no speedup."));
    } else if (c.speedup.n_matched == 0) {
      notes.push_back(StrCat("case ", c.row.case_id, " (", c.row.record.method,
                             ") shares no answered prompt with its AR case ", c.baseline_case_id,
                             ": no speedup."));
    }
  }
  return notes;
}

// The details section of group number `index` (1-based): case table, plots and figures, notes.
GroupSection BuildGroupSection(const ReportGroup& group, int index) {
  GroupSection s;
  s.heading = group.target + " / " + group.dataset;
  s.table = BuildCaseTable(group);
  const std::vector<std::string> labels = CaseLabels(group);
  std::vector<std::string> skipped;
  s.plots = BuildGroupPlots(group, labels, index, &skipped);
  for (Plot& p : BuildGroupFigures(group, labels, index, &skipped)) s.plots.push_back(std::move(p));
  s.notes = BaselineNotes(group);
  if (!group.has_steps()) {
    s.notes.push_back(
        "No speculative steps recorded: speedup-vs-T_D, τ, per-position acceptance, budget, "
        "phase-time and τ-vs-temperature figures skipped.");
  } else {
    for (auto& n : skipped) s.notes.push_back(std::move(n));
  }
  return s;
}

// The banner over a report with synthetic-acceptance cases; "" without them.
std::string SyntheticBanner(const ReportData& data) {
  std::vector<std::string> synthetic_cases;
  for (const ReportGroup& g : data.groups) {
    for (const CaseReport& c : g.cases) {
      if (IsSyntheticCase(c.row.record)) {
        synthetic_cases.push_back(StrCat(c.row.case_id, " (", c.row.record.method, ")"));
      }
    }
  }
  if (synthetic_cases.empty()) return "";
  return StrCat(kSyntheticMarker, ": case", synthetic_cases.size() > 1 ? "s " : " ",
                Join(synthetic_cases, ", "),
                " used synthetic acceptance (config key \"synthetic_acceptance\"); their "
                "speedup, τ and acceptance numbers are not real measurements.");
}

// The targets' cost regime (cost twins, AR's memory-roofline fraction).
std::vector<std::string> CostNotes(const ReportData& data) {
  std::vector<CostCase> cost_cases;
  for (const ReportGroup& g : data.groups) {
    for (const CaseReport& c : g.cases) {
      cost_cases.push_back({c.row.case_id, &c.row.record, c.metrics.decode_tokens_per_s});
    }
  }
  return CostRegimeNotes(cost_cases);
}

// Step 3: every table, note and plot script of the report.
ReportSections BuildSections(const ReportData& data, const std::vector<PaperReference>& references,
                             const ReportOptions& options) {
  ReportSections s;
  s.paper_tables = BuildPaperTables(data);
  s.stream_tables = BuildStreamTables(data, options.stream_window);
  s.stream_intro = StrCat(
      "Cases that trained online (OSD, the SpecBlock bandit) next to the others of the same "
      "target, dataset and temperature, per window of ",
      options.stream_window,
      " consecutive answers in the order they ran: τ = tokens per verify step, Spd = speedup vs. "
      "AR (geometric mean over the window's answers), upd s = online-update seconds charged to "
      "the window's answers (already inside their decode time).");
  for (const PaperReference& ref : references) {
    s.comparisons.push_back(BuildPaperComparison(data, ref));
  }
  s.synthetic_banner = SyntheticBanner(data);
  s.cost_notes = CostNotes(data);
  for (size_t g = 0; g < data.groups.size(); ++g) {
    s.groups.push_back(BuildGroupSection(data.groups[g], static_cast<int>(g + 1)));
  }
  for (size_t i = 0; i < s.stream_tables.size(); ++i) {
    // A line needs two windows (one window: the table says it all; gnuplot warns on [1:1]).
    if (!s.stream_tables[i].tau.empty() && s.stream_tables[i].tau[0].size() >= 2)
      s.stream_plots.push_back(BuildStreamPlot(s.stream_tables[i], static_cast<int>(i + 1)));
  }
  s.headlines = BuildHeadlineTables(data);
  for (size_t i = 0; i < s.headlines.size(); ++i) {
    s.headline_plots.push_back(BuildHeadlinePlot(s.headlines[i], static_cast<int>(i + 1)));
  }
  s.bench.heading = "Bench: AR decode speed (specbed bench)";
  if (!data.bench.empty()) {
    s.bench.table = BuildBenchTable(data.bench);
    s.bench.plots = BuildBenchPlots(data.bench);
  }
  s.conventions = ConventionsFor(options.scope);
  return s;
}

// Every plot in the order of plots.gp: headline charts, groups, bench, stream.
std::vector<const Plot*> AllPlots(const ReportSections& s) {
  std::vector<const Plot*> all;
  for (const auto& p : s.headline_plots) {
    if (!p.name.empty()) all.push_back(&p);
  }
  for (const auto& g : s.groups) {
    for (const auto& p : g.plots) all.push_back(&p);
  }
  for (const auto& p : s.bench.plots) all.push_back(&p);
  for (const auto& p : s.stream_plots) all.push_back(&p);
  return all;
}

// Runs gnuplot (`program`, found) on `script` in `out`; returns the names of the plots whose PNG
// and SVG exist. Failures and gnuplot's own warnings are warnings.
std::set<std::string> RunPlots(const std::vector<const Plot*>& plots, const std::string& program,
                               const std::string& out, const std::string& script,
                               const Warn& warn) {
  std::error_code ec;
  for (const Plot* p : plots) {
    for (const char* ext : {".png", ".svg"}) fs::remove(out + "/" + p->name + ext, ec);
  }
  const std::string error = RunGnuplot(program, out, script);
  if (!error.empty()) warn("gnuplot failed, some plots may be missing: " + error);
  // gnuplot's own warnings (it exits 0 after them) are report warnings too.
  if (error.empty() && fs::exists(out + "/gnuplot.log", ec)) {
    for (const std::string& w : GnuplotWarnings(ReadFileToString(out + "/gnuplot.log"))) {
      warn(StrCat("gnuplot: ", w, " (see ", out, "/gnuplot.log)"));
    }
  }
  std::set<std::string> plotted;
  for (const Plot* p : plots) {
    const std::string png = out + "/" + p->name + ".png";
    if (IsPng(png) && fs::exists(out + "/" + p->name + ".svg", ec)) {
      plotted.insert(p->name);
    } else if (error.empty()) {
      warn(StrCat("gnuplot did not write a valid '", png, "' (see ", out, "/gnuplot.log)"));
    }
  }
  if (error.empty() && fs::exists(out + "/gnuplot.log", ec) &&
      fs::file_size(out + "/gnuplot.log", ec) == 0) {
    fs::remove(out + "/gnuplot.log", ec);
  }
  return plotted;
}

// Step 4: writes plots.gp and, when gnuplot is found, the images; returns the names of the plots
// that were drawn.
std::set<std::string> RenderPlots(const ReportSections& s, const std::string& out,
                                  const std::string& gnuplot, const Warn& warn) {
  const std::vector<const Plot*> plots = AllPlots(s);
  std::string script;
  for (const Plot* p : plots) script += "# " + p->title + "\n" + p->script;
  if (script.empty()) return {};
  WriteTextFile(out + "/plots.gp",
                "# gnuplot script of this report (regenerate the plots: cd into this directory "
                "and run `LC_ALL=C.UTF-8 gnuplot plots.gp`; UTF-8 text).\n" +
                    script);
  const std::string program = GnuplotProgram(gnuplot);
  const std::string found = FindExecutable(program);
  if (found.empty()) {
    warn(StrCat("gnuplot program '", program,
                "' not found: the report has tables but no plots (install gnuplot, e.g. Debian "
                "package gnuplot-nox, or set SPECBED_GNUPLOT to its path)"));
    return {};
  }
  return RunPlots(plots, found, out, script, warn);
}

// ---- The document (BuildDocument): sections in report order ----------------------------------

using Blocks = std::vector<ReportBlock>;

// The plots that were drawn, as figures.
void AddFigures(const std::vector<Plot>& plots, const std::set<std::string>& plotted,
                Blocks* blocks) {
  for (const Plot& p : plots) {
    if (plotted.count(p.name)) blocks->push_back(FigureBlock(p));
  }
}

void AddHeadline(const ReportSections& s, const std::set<std::string>& plotted, Blocks* blocks) {
  if (s.headlines.empty()) return;
  blocks->push_back(HeadingBlock("Headline", 2, "headline"));
  blocks->push_back(ParagraphBlock(
      "Per target and temperature, every speculative case, best speedup first: speedup = "
      "geometric mean over answers of method decode tok/s ÷ AR's, with its 95% bootstrap CI "
      "over prompts; τ = tokens per verify step; T_D% = drafting share of decode time; exact "
      "match = answers identical to AR's.",
      false,
      "Best speedup first. Speedup = geometric mean over answers of method ÷ AR decode tok/s "
      "[95% bootstrap CI over prompts]; τ = tokens per verify step; T_D% = drafting share of "
      "decode time; exact match = answers identical to AR's (Conventions at the end).",
      "constants"));
  for (size_t i = 0; i < s.headlines.size(); ++i) {
    const HeadlineTable& h = s.headlines[i];
    blocks->push_back(HeadingBlock(h.title, 3));
    ReportBlock chart = TableBlock(h.table);
    chart.kind = ReportBlock::Kind::kChartAndTable;
    const Plot& p = s.headline_plots[i];
    if (!p.name.empty() && plotted.count(p.name)) chart.figure = p;
    blocks->push_back(std::move(chart));
    if (h.slow_notes.empty()) continue;
    ReportBlock note = ListBlock(h.slow_notes, true);
    note.kind = ReportBlock::Kind::kNoteBox;
    note.title = "Why some speedups are below 1×:";
    note.text = h.slow_explanation;
    note.html_class = "slow-note";
    blocks->push_back(std::move(note));
  }
}

void AddPaperTables(const ReportSections& s, Blocks* blocks) {
  if (s.paper_tables.empty()) return;
  blocks->push_back(HeadingBlock("Results (paper layout)", 2));
  blocks->push_back(ParagraphBlock(
      "Spd = speedup vs. AR (geometric mean over answers of method decode tok/s ÷ AR decode "
      "tok/s, see Conventions), τ = tokens per verify step; also in `tables.tex` (LaTeX, "
      "booktabs).",
      false,
      "Spd = speedup vs. AR (geometric mean over answers of method decode tok/s ÷ AR decode "
      "tok/s, see Conventions), τ = tokens per verify step; also in <a "
      "href=\"tables.tex\">tables.tex</a> (LaTeX, booktabs)."));
  for (const PaperTable& pt : s.paper_tables) {
    blocks->push_back(HeadingBlock(pt.title, 3));
    blocks->push_back(TableBlock(pt.table, pt.title,
                                 "Speedup (Spd, geometric mean vs. AR) and mean accepted length "
                                 "(τ) per benchmark — " +
                                     pt.title));
    if (!pt.notes.empty()) blocks->push_back(ListBlock(pt.notes, true));
  }
}

void AddComparisons(const ReportSections& s, Blocks* blocks) {
  for (const PaperComparison& pc : s.comparisons) {
    blocks->push_back(HeadingBlock("Paper vs measured: " + pc.heading, 2));
    if (!pc.notes.empty()) blocks->push_back(ParagraphBlock(pc.notes, true));
    blocks->push_back(TableBlock(pc.table, "paper vs measured: " + pc.heading,
                                 "Paper vs measured — " + pc.heading));
    if (!pc.match_notes.empty()) blocks->push_back(ListBlock(pc.match_notes, true));
  }
}

void AddStream(const ReportSections& s, const std::set<std::string>& plotted, Blocks* blocks) {
  if (s.stream_tables.empty()) return;
  blocks->push_back(HeadingBlock("Adaptation over the stream", 2, "stream"));
  blocks->push_back(ParagraphBlock(s.stream_intro, true));
  for (const StreamTable& st : s.stream_tables) {
    blocks->push_back(HeadingBlock(st.title, 3));
    blocks->push_back(TableBlock(st.table, "adaptation over the stream: " + st.title,
                                 "Adaptation over the stream — " + st.title));
    blocks->push_back(ListBlock(st.case_notes, true));
  }
  AddFigures(s.stream_plots, plotted, blocks);
}

void AddDetails(const ReportSections& s, const std::set<std::string>& plotted, Blocks* blocks) {
  for (size_t i = 0; i < s.groups.size(); ++i) {
    const GroupSection& g = s.groups[i];
    blocks->push_back(HeadingBlock("Details: " + g.heading, 2, StrCat("details-", i + 1)));
    blocks->push_back(TableBlock(g.table));
    // Markdown keeps these notes as written (they name cases and methods).
    if (!g.notes.empty()) blocks->push_back(ListBlock(g.notes, false));
    AddFigures(g.plots, plotted, blocks);
  }
}

// A section collapsed in HTML (<details>): provenance and conventions.
ReportBlock Collapsible(const std::string& heading, const std::string& html_id,
                        const std::string& html_class, ReportBlock content) {
  ReportBlock b;
  b.kind = ReportBlock::Kind::kCollapsible;
  b.text = heading;
  b.html_id = html_id;
  b.html_class = html_class;
  b.children.push_back(std::move(content));
  return b;
}

// Step 5: the report as one document, in section order, for every writer.
ReportDocument BuildDocument(const ReportData& data, const ReportSections& s,
                             const std::set<std::string>& plotted,
                             const std::vector<std::string>& warnings) {
  ReportDocument doc;
  doc.db_path = data.db_path;
  doc.generated = NowUtc();
  doc.latex_no_tables = s.paper_tables.empty() && s.comparisons.empty();
  Blocks& blocks = doc.blocks;
  if (!s.synthetic_banner.empty()) {
    blocks.push_back(ParagraphBlock(s.synthetic_banner, true));
    blocks.back().kind = ReportBlock::Kind::kBanner;
  }
  for (const auto& w : warnings) {
    blocks.push_back(ParagraphBlock(w, true));
    blocks.back().kind = ReportBlock::Kind::kWarning;
  }
  if (s.groups.empty()) blocks.push_back(ParagraphBlock("No cases recorded.", false));
  AddHeadline(s, plotted, &blocks);
  if (!s.cost_notes.empty()) {
    blocks.push_back(HeadingBlock("Cost regime", 2, "cost-regime"));
    blocks.push_back(ListBlock(s.cost_notes, true));
  }
  AddPaperTables(s, &blocks);
  AddComparisons(s, &blocks);
  AddStream(s, plotted, &blocks);
  AddDetails(s, plotted, &blocks);
  if (!data.bench.empty()) {
    blocks.push_back(HeadingBlock(s.bench.heading, 2));
    blocks.push_back(TableBlock(s.bench.table));
    AddFigures(s.bench.plots, plotted, &blocks);
  }
  blocks.push_back(Collapsible("Provenance", "provenance", "provenance",
                               data.runs.empty() ? ParagraphBlock("No runs recorded.", false)
                                                 : TableBlock(RunsTable(data.runs))));
  blocks.push_back(Collapsible("Conventions", "conventions", "", ListBlock(s.conventions, false)));
  return doc;
}

}  // namespace

ReportResult WriteReport(const std::string& db_path, const std::string& out_dir,
                         const ReportOptions& options) {
  // Fails first when the database is bad, then when a given paper reference is.
  const ReportData data = LoadReportData(db_path, options.scope, options.baseline);
  std::vector<std::string> early_warnings;
  const std::vector<PaperReference> references =
      LoadReferences(data, options.paper_references, &early_warnings);
  PrepareOutputDir(out_dir);

  ReportResult result;
  const Warn warn = [&](const std::string& message) {
    result.warnings.push_back(message);
    if (options.print_warnings)
      std::fprintf(stderr, "specbed report: warning: %s\n", message.c_str());
  };
  for (const auto& w : early_warnings) warn(w);
  const ReportSections sections = BuildSections(data, references, options);
  for (const std::string& note : sections.cost_notes) {  // a target where speculation cannot pay
    if (note.rfind("WARNING: ", 0) == 0) warn(note.substr(9));
  }
  const std::set<std::string> plotted = RenderPlots(sections, out_dir, options.gnuplot, warn);
  const ReportDocument doc = BuildDocument(data, sections, plotted, result.warnings);

  // One writer per format over the same document.
  result.tables_tex = out_dir + "/tables.tex";
  WriteTextFile(result.tables_tex, LatexWriter().Write(doc));
  HtmlWriter html;
  const std::string page = html.Write(doc);
  result.images = html.images();
  result.report_md = out_dir + "/report.md";
  result.index_html = out_dir + "/index.html";
  WriteTextFile(result.report_md, MarkdownWriter().Write(doc));
  WriteTextFile(result.index_html, page);
  return result;
}

}  // namespace specbed
