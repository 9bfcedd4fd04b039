// Test helpers for the decoding tests of the method tests: one prompt decoded at T = 0, one story
// prompt decoded by AR and by a decoder on the same cache, and the whole story set checked token
// for token against AR with the per-step totals.
// Checked by: tests/methods/eagle3_drafter_test.cpp, tests/methods/specblock_test.cpp,
// tests/methods/block_drafters_shipped_test.cpp, tests/methods/jetspec_test.cpp,
// tests/methods/dflash_drafter_test.cpp, tests/methods/ltd_test.cpp,
// tests/methods/cost_twin_test.cpp, tests/methods/served_teacher_test.cpp,
// tests/methods/drafter_first_step_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "harness/engine/ar_generate.h"
#include "harness/engine/method.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/runner/runner.h"
#include "models/model_registry.h"

namespace specbed {
namespace testing_util {

// How a story prompt is decoded: up to `max_new` tokens, seed `seed`, on a cache of
// prompt + max_new + 1 + `extra_cache` rows (-1: CacheLengthFor the decoder), or of exactly
// `cache_rows` rows when that is positive.
struct StoryDecode {
  int64_t max_new = 96;
  int64_t extra_cache = 0;
  uint64_t seed = 0;
  int64_t cache_rows = 0;
};

// AR's T = 0 answers already computed, keyed by target, prompt and max_new: a test that checks
// many decoders on the same prompts computes each AR answer once (the decoder then runs on a
// fresh cache, not on one AR filled).
using ArAnswers = std::map<std::string, GenerationResult>;

// `decoder`'s answer (up to `max_new` tokens, T = 0) to the prompt `ids`, on a cache of
// CacheLengthFor the decoder.
inline DecodeResult DecodeIds(LoadedTarget& target, Decoder& decoder,
                              const std::vector<int32_t>& ids, int64_t max_new) {
  GenerationConfig g;
  g.stop = StopConfigFor(target, max_new, {});
  KvCache cache = target.model->NewCache(
      1, CacheLengthFor(*target.model, static_cast<int64_t>(ids.size()), max_new, decoder));
  DecodeResult r;
  decoder.Generate(ids, g, cache, r);
  return r;
}

// One prompt decoded by AR and by the decoder, at T = 0.
struct StoryRun {
  GenerationResult ar;
  DecodeResult spec;
};

// Decodes the first user turn of `prompt` as `how` says, by AR (or from `ar_answers`) and then by
// `decoder` on the same cache.
inline StoryRun RunStoryPrompt(LoadedTarget& target, Decoder& decoder, const Prompt& prompt,
                               const StoryDecode& how, ArAnswers* ar_answers = nullptr) {
  const std::vector<int32_t> ids = BuildPromptIds(target, {{"user", prompt.turns[0]}});
  const int64_t prompt_len = static_cast<int64_t>(ids.size());
  GenerationConfig g;
  g.stop = StopConfigFor(target, how.max_new, {});
  g.seed = how.seed;
  int64_t cache_length = prompt_len + how.max_new + 1 + how.extra_cache;
  if (how.extra_cache < 0)
    cache_length = CacheLengthFor(*target.model, prompt_len, how.max_new, decoder);
  if (how.cache_rows > 0) cache_length = how.cache_rows;
  KvCache cache = target.model->NewCache(1, cache_length);
  StoryRun run;
  const std::string key =
      target.spec.name + "\n" + std::to_string(how.max_new) + "\n" + prompt.turns[0];
  if (ar_answers != nullptr && ar_answers->count(key) > 0) {
    run.ar = ar_answers->at(key);
  } else {
    run.ar = GenerateAr(*target.model, target.tokenizer.get(), ids, g, cache);
    if (ar_answers != nullptr) (*ar_answers)[key] = run.ar;
  }
  decoder.Generate(ids, g, cache, run.spec);
  return run;
}

// Steps, emitted and accepted tokens over a set of prompts.
struct StoryTotals {
  int64_t prompts = 0, steps = 0, emitted = 0, accepted = 0;
  double tau() const { return static_cast<double>(emitted) / steps; }
};

// Every story prompt (96 new tokens, seed = the prompt's index, cache room for the answer)
// through `decoder`: the tokens and the stop reason equal AR's, the steps emit every token after
// the prefill's first, and `check_step` sees every step. Fatal when a prompt's tokens differ
// (`what` names the case); adds to `totals`.
inline void ExpectStoriesMatchAr(LoadedTarget& target, Decoder& decoder, const std::string& what,
                                 const std::function<void(const StepStats&)>& check_step,
                                 StoryTotals* totals) {
  const auto prompts = LoadDataset("stories", {});
  for (size_t i = 0; i < prompts.size(); ++i) {
    const StoryRun run = RunStoryPrompt(target, decoder, prompts[i], {96, 0, i});
    ASSERT_EQ(run.spec.generation.tokens, run.ar.tokens) << what << " prompt " << i;
    EXPECT_EQ(run.spec.generation.stop_reason, run.ar.stop_reason);
    int64_t emitted = 0;
    for (const StepStats& s : run.spec.steps) {
      check_step(s);
      emitted += s.n_emitted;
      totals->accepted += s.n_accepted;
    }
    EXPECT_EQ(emitted, static_cast<int64_t>(run.ar.tokens.size()) - 1);
    totals->steps += static_cast<int64_t>(run.spec.steps.size());
    totals->emitted += emitted;
    ++totals->prompts;
  }
}

}  // namespace testing_util
}  // namespace specbed
