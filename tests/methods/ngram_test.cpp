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

// What NgramIndex::Lookup must return, by scanning the whole context as the reference code does:
// for n = max_n down to min_n, the occurrences of the final n-gram oldest first (earliest; the
// continuation must start before the final n-gram) or newest first (latest); with
// full_continuation only one followed by max_tokens tokens counts.
int64_t BruteForceLookup(const std::vector<int32_t>& t, int64_t min_n, int64_t max_n,
                         int64_t max_tokens, const NgramLookupRule& rule,
                         std::vector<int32_t>& out) {
  const int64_t len = static_cast<int64_t>(t.size());
  const bool earliest = rule.occurrence == NgramOccurrence::kEarliest;
  for (int64_t n = std::min(max_n, len); n >= min_n; --n) {
    for (int64_t i = 0; i + n < len; ++i) {
      const int64_t start = earliest ? n + i : len - 1 - i;  // the continuation's start
      if (earliest && start >= len - n) break;
      if (rule.full_continuation && start + max_tokens > len) continue;
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
  for (NgramOccurrence occurrence : {NgramOccurrence::kEarliest, NgramOccurrence::kLatest}) {
    for (bool full : {true, false}) {
      const NgramLookupRule rule{occurrence, full};
      const std::string what = std::string(NgramOccurrenceName(occurrence)) +
                               (full ? ", full continuation" : ", short continuation");
      for (int64_t vocab : {2, 5, 50}) {
        for (auto [min_n, max_n] : {std::pair<int64_t, int64_t>{1, 1}, {1, 3}, {2, 4}}) {
          NgramIndex index(min_n, max_n);
          std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(vocab) - 1);
          int64_t matched = 0;
          for (int i = 0; i < 400; ++i) {
            index.Push(token(rng));
            std::vector<int32_t> got, want;
            const int64_t n = index.Lookup(6, got, rule);
            ASSERT_EQ(n, BruteForceLookup(index.tokens(), min_n, max_n, 6, rule, want))
                << what << ", vocab " << vocab << ", length " << i + 1;
            ASSERT_EQ(got, want) << what << ", vocab " << vocab << ", length " << i + 1;
            matched += n > 0;
          }
          EXPECT_GT(matched, 10) << what << ", vocab " << vocab;  // real matches were compared
        }
      }
    }
  }
}

TEST(NgramIndex, TheLongestMatchThenTheRulesOccurrence) {
  NgramIndex index(1, 3);
  for (int32_t t : {1, 2, 3, 4, 5, 7, 1, 2, 3, 9, 2, 3, 8, 1, 2, 3}) index.Push(t);
  std::vector<int32_t> out;
  // "1 2 3" occurred twice before the end: oldest first it is followed by 4 5 7 1 ...
  EXPECT_EQ(index.Lookup(4, out), 3);
  EXPECT_EQ(out, (std::vector<int32_t>{4, 5, 7, 1}));
  out.clear();
  EXPECT_EQ(index.Lookup(4, out, {NgramOccurrence::kLatest, true}), 3);  // ... newest first 9 2 3 8
  EXPECT_EQ(out, (std::vector<int32_t>{9, 2, 3, 8}));
  // Full continuation: the first "1 2 3" is followed by exactly 13 tokens (to the end), so 13
  // draft and 14 fit after no occurrence of "1 2 3", "2 3" or "3"; a short one drafts the 13.
  out.clear();
  EXPECT_EQ(index.Lookup(13, out), 3);
  EXPECT_EQ(out.size(), 13u);
  out.clear();
  EXPECT_EQ(index.Lookup(14, out), 0);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(index.Lookup(14, out, {NgramOccurrence::kEarliest, false}), 3);
  EXPECT_EQ(out.size(), 13u);
  index.Push(5);  // "3 5" never occurred; "5" did, followed by 7
  out.clear();
  EXPECT_EQ(index.Lookup(1, out), 1);
  EXPECT_EQ(out, (std::vector<int32_t>{7}));
  index.Push(6);  // "6" never occurred
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
  // The defaults are Spec-Bench's PLD setting: n = 3, 10 tokens, earliest, full continuation.
  const nlohmann::json defaults = registry.ResolveKnobs("ngram", nlohmann::json::object());
  EXPECT_EQ(defaults.at("max_ngram"), 3);
  EXPECT_EQ(defaults.at("draft_length"), 10);
  EXPECT_EQ(defaults.at("occurrence"), "earliest");
  EXPECT_EQ(defaults.at("full_continuation"), 1);
  EXPECT_THROW(registry.ResolveKnobs("ngram", {{"occurrence", "middle"}}), Error);
  const nlohmann::json knobs = registry.ResolveKnobs("ngram", {{"min_ngram", 4}});
  try {
    info.validate(knobs);
    FAIL() << "min_ngram 4 > max_ngram 3 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("min_ngram (4) must not exceed max_ngram (3)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(registry.ResolveKnobs("ngram", {{"draft_length", 0}}), Error);
}

TEST(Ngram, MatchesArOnEveryStoryPromptAndOnSpecBench) {
  // The defaults (Spec-Bench's PLD) and SpecBed's earlier setting (latest, short continuations).
  testing_util::ExpectMatchesArOnStoriesAndSpecBench(
      "ngram", {nlohmann::json::object(),
                {{"occurrence", "latest"}, {"full_continuation", 0}, {"max_ngram", 2}}});
}

// At T = 1 (sample_follow over point-mass drafts) the output is the target's distribution; the
// greedy-acceptance negative control fails (testing_util::ExpectLosslessAtTemperatureOne).
TEST(Ngram, LosslessAtTemperatureOne) {
  at::set_num_threads(1);
  // The latest occurrence with short continuations drafts on most steps of the repeated pattern
  // (the rule only decides which tokens are offered; sample_follow is lossless for any).
  testing_util::ExpectLosslessAtTemperatureOne(
      std::make_unique<NgramDrafter>(NgramOptions{1, 2, {NgramOccurrence::kLatest, false}}), 3);
}

}  // namespace
}  // namespace specbed
