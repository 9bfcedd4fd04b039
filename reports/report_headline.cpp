// The headline's companions (see report.h): every case against the leader of its headline table,
// paired over the answers both gave (CompareWithLeader: the tie rule), the tok/s of a speedup's own
// answers and of their AR side (PairedTokensPerS), the setup line of the report's first screen
// (SetupLine), the method settings table it links to (MethodSettingsTable) and the notes on cases
// whose online adaptation never ran or never acted (every step equal to its static method's) or
// whose knobs name another target's asset (CaseNotes).
// Checked by: tests/reports/headline_test.cpp.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/names.h"
#include "reports/format.h"
#include "reports/report.h"
#include "reports/summary.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;
using report_format::General;

// Per prompt: the sum of log(other's ratio / leader's ratio) over its shared turns, and their
// count (the bootstrap clusters of the paired ratio).
std::vector<LogCluster> SharedPromptLogs(const Speedup& leader, const Speedup& other) {
  std::map<std::pair<std::string, int32_t>, double> leader_log;
  for (const Speedup::Pair& p : leader.pairs)
    leader_log[{p.prompt_id, p.turn}] = std::log(p.ratio());
  std::vector<LogCluster> prompts;
  std::map<std::string, size_t> index_of;
  for (const Speedup::Pair& p : other.pairs) {
    const auto it = leader_log.find({p.prompt_id, p.turn});
    if (it == leader_log.end()) continue;
    const auto [at, inserted] = index_of.emplace(p.prompt_id, prompts.size());
    if (inserted) prompts.emplace_back();
    prompts[at->second].log_sum += std::log(p.ratio()) - it->second;
    ++prompts[at->second].n;
  }
  return prompts;
}

// The part of a cost twin's label before its details: "cost twin of stories260K".
std::string TwinLabel(const CaseRecord& r) {
  const nlohmann::json j = nlohmann::json::parse(r.config_json, nullptr, false);
  const nlohmann::json* label = nullptr;
  if (j.is_object() && j.contains("target_info") && j["target_info"].is_object() &&
      j["target_info"].contains("label") && j["target_info"]["label"].is_string()) {
    label = &j["target_info"]["label"];
  }
  if (label == nullptr) return "";
  const std::string text = label->get<std::string>();
  return text.substr(0, text.find(" ("));
}

// The distinct values of `field` over every case, in first-seen order, joined by ", ".
template <typename Field>
std::string Distinct(const ReportData& data, Field field) {
  std::vector<std::string> values;
  for (const ReportGroup& g : data.groups) {
    for (const CaseReport& c : g.cases) {
      const std::string v = field(c);
      if (!v.empty() && std::find(values.begin(), values.end(), v) == values.end()) {
        values.push_back(v);
      }
    }
  }
  return Join(values, ", ");
}

std::string TargetWithTwin(const CaseReport& c) {
  const std::string name = fs::path(c.row.record.target).filename().string();
  const std::string twin = TwinLabel(c.row.record);
  return twin.empty() ? name : StrCat(name, " (", twin, ")");
}

bool AllOnCpu(const ReportData& data) {
  bool any = false;
  for (const ReportGroup& g : data.groups) {
    for (const CaseReport& c : g.cases) {
      if (c.row.record.device.rfind("cpu", 0) != 0) return false;
      any = true;
    }
  }
  return any;
}

// Online adaptation: the OSD variants and the SpecBlock bandit (their updates are charged to
// StepRecord::t_adapt_us). The static method they adapt: the name before "+osd" / "+bandit"
// ("" for other methods).
std::string StaticMethodOf(const CaseRecord& r) {
  for (const char* suffix : {"+osd", "+bandit"}) {
    const size_t at = r.method.find(suffix);
    if (at != std::string::npos) return r.method.substr(0, at);
  }
  return "";
}

// Every verify step (prompt, turn, index) drafted and accepted the same counts in both cases.
bool SameSteps(const std::vector<StepRecord>& a, const std::vector<StepRecord>& b) {
  if (a.size() != b.size() || a.empty()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].prompt_id != b[i].prompt_id || a[i].turn != b[i].turn ||
        a[i].step_idx != b[i].step_idx || a[i].n_drafted != b[i].n_drafted ||
        a[i].n_accepted != b[i].n_accepted) {
      return false;
    }
  }
  return true;
}

// The note on an adapting case whose adaptation never ran (no adaptation time) or never acted
// (its steps equal its static method's); "" otherwise.
std::string AdaptationNote(const CaseReport& c, const ReportGroup& group, const std::string& who) {
  const CaseRecord& r = c.row.record;
  const std::string base = StaticMethodOf(r);
  if (base.empty() || c.steps.empty()) return "";
  bool ran = false;
  for (const StepRecord& st : c.steps) ran = ran || st.t_adapt_us > 0;
  if (!ran) {
    return StrCat(who,
                  ": its online adaptation never ran in this run (no verify step recorded "
                  "adaptation time), so it measured the static method.");
  }
  for (const CaseReport& other : group.cases) {
    const CaseRecord& o = other.row.record;
    if (o.method != base || o.temperature != r.temperature || o.seed != r.seed) continue;
    if (!SameSteps(c.steps, other.steps)) continue;
    return StrCat(who, ": its online adaptation ran but never acted: every one of its ",
                  c.steps.size(), " verify steps drafted and accepted exactly what ", base,
                  " (case ", other.row.case_id,
                  ") did on the same prompts, so its speed difference is the adaptation's cost.");
  }
  return "";
}

// The original model of a cost-twin target ("stories260K" of "cost twin of stories260K"); "" for
// other targets.
std::string TwinOriginal(const CaseRecord& r) {
  const std::string twin = TwinLabel(r);
  const std::string twin_of = "cost twin of ";
  return twin.rfind(twin_of, 0) == 0 ? twin.substr(twin_of.size()) : "";
}

// The original a cost twin's knob value names instead of the twin: a path component or name
// "X" or "X-..." for the twin's original X that is not "TARGET" or "TARGET-..."; "" when none
// (and for targets that are no cost twin: a drafter is another model by nature).
std::string OtherTargetOf(const std::string& value, const CaseRecord& r) {
  const std::string target = fs::path(r.target).filename().string();
  const std::string original = TwinOriginal(r);
  if (original.empty() || original == target) return "";
  for (const fs::path& part : fs::path(value)) {
    const std::string name = part.string();
    if (name == target || name.rfind(target + "-", 0) == 0) return "";
    if (name == original || name.rfind(original + "-", 0) == 0) return original;
  }
  return "";
}

// Every knob as "key=value" (strings unquoted), joined by ", " (the tokens a cell keeps whole).
std::string KnobList(const std::string& json) {
  const nlohmann::json knobs = nlohmann::json::parse(json, nullptr, false);
  if (!knobs.is_object()) return "";
  std::vector<std::string> parts;
  for (auto it = knobs.begin(); it != knobs.end(); ++it) {
    parts.push_back(it.key() + "=" + (it->is_string() ? it->get<std::string>() : it->dump()));
  }
  return Join(parts, ", ");
}

}  // namespace

LeaderComparison CompareWithLeader(const Speedup& leader, const Speedup& other,
                                   const BootstrapOptions& bootstrap) {
  const std::vector<LogCluster> prompts = SharedPromptLogs(leader, other);
  LeaderComparison out;
  out.n_prompts = static_cast<int64_t>(prompts.size());
  if (prompts.empty()) return out;
  double sum = 0;
  int64_t n = 0;
  for (const LogCluster& p : prompts) {
    sum += p.log_sum;
    n += p.n;
  }
  out.ratio = std::exp(sum / static_cast<double>(n));
  if (out.n_prompts >= kMinPromptsForInterval && bootstrap.n_resamples > 0) {
    out.ci = GeomeanClusterInterval(prompts, bootstrap);
  }
  return out;
}

PairedSpeeds PairedTokensPerS(const Speedup& s) {
  double method_tokens = 0, method_ms = 0, ar_tokens = 0, ar_ms = 0;
  for (const Speedup::Pair& p : s.pairs) {
    method_tokens += static_cast<double>(p.method_tokens);
    method_ms += p.method_ms;
    ar_tokens += static_cast<double>(p.ar_tokens);
    ar_ms += p.ar_ms;
  }
  PairedSpeeds out;
  if (method_ms > 0) out.method = 1000.0 * method_tokens / method_ms;
  if (ar_ms > 0) out.ar = 1000.0 * ar_tokens / ar_ms;
  return out;
}

std::string SetupLine(const ReportData& data) {
  int64_t prompts = 0;
  for (const ReportGroup& g : data.groups) {
    for (const CaseReport& c : g.cases) prompts = std::max(prompts, c.metrics.n_prompts);
  }
  if (data.groups.empty()) return "";
  auto threads = [](const CaseReport& c) {
    return StrCat(c.row.record.threads, c.row.record.threads == 1 ? " thread" : " threads");
  };
  std::string line = StrCat(
      "Setup: target ", Distinct(data, TargetWithTwin), " · device ",
      Distinct(data, [](const CaseReport& c) { return c.row.record.device; }), " · dtype ",
      Distinct(data, [](const CaseReport& c) { return c.row.record.dtype; }), " · ",
      Distinct(data, threads), " · ", prompts, " prompts × ",
      Distinct(data,
               [](const CaseReport& c) { return std::to_string(c.row.record.max_new_tokens); }),
      " new tokens · T = ",
      Distinct(data, [](const CaseReport& c) { return General(c.row.record.temperature); }));
  if (AllOnCpu(data)) {
    line +=
        " · every method at small, CPU-sized settings (shallower drafts and smaller trees "
        "than the papers'; each method's knobs: Method settings)";
  } else {
    line += " · each method's knobs: Method settings";
  }
  return line + ".";
}

ReportTable MethodSettingsTable(const ReportData& data) {
  ReportTable t;
  t.columns = {{"method", false, false}, {"knobs (as run)", false, false}, {"cases", false, false}};
  t.columns[1].whole_tokens = true;
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::string, std::vector<std::string>>> rows;
  for (const ReportGroup& g : data.groups) {
    for (const CaseReport& c : g.cases) {
      if (c.is_ar) continue;
      const std::string knobs = KnobList(c.row.record.method_knobs_json);
      auto [it, inserted] =
          rows.emplace(c.label, std::make_pair(knobs, std::vector<std::string>{}));
      if (inserted) order.push_back(c.label);
      it->second.second.push_back(std::to_string(c.row.case_id));
    }
  }
  for (const std::string& label : order) {
    const auto& [knobs, cases] = rows[label];
    t.rows.push_back({label, knobs.empty() ? "none" : knobs, Join(cases, ", ")});
  }
  return t;
}

std::vector<std::string> CaseNotes(const CaseReport& c, const ReportGroup& group) {
  std::vector<std::string> notes;
  const CaseRecord& r = c.row.record;
  const std::string who = StrCat(c.label, " (case ", c.row.case_id, ")");
  const std::string adaptation = AdaptationNote(c, group, who);
  if (!adaptation.empty()) notes.push_back(adaptation);
  const nlohmann::json knobs = nlohmann::json::parse(r.method_knobs_json, nullptr, false);
  if (!knobs.is_object()) return notes;
  for (auto it = knobs.begin(); it != knobs.end(); ++it) {
    if (!it->is_string()) continue;
    const std::string other = OtherTargetOf(it->get<std::string>(), r);
    if (other.empty()) continue;
    notes.push_back(StrCat(who, ": knob ", it.key(), " = ", it->get<std::string>(),
                           " is an asset named for ", other, " (the model this cost twin copies), ",
                           "not for the case's target ", fs::path(r.target).filename().string(),
                           "."));
  }
  return notes;
}

}  // namespace specbed
