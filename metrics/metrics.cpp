// Pure metric functions over raw results rows (see metrics.h; definitions in reports/README.md).
// Checked by: tests/reports/metrics_test.cpp.
#include "metrics/metrics.h"

#include <cmath>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

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

CaseMetrics ComputeCaseMetrics(const std::vector<SampleRecord>& samples,
                               const std::vector<StepRecord>& steps) {
  CaseMetrics m;
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

  for (const StepRecord& st : steps) {
    ++m.n_steps;
    m.drafted += st.n_drafted;
    m.accepted += st.n_accepted;
    m.emitted += st.n_emitted;
    if (std::isfinite(st.t_draft_us)) m.draft_ms += st.t_draft_us / 1000.0;
    if (std::isfinite(st.t_verify_us)) m.verify_ms += st.t_verify_us / 1000.0;
    if (std::isfinite(st.t_other_us)) m.other_ms += st.t_other_us / 1000.0;
  }
  if (m.n_steps > 0) {
    m.tau = static_cast<double>(m.emitted) / static_cast<double>(m.n_steps);
    if (m.decode_ms > 0) m.draft_fraction = m.draft_ms / m.decode_ms;
    if (m.drafted > 0) {
      m.rollback_rate =
          static_cast<double>(m.drafted - m.accepted) / static_cast<double>(m.drafted);
    }
  }
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

Speedup ComputeSpeedup(const std::vector<SampleRecord>& ar_samples,
                       const std::vector<SampleRecord>& method_samples) {
  std::map<std::pair<std::string, int32_t>, double> ar_ms;
  for (const SampleRecord& s : ar_samples) ar_ms[{s.prompt_id, s.turn}] = s.decode_ms;
  Speedup out;
  double ar_total = 0, method_total = 0;
  for (const SampleRecord& s : method_samples) {
    const auto it = ar_ms.find({s.prompt_id, s.turn});
    if (it == ar_ms.end() || !IsPositiveFinite(it->second) || !IsPositiveFinite(s.decode_ms)) {
      continue;
    }
    ++out.n_matched;
    out.per_prompt.push_back(it->second / s.decode_ms);
    ar_total += it->second;
    method_total += s.decode_ms;
  }
  if (out.n_matched > 0) {
    out.geomean = GeometricMean(out.per_prompt);
    out.total_ratio = ar_total / method_total;
  }
  return out;
}

}  // namespace specbed
