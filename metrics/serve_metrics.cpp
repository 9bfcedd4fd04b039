// Metrics of `specbed serve` (see serve_metrics.h; definitions in reports/README.md, "Serving
// under load").
// Checked by: tests/reports/serve_metrics_test.cpp.
#include "metrics/serve_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/enum_names.h"
#include "base/error.h"
#include "metrics/split_mix.h"

namespace specbed {

SPECBED_ENUM_NAMES(CrossoverMetric, "crossover metric", CrossoverMetricName, ParseCrossoverMetric,
                   {CrossoverMetric::kThroughput, "throughput"}, {CrossoverMetric::kTpot, "tpot"})

LatencySummary SummarizeLatencies(std::vector<double> values) {
  LatencySummary out;
  values.erase(
      std::remove_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); }),
      values.end());
  if (values.empty()) return out;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  out.n = static_cast<int64_t>(values.size());
  out.mean = sum / static_cast<double>(values.size());
  out.p50 = SortedQuantile(values, 0.50);
  out.p95 = SortedQuantile(values, 0.95);
  out.p99 = SortedQuantile(values, 0.99);
  return out;
}

std::vector<std::pair<double, int64_t>> ParseEmitsJson(const std::string& json,
                                                       const std::string& what) {
  std::vector<std::pair<double, int64_t>> out;
  if (json.empty()) return out;
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  SPECBED_CHECK(j.is_array(), what, ": emits_json is not a JSON array of [t_ms, n_tokens]: '",
                json.substr(0, 80), "'");
  for (const nlohmann::json& e : j) {
    SPECBED_CHECK(e.is_array() && e.size() == 2 && e[0].is_number() && e[1].is_number_integer(),
                  what, ": emits_json entry ", e.dump(), " is not [t_ms, n_tokens]");
    out.emplace_back(e[0].get<double>(), e[1].get<int64_t>());
  }
  return out;
}

namespace {

// (finish - first token) / (n_output_tokens - 1); NaN under 2 output tokens.
double RequestTpot(const ServeRequestRecord& r) {
  if (r.n_output_tokens < 2) return kNoValue;
  return (r.finish_ms - r.first_token_ms) / static_cast<double>(r.n_output_tokens - 1);
}

double Ratio(double num, double den) {
  return den > 0 ? num / den : kNoValue;
}

// The latency figures and the goodput count of `requests` into `m`.
void AddRequestLatencies(const std::vector<ServeRequestRecord>& requests, const ServeSlo& slo,
                         ServeMetrics& m) {
  std::vector<double> ttft, tpot, itl, e2e;
  double tau_sum = 0;
  int64_t tau_n = 0;
  for (const ServeRequestRecord& r : requests) {
    const double t_first = r.first_token_ms - r.arrival_ms;
    const double t_per = RequestTpot(r);
    ttft.push_back(t_first);
    tpot.push_back(t_per);
    e2e.push_back(r.finish_ms - r.arrival_ms);
    double last = r.first_token_ms;
    for (const auto& [t_ms, n] : ParseEmitsJson(r.emits_json, "request " + r.prompt_id)) {
      itl.push_back(t_ms - last);
      last = t_ms;
    }
    const bool ttft_ok = slo.ttft_ms <= 0 || t_first <= slo.ttft_ms;
    const bool tpot_ok = slo.tpot_ms <= 0 || !std::isfinite(t_per) || t_per <= slo.tpot_ms;
    if (ttft_ok && tpot_ok) ++m.n_good;
    m.output_tokens += r.n_output_tokens;
    m.n_drafted += r.n_drafted;
    m.n_accepted += r.n_accepted;
    if (r.n_steps > 0) {
      tau_sum += static_cast<double>(r.n_accepted + r.n_steps) / static_cast<double>(r.n_steps);
      ++tau_n;
    }
  }
  m.ttft_ms = SummarizeLatencies(std::move(ttft));
  m.tpot_ms = SummarizeLatencies(std::move(tpot));
  m.itl_ms = SummarizeLatencies(std::move(itl));
  m.e2e_ms = SummarizeLatencies(std::move(e2e));
  if (tau_n > 0) m.mean_tau = tau_sum / static_cast<double>(tau_n);
  if (m.n_drafted > 0) m.acceptance_rate = Ratio(m.n_accepted, m.n_drafted);
}

}  // namespace

ServeMetrics ComputeServeMetrics(const ServeCellRecord& cell,
                                 const std::vector<ServeRequestRecord>& requests,
                                 const std::vector<ServeStepRecord>& steps, const ServeSlo& slo) {
  ServeMetrics m;
  m.n_requests = static_cast<int64_t>(requests.size());
  AddRequestLatencies(requests, slo, m);
  m.makespan_ms = cell.makespan_ms;
  if (!(m.makespan_ms > 0) && !requests.empty()) {
    double first = requests[0].arrival_ms, last = requests[0].finish_ms;
    for (const ServeRequestRecord& r : requests) {
      first = std::min(first, r.arrival_ms);
      last = std::max(last, r.finish_ms);
    }
    m.makespan_ms = last - first;
  }
  const double makespan_s = m.makespan_ms / 1000.0;
  if (m.n_requests > 0) {
    m.output_throughput = Ratio(static_cast<double>(m.output_tokens), makespan_s);
    m.request_throughput = Ratio(static_cast<double>(m.n_requests), makespan_s);
    m.goodput = Ratio(static_cast<double>(m.n_good), makespan_s);
  }
  double batch = 0, rows = 0, k = 0;
  for (const ServeStepRecord& st : steps) {
    if (st.n_verify_tokens <= 0) continue;
    ++m.n_decode_steps;
    batch += static_cast<double>(st.batch_size);
    rows += static_cast<double>(st.n_verify_tokens);
    k += static_cast<double>(st.k_chosen);
  }
  if (m.n_decode_steps > 0) {
    const double n = static_cast<double>(m.n_decode_steps);
    m.mean_batch_size = batch / n;
    m.mean_verify_tokens = rows / n;
    m.mean_k = k / n;
  }
  return m;
}

// ---- The crossover concurrency C* ---------------------------------------------------------------

namespace {

// One request of a trace at one concurrency, on both sides.
struct PairedRequest {
  double method_out = 0, method_e2e = 0, ar_out = 0, ar_e2e = 0;
  double method_tpot = kNoValue, ar_tpot = kNoValue;
};

// The paired requests of one (concurrency, seed): slot[position in the seed's trace] indexes
// `pairs`, -1 = the request is missing on one side.
struct PairedCell {
  bool present = false;
  std::vector<int> slot;
  std::vector<PairedRequest> pairs;
};

struct CrossoverData {
  std::vector<int64_t> grid;                  // concurrencies, ascending
  std::vector<uint64_t> seeds;                // ascending
  std::vector<std::vector<int64_t>> trace;    // per seed: its request indices (union over C)
  std::vector<std::vector<PairedCell>> cell;  // [concurrency][seed]
};

// A draw of the two-stage bootstrap: per drawn seed, the drawn positions of its trace.
using Draw = std::vector<std::pair<size_t, std::vector<size_t>>>;

using CellKey = std::pair<int64_t, uint64_t>;  // (concurrency, seed)

// The closed-loop method cells with their AR partner at the same (C, seed).
std::map<CellKey, std::pair<const ServeCellData*, const ServeCellData*>> MatchCells(
    const std::vector<ServeCellData>& method_cells, const std::vector<ServeCellData>& ar_cells,
    int64_t* n_unpaired) {
  std::map<CellKey, const ServeCellData*> ar;
  for (const ServeCellData& a : ar_cells) {
    if (a.cell.mode == "closed") ar.emplace(CellKey{a.cell.concurrency, a.cell.seed}, &a);
  }
  std::map<CellKey, std::pair<const ServeCellData*, const ServeCellData*>> matched;
  std::map<CellKey, const ServeCellData*> seen;
  for (const ServeCellData& m : method_cells) {
    if (m.cell.mode != "closed") continue;
    const CellKey key{m.cell.concurrency, m.cell.seed};
    const auto [it, fresh] = seen.emplace(key, &m);
    SPECBED_CHECK(fresh, "crossover of method '", m.cell.method, "': cells '",
                  it->second->cell.cell_key, "' and '", m.cell.cell_key,
                  "' both ran at concurrency ", key.first, " with seed ", key.second,
                  "; pass the cells of one method configuration");
    const auto partner = ar.find(key);
    if (partner == ar.end()) {
      ++*n_unpaired;
    } else {
      matched.emplace(key, std::make_pair(&m, partner->second));
    }
  }
  return matched;
}

PairedRequest Pair(const ServeRequestRecord& m, const ServeRequestRecord& a) {
  PairedRequest p;
  p.method_out = static_cast<double>(m.n_output_tokens);
  p.method_e2e = m.finish_ms - m.arrival_ms;
  p.ar_out = static_cast<double>(a.n_output_tokens);
  p.ar_e2e = a.finish_ms - a.arrival_ms;
  p.method_tpot = RequestTpot(m);
  p.ar_tpot = RequestTpot(a);
  return p;
}

CrossoverData PairCells(const std::vector<ServeCellData>& method_cells,
                        const std::vector<ServeCellData>& ar_cells, int64_t* n_unpaired) {
  const auto matched = MatchCells(method_cells, ar_cells, n_unpaired);
  CrossoverData d;
  std::set<int64_t> grid;
  std::set<uint64_t> seeds;
  std::map<uint64_t, std::set<int64_t>> trace;
  for (const auto& [key, cells] : matched) {
    grid.insert(key.first);
    seeds.insert(key.second);
    for (const ServeRequestRecord& r : cells.first->requests)
      trace[key.second].insert(r.request_index);
  }
  d.grid.assign(grid.begin(), grid.end());
  d.seeds.assign(seeds.begin(), seeds.end());
  for (uint64_t s : d.seeds) d.trace.emplace_back(trace[s].begin(), trace[s].end());
  d.cell.assign(d.grid.size(), std::vector<PairedCell>(d.seeds.size()));
  for (const auto& [key, cells] : matched) {
    const size_t c = std::lower_bound(d.grid.begin(), d.grid.end(), key.first) - d.grid.begin();
    const size_t s = std::lower_bound(d.seeds.begin(), d.seeds.end(), key.second) - d.seeds.begin();
    std::map<int64_t, const ServeRequestRecord*> ar_by_index;
    for (const ServeRequestRecord& r : cells.second->requests) ar_by_index[r.request_index] = &r;
    PairedCell& pc = d.cell[c][s];
    pc.present = true;
    pc.slot.assign(d.trace[s].size(), -1);
    for (const ServeRequestRecord& r : cells.first->requests) {
      const auto a = ar_by_index.find(r.request_index);
      if (a == ar_by_index.end()) continue;
      const size_t pos = std::lower_bound(d.trace[s].begin(), d.trace[s].end(), r.request_index) -
                         d.trace[s].begin();
      pc.slot[pos] = static_cast<int>(pc.pairs.size());
      pc.pairs.push_back(Pair(r, *a->second));
    }
  }
  return d;
}

// The point on one concurrency of the requests in `draw`: fills method / ar / ratio / n_pairs.
void EvaluateAt(const CrossoverData& d, size_t c, const Draw& draw, CrossoverMetric metric,
                CrossoverPoint& p) {
  double m_out = 0, m_e2e = 0, a_out = 0, a_e2e = 0;
  std::vector<double> m_tpot, a_tpot;
  p.n_pairs = 0;
  for (const auto& [s, positions] : draw) {
    const PairedCell& pc = d.cell[c][s];
    if (!pc.present) continue;
    for (size_t pos : positions) {
      if (pc.slot[pos] < 0) continue;
      const PairedRequest& r = pc.pairs[pc.slot[pos]];
      ++p.n_pairs;
      m_out += r.method_out;
      m_e2e += r.method_e2e;
      a_out += r.ar_out;
      a_e2e += r.ar_e2e;
      if (std::isfinite(r.method_tpot)) m_tpot.push_back(r.method_tpot);
      if (std::isfinite(r.ar_tpot)) a_tpot.push_back(r.ar_tpot);
    }
  }
  const double concurrency = static_cast<double>(d.grid[c]);
  if (metric == CrossoverMetric::kThroughput) {
    p.method = concurrency * Ratio(m_out, m_e2e) * 1000.0;
    p.ar = concurrency * Ratio(a_out, a_e2e) * 1000.0;
    p.ratio = Ratio(p.method, p.ar);
  } else {
    std::sort(m_tpot.begin(), m_tpot.end());
    std::sort(a_tpot.begin(), a_tpot.end());
    p.method = SortedQuantile(m_tpot, 0.5);
    p.ar = SortedQuantile(a_tpot, 0.5);
    p.ratio = Ratio(p.ar, p.method);
  }
}

// The smallest concurrency whose ratio is <= 1 + margin; +infinity when every finite ratio is
// above it; NaN when none is finite.
double CStarOf(const std::vector<int64_t>& grid, const std::vector<double>& ratios, double margin) {
  bool any = false;
  for (size_t i = 0; i < grid.size(); ++i) {
    if (!std::isfinite(ratios[i])) continue;
    any = true;
    if (ratios[i] <= 1.0 + margin) return static_cast<double>(grid[i]);
  }
  return any ? std::numeric_limits<double>::infinity() : kNoValue;
}

// The value at or below which at least a fraction q of `sorted` lies (inverse empirical CDF).
double DiscreteQuantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return kNoValue;
  const double rank = std::ceil(q * static_cast<double>(sorted.size()));
  const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(sorted.size())));
  return sorted[i - 1];
}

// One resample: seeds with replacement, then each drawn seed's trace positions with replacement.
Draw Resample(const CrossoverData& d, SplitMix64& rng) {
  Draw draw(d.seeds.size());
  for (auto& [s, positions] : draw) {
    s = rng.Index(d.seeds.size());
    positions.resize(d.trace[s].size());
    for (size_t& pos : positions) pos = rng.Index(d.trace[s].size());
  }
  return draw;
}

// The bootstrap intervals of every point's ratio and of C* into `out`.
void BootstrapCrossover(const CrossoverData& d, CrossoverResult& out) {
  const BootstrapOptions& b = out.options.bootstrap;
  SPECBED_CHECK(b.level > 0 && b.level < 1, "bootstrap level ", b.level,
                " must lie strictly between 0 and 1");
  SplitMix64 rng(b.seed);
  std::vector<std::vector<double>> ratios(d.grid.size());
  std::vector<double> c_stars;
  std::vector<double> replicate(d.grid.size());
  for (int64_t i = 0; i < b.n_resamples; ++i) {
    const Draw draw = Resample(d, rng);
    for (size_t c = 0; c < d.grid.size(); ++c) {
      CrossoverPoint p;
      EvaluateAt(d, c, draw, out.options.metric, p);
      replicate[c] = p.ratio;
      if (std::isfinite(p.ratio)) ratios[c].push_back(p.ratio);
    }
    const double c_star = CStarOf(d.grid, replicate, out.options.tie_margin);
    if (!std::isnan(c_star)) c_stars.push_back(c_star);
  }
  const double tail = (1.0 - b.level) / 2.0;
  for (size_t c = 0; c < d.grid.size(); ++c) {
    std::sort(ratios[c].begin(), ratios[c].end());
    out.points[c].ratio_ci = {SortedQuantile(ratios[c], tail),
                              SortedQuantile(ratios[c], 1.0 - tail)};
  }
  std::sort(c_stars.begin(), c_stars.end());
  out.c_star_ci = {DiscreteQuantile(c_stars, tail), DiscreteQuantile(c_stars, 1.0 - tail)};
}

}  // namespace

CrossoverResult ComputeCrossover(const std::vector<ServeCellData>& method_cells,
                                 const std::vector<ServeCellData>& ar_cells,
                                 const CrossoverOptions& options) {
  CrossoverResult out;
  out.options = options;
  const CrossoverData d = PairCells(method_cells, ar_cells, &out.n_unpaired_cells);
  // The point estimates: every seed once, every request of its trace once.
  Draw all(d.seeds.size());
  for (size_t s = 0; s < d.seeds.size(); ++s) {
    all[s].first = s;
    for (size_t pos = 0; pos < d.trace[s].size(); ++pos) all[s].second.push_back(pos);
  }
  std::vector<double> ratios;
  for (size_t c = 0; c < d.grid.size(); ++c) {
    CrossoverPoint p;
    p.concurrency = d.grid[c];
    for (const PairedCell& pc : d.cell[c]) p.n_seeds += pc.present ? 1 : 0;
    EvaluateAt(d, c, all, options.metric, p);
    p.crossed = std::isfinite(p.ratio) && p.ratio <= 1.0 + options.tie_margin;
    ratios.push_back(p.ratio);
    out.points.push_back(p);
  }
  out.c_star = CStarOf(d.grid, ratios, options.tie_margin);
  if (options.bootstrap.n_resamples > 0 && !d.grid.empty()) BootstrapCrossover(d, out);
  return out;
}

}  // namespace specbed
