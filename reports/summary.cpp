// `specbed summary`: per-case metric rows of a results database (see summary.h), rendered as an
// aligned terminal table or as JSON.
// Checked by: tests/reports/summary_test.cpp and tests/cli/summary_cli_test.cpp.
#include "reports/summary.h"
#include "reports/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "harness/base/error.h"
#include "harness/base/names.h"

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

Json Number(double v) {
  return std::isfinite(v) ? Json(v) : Json(nullptr);
}

Json IntervalJson(const Interval& ci) {
  return Json::array({Number(ci.lo), Number(ci.hi)});
}

// JSON text as stored -> a JSON value (the text itself when it does not parse; null when empty).
Json StoredJson(const std::string& text) {
  if (text.empty()) return nullptr;
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  return j.is_discarded() ? Json(text) : j;
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

  if (options.run_id >= 0) {
    SPECBED_CHECK(std::count(summary.run_ids.begin(), summary.run_ids.end(), options.run_id) > 0,
                  "run ", options.run_id, " is not in results database '", db_path,
                  "' (runs: ", JoinIds(summary.run_ids), ")");
  }
  if (options.case_id >= 0) {
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

  SPECBED_CHECK(options.slice_begin >= 0 &&
                    (options.slice_end < 0 || options.slice_end >= options.slice_begin),
                "summary: the sample slice must satisfy 0 <= begin <= end (got ",
                options.slice_begin, ":", options.slice_end, ")");
  const bool filtered =
      !options.category.empty() || options.slice_begin > 0 || options.slice_end >= 0;
  // The selected samples of a case (category, then stream-order slice).
  auto select = [&](std::vector<SampleRecord> all) {
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
    row.is_baseline = c.record.method == kArMethod;
    const std::string label =
        StrCat("case ", c.case_id, " (", MethodLabel(c.record), ", run ", c.run_id, ")");
    cost_cases.push_back({c.case_id, &c.record, row.metrics.decode_tokens_per_s});
    if (IsSynthetic(c.record)) {
      summary.notes.push_back(label +
                              ": SYNTHETIC ACCEPTANCE (forced per-position acceptance "
                              "pattern): system overhead only, not a real measurement.");
    }
    const std::vector<SampleRecord>& own = samples_of(c.case_id);
    const bool paired = !own.empty() && own.front().has_paired_ar();
    if (!row.is_baseline) {
      const BaselineMatch match = FindArBaseline(cases, i, options.baseline);
      // Why there is no AR case: none at all, or only one measured on another machine.
      const std::string missing =
          match.refused_index < 0
              ? std::string("no AR case with the same workload")
              : StrCat("the only AR cases with the same workload ran on another machine (case ",
                       cases[match.refused_index].case_id, ", run ",
                       cases[match.refused_index].run_id, ": ", cases[match.refused_index].machine,
                       "; this case: ", c.machine, "), used only with --cross-machine-baseline");
      if (match.index < 0 && paired) {
        // Paired timing needs no AR case for the speedup (no exact match without one).
        row.speedup = ComputeSpeedup({}, own, options.bootstrap, options.scope);
        summary.notes.push_back(StrCat(label, ": ", missing,
                                       ": speedup from the paired AR runs only, no exact match."));
      } else if (match.index < 0) {
        summary.notes.push_back(StrCat(label, ": ", missing, ": no speedup or exact match."));
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
          summary.notes.push_back(
              StrCat(label, ": AR baseline is case ", base.case_id, " from run ", base.run_id,
                     match.same_machine ? " on the same machine"
                                        : StrCat(" on another machine (", base.machine, ")"),
                     " (no AR case with the same workload in run ", c.run_id, ")."));
        }
        if (row.speedup.n_matched == 0) {
          summary.notes.push_back(StrCat(label, ": shares no answered prompt with its AR case ",
                                         base.case_id, ": no speedup."));
        }
      }
    }
    summary.rows.push_back(std::move(row));
  }
  summary.cost_notes = CostRegimeNotes(cost_cases);
  return summary;
}

std::vector<std::string> CostRegimeNotes(const std::vector<CostCase>& cases) {
  std::vector<std::string> notes;
  std::set<std::string> labelled;
  std::vector<TargetCost> costs;
  for (const CostCase& c : cases) costs.push_back(TargetCostOf(*c.record));
  for (size_t i = 0; i < cases.size(); ++i) {
    const CostCase& c = cases[i];
    const TargetCost& cost = costs[i];
    if (!cost.label.empty() && labelled.insert(c.record->target).second) {
      notes.push_back(StrCat(c.record->target, " is the ", cost.label,
                             ": its outputs are the original's, its costs those of the larger "
                             "shape on this machine; not a real model of that size."));
    }
  }
  for (size_t i = 0; i < cases.size(); ++i) {
    const CostCase& c = cases[i];
    const TargetCost& cost = costs[i];
    if (c.record->method != kArMethod || cost.weight_bytes <= 0 || cost.bandwidth_gb_s <= 0 ||
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
  return notes;
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

std::string FormatSummaryTable(const Summary& s) {
  bool any_drafter = false;
  for (const SummaryRow& r : s.rows) any_drafter = any_drafter || !r.row.record.drafter.empty();

  struct Column {
    std::string header;
    bool right = true;
  };
  std::vector<Column> columns = {{"case"}, {"run"}, {"method", false}};
  if (any_drafter) columns.push_back({"drafter", false});
  for (const Column& c : std::vector<Column>{{"target", false},
                                             {"dataset", false},
                                             {"T"},
                                             {"n"},
                                             {"timing", false},
                                             {"tok/s"},
                                             {"nodes/step"},
                                             {"τ"},
                                             {"T_D%"},
                                             {"other%"},
                                             {"adapt%"},
                                             {"rollback%"},
                                             {"RB%"},
                                             {"fwd/ans"},
                                             {"busy D/V µs"},
                                             {"speedup [95% CI]"},
                                             {"Σ ratio [95% CI]"},
                                             {"Spec-Bench [95% CI]"},
                                             {"exact"},
                                             {"div min/med"},
                                             {"margin"},
                                             {"r_1..r_4", false},
                                             {"α_1..α_4", false}}) {
    columns.push_back(c);
  }

  std::vector<std::vector<std::string>> rows;
  for (const SummaryRow& r : s.rows) {
    const CaseRecord& c = r.row.record;
    const CaseMetrics& m = r.metrics;
    const ExactMatch& e = r.exact_match;
    std::vector<std::string> row = {std::to_string(r.row.case_id), std::to_string(r.row.run_id),
                                    MethodLabel(c)};
    if (any_drafter) row.push_back(c.drafter.empty() ? kNone : c.drafter);
    const bool compared = !r.is_baseline && r.baseline_case_id >= 0;
    std::string speedup =
        r.is_baseline ? "1.00 (baseline)" : WithInterval(r.speedup.geomean, r.speedup.geomean_ci);
    if (!r.is_baseline && r.speedup.n_paired > 0) speedup += " p";
    if (compared && !r.baseline_same_run && std::isfinite(r.speedup.geomean)) speedup += " *";
    const std::string total =
        r.is_baseline ? "1.00" : WithInterval(r.speedup.total_ratio, r.speedup.total_ratio_ci);
    const std::string spec_bench =
        r.is_baseline ? "1.00" : WithInterval(r.speedup.spec_bench, r.speedup.spec_bench_ci);
    std::string exact = kNone, divergence = kNone, margin = kNone;
    if (compared && e.n_matched > 0) {
      exact = StrCat(e.n_exact, "/", e.n_matched);
      if (!e.divergences.empty()) {
        divergence = StrCat(e.min_position, "/", General(e.median_position));
        margin = Fixed(e.min_margin, 3);
      }
    }
    for (const std::string& cell :
         {c.target,
          c.dataset,
          General(c.temperature),
          std::to_string(m.n_samples),
          TimingCell(c.timing_mode),
          Fixed(m.decode_tokens_per_s, 1),
          Fixed(m.drafted_per_step, 1),
          Fixed(m.tau, 2),
          Fixed(100.0 * m.draft_fraction, 1),
          Fixed(100.0 * m.other_fraction, 1),
          Fixed(100.0 * m.adapt_fraction, 1),
          Fixed(100.0 * m.rollback_rate, 1),
          Fixed(100.0 * m.spec_rollback_rate, 1),
          Fixed(m.target_forwards_per_sample, 1),
          std::isfinite(m.draft_busy_us_per_step)
              ? StrCat(Fixed(m.draft_busy_us_per_step, 0), "/", Fixed(m.verify_busy_us_per_step, 0))
              : std::string(kNone),
          speedup,
          total,
          spec_bench,
          exact,
          divergence,
          margin,
          Rates(m.positions.r),
          Rates(m.positions.alpha)}) {
      row.push_back(cell);
    }
    rows.push_back(std::move(row));
  }

  std::ostringstream out;
  out << "specbed summary: " << s.db_path << " (schema v" << s.schema_version << "), "
      << s.rows.size() << (s.rows.size() == 1 ? " case" : " cases")
      << "; runs in the database: " << JoinIds(s.run_ids) << "\n";
  if (rows.empty()) {
    out << "No cases recorded.\n";
    return out.str();
  }
  std::vector<size_t> widths(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) {
    widths[i] = Width(columns[i].header);
    for (const auto& row : rows) widths[i] = std::max(widths[i], Width(row[i]));
  }
  auto emit = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string pad(widths[i] - Width(cells[i]), ' ');
      if (i) line += "  ";
      line += columns[i].right ? pad + cells[i] : cells[i] + pad;
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  std::vector<std::string> headers;
  for (const Column& c : columns) headers.push_back(c.header);
  emit(headers);
  for (const auto& row : rows) emit(row);
  out << "\n"
      << "n = answers (prompt x turn); tok/s = decode tokens (after the first) / decode time; "
         "τ = tokens emitted per verify step (bonus token included);\n"
      << "T_D% / other% = drafting / other time as a share of decode time; adapt% = online "
         "adaptation (OSD updates), part of T_D%; rollback% = drafted tokens rejected;\n"
      << "RB% = rollback rate (specs/specbranch.md 1.4): rolled-back draft tokens / all drafted "
         "tokens incl. discarded parallel work; fwd/ans = target forwards per answer;\n"
      << "busy D/V = per-step busy time of the draft / target side (sum > step wall time when "
         "they overlapped, pearl/specbranch);\n"
      << "nodes/step = mean drafted nodes per verify step (beside the budget in the knobs); "
         "timing = paired (AR timed on the same prompt back to back, alternating order), "
         "per-case, or — (not recorded);\n"
      << SpeedupLegend(s.scope) << "[95% CI] = percentile bootstrap over prompts ("
      << s.bootstrap.n_resamples << " resamples, fixed seed); * = AR baseline from another run;\n"
      << "exact = answers token-identical to AR; div min/med = first divergence position (min / "
         "median); margin = smallest AR top-2 logit gap at a divergence;\n"
      << "r_i = P(accepted >= i | drafted >= i), α_i = P(accepted >= i | accepted >= i-1, drafted "
         ">= i) at draft position i.\n";
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

std::string SummaryJson(const Summary& s) {
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
    const CaseRecord& c = r.row.record;
    const CaseMetrics& m = r.metrics;
    Json j;
    j["case_id"] = r.row.case_id;
    j["run_id"] = r.row.run_id;
    j["case_key"] = c.case_key;
    j["method"] = c.method;
    j["knobs"] = StoredJson(c.method_knobs_json);
    j["knobs_short"] = KnobsShort(c.method_knobs_json);
    j["method_traits"] = StoredJson(c.method_traits_json);
    j["drafter"] = c.drafter;
    j["target"] = c.target;
    j["dataset"] = c.dataset;
    j["categories"] = c.categories;
    j["prompt_limit"] = c.prompt_limit;
    j["temperature"] = Number(c.temperature);
    j["top_p"] = Number(c.top_p);
    j["top_k"] = c.top_k;
    j["seed"] = c.seed;
    j["max_new_tokens"] = c.max_new_tokens;
    j["batch_size"] = c.batch_size;
    j["threads"] = c.threads;
    j["dtype"] = c.dtype;
    j["device"] = c.device;
    j["timing_mode"] = c.timing_mode;
    j["n_samples"] = m.n_samples;
    j["n_prompts"] = m.n_prompts;
    j["output_tokens"] = m.output_tokens;
    j["decode_tokens"] = m.decode_tokens;
    j["decode_ms"] = Number(m.decode_ms);
    j["decode_tokens_per_s"] = Number(m.decode_tokens_per_s);
    j["prefill_ms_mean"] = Number(m.prefill_ms_mean);
    j["stop_reasons"] = m.stop_reasons;
    j["n_steps"] = m.n_steps;
    j["drafted"] = m.drafted;
    j["accepted"] = m.accepted;
    j["emitted"] = m.emitted;
    j["tau"] = Number(m.tau);
    j["draft_fraction"] = Number(m.draft_fraction);
    j["verify_fraction"] = Number(m.verify_fraction);
    j["other_fraction"] = Number(m.other_fraction);
    j["adapt_ms"] = m.adapt_ms;
    j["adapt_fraction"] = Number(m.adapt_fraction);
    j["draft_us_per_step"] = Number(m.draft_us_per_step);
    j["verify_us_per_step"] = Number(m.verify_us_per_step);
    j["other_us_per_step"] = Number(m.other_us_per_step);
    j["drafted_per_step"] = Number(m.drafted_per_step);
    j["rollback_rate"] = Number(m.rollback_rate);
    j["rollback_events"] = m.rollback_events;
    j["spec_rollback_rate"] = Number(m.spec_rollback_rate);
    j["rolled_back_tokens"] = m.rolled_back;
    j["draft_generated_tokens"] = m.draft_generated;
    j["target_forwards"] = m.target_forwards;
    j["target_forwards_per_sample"] = Number(m.target_forwards_per_sample);
    j["draft_busy_us_per_step"] = Number(m.draft_busy_us_per_step);
    j["verify_busy_us_per_step"] = Number(m.verify_busy_us_per_step);
    j["rollback_events_per_step"] = Number(m.rollback_events_per_step);
    Json r_list = Json::array(), alpha_list = Json::array();
    for (double v : m.positions.r) r_list.push_back(Number(v));
    for (double v : m.positions.alpha) alpha_list.push_back(Number(v));
    j["acceptance"] = {{"max_depth", m.positions.max_depth()},
                       {"r", r_list},
                       {"alpha", alpha_list},
                       {"n_reached", m.positions.n_reached},
                       {"n_accepted", m.positions.n_accepted},
                       {"n_conditional", m.positions.n_conditional}};
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
                      {"geomean", Number(sp.geomean)},
                      {"geomean_ci", IntervalJson(sp.geomean_ci)},
                      {"total_ratio", Number(sp.total_ratio)},
                      {"total_ratio_ci", IntervalJson(sp.total_ratio_ci)},
                      {"spec_bench", Number(sp.spec_bench)},
                      {"spec_bench_ci", IntervalJson(sp.spec_bench_ci)}};
      Json divergences = Json::array();
      for (const auto& d : e.divergences) {
        divergences.push_back(
            {{"prompt_id", d.prompt_id},
             {"turn", d.turn},
             {"position", d.position},
             {"ar_token", d.ar_token >= 0 ? Json(d.ar_token) : Json(nullptr)},
             {"method_token", d.method_token >= 0 ? Json(d.method_token) : Json(nullptr)},
             {"margin", Number(d.margin)}});
      }
      j["exact_match"] = {
          {"n_matched", e.n_matched},
          {"n_exact", e.n_exact},
          {"rate", Number(e.rate)},
          {"min_divergence_position", e.min_position >= 0 ? Json(e.min_position) : Json(nullptr)},
          {"median_divergence_position", Number(e.median_position)},
          {"min_margin", Number(e.min_margin)},
          {"divergences", divergences}};
    } else {
      j["baseline"] = nullptr;
      j["speedup"] = nullptr;
      j["exact_match"] = nullptr;
    }
    cases.push_back(std::move(j));
  }
  doc["cases"] = std::move(cases);
  doc["notes"] = s.notes;
  doc["cost_notes"] = s.cost_notes;
  // Stored text may hold invalid UTF-8 (byte-level tokenizers): replace it instead of failing.
  return doc.dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace specbed
