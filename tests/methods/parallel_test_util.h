// Shared helpers for the parallel draft/verify decoders' tests (pearl_test, specbranch_test):
// the stories260K fixture with every story prompt, exact match with AR, loop invariants, and an
// exact chi-square test of the output distribution over a top-k-restricted sample space (with
// its verdict for the real rule and for the negative control, and the one both tests run), and
// the T = 1 run that checks the ATen path's one device walk per step.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdio>
#include <functional>
#include <map>
#include <string>

#include "datasets/dataset.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/runner/runner.h"
#include "methods/common/draft_ledger.h"
#include "methods/pearl/parallel_decoder.h"
#include "tests/engine/engine_test_util.h"

namespace specbed {
namespace parallel_test {

struct Fixture {
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  LoadedTarget draft = LoadModel("stories260K-draft", at::kFloat);
  std::vector<std::vector<int32_t>> prompts;
  Fixture() {
    for (const Prompt& p : LoadDataset("stories", {})) {
      prompts.push_back(BuildPromptIds(target, {{"user", p.turns[0]}}));
    }
  }
};

inline Fixture& Shared() {
  static Fixture fixture;
  return fixture;
}

inline GenerationConfig Config(const LoadedTarget& target, double temperature,
                               int64_t max_new_tokens, uint64_t seed = 7, int64_t top_k = 0) {
  GenerationConfig g;
  g.sampling.temperature = temperature;
  g.sampling.top_k = top_k;
  g.seed = seed;
  g.stop = StopConfigFor(target, max_new_tokens, {});
  return g;
}

inline KvCache CacheFor(LlamaModel& model, const std::vector<int32_t>& prompt, int64_t max_new,
                        const Decoder& decoder) {
  return model.NewCache(
      1, CacheLengthFor(model, static_cast<int64_t>(prompt.size()), max_new, decoder));
}

// Counters and phase times every step row must satisfy (as for SpeculativeDecoder), plus the
// parallel-specific ones: busy times >= 0, rolled back + trimmed <= drafted overall.
inline void ExpectInvariants(const DecodeResult& r, const std::string& where) {
  int64_t emitted = 0, generated = 0, rolled = 0, trimmed = 0;
  double phases_ms = 0;
  for (const StepStats& s : r.steps) {
    EXPECT_LE(s.n_accepted, s.n_drafted) << where;
    EXPECT_LE(s.n_emitted, s.n_accepted + 1) << where;
    EXPECT_GE(s.t_draft_us, 0) << where;
    EXPECT_GE(s.t_verify_us, 0) << where;
    EXPECT_GE(s.t_other_us, -1) << where;  // tiling rounding
    EXPECT_GE(s.t_draft_busy_us, 0) << where;
    EXPECT_GE(s.t_verify_busy_us, 0) << where;
    EXPECT_GE(s.n_target_forwards, 1) << where;
    emitted += s.n_emitted;
    generated += s.n_draft_generated;
    rolled += s.n_rolled_back;
    trimmed += s.n_trimmed;
    EXPECT_GE(s.n_trimmed, 0) << where;
    phases_ms += (s.t_draft_us + s.t_verify_us + s.t_other_us) * 1e-3;
  }
  EXPECT_LE(rolled + trimmed, generated) << where;
  const int64_t n_out = static_cast<int64_t>(r.generation.tokens.size());
  EXPECT_EQ(emitted, std::max<int64_t>(n_out - 1, 0)) << where;
  EXPECT_EQ(r.generation.n_steps, static_cast<int64_t>(r.steps.size())) << where;
  EXPECT_NEAR(phases_ms, r.generation.decode_ms, 0.05 + 0.01 * r.generation.decode_ms) << where;
}

// Runs `decoder` at T = 0 on every story prompt; outputs must equal AR's token for token. With
// `ledger` (the decoder's drafted positions, methods/common/draft_ledger.h), each position is
// counted once: at the end of an answer at most the last chunk is still pending (a position
// counted twice as drafted would stay pending for ever and pile up).
inline void ExpectSameAsAr(Decoder& decoder, double temperature, int64_t max_new_tokens,
                           const std::string& name, double* rollback_rate = nullptr,
                           const DraftLedger* ledger = nullptr) {
  LoadedTarget& target = Shared().target;
  auto& prompts = Shared().prompts;
  int64_t generated = 0, rolled = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const GenerationConfig g = Config(target, temperature, max_new_tokens, 100 + i);
    KvCache cache = CacheFor(*target.model, prompts[i], max_new_tokens, decoder);
    const GenerationResult ar =
        GenerateAr(*target.model, target.tokenizer.get(), prompts[i], g, cache);
    DecodeResult spec;
    decoder.Generate(prompts[i], g, cache, spec);
    const std::string where = name + " prompt " + std::to_string(i);
    ASSERT_EQ(spec.generation.tokens, ar.tokens) << where;
    EXPECT_EQ(spec.generation.stop_reason, ar.stop_reason) << where;
    EXPECT_EQ(spec.generation.text, ar.text) << where;
    ExpectInvariants(spec, where);
    if (ledger) {
      EXPECT_LE(ledger->pending(), decoder.MaxDraftNodes() + 1) << where;
    }
    for (const auto& s : spec.steps) {
      generated += s.n_draft_generated;
      rolled += s.n_rolled_back;
    }
  }
  if (rollback_rate) *rollback_rate = static_cast<double>(rolled) / std::max<int64_t>(generated, 1);
}

// Prints `method`'s chi-square p-value at T = 1 (`rule` names the acceptance rule under test)
// and checks it: the negative control (`broken`) must fail the test (p < 1e-6, else the failure
// says `control_failure`); the real rule must pass it (p > 1e-3).
inline void ExpectChiSquareVerdict(const std::string& method, double p, bool broken,
                                   const std::string& rule, const std::string& control_failure) {
  std::printf("%s chi-square p = %g (%s)\n", method.c_str(), p, rule.c_str());
  if (broken) {
    EXPECT_LT(p, 1e-6) << control_failure;
  } else {
    EXPECT_GT(p, 1e-3);
  }
}

// Exact chi-square test of the first `n_tokens` generated tokens at temperature `temperature`
// with top-k `top_k` (so the sample space is small and enumerable): the target's exact
// probability of every sequence comes from fresh forwards over prompt + prefix; `generate(seed)`
// returns the tokens of one generation. Returns the p-value (bins with expected count < 5 are
// pooled).
inline double ChiSquarePValue(const std::vector<int32_t>& prompt, double temperature, int64_t top_k,
                              int64_t n_tokens, int64_t n_samples,
                              const std::function<std::vector<int32_t>(uint64_t)>& generate) {
  LoadedTarget& target = Shared().target;
  LlamaModel& model = *target.model;
  const int64_t vocab = model.config().vocab_size;
  SamplingParams params;
  params.temperature = temperature;
  params.top_k = top_k;
  Sampler sampler(params, 1);
  std::map<std::vector<int32_t>, double> exact;
  std::function<void(std::vector<int32_t>&, double)> expand = [&](std::vector<int32_t>& prefix,
                                                                  double prob) {
    if (static_cast<int64_t>(prefix.size()) == n_tokens) {
      exact[prefix] = prob;
      return;
    }
    std::vector<int32_t> ids(prompt);
    ids.insert(ids.end(), prefix.begin(), prefix.end());
    KvCache cache = model.NewCache(1, static_cast<int64_t>(ids.size()) + 1);
    ForwardOutput out = model.Forward(testing_util::Ids(ids), cache);
    std::vector<float> p;
    sampler.Distribution(out.logits.data_ptr<float>(), vocab, p);
    for (int64_t t = 0; t < vocab; ++t) {
      if (p[t] <= 0) continue;
      EXPECT_EQ(std::count(target.model->config().eos_token_ids.begin(),
                           target.model->config().eos_token_ids.end(), static_cast<int32_t>(t)),
                0)
          << "the enumerated support contains EOS; pick another prompt";
      prefix.push_back(static_cast<int32_t>(t));
      expand(prefix, prob * p[t]);
      prefix.pop_back();
    }
  };
  std::vector<int32_t> prefix;
  expand(prefix, 1.0);
  std::map<std::vector<int32_t>, int64_t> counts;
  for (int64_t s = 0; s < n_samples; ++s) {
    std::vector<int32_t> tokens = generate(1000 + static_cast<uint64_t>(s));
    tokens.resize(static_cast<size_t>(n_tokens));
    ++counts[tokens];
  }
  double chi2 = 0, pooled_expected = 0, pooled_observed = 0;
  int bins = 0;
  int64_t seen = 0;
  for (const auto& [seq, prob] : exact) {
    const double e = prob * static_cast<double>(n_samples);
    const auto it = counts.find(seq);
    const double o = it == counts.end() ? 0.0 : static_cast<double>(it->second);
    seen += static_cast<int64_t>(o);
    if (e < 5) {
      pooled_expected += e;
      pooled_observed += o;
      continue;
    }
    chi2 += (o - e) * (o - e) / e;
    ++bins;
  }
  // Sequences outside the support are impossible for a lossless decoder.
  pooled_observed += static_cast<double>(n_samples - seen);
  if (pooled_expected > 0) {
    chi2 += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) /
            std::max(pooled_expected, 1e-9);
    ++bins;
  }
  return testing_util::ChiSquareSf(chi2, std::max(bins - 1, 1));
}

// ChiSquarePValue of `decoder` at `temperature` (1 by default) with top-k 3 over its first 4
// tokens after story prompt 3 (`samples` seeded generations of 4 tokens on one cache; 12000 by
// default; scaled by testing_util::ScaledDraws).
inline double TopThreeChiSquareP(Decoder& decoder, int64_t samples = 12000,
                                 double temperature = 1.0) {
  LoadedTarget& target = Shared().target;
  const auto& prompt = Shared().prompts[3];
  KvCache cache = CacheFor(*target.model, prompt, 4, decoder);
  samples = testing_util::ScaledDraws(static_cast<int>(samples));
  return ChiSquarePValue(prompt, temperature, 3, 4, samples, [&](uint64_t seed) {
    DecodeResult r;
    decoder.Generate(prompt, Config(target, temperature, 4, seed, 3), cache, r);
    return r.generation.tokens;
  });
}

// The drafter's side of a rejection-sampling decoder at T = 1.5 (top-k 3): TopThreeChiSquareP
// passes (p > 1e-3), and under each DraftFault (harness/engine/sampler.h: a stale q row; q without
// the temperature and top-k its tokens are drawn under) it fails (p < 1e-6) on two thirds of the
// generations (8000: a control that fails on fewer draws fails on more).
inline void ExpectDraftSideChecks(Decoder& decoder, const std::string& method) {
  constexpr double kT = 1.5;
  ExpectChiSquareVerdict(method, TopThreeChiSquareP(decoder, 12000, kT), /*broken=*/false,
                         "T = 1.5", "");
  for (DraftFault fault : {DraftFault::kStaleQRow, DraftFault::kUntemperedQ}) {
    ScopedDraftFault inject(fault);
    ExpectChiSquareVerdict(
        method, TopThreeChiSquareP(decoder, 8000, kT), /*broken=*/true,
        fault == DraftFault::kStaleQRow ? "T = 1.5, stale q row" : "T = 1.5, untempered q",
        "a wrong draft distribution must fail the test");
  }
}

// T = 1 with `decoder` on the ATen path `target`: story prompts 0..2 (40 tokens), each decoded
// again by `again` (built like `decoder`; may be it) to the same tokens, then prompt 1 in a cache
// that ends first (stopped for the context). Every answer makes one device walk per step
// (ParallelDecoder::device_walks) and keeps the invariants; no verify rows come to the host.
// Adds the accepted draft tokens and the rollback events to `accepted`, `rollbacks`.
inline void ExpectOneDeviceWalkPerStep(ParallelDecoder& decoder, ParallelDecoder& again,
                                       LoadedTarget& target, const std::string& name,
                                       int64_t& accepted, int64_t& rollbacks) {
  for (size_t i = 0; i < 4; ++i) {
    const auto& prompt = Shared().prompts[i == 3 ? 1 : i];
    const bool short_cache = i == 3;
    const GenerationConfig g = Config(target, 1.0, short_cache ? 400 : 40, 20 + i);
    KvCache cache = short_cache
                        ? target.model->NewCache(1, static_cast<int64_t>(prompt.size()) + 30)
                        : CacheFor(*target.model, prompt, 40, decoder);
    DecodeResult a, b;
    const int64_t walks = decoder.device_walks();
    decoder.Generate(prompt, g, cache, a);
    const std::string where = name + " aten T=1 answer " + std::to_string(i);
    EXPECT_EQ(decoder.device_walks() - walks, static_cast<int64_t>(a.steps.size())) << where;
    ExpectInvariants(a, where);
    if (short_cache) {
      EXPECT_EQ(a.generation.stop_reason, StopReason::kMaxContext) << where;
    } else {
      again.Generate(prompt, g, cache, b);
      EXPECT_EQ(a.generation.tokens, b.generation.tokens) << where;
    }
    for (const StepStats& s : a.steps) {
      accepted += s.n_accepted;
      rollbacks += s.n_rollback_events;
    }
  }
  EXPECT_EQ(decoder.verify_row_copies(), 0) << name;
}

}  // namespace parallel_test
}  // namespace specbed
