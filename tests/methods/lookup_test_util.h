// Shared pieces of the training-free lookup methods' tests (ngram_test.cpp, suffix_test.cpp):
// token identity with AR over a prompt list, and the prompt lists themselves.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "datasets/dataset.h"
#include "harness/engine/ar_generate.h"
#include "harness/runner/runner.h"

namespace specbed::testing_util {

// Decodes `ids` with `decoder` and with AR (greedy, `max_tokens` tokens): every output must equal
// AR's. Returns the accepted draft tokens.
inline int64_t ExpectArTokens(Decoder& decoder, LoadedTarget& target,
                              const std::vector<std::vector<int32_t>>& ids, int64_t max_tokens) {
  int64_t accepted = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    GenerationConfig g;
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

}  // namespace specbed::testing_util
