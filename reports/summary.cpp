// `specbed summary`: per-case metric rows of a results database (see summary.h), rendered as an
// aligned terminal table or as JSON.
// Checked by: tests/reports/summary_test.cpp and tests/cli/summary_cli_test.cpp.
#include "reports/summary.h"
#include "reports/format.h"
#include "reports/record_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/names.h"
#include "metrics/vllm_metrics.h"
#include "reports/report.h"
#include "reports/serve_report.h"

namespace specbed {
namespace {

using Json = nlohmann::json;

using report_format::kNone;
constexpr size_t kPositionsShown = 4;  // r_1..r_4 / alpha_1..alpha_4 in the table

using report_format::Fixed;
using report_format::General;

// What the runner recorded about a case's target and machine (config_json "target_info" and
// "machine"; absent in older databases).
struct TargetCost {
  std::string label;          // cost-twin label, "" for a real model
  double weight_bytes = 0;    // weight bytes an AR decode step reads
  double bandwidth_gb_s = 0;  // measured memory bandwidth at the case's threads / on its device
  std::string bandwidth_kind = "STREAM triad";  // or "device copy" (a GPU case)
};

TargetCost TargetCostOf(const CaseRecord& record) {
  TargetCost cost;
  const Json j = Json::parse(record.config_json, nullptr, false);
  if (!j.is_object()) return cost;
  if (j.contains("target_info") && j["target_info"].is_object()) {
    const Json& t = j["target_info"];
    if (t.contains("label") && t["label"].is_string()) cost.label = t["label"].get<std::string>();
    if (t.contains("weight_bytes") && t["weight_bytes"].is_number())
      cost.weight_bytes = t["weight_bytes"].get<double>();
  }
  if (j.contains("machine") && j["machine"].is_object() &&
      j["machine"].contains("memory_bandwidth_gb_s") &&
      j["machine"]["memory_bandwidth_gb_s"].is_number()) {
    cost.bandwidth_gb_s = j["machine"]["memory_bandwidth_gb_s"].get<double>();
    if (j["machine"].contains("memory_bandwidth_kind") &&
        j["machine"]["memory_bandwidth_kind"] == "device_copy") {
      cost.bandwidth_kind = "device copy";
    }
  }
  return cost;
}

std::string WithInterval(double v, const Interval& ci) {
  if (!std::isfinite(v)) return kNone;
  if (!std::isfinite(ci.lo) || !std::isfinite(ci.hi)) return Fixed(v, 2);
  return Fixed(v, 2) + " [" + Fixed(ci.lo, 2) + ", " + Fixed(ci.hi, 2) + "]";
}

// The first kPositionsShown rates, space-separated ("0.82 0.73 —"); "—" when there are none.
std::string Rates(const std::vector<double>& rates) {
  if (rates.empty()) return kNone;
  std::string out;
  for (size_t i = 0; i < rates.size() && i < kPositionsShown; ++i) {
    out += (i ? " " : "") + Fixed(rates[i], 2);
  }
  return out;
}

// Display width of UTF-8 text (code points; the table only uses narrow characters).
size_t Width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// True for cases run in synthetic-acceptance mode (forced acceptance: not a real measurement).
bool IsSynthetic(const CaseRecord& r) {
  return r.config_json.find("\"synthetic_acceptance\"") != std::string::npos;
}

std::string MethodLabel(const CaseRecord& r) {
  const std::string knobs = KnobsShort(r.method_knobs_json);
  std::string label = knobs.empty() ? r.method : r.method + "(" + knobs + ")";
  // The AR case a shard of a sweep ran for its own method cases (harness/runner/sweep.h).
  const Json config = Json::parse(r.config_json, nullptr, false);
  if (config.is_object() && config.contains("shard") && config["shard"].is_string()) {
    label += " [shard " + config["shard"].get<std::string>() + "]";
  }
  return IsSynthetic(r) ? label + " [SYNTHETIC]" : label;
}

// "paired", "per-case", or "—" for cases written before the timing mode was recorded.
std::string TimingCell(const std::string& mode) {
  if (mode.empty()) return kNone;
  return mode == "per_case" ? "per-case" : mode;
}

std::string JoinIds(const std::vector<int64_t>& ids) {
  std::vector<std::string> s;
  for (int64_t id : ids) s.push_back(std::to_string(id));
  return s.empty() ? std::string("none") : Join(s, ", ");
}

}  // namespace

std::string KnobsShort(const std::string& knobs_json) {
  if (knobs_json.empty()) return "";
  const Json j = Json::parse(knobs_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return knobs_json;
  if (j.is_null()) return "";
  if (!j.is_object()) return j.dump();
  std::string out;
  for (const auto& [key, value] : j.items()) {
    if (!out.empty()) out += ",";
    out += key + "=" + (value.is_string() ? value.get<std::string>() : value.dump());
  }
  return out;
}

std::string EngineNote(const std::string& label, const CaseRecord& record, const CaseMetrics& m) {
  const bool counted = std::isfinite(m.launches_per_step);
  if (!std::isfinite(m.replays_per_step) || (!counted && record.device == "cpu")) return "";
  return StrCat(label, ": per verify step ",
                counted ? Fixed(m.launches_per_step, 1) + " launching calls, " : std::string(),
                Fixed(m.replays_per_step, 2), " captured-step replays, ", Fixed(m.h2d_per_step, 2),
                " host-to-device and ", Fixed(m.d2h_per_step, 2),
                " device-to-host copies; device time ",
                std::isfinite(m.device_time_fraction) ? Fixed(m.device_time_fraction, 2) : "—",
                " of the steps' wall time.");
}

namespace {

// The AR baseline of cases[i] (FindArBaseline): speedup and exact match in `row`, and why there
// is none or where it comes from in `notes`.
void AttachBaseline(const std::vector<ResultsStore::CaseRow>& cases, size_t i,
                    const SummaryOptions& options, const std::string& label,
                    const std::function<const std::vector<SampleRecord>&(int64_t)>& samples_of,
                    SummaryRow& row, std::vector<std::string>& notes) {
  const ResultsStore::CaseRow& c = cases[i];
  const std::vector<SampleRecord>& own = samples_of(c.case_id);
  const bool paired = !own.empty() && own.front().has_paired_ar();
  const BaselineMatch match = FindArBaseline(cases, i, options.baseline);
  // Why there is no AR case: none at all, or only one measured on another machine.
  const std::string missing =
      match.refused_index < 0
          ? std::string("no AR case with the same workload")
          : StrCat("the only AR cases with the same workload ran on another machine (case ",
                   cases[match.refused_index].case_id, ", run ", cases[match.refused_index].run_id,
                   ": ", cases[match.refused_index].machine, "; this case: ", c.machine,
                   "), used only with --cross-machine-baseline");
  if (match.index < 0 && paired) {
    // Paired timing needs no AR case for the speedup (no exact match without one).
    row.speedup = ComputeSpeedup({}, own, options.bootstrap, options.scope);
    notes.push_back(
        StrCat(label, ": ", missing, ": speedup from the paired AR runs only, no exact match."));
  } else if (match.index < 0) {
    notes.push_back(StrCat(label, ": ", missing, ": no speedup or exact match."));
  } else {
    const ResultsStore::CaseRow& base = cases[match.index];
    row.baseline_case_id = base.case_id;
    row.baseline_run_id = base.run_id;
    row.baseline_same_run = match.same_run;
    row.baseline_same_machine = match.same_machine;
    const auto& base_samples = samples_of(base.case_id);
    const auto& own_samples = samples_of(c.case_id);
    row.speedup = ComputeSpeedup(base_samples, own_samples, options.bootstrap, options.scope);
    row.exact_match = ComputeExactMatch(base_samples, own_samples);
    if (!match.same_run) {
      notes.push_back(
          StrCat(label, ": AR baseline is case ", base.case_id, " from run ", base.run_id,
                 match.same_machine ? " on the same machine"
                                    : StrCat(" on another machine (", base.machine, ")"),
                 " (no AR case with the same workload in run ", c.run_id, ")."));
    }
    if (row.speedup.n_matched == 0) {
      notes.push_back(StrCat(label, ": shares no answered prompt with its AR case ", base.case_id,
                             ": no speedup."));
    }
  }
}

}  // namespace

namespace {

// Fails naming the database when options.run_id / case_id (when set) are not in it, or the case
// is not of that run.
void CheckSelection(const std::string& db_path, const SummaryOptions& options,
                    const std::vector<int64_t>& run_ids,
                    const std::vector<ResultsStore::CaseRow>& cases) {
  if (options.run_id >= 0) {
    SPECBED_CHECK(std::count(run_ids.begin(), run_ids.end(), options.run_id) > 0, "run ",
                  options.run_id, " is not in results database '", db_path,
                  "' (runs: ", JoinIds(run_ids), ")");
  }
  if (options.case_id < 0) return;
  std::vector<int64_t> ids;
  const ResultsStore::CaseRow* found = nullptr;
  for (const auto& c : cases) {
    ids.push_back(c.case_id);
    if (c.case_id == options.case_id) found = &c;
  }
  SPECBED_CHECK(found != nullptr, "case ", options.case_id, " is not in results database '",
                db_path, "' (cases: ", JoinIds(ids), ")");
  SPECBED_CHECK(options.run_id < 0 || found->run_id == options.run_id, "case ", options.case_id,
                " of results database '", db_path, "' belongs to run ", found->run_id,
                ", not to run ", options.run_id);
}

}  // namespace

Summary BuildSummary(const std::string& db_path, const SummaryOptions& options) {
  StoreOptions store_options;
  store_options.read_only = true;
  auto store = ResultsStore::Open(db_path, store_options);
  Summary summary;
  summary.db_path = db_path;
  summary.schema_version = store->schema_version();
  summary.run_ids = store->ListRunIds();
  summary.bootstrap = options.bootstrap;
  summary.scope = options.scope;
  const std::vector<ResultsStore::CaseRow> cases = store->ListCases();
  CheckSelection(db_path, options, summary.run_ids, cases);
  SPECBED_CHECK(options.slice_begin >= 0 &&
                    (options.slice_end < 0 || options.slice_end >= options.slice_begin),
                "summary: the sample slice must satisfy 0 <= begin <= end (got ",
                options.slice_begin, ":", options.slice_end, ")");
  const bool filtered =
      !options.category.empty() || options.slice_begin > 0 || options.slice_end >= 0;
  // The selected samples of a case (category, then stream-order slice).
  std::set<std::string> categories_seen;
  auto select = [&](std::vector<SampleRecord> all) {
    for (const SampleRecord& s : all) categories_seen.insert(s.category);
    if (!filtered) return all;
    std::vector<SampleRecord> out;
    int64_t index = 0;
    for (SampleRecord& s : all) {
      if (!options.category.empty() && s.category != options.category) continue;
      if (index >= options.slice_begin && (options.slice_end < 0 || index < options.slice_end)) {
        out.push_back(std::move(s));
      }
      ++index;
    }
    return out;
  };
  std::map<int64_t, std::vector<SampleRecord>> samples_cache;
  auto samples_of = [&](int64_t case_id) -> const std::vector<SampleRecord>& {
    auto it = samples_cache.find(case_id);
    if (it == samples_cache.end()) {
      it = samples_cache.emplace(case_id, select(store->LoadSamples(case_id))).first;
    }
    return it->second;
  };
  auto steps_of = [&](int64_t case_id) {
    std::vector<StepRecord> steps = store->LoadSteps(case_id);
    if (!filtered) return steps;
    std::set<std::pair<std::string, int32_t>> kept;
    for (const SampleRecord& s : samples_of(case_id)) kept.insert({s.prompt_id, s.turn});
    std::vector<StepRecord> out;
    for (StepRecord& st : steps) {
      if (kept.count({st.prompt_id, st.turn})) out.push_back(std::move(st));
    }
    return out;
  };

  std::vector<CostCase> cost_cases;
  for (size_t i = 0; i < cases.size(); ++i) {
    const ResultsStore::CaseRow& c = cases[i];
    if (options.run_id >= 0 && c.run_id != options.run_id) continue;
    if (options.case_id >= 0 && c.case_id != options.case_id) continue;
    SummaryRow row;
    row.row = c;
    row.metrics = ComputeCaseMetrics(samples_of(c.case_id), steps_of(c.case_id));
    row.is_baseline = IsArBaseline(c.record);
    const std::string label =
        StrCat("case ", c.case_id, " (", MethodLabel(c.record), ", run ", c.run_id, ")");
    cost_cases.push_back({c.case_id, &c.record, row.metrics.decode_tokens_per_s});
    if (IsSynthetic(c.record)) {
      summary.notes.push_back(label +
                              ": SYNTHETIC ACCEPTANCE (forced per-position acceptance "
                              "pattern): system overhead only, not a real measurement.");
    }
    if (!row.is_baseline) AttachBaseline(cases, i, options, label, samples_of, row, summary.notes);
    const std::string engine = EngineNote(label, c.record, row.metrics);
    if (!engine.empty()) summary.notes.push_back(engine);
    summary.rows.push_back(std::move(row));
  }
  if (!options.category.empty() && !categories_seen.empty()) {
    SPECBED_CHECK(categories_seen.count(options.category) > 0, "summary: no answer of category '",
                  options.category, "' in results database '", db_path,
                  "' (categories: ", Join({categories_seen.begin(), categories_seen.end()}, ", "),
                  ")");
  }
  summary.cost_notes = CostRegimeNotes(cost_cases);
  if (options.case_id < 0) summary.serve_cells = LoadServeCells(db_path, options.run_id);
  return summary;
}

void AppendTimedCaptureNotes(const std::vector<CostCase>& cases, std::vector<std::string>& notes);

std::vector<std::string> CostRegimeNotes(const std::vector<CostCase>& cases) {
  std::vector<std::string> notes;
  std::set<std::string> labelled;
  std::vector<TargetCost> costs;
  for (const CostCase& c : cases) costs.push_back(TargetCostOf(*c.record));
  std::set<std::string> warned;
  for (size_t i = 0; i < cases.size(); ++i) {
    const CostCase& c = cases[i];
    const TargetCost& cost = costs[i];
    if (!cost.label.empty() && labelled.insert(c.record->target).second) {
      notes.push_back(StrCat(c.record->target, " is the ", cost.label,
                             ": its outputs are the original's, its costs those of the larger "
                             "shape on this machine; not a real model of that size."));
    }
    if (cost.weight_bytes > 0 && cost.weight_bytes < kCacheResidentWeightBytes &&
        warned.insert(c.record->target).second) {
      notes.push_back(StrCat(
          "WARNING: target ", c.record->target, " reads only ", Fixed(cost.weight_bytes * 1e-6, 1),
          " MB of weights per token: they stay in cache, so an AR step is not memory-bound and "
          "verifying n tokens costs about n AR steps. No speculative method can beat AR on it; "
          "its speedups say nothing about the methods (use a cost twin such as stories260K-twin, "
          "or a real model)."));
    }
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const CostCase& c = cases[i];
    const TargetCost& cost = costs[i];
    if (!IsArBaseline(*c.record) || cost.weight_bytes <= 0 || cost.bandwidth_gb_s <= 0 ||
        !std::isfinite(c.decode_tokens_per_s)) {
      continue;
    }
    const double gb_s = c.decode_tokens_per_s * cost.weight_bytes * 1e-9;
    notes.push_back(StrCat(
        "AR roofline, case ", c.case_id, " (", c.record->target, ", ", c.record->dtype, ", ",
        c.record->threads, " thread", c.record->threads == 1 ? "" : "s",
        ", T=", General(c.record->temperature), "): ", Fixed(c.decode_tokens_per_s, 1), " tok/s x ",
        Fixed(cost.weight_bytes * 1e-6, 1), " MB of weights per token = ", Fixed(gb_s, 2),
        " GB/s = ", Fixed(gb_s / cost.bandwidth_gb_s, 2), " of the measured memory bandwidth (",
        Fixed(cost.bandwidth_gb_s, 2), " GB/s, ", cost.bandwidth_kind,
        "); speedups are over this baseline."));
  }
  AppendTimedCaptureNotes(cases, notes);
  return notes;
}

// A case whose timed prompts captured CUDA graphs (config_json.engine.graphs_timed, written by
// the runner): their decode time includes the captures.
void AppendTimedCaptureNotes(const std::vector<CostCase>& cases, std::vector<std::string>& notes) {
  for (const CostCase& c : cases) {
    const Json config = Json::parse(c.record->config_json, nullptr, /*allow_exceptions=*/false);
    if (!config.is_object()) continue;
    const Json timed = config.value("/engine/graphs_timed"_json_pointer, Json::object());
    const int64_t captures = timed.value("captures", int64_t{0});
    if (captures <= 0) continue;
    notes.push_back(StrCat("case ", c.case_id, " (", c.record->method, "): ", captures,
                           " CUDA graph capture", captures == 1 ? "" : "s", " (",
                           Fixed(timed.value("capture_s", 0.0), 3),
                           " s) fell inside the timed prompts (a step width first seen after the "
                           "warm-up); the case's decode time includes ",
                           captures == 1 ? "it." : "them."));
  }
}

// The speedup columns' definitions in `scope` (one paragraph, newline-terminated).
std::string SpeedupLegend(SpeedupScope scope) {
  const bool e2e = scope == SpeedupScope::kEndToEnd;
  const std::string per = e2e ? "end-to-end tok/s (every generated token / prefill + decode time)"
                              : "decode tok/s (tokens after the first / decode time)";
  return StrCat("speedup (", SpeedupScopeName(scope), ") = geometric mean over answers of method ",
                per,
                " / AR's for the same prompt and turn (p = AR side from the paired runs); Σ ratio "
                "= total method tok/s / total AR tok/s;\n",
                "Spec-Bench = Spec-Bench's own figure (evaluation/speed.py): mean over prompts of "
                "the method's tok/s (turns summed) / the same mean for AR",
                e2e ? " (end to end, as Spec-Bench reports it)"
                    : " (decode only: --scope e2e for Spec-Bench's wall-time figure)",
                ";\n");
}

namespace {

// One cell of the terminal table: its text and the number it sorts by (NaN = sort by text).
struct Cell {
  std::string text;
  double value = kNoValue;
};

// A row as the table shows it: the summary row and its method label (short or full).
struct RowView {
  const SummaryRow* r = nullptr;
  std::string label;
};

// A column of the terminal table. `key` names it for --columns / --sort.
struct SummaryColumn {
  const char* key;
  const char* header;
  bool right;       // right-aligned
  bool compact;     // in the default (compact) table
  bool descending;  // --sort KEY orders high to low (metrics) or low to high (ids, text)
  std::function<Cell(const RowView&)> cell;
};

Cell Num(double v, int decimals) {
  return {Fixed(v, decimals), v};
}
Cell Percent(double fraction) {
  return {Fixed(100.0 * fraction, 1), 100.0 * fraction};
}
Cell Text(std::string text) {
  return {std::move(text), kNoValue};
}
// A step counter; "—" for a case without steps (AR).
Cell Count(int64_t n, const CaseMetrics& m) {
  if (m.n_steps == 0) return Text(kNone);
  return {std::to_string(n), static_cast<double>(n)};
}

bool Compared(const SummaryRow& r) {
  return !r.is_baseline && r.baseline_case_id >= 0;
}

// A speedup figure with its interval; "(n<5)" instead of an interval resting on fewer than
// kMinPromptsForInterval prompts; "p" = paired AR timing, "*" = AR baseline from another run.
Cell SpeedupCell(const SummaryRow& r, double v, const Interval& ci, bool marks) {
  if (r.is_baseline) return {marks ? "1.00 (baseline)" : "1.00", 1.0};
  std::string text = SpeedupWithInterval(v, ci, r.speedup.n_prompts);
  if (marks && r.speedup.n_paired > 0) text += " p";
  if (marks && Compared(r) && !r.baseline_same_run && std::isfinite(v)) text += " *";
  return {text, v};
}

// Exact match vs. AR: a losslessness check only at T = 0; nothing at T > 0, where a lossless
// method samples other tokens than AR by design.
Cell ExactCell(const SummaryRow& r) {
  const ExactMatch& e = r.exact_match;
  if (!Compared(r) || e.n_matched == 0 || r.row.record.temperature != 0) return Text("");
  return {StrCat(e.n_exact, "/", e.n_matched), e.rate};
}

const std::vector<SummaryColumn>& SummaryColumns() {
  static const std::vector<SummaryColumn> kColumns = {
      {"case", "case", true, true, false,
       [](const RowView& v) {
         return Cell{std::to_string(v.r->row.case_id), double(v.r->row.case_id)};
       }},
      {"run", "run", true, false, false,
       [](const RowView& v) {
         return Cell{std::to_string(v.r->row.run_id), double(v.r->row.run_id)};
       }},
      {"method", "method", false, true, false, [](const RowView& v) { return Text(v.label); }},
      {"drafter", "drafter", false, false, false,
       [](const RowView& v) {
         const std::string& d = v.r->row.record.drafter;
         return Text(d.empty() ? kNone : d);
       }},
      {"target", "target", false, true, false,
       [](const RowView& v) { return Text(v.r->row.record.target); }},
      {"dataset", "dataset", false, true, false,
       [](const RowView& v) { return Text(v.r->row.record.dataset); }},
      {"T", "T", true, true, false,
       [](const RowView& v) {
         return Cell{General(v.r->row.record.temperature), v.r->row.record.temperature};
       }},
      {"n", "n", true, true, false,
       [](const RowView& v) {
         return Cell{std::to_string(v.r->metrics.n_samples), double(v.r->metrics.n_samples)};
       }},
      {"timing", "timing", false, true, false,
       [](const RowView& v) { return Text(TimingCell(v.r->row.record.timing_mode)); }},
      {"tok_s", "tok/s", true, false, true,
       [](const RowView& v) { return Num(v.r->metrics.decode_tokens_per_s, 1); }},
      {"nodes", "nodes/step", true, true, true,
       [](const RowView& v) { return Num(v.r->metrics.drafted_per_step, 1); }},
      {"tau", "τ", true, true, true, [](const RowView& v) { return Num(v.r->metrics.tau, 2); }},
      {"acc", "acc%", true, true, true,
       [](const RowView& v) {
         return Percent(VllmCompatibleMetrics(v.r->metrics).acceptance_rate);
       }},
      {"drafts", "drafts", true, false, true,
       [](const RowView& v) { return Count(v.r->metrics.n_steps, v.r->metrics); }},
      {"draft_tokens", "draft tokens", true, false, true,
       [](const RowView& v) { return Count(v.r->metrics.drafted, v.r->metrics); }},
      {"accepted", "accepted", true, false, true,
       [](const RowView& v) { return Count(v.r->metrics.accepted, v.r->metrics); }},
      {"td", "T_D%", true, true, false,
       [](const RowView& v) { return Percent(v.r->metrics.draft_fraction); }},
      {"tdp", "D-prefill%", true, false, false,
       [](const RowView& v) { return Percent(v.r->metrics.draft_prefill_fraction); }},
      {"other", "other%", true, false, false,
       [](const RowView& v) { return Percent(v.r->metrics.other_fraction); }},
      {"adapt", "adapt%", true, false, false,
       [](const RowView& v) { return Percent(v.r->metrics.adapt_fraction); }},
      {"rollback", "rollback%", true, false, false,
       [](const RowView& v) { return Percent(v.r->metrics.rollback_rate); }},
      {"rb", "RB%", true, false, false,
       [](const RowView& v) { return Percent(v.r->metrics.draft_waste_rate); }},
      {"rb_spec", "RB-trim%", true, false, false,
       [](const RowView& v) { return Percent(v.r->metrics.spec_rollback_rate); }},
      {"fwd", "fwd/ans", true, false, false,
       [](const RowView& v) { return Num(v.r->metrics.target_forwards_per_sample, 1); }},
      {"busy", "busy D/V µs", true, false, false,
       [](const RowView& v) {
         const CaseMetrics& m = v.r->metrics;
         if (!std::isfinite(m.draft_busy_us_per_step)) return Text(kNone);
         return Text(
             StrCat(Fixed(m.draft_busy_us_per_step, 0), "/", Fixed(m.verify_busy_us_per_step, 0)));
       }},
      {"speedup", "speedup [95% CI]", true, true, true,
       [](const RowView& v) {
         return SpeedupCell(*v.r, v.r->speedup.geomean, v.r->speedup.geomean_ci, true);
       }},
      {"total", "Σ ratio [95% CI]", true, false, true,
       [](const RowView& v) {
         return SpeedupCell(*v.r, v.r->speedup.total_ratio, v.r->speedup.total_ratio_ci, false);
       }},
      {"spec_bench", "Spec-Bench [95% CI]", true, false, true,
       [](const RowView& v) {
         return SpeedupCell(*v.r, v.r->speedup.spec_bench, v.r->speedup.spec_bench_ci, false);
       }},
      {"exact", "exact", true, true, true, [](const RowView& v) { return ExactCell(*v.r); }},
      {"div", "div min/med", true, false, false,
       [](const RowView& v) {
         const ExactMatch& e = v.r->exact_match;
         if (!Compared(*v.r) || e.divergences.empty()) return Text(kNone);
         return Cell{StrCat(e.min_position, "/", General(e.median_position)),
                     double(e.min_position)};
       }},
      {"margin", "margin", true, false, false,
       [](const RowView& v) {
         const ExactMatch& e = v.r->exact_match;
         if (!Compared(*v.r) || e.divergences.empty()) return Text(kNone);
         return Num(e.min_margin, 3);
       }},
      {"r", "r_1..r_4", false, false, true,
       [](const RowView& v) { return Text(Rates(v.r->metrics.positions.r)); }},
      {"alpha", "α_1..α_4", false, false, true,
       [](const RowView& v) { return Text(Rates(v.r->metrics.positions.alpha)); }},
      {"pos", "accept@pos 0..3", false, false, true,
       [](const RowView& v) {
         return Text(Rates(VllmCompatibleMetrics(v.r->metrics).per_position_acceptance_rate));
       }},
  };
  return kColumns;
}

// A column by its key or by its header as printed (whole, or its first word: "tok/s", "acc%",
// "speedup" for "speedup [95% CI]").
const SummaryColumn& ColumnByKey(const std::string& key) {
  for (const SummaryColumn& c : SummaryColumns()) {
    const std::string header = c.header;
    if (key == c.key || key == header || key == header.substr(0, header.find(' '))) return c;
  }
  Fail("summary: unknown column '", key, "' (columns: ", Join(SummaryColumnKeys(), ", "), ")");
}

// The columns to print: --columns as given, else every column (--wide) or the compact set minus
// the configuration columns that are the same in every row (stated above the table instead).
std::vector<const SummaryColumn*> ChooseColumns(const Summary& s, const SummaryTableOptions& o,
                                                const std::vector<RowView>& views,
                                                std::vector<std::string>& constants) {
  std::vector<const SummaryColumn*> chosen;
  if (!o.columns.empty()) {
    for (const std::string& key : o.columns) chosen.push_back(&ColumnByKey(key));
    return chosen;
  }
  bool any_drafter = false;
  for (const SummaryRow& r : s.rows) any_drafter = any_drafter || !r.row.record.drafter.empty();
  for (const SummaryColumn& c : SummaryColumns()) {
    const std::string key = c.key;
    if (o.wide) {
      if (key != "drafter" || any_drafter) chosen.push_back(&c);
      continue;
    }
    if (!c.compact) continue;
    if (key == "target" || key == "dataset" || key == "timing") {
      std::set<std::string> seen;
      for (const RowView& v : views) seen.insert(c.cell(v).text);
      if (seen.size() == 1) {
        constants.push_back(StrCat(c.header, " ", *seen.begin()));
        continue;
      }
    }
    chosen.push_back(&c);
  }
  return chosen;
}

// Orders the rows by --sort "KEY[:asc|:desc]" (numbers by value, NaN last; text by text).
void SortRows(const std::string& sort, std::vector<RowView>& views) {
  if (sort.empty()) return;
  const size_t colon = sort.find(':');
  const SummaryColumn& c = ColumnByKey(sort.substr(0, colon));
  bool descending = c.descending;
  if (colon != std::string::npos) {
    const std::string dir = sort.substr(colon + 1);
    SPECBED_CHECK(dir == "asc" || dir == "desc",
                  "summary: --sort takes KEY, KEY:asc or KEY:desc, got '", sort, "'");
    descending = dir == "desc";
  }
  std::stable_sort(views.begin(), views.end(), [&](const RowView& a, const RowView& b) {
    const Cell x = c.cell(a), y = c.cell(b);
    const bool xn = std::isfinite(x.value), yn = std::isfinite(y.value);
    if (xn != yn) return xn;  // numbers before "—"
    if (xn) return descending ? x.value > y.value : x.value < y.value;
    return descending ? x.text > y.text : x.text < y.text;
  });
}

// Aligned columns, two spaces apart, trailing blanks trimmed.
std::string AlignedTable(const std::vector<const SummaryColumn*>& columns,
                         const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    widths[i] = Width(columns[i]->header);
    for (const auto& row : rows) widths[i] = std::max(widths[i], Width(row[i]));
  }
  std::string out;
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string pad(widths[i] - Width(cells[i]), ' ');
      if (i) line += "  ";
      line += columns[i]->right ? pad + cells[i] : cells[i] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  std::vector<std::string> headers;
  for (const SummaryColumn* c : columns) headers.push_back(c->header);
  emit(headers);
  for (const auto& row : rows) emit(row);
  return out;
}

// The legend of the compact table: the shown columns only.
std::string CompactLegend(const Summary& s) {
  return StrCat(
      "τ = acceptance length (τ, Spec-Bench #MAT): tokens per verify step (bonus included);\n"
      "acc% = accepted / drafted tokens (vLLM's acceptance rate); nodes/step = drafted nodes per "
      "step;\nT_D% = drafting share of decode time; speedup = geometric mean over answers of "
      "decode tok/s / AR's;\n95% CI = bootstrap over prompts (",
      s.bootstrap.n_resamples, " resamples; (n<5) = under ", kMinPromptsForInterval,
      " prompts: no interval); p = paired AR timing;\n* = AR from another run; exact = answers "
      "token-identical to AR (T = 0 only).\n",
      "More: --wide (every column, full knobs), --columns KEY,.. , --sort KEY[:asc|:desc].\n");
}

// The legend of the wide table: every column.
std::string WideLegend(const Summary& s) {
  return StrCat(
      "n = answers (prompt x turn); tok/s = decode tokens (after the first) / decode time; "
      "τ = acceptance length (τ, Spec-Bench #MAT): tokens emitted per verify step (bonus token "
      "included);\n",
      "acc% = accepted / drafted tokens (vLLM's acceptance rate); T_D% / other% = drafting / "
      "other time as a share of decode time; adapt% = online adaptation (OSD updates) and "
      "D-prefill% = the drafter's catch-up over the prompt, both part of T_D%;\nrollback% = "
      "drafted tokens rejected; RB% = rollback rate: wasted draft positions (rolled back or "
      "trimmed) / all drafted positions, each once, discarded parallel work included; RB-trim% = "
      "SpecBranch's variant without trimming; fwd/ans = target forwards per answer;\n",
      "busy D/V = per-step busy time of the draft / target side (sum > step wall time when they "
      "overlapped, pearl/specbranch);\n",
      "nodes/step = mean drafted nodes per verify step (beside the budget in the knobs); timing = "
      "paired (AR timed on the same prompt back to back, alternating order), per-case, or — (not "
      "recorded);\n",
      SpeedupLegend(s.scope), "[95% CI] = percentile bootstrap over prompts (",
      s.bootstrap.n_resamples, " resamples, fixed seed; (n<5) = under ", kMinPromptsForInterval,
      " prompts, no interval); * = AR baseline from another run;\n",
      "exact = answers token-identical to AR (T = 0 only: at T > 0 a lossless method samples other "
      "tokens); div min/med = first divergence position (min / median); margin = smallest AR "
      "top-2 logit gap at a divergence;\n",
      "drafts / draft tokens / accepted = vLLM's num_drafts (verify steps), num_draft_tokens, "
      "num_accepted_tokens;\n",
      "r_i = P(accepted >= i | drafted >= i), α_i = P(accepted >= i | accepted >= i-1, drafted >= "
      "i) at draft position i (conditional);\naccept@pos 0..3 = vLLM's per-position acceptance "
      "rate from position 0: steps accepted up to that position / all steps (unconditional).\n");
}

}  // namespace

std::vector<std::string> SummaryColumnKeys() {
  std::vector<std::string> keys;
  for (const SummaryColumn& c : SummaryColumns()) keys.push_back(c.key);
  return keys;
}

std::string SpeedupWithInterval(double v, const Interval& ci, int64_t n_prompts) {
  if (!std::isfinite(v)) return kNone;
  if (n_prompts > 0 && n_prompts < kMinPromptsForInterval) return Fixed(v, 2) + " (n<5)";
  return WithInterval(v, ci);
}

namespace {

// The cases' table with its legend and notes.
std::string CaseTableText(const Summary& s, const SummaryTableOptions& options) {
  std::ostringstream out;
  std::vector<const ResultsStore::CaseRow*> case_rows;
  for (const SummaryRow& r : s.rows) case_rows.push_back(&r.row);
  const std::vector<std::string> short_labels = ShortCaseLabels(case_rows);
  std::vector<RowView> views;
  for (size_t i = 0; i < s.rows.size(); ++i) {
    std::string label = MethodLabel(s.rows[i].row.record);
    if (!options.wide) {
      label = short_labels[i];
      if (IsSynthetic(s.rows[i].row.record)) label += " [SYNTHETIC]";
    }
    views.push_back({&s.rows[i], label});
  }
  std::vector<std::string> constants;
  const std::vector<const SummaryColumn*> columns = ChooseColumns(s, options, views, constants);
  SortRows(options.sort, views);
  std::vector<std::vector<std::string>> rows;
  for (const RowView& v : views) {
    std::vector<std::string> row;
    for (const SummaryColumn* c : columns) row.push_back(c->cell(v).text);
    rows.push_back(std::move(row));
  }
  if (!constants.empty()) out << Join(constants, ", ") << "\n";
  out << AlignedTable(columns, rows) << "\n"
      << (options.wide || !options.columns.empty() ? WideLegend(s) : CompactLegend(s));
  if (!s.cost_notes.empty()) {
    out << "\nCost regime:\n";
    for (const auto& n : s.cost_notes) out << "- " << n << "\n";
  }
  if (!s.notes.empty()) {
    out << "\nNotes:\n";
    for (const auto& n : s.notes) out << "- " << n << "\n";
  }
  return out.str();
}

}  // namespace

std::string FormatSummaryTable(const Summary& s, const SummaryTableOptions& options) {
  std::ostringstream out;
  out << "specbed summary: " << s.db_path << " (schema v" << s.schema_version << "), "
      << s.rows.size() << (s.rows.size() == 1 ? " case" : " cases");
  if (!s.serve_cells.empty()) out << ", " << s.serve_cells.size() << " serve cells";
  out << "; runs in the database: " << JoinIds(s.run_ids) << "\n";
  if (s.rows.empty() && s.serve_cells.empty()) out << "No cases recorded.\n";
  if (!s.rows.empty()) out << CaseTableText(s, options);
  if (!s.serve_cells.empty()) {
    out << (s.rows.empty() ? "" : "\n") << "Serving under load (`specbed serve` cells):\n"
        << ServeResultsText(s.serve_cells);
  }
  return out.str();
}

namespace {

using OrderedJson = nlohmann::ordered_json;  // summary JSON fields in writing order

OrderedJson NumberJson(double v) {
  return std::isfinite(v) ? OrderedJson(v) : OrderedJson(nullptr);
}

OrderedJson IntervalJson(const Interval& ci) {
  return OrderedJson::array({NumberJson(ci.lo), NumberJson(ci.hi)});
}

// JSON text as stored -> a JSON value (the text itself when it does not parse; null when empty).
OrderedJson StoredJson(const std::string& text) {
  if (text.empty()) return nullptr;
  OrderedJson j = OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? OrderedJson(text) : j;
}

// Identity and configuration of a case: the case fields with a summary key (record_schema.h;
// JSON text parsed), the short knob label after the knobs.
void AddConfigJson(const SummaryRow& r, OrderedJson& j) {
  const CaseRecord& c = r.row.record;
  j["case_id"] = r.row.case_id;
  j["run_id"] = r.row.run_id;
  for (const Field<CaseRecord>& f : CaseFields()) {
    if (f.summary == nullptr) continue;
    const std::string name = f.name;
    const bool json_text = name.size() > 5 && name.compare(name.size() - 5, 5, "_json") == 0;
    OrderedJson value = FieldJson(c, f);
    j[f.summary] = json_text ? StoredJson(value.get<std::string>()) : std::move(value);
    if (name == "method_knobs_json") j["knobs_short"] = KnobsShort(c.method_knobs_json);
  }
}

// Throughput, step metrics, vLLM's names and per-position acceptance of a case.
void AddMetricsJson(const CaseMetrics& m, OrderedJson& j) {
  using Json = OrderedJson;
  j["n_samples"] = m.n_samples;
  j["n_prompts"] = m.n_prompts;
  j["output_tokens"] = m.output_tokens;
  j["decode_tokens"] = m.decode_tokens;
  j["decode_ms"] = NumberJson(m.decode_ms);
  j["decode_tokens_per_s"] = NumberJson(m.decode_tokens_per_s);
  j["prefill_ms_mean"] = NumberJson(m.prefill_ms_mean);
  j["stop_reasons"] = m.stop_reasons;
  j["n_steps"] = m.n_steps;
  j["drafted"] = m.drafted;
  j["accepted"] = m.accepted;
  j["emitted"] = m.emitted;
  j["tau"] = NumberJson(m.tau);
  j["draft_fraction"] = NumberJson(m.draft_fraction);
  j["verify_fraction"] = NumberJson(m.verify_fraction);
  j["other_fraction"] = NumberJson(m.other_fraction);
  j["adapt_ms"] = m.adapt_ms;
  j["adapt_fraction"] = NumberJson(m.adapt_fraction);
  j["draft_us_per_step"] = NumberJson(m.draft_us_per_step);
  j["verify_us_per_step"] = NumberJson(m.verify_us_per_step);
  j["other_us_per_step"] = NumberJson(m.other_us_per_step);
  j["drafted_per_step"] = NumberJson(m.drafted_per_step);
  j["rollback_rate"] = NumberJson(m.rollback_rate);
  j["rollback_events"] = m.rollback_events;
  j["spec_rollback_rate"] = NumberJson(m.spec_rollback_rate);
  j["draft_waste_rate"] = NumberJson(m.draft_waste_rate);
  j["rolled_back_tokens"] = m.rolled_back;
  j["trimmed_tokens"] = m.trimmed;
  j["draft_prefill_ms"] = m.draft_prefill_ms;
  j["draft_prefill_fraction"] = NumberJson(m.draft_prefill_fraction);
  j["draft_generated_tokens"] = m.draft_generated;
  j["target_forwards"] = m.target_forwards;
  j["target_forwards_per_sample"] = NumberJson(m.target_forwards_per_sample);
  j["draft_busy_us_per_step"] = NumberJson(m.draft_busy_us_per_step);
  j["verify_busy_us_per_step"] = NumberJson(m.verify_busy_us_per_step);
  j["rollback_events_per_step"] = NumberJson(m.rollback_events_per_step);
  j["launches_per_step"] = NumberJson(m.launches_per_step);
  j["graph_replays_per_step"] = NumberJson(m.replays_per_step);
  j["h2d_copies_per_step"] = NumberJson(m.h2d_per_step);
  j["d2h_copies_per_step"] = NumberJson(m.d2h_per_step);
  j["device_time_fraction"] = NumberJson(m.device_time_fraction);
  Json r_list = Json::array(), alpha_list = Json::array();
  for (double v : m.positions.r) r_list.push_back(NumberJson(v));
  for (double v : m.positions.alpha) alpha_list.push_back(NumberJson(v));
  const VllmMetrics vllm = VllmCompatibleMetrics(m);
  j["acceptance_rate"] = NumberJson(vllm.acceptance_rate);
  j["mean_acceptance_length"] = NumberJson(vllm.mean_acceptance_length);
  Json per_position = Json::array();
  for (double v : vllm.per_position_acceptance_rate) per_position.push_back(NumberJson(v));
  // vLLM's raw counters under its own names (vllm/v1/spec_decode/metrics.py), position 0 first.
  j["vllm"] = {{"num_drafts", m.n_steps},
               {"num_draft_tokens", m.drafted},
               {"num_accepted_tokens", m.accepted},
               {"num_accepted_tokens_per_pos", m.positions.n_accepted},
               {"per_position_acceptance_rate", per_position}};
  j["acceptance"] = {{"max_depth", m.positions.max_depth()},
                     {"r", r_list},
                     {"alpha", alpha_list},
                     {"per_position_acceptance_rate", per_position},
                     {"n_reached", m.positions.n_reached},
                     {"n_accepted", m.positions.n_accepted},
                     {"n_conditional", m.positions.n_conditional}};
}

// The AR baseline, speedup and exact match of a case (null without a baseline).
void AddBaselineJson(const SummaryRow& r, OrderedJson& j) {
  using Json = OrderedJson;
  j["is_baseline"] = r.is_baseline;
  if (r.baseline_case_id >= 0 || r.speedup.n_matched > 0) {
    const Speedup& sp = r.speedup;
    const ExactMatch& e = r.exact_match;
    j["baseline"] = r.baseline_case_id < 0 ? Json(nullptr)
                                           : Json{{"case_id", r.baseline_case_id},
                                                  {"run_id", r.baseline_run_id},
                                                  {"same_run", r.baseline_same_run},
                                                  {"same_machine", r.baseline_same_machine}};
    j["speedup"] = {{"scope", SpeedupScopeName(sp.scope)},
                    {"n_matched", sp.n_matched},
                    {"n_paired", sp.n_paired},
                    {"n_prompts", sp.n_prompts},
                    {"geomean", NumberJson(sp.geomean)},
                    {"geomean_ci", IntervalJson(sp.geomean_ci)},
                    {"total_ratio", NumberJson(sp.total_ratio)},
                    {"total_ratio_ci", IntervalJson(sp.total_ratio_ci)},
                    {"spec_bench", NumberJson(sp.spec_bench)},
                    {"spec_bench_ci", IntervalJson(sp.spec_bench_ci)}};
    Json divergences = Json::array();
    for (const auto& d : e.divergences) {
      divergences.push_back(
          {{"prompt_id", d.prompt_id},
           {"turn", d.turn},
           {"position", d.position},
           {"ar_token", d.ar_token >= 0 ? Json(d.ar_token) : Json(nullptr)},
           {"method_token", d.method_token >= 0 ? Json(d.method_token) : Json(nullptr)},
           {"margin", NumberJson(d.margin)}});
    }
    j["exact_match"] = {
        {"n_matched", e.n_matched},
        {"n_exact", e.n_exact},
        {"rate", NumberJson(e.rate)},
        {"min_divergence_position", e.min_position >= 0 ? Json(e.min_position) : Json(nullptr)},
        {"median_divergence_position", NumberJson(e.median_position)},
        {"min_margin", NumberJson(e.min_margin)},
        {"divergences", divergences}};
  } else {
    j["baseline"] = nullptr;
    j["speedup"] = nullptr;
    j["exact_match"] = nullptr;
  }
}

}  // namespace

std::string SummaryJson(const Summary& s) {
  using Json = OrderedJson;  // fields in the order below (export columns follow it)
  Json doc;
  doc["db"] = s.db_path;
  doc["schema_version"] = s.schema_version;
  doc["runs"] = s.run_ids;
  doc["bootstrap"] = {{"method", "percentile bootstrap over prompts"},
                      {"n_resamples", s.bootstrap.n_resamples},
                      {"seed", s.bootstrap.seed},
                      {"level", s.bootstrap.level}};
  Json cases = Json::array();
  for (const SummaryRow& r : s.rows) {
    Json j;
    AddConfigJson(r, j);
    AddMetricsJson(r.metrics, j);
    AddBaselineJson(r, j);
    cases.push_back(std::move(j));
  }
  doc["cases"] = std::move(cases);
  doc["notes"] = s.notes;
  doc["cost_notes"] = s.cost_notes;
  doc["serve"] = ServeResultsJson(s.serve_cells);
  // Stored text may hold invalid UTF-8 (byte-level tokenizers): replace it instead of failing.
  return doc.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace specbed
