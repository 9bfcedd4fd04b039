// Token sampling (see sampler.h).
#include "harness/engine/sampler.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>

#include "base/error.h"

namespace specbed {
namespace {

std::atomic<int> g_draft_fault{static_cast<int>(DraftFault::kNone)};

}  // namespace

void SetDraftFaultForTesting(DraftFault fault) {
  g_draft_fault.store(static_cast<int>(fault), std::memory_order_relaxed);
}

DraftFault DraftFaultForTesting() {
  return static_cast<DraftFault>(g_draft_fault.load(std::memory_order_relaxed));
}

void ValidateSamplingParams(const SamplingParams& p) {
  SPECBED_CHECK(p.temperature >= 0.0 && std::isfinite(p.temperature),
                "temperature must be >= 0, got ", p.temperature);
  SPECBED_CHECK(p.top_p > 0.0 && p.top_p <= 1.0, "top_p must be in (0, 1], got ", p.top_p);
  SPECBED_CHECK(p.top_k >= 0, "top_k must be >= 0 (0 = off), got ", p.top_k);
}

int32_t Argmax(const float* v, int64_t n) {
  int32_t best = 0;
  float best_value = v[0];
  for (int64_t i = 1; i < n; ++i) {
    if (v[i] > best_value) {
      best_value = v[i];
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

Sampler::Sampler(SamplingParams params, uint64_t seed) : params_(params), rng_(seed) {
  ValidateSamplingParams(params_);
}

void Sampler::Distribution(const float* logits, int64_t vocab, std::vector<float>& probs) const {
  probs.assign(vocab, 0.f);
  if (params_.greedy()) {
    probs[Argmax(logits, vocab)] = 1.f;
    return;
  }
  const float inv_t = static_cast<float>(1.0 / params_.temperature);
  float max_logit = logits[0];
  for (int64_t i = 1; i < vocab; ++i) max_logit = std::max(max_logit, logits[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; ++i) {
    probs[i] = std::exp((logits[i] - max_logit) * inv_t);
    sum += probs[i];
  }
  for (int64_t i = 0; i < vocab; ++i) probs[i] = static_cast<float>(probs[i] / sum);
  const bool use_top_k = params_.top_k > 0 && params_.top_k < vocab;
  const bool use_top_p = params_.top_p < 1.0;
  if (!use_top_k && !use_top_p) return;
  // Keep the smallest prefix of tokens sorted by probability (ties: lower id first) that
  // satisfies both top-k and top-p; renormalize.
  std::vector<int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
  int64_t keep = use_top_k ? params_.top_k : vocab;
  if (use_top_p) {
    double cum = 0.0;
    int64_t n = 0;
    while (n < keep) {
      cum += probs[order[n]];
      ++n;
      if (cum >= params_.top_p) break;
    }
    keep = n;
  }
  double kept = 0.0;
  for (int64_t i = 0; i < keep; ++i) kept += probs[order[i]];
  for (int64_t i = keep; i < vocab; ++i) probs[order[i]] = 0.f;
  for (int64_t i = 0; i < keep; ++i) probs[order[i]] = static_cast<float>(probs[order[i]] / kept);
}

int32_t Sampler::DraftToken(const float* logits, int64_t vocab, float* q_row) {
  if (params_.greedy()) return Argmax(logits, vocab);
  Distribution(logits, vocab, probs_);
  const int32_t token = SampleFromProbs(probs_.data(), vocab, rng_);
  const DraftFault fault = DraftFaultForTesting();
  if (fault == DraftFault::kStaleQRow) {
    std::copy(last_q_.size() == probs_.size() ? last_q_.begin() : probs_.begin(),
              last_q_.size() == probs_.size() ? last_q_.end() : probs_.end(), q_row);
    last_q_ = probs_;
  } else if (fault == DraftFault::kUntemperedQ) {
    Sampler(SamplingParams{1.0, 1.0, 0}, 0).Distribution(logits, vocab, last_q_);
    std::copy(last_q_.begin(), last_q_.end(), q_row);
  } else {
    std::copy(probs_.begin(), probs_.end(), q_row);
  }
  return token;
}

int32_t Sampler::Sample(const float* logits, int64_t vocab) {
  if (params_.greedy()) return Argmax(logits, vocab);
  Distribution(logits, vocab, probs_);
  return SampleFromProbs(probs_.data(), vocab, rng_);
}

double Uniform01(std::mt19937_64& rng) {
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

int32_t SampleFromProbs(const float* probs, int64_t n, std::mt19937_64& rng) {
  const double u = Uniform01(rng);
  double cum = 0.0;
  int32_t last_nonzero = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (probs[i] <= 0.f) continue;
    cum += probs[i];
    last_nonzero = static_cast<int32_t>(i);
    if (u < cum) return static_cast<int32_t>(i);
  }
  return last_nonzero;  // rounding: u landed above the accumulated total
}

}  // namespace specbed
