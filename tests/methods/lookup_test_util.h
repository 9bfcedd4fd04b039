// Shared pieces of the training-free and Medusa methods' tests (ngram, suffix, lookahead,
// recycling, medusa): token identity with AR over a prompt list, the prompt lists themselves, and
// the T = 1 check.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "datasets/dataset.h"
#include "harness/engine/ar_generate.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/engine/verifier.h"
#include "harness/runner/runner.h"
#include "methods/method_registry.h"
#include "tests/engine/engine_test_util.h"

namespace specbed::testing_util {

// Decodes `ids` with `decoder` and with AR (`max_tokens` tokens at `temperature`, the same seed
// for both: at T > 0 a sample_follow decode draws once per token, as AR): every output must equal
// AR's. Returns the accepted draft tokens.
inline int64_t ExpectArTokens(Decoder& decoder, LoadedTarget& target,
                              const std::vector<std::vector<int32_t>>& ids, int64_t max_tokens,
                              double temperature = 0.0, uint64_t seed = 0) {
  int64_t accepted = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    GenerationConfig g;
    g.sampling.temperature = temperature;
    g.seed = seed + i;
    g.stop = StopConfigFor(target, max_tokens, {});
    KvCache ar_cache = target.model->NewCache(1, target.model->config().max_seq_len);
    const auto reference =
        GenerateAr(*target.model, target.tokenizer.get(), ids[i], g, ar_cache).tokens;
    KvCache cache = target.model->NewCache(1, target.model->config().max_seq_len);
    DecodeResult r;
    decoder.Generate(ids[i], g, cache, r);
    EXPECT_EQ(r.generation.tokens, reference) << "prompt " << i;
    for (const StepStats& s : r.steps) accepted += s.n_accepted;
  }
  return accepted;
}

// The first turn of every story prompt.
inline std::vector<std::vector<int32_t>> StoryIds(LoadedTarget& target) {
  std::vector<std::vector<int32_t>> ids;
  for (const Prompt& p : LoadDataset("stories", {})) {
    ids.push_back(BuildPromptIds(target, {{"user", p.turns[0]}}));
  }
  return ids;
}

// 8 Spec-Bench prompts that leave room for 64 new tokens in the target's context: every
// summarization prompt that fits (on stories260K's 512 positions one does: the others are longer
// articles), then the MT-Bench part (writing, roleplay, ..., extraction) in file order.
inline std::vector<std::vector<int32_t>> LookupSpecBenchIds(LoadedTarget& target) {
  std::vector<std::vector<int32_t>> ids;
  for (const std::string category : {"summarization", "mt_bench"}) {
    for (const Prompt& p : LoadDataset("spec_bench", {-1, {category}})) {
      auto one = BuildPromptIds(target, {{"user", p.turns[0]}});
      if (static_cast<int64_t>(one.size()) + 64 > target.model->config().max_seq_len) continue;
      ids.push_back(std::move(one));
      if (ids.size() == 8) return ids;
    }
  }
  return ids;
}

// The registered method `method` (lossless, `sample_follow` at T > 0) built with each of
// `knob_sets` on stories260K: token-identical to AR (64 new tokens) on all 32 story prompts and on
// the 8 Spec-Bench prompts of LookupSpecBenchIds, with draft tokens accepted on each set.
inline void ExpectMatchesArOnStoriesAndSpecBench(const std::string& method,
                                                 const std::vector<nlohmann::json>& knob_sets = {
                                                     nlohmann::json::object()}) {
  at::set_num_threads(1);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  MethodContext context;
  context.target = &target;
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  const MethodInfo& info = registry.Info(method);
  EXPECT_TRUE(info.traits.speculative && info.traits.lossless);
  EXPECT_EQ(info.traits.sampling_verifier, "sample_follow");
  const auto stories = StoryIds(target);
  const auto spec_bench = LookupSpecBenchIds(target);
  ASSERT_EQ(stories.size(), 32u);
  ASSERT_EQ(spec_bench.size(), 8u);
  for (const nlohmann::json& knobs : knob_sets) {
    SCOPED_TRACE(method + " " + knobs.dump());
    std::unique_ptr<Decoder> decoder = registry.Build(method, context, knobs);
    EXPECT_GT(ExpectArTokens(*decoder, target, stories, 64), 0);
    EXPECT_GT(ExpectArTokens(*decoder, target, spec_bench, 64), 0);
  }
}

// The T = 1 check of a lookup drafter on the tiny target (TinyRandomTarget(21, 60)) with
// `sample_follow` and `budget` nodes: the distribution of 4 generated tokens from a prompt that
// repeats a pattern (so the drafter has matches from the first step) equals the target's exact
// distribution (chi-square, cells of expected count < 5 pooled, reject at p < 1e-4: false-failure
// rate about 1e-4, seeds fixed), with drafts accepted often enough to matter; the negative
// control, greedy acceptance of the drafts (VerifierFault), fails the same check.
// `target`: the tiny target the drafter was built for (a drafter that reads the target's weights,
// e.g. Medusa); null = a fresh TinyRandomTarget(21, 60).
inline void ExpectLosslessAtTemperatureOne(std::unique_ptr<Drafter> drafter, int64_t budget,
                                           std::shared_ptr<LlamaModel> target = nullptr) {
  if (target == nullptr) target = TinyRandomTarget(21, 60.0);
  SpeculativeOptions options;
  options.budget = {budget, budget};
  options.sampling_rule = VerifyRule::kSampleFollow;
  SpeculativeDecoder decoder(*target, nullptr, std::move(drafter), options);
  const std::vector<int32_t> prompt = {1, 3, 2, 1, 3, 2, 1};
  int64_t accepted = 0;
  EXPECT_GT(TinyOutputPValue(*target, decoder, prompt, 4, 40000, 90, &accepted), 1e-4);
  EXPECT_GT(accepted, 40000 / 4);
  ScopedVerifierFault inject(VerifierFault::kGreedyAcceptance);
  int64_t ignored = 0;
  EXPECT_LT(TinyFaultPValue(*target, decoder, prompt, 4, 40000, 90, &ignored), 1e-4);
}

}  // namespace specbed::testing_util
