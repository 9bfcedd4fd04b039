// The report's data (see report.h): LoadReportData reads a results database into groups of
// cases with their metrics and AR baselines, and the report-wide short case labels
// (ShortCaseLabels, DifferingKnobs). Checked by: tests/reports/report_test.cpp.
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

using report_format::General;

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

}  // namespace specbed
