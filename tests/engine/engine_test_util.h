// Shared helpers for tests/engine and tests/methods: paths, loading stories260K and the story
// prompts, comparing logits, the chi-square losslessness check of a decoder's exact n-token output
// distribution on a tiny target (TinyOutputPValue).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "harness/engine/method.h"
#include "harness/engine/sampler.h"
#include "harness/runner/runner.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/checkpoint/llama2c_checkpoint.h"
#include "models/llama_model.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace testing_util {

// Sampling parameters: temperature t (0 = greedy), top-k (0 = off), top-p (1 = off).
inline SamplingParams Temperature(double t, int64_t top_k = 0, double top_p = 1.0) {
  SamplingParams p;
  p.temperature = t;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

inline std::string SourcePath(const std::string& relative) {
  return std::string(SPECBED_SOURCE_DIR) + "/" + relative;
}

inline const Llama2cCheckpoint& Stories260K() {
  static const Llama2cCheckpoint ckpt =
      ReadLlama2cCheckpoint(SourcePath("models/stories260K/stories260K.bin"));
  return ckpt;
}

inline LlamaModel Stories260KModel(at::ScalarType dtype = at::kFloat) {
  const auto& ckpt = Stories260K();
  return LlamaModel(ckpt.config,
                    WeightsFromHfTensors(ckpt.config, ckpt.tensors, "stories260K").To(dtype));
}

// The ids of every "stories" prompt's first turn under `target`'s chat template.
inline std::vector<std::vector<int32_t>> StoryPromptIds(const LoadedTarget& target) {
  std::vector<std::vector<int32_t>> prompts;
  for (const Prompt& p : LoadDataset("stories", {})) {
    prompts.push_back(BuildPromptIds(target, {{"user", p.turns[0]}}));
  }
  return prompts;
}

inline at::Tensor Ids(const std::vector<int32_t>& ids) {
  at::Tensor t = at::empty({1, static_cast<int64_t>(ids.size())}, at::kLong);
  for (size_t i = 0; i < ids.size(); ++i) t.data_ptr<int64_t>()[i] = ids[i];
  return t;
}

// Max |a - b| between engine logits rows [T, V] and reference rows.
inline double MaxAbsDiff(const at::Tensor& logits, const std::vector<std::vector<float>>& ref) {
  const at::Tensor l = logits.reshape({-1, logits.size(-1)}).to(at::kFloat).contiguous();
  EXPECT_EQ(l.size(0), static_cast<int64_t>(ref.size()));
  double worst = 0;
  for (size_t t = 0; t < ref.size(); ++t) {
    const float* row = l.data_ptr<float>() + t * l.size(1);
    for (size_t v = 0; v < ref[t].size(); ++v) {
      worst = std::max(worst, static_cast<double>(std::abs(row[v] - ref[t][v])));
    }
  }
  return worst;
}

// Upper tail of the standard normal.
inline double NormalSf(double z) {
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

// Upper tail of chi-square with k degrees of freedom (Wilson-Hilferty approximation), for the
// statistical losslessness tests.
inline double ChiSquareSf(double x, int k) {
  const double a = 2.0 / (9.0 * k);
  const double z = (std::cbrt(x / k) - (1.0 - a)) / std::sqrt(a);
  return NormalSf(z);
}

// A tiny random Llama target for the distribution tests (vocabulary 4, width 16, 2 layers, 2
// heads, max 32 positions, untied): seeded weights with lm_head scaled by `lm_head_scale` for
// sharper next-token distributions than the 0.02 init gives.
inline std::shared_ptr<LlamaModel> TinyRandomTarget(uint64_t seed, double lm_head_scale) {
  const LlamaConfig c = testing_util::SmallConfigOf(
      "LlamaForCausalLM", {/*dim=*/16, /*n_heads=*/2, /*n_kv_heads=*/2, /*head_dim=*/8,
                           /*hidden_dim=*/32, /*vocab_size=*/4, /*max_seq_len=*/32});
  c.Validate("tiny target");
  LlamaWeights w = RandomLlamaWeights(c, seed);
  w.lm_head = w.lm_head * lm_head_scale;
  return std::make_shared<LlamaModel>(c, w);
}

// `draws` scaled by the environment variable SPECBED_TEST_DRAWS_SCALE (a number in (0, 1]; unset =
// 1), for the lossless checks (TinyOutputPValue, TopThreeChiSquareP). The ATen-path reruns of the
// chi-square tests (tests/methods/CMakeLists.txt specbed_add_aten_rerun) set 0.5: they check the
// device implementation of rules the row path's runs check at full power, and its bug classes (a
// wrong slot, residual, descent or draw) are gross. The false-failure rate of each lossless check
// is unchanged (its alpha); the rejection-sampling negative controls (TinyFaultPValue) keep their
// draws (at half, SpS's target-as-residual control reached only p = 0.003 on the ATen path).
inline int ScaledDraws(int draws) {
  const char* env = std::getenv("SPECBED_TEST_DRAWS_SCALE");
  if (env == nullptr || env[0] == '\0') return draws;
  const double scale = std::atof(env);
  EXPECT_TRUE(scale > 0 && scale <= 1) << "SPECBED_TEST_DRAWS_SCALE=" << env;
  if (!(scale > 0 && scale <= 1)) return draws;
  return std::max(1, static_cast<int>(std::lround(draws * scale)));
}

// The distribution of the `n_tokens` tokens a decoder generates at `temperature` (default 1)
// from `prompt` on `target` (a tiny vocabulary: vocab^n_tokens cells), drawn generation by
// generation with seeds seed0 + i, against the target's exact distribution (each cell's
// probability is the product of the target's tempered next-token probabilities along it). PValue():
// chi-square over the draws so far; cells with an expected count below 5 are pooled into one; a
// count in a cell of (numerically) zero probability gives p = 0.
class TinyOutputSample {
 public:
  TinyOutputSample(LlamaModel& target, const std::vector<int32_t>& prompt, int n_tokens,
                   uint64_t seed0, double temperature = 1.0)
      : target_(target),
        prompt_(prompt),
        n_tokens_(n_tokens),
        seed0_(seed0),
        temperature_(temperature) {
    const int64_t vocab = target.config().vocab_size;
    int64_t n_cells = 1;
    for (int i = 0; i < n_tokens; ++i) n_cells *= vocab;
    EXPECT_LE(n_cells, 4096) << "TinyOutputPValue needs a tiny vocabulary";
    expected_.assign(n_cells, 0);
    counts_.assign(n_cells, 0);
    std::vector<int32_t> ids = prompt;
    Fill(ids, 0, 0, 1.0);
  }

  // Draws generations until `total` have been drawn; adds accepted draft tokens to *accepted.
  // False when a generation had the wrong length (a test failure is recorded).
  bool DrawUpTo(Decoder& decoder, int total, int64_t* accepted) {
    KvCache cache = target_.NewCache(1, static_cast<int64_t>(prompt_.size()) + n_tokens_ + 17);
    const int64_t vocab = target_.config().vocab_size;
    for (; draws_ < total; ++draws_) {
      GenerationConfig g;
      g.sampling.temperature = temperature_;
      g.seed = seed0_ + static_cast<uint64_t>(draws_);
      g.stop.max_new_tokens = n_tokens_;
      g.stop.stop_on_eos = false;
      DecodeResult r;
      decoder.Generate(prompt_, g, cache, r);
      EXPECT_EQ(r.generation.tokens.size(), static_cast<size_t>(n_tokens_));
      if (r.generation.tokens.size() != static_cast<size_t>(n_tokens_)) return false;
      int64_t cell = 0;
      for (int32_t t : r.generation.tokens) cell = cell * vocab + t;
      counts_[cell] += 1;
      for (const StepStats& s : r.steps) *accepted += s.n_accepted;
    }
    return true;
  }

  // `check_cells`: a failure is recorded unless more than 4 cells were compared (the early looks
  // of TinyFaultPValue pass false: too few cells there just means looking later).
  double PValue(bool check_cells = true) const {
    double chi2 = 0, pooled_count = 0, pooled_expected = 0;
    int cells = 0;
    for (size_t i = 0; i < expected_.size(); ++i) {
      const double e = expected_[i] * draws_;
      if (e < 1e-9 && counts_[i] > 0) return 0.0;  // an impossible output
      if (e >= 5) {
        chi2 += (counts_[i] - e) * (counts_[i] - e) / e;
        ++cells;
      } else {
        pooled_count += counts_[i];
        pooled_expected += e;
      }
    }
    if (pooled_expected >= 1) {
      chi2 += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / pooled_expected;
      ++cells;
    }
    if (check_cells) {
      EXPECT_GT(cells, 4);
    }
    if (cells <= 4) return 1.0;
    return ChiSquareSf(chi2, cells - 1);
  }

 private:
  // Exact cell probabilities, depth first over prefixes.
  void Fill(std::vector<int32_t>& ids, int depth, int64_t cell, double prob) {
    if (depth == n_tokens_) {
      expected_[cell] = prob;
      return;
    }
    const int64_t vocab = target_.config().vocab_size;
    KvCache cache = target_.NewCache(1, static_cast<int64_t>(prompt_.size()) + n_tokens_ + 1);
    const at::Tensor logits = target_.Forward(Ids(ids), cache).logits.reshape({-1});
    const at::Tensor p = at::softmax(logits / temperature_, 0).to(at::kDouble).contiguous();
    for (int64_t v = 0; v < vocab; ++v) {
      ids.push_back(static_cast<int32_t>(v));
      Fill(ids, depth + 1, cell * vocab + v, prob * p.data_ptr<double>()[v]);
      ids.pop_back();
    }
  }

  LlamaModel& target_;
  std::vector<int32_t> prompt_;
  int n_tokens_;
  uint64_t seed0_;
  double temperature_;
  int draws_ = 0;
  std::vector<double> expected_, counts_;
};

// Chi-square p-value of `draws` generations (TinyOutputSample). With a lossless decoder the
// p-value is uniform, so a check p > 1e-4 fails falsely with probability 1e-4 (deterministic for
// fixed seeds).
inline double TinyOutputPValue(LlamaModel& target, Decoder& decoder,
                               const std::vector<int32_t>& prompt, int n_tokens, int draws,
                               uint64_t seed0, int64_t* accepted, double temperature = 1.0) {
  TinyOutputSample sample(target, prompt, n_tokens, seed0, temperature);
  if (!sample.DrawUpTo(decoder, ScaledDraws(draws), accepted)) return 0.0;
  return sample.PValue();
}

// The p-value a negative control checks (expected < 1e-4 under an injected fault): the same
// draws as TinyOutputPValue, looked at after draws/8, draws/4 and draws/2, stopping at the first
// look whose p-value is below 2.5e-5; else the p-value of all `draws`. A gross fault is caught
// after an eighth of the draws (the chi-square tests' cost is mostly their controls). Power is
// kept: a fault the full draw detects is still detected. A no-op "fault" would pass the control
// with probability <= 3 x 2.5e-5 + 1e-4 (was 1e-4); the lossless checks are unchanged.
inline double TinyFaultPValue(LlamaModel& target, Decoder& decoder,
                              const std::vector<int32_t>& prompt, int n_tokens, int draws,
                              uint64_t seed0, int64_t* accepted, double temperature = 1.0) {
  TinyOutputSample sample(target, prompt, n_tokens, seed0, temperature);
  for (int look : {draws / 8, draws / 4, draws / 2}) {
    if (!sample.DrawUpTo(decoder, look, accepted)) return 0.0;
    const double p = sample.PValue(/*check_cells=*/false);
    if (p < 2.5e-5) return p;
  }
  if (!sample.DrawUpTo(decoder, draws, accepted)) return 0.0;
  return sample.PValue();
}

// The drafter-side negative controls of a rejection-sampling decoder's TinyOutputPValue check
// (the same draws at `temperature`): under each DraftFault (harness/engine/sampler.h: a stale q
// row; q without the temperature, checked at T != 1 only, where it is a bug) TinyFaultPValue is
// below 1e-4.
inline void ExpectDraftFaultsFail(LlamaModel& target, Decoder& decoder,
                                  const std::vector<int32_t>& prompt, int n_tokens, int draws,
                                  uint64_t seed0, double temperature) {
  for (DraftFault fault : {DraftFault::kStaleQRow, DraftFault::kUntemperedQ}) {
    if (fault == DraftFault::kUntemperedQ && temperature == 1.0) continue;
    ScopedDraftFault inject(fault);
    int64_t ignored = 0;
    EXPECT_LT(
        TinyFaultPValue(target, decoder, prompt, n_tokens, draws, seed0, &ignored, temperature),
        1e-4)
        << "draft fault " << static_cast<int>(fault) << " at T = " << temperature;
  }
}

}  // namespace testing_util
}  // namespace specbed
