// `specbed report`: loads a results database, computes per-case metrics (metrics/metrics.h),
// builds the tables (constant columns hidden, llama-bench style) and writes report.md, index.html,
// tables.tex and the gnuplot plots into the report directory (see report.h, reports/README.md).
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

#include "harness/base/error.h"
#include "harness/base/mapped_file.h"
#include "harness/base/names.h"
#include "harness/base/paths.h"
#include "metrics/vllm_metrics.h"
#include "reports/plots.h"
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

// ---- Rendering helpers ------------------------------------------------------------------------

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string MdCell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// "Same in every row" line: ordinary constants, then the columns that have no data at all.
struct ConstantsText {
  std::vector<std::pair<std::string, std::string>> values;
  std::vector<std::string> no_data;
};
ConstantsText SplitConstants(const ReportTable& t) {
  ConstantsText out;
  for (const auto& [header, value] : t.constants) {
    if (value == kNone) {
      out.no_data.push_back(header);
    } else {
      out.values.emplace_back(header, value);
    }
  }
  return out;
}

std::string MarkdownTable(const ReportTable& t) {
  std::ostringstream s;
  const ConstantsText c = SplitConstants(t);
  if (!c.values.empty()) {
    s << "Same in every row: ";
    for (size_t i = 0; i < c.values.size(); ++i) {
      s << (i ? " · " : "") << "**" << MdCell(c.values[i].first) << "** "
        << MdCell(c.values[i].second);
    }
    s << "\n\n";
  }
  if (!c.no_data.empty()) {
    s << "No data (" << kNone << ") for: " << MdCell(Join(c.no_data, ", ")) << "\n\n";
  }
  s << "|";
  for (const auto& col : t.columns) {
    s << " " << MdCell(col.group.empty() ? col.header : col.group + " " + col.header) << " |";
  }
  s << "\n|";
  for (const auto& col : t.columns) s << (col.right_align ? "---:|" : "---|");
  s << "\n";
  for (const auto& row : t.rows) {
    s << "|";
    for (const auto& cell : row) s << " " << MdCell(cell) << " |";
    s << "\n";
  }
  return s.str();
}

// "a=1, b=2" -> <span class="token">a=1</span>, <span class="token">b=2</span> (escaped).
std::string WholeTokens(const std::string& cell) {
  std::string out;
  size_t start = 0;
  while (true) {
    const size_t comma = cell.find(", ", start);
    out += "<span class=\"token\">" + HtmlEscape(cell.substr(start, comma - start)) + "</span>";
    if (comma == std::string::npos) return out;
    out += ", ";
    start = comma + 2;
  }
}

std::string HtmlTable(const ReportTable& t) {
  std::ostringstream s;
  const ConstantsText c = SplitConstants(t);
  if (!c.values.empty()) {
    s << "<p class=\"constants\">Same in every row: ";
    for (size_t i = 0; i < c.values.size(); ++i) {
      s << (i ? " · " : "") << "<b>" << HtmlEscape(c.values[i].first) << "</b> "
        << HtmlEscape(c.values[i].second);
    }
    s << "</p>\n";
  }
  if (!c.no_data.empty()) {
    s << "<p class=\"constants\">No data (" << kNone
      << ") for: " << HtmlEscape(Join(c.no_data, ", ")) << "</p>\n";
  }
  s << "<div class=\"table-box\"><table>\n<thead>";
  bool has_groups = false;
  for (const auto& col : t.columns) has_groups = has_groups || !col.group.empty();
  if (has_groups) {
    s << "<tr>";
    for (size_t c = 0; c < t.columns.size();) {
      size_t e = c + 1;
      while (e < t.columns.size() && !t.columns[c].group.empty() &&
             t.columns[e].group == t.columns[c].group) {
        ++e;
      }
      s << "<th class=\"group\"" << (e - c > 1 ? StrCat(" colspan=\"", e - c, "\"") : "") << ">"
        << HtmlEscape(t.columns[c].group) << "</th>";
      c = e;
    }
    s << "</tr>";
  }
  s << "<tr>";
  for (const auto& col : t.columns) {
    s << "<th" << (col.right_align ? " class=\"num\"" : "") << ">" << HtmlEscape(col.header)
      << "</th>";
  }
  s << "</tr></thead>\n<tbody>\n";
  for (size_t r = 0; r < t.rows.size(); ++r) {
    const auto& row = t.rows[r];
    bool synthetic = false;
    for (const auto& cell : row)
      synthetic = synthetic || cell.find(kSyntheticMarker) != std::string::npos;
    s << (synthetic ? "<tr class=\"synthetic-row\">" : "<tr>");
    for (size_t i = 0; i < row.size(); ++i) {
      const bool titled = r < t.titles.size() && i < t.titles[r].size() && !t.titles[r][i].empty();
      s << "<td" << (t.columns[i].right_align ? " class=\"num\"" : "")
        << (titled ? " title=\"" + HtmlEscape(t.titles[r][i]) + "\"" : std::string()) << ">"
        << (t.columns[i].whole_tokens ? WholeTokens(row[i]) : HtmlEscape(row[i])) << "</td>";
    }
    s << "</tr>\n";
  }
  s << "</tbody>\n</table></div>\n";
  return s.str();
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

constexpr const char* kCss = R"css(
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1800px; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .2em; }
h2 { margin-top: 2em; border-bottom: 1px solid #eee; }
table { border-collapse: collapse; margin: .8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: .3em .6em; vertical-align: top; }
th { background: #f3f3f3; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tbody tr:nth-child(even) { background: #fafafa; }
p.constants { font-size: 0.9em; color: #444; }
code { background: #f3f3f3; padding: 0 .25em; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85em; color: #555; }
.warning { background: #fff4e0; border: 1px solid #e0a040; padding: .5em; }
.synthetic { background: #c62828; color: #fff; font-weight: bold; padding: .6em 1em;
             font-size: 1.1em; }
th.group { text-align: center; }
td:not(.num) { overflow-wrap: break-word; }
.table-box { overflow-x: auto; max-width: 100%; margin: .8em 0; }
.table-box > table { margin: 0; }
span.token { white-space: nowrap; }
tr.synthetic-row td { background: #fde0e0; }
details > summary { cursor: pointer; }
details > summary > h2 { display: inline; }
details.provenance td:first-child { white-space: nowrap; font-weight: bold; }
details.provenance td { font-size: 0.85em; max-width: 40em; }
.headline { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }
.headline-table { flex: 1 1 520px; }
.headline-table table { font-size: 0.85em; }
.headline-table td:first-child { overflow-wrap: normal; min-width: 8em; }
.headline-chart { flex: 1 1 380px; margin: 0; max-width: 720px; }
.slow-note { background: #f4f7ff; border: 1px solid #9ab; padding: .3em .8em; font-size: 0.9em; }
)css";

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
    c.is_ar = row.record.method == "ar";
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
        General(r.top_p),
        std::to_string(r.top_k),
        std::to_string(r.seed),
        std::to_string(r.max_new_tokens),
        r.dtype,
        std::to_string(r.threads),
        r.device,
        std::to_string(r.batch_size),
        r.timing_mode.empty() ? kNone : (r.timing_mode == "per_case" ? "per-case" : r.timing_mode),
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
    };
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

ReportResult WriteReport(const std::string& db_path, const std::string& out_dir,
                         const ReportOptions& options) {
  // Fails first when the database is bad.
  const ReportData data = LoadReportData(db_path, options.scope, options.baseline);
  const std::vector<std::string> conventions = ConventionsFor(options.scope);

  // Paper references: given ones must load; ones named in a config are warnings when they fail.
  std::vector<PaperReference> references;
  std::vector<std::string> early_warnings;
  std::set<std::string> seen_refs;
  for (const std::string& path : options.paper_references) {
    if (seen_refs.insert(path).second) references.push_back(LoadPaperReference(path));
  }
  {
    std::vector<std::string> named;
    for (const ReportRun& r : data.runs) {
      for (const auto& p : PaperReferencePaths(r.info.config_json)) named.push_back(p);
    }
    for (const ReportGroup& g : data.groups) {
      for (const CaseReport& c : g.cases) {
        for (const auto& p : PaperReferencePaths(c.row.record.config_json)) named.push_back(p);
      }
    }
    const std::string db_dir = fs::path(db_path).parent_path().string();
    for (const std::string& name : named) {
      // Relative paths (a config run from the SpecBed tree keeps them as written): as given
      // (from the working directory), else next to the database, else in the SpecBed home.
      std::string path = name;
      std::error_code ec;
      if (!fs::exists(path, ec) && fs::path(name).is_relative()) {
        for (const std::string& base : {db_dir, SpecBedHome()}) {
          if (base.empty() || !fs::exists(fs::path(base) / name, ec)) continue;
          path = (fs::path(base) / name).string();
          break;
        }
      }
      if (!seen_refs.insert(path).second) continue;
      try {
        references.push_back(LoadPaperReference(path));
      } catch (const Error& e) {
        early_warnings.push_back(StrCat("paper reference '", name,
                                        "' named in a config could not be loaded: ", e.what()));
      }
    }
  }

  SPECBED_CHECK(!out_dir.empty(), "report directory is empty");
  std::error_code ec;
  if (fs::exists(out_dir, ec)) {
    SPECBED_CHECK(fs::is_directory(out_dir, ec), "cannot create report directory '", out_dir,
                  "': a file with that name exists");
  } else {
    fs::create_directories(out_dir, ec);
    SPECBED_CHECK(!ec, "cannot create report directory '", out_dir, "': ", ec.message());
  }

  ReportResult result;
  auto warn = [&](const std::string& message) {
    result.warnings.push_back(message);
    if (options.print_warnings)
      std::fprintf(stderr, "specbed report: warning: %s\n", message.c_str());
  };
  for (const auto& w : early_warnings) warn(w);

  const std::vector<PaperTable> paper_tables = BuildPaperTables(data);
  const std::vector<StreamTable> stream_tables = BuildStreamTables(data, options.stream_window);
  const std::string stream_intro = StrCat(
      "Cases that trained online (OSD, the SpecBlock bandit) next to the others of the same "
      "target, dataset and temperature, per window of ",
      options.stream_window,
      " consecutive answers in the order they ran: τ = tokens per verify step, Spd = speedup vs. "
      "AR (geometric mean over the window's answers), upd s = online-update seconds charged to "
      "the window's answers (already inside their decode time).");
  std::vector<PaperComparison> comparisons;
  for (const PaperReference& ref : references) {
    comparisons.push_back(BuildPaperComparison(data, ref));
  }
  std::vector<std::string> synthetic_cases;
  for (const ReportGroup& g : data.groups) {
    for (const CaseReport& c : g.cases) {
      if (IsSyntheticCase(c.row.record)) {
        synthetic_cases.push_back(StrCat(c.row.case_id, " (", c.row.record.method, ")"));
      }
    }
  }
  const std::string synthetic_banner =
      synthetic_cases.empty()
          ? ""
          : StrCat(kSyntheticMarker, ": case", synthetic_cases.size() > 1 ? "s " : " ",
                   Join(synthetic_cases, ", "),
                   " used synthetic acceptance (config key \"synthetic_acceptance\"); their "
                   "speedup, τ and acceptance numbers are not real measurements.");

  // The targets' cost regime (cost twins, AR's memory-roofline fraction), shown before the
  // speedup tables.
  std::vector<CostCase> cost_cases;
  for (const ReportGroup& g : data.groups) {
    for (const CaseReport& c : g.cases) {
      cost_cases.push_back({c.row.case_id, &c.row.record, c.metrics.decode_tokens_per_s});
    }
  }
  const std::vector<std::string> cost_notes = CostRegimeNotes(cost_cases);
  for (const std::string& note : cost_notes) {  // a target where speculation cannot pay
    if (note.rfind("WARNING: ", 0) == 0) warn(note.substr(9));
  }

  // Tables and plot scripts.
  struct Section {
    std::string heading;
    ReportTable table;
    std::vector<Plot> plots;
    std::vector<std::string> notes;
  };
  std::vector<Section> sections;
  for (size_t g = 0; g < data.groups.size(); ++g) {
    const ReportGroup& group = data.groups[g];
    Section s;
    s.heading = group.target + " / " + group.dataset;
    s.table = BuildCaseTable(group);
    const std::vector<std::string> labels = CaseLabels(group);
    std::vector<std::string> skipped;
    s.plots = BuildGroupPlots(group, labels, static_cast<int>(g + 1), &skipped);
    for (Plot& p : BuildGroupFigures(group, labels, static_cast<int>(g + 1), &skipped)) {
      s.plots.push_back(std::move(p));
    }
    for (const CaseReport& c : group.cases) {
      if (!c.is_ar && c.baseline_case_id >= 0 && !c.baseline_same_run) {
        s.notes.push_back(StrCat(
            "case ", c.row.case_id, " (", c.row.record.method, ", run ", c.row.run_id,
            ") is compared with AR case ", c.baseline_case_id, " of another run",
            c.baseline_same_machine ? " on the same machine"
                                    : StrCat(" on another machine (", c.baseline_machine, ")"),
            " (none with the same workload in its run)."));
      }
      if (!c.is_ar && c.baseline_case_id < 0 && c.refused_baseline_case_id >= 0) {
        s.notes.push_back(
            StrCat("case ", c.row.case_id, " (", c.row.record.method,
                   "): its only AR case with the same workload (case ", c.refused_baseline_case_id,
                   ") ran on another machine, used only with "
                   "--cross-machine-baseline: no speedup",
                   c.speedup.n_matched > 0 ? " but the paired one" : "", ", no exact match."));
      } else if (!c.is_ar && c.baseline_case_id < 0 && c.speedup.n_matched == 0) {
        s.notes.push_back(StrCat("case ", c.row.case_id, " (", c.row.record.method,
                                 ") has no AR case with the same workload: no speedup."));
      } else if (!c.is_ar && c.speedup.n_matched == 0) {
        s.notes.push_back(StrCat("case ", c.row.case_id, " (", c.row.record.method,
                                 ") shares no answered prompt with its AR case ",
                                 c.baseline_case_id, ": no speedup."));
      }
    }
    if (!group.has_steps()) {
      s.notes.push_back(
          "No speculative steps recorded: speedup-vs-T_D, τ, per-position acceptance, budget, "
          "phase-time and τ-vs-temperature figures skipped.");
    } else {
      for (auto& n : skipped) s.notes.push_back(std::move(n));
    }
    sections.push_back(std::move(s));
  }
  std::vector<Plot> stream_plots;
  for (size_t i = 0; i < stream_tables.size(); ++i) {
    // A line needs two windows (one window: the table says it all; gnuplot warns on [1:1]).
    if (!stream_tables[i].tau.empty() && stream_tables[i].tau[0].size() >= 2)
      stream_plots.push_back(BuildStreamPlot(stream_tables[i], static_cast<int>(i + 1)));
  }
  const std::vector<HeadlineTable> headlines = BuildHeadlineTables(data);
  std::vector<Plot> headline_plots(headlines.size());  // empty name: no chart
  for (size_t i = 0; i < headlines.size(); ++i) {
    headline_plots[i] = BuildHeadlinePlot(headlines[i], static_cast<int>(i + 1));
  }
  Section bench_section;
  bench_section.heading = "Bench: AR decode speed (specbed bench)";
  if (!data.bench.empty()) {
    bench_section.table = BuildBenchTable(data.bench);
    bench_section.plots = BuildBenchPlots(data.bench);
  }

  // Plots.
  std::vector<const Plot*> all_plots;
  for (const auto& p : headline_plots) {
    if (!p.name.empty()) all_plots.push_back(&p);
  }
  for (const auto& s : sections) {
    for (const auto& p : s.plots) all_plots.push_back(&p);
  }
  for (const auto& p : bench_section.plots) all_plots.push_back(&p);
  for (const auto& p : stream_plots) all_plots.push_back(&p);
  std::string script;
  for (const Plot* p : all_plots) script += "# " + p->title + "\n" + p->script;
  const std::string out = out_dir;
  std::set<std::string> plotted;  // plot names whose PNG and SVG exist
  if (!script.empty()) {
    WriteTextFile(out + "/plots.gp",
                  "# gnuplot script of this report (regenerate the plots: cd into this directory "
                  "and run `LC_ALL=C.UTF-8 gnuplot plots.gp`; UTF-8 text).\n" +
                      script);
    const std::string program = GnuplotProgram(options.gnuplot);
    const std::string found = FindExecutable(program);
    if (found.empty()) {
      warn(StrCat("gnuplot program '", program,
                  "' not found: the report has tables but no plots (install gnuplot, e.g. Debian "
                  "package gnuplot-nox, or set SPECBED_GNUPLOT to its path)"));
    } else {
      for (const Plot* p : all_plots) {
        for (const char* ext : {".png", ".svg"}) fs::remove(out + "/" + p->name + ext, ec);
      }
      const std::string error = RunGnuplot(found, out, script);
      if (!error.empty()) warn("gnuplot failed, some plots may be missing: " + error);
      // gnuplot's own warnings (it exits 0 after them) are report warnings too.
      if (error.empty() && fs::exists(out + "/gnuplot.log", ec)) {
        for (const std::string& w : GnuplotWarnings(ReadFileToString(out + "/gnuplot.log"))) {
          warn(StrCat("gnuplot: ", w, " (see ", out, "/gnuplot.log)"));
        }
      }
      for (const Plot* p : all_plots) {
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
    }
  }

  // LaTeX.
  const std::string generated = NowUtc();
  {
    std::ostringstream tex;
    tex << "% SpecBed report tables (" << db_path << ", generated " << generated
        << " by specbed report).\n% Needs \\usepackage{booktabs}.\n\n";
    for (const PaperTable& pt : paper_tables) {
      tex << "% " << pt.title << "\n"
          << LatexTable(pt.table,
                        "Speedup (Spd, geometric mean vs. AR) and mean accepted length "
                        "(τ) per benchmark — " +
                            pt.title)
          << "\n";
    }
    for (const PaperComparison& pc : comparisons) {
      tex << "% paper vs measured: " << pc.heading << "\n"
          << LatexTable(pc.table, "Paper vs measured — " + pc.heading) << "\n";
    }
    for (const StreamTable& st : stream_tables) {
      tex << "% adaptation over the stream: " << st.title << "\n"
          << LatexTable(st.table, "Adaptation over the stream — " + st.title) << "\n";
    }
    if (paper_tables.empty() && comparisons.empty()) {
      tex << "% No speculative cases: no tables.\n";
    }
    result.tables_tex = out + "/tables.tex";
    WriteTextFile(result.tables_tex, tex.str());
  }

  // Markdown.
  std::ostringstream md;
  md << "# SpecBed report\n\n"
     << "Results database: `" << db_path << "` · generated " << generated << " by `specbed report`"
     << "\n\n";
  if (!synthetic_banner.empty()) md << "> **" << MdCell(synthetic_banner) << "**\n\n";
  for (const auto& w : result.warnings) md << "> **Warning:** " << MdCell(w) << "\n\n";
  if (sections.empty()) md << "No cases recorded.\n\n";
  if (!headlines.empty()) {
    md << "## Headline\n\n"
       << "Per target and temperature, every speculative case, best speedup first: speedup = "
          "geometric mean over answers of method decode tok/s ÷ AR's, with its 95% bootstrap CI "
          "over prompts; τ = tokens per verify step; T_D% = drafting share of decode time; exact "
          "match = answers identical to AR's.\n\n";
    for (size_t i = 0; i < headlines.size(); ++i) {
      const HeadlineTable& h = headlines[i];
      md << "### " << h.title << "\n\n" << MarkdownTable(h.table) << "\n";
      const Plot& p = headline_plots[i];
      if (!p.name.empty() && plotted.count(p.name)) {
        md << "![" << p.title << "](" << p.name << ".png)\n\n";
      }
      if (!h.slow_notes.empty()) {
        md << "**Why some speedups are below 1×:** " << MdCell(h.slow_explanation) << "\n\n";
        for (const auto& n : h.slow_notes) md << "- " << MdCell(n) << "\n";
        md << "\n";
      }
    }
  }
  if (!cost_notes.empty()) {
    md << "## Cost regime\n\n";
    for (const auto& n : cost_notes) md << "- " << MdCell(n) << "\n";
    md << "\n";
  }
  if (!paper_tables.empty()) {
    md << "## Results (paper layout)\n\n"
       << "Spd = speedup vs. AR (geometric mean over answers of method decode tok/s ÷ AR decode "
          "tok/s, see Conventions), τ = tokens per verify step; also "
          "in `tables.tex` (LaTeX, booktabs).\n\n";
    for (const PaperTable& pt : paper_tables) {
      md << "### " << pt.title << "\n\n" << MarkdownTable(pt.table) << "\n";
      for (const auto& n : pt.notes) md << "- " << MdCell(n) << "\n";
      if (!pt.notes.empty()) md << "\n";
    }
  }
  for (const PaperComparison& pc : comparisons) {
    md << "## Paper vs measured: " << pc.heading << "\n\n";
    if (!pc.notes.empty()) md << MdCell(pc.notes) << "\n\n";
    md << MarkdownTable(pc.table) << "\n";
    for (const auto& n : pc.match_notes) md << "- " << MdCell(n) << "\n";
    if (!pc.match_notes.empty()) md << "\n";
  }
  auto md_plots = [&](const std::vector<Plot>& plots) {
    for (const auto& p : plots) {
      if (!plotted.count(p.name)) continue;
      md << "![" << p.title << "](" << p.name << ".png)\n\n"
         << "*" << p.caption << "* ([SVG](" << p.name << ".svg))\n\n";
    }
  };
  if (!stream_tables.empty()) {
    md << "## Adaptation over the stream\n\n" << MdCell(stream_intro) << "\n\n";
    for (const StreamTable& st : stream_tables) {
      md << "### " << st.title << "\n\n" << MarkdownTable(st.table) << "\n";
      for (const auto& n : st.case_notes) md << "- " << MdCell(n) << "\n";
      md << "\n";
    }
    md_plots(stream_plots);
  }
  for (const auto& s : sections) {
    md << "## Details: " << s.heading << "\n\n" << MarkdownTable(s.table) << "\n";
    for (const auto& n : s.notes) md << "- " << n << "\n";
    if (!s.notes.empty()) md << "\n";
    md_plots(s.plots);
  }
  if (!data.bench.empty()) {
    md << "## " << bench_section.heading << "\n\n" << MarkdownTable(bench_section.table) << "\n";
    md_plots(bench_section.plots);
  }
  md << "## Provenance\n\n";
  if (data.runs.empty()) {
    md << "No runs recorded.\n\n";
  } else {
    md << MarkdownTable(RunsTable(data.runs)) << "\n";
  }
  md << "## Conventions\n\n";
  for (const auto& c : conventions) md << "- " << c << "\n";
  md << "\n";

  // HTML.
  std::ostringstream html;
  html << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       << "<title>SpecBed report — " << HtmlEscape(db_path) << "</title>\n<style>" << kCss
       << "</style>\n</head>\n<body>\n"
       << "<h1>SpecBed report</h1>\n<p>Results database: <code>" << HtmlEscape(db_path)
       << "</code> · generated " << generated << " by <code>specbed report</code></p>\n";
  if (!synthetic_banner.empty()) {
    html << "<p class=\"synthetic\" id=\"synthetic-banner\">" << HtmlEscape(synthetic_banner)
         << "</p>\n";
  }
  for (const auto& w : result.warnings) {
    html << "<p class=\"warning\"><b>Warning:</b> " << HtmlEscape(w) << "</p>\n";
  }
  if (sections.empty()) html << "<p>No cases recorded.</p>\n";
  if (!headlines.empty()) {
    html << "<h2 id=\"headline\">Headline</h2>\n<p class=\"constants\">Best speedup first. "
            "Speedup = geometric mean over answers of method ÷ AR decode tok/s [95% bootstrap CI "
            "over prompts]; τ = tokens per verify step; T_D% = drafting share of decode time; "
            "exact match = answers identical to AR's (Conventions at the end).</p>\n";
    for (size_t i = 0; i < headlines.size(); ++i) {
      const HeadlineTable& h = headlines[i];
      // Title, then the chart and the table side by side (the chart first when they wrap).
      html << "<h3>" << HtmlEscape(h.title) << "</h3>\n<div class=\"headline\">";
      const Plot& p = headline_plots[i];
      if (!p.name.empty() && plotted.count(p.name)) {
        html << "<figure class=\"headline-chart\"><img src=\"" << HtmlEscape(p.name)
             << ".png\" alt=\"" << HtmlEscape(p.title) << "\"><figcaption>" << HtmlEscape(p.caption)
             << " (<a href=\"" << HtmlEscape(p.name) << ".svg\">SVG</a>)</figcaption></figure>\n";
        result.images.push_back(p.name + ".png");
      }
      html << "<div class=\"headline-table\">" << HtmlTable(h.table) << "</div>\n";
      html << "</div>\n";
      if (!h.slow_notes.empty()) {
        html << "<div class=\"slow-note\"><b>Why some speedups are below 1×:</b> "
             << HtmlEscape(h.slow_explanation) << "<ul>\n";
        for (const auto& n : h.slow_notes) html << "<li>" << HtmlEscape(n) << "</li>\n";
        html << "</ul></div>\n";
      }
    }
  }
  if (!cost_notes.empty()) {
    html << "<h2 id=\"cost-regime\">Cost regime</h2>\n<ul>\n";
    for (const auto& n : cost_notes) html << "<li>" << HtmlEscape(n) << "</li>\n";
    html << "</ul>\n";
  }
  if (!paper_tables.empty()) {
    html << "<h2>Results (paper layout)</h2>\n<p>Spd = speedup vs. AR (geometric mean over "
            "answers of method decode tok/s ÷ AR decode tok/s, see Conventions), τ = tokens per "
            "verify step; also in <a href=\"tables.tex\">tables.tex</a> "
            "(LaTeX, booktabs).</p>\n";
    for (const PaperTable& pt : paper_tables) {
      html << "<h3>" << HtmlEscape(pt.title) << "</h3>\n" << HtmlTable(pt.table);
      if (!pt.notes.empty()) {
        html << "<ul>\n";
        for (const auto& n : pt.notes) html << "<li>" << HtmlEscape(n) << "</li>\n";
        html << "</ul>\n";
      }
    }
  }
  for (const PaperComparison& pc : comparisons) {
    html << "<h2>Paper vs measured: " << HtmlEscape(pc.heading) << "</h2>\n";
    if (!pc.notes.empty()) html << "<p>" << HtmlEscape(pc.notes) << "</p>\n";
    html << HtmlTable(pc.table);
    if (!pc.match_notes.empty()) {
      html << "<ul>\n";
      for (const auto& n : pc.match_notes) html << "<li>" << HtmlEscape(n) << "</li>\n";
      html << "</ul>\n";
    }
  }
  auto html_plots = [&](const std::vector<Plot>& plots) {
    for (const auto& p : plots) {
      if (!plotted.count(p.name)) continue;
      html << "<figure><img src=\"" << HtmlEscape(p.name) << ".png\" alt=\"" << HtmlEscape(p.title)
           << "\"><figcaption>" << HtmlEscape(p.caption) << " (<a href=\"" << HtmlEscape(p.name)
           << ".svg\">SVG</a>)</figcaption></figure>\n";
      result.images.push_back(p.name + ".png");
    }
  };
  if (!stream_tables.empty()) {
    html << "<h2 id=\"stream\">Adaptation over the stream</h2>\n<p>" << HtmlEscape(stream_intro)
         << "</p>\n";
    for (const StreamTable& st : stream_tables) {
      html << "<h3>" << HtmlEscape(st.title) << "</h3>\n" << HtmlTable(st.table) << "<ul>\n";
      for (const auto& n : st.case_notes) html << "<li>" << HtmlEscape(n) << "</li>\n";
      html << "</ul>\n";
    }
    html_plots(stream_plots);
  }
  for (size_t i = 0; i < sections.size(); ++i) {
    const auto& s = sections[i];
    html << "<h2 id=\"details-" << i + 1 << "\">Details: " << HtmlEscape(s.heading) << "</h2>\n"
         << HtmlTable(s.table);
    if (!s.notes.empty()) {
      html << "<ul>\n";
      for (const auto& n : s.notes) html << "<li>" << HtmlEscape(n) << "</li>\n";
      html << "</ul>\n";
    }
    html_plots(s.plots);
  }
  if (!data.bench.empty()) {
    html << "<h2>" << HtmlEscape(bench_section.heading) << "</h2>\n"
         << HtmlTable(bench_section.table);
    html_plots(bench_section.plots);
  }
  html
      << "<details id=\"provenance\" class=\"provenance\"><summary><h2>Provenance</h2></summary>\n";
  if (data.runs.empty()) {
    html << "<p>No runs recorded.</p>\n";
  } else {
    html << HtmlTable(RunsTable(data.runs));
  }
  html << "</details>\n<details id=\"conventions\"><summary><h2>Conventions</h2></summary>\n<ul>\n";
  for (const auto& c : conventions) html << "<li>" << HtmlEscape(c) << "</li>\n";
  html << "</ul>\n</details>\n</body>\n</html>\n";

  result.report_md = out + "/report.md";
  result.index_html = out + "/index.html";
  WriteTextFile(result.report_md, md.str());
  WriteTextFile(result.index_html, html.str());
  return result;
}

}  // namespace specbed
