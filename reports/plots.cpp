// gnuplot scripts for the report plots and the papers' figures, and running gnuplot (see
// plots.h).
// Checked by: tests/reports/report_test.cpp, tests/reports/headline_test.cpp,
// tests/reports/locale_test.cpp.
#include "reports/plots.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/locale_pin.h"
#include "base/mapped_file.h"
#include "metrics/vllm_metrics.h"
#include "reports/summary.h"

namespace specbed {
namespace {

// Image size: 960x540, taller when the key has more entries than fit beside a 540-pixel plot
// (about 26 lines of the 11-point font), so that the key stays outside the plot and readable.
int HeightFor(const std::string& plot) {
  int entries = 0;
  for (const char* what : {" title '", "columnheader("}) {
    for (size_t at = plot.find(what); at != std::string::npos; at = plot.find(what, at + 1)) {
      ++entries;
    }
  }
  return entries > 26 ? 540 + 18 * (entries - 26) : 540;
}

// A gnuplot single-quoted string literal. Single quotes inside become double quotes rather than
// the '' escape: gnuplot 5.4 misparses a doubled-quote run such as '''' (an empty knob value in a
// label) and drops the whole plot command.
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? '"' : c;
  return out + "'";
}

// A quoted string inside a datablock (no escapes there: double quotes become single quotes).
std::string DataString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += (c == '"') ? '\'' : (c == '\n' ? ' ' : c);
  return out + "\"";
}

// Plot labels: double quotes become single quotes so that a label looks the same in a datablock
// and in a title (JSON knobs then read {'k':4}).
std::string PlotLabel(const std::string& s) {
  std::string out = s;
  std::replace(out.begin(), out.end(), '"', '\'');
  return out;
}

std::string Num(double v) {
  if (!std::isfinite(v)) return "NaN";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

std::string TemperatureLabel(double t) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "T=%g", t);
  return buf;
}

// Terminal setup, the plot command(s), and the same plot again as SVG; sets p's image size.
std::string Render(Plot& p, const std::string& setup, const std::string& plot) {
  std::ostringstream s;
  p.width = 960;
  p.height = HeightFor(plot);
  const std::string& name = p.name;
  const std::string size = StrCat("size ", p.width, ",", p.height);
  s << "set encoding utf8\n"
    << "set terminal pngcairo " << size << " noenhanced font 'Sans,11'\n"
    << "set output " << Quote(name + ".png") << "\n"
    << setup << plot << "\n"
    << "set terminal svg " << size << " noenhanced font 'Sans,11' background rgb 'white'\n"
    << "set output " << Quote(name + ".svg") << "\n"
    << "replot\n"
    << "unset output\n"
    << "reset\n\n";
  return s.str();
}

std::string Header(const std::string& title, const std::string& xlabel, const std::string& ylabel) {
  std::ostringstream s;
  s << "set title " << Quote(title) << "\n"
    << "set xlabel " << Quote(xlabel) << "\n"
    << "set ylabel " << Quote(ylabel) << "\n"
    << "set grid ytics\n"
    << "set key outside right top box\n";
  return s.str();
}

std::string GroupName(const ReportGroup& g) {
  return g.target + " / " + g.dataset;
}

std::string WithTemperature(const std::string& label, double t) {
  return PlotLabel(label) + " " + TemperatureLabel(t);
}

// `lc rgb '#rrggbb' pt N` of a case: its method's colour and marker (the same in every plot).
std::string CaseStyle(const CaseReport& c) {
  return StrCat("lc rgb ", Quote(MethodColor(c.method_index)), " pt ",
                MethodMarker(c.method_index, c.setting_index));
}

// The colour as the integer gnuplot's `lc rgb variable` reads from a data column.
long ColorInt(const std::string& hex) {
  return std::strtol(hex.c_str() + 1, nullptr, 16);
}

// `set xrange` from the data: [lo - 5% of the span, hi + 5%] (span at least `min_span`).
std::string XRangeFromData(double lo, double hi, double min_span) {
  const double pad = 0.05 * std::max(hi - lo, min_span);
  return StrCat("set xrange [", Num(lo - pad), ":", Num(hi + pad), "]\n");
}

}  // namespace

std::string MethodColor(int method_index) {
  static const char* kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                   "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
                                   "#000080", "#808000", "#00c000", "#ff00ff", "#800000",
                                   "#00a0a0", "#f0a000", "#6060ff", "#a0a0a0", "#000000"};
  const int n = static_cast<int>(sizeof(kPalette) / sizeof(kPalette[0]));
  return kPalette[((method_index % n) + n) % n];
}

int MethodMarker(int method_index, int setting_index) {
  // One shape per method (circle, square, triangle up, triangle down, diamond, pentagon), filled
  // for its first knob setting and open for the next, alternating.
  static const int kFilled[] = {7, 5, 9, 11, 13, 15};
  const int n = static_cast<int>(sizeof(kFilled) / sizeof(kFilled[0]));
  const int filled = kFilled[((method_index % n) + n) % n];
  return setting_index % 2 == 0 ? filled : filled - 1;
}

std::vector<std::string> GnuplotWarnings(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::string lower = line;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (lower.find("warning:") != std::string::npos) {
      const size_t b = line.find_first_not_of(" \t\"");
      out.push_back(b == std::string::npos ? line : line.substr(b));
    }
  }
  return out;
}

Plot BuildHeadlinePlot(const HeadlineTable& table, int index) {
  Plot p;
  p.name = "headline_speedup_" + std::to_string(index);
  p.title = "Speedup vs. AR — " + table.title;
  p.caption =
      "Speedup (geometric mean over answers of method decode tok/s ÷ AR's) per case, best first; "
      "bars coloured by method, whiskers = 95% bootstrap CI over prompts (none under 5 prompts), "
      "dashed = AR (1.0×).";
  std::ostringstream data;
  data << "$" << p.name << " << EOD\n";
  double ymax = 1.0;
  int n = 0;
  for (const CaseReport* c : table.cases) {
    const Speedup& s = c->speedup;
    if (!std::isfinite(s.geomean)) continue;
    std::string label = c->label;
    if (table.table.constants.empty() || table.table.constants[0].first != "dataset") {
      label += " (" + c->row.record.dataset + ")";  // several datasets in the table
    }
    // No whisker for an interval over fewer than kMinPromptsForInterval prompts (as in tables).
    const Interval ci = s.n_prompts < kMinPromptsForInterval ? Interval{} : s.geomean_ci;
    data << DataString(PlotLabel(label)) << " " << Num(s.geomean) << " " << Num(ci.lo) << " "
         << Num(ci.hi) << " " << ColorInt(MethodColor(c->method_index)) << "\n";
    ymax = std::max(ymax, s.geomean);
    if (std::isfinite(ci.hi)) ymax = std::max(ymax, ci.hi);
    ++n;
  }
  data << "EOD\n";
  if (n == 0) return {};
  std::ostringstream setup, plot;
  setup << Header(p.title, "case (method and the knobs that differ)",
                  "speedup vs. AR (×, geometric mean over answers)")
        << "set style fill solid 0.85 border -1\n"
        << "set boxwidth 0.6\n"
        << "set xrange [-0.6:" << Num(n - 0.4) << "]\n"
        << "set yrange [0:" << Num(ymax * 1.12) << "]\n"
        << "set xtics rotate by -30 font ',9'\n";
  plot << "plot $" << p.name
       << " using 0:2:(0.6):5:xtic(1) with boxes lc rgb variable notitle, \\\n"
       << "     $" << p.name
       << " using 0:2:3:4 with yerrorbars lc rgb 'black' pt -1 lw 1.5 title '95% CI', \\\n"
       << "     1 with lines dt 2 lw 1.5 lc rgb 'gray30' title 'AR (1.0×)'";
  p.script = data.str() + Render(p, setup.str(), plot.str());
  return p;
}

namespace {

// True when every answer of every case stopped at max_new_tokens: the decode scatter would put
// every point on one vertical line.
bool AllAnswersHitMaxTokens(const ReportGroup& group) {
  for (const CaseReport& c : group.cases) {
    for (const SampleRecord& s : c.samples) {
      if (s.stop_reason != "max_new_tokens") return false;
    }
  }
  return true;
}

// At most this many data series (legend entries of cases) in one plot: more are split per
// temperature and cut to the fastest (CaseFacets, ShownCases).
constexpr size_t kMaxSeries = 8;

// Best speedup first, AR cases before every speculative one, cases without a speedup last.
bool FasterFirst(const CaseReport& x, const CaseReport& y) {
  if (x.is_ar != y.is_ar) return x.is_ar;
  const double u = x.speedup.geomean, v = y.speedup.geomean;
  if (std::isfinite(u) != std::isfinite(v)) return std::isfinite(u);
  return std::isfinite(u) && u > v;
}

// The cases (indices into group.cases, report order) a plot of one series per case shows out of
// `eligible`: all of them when they are at most kMaxSeries, else the AR cases and the speculative
// ones with the best speedup, kMaxSeries in all; then *note (not null) says so.
std::vector<size_t> ShownCases(const ReportGroup& group, std::vector<size_t> eligible,
                               std::string* note) {
  if (eligible.size() <= kMaxSeries) return eligible;
  std::stable_sort(eligible.begin(), eligible.end(),
                   [&](size_t a, size_t b) { return FasterFirst(group.cases[a], group.cases[b]); });
  const size_t total = eligible.size();
  eligible.resize(kMaxSeries);
  std::sort(eligible.begin(), eligible.end());
  *note = StrCat(" Shown: ", kMaxSeries, " of ", total,
                 " cases (AR and the best speedups); every case is in the tables.");
  return eligible;
}

// One image of a per-case plot: its name suffix and title part ("" or "_t0" and " at T=0"), its
// cases and what its caption adds (ShownCases).
struct Facet {
  std::string suffix, title;
  std::vector<size_t> cases;
  std::string note;
};

// The facets of a per-case plot over the cases `eligible` accepts: one when they fit kMaxSeries
// or share one temperature, else one per temperature ("_tK", K = its rank), each cut by
// ShownCases.
std::vector<Facet> CaseFacets(const ReportGroup& group,
                              const std::function<bool(const CaseReport&)>& eligible) {
  std::vector<size_t> all;
  std::set<double> temps;
  for (size_t i = 0; i < group.cases.size(); ++i) {
    if (!eligible(group.cases[i])) continue;
    all.push_back(i);
    temps.insert(group.cases[i].row.record.temperature);
  }
  if (all.empty()) return {};
  if (all.size() <= kMaxSeries || temps.size() < 2) {
    Facet f;
    f.cases = ShownCases(group, all, &f.note);
    return {f};
  }
  std::vector<Facet> facets;
  for (const double t : temps) {
    Facet f;
    f.suffix = StrCat("_t", facets.size());
    f.title = " at " + TemperatureLabel(t);
    std::vector<size_t> at_t;
    for (size_t i : all) {
      if (group.cases[i].row.record.temperature == t) at_t.push_back(i);
    }
    f.cases = ShownCases(group, at_t, &f.note);
    facets.push_back(std::move(f));
  }
  return facets;
}

bool HasSpeedup(const CaseReport& c) {
  return !c.is_ar && std::isfinite(c.speedup.geomean);
}

// (3a') Speedup vs. τ, one point per speculative case, with iso-cost lines: a method whose verify
// step (drafting included) costs c AR steps reaches speedup τ / c.
void SpeedupVsTauPlot(const ReportGroup& group, const std::vector<std::string>& labels,
                      const std::string& suffix, std::vector<Plot>& plots) {
  const auto facets = CaseFacets(
      group, [](const CaseReport& c) { return HasSpeedup(c) && std::isfinite(c.metrics.tau); });
  for (const Facet& f : facets) {
    Plot p;
    p.name = "speedup_vs_tau_" + suffix + f.suffix;
    p.title = "Speedup vs. τ" + f.title + " — " + GroupName(group);
    p.caption =
        "One point per speculative case with an AR baseline: speedup vs. τ (tokens per verify "
        "step). Dashed lines: speedup = τ / c for a step costing c AR steps (drafting included); "
        "a point's position against them reads its step cost. Colour and marker = method." +
        f.note;
    std::ostringstream data, plot;
    double max_tau = 1;
    for (size_t k = 0; k < f.cases.size(); ++k) {
      const size_t i = f.cases[k];
      const CaseReport& c = group.cases[i];
      max_tau = std::max(max_tau, c.metrics.tau);
      const std::string block = "$" + p.name + "_" + std::to_string(i);
      data << block << " << EOD\n"
           << Num(c.metrics.tau) << " " << Num(c.speedup.geomean) << "\nEOD\n";
      plot << (k == 0 ? "plot " : ", \\\n     ") << block << " using 1:2 with points "
           << CaseStyle(c) << " ps 2 title "
           << Quote(WithTemperature(labels[i], c.row.record.temperature));
    }
    for (const double cost : {1.0, 1.5, 2.0, 3.0}) {
      plot << ", \\\n     x / " << Num(cost) << " with lines dt 2 lc rgb 'gray60' title "
           << Quote(StrCat("step = ", Num(cost), " AR steps"));
    }
    std::ostringstream setup;
    setup << Header(p.title, "τ (tokens per verify step)", "speedup vs. AR (×)") << "set grid\n"
          << "set xrange [1:" << Num(std::ceil(max_tau + 0.5)) << "]\nset yrange [0:*]\n";
    p.script = data.str() + Render(p, setup.str(), plot.str());
    plots.push_back(p);
  }
}

// Positions reached by fewer steps than this are left out of the acceptance plots (a rate over a
// handful of steps is noise).
constexpr int64_t kMinStepsPerPosition = 5;

// Positions of a case's acceptance curve: those reached by at least kMinStepsPerPosition steps.
int64_t PlottedDepth(const PositionAcceptance& pos) {
  int64_t depth = 0;
  while (depth < pos.max_depth() && pos.n_reached[depth] >= kMinStepsPerPosition) ++depth;
  return depth;
}

// (3c) Per-position acceptance at temperature `t` (panel number `facet`), positions reached by at
// least kMinStepsPerPosition steps, the step count in each legend entry; a case none of whose
// positions is reached that often (a lookup method that rarely drafts) is left out. Default:
// vLLM's unconditional rate P(position i accepted) = steps accepting >= i / all steps, which
// falls with i; `conditional`: r_i = the same steps / steps drafting >= i deep (name
// acceptance_cond_...), which can rise where short drafts leave the deep positions to the steps
// that were going well.
void AcceptancePlot(const ReportGroup& group, const std::vector<std::string>& labels,
                    const std::string& suffix, double t, int facet, bool conditional,
                    std::vector<Plot>& plots) {
  Plot p;
  p.name = StrCat(conditional ? "acceptance_cond_" : "acceptance_", suffix, "_t", facet);
  p.title = StrCat(
      conditional ? "Conditional per-position acceptance r_i at " : "Per-position acceptance at ",
      TemperatureLabel(t), " — ", GroupName(group));
  std::vector<size_t> eligible;
  for (size_t i = 0; i < group.cases.size(); ++i) {
    const CaseReport& c = group.cases[i];
    if (c.row.record.temperature == t && PlottedDepth(c.metrics.positions) > 0) {
      eligible.push_back(i);
    }
  }
  std::string note;
  const std::vector<size_t> shown = ShownCases(group, eligible, &note);
  if (shown.empty()) return;
  p.caption =
      StrCat(conditional ? "Conditional on the draft reaching position i: r_i = steps accepting "
                           "at least i draft tokens / steps drafting at least i deep"
                         : "Unconditional (vLLM's per-position acceptance rate): P(position i "
                           "accepted) = steps accepting at least i draft tokens / all verify steps",
             ", at ", TemperatureLabel(t), "; positions reached by fewer than ",
             kMinStepsPerPosition, " steps are left out; n = verify steps of the case.", note);
  std::ostringstream data, plot;
  int64_t max_depth = 0;
  for (size_t k = 0; k < shown.size(); ++k) {
    const CaseReport& c = group.cases[shown[k]];
    const PositionAcceptance& pos = c.metrics.positions;
    const int64_t depth = PlottedDepth(pos);
    const std::vector<double> vllm = VllmCompatibleMetrics(c.metrics).per_position_acceptance_rate;
    const std::string block = "$" + p.name + "_" + std::to_string(shown[k]);
    data << block << " << EOD\n";
    for (int64_t i = 0; i < depth; ++i) {
      data << i + 1 << " " << Num(conditional ? pos.r[i] : vllm[i]) << "\n";
    }
    data << "EOD\n";
    max_depth = std::max(max_depth, depth);
    plot << (k == 0 ? "plot " : ", \\\n     ") << block << " using 1:2 with linespoints lw 2 "
         << CaseStyle(c) << " title "
         << Quote(StrCat(PlotLabel(labels[shown[k]]), " (n=", c.metrics.n_steps, ")"));
  }
  std::ostringstream setup;
  setup << Header(p.title, "draft position i (tokens after the last accepted one)",
                  conditional ? "r_i (accepted | drafted to position i)"
                              : "P(position i accepted), all verify steps")
        << "set grid xtics\n"
        << "set xrange [0.5:" << max_depth + 0.5 << "]\n"
        << "set xtics 1\n"
        << "set yrange [0:1.05]\n";
  p.script = data.str() + Render(p, setup.str(), plot.str());
  plots.push_back(p);
}

// (3c) Both acceptance plots per temperature: the unconditional one (the default), then r_i.
void AcceptancePlots(const ReportGroup& group, const std::vector<std::string>& labels,
                     const std::string& suffix, std::vector<Plot>& plots) {
  std::set<double> temps;
  for (const CaseReport& c : group.cases) temps.insert(c.row.record.temperature);
  int facet = 0;
  for (const double t : temps) {
    for (const bool conditional : {false, true}) {
      AcceptancePlot(group, labels, suffix, t, facet, conditional, plots);
    }
    ++facet;
  }
}

// Per-category geometric mean of a case's per-answer speedups ({} without a category label).
std::map<std::string, double> SpeedupPerCategory(const CaseReport& c) {
  std::map<std::string, std::string> category_of;
  for (const SampleRecord& s : c.samples) category_of[s.prompt_id] = s.category;
  std::map<std::string, std::vector<double>> ratios;
  for (const Speedup::Pair& pair : c.speedup.pairs) {
    const auto it = category_of.find(pair.prompt_id);
    if (it != category_of.end() && !it->second.empty()) ratios[it->second].push_back(pair.ratio());
  }
  std::map<std::string, double> out;
  for (const auto& [category, r] : ratios) out[category] = GeometricMean(r);
  return out;
}

// (4) Speedup per prompt category, clustered by category, one bar per speculative case.
void SpeedupPerCategoryPlot(const ReportGroup& group, const std::vector<std::string>& labels,
                            const std::string& suffix, std::vector<Plot>& plots,
                            const std::function<void(const std::string&)>& note) {
  Plot p;
  p.name = "speedup_per_category_" + suffix;
  p.title = "Speedup per prompt category — " + GroupName(group);
  p.caption =
      "Speedup (geometric mean over the category's answers of method ÷ AR decode tok/s) per "
      "prompt category, one bar per speculative case.";
  std::vector<size_t> eligible;
  for (size_t i = 0; i < group.cases.size(); ++i) {
    if (!group.cases[i].is_ar && !group.cases[i].speedup.pairs.empty()) eligible.push_back(i);
  }
  std::string shown_note;
  const std::vector<size_t> shown = ShownCases(group, eligible, &shown_note);
  p.caption += shown_note;
  std::vector<std::map<std::string, double>> per_case;
  std::set<std::string> categories;
  for (size_t i : shown) {
    per_case.push_back(SpeedupPerCategory(group.cases[i]));
    for (const auto& [category, v] : per_case.back()) categories.insert(category);
  }
  if (shown.empty()) return;
  if (categories.size() < 2) {
    note(p.title + ": skipped (the answers carry " +
         (categories.empty() ? std::string("no category") : "one category") + ").");
    return;
  }
  std::ostringstream data;
  data << "$" << p.name << " << EOD\n" << DataString("category");
  for (size_t i : shown) {
    data << " " << DataString(WithTemperature(labels[i], group.cases[i].row.record.temperature));
  }
  data << "\n";
  for (const std::string& category : categories) {
    data << DataString(category);
    for (const auto& m : per_case) {
      const auto it = m.find(category);
      data << " " << Num(it == m.end() ? kNoValue : it->second);
    }
    data << "\n";
  }
  data << "EOD\n";
  std::ostringstream setup, plot;
  setup << Header(p.title, "prompt category", "speedup vs. AR (×)")
        << "set style data histograms\nset style histogram clustered gap 1\n"
        << "set style fill solid 0.85 border -1\nset yrange [0:*]\n";
  for (size_t k = 0; k < shown.size(); ++k) {
    const CaseReport& c = group.cases[shown[k]];
    plot << (k == 0 ? "plot $" + p.name : ", \\\n     ''") << " using " << k + 2
         << (k == 0 ? ":xtic(1)" : "") << " title columnheader(" << k + 2 << ") lc rgb "
         << Quote(MethodColor(c.method_index))
         << (c.row.record.temperature == 0 ? " fs solid 0.85 border -1"
                                           : " fs pattern 2 border -1");
  }
  plot << ", \\\n     1 with lines dt 2 lc rgb 'gray40' title 'AR (1.0×)'";
  p.script = data.str() + Render(p, setup.str(), plot.str());
  plots.push_back(p);
}

// (5) Per-answer speedups of every speculative case (one column of points per case) with the
// case's geometric mean as a bar: the spread behind each headline number.
void SpeedupPerAnswerPlot(const ReportGroup& group, const std::vector<std::string>& labels,
                          const std::string& suffix, std::vector<Plot>& plots) {
  Plot p;
  p.name = "speedup_per_answer_" + suffix;
  p.title = "Per-answer speedup — " + GroupName(group);
  p.caption =
      "Each point is one answer's method ÷ AR decode tok/s (paired AR run when recorded); the "
      "horizontal bar is the case's geometric mean (its speedup).";
  std::ostringstream data, means;
  int n = 0;
  for (size_t i = 0; i < group.cases.size(); ++i) {
    const CaseReport& c = group.cases[i];
    if (c.is_ar || c.speedup.pairs.empty()) continue;
    for (const Speedup::Pair& pair : c.speedup.pairs) {
      data << n << " " << Num(pair.ratio()) << " " << ColorInt(MethodColor(c.method_index)) << "\n";
    }
    means << n << " " << Num(c.speedup.geomean) << " "
          << DataString(WithTemperature(labels[i], c.row.record.temperature)) << "\n";
    ++n;
  }
  if (n == 0) return;
  std::ostringstream setup, plot;
  setup << Header(p.title, "case", "answer speedup vs. AR (×)")
        << "set xrange [-0.6:" << Num(n - 0.4) << "]\nset yrange [0:*]\n"
        << "set xtics rotate by 90 right\nset bmargin 14\nunset key\n";
  plot << "plot $" << p.name << " using 1:2:3 with points pt 7 ps 0.8 lc rgb variable, \\\n     $"
       << p.name << "_means using 1:2:(0.35):xtic(3) with xerrorbars pt 0 lw 3 lc rgb 'black', "
       << "\\\n     1 with lines dt 2 lc rgb 'gray40'";
  p.script = "$" + p.name + " << EOD\n" + data.str() + "EOD\n$" + p.name + "_means << EOD\n" +
             means.str() + "EOD\n" + Render(p, setup.str(), plot.str());
  plots.push_back(p);
}

// (1) Decode tokens/s per case: one bar per case (coloured by method), ordered by temperature
// then report order (AR first), so the chart has one series however many cases there are.
void DecodeSpeedPlot(const ReportGroup& group, const std::vector<std::string>& labels,
                     const std::string& suffix, std::vector<Plot>& plots) {
  std::vector<size_t> order(group.cases.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return group.cases[a].row.record.temperature < group.cases[b].row.record.temperature;
  });
  Plot p;
  p.name = "decode_speed_" + suffix;
  p.title = "Decode throughput per case — " + GroupName(group);
  p.caption =
      "Decode tokens/s (output tokens after the first / decode time) of every case, one bar per "
      "case coloured by method, grouped by sampling temperature.";
  std::ostringstream data;
  data << "$" << p.name << " << EOD\n";
  for (size_t i : order) {
    const CaseReport& c = group.cases[i];
    data << DataString(WithTemperature(labels[i], c.row.record.temperature)) << " "
         << Num(c.metrics.decode_tokens_per_s) << " " << ColorInt(MethodColor(c.method_index))
         << "\n";
  }
  data << "EOD\n";
  std::ostringstream setup, plot;
  setup << Header(p.title, "case (method, knobs, temperature)", "decode throughput (tokens/s)")
        << "set style fill solid 0.85 border -1\n"
        << "set boxwidth 0.6\n"
        << "set xrange [-0.6:" << Num(static_cast<double>(order.size()) - 0.4) << "]\n"
        << "set yrange [0:*]\n"
        << "set offsets 0, 0, graph 0.08, 0\n"
        << "set xtics rotate by 90 right\n"
        << "set bmargin 14\n"
        << "unset key\n";
  plot << "plot $" << p.name << " using 0:2:(0.6):3:xtic(1) with boxes lc rgb variable notitle";
  p.script = data.str() + Render(p, setup.str(), plot.str());
  plots.push_back(p);
}

// (2) Decode time vs. decode tokens, one point per answer, per facet (CaseFacets).
void DecodeScatterPlot(const ReportGroup& group, const std::vector<std::string>& labels,
                       const std::string& suffix, std::vector<Plot>& plots) {
  for (const Facet& f : CaseFacets(group, [](const CaseReport&) { return true; })) {
    Plot p;
    p.name = "decode_scatter_" + suffix + f.suffix;
    p.title = "Decode time vs. answer length" + f.title + " — " + GroupName(group);
    p.caption =
        "One point per answer: tokens decoded after the first vs. decode time; the slope is the "
        "time per token." +
        f.note;
    std::ostringstream data, plot;
    for (size_t k = 0; k < f.cases.size(); ++k) {
      const CaseReport& c = group.cases[f.cases[k]];
      const std::string block = "$" + p.name + "_" + std::to_string(f.cases[k]);
      data << block << " << EOD\n";
      for (const SampleRecord& s : c.samples) {
        data << DecodeTokens(s) << " " << Num(s.decode_ms) << "\n";
      }
      data << "EOD\n";
      plot << (k == 0 ? "plot " : ", \\\n     ") << block << " using 1:2 with points "
           << CaseStyle(c) << " ps 1.2 title "
           << Quote(WithTemperature(labels[f.cases[k]], c.row.record.temperature));
    }
    std::ostringstream setup;
    setup << Header(p.title, "decode tokens per answer (tokens)", "decode time per answer (ms)")
          << "set grid xtics\n"
          << "set offsets 0, graph 0.05, graph 0.08, 0\n"
          << "set xrange [0:*]\nset yrange [0:*]\n";
    p.script = data.str() + Render(p, setup.str(), plot.str());
    plots.push_back(p);
  }
}

// (3a) Speedup vs. T_D%, speculative cases with an AR baseline, per facet (CaseFacets).
void SpeedupVsDraftPlot(const ReportGroup& group, const std::vector<std::string>& labels,
                        const std::string& suffix, std::vector<Plot>& plots) {
  const auto facets = CaseFacets(group, [](const CaseReport& c) {
    return HasSpeedup(c) && std::isfinite(c.metrics.draft_fraction);
  });
  for (const Facet& f : facets) {
    Plot p;
    p.name = "speedup_vs_draft_" + suffix + f.suffix;
    p.title = "Speedup vs. drafting-time share" + f.title + " — " + GroupName(group);
    p.caption =
        "Speculative cases with a matching AR case: speedup (geometric mean of per-prompt "
        "AR/method decode-time ratios) vs. T_D (drafting time / decode time); colour and marker = "
        "method." +
        f.note;
    std::ostringstream data, plot;
    plot << "plot 1 with lines dt 2 lc rgb 'gray40' title 'AR baseline (1.0×)'";
    for (size_t i : f.cases) {
      const CaseReport& c = group.cases[i];
      const std::string block = "$" + p.name + "_" + std::to_string(i);
      data << block << " << EOD\n"
           << Num(100.0 * c.metrics.draft_fraction) << " " << Num(c.speedup.geomean) << "\nEOD\n";
      plot << ", \\\n     " << block << " using 1:2 with points " << CaseStyle(c) << " ps 2 title "
           << Quote(WithTemperature(labels[i], c.row.record.temperature));
    }
    std::ostringstream setup;
    setup << Header(p.title, "T_D: drafting time / decode time (%)",
                    "speedup vs. AR (×, geometric mean over prompts)")
          << "set grid xtics\n"
          << "set offsets 0, 0, graph 0.1, 0\n"
          << "set xrange [0:100]\nset yrange [0:*]\n";
    p.script = data.str() + Render(p, setup.str(), plot.str());
    plots.push_back(p);
  }
}

// (3b) τ per speculative case.
void TauPlot(const ReportGroup& group, const std::vector<std::string>& labels,
             const std::string& suffix, std::vector<Plot>& plots) {
  const std::string gname = GroupName(group);
  Plot p;
  p.name = "tau_" + suffix;
  p.title = "Mean tokens per verify step (τ) — " + gname;
  p.caption = "τ = tokens emitted / verify steps (accepted draft tokens plus the bonus token).";
  std::ostringstream data;
  data << "$" << p.name << " << EOD\n";
  int n = 0;
  for (size_t i = 0; i < group.cases.size(); ++i) {
    const CaseReport& c = group.cases[i];
    if (!std::isfinite(c.metrics.tau)) continue;
    data << DataString(WithTemperature(labels[i], c.row.record.temperature)) << " "
         << Num(c.metrics.tau) << " " << ColorInt(MethodColor(c.method_index)) << "\n";
    ++n;
  }
  data << "EOD\n";
  if (n > 0) {
    std::ostringstream setup;
    setup << Header(p.title, "case (method, knobs, temperature)", "τ (tokens per verify step)")
          << "set style fill solid 0.85 border -1\n"
          << "set boxwidth 0.6\n"
          << "set xrange [-0.6:" << Num(n - 0.4) << "]\n"
          << "set yrange [0:*]\n"
          << "set offsets 0, 0, graph 0.08, 0\n"
          << "set xtics rotate by 90 right\n"
          << "set bmargin 14\n"
          << "unset key\n";
    std::ostringstream plot;
    plot << "plot $" << p.name
         << " using 0:2:(0.6):3:xtic(1) with boxes lc rgb variable title 'τ (tokens per verify "
            "step)'";
    p.script = data.str() + Render(p, setup.str(), plot.str());
    plots.push_back(p);
  }
}

}  // namespace

std::vector<Plot> BuildGroupPlots(const ReportGroup& group, const std::vector<std::string>& labels,
                                  int index, std::vector<std::string>* skipped) {
  std::vector<Plot> plots;
  const std::string suffix = std::to_string(index);
  auto note = [&](const std::string& why) {
    if (skipped != nullptr) skipped->push_back(why);
  };
  DecodeSpeedPlot(group, labels, suffix, plots);
  if (AllAnswersHitMaxTokens(group)) {
    note("Decode time vs. answer length — " + GroupName(group) +
         ": skipped (every answer stopped at max_new_tokens, so all points share one x value).");
  } else {
    DecodeScatterPlot(group, labels, suffix, plots);
  }
  if (!group.has_steps()) return plots;
  SpeedupVsDraftPlot(group, labels, suffix, plots);
  SpeedupVsTauPlot(group, labels, suffix, plots);
  TauPlot(group, labels, suffix, plots);
  AcceptancePlots(group, labels, suffix, plots);
  SpeedupPerCategoryPlot(group, labels, suffix, plots, note);
  SpeedupPerAnswerPlot(group, labels, suffix, plots);
  return plots;
}

namespace {

// Mean drafted nodes per verify step of group.cases[i].
double BudgetOf(const ReportGroup& group, size_t i) {
  const CaseMetrics& m = group.cases[i].metrics;
  return static_cast<double>(m.drafted) / static_cast<double>(m.n_steps);
}

// One line of the budget figures: a method at one temperature over its knob settings.
struct BudgetSeries {
  std::string method;
  double temperature = 0;
  int dash = 1;               // dash type: the method's temperatures in order
  std::vector<size_t> cases;  // in budget order
};

// The lines of the budget figures: every (method, T) whose cases drafted at least two distinct
// budgets (a line of one point says nothing about the budget), at most kMaxSeries of them (the
// best speedups; *note then says so).
std::vector<BudgetSeries> BudgetSeriesOf(const ReportGroup& group, std::string* note) {
  std::map<std::pair<std::string, double>, BudgetSeries> by_key;
  std::vector<std::pair<std::string, double>> keys;
  for (size_t i = 0; i < group.cases.size(); ++i) {
    const CaseReport& c = group.cases[i];
    if (c.is_ar || c.metrics.n_steps == 0) continue;
    const auto key = std::make_pair(c.row.record.method, c.row.record.temperature);
    if (!by_key.count(key)) keys.push_back(key);
    by_key[key].cases.push_back(i);
  }
  std::vector<BudgetSeries> out;
  std::map<std::string, int> dashes;  // per method, temperatures seen so far
  for (const auto& key : keys) {
    BudgetSeries series = by_key[key];
    series.method = key.first;
    series.temperature = key.second;
    series.dash = ++dashes[key.first];
    std::set<std::string> budgets;
    for (size_t i : series.cases) budgets.insert(Num(BudgetOf(group, i)));
    if (budgets.size() < 2) continue;
    std::stable_sort(series.cases.begin(), series.cases.end(),
                     [&](size_t x, size_t y) { return BudgetOf(group, x) < BudgetOf(group, y); });
    out.push_back(std::move(series));
  }
  auto best = [&](const BudgetSeries& s) {
    double v = -1;
    for (size_t i : s.cases) {
      if (std::isfinite(group.cases[i].speedup.geomean)) {
        v = std::max(v, group.cases[i].speedup.geomean);
      }
    }
    return v;
  };
  if (out.size() > kMaxSeries) {
    const size_t total = out.size();
    std::stable_sort(out.begin(), out.end(), [&](const BudgetSeries& x, const BudgetSeries& y) {
      return best(x) > best(y);
    });
    out.resize(kMaxSeries);
    *note = StrCat(" Shown: the ", kMaxSeries, " of ", total,
                   " method lines with the best speedups; every case is in the tables.");
  }
  return out;
}

// The speedup (or τ) vs. budget figure over `series`; false when no case has a value.
bool BudgetFigure(const ReportGroup& group, const std::vector<BudgetSeries>& series, Plot& p,
                  bool is_speedup) {
  std::ostringstream data, plot, best;
  int n = 0;
  std::map<double, size_t> best_at;  // the best speedup of the lines' cases, per temperature
  for (const BudgetSeries& line : series) {
    std::ostringstream points;
    for (size_t i : line.cases) {
      const CaseReport& c = group.cases[i];
      const double v = is_speedup ? c.speedup.geomean : c.metrics.tau;
      if (std::isfinite(v)) points << Num(BudgetOf(group, i)) << " " << Num(v) << "\n";
      auto it = best_at.find(line.temperature);
      if (std::isfinite(c.speedup.geomean) &&
          (it == best_at.end() || c.speedup.geomean > group.cases[it->second].speedup.geomean)) {
        best_at[line.temperature] = i;
      }
    }
    if (points.str().empty()) continue;
    const std::string block = "$" + p.name + "_" + std::to_string(n);
    data << block << " << EOD\n" << points.str() << "EOD\n";
    const CaseReport& first = group.cases[line.cases.front()];
    plot << (n == 0 ? "plot " : ", \\\n     ") << block << " using 1:2 with linespoints lw 2 pt "
         << MethodMarker(first.method_index, 0) << " dt " << line.dash << " ps 1.3 lc rgb "
         << Quote(MethodColor(first.method_index)) << " title "
         << Quote(PlotLabel(line.method) + " " + TemperatureLabel(line.temperature));
    ++n;
  }
  if (n == 0) return false;
  for (const auto& [t, i] : best_at) {
    const double v = is_speedup ? group.cases[i].speedup.geomean : group.cases[i].metrics.tau;
    if (std::isfinite(v)) best << Num(BudgetOf(group, i)) << " " << Num(v) << "\n";
  }
  if (!best.str().empty()) {
    data << "$" << p.name << "_best << EOD\n" << best.str() << "EOD\n";
    plot << ", \\\n     $" << p.name
         << "_best using 1:2 with points pt 6 ps 3.5 lw 2 lc rgb 'black' title 'best speedup "
            "(per temperature)'";
  }
  if (is_speedup) plot << ", \\\n     1 with lines dt 2 lc rgb 'gray40' title 'AR (1.0×)'";
  std::ostringstream setup;
  setup << Header(p.title, "draft budget (mean drafted nodes per verify step)",
                  is_speedup ? "speedup vs. AR (×, geometric mean over prompts)"
                             : "τ (tokens per verify step)")
        << "set grid xtics\n"
        << "set offsets 0, graph 0.05, graph 0.1, 0\n"
        << "set xrange [0:*]\nset yrange [0:*]\n";
  p.script = data.str() + Render(p, setup.str(), plot.str());
  return true;
}

// (1) and (2): speedup and τ vs. budget (mean drafted nodes per verify step), one line per
// (method, T) that ran at two budgets or more (BudgetSeriesOf); the best speedup of the lines'
// cases circled once per temperature. Without such a line both are skipped with a note.
void BudgetFigures(const ReportGroup& group, const std::string& suffix, std::vector<Plot>& plots,
                   const std::function<void(const std::string&)>& skip) {
  std::string note;
  const std::vector<BudgetSeries> series = BudgetSeriesOf(group, &note);
  for (const bool is_speedup : {true, false}) {
    Plot p;
    p.name = (is_speedup ? "speedup_vs_budget_" : "tau_vs_budget_") + suffix;
    p.title = std::string(is_speedup ? "Speedup" : "τ") + " vs. draft budget — " + GroupName(group);
    p.caption =
        (is_speedup ? "Speedup (geometric mean over prompts vs. AR) against the draft budget (mean "
                      "drafted nodes per verify step), one line per method and temperature over "
                      "its knob settings; circled: the best speedup at each temperature."
                    : "τ (tokens per verify step) against the draft budget (mean drafted nodes per "
                      "verify step), one line per method and temperature; circled: the case with "
                      "the best speedup at each temperature.") +
        note;
    if (series.empty()) {
      skip(p.title +
           ": skipped (no method ran at two budgets or more: one point per method says nothing "
           "about the budget; the tables give each case's nodes/step).");
    } else if (!BudgetFigure(group, series, p, is_speedup)) {
      skip(StrCat(p.title, ": skipped (no speculative case with ",
                  is_speedup ? "a speedup over a matching AR case" : "a τ", ")."));
    } else {
      plots.push_back(p);
    }
  }
}

// (3) Stacked phase-time shares per speculative case.
void PhaseTimeFigure(const ReportGroup& group, const std::string& suffix, std::vector<Plot>& plots,
                     const std::function<void(const std::string&)>& skip) {
  const std::string gname = GroupName(group);
  Plot p;
  p.name = "phase_time_" + suffix;
  p.title = "Decode time by phase — " + gname;
  bool any_adapt = false;
  std::vector<size_t> cases;
  for (size_t i = 0; i < group.cases.size(); ++i) {
    const CaseMetrics& m = group.cases[i].metrics;
    if (m.n_steps == 0 || !(m.decode_ms > 0)) continue;
    cases.push_back(i);
    any_adapt = any_adapt || m.adapt_ms > 0;
  }
  p.caption =
      std::string("Share of decode time per speculative case: drafting") +
      (any_adapt ? " (without adaptation), online adaptation (OSD updates)" : "") +
      ", the verify forward, other step work (sampling, acceptance, bookkeeping) and the "
      "untimed rest. Bars are labelled #case id (the case column of the details table), the "
      "case's short label and T.";
  if (cases.empty()) {
    skip(p.title + ": skipped (no speculative case with steps and decode time).");
  } else {
    std::ostringstream data;
    data << "$" << p.name << " << EOD\n";
    for (size_t i : cases) {
      const CaseMetrics& m = group.cases[i].metrics;
      const double draft = 100.0 * (m.draft_ms - m.adapt_ms) / m.decode_ms;
      const double adapt = 100.0 * m.adapt_ms / m.decode_ms;
      const double verify = 100.0 * m.verify_ms / m.decode_ms;
      const double other = 100.0 * m.other_ms / m.decode_ms;
      const double rest = std::max(0.0, 100.0 - draft - adapt - verify - other);
      // Case id, short label and T, written vertically under the bar (never overlapping).
      const CaseReport& c = group.cases[i];
      data << DataString(StrCat("#", c.row.case_id, " ", PlotLabel(c.label), " ",
                                TemperatureLabel(c.row.record.temperature)))
           << " " << Num(draft) << " " << Num(adapt) << " " << Num(verify) << " " << Num(other)
           << " " << Num(rest) << "\n";
    }
    data << "EOD\n";
    std::ostringstream setup, plot;
    setup << Header(p.title, "case (method, knobs, temperature)", "share of decode time (%)")
          << "set style data histograms\n"
          << "set style histogram rowstacked\n"
          << "set style fill solid 0.85 border -1\n"
          << "set boxwidth 0.6\n"
          << "set yrange [0:105]\n"
          << "set xtics rotate by 90 right font ',9'\n"
          << "set bmargin 14\n";
    plot << "plot $" << p.name << " using 2:xtic(1) title 'draft'";
    if (any_adapt) plot << ", '' using 3 title 'adapt'";
    plot << ", '' using 4 title 'verify', '' using 5 title 'other', '' using 6 title 'untimed'";
    p.script = data.str() + Render(p, setup.str(), plot.str());
    plots.push_back(p);
  }
}

// (4) τ vs. temperature per method configuration.
void TauVsTemperatureFigure(const ReportGroup& group, const std::vector<std::string>& labels,
                            const std::string& suffix, std::vector<Plot>& plots,
                            const std::function<void(const std::string&)>& skip) {
  const std::string gname = GroupName(group);
  Plot p;
  p.name = "tau_vs_temperature_" + suffix;
  p.title = "τ vs. temperature — " + gname;
  p.caption = "τ (tokens per verify step) per method configuration at each sampling temperature.";
  std::set<double> temps;
  std::vector<std::string> keys;
  std::map<std::string, const CaseReport*> key_case;
  std::map<std::string, std::vector<std::pair<double, double>>> pts;
  for (size_t i = 0; i < group.cases.size(); ++i) {
    const CaseReport& c = group.cases[i];
    if (!std::isfinite(c.metrics.tau)) continue;
    temps.insert(c.row.record.temperature);
    const std::string k = PlotLabel(labels[i]);
    if (!pts.count(k)) keys.push_back(k), key_case[k] = &c;
    pts[k].push_back({c.row.record.temperature, c.metrics.tau});
  }
  if (keys.size() > kMaxSeries) {  // the configurations with the best speedups
    std::map<std::string, double> best;
    for (size_t i = 0; i < group.cases.size(); ++i) {
      const double v = group.cases[i].speedup.geomean;
      const std::string k = PlotLabel(labels[i]);
      if (pts.count(k) && std::isfinite(v) && !(best.count(k) && best[k] >= v)) best[k] = v;
    }
    const size_t total = keys.size();
    std::stable_sort(keys.begin(), keys.end(), [&](const std::string& x, const std::string& y) {
      return (best.count(x) ? best[x] : -1.0) > (best.count(y) ? best[y] : -1.0);
    });
    keys.resize(kMaxSeries);
    p.caption += StrCat(" Shown: the ", kMaxSeries, " of ", total,
                        " configurations with the best speedups; every case is in the tables.");
  }
  if (temps.size() < 2) {
    skip(p.title +
         StrCat(": skipped (", temps.empty() ? "no case with a τ" : "one temperature only", ")."));
  } else {
    std::ostringstream data, plot;
    for (size_t n = 0; n < keys.size(); ++n) {
      auto& v = pts[keys[n]];
      std::stable_sort(v.begin(), v.end());
      const std::string block = "$" + p.name + "_" + std::to_string(n);
      data << block << " << EOD\n";
      for (const auto& [t, tau] : v) data << Num(t) << " " << Num(tau) << "\n";
      data << "EOD\n";
      plot << (n == 0 ? "plot " : ", \\\n     ") << block
           << " using 1:2 with linespoints lw 2 ps 1.3 " << CaseStyle(*key_case[keys[n]])
           << " title " << Quote(keys[n]);
    }
    std::ostringstream setup;
    setup << Header(p.title, "sampling temperature T", "τ (tokens per verify step)")
          << "set grid xtics\n"
          << XRangeFromData(*temps.begin(), *temps.rbegin(), 0.1)
          << "set offsets 0, 0, graph 0.1, 0\n"
          << "set yrange [0:*]\n";
    p.script = data.str() + Render(p, setup.str(), plot.str());
    plots.push_back(p);
  }
}

}  // namespace

std::vector<Plot> BuildGroupFigures(const ReportGroup& group,
                                    const std::vector<std::string>& labels, int index,
                                    std::vector<std::string>* skipped) {
  std::vector<Plot> plots;
  const std::string suffix = std::to_string(index);
  auto skip = [&](const std::string& why) {
    if (skipped != nullptr) skipped->push_back(why);
  };

  BudgetFigures(group, suffix, plots, skip);
  PhaseTimeFigure(group, suffix, plots, skip);
  TauVsTemperatureFigure(group, labels, suffix, plots, skip);
  return plots;
}

Plot BuildStreamPlot(const StreamTable& table, int index) {
  Plot p;
  p.name = "stream_tau_" + std::to_string(index);
  p.title = "τ per window — " + table.title;
  p.caption =
      "τ (tokens per verify step) per window of consecutive answers, one line per case (the "
      "adaptation-over-the-stream table's τ columns).";
  // At most kMaxSeries lines: the cases that adapted online first, then the best speedups.
  std::vector<size_t> shown(table.tau.size());
  for (size_t n = 0; n < shown.size(); ++n) shown[n] = n;
  auto adapts = [&](size_t n) {
    if (n >= table.cases.size()) return false;
    for (const StepRecord& st : table.cases[n]->steps) {
      if (st.t_adapt_us > 0) return true;
    }
    return false;
  };
  if (shown.size() > kMaxSeries && table.cases.size() == shown.size()) {
    std::stable_sort(shown.begin(), shown.end(), [&](size_t a, size_t b) {
      if (adapts(a) != adapts(b)) return adapts(a);
      return FasterFirst(*table.cases[a], *table.cases[b]);
    });
    shown.resize(kMaxSeries);
    std::sort(shown.begin(), shown.end());
    p.caption += StrCat(" Shown: ", kMaxSeries, " of ", table.tau.size(),
                        " cases (those that adapted, then the best speedups).");
  }
  std::ostringstream data, plot;
  for (size_t k = 0; k < shown.size(); ++k) {
    const size_t n = shown[k];
    const std::string block = "$" + p.name + "_" + std::to_string(n);
    data << block << " << EOD\n";
    for (size_t w = 0; w < table.tau[n].size(); ++w) {
      if (std::isfinite(table.tau[n][w])) data << w + 1 << " " << Num(table.tau[n][w]) << "\n";
    }
    data << "EOD\n";
    const std::string style = n < table.cases.size() ? CaseStyle(*table.cases[n]) : "pt 7";
    plot << (k == 0 ? "plot " : ", \\\n     ") << block << " using 1:2 with linespoints lw 2 "
         << style << " ps 1.1 title " << Quote(PlotLabel(table.case_labels[n]));
  }
  std::ostringstream setup;
  setup << Header(p.title, "window (consecutive answers)", "τ (tokens per verify step)")
        << "set grid\n"
        << "set offsets graph 0.02, graph 0.02, graph 0.1, 0\n"
        << "set yrange [0:*]\n";
  p.script = data.str() + Render(p, setup.str(), plot.str());
  return p;
}

std::vector<Plot> BuildBenchPlots(const std::vector<BenchRow>& bench) {
  if (bench.empty()) return {};
  // One series per configuration other than the context length.
  std::vector<std::string> keys;
  std::map<std::string, std::vector<const BenchRecord*>> series;
  for (const BenchRow& b : bench) {
    const BenchRecord& r = b.record;
    const std::string key =
        StrCat(r.model, " ", r.dtype, " threads=", r.threads, " batch=", r.batch_size);
    if (!series.count(key)) keys.push_back(key);
    series[key].push_back(&r);
  }
  Plot p;
  p.name = "bench_speed";
  p.title = "AR decode throughput vs. context length (specbed bench)";
  p.caption =
      "Mean decode tokens/s over repetitions (error bars: standard deviation) for every "
      "bench configuration.";
  std::ostringstream data, plot;
  plot << "plot ";
  for (size_t i = 0; i < keys.size(); ++i) {
    auto rows = series[keys[i]];
    std::stable_sort(rows.begin(), rows.end(), [](const BenchRecord* a, const BenchRecord* b) {
      return a->context_len < b->context_len;
    });
    const std::string block = "$bench_" + std::to_string(i);
    data << block << " << EOD\n";
    for (const BenchRecord* r : rows) {
      data << r->context_len << " " << Num(r->tokens_per_s) << " " << Num(r->tokens_per_s_std)
           << "\n";
    }
    data << "EOD\n";
    if (i > 0) plot << ", \\\n     ";
    plot << block << " using 1:2:3 with yerrorlines pt 7 title " << Quote(keys[i]);
  }
  std::ostringstream setup;
  setup << Header(p.title, "context length (tokens in the KV cache)",
                  "decode throughput (tokens/s)")
        << "set grid xtics\n"
        << "set offsets graph 0.05, graph 0.05, 0, 0\n"
        << "set yrange [0:*]\n";
  p.script = data.str() + Render(p, setup.str(), plot.str());
  return {p};
}

namespace {

// Per series of a serve group: per load point, the mean over seeds of `value(metrics)`. Closed
// loop: its cells by concurrency; open loop (`open`): the group's open-loop cells of the series'
// label by request rate.
std::map<double, double> ServeSeriesCurve(const ServeGroup& group, const ServeSeries& series,
                                          const std::function<double(const ServeMetrics&)>& value,
                                          bool open = false) {
  std::vector<size_t> cells = series.cells;
  if (open) {
    cells.clear();
    for (size_t i = 0; i < group.cells.size(); ++i) {
      if (group.cells[i].cell.mode == "open" && group.labels[i] == series.label) cells.push_back(i);
    }
  }
  std::map<double, std::pair<double, int>> sums;
  for (size_t i : cells) {
    const double v = value(group.metrics[i]);
    if (!std::isfinite(v)) continue;
    const ServeCellRecord& c = group.cells[i].cell;
    auto& [sum, n] = sums[open ? c.rate : static_cast<double>(c.concurrency)];
    sum += v;
    ++n;
  }
  std::map<double, double> curve;
  for (const auto& [x, sn] : sums) curve[x] = sn.first / sn.second;
  return curve;
}

// A series' colour and marker (the caller draws AR dashed).
std::string ServeSeriesStyle(const ServeSeries& s) {
  return StrCat("lc rgb ", Quote(MethodColor(s.style_index)), " pt ",
                MethodMarker(s.style_index, 0));
}

// The x axis of the serve plots: concurrency on a log2 scale over the tested grid.
std::string ServeAxes(const std::string& title, const std::string& ylabel, int64_t max_c) {
  return Header(title, "concurrency C (requests in flight, closed loop; log scale)", ylabel) +
         StrCat("set logscale x 2\nset xrange [0.8:", Num(1.25 * static_cast<double>(max_c)),
                "]\nset grid xtics\nset yrange [0:*]\n");
}

Plot ServeThroughputPlot(const ServeGroup& group, int index, int64_t max_c) {
  Plot p;
  p.name = StrCat("serve_throughput_", index);
  p.title = "Output throughput vs. concurrency — " + group.title;
  p.caption =
      "Output tokens/s (all requests; Σ output tokens ÷ makespan, mean over seeds) per "
      "concurrency, one line per method configuration, AR on the identical trace included; an "
      "open circle marks a method's C* (where its Little's-law throughput is no more than 2% "
      "above AR's).";
  std::ostringstream data, plot;
  bool titled_cstar = false;
  for (size_t k = 0; k < group.series.size(); ++k) {
    const ServeSeries& s = group.series[k];
    const auto curve =
        ServeSeriesCurve(group, s, [](const ServeMetrics& m) { return m.output_throughput; });
    if (curve.empty()) continue;
    const std::string block = StrCat("$", p.name, "_", k);
    data << block << " << EOD\n";
    for (const auto& [c, v] : curve) data << Num(c) << " " << Num(v) << "\n";
    data << "EOD\n";
    plot << (plot.tellp() == 0 ? "plot " : ", \\\n     ") << block
         << " using 1:2 with linespoints lw 2 ps 1.1 " << ServeSeriesStyle(s)
         << (s.is_ar ? " dt 2" : "") << " title " << Quote(PlotLabel(s.label));
    if (s.is_ar || !std::isfinite(s.crossover.c_star)) continue;  // before the cast: NaN = none
    const auto at = curve.find(s.crossover.c_star);
    if (at == curve.end()) continue;
    data << block << "_cstar << EOD\n" << Num(at->first) << " " << Num(at->second) << "\nEOD\n";
    plot << ", \\\n     " << block << "_cstar using 1:2 with points pt 6 ps 3.5 lw 2 lc rgb "
         << Quote(MethodColor(s.style_index))
         << (titled_cstar ? " notitle" : " title 'C* (crossover)'");
    titled_cstar = true;
  }
  if (plot.tellp() == 0) return {};
  p.script =
      data.str() + Render(p, ServeAxes(p.title, "output throughput (tokens/s)", max_c), plot.str());
  return p;
}

// p50 (solid) and p99 (dashed) TPOT of every series at each load point (closed loop: by
// concurrency; open: by request rate) as the data blocks and plot clauses of plot `name`.
void ServeTpotLines(const ServeGroup& group, const std::string& name, bool open,
                    std::ostringstream& data, std::ostringstream& plot) {
  for (size_t k = 0; k < group.series.size(); ++k) {
    const ServeSeries& s = group.series[k];
    const auto p50 = ServeSeriesCurve(
        group, s, [](const ServeMetrics& m) { return m.tpot_ms.p50; }, open);
    const auto p99 = ServeSeriesCurve(
        group, s, [](const ServeMetrics& m) { return m.tpot_ms.p99; }, open);
    if (p50.empty()) continue;
    const std::string block = StrCat("$", name, "_", k);
    data << block << " << EOD\n";
    for (const auto& [x, v] : p50) {
      data << Num(x) << " " << Num(v) << " " << Num(p99.count(x) ? p99.at(x) : kNoValue) << "\n";
    }
    data << "EOD\n";
    plot << (plot.tellp() == 0 ? "plot " : ", \\\n     ") << block
         << " using 1:2 with linespoints lw 2 ps 1.1 " << ServeSeriesStyle(s) << " title "
         << Quote(PlotLabel(s.label) + " p50") << ", \\\n     " << block
         << " using 1:3 with linespoints lw 1.5 dt 2 ps 0.8 " << ServeSeriesStyle(s) << " title "
         << Quote(PlotLabel(s.label) + " p99");
  }
}

Plot ServeTpotPlot(const ServeGroup& group, int index, int64_t max_c) {
  Plot p;
  p.name = StrCat("serve_tpot_", index);
  p.title = "TPOT vs. concurrency — " + group.title;
  p.caption =
      "Time per output token after the first (p50 solid, p99 dashed; mean over seeds) per "
      "concurrency, one colour per method configuration, AR included.";
  std::ostringstream data, plot;
  ServeTpotLines(group, p.name, /*open=*/false, data, plot);
  if (plot.tellp() == 0) return {};
  p.script =
      data.str() + Render(p, ServeAxes(p.title, "TPOT (ms per output token)", max_c), plot.str());
  return p;
}

// The open-loop cells: TPOT against the Poisson arrival rate λ.
Plot ServeOpenLoopPlot(const ServeGroup& group, int index) {
  Plot p;
  p.name = StrCat("serve_open_", index);
  p.title = "TPOT vs. request rate (open loop) — " + group.title;
  p.caption =
      "Seeded Poisson arrivals at each rate λ: time per output token after the first (p50 solid, "
      "p99 dashed; mean over seeds), one colour per method configuration, AR on the identical "
      "arrivals included.";
  std::ostringstream data, plot;
  ServeTpotLines(group, p.name, /*open=*/true, data, plot);
  if (plot.tellp() == 0) return {};
  double max_rate = 0;
  for (const ServeCellData& c : group.cells) max_rate = std::max(max_rate, c.cell.rate);
  const std::string axes =
      Header(p.title, "request rate λ (requests/s, Poisson arrivals)",
             "TPOT (ms per output token)") +
      StrCat("set xrange [0:", Num(1.25 * max_rate), "]\nset grid xtics\nset yrange [0:*]\n");
  p.script = data.str() + Render(p, axes, plot.str());
  return p;
}

}  // namespace

std::vector<Plot> BuildServePlots(const ServeGroup& group, int index) {
  int64_t max_c = 0;
  for (const ServeSeries& s : group.series) {
    for (size_t i : s.cells) max_c = std::max(max_c, group.cells[i].cell.concurrency);
  }
  std::vector<Plot> plots;
  if (max_c > 0) {
    plots.push_back(ServeThroughputPlot(group, index, max_c));
    plots.push_back(ServeTpotPlot(group, index, max_c));
  }
  plots.push_back(ServeOpenLoopPlot(group, index));
  plots.erase(
      std::remove_if(plots.begin(), plots.end(), [](const Plot& p) { return p.name.empty(); }),
      plots.end());
  return plots;
}

std::string GnuplotProgram(const std::string& requested) {
  if (!requested.empty()) return requested;
  const char* env = std::getenv("SPECBED_GNUPLOT");
  if (env != nullptr && env[0] != '\0') return env;
  return "gnuplot";
}

std::string FindExecutable(const std::string& program) {
  auto is_executable = [](const std::string& path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
  };
  if (program.empty()) return "";
  if (program.find('/') != std::string::npos) return is_executable(program) ? program : "";
  const char* path_env = std::getenv("PATH");
  std::stringstream dirs(path_env ? path_env : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (is_executable(candidate)) return candidate;
  }
  return "";
}

std::string RunGnuplot(const std::string& program, const std::string& dir,
                       const std::string& script) {
  // Shell single-quoting: ' -> '\''.
  auto sh = [](const std::string& s) {
    std::string out = "'";
    for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
    return out + "'";
  };
  const std::string log = dir + "/gnuplot.log";
  // gnuplot runs in the C.UTF-8 locale whatever the user's (base/locale_pin.h): the scripts
  // say `set encoding utf8`, which in the C locale warns "iconv failed to convert degree sign" once
  // per plot, and its messages stay untranslated so that GnuplotWarnings finds them.
  const std::string command = "cd " + sh(dir) + " && " + ChildLocaleShellPrefix() + "exec " +
                              sh(program) + " > gnuplot.log 2>&1";
  // A gnuplot that dies early must not kill us with SIGPIPE while we write the script.
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &old);
  FILE* pipe = popen(command.c_str(), "w");
  std::string error;
  if (pipe == nullptr) {
    error = StrCat("cannot start '", program, "': ", std::strerror(errno));
  } else {
    const size_t written = std::fwrite(script.data(), 1, script.size(), pipe);
    const int status = pclose(pipe);
    if (status == -1) {
      error = StrCat("waiting for '", program, "' failed: ", std::strerror(errno));
    } else if (WIFSIGNALED(status)) {
      error = StrCat("'", program, "' was killed by signal ", WTERMSIG(status));
    } else if (WEXITSTATUS(status) != 0) {
      error = StrCat("'", program, "' exited with status ", WEXITSTATUS(status));
    } else if (written != script.size()) {
      error = StrCat("could not feed the whole script to '", program, "'");
    }
  }
  sigaction(SIGPIPE, &old, nullptr);
  if (!error.empty() && PathExists(log)) {
    std::string text = ReadFileToString(log);
    if (text.size() > 2000) text = "..." + text.substr(text.size() - 2000);
    if (!text.empty()) error += "; its output (" + log + "):\n" + text;
  }
  return error;
}

}  // namespace specbed
