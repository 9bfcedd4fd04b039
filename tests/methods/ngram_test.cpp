// The `ngram` method (prompt lookup, methods/ngram/): the index against a brute-force search on
// random sequences, knob checks, token identity with AR at T = 0 on every story prompt and on
// Spec-Bench prompts with repeated spans (drafts accepted), and the T = 1 chi-square test with a
// negative control.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/engine/verifier.h"
#include "harness/runner/runner.h"
#include "methods/method_registry.h"
#include "methods/ngram/ngram_drafter.h"
#include "methods/ngram/ngram_index.h"
#include "tests/engine/engine_test_util.h"
#include "tests/methods/lookup_test_util.h"

namespace specbed {
namespace {

// The continuation of the most recent earlier occurrence of the longest suffix n-gram, by
// scanning the whole context (what NgramIndex::Lookup must return).
int64_t BruteForceLookup(const std::vector<int32_t>& t, int64_t min_n, int64_t max_n,
                         int64_t max_tokens, std::vector<int32_t>& out) {
  const int64_t len = static_cast<int64_t>(t.size());
  for (int64_t n = std::min(max_n, len); n >= min_n; --n) {
    for (int64_t start = len - 1; start >= n; --start) {  // continuation start, newest first
      if (std::equal(t.begin() + (start - n), t.begin() + start, t.begin() + (len - n))) {
        out.assign(t.begin() + start, t.begin() + std::min(len, start + max_tokens));
        return n;
      }
    }
  }
  out.clear();
  return 0;
}

TEST(NgramIndex, MatchesBruteForceOnRandomSequences) {
  std::mt19937 rng(7);
  for (int64_t vocab : {2, 5, 50}) {
    for (auto [min_n, max_n] : {std::pair<int64_t, int64_t>{1, 1}, {1, 3}, {2, 4}}) {
      NgramIndex index(min_n, max_n);
      std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab) - 1);
      int64_t matched = 0;
      for (int i = 0; i < 400; ++i) {
        index.Push(token(rng));
        std::vector<int32_t> got, want;
        const int64_t n = index.Lookup(6, got);
        ASSERT_EQ(n, BruteForceLookup(index.tokens(), min_n, max_n, 6, want))
            << "vocab " << vocab << ", length " << i + 1;
        ASSERT_EQ(got, want) << "vocab " << vocab << ", length " << i + 1;
        matched += n > 0;
      }
      EXPECT_GT(matched, 10) << "vocab " << vocab;  // the comparison covered real matches
    }
  }
}

TEST(NgramIndex, PrefersTheLongestAndMostRecentMatch) {
  NgramIndex index(1, 3);
  for (int32_t t : {7, 1, 2, 3, 9, 2, 3, 8, 1, 2, 3}) index.Push(t);
  std::vector<int32_t> out;
  EXPECT_EQ(index.Lookup(4, out), 3);  // "1 2 3" occurred at 1..3, followed by 9 2 3 8
  EXPECT_EQ(out, (std::vector<int32_t>{9, 2, 3, 8}));
  index.Push(5);  // "3 5" and "5" never occurred
  out.clear();
  EXPECT_EQ(index.Lookup(4, out), 0);
  EXPECT_TRUE(out.empty());
  EXPECT_THROW(NgramIndex(0, 2), Error);
  EXPECT_THROW(NgramIndex(3, 2), Error);
}

TEST(Ngram, KnobsAreCheckedAndNamed) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  const MethodInfo& info = registry.Info("ngram");
  EXPECT_TRUE(info.traits.speculative);
  EXPECT_TRUE(info.traits.lossless);
  EXPECT_FALSE(info.traits.needs_drafter);
  EXPECT_EQ(info.traits.sampling_verifier, "sample_follow");
  const nlohmann::json knobs = registry.ResolveKnobs("ngram", {{"min_ngram", 3}});
  try {
    info.validate(knobs);
    FAIL() << "min_ngram 3 > max_ngram 2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("min_ngram (3) must not exceed max_ngram (2)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(registry.ResolveKnobs("ngram", {{"draft_length", 0}}), Error);
}

TEST(Ngram, MatchesArOnEveryStoryPromptAndOnSpecBench) {
  testing_util::ExpectMatchesArOnStoriesAndSpecBench("ngram");
}

// At T = 1 (sample_follow over point-mass drafts) the output is the target's distribution; the
// greedy-acceptance negative control fails (testing_util::ExpectLosslessAtTemperatureOne).
TEST(Ngram, LosslessAtTemperatureOne) {
  at::set_num_threads(1);
  testing_util::ExpectLosslessAtTemperatureOne(std::make_unique<NgramDrafter>(NgramOptions{1, 2}),
                                               3);
}

}  // namespace
}  // namespace specbed
