// Tables in the papers' layout (per target and temperature: Spd and τ per benchmark, means, T_D%
// and rollback%), the paper-vs-measured table, the synthetic-acceptance flag and LaTeX rendering
// (see report.h).
// Checked by: tests/reports/paper_report_test.cpp (hand-computed values on synthetic databases).
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/names.h"
#include "reports/format.h"
#include "reports/report.h"
#include "reports/summary.h"

namespace specbed {
namespace {

using Json = nlohmann::json;
using report_format::Fixed;
using report_format::General;
using report_format::kNone;

bool HasSyntheticKey(const Json& j) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "synthetic_acceptance" && !it->is_null() &&
          !(it->is_boolean() && !it->get<bool>())) {
        return true;
      }
      if (HasSyntheticKey(*it)) return true;
    }
  } else if (j.is_array()) {
    for (const Json& e : j) {
      if (HasSyntheticKey(e)) return true;
    }
  }
  return false;
}

// A case of a paper table with the report group it belongs to.
struct Entry {
  const CaseReport* c;
  const ReportGroup* g;
};

// One benchmark column pair: a dataset, or one category of it.
struct Benchmark {
  std::string dataset, category;  // category "" = the whole dataset
  std::string label;
};

// Method configuration identity of a row (everything but dataset, categories, limit and T).
std::string RowKey(const ResultsStore::CaseRow& c) {
  const CaseRecord& r = c.record;
  return StrCat(c.run_id, "|", r.method, "|", r.method_knobs_json, "|", r.top_p, "|", r.top_k, "|",
                r.seed, "|", r.max_new_tokens, "|", r.dtype, "|", r.threads, "|", r.device, "|",
                r.batch_size);
}

std::vector<SampleRecord> SamplesOfCategory(const std::vector<SampleRecord>& samples,
                                            const std::string& category) {
  std::vector<SampleRecord> out;
  for (const SampleRecord& s : samples) {
    if (s.category == category) out.push_back(s);
  }
  return out;
}

std::vector<StepRecord> StepsOfSamples(const std::vector<StepRecord>& steps,
                                       const std::vector<SampleRecord>& samples) {
  std::set<std::pair<std::string, int32_t>> keep;
  for (const SampleRecord& s : samples) keep.insert({s.prompt_id, s.turn});
  std::vector<StepRecord> out;
  for (const StepRecord& st : steps) {
    if (keep.count({st.prompt_id, st.turn})) out.push_back(st);
  }
  return out;
}

std::string SpdCell(double v) {
  return std::isfinite(v) ? Fixed(v, 2) + "×" : kNone;
}

std::string MethodCell(const CaseRecord& r) {
  return IsSyntheticCase(r) ? r.method + " [" + kSyntheticMarker + "]" : r.method;
}

}  // namespace

bool IsSyntheticCase(const CaseRecord& c) {
  for (const std::string* text : {&c.config_json, &c.method_knobs_json}) {
    const Json j = Json::parse(*text, nullptr, false);
    if (!j.is_discarded() && HasSyntheticKey(j)) return true;
  }
  return false;
}

std::vector<StreamTable> BuildStreamTables(const ReportData& data, int64_t window) {
  SPECBED_CHECK(window >= 1, "report: the stream window must be >= 1 answer, got ", window);
  std::vector<StreamTable> out;
  for (const ReportGroup& g : data.groups) {
    std::vector<double> temps;
    for (const CaseReport& c : g.cases) {
      if (std::find(temps.begin(), temps.end(), c.row.record.temperature) == temps.end())
        temps.push_back(c.row.record.temperature);
    }
    for (double temp : temps) {
      std::vector<const CaseReport*> cases;
      bool adapts = false;
      for (const CaseReport& c : g.cases) {
        if (c.row.record.temperature != temp) continue;
        cases.push_back(&c);
        for (const StepRecord& st : c.steps) adapts = adapts || st.t_adapt_us > 0;
      }
      if (!adapts) continue;
      // The baseline's samples for the per-window speedups (paired AR runs take precedence in
      // ComputeSpeedup; otherwise answers are matched by prompt and turn).
      auto ar_samples = [&](const CaseReport& c) -> const std::vector<SampleRecord>* {
        for (const CaseReport& o : g.cases) {
          if (o.row.case_id == c.baseline_case_id) return &o.samples;
        }
        return nullptr;
      };
      const std::vector<SampleRecord> no_samples;
      StreamTable st;
      st.title = StrCat(g.target, " / ", g.dataset, " · T=", General(temp), " · windows of ",
                        window, " answers");
      ReportTable& t = st.table;
      t.columns.push_back({"window", false, false});
      t.columns.push_back({"answers", true, false});
      t.columns.push_back({"category", false, false});
      std::vector<const CaseReport*> shown;
      for (const CaseReport* c : cases) {
        if (c->is_ar) continue;
        shown.push_back(c);
        const std::string label = StrCat("case ", c->row.case_id, " ", c->row.record.method);
        st.case_labels.push_back(label);
        st.cases.push_back(c);
        st.tau.emplace_back();
        t.columns.push_back({"τ", true, false, label});
        t.columns.push_back({"Spd", true, false, label});
        t.columns.push_back({"upd s", true, false, label});
        const std::string knobs = KnobsShort(c->row.record.method_knobs_json);
        st.case_notes.push_back(StrCat("case ", c->row.case_id, ": ", MethodCell(c->row.record),
                                       knobs.empty() ? "" : " " + knobs));
      }
      size_t n_answers = 0;
      for (const CaseReport* c : shown) n_answers = std::max(n_answers, c->samples.size());
      const int64_t n_windows = (static_cast<int64_t>(n_answers) + window - 1) / window;
      // Per case: emitted tokens, steps and update time per answer (prompt, turn).
      std::vector<std::map<std::pair<std::string, int32_t>, std::array<double, 3>>> per(
          shown.size());
      for (size_t i = 0; i < shown.size(); ++i) {
        for (const StepRecord& r : shown[i]->steps) {
          auto& a = per[i][{r.prompt_id, r.turn}];
          a[0] += r.n_emitted;
          a[1] += 1;
          a[2] += r.t_adapt_us * 1e-6;
        }
      }
      auto add_row = [&](const std::string& name, size_t from, size_t to) {
        std::vector<std::string> row = {
            name, to == from + 1 ? std::to_string(to) : StrCat(from + 1, "–", to), ""};
        std::vector<std::string> cats;
        for (size_t i = 0; i < shown.size(); ++i) {
          const std::vector<SampleRecord>& s = shown[i]->samples;
          std::vector<SampleRecord> part;
          double emitted = 0, steps = 0, upd = 0;
          for (size_t j = from; j < std::min(to, s.size()); ++j) {
            part.push_back(s[j]);
            if (std::find(cats.begin(), cats.end(), s[j].category) == cats.end())
              cats.push_back(s[j].category);
            const auto it = per[i].find({s[j].prompt_id, s[j].turn});
            if (it == per[i].end()) continue;
            emitted += it->second[0];
            steps += it->second[1];
            upd += it->second[2];
          }
          const std::vector<SampleRecord>* ar = ar_samples(*shown[i]);
          BootstrapOptions none;
          none.n_resamples = 0;
          const Speedup sp = ComputeSpeedup(ar ? *ar : no_samples, part, none, data.scope);
          row.push_back(steps > 0 ? Fixed(emitted / steps, 2) : kNone);
          if (name != "all") st.tau[i].push_back(steps > 0 ? emitted / steps : kNoValue);
          row.push_back(sp.n_matched > 0 ? Fixed(sp.geomean, 2) : kNone);
          row.push_back(Fixed(upd, 1));
        }
        row[2] = Join(cats, "+");
        t.rows.push_back(std::move(row));
      };
      for (int64_t w = 0; w < n_windows; ++w) {
        add_row(std::to_string(w + 1), static_cast<size_t>(w * window),
                std::min(n_answers, static_cast<size_t>((w + 1) * window)));
      }
      add_row("all", 0, n_answers);
      out.push_back(std::move(st));
    }
  }
  return out;
}

// The measured cells of one paper-table row (a method configuration over its `cases`): Spd and τ
// per benchmark, then All (over every answer of the row: the cases' speedup, the figure of the
// headline and the summary), the papers' Mean over the benchmarks (secondary), T_D% and
// rollback%. Returns whether a benchmark lacks a value (the Mean is then marked "*").
bool AddPaperRowCells(const std::vector<Entry>& cases, const std::vector<Benchmark>& benchmarks,
                      SpeedupScope scope, std::vector<std::string>& notes,
                      std::vector<std::string>& row) {
  double spd_sum = 0, tau_sum = 0;
  int n_spd = 0, n_tau = 0;
  double draft_ms = 0, decode_ms = 0;
  int64_t drafted = 0, accepted = 0, emitted = 0, steps = 0;
  std::vector<double> all_ratios;  // every answer's speedup over the row's cases
  std::set<int64_t> used;
  for (const Benchmark& b : benchmarks) {
    const Entry* hit = nullptr;
    for (const Entry& e : cases) {
      if (e.c->row.record.dataset != b.dataset) continue;
      if (hit != nullptr) {
        notes.push_back(StrCat("case ", e.c->row.case_id, " repeats the configuration of case ",
                               hit->c->row.case_id, " on ", b.label, "; the table shows case ",
                               hit->c->row.case_id, "."));
        continue;
      }
      hit = &e;
    }
    double spd = kNoValue, tau = kNoValue;
    if (hit != nullptr) {
      const CaseReport& c = *hit->c;
      const CaseReport* base = nullptr;
      for (const CaseReport& other : hit->g->cases) {
        if (other.row.case_id == c.baseline_case_id) base = &other;
      }
      if (b.category.empty()) {
        spd = c.speedup.geomean;
        tau = c.metrics.tau;
      } else {
        const std::vector<SampleRecord> mine = SamplesOfCategory(c.samples, b.category);
        tau = ComputeCaseMetrics(mine, StepsOfSamples(c.steps, mine)).tau;
        const bool paired = !mine.empty() && mine.front().has_paired_ar();
        if (base != nullptr || paired) {
          BootstrapOptions no_ci;
          no_ci.n_resamples = 0;
          spd = ComputeSpeedup(base != nullptr ? SamplesOfCategory(base->samples, b.category)
                                               : std::vector<SampleRecord>{},
                               mine, no_ci, scope)
                    .geomean;
        }
      }
      if (used.insert(c.row.case_id).second) {
        draft_ms += c.metrics.draft_ms;
        decode_ms += c.metrics.decode_ms;
        drafted += c.metrics.drafted;
        accepted += c.metrics.accepted;
        emitted += c.metrics.emitted;
        steps += c.metrics.n_steps;
        all_ratios.insert(all_ratios.end(), c.speedup.per_prompt.begin(),
                          c.speedup.per_prompt.end());
      }
    }
    row.push_back(SpdCell(spd));
    row.push_back(Fixed(tau, 2));
    if (std::isfinite(spd)) spd_sum += spd, ++n_spd;
    if (std::isfinite(tau)) tau_sum += tau, ++n_tau;
  }
  const int n_bench = static_cast<int>(benchmarks.size());
  const bool incomplete = (n_spd > 0 && n_spd < n_bench) || (n_tau > 0 && n_tau < n_bench);
  row.push_back(SpdCell(all_ratios.empty() ? kNoValue : GeometricMean(all_ratios)));
  row.push_back(steps > 0 ? Fixed(static_cast<double>(emitted) / steps, 2) : kNone);
  row.push_back(n_spd ? SpdCell(spd_sum / n_spd) + (n_spd < n_bench ? "*" : "") : kNone);
  row.push_back(n_tau ? Fixed(tau_sum / n_tau, 2) + (n_tau < n_bench ? "*" : "") : kNone);
  bool has_steps = false;
  for (const Entry& e : cases) has_steps = has_steps || e.c->metrics.n_steps > 0;
  row.push_back(has_steps && decode_ms > 0 ? Fixed(100.0 * draft_ms / decode_ms, 1) : kNone);
  row.push_back(drafted > 0 ? Fixed(100.0 * (drafted - accepted) / drafted, 1) : kNone);
  return incomplete;
}

std::vector<PaperTable> BuildPaperTables(const ReportData& data) {
  // (target, T) in order of first appearance; cases of each, with the group they belong to.
  std::vector<std::pair<std::string, double>> keys;
  std::map<std::pair<std::string, double>, std::vector<Entry>> entries;
  for (const ReportGroup& g : data.groups) {
    for (const CaseReport& c : g.cases) {
      const auto key = std::make_pair(g.target, c.row.record.temperature);
      if (!entries.count(key)) keys.push_back(key);
      entries[key].push_back({&c, &g});
    }
  }
  std::sort(keys.begin(), keys.end());
  std::vector<PaperTable> tables;
  for (const auto& key : keys) {
    const std::vector<Entry>& all = entries[key];
    PaperTable pt;
    pt.target = key.first;
    pt.temperature = key.second;
    pt.title = StrCat(key.first, " · T=", General(key.second));
    // Benchmarks: datasets in order of appearance, split by category when a dataset's answers
    // (over every case of this target and temperature) have several categories.
    std::vector<std::string> datasets;
    std::map<std::string, std::set<std::string>> categories;
    for (const Entry& e : all) {
      const std::string& d = e.c->row.record.dataset;
      if (!categories.count(d)) datasets.push_back(d);
      for (const SampleRecord& s : e.c->samples) categories[d].insert(s.category);
    }
    std::vector<Benchmark> benchmarks;
    for (const std::string& d : datasets) {
      if (categories[d].size() <= 1) {
        benchmarks.push_back({d, "", d});
      } else {
        for (const std::string& cat : categories[d]) {
          benchmarks.push_back({d, cat, datasets.size() > 1 ? d + "/" + cat : cat});
        }
      }
    }
    // Rows: method configurations, in the order of the cases (AR excluded).
    std::vector<std::string> row_keys;
    std::map<std::string, std::vector<Entry>> row_cases;
    for (const Entry& e : all) {
      if (e.c->is_ar) continue;
      const std::string k = RowKey(e.c->row);
      if (!row_cases.count(k)) row_keys.push_back(k);
      row_cases[k].push_back(e);
    }
    if (row_keys.empty()) continue;
    ReportTable& t = pt.table;
    for (const char* h :
         {"run", "top_p", "top_k", "seed", "max new", "dtype", "threads", "device", "batch"}) {
      const std::string hs = h;
      t.columns.push_back({h, hs != "dtype" && hs != "device", true});
    }
    t.columns.insert(t.columns.begin(), {"knobs", false, true});
    t.columns.insert(t.columns.begin(), {"method", false, false});
    for (const Benchmark& b : benchmarks) {
      t.columns.push_back({"Spd", true, false, b.label});
      t.columns.push_back({"τ", true, false, b.label});
    }
    t.columns.push_back({"Spd", true, false, "All"});
    t.columns.push_back({"τ", true, false, "All"});
    t.columns.push_back({"Spd", true, false, "Mean of benchmarks"});
    t.columns.push_back({"τ", true, false, "Mean of benchmarks"});
    t.columns.push_back({"T_D%", true, false});
    t.columns.push_back({"rollback%", true, false});
    bool any_incomplete = false;
    for (const std::string& k : row_keys) {
      const std::vector<Entry>& cases = row_cases[k];
      const CaseReport& first = *cases[0].c;
      const CaseRecord& r = first.row.record;
      std::vector<std::string> row = {
          MethodCell(r),
          KnobsShort(r.method_knobs_json).empty() ? "none" : KnobsShort(r.method_knobs_json),
          std::to_string(first.row.run_id)};
      const std::vector<std::string> settings = DecodeSettingCells(r);
      row.insert(row.end(), settings.begin(), settings.end());
      any_incomplete =
          AddPaperRowCells(cases, benchmarks, data.scope, pt.notes, row) || any_incomplete;
      t.rows.push_back(std::move(row));
    }
    pt.notes.push_back(
        "All = over every answer of the row (Spd: geometric mean of the per-answer speedups, the "
        "figure of the headline and `specbed summary`; τ: Σ emitted / Σ steps). Mean of "
        "benchmarks = the papers' secondary figure, the arithmetic mean of the per-benchmark "
        "values: it weights each benchmark equally whatever its number of answers, so it differs "
        "from All whenever the benchmarks' speedups differ.");
    if (any_incomplete) {
      pt.notes.push_back("* = mean over the benchmarks with a value (some have none).");
    }
    t = HideConstantColumns(std::move(t));
    tables.push_back(std::move(pt));
  }
  return tables;
}

PaperComparison BuildPaperComparison(const ReportData& data, const PaperReference& ref) {
  PaperComparison out;
  out.heading = ref.paper.empty() ? ref.path : ref.paper;
  if (!ref.table.empty()) out.heading += ", " + ref.table;
  if (!ref.hardware.empty()) out.heading += " (" + ref.hardware + ")";
  out.notes = ref.notes;
  ReportTable& t = out.table;
  t.columns = {{"method", false, false},      {"knobs", false, true},   {"target", false, true},
               {"dataset", false, true},      {"T", true, true},        {"paper Spd", true, false},
               {"measured Spd", true, false}, {"paper τ", true, false}, {"measured τ", true, false},
               {"measured case", true, false}};
  for (size_t i = 0; i < ref.rows.size(); ++i) {
    const PaperReference::Row& r = ref.rows[i];
    std::vector<const CaseReport*> hits;
    for (const ReportGroup& g : data.groups) {
      for (const CaseReport& c : g.cases) {
        if (MatchesPaperRow(r, c.row.record)) hits.push_back(&c);
      }
    }
    const CaseReport* c = hits.empty() ? nullptr : hits[0];
    if (hits.size() > 1) {
      std::vector<std::string> ids;
      for (const CaseReport* h : hits) ids.push_back(std::to_string(h->row.case_id));
      out.match_notes.push_back(StrCat("reference row ", i + 1, " (", r.method, ", ", r.dataset,
                                       ") matches cases ", Join(ids, ", "),
                                       "; the first is shown."));
    }
    const std::string knobs = KnobsShort(r.knobs_json);
    std::string measured_spd = kNone;
    if (c != nullptr) measured_spd = c->is_ar ? "1.00×" : SpdCell(c->speedup.geomean);
    std::string method = r.method;
    if (c != nullptr && IsSyntheticCase(c->row.record)) {
      method += std::string(" [") + kSyntheticMarker + "]";
    }
    t.rows.push_back({method, knobs.empty() ? "any" : knobs, r.target.empty() ? "any" : r.target,
                      r.dataset, General(r.temperature), SpdCell(r.speedup), measured_spd,
                      Fixed(r.tau, 2), c ? Fixed(c->metrics.tau, 2) : kNone,
                      c ? std::to_string(c->row.case_id) : kNone});
  }
  t = HideConstantColumns(std::move(t));
  return out;
}

std::string LatexEscape(const std::string& s) {
  static const std::vector<std::pair<std::string, std::string>> kUnicode = {
      {"τ", "$\\tau$"}, {"α", "$\\alpha$"}, {"Σ", "$\\Sigma$"}, {"×", "$\\times$"},
      {"±", "$\\pm$"},  {"·", "$\\cdot$"},  {"—", "---"},       {"–", "--"},
      {"≥", "$\\geq$"}, {"≤", "$\\leq$"},   {"→", "$\\to$"},    {"−", "$-$"}};
  std::string out;
  for (size_t i = 0; i < s.size();) {
    bool replaced = false;
    for (const auto& [from, to] : kUnicode) {
      if (s.compare(i, from.size(), from) == 0) {
        out += to;
        i += from.size();
        replaced = true;
        break;
      }
    }
    if (replaced) continue;
    const char c = s[i++];
    switch (c) {
      case '\\':
        out += "\\textbackslash{}";
        break;
      case '&':
      case '%':
      case '$':
      case '#':
      case '_':
      case '{':
      case '}':
        out += '\\';
        out += c;
        break;
      case '~':
        out += "\\textasciitilde{}";
        break;
      case '^':
        out += "\\textasciicircum{}";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string LatexTable(const ReportTable& t, const std::string& caption) {
  std::ostringstream s;
  std::string cap = LatexEscape(caption);
  if (!t.constants.empty()) {
    std::vector<std::string> parts;
    for (const auto& [h, v] : t.constants) parts.push_back(LatexEscape(h) + " " + LatexEscape(v));
    cap += ". Same in every row: " + Join(parts, "; ");
  }
  s << "\\begin{table}[t]\n\\centering\n\\small\n\\caption{" << cap << "}\n\\begin{tabular}{";
  for (const auto& col : t.columns) s << (col.right_align ? 'r' : 'l');
  s << "}\n\\toprule\n";
  bool has_groups = false;
  for (const auto& col : t.columns) has_groups = has_groups || !col.group.empty();
  if (has_groups) {
    std::string rules;
    for (size_t c = 0; c < t.columns.size();) {
      size_t e = c + 1;
      while (e < t.columns.size() && !t.columns[c].group.empty() &&
             t.columns[e].group == t.columns[c].group) {
        ++e;
      }
      if (c > 0) s << " & ";
      if (!t.columns[c].group.empty()) {
        s << "\\multicolumn{" << e - c << "}{c}{" << LatexEscape(t.columns[c].group) << "}";
        rules += StrCat("\\cmidrule(lr){", c + 1, "-", e, "}");
      }
      c = e;
    }
    s << " \\\\\n" << rules << "\n";
  }
  for (size_t c = 0; c < t.columns.size(); ++c) {
    s << (c ? " & " : "") << LatexEscape(t.columns[c].header);
  }
  s << " \\\\\n\\midrule\n";
  for (const auto& row : t.rows) {
    for (size_t c = 0; c < row.size(); ++c) s << (c ? " & " : "") << LatexEscape(row[c]);
    s << " \\\\\n";
  }
  s << "\\bottomrule\n\\end{tabular}\n\\end{table}\n";
  return s.str();
}

}  // namespace specbed
