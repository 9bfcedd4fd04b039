// Tests of AR generation and the shared stop rules on the real stories260K model.
#include <gtest/gtest.h>

#include "base/error.h"
#include "harness/engine/ar_generate.h"
#include "harness/runner/runner.h"
#include "models/model_registry.h"

namespace specbed {
namespace {

const LoadedTarget& Stories() {
  static const LoadedTarget target = LoadModel("stories260K", at::kFloat);
  return target;
}

GenerationResult Generate(const std::string& prompt, const GenerationConfig& config) {
  const LoadedTarget& t = Stories();
  const auto ids = BuildPromptIds(t, {{"user", prompt}});
  KvCache cache = t.model->NewCache(1, 512);
  return GenerateAr(*t.model, t.tokenizer.get(), ids, config, cache);
}

TEST(ArGenerate, GreedyStoryFromOnceUponATime) {
  GenerationConfig config;
  config.stop.max_new_tokens = 40;
  config.stop.eos_ids = Stories().tokenizer->eos_ids();
  const GenerationResult r = Generate("Once upon a time", config);
  EXPECT_EQ(r.tokens.size(), 40u);
  EXPECT_EQ(r.stop_reason, StopReason::kMaxNewTokens);
  EXPECT_EQ(r.text.rfind(", there was a little girl named Lily.", 0), 0u) << r.text;
  EXPECT_EQ(r.n_steps, 39);
  EXPECT_GT(r.decode_ms, 0.0);
  EXPECT_LE(r.forward_ms, r.decode_ms);
}

TEST(ArGenerate, StopStringCutsTextAndKeepsTheCompletingToken) {
  GenerationConfig config;
  config.stop.max_new_tokens = 64;
  config.stop.stop_strings = {"park"};
  const GenerationResult r = Generate("Once upon a time", config);
  EXPECT_EQ(r.stop_reason, StopReason::kStopString);
  EXPECT_EQ(r.text, ", there was a little girl named Lily. She loved to play outside in the ");
  // The token that completed "park" is the last one generated.
  EXPECT_NE(Stories().tokenizer->Decode(r.tokens).find("park"), std::string::npos);
}

TEST(ArGenerate, EosStopsAndIsNotEmitted) {
  // Make every token an "EOS" except none: the first generated token stops generation.
  GenerationConfig config;
  config.stop.max_new_tokens = 10;
  for (int32_t i = 0; i < 512; ++i) config.stop.eos_ids.push_back(i);
  const GenerationResult r = Generate("Once upon a time", config);
  EXPECT_EQ(r.stop_reason, StopReason::kEos);
  EXPECT_TRUE(r.tokens.empty());
}

TEST(ArGenerate, SeededSamplingIsReproducible) {
  GenerationConfig config;
  config.sampling.temperature = 1.0;
  config.stop.max_new_tokens = 32;
  config.seed = 7;
  const auto a = Generate("Once upon a time", config).tokens;
  const auto b = Generate("Once upon a time", config).tokens;
  EXPECT_EQ(a, b);
  config.seed = 8;
  EXPECT_NE(Generate("Once upon a time", config).tokens, a);
}

TEST(ArGenerate, FullContextStops) {
  const LoadedTarget& t = Stories();
  GenerationConfig config;
  config.stop.max_new_tokens = 100;
  KvCache cache = t.model->NewCache(1, 12);
  const GenerationResult r = GenerateAr(*t.model, t.tokenizer.get(), {1, 403, 407}, config, cache);
  EXPECT_EQ(r.stop_reason, StopReason::kMaxContext);
  EXPECT_EQ(r.tokens.size(), 10u);  // 3 prompt + 9 forwards fill 12 slots; the last sample is kept
}

TEST(StopChecker, RejectsImpossibleSettings) {
  EXPECT_THROW(StopChecker({0, true, {}, {}}, nullptr, 1), Error);
  EXPECT_THROW(StopChecker({5, true, {}, {"x"}}, nullptr, 1), Error);
}

TEST(PromptSeed, DependsOnEveryInputAndIsStable) {
  EXPECT_EQ(PromptSeed(0, 3, 1), PromptSeed(0, 3, 1));
  EXPECT_NE(PromptSeed(0, 3, 1), PromptSeed(1, 3, 1));
  EXPECT_NE(PromptSeed(0, 3, 1), PromptSeed(0, 4, 1));
  EXPECT_NE(PromptSeed(0, 3, 1), PromptSeed(0, 3, 0));
}

}  // namespace
}  // namespace specbed
