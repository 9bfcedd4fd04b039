// `specbed serve`'s results in reports (see serve_report.h): groups, series with their C*, the
// report's tables and the plain-text table of `specbed serve`.
// Checked by: tests/reports/serve_report_test.cpp.
#include "reports/serve_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <tuple>
#include <utility>

#include "base/error.h"
#include "base/names.h"
#include "reports/format.h"
#include "reports/record_json.h"
#include "reports/summary.h"

namespace specbed {

const char* const kServeReading =
    "How to read this section: every speculative method configuration is compared with AR on the "
    "identical trace (the same seed: the same prompts in the same order, the same arrivals), "
    "cell by cell and request by request. ×AR = output tok/s ÷ AR's at the same load point and "
    "seed. C* = the smallest tested concurrency at which the method's output throughput is no "
    "more than 2% above AR's (Little's law: C × output tokens ÷ Σ end-to-end latency over the "
    "paired requests; the tie margin keeps noise around 1 from deciding it): below C* "
    "speculation pays, from C* on it does not; \"> C\" = it still pays at the largest tested C. "
    "Intervals: 95% paired bootstrap over seeds, then requests (per concurrency, not "
    "simultaneous). On a 2-core CPU the target is compute-bound from a batch of about 2 on, so "
    "C* is expected near 2 there; the meaningful table is a GPU run, where verifying K extra "
    "tokens per sequence stays nearly free to much larger batches.";

bool IsServeArBaseline(const ServeCellRecord& cell) {
  CaseRecord c;
  c.method = cell.method;
  c.method_traits_json = cell.method_traits_json;
  return IsArBaseline(c);
}

namespace {

using report_format::Fixed;
using report_format::General;
using report_format::kNone;

// The workload a cell serves (ServeGroup).
auto ServeWorkload(const ServeCellRecord& c) {
  return std::make_tuple(c.target, c.dataset, c.temperature, c.max_new_tokens, c.n_requests,
                         c.dtype, c.device, c.threads, c.batch_invariant);
}

// The method configuration of a cell (ServeSeries::label).
std::string ServeSeriesLabel(const ServeCellRecord& c) {
  const std::string knobs = KnobsShort(c.method_knobs_json);
  std::string label = knobs.empty() ? c.method : c.method + " " + knobs;
  if (!c.schedule.empty() && c.schedule != "fixed") label += " · " + c.schedule;
  return label;
}

// The load point of a cell: "C=4" or "λ=2.5/s".
std::string ServeLoad(const ServeCellRecord& c) {
  return c.mode == "open" ? StrCat("λ=", General(c.rate), "/s") : StrCat("C=", c.concurrency);
}

// Key of the AR cell a cell is compared with (same mode, load point and seed).
auto ServeLoadKey(const ServeCellRecord& c) {
  return std::make_tuple(c.mode, c.concurrency, c.rate, c.seed);
}

std::string ServeGroupTitle(const ServeCellRecord& c) {
  return StrCat(c.target, " / ", c.dataset, " · T=", General(c.temperature), " · ", c.n_requests,
                " requests × ", c.max_new_tokens, " new tokens · ", c.device, " ", c.dtype, " t",
                c.threads, c.batch_invariant ? "" : " · batched kernels");
}

// Orders a group's cells: AR first, then by label, closed before open, load, seed.
void SortServeCells(std::vector<ServeCellData>& cells) {
  auto key = [](const ServeCellData& d) {
    const ServeCellRecord& c = d.cell;
    return std::make_tuple(!IsServeArBaseline(c), ServeSeriesLabel(c), c.mode != "closed",
                           c.concurrency, c.rate, c.seed);
  };
  std::stable_sort(cells.begin(), cells.end(),
                   [&](const ServeCellData& a, const ServeCellData& b) { return key(a) < key(b); });
}

// The series of a group (cells already sorted) with their crossovers, and the ×AR column.
void BuildServeSeries(ServeGroup& g, const CrossoverOptions& options) {
  std::map<decltype(ServeLoadKey(ServeCellRecord{})), double> ar_speed;
  std::vector<ServeCellData> ar_cells;
  for (size_t i = 0; i < g.cells.size(); ++i) {
    if (!IsServeArBaseline(g.cells[i].cell)) continue;
    ar_speed.emplace(ServeLoadKey(g.cells[i].cell), g.metrics[i].output_throughput);
    ar_cells.push_back(g.cells[i]);
  }
  for (size_t i = 0; i < g.cells.size(); ++i) {
    const auto ar = ar_speed.find(ServeLoadKey(g.cells[i].cell));
    g.x_ar.push_back(ar == ar_speed.end() ? kNoValue : g.metrics[i].output_throughput / ar->second);
    if (ar == ar_speed.end()) {
      g.notes.push_back(StrCat("cell ", g.cells[i].cell.cell_key, " (", g.labels[i], ", ",
                               ServeLoad(g.cells[i].cell), ", seed ", g.cells[i].cell.seed,
                               ") has no AR cell at the same load point and seed: no ×AR."));
    }
    if (g.series.empty() || g.series.back().label != g.labels[i]) {
      ServeSeries s;
      s.label = g.labels[i];
      s.is_ar = IsServeArBaseline(g.cells[i].cell);
      s.style_index = static_cast<int>(g.series.size());
      g.series.push_back(std::move(s));
    }
    if (g.cells[i].cell.mode == "closed") g.series.back().cells.push_back(i);
  }
  for (ServeSeries& s : g.series) {
    if (s.is_ar || s.cells.empty()) continue;
    std::vector<ServeCellData> mine;
    for (size_t i : s.cells) mine.push_back(g.cells[i]);
    s.crossover = ComputeCrossover(mine, ar_cells, options);
  }
}

}  // namespace

std::vector<ServeGroup> BuildServeGroups(std::vector<ServeCellData> cells,
                                         const CrossoverOptions& options, const ServeSlo& slo) {
  std::vector<ServeGroup> groups;
  std::vector<decltype(ServeWorkload(ServeCellRecord{}))> keys;
  for (ServeCellData& d : cells) {
    const auto key = ServeWorkload(d.cell);
    const size_t g = std::find(keys.begin(), keys.end(), key) - keys.begin();
    if (g == keys.size()) {
      keys.push_back(key);
      groups.emplace_back();
      groups.back().title = ServeGroupTitle(d.cell);
    }
    groups[g].cells.push_back(std::move(d));
  }
  for (ServeGroup& g : groups) {
    SortServeCells(g.cells);
    for (const ServeCellData& d : g.cells) {
      g.metrics.push_back(ComputeServeMetrics(d.cell, d.requests, d.steps, slo));
      g.labels.push_back(ServeSeriesLabel(d.cell));
    }
    BuildServeSeries(g, options);
  }
  return groups;
}

std::vector<ServeCellData> LoadServeCells(const std::string& db_path, int64_t run_id) {
  StoreOptions read_only;
  read_only.read_only = true;
  const std::unique_ptr<ResultsStore> store = ResultsStore::Open(db_path, read_only);
  std::vector<ServeCellData> cells;
  for (const ResultsStore::ServeCellRow& row : store->ServeCells()) {
    if (run_id >= 0 && row.run_id != run_id) continue;
    cells.push_back(
        {row.record, store->ServeRequests(row.cell_id), store->ServeSteps(row.cell_id)});
  }
  return cells;
}

std::vector<ServeGroup> LoadServeGroups(const std::string& db_path,
                                        const CrossoverOptions& options) {
  return BuildServeGroups(LoadServeCells(db_path), options);
}

std::string FormatCStar(double c_star, int64_t max_concurrency) {
  if (std::isnan(c_star)) return kNone;
  if (std::isinf(c_star)) return StrCat("> ", max_concurrency);
  return General(c_star);
}

namespace {

std::string ServeRatioCell(const CrossoverPoint& p) {
  std::string cell = (p.crossed ? "≤ " : "") + Fixed(p.ratio, 2);
  if (std::isfinite(p.ratio_ci.lo)) {
    cell += StrCat(" [", Fixed(p.ratio_ci.lo, 2), "–", Fixed(p.ratio_ci.hi, 2), "]");
  }
  return cell;
}

}  // namespace

ReportTable ServeCrossoverTable(const ServeGroup& group) {
  std::vector<int64_t> grid;
  for (const ServeSeries& s : group.series) {
    for (const CrossoverPoint& p : s.crossover.points) grid.push_back(p.concurrency);
  }
  std::sort(grid.begin(), grid.end());
  grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
  ReportTable t;
  t.columns = {{"method"}, {"C* (throughput)", true}, {"95% CI", true}};
  for (int64_t c : grid) t.columns.push_back({StrCat("C=", c), true, false, "×AR [95% CI]"});
  for (const ServeSeries& s : group.series) {
    if (s.is_ar) continue;
    const CrossoverResult& x = s.crossover;
    const int64_t max_c = x.max_concurrency();
    std::vector<std::string> row = {s.label, FormatCStar(x.c_star, max_c), kNone};
    if (!std::isnan(x.c_star_ci.lo)) {
      row[2] =
          StrCat(FormatCStar(x.c_star_ci.lo, max_c), " – ", FormatCStar(x.c_star_ci.hi, max_c));
    }
    for (int64_t c : grid) {
      const auto p = std::find_if(x.points.begin(), x.points.end(),
                                  [&](const CrossoverPoint& q) { return q.concurrency == c; });
      row.push_back(p == x.points.end() ? kNone : ServeRatioCell(*p));
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

namespace {

// The figures of one cell, in ServeTable's column order after method, schedule and load.
std::vector<std::string> ServeFigureCells(const ServeMetrics& m, double x_ar) {
  return {
      Fixed(m.output_throughput, 1), Fixed(x_ar, 2),          Fixed(m.ttft_ms.p50, 1),
      Fixed(m.tpot_ms.p50, 2),       Fixed(m.tpot_ms.p99, 2), Fixed(m.itl_ms.p50, 2),
      Fixed(m.e2e_ms.p99, 1),        Fixed(m.mean_tau, 2),    Fixed(100 * m.acceptance_rate, 1)};
}

const char* const kServeFigureHeaders[] = {"tok/s",   "×AR",     "TTFT p50", "TPOT p50", "TPOT p99",
                                           "ITL p50", "E2E p99", "τ",        "acc%"};

}  // namespace

ReportTable ServeCellTable(const ServeGroup& group) {
  ReportTable t;
  t.columns = {{"method"}, {"schedule"}, {"load"}, {"seed", true}};
  for (const char* h : kServeFigureHeaders) t.columns.push_back({h, true});
  t.columns.push_back({"schedule_json"});
  for (size_t i = 0; i < group.cells.size(); ++i) {
    const ServeCellRecord& c = group.cells[i].cell;
    std::vector<std::string> row = {group.labels[i], c.schedule, ServeLoad(c), StrCat(c.seed)};
    for (std::string& cell : ServeFigureCells(group.metrics[i], group.x_ar[i])) {
      row.push_back(std::move(cell));
    }
    row.push_back(c.schedule_json.empty() ? kNone : c.schedule_json);
    t.rows.push_back(std::move(row));
  }
  return t;
}

namespace {

// Display width of UTF-8 text (code points; the table's symbols are one column wide).
size_t ServeTextWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? 1 : 0;
  return n;
}

}  // namespace

std::string ServeTable(const std::vector<ServeCellData>& cells, const ServeSlo& slo) {
  std::vector<std::vector<std::string>> rows = {{"method", "schedule", "C / λ"}};
  for (const char* h : kServeFigureHeaders) rows[0].push_back(h);
  for (const ServeGroup& g : BuildServeGroups(cells, CrossoverOptions{{}, 0, {0}}, slo)) {
    for (size_t i = 0; i < g.cells.size(); ++i) {
      std::vector<std::string> row = {g.labels[i], g.cells[i].cell.schedule,
                                      ServeLoad(g.cells[i].cell)};
      for (std::string& cell : ServeFigureCells(g.metrics[i], g.x_ar[i])) {
        row.push_back(std::move(cell));
      }
      rows.push_back(std::move(row));
    }
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t k = 0; k < row.size(); ++k) width[k] = std::max(width[k], ServeTextWidth(row[k]));
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t k = 0; k < row.size(); ++k) {
      const std::string pad(width[k] - ServeTextWidth(row[k]), ' ');
      line += (k == 0 ? "" : "  ") + (k < 3 ? row[k] + pad : pad + row[k]);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

namespace {

using Json = nlohmann::ordered_json;

Json ServeNumber(double v) {
  if (std::isnan(v)) return nullptr;
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

Json LatencyJson(const LatencySummary& l) {
  return {{"p50", ServeNumber(l.p50)}, {"p95", ServeNumber(l.p95)}, {"p99", ServeNumber(l.p99)}};
}

void AddServeMetricsJson(const ServeMetrics& m, Json& j) {
  j["output_throughput"] = ServeNumber(m.output_throughput);
  j["request_throughput"] = ServeNumber(m.request_throughput);
  j["makespan_ms"] = ServeNumber(m.makespan_ms);
  j["ttft_ms"] = LatencyJson(m.ttft_ms);
  j["tpot_ms"] = LatencyJson(m.tpot_ms);
  j["itl_ms"] = LatencyJson(m.itl_ms);
  j["e2e_ms"] = LatencyJson(m.e2e_ms);
  j["goodput"] = ServeNumber(m.goodput);
  j["mean_tau"] = ServeNumber(m.mean_tau);
  j["acceptance_rate"] = ServeNumber(m.acceptance_rate);
  j["mean_batch_size"] = ServeNumber(m.mean_batch_size);
  j["mean_verify_tokens"] = ServeNumber(m.mean_verify_tokens);
  j["mean_k"] = ServeNumber(m.mean_k);
}

}  // namespace

std::string ServeResultsText(const std::vector<ServeCellData>& cells) {
  if (cells.empty()) return "";
  std::string out = ServeTable(cells);
  for (const ServeGroup& group : BuildServeGroups(cells)) {
    for (const ServeSeries& s : group.series) {
      if (s.is_ar || s.crossover.points.empty()) continue;
      const CrossoverResult& x = s.crossover;
      const int64_t max_c = x.max_concurrency();
      out += StrCat("C* ", s.label, ": ", FormatCStar(x.c_star, max_c), " [95% CI ",
                    FormatCStar(x.c_star_ci.lo, max_c), ", ", FormatCStar(x.c_star_ci.hi, max_c),
                    "]\n");
    }
  }
  return out;
}

Json ServeResultsJson(const std::vector<ServeCellData>& cells) {
  Json groups = Json::array();
  for (const ServeGroup& g : BuildServeGroups(cells)) {
    Json j_cells = Json::array();
    for (size_t i = 0; i < g.cells.size(); ++i) {
      Json c;
      AppendRecordJson(g.cells[i].cell, ServeCellFields(), c);
      c["series"] = g.labels[i];
      c["x_ar"] = ServeNumber(g.x_ar[i]);
      AddServeMetricsJson(g.metrics[i], c);
      j_cells.push_back(std::move(c));
    }
    Json crossover = Json::array();
    for (const ServeSeries& s : g.series) {
      if (s.is_ar) continue;
      const CrossoverResult& x = s.crossover;
      crossover.push_back(
          {{"series", s.label},
           {"metric", CrossoverMetricName(x.options.metric)},
           {"c_star", ServeNumber(x.c_star)},
           {"c_star_ci", {ServeNumber(x.c_star_ci.lo), ServeNumber(x.c_star_ci.hi)}}});
    }
    groups.push_back({{"workload", g.title},
                      {"cells", std::move(j_cells)},
                      {"crossover", std::move(crossover)}});
  }
  return groups;
}

}  // namespace specbed
