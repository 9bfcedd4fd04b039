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
#include "reports/serve_report.h"
#include "reports/summary.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;

std::string NowUtc() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
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

}  // namespace

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

// One workload of `specbed serve` cells: its plots, C* table and cell table.
struct ServeSection {
  ServeGroup group;
  std::vector<Plot> plots;
  ReportTable crossover, cells;
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
  std::string setup;                 // SetupLine: the first screen's setup
  ReportTable method_settings;       // MethodSettingsTable
  GroupSection bench;
  std::vector<std::string> conventions;
  std::vector<ServeSection> serve;  // "Serving under load"; empty without serve cells
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
  s.setup = SetupLine(data);
  s.method_settings = MethodSettingsTable(data);
  for (size_t i = 0; i < s.headlines.size(); ++i) {
    s.headline_plots.push_back(BuildHeadlinePlot(s.headlines[i], static_cast<int>(i + 1)));
  }
  s.bench.heading = "Bench: AR decode speed (specbed bench)";
  if (!data.bench.empty()) {
    s.bench.table = BuildBenchTable(data.bench);
    s.bench.plots = BuildBenchPlots(data.bench);
  }
  s.conventions = ConventionsFor(options.scope);
  std::vector<ServeGroup> serve = LoadServeGroups(data.db_path);
  for (size_t i = 0; i < serve.size(); ++i) {
    ServeSection section;
    section.plots = BuildServePlots(serve[i], static_cast<int>(i + 1));
    section.crossover = ServeCrossoverTable(serve[i]);
    section.cells = ServeCellTable(serve[i]);
    section.group = std::move(serve[i]);
    s.serve.push_back(std::move(section));
  }
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
  for (const auto& serve : s.serve) {
    for (const auto& p : serve.plots) all.push_back(&p);
  }
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

// How to read the headline (after its tables, so that on a phone the first screen reaches them):
// speedup, the tie rule and the paired tok/s.
constexpr const char* kHeadlineReading =
    "How to read these tables: per target and temperature, every speculative case, best speedup "
    "first. speedup = the "
    "geometric mean over answers of the per-answer ratio method decode tok/s ÷ AR decode tok/s "
    "of the same prompt [95% bootstrap CI over prompts]. vs. leader = the paired ratio of the "
    "case's per-answer speedups to the leader's over the answers both gave [95% bootstrap CI]: "
    "**tied** when that interval holds 1 (n<5: too few prompts to tell). tok/s and AR tok/s = "
    "total decode tokens ÷ total decode time over the same paired answers, so tok/s ÷ AR tok/s "
    "is the ratio of totals (speedup Σ), which need not equal the geometric mean. τ = acceptance "
    "length (τ, Spec-Bench #MAT): tokens per verify step; T_D% = drafting share of decode time; "
    "exact match = answers identical to AR's "
    "(Conventions at the end).";

// The setup line, its mention of the method settings a link to them.
ReportBlock SetupBlock(const std::string& setup) {
  const std::string target = "Method settings";
  const size_t at = setup.rfind(target);
  const std::string text = at == std::string::npos
                               ? setup
                               : setup.substr(0, at) + "[" + target + "](#method-settings)" +
                                     setup.substr(at + target.size());
  ReportBlock b = ParagraphBlock(text, false, "", "setup");
  b.html_id = "setup";
  return b;
}

void AddHeadline(const ReportSections& s, const std::set<std::string>& plotted, Blocks* blocks) {
  if (s.headlines.empty()) return;
  blocks->push_back(HeadingBlock("Headline", 2, "headline"));
  if (!s.setup.empty()) blocks->push_back(SetupBlock(s.setup));
  for (size_t i = 0; i < s.headlines.size(); ++i) {
    const HeadlineTable& h = s.headlines[i];
    blocks->push_back(HeadingBlock(h.title, 3));
    ReportBlock chart = TableBlock(h.table);
    chart.kind = ReportBlock::Kind::kChartAndTable;
    const Plot& p = s.headline_plots[i];
    if (!p.name.empty() && plotted.count(p.name)) chart.figure = p;
    blocks->push_back(std::move(chart));
    if (!h.case_notes.empty()) blocks->push_back(ListBlock(h.case_notes, true));
    if (h.slow_notes.empty()) continue;
    ReportBlock note = ListBlock(h.slow_notes, true);
    note.kind = ReportBlock::Kind::kNoteBox;
    note.title = "Why some speedups are below 1×:";
    note.text = h.slow_explanation;
    note.html_class = "slow-note";
    blocks->push_back(std::move(note));
  }
  blocks->push_back(ParagraphBlock(kHeadlineReading, false, "", "constants"));
}

// Each speculative method configuration's knobs as run (the setup line links here).
void AddMethodSettings(const ReportSections& s, Blocks* blocks) {
  if (s.method_settings.rows.empty()) return;
  blocks->push_back(HeadingBlock("Method settings", 2, "method-settings"));
  blocks->push_back(ParagraphBlock(
      "Every speculative method configuration with its knobs as the run resolved them (\"auto\" "
      "drafters named) and its cases.",
      true));
  blocks->push_back(TableBlock(s.method_settings));
}

// "Serving under load" (`specbed serve` cells): per workload the plots, C* per method with its
// interval and the per-C ratios, every cell with its schedule, and how to read them.
void AddServe(const ReportSections& s, const std::set<std::string>& plotted, Blocks* blocks) {
  if (s.serve.empty()) return;
  blocks->push_back(HeadingBlock("Serving under load", 2, "serving"));
  for (const ServeSection& serve : s.serve) {
    blocks->push_back(HeadingBlock(serve.group.title, 3));
    AddFigures(serve.plots, plotted, blocks);
    if (!serve.crossover.rows.empty()) {
      blocks->push_back(ParagraphBlock(
          "Crossover concurrency C* per method (vs. AR on the identical trace) and the ratio of "
          "its throughput to AR's at each tested C [95% CI]; ≤ marks a crossed C.",
          true));
      blocks->push_back(TableBlock(serve.crossover));
    }
    blocks->push_back(ParagraphBlock(
        "Every cell with its draft-length schedule: tok/s = output tokens ÷ makespan, latencies "
        "in ms (TTFT includes queueing), τ = tokens per step per request, acc% = accepted ÷ "
        "drafted.",
        true));
    blocks->push_back(TableBlock(serve.cells));
    if (!serve.group.notes.empty()) blocks->push_back(ListBlock(serve.group.notes, true));
  }
  blocks->push_back(ParagraphBlock(kServeReading, false, "", "constants"));
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
  if (s.groups.empty() && s.serve.empty()) {
    blocks.push_back(ParagraphBlock("No cases recorded.", false));
  }
  AddHeadline(s, plotted, &blocks);
  if (!s.cost_notes.empty()) {
    blocks.push_back(HeadingBlock("Cost regime", 2, "cost-regime"));
    blocks.push_back(ListBlock(s.cost_notes, true));
  }
  AddServe(s, plotted, &blocks);
  AddMethodSettings(s, &blocks);
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
