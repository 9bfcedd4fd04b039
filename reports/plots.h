// Internal to specbed_reports: gnuplot scripts for the report plots (each script carries its data
// as inline datablocks and writes NAME.png with the pngcairo terminal and NAME.svg with the svg
// terminal, relative to the report directory) and running gnuplot through popen in the C.UTF-8
// locale.
// Checked by: tests/reports/report_test.cpp (plots exist, are PNGs, missing gnuplot is a warning),
// tests/reports/headline_test.cpp (styles, headline chart, gnuplot warnings),
// tests/reports/locale_test.cpp (gnuplot's locale; no warning from a C-locale environment),
// tests/reports/report_reading_test.cpp (at most 8 case series, one style per method, the
// unconditional acceptance default), tests/reports/serve_report_test.cpp (the serve plots).
#pragma once

#include <string>
#include <vector>

#include "reports/report.h"
#include "reports/serve_report.h"

namespace specbed {

struct Plot {
  std::string name;     // file stem: NAME.png, NAME.svg
  std::string title;    // also the alt text
  std::string caption;  // one sentence under the image
  std::string script;   // gnuplot commands (self-contained; ends with `reset`)
  // The image's size in pixels (both terminals), for the page's <img width height>.
  int width = 960, height = 540;
};

// Plots of one (target, dataset) group: decode tokens/s per case grouped by temperature, decode
// time vs. decode tokens per answer (skipped with a note when every answer hit max_new_tokens),
// and (only when the group has steps rows) speedup vs. T_D% and speedup vs. τ with iso-cost lines
// (colour = method, marker = temperature), τ per case, per-position acceptance r_i with one panel
// per temperature (positions reached by >= 5 steps; step counts in the legend), speedup per
// prompt category (skipped with a note for one category) and per answer. `labels[i]` names
// group.cases[i] (unique within the group, without T); `index` makes the file names unique
// across groups; sentences on skipped plots are appended to `skipped`.
std::vector<Plot> BuildGroupPlots(const ReportGroup& group, const std::vector<std::string>& labels,
                                  int index, std::vector<std::string>* skipped = nullptr);
// The papers' figures for one group (file names end in `_index`): speedup vs. budget and τ vs.
// budget (budget = mean drafted nodes per verify step; one line per method and temperature over
// its knob settings, the group's best speedup circled once per temperature), stacked phase-time
// bars per speculative case (draft, adapt when any, verify, other and untimed share of decode time)
// and τ vs. temperature per method configuration. A figure the data cannot support is left out and
// a sentence saying why is appended to `skipped`.
std::vector<Plot> BuildGroupFigures(const ReportGroup& group,
                                    const std::vector<std::string>& labels, int index,
                                    std::vector<std::string>* skipped);
// τ per window of a stream table (one line per case; file name stream_tau_INDEX).
Plot BuildStreamPlot(const StreamTable& table, int index);
// The headline chart of one headline table: speedup per case as bars (one colour per method) with
// 95% CI whiskers and AR at 1.0× dashed; file name headline_speedup_INDEX. Cases without a
// speedup are left out; nullopt-like empty name when none has one.
Plot BuildHeadlinePlot(const HeadlineTable& table, int index);
// A case's style in every plot: the colour of method number `method_index` ("#rrggbb", a
// 20-colour palette, cycling) and its gnuplot point type: one shape per method (six shapes,
// cycling), filled for the method's knob setting number `setting_index` 0, 2, ... and open for
// 1, 3, ...; (colour, shape) differs between the first 60 methods.
std::string MethodColor(int method_index);
int MethodMarker(int method_index, int setting_index);
// gnuplot's warnings in its output (`text`): every line containing "warning:" (any case).
std::vector<std::string> GnuplotWarnings(const std::string& text);

// AR decode tokens/s vs. context length from the bench table (none when it is empty).
std::vector<Plot> BuildBenchPlots(const std::vector<BenchRow>& bench);

// The "Serving under load" plots of one serve group (file names end in `_index`): output tokens/s
// vs. concurrency and p50 (solid) / p99 (dashed) TPOT vs. concurrency, one line per method
// configuration with AR (closed-loop cells; the mean over seeds at each C), each method's C*
// circled on the throughput plot; with open-loop cells, p50 / p99 TPOT vs. the arrival rate λ
// (`serve_open_index`). None for a kind of cell the group does not have.
std::vector<Plot> BuildServePlots(const ServeGroup& group, int index);

// The gnuplot program to use: `requested` if not empty, else $SPECBED_GNUPLOT, else "gnuplot".
std::string GnuplotProgram(const std::string& requested);
// Absolute path of an executable `program` (a path, or a name searched on PATH); "" if none.
std::string FindExecutable(const std::string& program);

// Feeds `script` to `program` (through popen, working directory `dir`, output to
// DIR/gnuplot.log, locale LC_ALL=C.UTF-8 with LANGUAGE unset: base/locale_pin.h). Returns
// "" on success, otherwise what went wrong (with the log's tail).
std::string RunGnuplot(const std::string& program, const std::string& dir,
                       const std::string& script);

}  // namespace specbed
