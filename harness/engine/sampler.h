// Token sampling from one row of logits: greedy (T=0), temperature, top-k, top-p; seeded
// (std::mt19937_64, so a seed gives the same tokens on every platform). Works on raw float rows
// (no ATen dispatch per token). The same Sampler is used by AR and by every method's bonus /
// correction token, so stop rules and randomness are shared.
// Checked by: tests/engine/sampler_test.cpp (greedy ties, top-k/top-p support, chi-square of
// temperature sampling against softmax).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace specbed {

struct SamplingParams {
  double temperature = 0.0;  // 0 = greedy (argmax, lowest id on ties)
  double top_p = 1.0;        // nucleus mass in (0, 1]; 1 = off
  int64_t top_k = 0;         // 0 = off
  bool greedy() const { return temperature <= 0.0; }
};

// Throws specbed::Error for impossible values (negative temperature, top_p outside (0,1], top_k <
// 0).
void ValidateSamplingParams(const SamplingParams& params);

class Sampler {
 public:
  Sampler(SamplingParams params, uint64_t seed);

  // Samples a token id from logits[0..vocab).
  int32_t Sample(const float* logits, int64_t vocab);
  // The distribution Sample draws from (after temperature/top-k/top-p), into probs[0..vocab).
  void Distribution(const float* logits, int64_t vocab, std::vector<float>& probs) const;
  // A drafter's token from logits[0..vocab) on the host: Sample's token, and at T > 0 the
  // distribution it was drawn from is also written to q_row[0..vocab) (what a rejection verifier
  // needs of the draft). q_row is not touched at T = 0 (it may be null then).
  int32_t DraftToken(const float* logits, int64_t vocab, float* q_row);

  std::mt19937_64& rng() { return rng_; }
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> probs_;
  std::vector<float> last_q_;  // DraftFault::kStaleQRow only: the previous DraftToken's row
  std::vector<int32_t> order_;
};

// Deliberately wrong draft distributions: the drafter-side negative controls of the
// rejection-sampling losslessness tests (chain_rs / tree_rrs need each drafted token to come from
// the q row reported for it). Injected where every drafter reports q: Sampler::DraftToken (host)
// and DeviceDraftSampler::Sample (ATen path). Process-wide; never set outside tests.
enum class DraftFault {
  kNone,
  // q row s holds the distribution of the draw before it (the previous slot's; the first slot
  // gets the previous chain's last), while the token is drawn from its own.
  kStaleQRow,
  // q is reported without the sampling transform (softmax of the raw logits: no temperature, no
  // top-k / top-p) while the token is drawn from the transformed distribution. A no-op at T = 1
  // without truncation: its tests run at T != 1.
  kUntemperedQ,
};
void SetDraftFaultForTesting(DraftFault fault);
DraftFault DraftFaultForTesting();

// Sets a test fault through `Set` for its lifetime and Fault::kNone after it (tests): the draft
// faults here, the verifier faults (ScopedVerifierFault, verifier.h).
template <typename Fault, void (*Set)(Fault)>
class ScopedFault {
 public:
  explicit ScopedFault(Fault fault) { Set(fault); }
  ~ScopedFault() { Set(Fault::kNone); }
  ScopedFault(const ScopedFault&) = delete;
  ScopedFault& operator=(const ScopedFault&) = delete;
};
using ScopedDraftFault = ScopedFault<DraftFault, &SetDraftFaultForTesting>;

// Index of the largest value (lowest index on ties).
int32_t Argmax(const float* values, int64_t n);

// Inverse-CDF draw from probs[0..n) (non-negative, summing to ~1) with one uniform from `rng`;
// rounding past the total returns the last non-zero entry. The same draw Sampler::Sample uses.
int32_t SampleFromProbs(const float* probs, int64_t n, std::mt19937_64& rng);

// One uniform double in [0, 1) from `rng`.
double Uniform01(std::mt19937_64& rng);

}  // namespace specbed
