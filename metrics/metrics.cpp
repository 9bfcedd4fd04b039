// Pure metric functions over raw results rows (see metrics.h; definitions in reports/README.md).
// Checked by: tests/reports/metrics_test.cpp.
#include "metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/enum_names.h"
#include "base/error.h"
#include "metrics/split_mix.h"

namespace specbed {
namespace {

bool IsPositiveFinite(double v) {
  return std::isfinite(v) && v > 0;
}

// The value of `key` in a JSON object text, or null when the text is no object or lacks the key.
nlohmann::json ConfigValue(const std::string& config_json, const char* key) {
  const nlohmann::json j = nlohmann::json::parse(config_json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains(key)) return nullptr;
  return j.at(key);
}

}  // namespace

int64_t DecodeTokens(const SampleRecord& sample) {
  return sample.n_output_tokens > 1 ? sample.n_output_tokens - 1 : 0;
}

double SampleDecodeTokensPerS(const SampleRecord& sample) {
  if (!IsPositiveFinite(sample.decode_ms)) return kNoValue;
  return static_cast<double>(DecodeTokens(sample)) / sample.decode_ms * 1000.0;
}

double GeometricMean(const std::vector<double>& values) {
  double log_sum = 0;
  int64_t n = 0;
  for (double v : values) {
    if (!IsPositiveFinite(v)) continue;
    log_sum += std::log(v);
    ++n;
  }
  return n == 0 ? kNoValue : std::exp(log_sum / static_cast<double>(n));
}

int64_t StepDraftDepth(const StepRecord& step) {
  return step.draft_depth >= 0 ? step.draft_depth : step.n_drafted;
}

PositionAcceptance ComputePositionAcceptance(const std::vector<StepRecord>& steps) {
  PositionAcceptance p;
  int64_t max_depth = 0;
  for (const StepRecord& st : steps) max_depth = std::max(max_depth, StepDraftDepth(st));
  p.n_reached.assign(max_depth, 0);
  p.n_accepted.assign(max_depth, 0);
  p.n_conditional.assign(max_depth, 0);
  for (const StepRecord& st : steps) {
    const int64_t depth = StepDraftDepth(st);
    const int64_t accepted = std::min(st.n_accepted, depth);  // stored rows satisfy this
    for (int64_t i = 1; i <= depth; ++i) {
      ++p.n_reached[i - 1];
      if (accepted >= i - 1) ++p.n_conditional[i - 1];
      if (accepted >= i) ++p.n_accepted[i - 1];
    }
  }
  auto ratio = [](int64_t num, int64_t den) {
    return den > 0 ? static_cast<double>(num) / static_cast<double>(den) : kNoValue;
  };
  for (int64_t i = 0; i < max_depth; ++i) {
    p.r.push_back(ratio(p.n_accepted[i], p.n_reached[i]));
    p.alpha.push_back(ratio(p.n_accepted[i], p.n_conditional[i]));
  }
  return p;
}

namespace {

// Totals over the samples: tokens, decode time, prefill, stop reasons.
void AddSampleTotals(const std::vector<SampleRecord>& samples, CaseMetrics& m) {
  std::set<std::string> prompt_ids;
  double prefill_sum = 0;
  for (const SampleRecord& s : samples) {
    ++m.n_samples;
    prompt_ids.insert(s.prompt_id);
    m.output_tokens += s.n_output_tokens;
    m.decode_tokens += DecodeTokens(s);
    if (std::isfinite(s.decode_ms)) m.decode_ms += s.decode_ms;
    prefill_sum += s.prefill_ms;
    ++m.stop_reasons[s.stop_reason];
  }
  m.n_prompts = static_cast<int64_t>(prompt_ids.size());
  if (m.decode_ms > 0) m.decode_tokens_per_s = m.decode_tokens / m.decode_ms * 1000.0;
  if (m.n_samples > 0) m.prefill_ms_mean = prefill_sum / static_cast<double>(m.n_samples);
}

// Sums of the per-step rows that later schema versions added (-1 = not recorded: left out).
struct RecordedStepSums {
  double busy_draft_us = 0, busy_verify_us = 0;
  int64_t busy_steps = 0;
  int64_t rollback_steps = 0, trimmed_steps = 0, prefill_steps = 0;
  // v12: engine counters and device time, and how many steps recorded each.
  int64_t launches = 0, replays = 0, h2d = 0, d2h = 0;
  int64_t launch_steps = 0, counter_steps = 0, device_steps = 0;
  double device_us = 0, device_wall_us = 0;  // the phases' device time, their wall time
};

void AddEngineStep(const StepRecord& st, RecordedStepSums& r) {
  if (st.n_launches >= 0) {
    r.launches += st.n_launches;
    ++r.launch_steps;
  }
  if (st.n_graph_replays >= 0 && st.n_h2d_copies >= 0 && st.n_d2h_copies >= 0) {
    r.replays += st.n_graph_replays;
    r.h2d += st.n_h2d_copies;
    r.d2h += st.n_d2h_copies;
    ++r.counter_steps;
  }
  if (st.t_draft_device_us >= 0 && st.t_verify_device_us >= 0 && st.t_other_device_us >= 0) {
    r.device_us += st.t_draft_device_us + st.t_verify_device_us + st.t_other_device_us;
    r.device_wall_us += st.t_draft_us + st.t_verify_us + st.t_other_us;
    ++r.device_steps;
  }
}

// Per-step means of the engine counters and the device-time share (every step recorded them).
void FinishEngineRates(const RecordedStepSums& r, CaseMetrics& m) {
  if (m.n_steps == 0) return;
  const double n = static_cast<double>(m.n_steps);
  if (r.launch_steps == m.n_steps) m.launches_per_step = static_cast<double>(r.launches) / n;
  if (r.counter_steps == m.n_steps) {
    m.replays_per_step = static_cast<double>(r.replays) / n;
    m.h2d_per_step = static_cast<double>(r.h2d) / n;
    m.d2h_per_step = static_cast<double>(r.d2h) / n;
  }
  if (r.device_steps == m.n_steps && r.device_wall_us > 0) {
    m.device_time_fraction = r.device_us / r.device_wall_us;
  }
}

void AddStep(const StepRecord& st, CaseMetrics& m, RecordedStepSums& r) {
  ++m.n_steps;
  m.drafted += st.n_drafted;
  m.accepted += st.n_accepted;
  m.emitted += st.n_emitted;
  if (std::isfinite(st.t_draft_us)) m.draft_ms += st.t_draft_us / 1000.0;
  if (std::isfinite(st.t_verify_us)) m.verify_ms += st.t_verify_us / 1000.0;
  if (std::isfinite(st.t_other_us)) m.other_ms += st.t_other_us / 1000.0;
  if (std::isfinite(st.t_adapt_us)) m.adapt_ms += st.t_adapt_us / 1000.0;
  m.rollback_events += st.n_rollback_events;
  if (st.n_rolled_back >= 0 && st.n_draft_generated >= 0) {
    m.rolled_back += st.n_rolled_back;
    m.draft_generated += st.n_draft_generated;
    ++r.rollback_steps;
    if (st.n_trimmed >= 0) {
      m.trimmed += st.n_trimmed;
      ++r.trimmed_steps;
    }
  }
  if (st.t_draft_prefill_us >= 0) {
    m.draft_prefill_ms += st.t_draft_prefill_us / 1000.0;
    ++r.prefill_steps;
  }
  if (st.n_target_forwards >= 0) m.target_forwards += st.n_target_forwards;
  AddEngineStep(st, r);
  if (st.t_draft_busy_us >= 0 && st.t_verify_busy_us >= 0) {
    r.busy_draft_us += st.t_draft_busy_us;
    r.busy_verify_us += st.t_verify_busy_us;
    ++r.busy_steps;
  }
}

// Rates of the recorded sums: rollback rates, target forwards, busy times, drafter prefill.
void FinishRecordedRates(const RecordedStepSums& r, CaseMetrics& m) {
  if (m.draft_generated > 0) {
    const double generated = static_cast<double>(m.draft_generated);
    m.spec_rollback_rate = static_cast<double>(m.rolled_back) / generated;
    // Trimming is waste too; only when every step that counted rollbacks counted trimming.
    if (r.trimmed_steps == r.rollback_steps) {
      m.draft_waste_rate = static_cast<double>(m.rolled_back + m.trimmed) / generated;
    }
  }
  if (m.target_forwards > 0 && m.n_samples > 0) {
    m.target_forwards_per_sample =
        static_cast<double>(m.target_forwards) / static_cast<double>(m.n_samples);
  }
  if (r.busy_steps > 0) {
    m.draft_busy_us_per_step = r.busy_draft_us / static_cast<double>(r.busy_steps);
    m.verify_busy_us_per_step = r.busy_verify_us / static_cast<double>(r.busy_steps);
  }
  if (r.prefill_steps == m.n_steps && m.n_steps > 0 && m.decode_ms > 0) {
    m.draft_prefill_fraction = m.draft_prefill_ms / m.decode_ms;
  }
  FinishEngineRates(r, m);
}

// τ, phase shares and per-step costs, per-position acceptance.
void FinishStepRates(const std::vector<StepRecord>& steps, CaseMetrics& m) {
  if (m.n_steps == 0) return;
  const double n = static_cast<double>(m.n_steps);
  m.tau = static_cast<double>(m.emitted) / n;
  if (m.decode_ms > 0) {
    m.draft_fraction = m.draft_ms / m.decode_ms;
    m.verify_fraction = m.verify_ms / m.decode_ms;
    m.other_fraction = m.other_ms / m.decode_ms;
    m.adapt_fraction = m.adapt_ms / m.decode_ms;
  }
  m.draft_us_per_step = m.draft_ms * 1000.0 / n;
  m.verify_us_per_step = m.verify_ms * 1000.0 / n;
  m.other_us_per_step = m.other_ms * 1000.0 / n;
  m.rollback_events_per_step = static_cast<double>(m.rollback_events) / n;
  m.positions = ComputePositionAcceptance(steps);
  m.drafted_per_step = static_cast<double>(m.drafted) / n;
  if (m.drafted > 0) {
    m.rollback_rate = static_cast<double>(m.drafted - m.accepted) / static_cast<double>(m.drafted);
  }
}

}  // namespace

CaseMetrics ComputeCaseMetrics(const std::vector<SampleRecord>& samples,
                               const std::vector<StepRecord>& steps) {
  CaseMetrics m;
  AddSampleTotals(samples, m);
  RecordedStepSums recorded;
  for (const StepRecord& st : steps) AddStep(st, m, recorded);
  FinishRecordedRates(recorded, m);
  FinishStepRates(steps, m);
  return m;
}

std::string FormatStopReasons(const std::map<std::string, int64_t>& stop_reasons) {
  if (stop_reasons.empty()) return "—";
  std::string out;
  for (const auto& [reason, count] : stop_reasons) {
    if (!out.empty()) out += ", ";
    out += reason + " " + std::to_string(count);
  }
  return out;
}

bool SameWorkload(const CaseRecord& a, const CaseRecord& b) {
  const bool same = a.target == b.target && a.dataset == b.dataset &&
                    a.categories == b.categories && a.prompt_limit == b.prompt_limit &&
                    a.temperature == b.temperature && a.top_p == b.top_p && a.top_k == b.top_k &&
                    a.seed == b.seed && a.max_new_tokens == b.max_new_tokens &&
                    a.batch_size == b.batch_size && a.dtype == b.dtype && a.device == b.device &&
                    a.threads == b.threads;
  if (!same) return false;
  for (const char* key : {"stop_strings", "chat_template", "system_prompt"}) {
    const nlohmann::json va = ConfigValue(a.config_json, key);
    const nlohmann::json vb = ConfigValue(b.config_json, key);
    if (!va.is_null() && !vb.is_null() && va != vb) return false;
  }
  return true;
}

bool IsArBaseline(const CaseRecord& c) {
  if (!c.method_traits_json.empty()) {
    const nlohmann::json traits = nlohmann::json::parse(c.method_traits_json, nullptr, false);
    if (traits.is_object() && traits.contains("speculative") && traits["speculative"].is_boolean())
      return !traits["speculative"].get<bool>();
  }
  return c.method == kArMethod;
}

BaselineMatch FindArBaseline(const std::vector<ResultsStore::CaseRow>& cases, size_t i,
                             const BaselinePolicy& policy) {
  BaselineMatch out;
  SPECBED_CHECK(i < cases.size(), "FindArBaseline: case index ", i, " out of range (", cases.size(),
                " cases)");
  const ResultsStore::CaseRow& c = cases[i];
  if (IsArBaseline(c.record)) return out;
  int64_t same_machine = -1, other_machine = -1;
  for (size_t j = 0; j < cases.size(); ++j) {
    const ResultsStore::CaseRow& b = cases[j];
    if (j == i || !IsArBaseline(b.record) || !SameWorkload(b.record, c.record)) continue;
    if (b.run_id == c.run_id) return {static_cast<int64_t>(j), true, true, -1};
    int64_t& slot = b.machine == c.machine ? same_machine : other_machine;
    if (slot < 0) slot = static_cast<int64_t>(j);
  }
  if (same_machine >= 0) {
    out.index = same_machine;
    out.same_machine = true;
  } else if (other_machine >= 0 && policy.cross_machine) {
    out.index = other_machine;
  } else {
    out.refused_index = other_machine;
  }
  return out;
}

double SortedQuantile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return kNoValue;
  const double h = (static_cast<double>(sorted.size()) - 1.0) * std::clamp(q, 0.0, 1.0);
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

constexpr EnumName<SpeedupScope> kSpeedupScopeNames[] = {{SpeedupScope::kDecode, "decode"},
                                                         {SpeedupScope::kEndToEnd, "end_to_end"}};

const char* SpeedupScopeName(SpeedupScope scope) {
  return EnumNameOf(kSpeedupScopeNames, scope);
}

SpeedupScope ParseSpeedupScope(const std::string& name, const std::string& context) {
  if (const std::optional<SpeedupScope> scope = EnumValueOf(kSpeedupScopeNames, name))
    return *scope;
  if (name == "e2e") return SpeedupScope::kEndToEnd;  // the short spelling
  Fail(context, ": unknown speedup scope '", name,
       "' (expected 'decode' or 'end_to_end' / 'e2e': prefill included)");
}

Speedup ComputeSpeedup(const std::vector<SampleRecord>& ar_samples,
                       const std::vector<SampleRecord>& method_samples,
                       const BootstrapOptions& bootstrap, SpeedupScope scope) {
  std::map<std::pair<std::string, int32_t>, const SampleRecord*> ar_by_key;
  for (const SampleRecord& s : ar_samples) ar_by_key[{s.prompt_id, s.turn}] = &s;
  const bool e2e = scope == SpeedupScope::kEndToEnd;
  // Tokens and time of an answer in the scope.
  auto tokens_of = [&](int64_t n_output_tokens) {
    return e2e ? n_output_tokens : (n_output_tokens > 1 ? n_output_tokens - 1 : 0);
  };
  auto ms_of = [&](double prefill_ms, double decode_ms) {
    return e2e ? prefill_ms + decode_ms : decode_ms;
  };
  Speedup out;
  out.scope = scope;
  out.bootstrap = bootstrap;
  double ar_ms = 0, method_ms = 0, ar_tokens = 0, method_tokens = 0;
  for (const SampleRecord& s : method_samples) {
    Speedup::Pair p;
    p.prompt_id = s.prompt_id;
    p.turn = s.turn;
    p.method_ms = ms_of(s.prefill_ms, s.decode_ms);
    p.method_tokens = tokens_of(s.n_output_tokens);
    if (s.has_paired_ar()) {
      p.paired = true;
      p.ar_ms = ms_of(s.paired_ar_prefill_ms, s.paired_ar_decode_ms);
      p.ar_tokens = tokens_of(s.paired_ar_output_tokens);
    } else {
      const auto it = ar_by_key.find({s.prompt_id, s.turn});
      if (it == ar_by_key.end()) continue;
      p.ar_ms = ms_of(it->second->prefill_ms, it->second->decode_ms);
      p.ar_tokens = tokens_of(it->second->n_output_tokens);
    }
    if (!IsPositiveFinite(p.ar_ms) || !IsPositiveFinite(p.method_ms) || p.ar_tokens <= 0 ||
        p.method_tokens <= 0) {
      continue;
    }
    ++out.n_matched;
    if (p.paired) ++out.n_paired;
    out.per_prompt.push_back(p.ratio());
    ar_ms += p.ar_ms;
    method_ms += p.method_ms;
    ar_tokens += static_cast<double>(p.ar_tokens);
    method_tokens += static_cast<double>(p.method_tokens);
    out.pairs.push_back(std::move(p));
  }
  if (out.n_matched == 0) return out;
  out.geomean = GeometricMean(out.per_prompt);
  out.total_ratio = (method_tokens / method_ms) / (ar_tokens / ar_ms);

  // Bootstrap units: prompts (Spec-Bench's questions), each with the sums of its matched turns.
  struct Cluster {
    double log_sum = 0, ar_ms = 0, method_ms = 0, ar_tokens = 0, method_tokens = 0;
    int64_t n = 0;
    double method_speed() const { return method_tokens / method_ms; }
    double ar_speed() const { return ar_tokens / ar_ms; }
  };
  std::vector<Cluster> clusters;
  std::map<std::string, size_t> cluster_of;
  for (const Speedup::Pair& p : out.pairs) {
    auto it = cluster_of.emplace(p.prompt_id, clusters.size()).first;
    if (it->second == clusters.size()) clusters.emplace_back();
    Cluster& c = clusters[it->second];
    c.log_sum += std::log(p.ratio());
    c.ar_ms += p.ar_ms;
    c.method_ms += p.method_ms;
    c.ar_tokens += static_cast<double>(p.ar_tokens);
    c.method_tokens += static_cast<double>(p.method_tokens);
    ++c.n;
  }
  out.n_prompts = static_cast<int64_t>(clusters.size());
  {
    double method_speed = 0, ar_speed = 0;
    for (const Cluster& c : clusters) {
      method_speed += c.method_speed();
      ar_speed += c.ar_speed();
    }
    out.spec_bench = method_speed / ar_speed;  // the 1/n of both means cancels
  }
  if (bootstrap.n_resamples <= 0) return out;
  SPECBED_CHECK(bootstrap.level > 0 && bootstrap.level < 1, "bootstrap level ", bootstrap.level,
                " must lie strictly between 0 and 1");
  SplitMix64 rng(bootstrap.seed);
  std::vector<double> geomeans, totals, spec_bench;
  geomeans.reserve(bootstrap.n_resamples);
  totals.reserve(bootstrap.n_resamples);
  spec_bench.reserve(bootstrap.n_resamples);
  for (int64_t b = 0; b < bootstrap.n_resamples; ++b) {
    Cluster sum;
    double method_speed = 0, ar_speed = 0;
    for (size_t k = 0; k < clusters.size(); ++k) {
      const Cluster& c = clusters[rng.Index(clusters.size())];
      sum.log_sum += c.log_sum;
      sum.ar_ms += c.ar_ms;
      sum.method_ms += c.method_ms;
      sum.ar_tokens += c.ar_tokens;
      sum.method_tokens += c.method_tokens;
      sum.n += c.n;
      method_speed += c.method_speed();
      ar_speed += c.ar_speed();
    }
    geomeans.push_back(std::exp(sum.log_sum / static_cast<double>(sum.n)));
    totals.push_back(sum.method_speed() / sum.ar_speed());
    spec_bench.push_back(method_speed / ar_speed);
  }
  std::sort(geomeans.begin(), geomeans.end());
  std::sort(totals.begin(), totals.end());
  std::sort(spec_bench.begin(), spec_bench.end());
  const double tail = (1.0 - bootstrap.level) / 2.0;
  out.geomean_ci = {SortedQuantile(geomeans, tail), SortedQuantile(geomeans, 1.0 - tail)};
  out.total_ratio_ci = {SortedQuantile(totals, tail), SortedQuantile(totals, 1.0 - tail)};
  out.spec_bench_ci = {SortedQuantile(spec_bench, tail), SortedQuantile(spec_bench, 1.0 - tail)};
  return out;
}

Interval GeomeanClusterInterval(const std::vector<LogCluster>& clusters,
                                const BootstrapOptions& bootstrap) {
  if (clusters.empty() || bootstrap.n_resamples <= 0) return {};
  SPECBED_CHECK(bootstrap.level > 0 && bootstrap.level < 1, "bootstrap level ", bootstrap.level,
                " must lie strictly between 0 and 1");
  SplitMix64 rng(bootstrap.seed);
  std::vector<double> stats;
  stats.reserve(bootstrap.n_resamples);
  for (int64_t b = 0; b < bootstrap.n_resamples; ++b) {
    LogCluster sum;
    for (size_t k = 0; k < clusters.size(); ++k) {
      const LogCluster& c = clusters[rng.Index(clusters.size())];
      sum.log_sum += c.log_sum;
      sum.n += c.n;
    }
    stats.push_back(std::exp(sum.log_sum / static_cast<double>(sum.n)));
  }
  std::sort(stats.begin(), stats.end());
  const double tail = (1.0 - bootstrap.level) / 2.0;
  return {SortedQuantile(stats, tail), SortedQuantile(stats, 1.0 - tail)};
}

namespace {

nlohmann::json ParseJsonArray(const std::string& json, const std::string& what) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  SPECBED_CHECK(j.is_array(), what, ": expected a JSON array of numbers, got '",
                json.size() > 80 ? json.substr(0, 80) + "..." : json, "'");
  return j;
}

}  // namespace

std::vector<int64_t> ParseTokenIdsJson(const std::string& json, const std::string& what) {
  if (json.empty()) return {};
  const nlohmann::json j = ParseJsonArray(json, what);
  std::vector<int64_t> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    SPECBED_CHECK(j[i].is_number_integer(), what, ": element ", i, " is ", j[i].dump(),
                  "; expected an integer token id");
    out.push_back(j[i].get<int64_t>());
  }
  return out;
}

std::vector<double> ParseMarginsJson(const std::string& json, const std::string& what) {
  if (json.empty()) return {};
  const nlohmann::json j = ParseJsonArray(json, what);
  std::vector<double> out;
  out.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    if (j[i].is_null()) {
      out.push_back(kNoValue);
      continue;
    }
    SPECBED_CHECK(j[i].is_number(), what, ": element ", i, " is ", j[i].dump(),
                  "; expected a number (a logit margin) or null");
    out.push_back(j[i].get<double>());
  }
  return out;
}

ExactMatch ComputeExactMatch(const std::vector<SampleRecord>& ar_samples,
                             const std::vector<SampleRecord>& method_samples) {
  std::map<std::pair<std::string, int32_t>, const SampleRecord*> ar_by_key;
  for (const SampleRecord& s : ar_samples) ar_by_key[{s.prompt_id, s.turn}] = &s;
  auto where = [](const char* side, const SampleRecord& s, const char* field) {
    return StrCat(side, " sample (prompt '", s.prompt_id, "' turn ", s.turn, ") ", field);
  };
  ExactMatch out;
  std::vector<double> positions;
  for (const SampleRecord& s : method_samples) {
    const auto it = ar_by_key.find({s.prompt_id, s.turn});
    if (it == ar_by_key.end()) continue;
    const SampleRecord& ar = *it->second;
    if (ar.output_ids_json.empty() || s.output_ids_json.empty()) continue;
    const std::vector<int64_t> a =
        ParseTokenIdsJson(ar.output_ids_json, where("AR", ar, "output_ids_json"));
    const std::vector<int64_t> m =
        ParseTokenIdsJson(s.output_ids_json, where("method", s, "output_ids_json"));
    ++out.n_matched;
    if (a == m) {
      ++out.n_exact;
      continue;
    }
    const size_t common = std::min(a.size(), m.size());
    size_t pos = 0;
    while (pos < common && a[pos] == m[pos]) ++pos;
    ExactMatch::Divergence d;
    d.prompt_id = s.prompt_id;
    d.turn = s.turn;
    d.position = static_cast<int64_t>(pos);
    d.ar_token = pos < a.size() ? a[pos] : -1;
    d.method_token = pos < m.size() ? m[pos] : -1;
    const std::vector<double> margins =
        ParseMarginsJson(ar.token_margins_json, where("AR", ar, "token_margins_json"));
    if (pos < a.size() && pos < margins.size()) d.margin = margins[pos];
    positions.push_back(static_cast<double>(pos));
    if (out.min_position < 0 || d.position < out.min_position) out.min_position = d.position;
    if (std::isfinite(d.margin) && (std::isnan(out.min_margin) || d.margin < out.min_margin)) {
      out.min_margin = d.margin;
    }
    out.divergences.push_back(std::move(d));
  }
  if (out.n_matched > 0) {
    out.rate = static_cast<double>(out.n_exact) / static_cast<double>(out.n_matched);
  }
  std::sort(positions.begin(), positions.end());
  out.median_position = SortedQuantile(positions, 0.5);
  return out;
}

}  // namespace specbed
