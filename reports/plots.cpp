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
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/locale_pin.h"
#include "base/mapped_file.h"
#include "reports/summary.h"

namespace specbed {
namespace {

// Image size: 960x540, taller when the key has more entries than fit beside a 540-pixel plot
// (about 26 lines of the 11-point font), so that the key stays outside the plot and readable.
std::string SizeFor(const std::string& plot) {
  int entries = 0;
  for (const char* what : {" title '", "columnheader("}) {
    for (size_t at = plot.find(what); at != std::string::npos; at = plot.find(what, at + 1)) {
      ++entries;
    }
  }
  const int height = entries > 26 ? 540 + 18 * (entries - 26) : 540;
  return StrCat("size 960,", height);
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

// Terminal setup, the plot command(s), and the same plot again as SVG.
std::string Render(const std::string& name, const std::string& setup, const std::string& plot) {
  std::ostringstream s;
  const std::string size = SizeFor(plot);
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

// Numeric/boolean knobs in short form, {"k":4,"drafter":"x"} -> "k=4" (string knobs name models,
// which the tables show; dropped to keep axis labels short).
std::string ShortKnobs(const std::string& json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object()) return "";
  for (auto it = j.begin(); it != j.end();) it = it->is_string() ? j.erase(it) : std::next(it);
  return PlotLabel(KnobsShort(j.dump()));
}

std::string GroupName(const ReportGroup& g) {
  return g.target + " / " + g.dataset;
}

std::string WithTemperature(const std::string& label, double t) {
  return PlotLabel(label) + " " + TemperatureLabel(t);
}

// `lc rgb '#rrggbb' pt N` of a case: its method's colour and its knob setting's marker.
std::string CaseStyle(const CaseReport& c) {
  return StrCat("lc rgb ", Quote(MethodColor(c.method_index)), " pt ",
                SettingMarker(c.setting_index));
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

int SettingMarker(int setting_index) {
  // filled circle, square, triangle up, triangle down, diamond, pentagon, then open ones.
  static const int kMarkers[] = {7, 5, 9, 11, 13, 15, 6, 4, 8, 10, 12, 14};
  const int n = static_cast<int>(sizeof(kMarkers) / sizeof(kMarkers[0]));
  return kMarkers[((setting_index % n) + n) % n];
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
  p.script = data.str() + Render(p.name, setup.str(), plot.str());
  return p;
}

namespace {

// Marker of a temperature: filled circle at the lowest, filled triangle at the next, ... so the
// temperatures differ in shape as well as in the legend text.
int TemperatureMarker(const ReportGroup& group, double t) {
  std::set<double> temps;
  for (const CaseReport& c : group.cases) temps.insert(c.row.record.temperature);
  static const int kMarkers[] = {7, 9, 5, 11, 13, 15};
  const auto at = std::distance(temps.begin(), temps.find(t));
  return kMarkers[at % (sizeof(kMarkers) / sizeof(kMarkers[0]))];
}

// `lc rgb '#rrggbb' pt N`: the case's method colour and its temperature's marker.
std::string TemperatureStyle(const ReportGroup& group, const CaseReport& c) {
  return StrCat("lc rgb ", Quote(MethodColor(c.method_index)), " pt ",
                TemperatureMarker(group, c.row.record.temperature));
}

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

// (3a') Speedup vs. τ, one point per speculative case, with iso-cost lines: a method whose verify
// step (drafting included) costs c AR steps reaches speedup τ / c.
void SpeedupVsTauPlot(const ReportGroup& group, const std::vector<std::string>& labels,
                      const std::string& suffix, std::vector<Plot>& plots) {
  Plot p;
  p.name = "speedup_vs_tau_" + suffix;
  p.title = "Speedup vs. τ — " + GroupName(group);
  p.caption =
      "One point per speculative case with an AR baseline: speedup vs. τ (tokens per verify "
      "step). Dashed lines: speedup = τ / c for a step costing c AR steps (drafting included); a "
      "point's position against them reads its step cost. Colour = method, marker = "
      "temperature.";
  std::ostringstream data, plot;
  double max_tau = 1;
  int n = 0;
  for (size_t i = 0; i < group.cases.size(); ++i) {
    const CaseReport& c = group.cases[i];
    if (c.is_ar || !std::isfinite(c.speedup.geomean) || !std::isfinite(c.metrics.tau)) continue;
    max_tau = std::max(max_tau, c.metrics.tau);
    const std::string block = "$" + p.name + "_" + std::to_string(i);
    data << block << " << EOD\n"
         << Num(c.metrics.tau) << " " << Num(c.speedup.geomean) << "\nEOD\n";
    plot << (n == 0 ? "plot " : ", \\\n     ") << block << " using 1:2 with points "
         << TemperatureStyle(group, c) << " ps 2 title "
         << Quote(WithTemperature(labels[i], c.row.record.temperature));
    ++n;
  }
  if (n == 0) return;
  for (const double cost : {1.0, 1.5, 2.0, 3.0}) {
    plot << ", \\\n     x / " << Num(cost) << " with lines dt 2 lc rgb 'gray60' title "
         << Quote(StrCat("step = ", Num(cost), " AR steps"));
  }
  std::ostringstream setup;
  setup << Header(p.title, "τ (tokens per verify step)", "speedup vs. AR (×)") << "set grid\n"
        << "set xrange [1:" << Num(std::ceil(max_tau + 0.5)) << "]\nset yrange [0:*]\n";
  p.script = data.str() + Render(p.name, setup.str(), plot.str());
  plots.push_back(p);
}

// Positions reached by fewer steps than this are left out of the acceptance plots (a rate over a
// handful of steps is noise).
constexpr int64_t kMinStepsPerPosition = 5;

// (3c) Per-position acceptance r_i, one panel per temperature, positions reached by at least
// kMinStepsPerPosition steps, the step count in each legend entry. A case none of whose
// positions is reached that often (a lookup method that rarely drafts) is left out.
void AcceptancePlots(const ReportGroup& group, const std::vector<std::string>& labels,
                     const std::string& suffix, std::vector<Plot>& plots) {
  std::set<double> temps;
  for (const CaseReport& c : group.cases) temps.insert(c.row.record.temperature);
  int facet = 0;
  for (const double t : temps) {
    Plot p;
    p.name = StrCat("acceptance_", suffix, "_t", facet++);
    p.title = "Per-position acceptance r_i at " + TemperatureLabel(t) + " — " + GroupName(group);
    p.caption = StrCat(
        "r_i = steps accepting at least i draft tokens / steps drafting at least i deep, at ",
        TemperatureLabel(t), "; positions reached by fewer than ", kMinStepsPerPosition,
        " steps are left out; n = verify steps of the case.");
    std::ostringstream data, plot;
    int n = 0;
    int64_t max_depth = 0;
    for (size_t i = 0; i < group.cases.size(); ++i) {
      const CaseReport& c = group.cases[i];
      const PositionAcceptance& pos = c.metrics.positions;
      if (c.row.record.temperature != t) continue;
      int64_t depth = 0;  // positions this case shows: a case with none gets no (empty) data block
      while (depth < pos.max_depth() && pos.n_reached[depth] >= kMinStepsPerPosition) ++depth;
      if (depth == 0) continue;
      const std::string block = "$" + p.name + "_" + std::to_string(i);
      data << block << " << EOD\n";
      for (int64_t k = 0; k < depth; ++k) data << k + 1 << " " << Num(pos.r[k]) << "\n";
      data << "EOD\n";
      max_depth = std::max(max_depth, depth);
      plot << (n == 0 ? "plot " : ", \\\n     ") << block << " using 1:2 with linespoints lw 2 "
           << CaseStyle(c) << " title "
           << Quote(StrCat(PlotLabel(labels[i]), " (n=", c.metrics.n_steps, ")"));
      ++n;
    }
    if (n == 0 || max_depth == 0) continue;
    std::ostringstream setup;
    setup << Header(p.title, "draft position i (tokens after the last accepted one)",
                    "r_i (acceptance rate at position i)")
          << "set grid xtics\n"
          << "set xrange [0.5:" << max_depth + 0.5 << "]\n"
          << "set xtics 1\n"
          << "set yrange [0:1.05]\n";
    p.script = data.str() + Render(p.name, setup.str(), plot.str());
    plots.push_back(p);
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
  std::vector<size_t> shown;
  std::vector<std::map<std::string, double>> per_case;
  std::set<std::string> categories;
  for (size_t i = 0; i < group.cases.size(); ++i) {
    const CaseReport& c = group.cases[i];
    if (c.is_ar || c.speedup.pairs.empty()) continue;
    shown.push_back(i);
    per_case.push_back(SpeedupPerCategory(c));
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
  p.script = data.str() + Render(p.name, setup.str(), plot.str());
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
             means.str() + "EOD\n" + Render(p.name, setup.str(), plot.str());
  plots.push_back(p);
}

// (1) Decode tokens/s per case, clustered by temperature.
void DecodeSpeedPlot(const ReportGroup& group, const std::vector<std::string>& labels,
                     const std::string& suffix, std::vector<Plot>& plots) {
  const std::string gname = GroupName(group);
  std::vector<double> temps;
  std::vector<std::string> series;
  std::vector<const CaseReport*> series_case;  // the first case of each series (its style)
  for (size_t i = 0; i < group.cases.size(); ++i) {
    const double t = group.cases[i].row.record.temperature;
    if (std::find(temps.begin(), temps.end(), t) == temps.end()) temps.push_back(t);
    if (std::find(series.begin(), series.end(), PlotLabel(labels[i])) == series.end()) {
      series.push_back(PlotLabel(labels[i]));
      series_case.push_back(&group.cases[i]);
    }
  }
  std::sort(temps.begin(), temps.end());
  std::map<std::pair<double, std::string>, double> value;
  for (size_t i = 0; i < group.cases.size(); ++i) {
    value[{group.cases[i].row.record.temperature, PlotLabel(labels[i])}] =
        group.cases[i].metrics.decode_tokens_per_s;
  }
  Plot p;
  p.name = "decode_speed_" + suffix;
  p.title = "Decode throughput per case — " + gname;
  p.caption =
      "Decode tokens/s (output tokens after the first / decode time) of every case, "
      "grouped by sampling temperature.";
  std::ostringstream data;
  data << "$" << p.name << " << EOD\n" << DataString("temperature");
  for (const auto& s : series) data << " " << DataString(s);
  data << "\n";
  for (double t : temps) {
    data << DataString(TemperatureLabel(t));
    for (const auto& s : series) {
      const auto it = value.find({t, s});
      data << " " << Num(it == value.end() ? kNoValue : it->second);
    }
    data << "\n";
  }
  data << "EOD\n";
  std::ostringstream setup;
  setup << Header(p.title, "sampling temperature T", "decode throughput (tokens/s)")
        << "set style data histograms\n"
        << "set style histogram clustered gap 1\n"
        << "set style fill solid 0.85 border -1\n"
        << "set yrange [0:*]\n";
  std::ostringstream plot;
  // One colour per method; a method's further knob settings are hatched.
  for (size_t k = 0; k < series.size(); ++k) {
    const CaseReport& c = *series_case[k];
    plot << (k == 0 ? "plot $" + p.name : ", \\\n     ''") << " using " << k + 2
         << (k == 0 ? ":xtic(1)" : "") << " title columnheader(" << k + 2 << ") lc rgb "
         << Quote(MethodColor(c.method_index))
         << (c.setting_index == 0
                 ? std::string(" fs solid 0.85 border -1")
                 : StrCat(" fs pattern ", 1 + (c.setting_index - 1) % 7, " border -1"));
  }
  p.script = data.str() + Render(p.name, setup.str(), plot.str());
  plots.push_back(p);
}

// (2) Decode time vs. decode tokens, one point per answer.
void DecodeScatterPlot(const ReportGroup& group, const std::vector<std::string>& labels,
                       const std::string& suffix, std::vector<Plot>& plots) {
  const std::string gname = GroupName(group);
  Plot p;
  p.name = "decode_scatter_" + suffix;
  p.title = "Decode time vs. answer length — " + gname;
  p.caption =
      "One point per answer: tokens decoded after the first vs. decode time; the "
      "slope is the time per token.";
  std::ostringstream data, plot;
  plot << "plot ";
  for (size_t i = 0; i < group.cases.size(); ++i) {
    const CaseReport& c = group.cases[i];
    const std::string block = "$" + p.name + "_" + std::to_string(i);
    data << block << " << EOD\n";
    for (const SampleRecord& s : c.samples) {
      data << DecodeTokens(s) << " " << Num(s.decode_ms) << "\n";
    }
    data << "EOD\n";
    if (i > 0) plot << ", \\\n     ";
    plot << block << " using 1:2 with points " << CaseStyle(c) << " ps 1.2 title "
         << Quote(WithTemperature(labels[i], c.row.record.temperature));
  }
  std::ostringstream setup;
  setup << Header(p.title, "decode tokens per answer (tokens)", "decode time per answer (ms)")
        << "set grid xtics\n"
        << "set offsets 0, graph 0.05, graph 0.08, 0\n"
        << "set xrange [0:*]\nset yrange [0:*]\n";
  p.script = data.str() + Render(p.name, setup.str(), plot.str());
  plots.push_back(p);
}

// (3a) Speedup vs. T_D%, speculative cases with an AR baseline.
void SpeedupVsDraftPlot(const ReportGroup& group, const std::vector<std::string>& labels,
                        const std::string& suffix, std::vector<Plot>& plots) {
  const std::string gname = GroupName(group);
  Plot p;
  p.name = "speedup_vs_draft_" + suffix;
  p.title = "Speedup vs. drafting-time share — " + gname;
  p.caption =
      "Speculative cases with a matching AR case: speedup (geometric mean of per-prompt "
      "AR/method decode-time ratios) vs. T_D (drafting time / decode time); colour = method, "
      "marker = temperature.";
  std::ostringstream data, plot;
  int n = 0;
  plot << "plot 1 with lines dt 2 lc rgb 'gray40' title 'AR baseline (1.0×)'";
  for (size_t i = 0; i < group.cases.size(); ++i) {
    const CaseReport& c = group.cases[i];
    if (c.is_ar || !std::isfinite(c.speedup.geomean) || !std::isfinite(c.metrics.draft_fraction)) {
      continue;
    }
    const std::string block = "$" + p.name + "_" + std::to_string(i);
    data << block << " << EOD\n"
         << Num(100.0 * c.metrics.draft_fraction) << " " << Num(c.speedup.geomean) << "\nEOD\n";
    plot << ", \\\n     " << block << " using 1:2 with points " << TemperatureStyle(group, c)
         << " ps 2 title " << Quote(WithTemperature(labels[i], c.row.record.temperature));
    ++n;
  }
  if (n > 0) {
    std::ostringstream setup;
    setup << Header(p.title, "T_D: drafting time / decode time (%)",
                    "speedup vs. AR (×, geometric mean over prompts)")
          << "set grid xtics\n"
          << "set offsets 0, 0, graph 0.1, 0\n"
          << "set xrange [0:100]\nset yrange [0:*]\n";
    p.script = data.str() + Render(p.name, setup.str(), plot.str());
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
    p.script = data.str() + Render(p.name, setup.str(), plot.str());
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

// (1) and (2): speedup and τ vs. budget (mean drafted nodes per verify step), one line per
// (method, T) over its knob settings; the best speedup circled once per temperature.
void BudgetFigures(const ReportGroup& group, const std::string& suffix, std::vector<Plot>& plots,
                   const std::function<void(const std::string&)>& skip) {
  const std::string gname = GroupName(group);
  struct Point {
    double budget, value;
    size_t case_index;
  };
  std::vector<std::pair<std::string, double>> series_keys;
  std::map<std::pair<std::string, double>, std::vector<size_t>> series_cases;
  for (size_t i = 0; i < group.cases.size(); ++i) {
    const CaseReport& c = group.cases[i];
    if (c.is_ar || c.metrics.n_steps == 0) continue;
    const auto key = std::make_pair(c.row.record.method, c.row.record.temperature);
    if (!series_cases.count(key)) series_keys.push_back(key);
    series_cases[key].push_back(i);
  }
  auto budget_of = [&](size_t i) {
    const CaseMetrics& m = group.cases[i].metrics;
    return static_cast<double>(m.drafted) / static_cast<double>(m.n_steps);
  };

  // (1) and (2): speedup and τ vs. budget.
  for (const bool is_speedup : {true, false}) {
    Plot p;
    p.name = (is_speedup ? "speedup_vs_budget_" : "tau_vs_budget_") + suffix;
    p.title = std::string(is_speedup ? "Speedup" : "τ") + " vs. draft budget — " + gname;
    p.caption =
        is_speedup ? "Speedup (geometric mean over prompts vs. AR) against the draft budget (mean "
                     "drafted nodes per verify step), one line per method and temperature over its "
                     "knob settings; circled: the best speedup of the group at each temperature."
                   : "τ (tokens per verify step) against the draft budget (mean drafted nodes per "
                     "verify step), one line per method and temperature; circled: the case with "
                     "the best speedup at each temperature.";
    std::ostringstream data, plot, best;
    int n = 0;
    for (const auto& key : series_keys) {
      std::vector<Point> pts;
      for (size_t i : series_cases[key]) {
        const CaseReport& c = group.cases[i];
        const double v = is_speedup ? c.speedup.geomean : c.metrics.tau;
        if (std::isfinite(v)) pts.push_back({budget_of(i), v, i});
      }
      if (pts.empty()) continue;
      std::stable_sort(pts.begin(), pts.end(),
                       [](const Point& a, const Point& b) { return a.budget < b.budget; });
      const std::string block = "$" + p.name + "_" + std::to_string(n);
      data << block << " << EOD\n";
      for (const Point& q : pts) data << Num(q.budget) << " " << Num(q.value) << "\n";
      data << "EOD\n";
      const CaseReport& first = group.cases[series_cases[key].front()];
      int t_index = 0;  // dash type per temperature of the method
      for (const auto& other : series_keys) {
        if (other == key) break;
        if (other.first == key.first) ++t_index;
      }
      plot << (n == 0 ? "plot " : ", \\\n     ") << block << " using 1:2 with linespoints lw 2 pt "
           << SettingMarker(t_index) << " dt " << 1 + t_index << " ps 1.3 lc rgb "
           << Quote(MethodColor(first.method_index)) << " title "
           << Quote(PlotLabel(key.first) + " " + TemperatureLabel(key.second));
      ++n;
    }
    // The best-speedup case of the group, once per temperature (not one circle per series).
    std::map<double, size_t> best_at;
    for (size_t i = 0; i < group.cases.size(); ++i) {
      const CaseReport& c = group.cases[i];
      if (c.is_ar || !std::isfinite(c.speedup.geomean) || c.metrics.n_steps == 0) continue;
      const double t = c.row.record.temperature;
      auto it = best_at.find(t);
      if (it == best_at.end() || c.speedup.geomean > group.cases[it->second].speedup.geomean) {
        best_at[t] = i;
      }
    }
    for (const auto& [t, i] : best_at) {
      const double v = is_speedup ? group.cases[i].speedup.geomean : group.cases[i].metrics.tau;
      if (std::isfinite(v)) best << Num(budget_of(i)) << " " << Num(v) << "\n";
    }
    if (n == 0) {
      skip(StrCat(p.title, ": skipped (no speculative case with ",
                  is_speedup ? "a speedup over a matching AR case" : "a τ", ")."));
      continue;
    }
    if (!best.str().empty()) {
      data << "$" << p.name << "_best << EOD\n" << best.str() << "EOD\n";
      plot << ", \\\n     $" << p.name
           << "_best using 1:2 with points pt 6 ps 3.5 lw 2 lc rgb 'black' title 'best speedup "
              "(per temperature)'";
    }
    std::ostringstream setup;
    setup << Header(p.title, "draft budget (mean drafted nodes per verify step)",
                    is_speedup ? "speedup vs. AR (×, geometric mean over prompts)"
                               : "τ (tokens per verify step)")
          << "set grid xtics\n"
          << "set offsets 0, graph 0.05, graph 0.1, 0\n"
          << "set xrange [0:*]\nset yrange [0:*]\n";
    if (is_speedup) plot << ", \\\n     1 with lines dt 2 lc rgb 'gray40' title 'AR (1.0×)'";
    p.script = data.str() + Render(p.name, setup.str(), plot.str());
    plots.push_back(p);
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
      "untimed rest. Bars are labelled #case id (the case column of the details table), method, "
      "numeric knobs (cut at 24 characters) and T.";
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
      // Short label (case id, method, numeric knobs, T): long JSON labels do not fit under bars.
      const CaseRecord& r = group.cases[i].row.record;
      std::string knobs = ShortKnobs(r.method_knobs_json);
      if (knobs.size() > 24) {  // cut at a UTF-8 character boundary
        size_t cut = 23;
        while (cut > 0 && (static_cast<unsigned char>(knobs[cut]) & 0xC0) == 0x80) --cut;
        knobs = knobs.substr(0, cut) + "…";
      }
      data << DataString(StrCat("#", group.cases[i].row.case_id, " ", r.method, " ", knobs, " ",
                                TemperatureLabel(r.temperature)))
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
          << "set xtics rotate by -30 font ',9'\n";
    plot << "plot $" << p.name << " using 2:xtic(1) title 'draft'";
    if (any_adapt) plot << ", '' using 3 title 'adapt'";
    plot << ", '' using 4 title 'verify', '' using 5 title 'other', '' using 6 title 'untimed'";
    p.script = data.str() + Render(p.name, setup.str(), plot.str());
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
    p.script = data.str() + Render(p.name, setup.str(), plot.str());
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
  std::ostringstream data, plot;
  for (size_t n = 0; n < table.tau.size(); ++n) {
    const std::string block = "$" + p.name + "_" + std::to_string(n);
    data << block << " << EOD\n";
    for (size_t w = 0; w < table.tau[n].size(); ++w) {
      if (std::isfinite(table.tau[n][w])) data << w + 1 << " " << Num(table.tau[n][w]) << "\n";
    }
    data << "EOD\n";
    plot << (n == 0 ? "plot " : ", \\\n     ") << block << " using 1:2 with linespoints lw 2 pt "
         << 5 + 2 * (n % 4) << " ps 1.1 title " << Quote(PlotLabel(table.case_labels[n]));
  }
  std::ostringstream setup;
  setup << Header(p.title, "window (consecutive answers)", "τ (tokens per verify step)")
        << "set grid\n"
        << "set offsets graph 0.02, graph 0.02, graph 0.1, 0\n"
        << "set yrange [0:*]\n";
  p.script = data.str() + Render(p.name, setup.str(), plot.str());
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
  p.script = data.str() + Render(p.name, setup.str(), plot.str());
  return {p};
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
