// The `suffix` method (suffix decoding, methods/suffix/): the counted trie against brute-force
// counts, speculation trees (longest match, frequency order, spec_factor and min_token_prob),
// the global trie's scope (other prompts' outputs only, never the prompt's own earlier answer),
// token identity with AR at T = 0 on every story prompt and on Spec-Bench prompts with drafts
// accepted, and the T = 1 chi-square test with a negative control.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/engine/verifier.h"
#include "methods/method_registry.h"
#include "methods/suffix/suffix_drafter.h"
#include "methods/suffix/suffix_trie.h"
#include "tests/engine/engine_test_util.h"
#include "tests/methods/lookup_test_util.h"

namespace specbed {
namespace {

int64_t CountOccurrences(const std::vector<int32_t>& t, const std::vector<int32_t>& s) {
  int64_t n = 0;
  for (size_t i = 0; i + s.size() <= t.size(); ++i) {
    n += std::equal(s.begin(), s.end(), t.begin() + i);
  }
  return n;
}

// Every substring of up to `depth` tokens over `vocab` (those of `t` and absent ones): the trie's
// count equals the brute-force count (Find = kNone for 0).
void ExpectCounts(const SuffixTrie& trie, const std::vector<int32_t>& t, int32_t vocab,
                  int64_t depth) {
  std::vector<int32_t> s;
  auto visit = [&](auto&& self) -> void {
    if (!s.empty()) {
      const int32_t node = trie.Find(s.data(), static_cast<int64_t>(s.size()));
      const int64_t want = CountOccurrences(t, s);
      ASSERT_EQ(node == SuffixTrie::kNone ? 0 : trie.count(node), want) << "length " << s.size();
    }
    if (static_cast<int64_t>(s.size()) == depth) return;
    for (int32_t v = 0; v < vocab; ++v) {
      s.push_back(v);
      self(self);
      s.pop_back();
    }
  };
  visit(visit);
}

TEST(SuffixTrie, AppendAndAddSequenceCountEverySubstring) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int32_t> token(0, 2);
  std::vector<int32_t> t;
  SuffixTrie running(4), whole(4);
  for (int i = 0; i < 60; ++i) {
    t.push_back(token(rng));
    running.Append(t.back());
  }
  whole.AddSequence(t, +1);
  ExpectCounts(running, t, 3, 4);
  ExpectCounts(whole, t, 3, 4);
  whole.AddSequence(t, -1);  // removed again: nothing occurs
  ExpectCounts(whole, {}, 3, 4);
  EXPECT_THROW(whole.AddSequence({1}, -1), Error);
}

TEST(SuffixSpeculation, LongestMatchFrequencyOrderAndLimits) {
  SuffixTrie trie(8);
  // "1 2 3" is followed by 4 twice and by 5 once; "9 2 3" by 6.
  for (int32_t x : {1, 2, 3, 4, 7, 1, 2, 3, 4, 7, 1, 2, 3, 5, 9, 2, 3, 6}) trie.Append(x);
  const std::vector<int32_t> context = {8, 1, 2, 3};
  SuffixSpeculation s = SpeculateFromTrie(trie, context, 16, 8, 4.0, 0.0);
  EXPECT_EQ(s.match_length, 3);  // "1 2 3" (the 4-token suffix never occurred)
  // Best first: the 2/3 branch 4 7 1 2 3 (to the trie's depth 8), then the 1/3 one 5 9 2 3 6.
  EXPECT_EQ(s.tokens, (std::vector<int32_t>{4, 7, 1, 2, 3, 5, 9, 2, 3, 6}));
  EXPECT_EQ(s.parents, (std::vector<int32_t>{-1, 0, 1, 2, 3, -1, 5, 6, 7, 8}));
  EXPECT_NEAR(s.probs[0], 2.0 / 3, 1e-12);
  EXPECT_NEAR(s.probs[5], 1.0 / 3, 1e-12);
  // spec_factor 1: at most 3 (match length) nodes; min_token_prob 0.5: only the 2/3 branch.
  EXPECT_EQ(SpeculateFromTrie(trie, context, 16, 8, 1.0, 0.0).tokens,
            (std::vector<int32_t>{4, 7, 1}));
  s = SpeculateFromTrie(trie, context, 16, 8, 4.0, 0.5);
  EXPECT_EQ(s.tokens, (std::vector<int32_t>{4, 7, 1, 2, 3}));
  EXPECT_NEAR(s.score, 5 * 2.0 / 3, 1e-12);
  EXPECT_EQ(SpeculateFromTrie(trie, context, 2, 8, 4.0, 0.0).tokens.size(), 2u);  // max_nodes
  EXPECT_EQ(SpeculateFromTrie(trie, context, 16, 1, 4.0, 0.0).tokens,
            (std::vector<int32_t>{4, 5}));                                     // max_depth 1
  EXPECT_TRUE(SpeculateFromTrie(trie, {42}, 16, 8, 4.0, 0.0).tokens.empty());  // no match
}

// Repeats longer than the trie: the longest match (23 tokens in a depth-24 trie) leaves one level
// below it, so drafting only from it would draft one token where the text repeats for 40. Every
// match length is scored: length 12 drafts 12 (= min(spec_factor x 12, 24 - 12)), the best.
TEST(SuffixSpeculation, ScoresEveryMatchLengthWhenRepeatsOutgrowTheTrie) {
  std::vector<int32_t> text;
  for (int32_t t = 100; t < 140; ++t) text.push_back(t);
  for (int32_t t = 100; t < 130; ++t) text.push_back(t);  // the second copy, 30 tokens in
  SuffixTrie trie(24);
  for (int32_t t : text) trie.Append(t);
  SuffixSpeculation s = SpeculateFromTrie(trie, text, 16, 64, 1.0, 0.1);
  EXPECT_EQ(s.match_length, 12);
  std::vector<int32_t> expected;
  for (int32_t t = 130; t < 140; ++t) expected.push_back(t);
  expected.push_back(100);
  expected.push_back(101);
  EXPECT_EQ(s.tokens, expected);
  for (size_t i = 0; i < s.parents.size(); ++i) EXPECT_EQ(s.parents[i], static_cast<int>(i) - 1);
  EXPECT_NEAR(s.score, 12.0, 1e-12);
  // The old rule (the control): the longest match, 23 tokens, leaves one level below it.
  s = SpeculateFromTrie(trie, text, 16, 64, 1.0, 0.1, /*longest_only=*/true);
  EXPECT_EQ(s.match_length, 23);
  EXPECT_EQ(s.tokens, (std::vector<int32_t>{130}));
  // A trie deep enough: the step budget (16 nodes) is the cap, reached from a 16-token match on.
  SuffixTrie deep(64);
  for (int32_t t : text) deep.Append(t);
  s = SpeculateFromTrie(deep, text, 16, 64, 1.0, 0.1);
  EXPECT_EQ(s.tokens.size(), 16u);
  EXPECT_GE(s.match_length, 16);
}

// Drives a SuffixDrafter through one request: Begin with `prompt`, then commits `output` in one
// step. Returns what the drafter drafts next from prompt + output.
std::vector<int32_t> DraftAfter(SuffixDrafter& drafter, const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& output) {
  DraftBegin begin;
  begin.prompt = &prompt;
  begin.root = output[0];
  drafter.Begin(begin);
  std::vector<int32_t> committed = prompt;
  committed.push_back(output[0]);
  DraftStep step;
  step.committed = &committed;
  step.budget = {8, 8};
  DraftTree first;
  drafter.Draft(step, first);
  Verdict v;
  v.tokens.assign(output.begin() + 1, output.end());
  drafter.Accept(first, v);
  committed.insert(committed.end(), output.begin() + 1, output.end());
  DraftTree next;
  drafter.Draft(step, next);
  return next.token;
}

TEST(SuffixDrafter, TheGlobalTrieHoldsOtherPromptsOutputsOnly) {
  const std::vector<int32_t> p1 = {1, 10}, p2 = {1, 20};
  SuffixOptions options;
  options.min_token_prob = 0;
  SuffixDrafter dataset(options);
  EXPECT_TRUE(DraftAfter(dataset, p1, {40, 41, 42, 43}).empty());  // nothing seen before
  EXPECT_EQ(dataset.last_source(), 0);
  // Another prompt reaching "40 41" drafts p1's continuation (spec_factor 1 x match length 2).
  EXPECT_EQ(DraftAfter(dataset, p2, {40, 41}), (std::vector<int32_t>{42, 43}));
  EXPECT_EQ(dataset.last_source(), 2);
  // p1 again (a warmup repeat): its own earlier answer is out of the global trie; p2's "40 41"
  // has no continuation.
  EXPECT_TRUE(DraftAfter(dataset, p1, {40, 41}).empty());
  options.scope = SuffixScope::kNone;
  SuffixDrafter none(options);
  DraftAfter(none, p1, {40, 41, 42, 43});
  EXPECT_TRUE(DraftAfter(none, p2, {40, 41}).empty());
  EXPECT_THROW(ParsePersistScope("case", "test"), Error);
}

// Scope dataset under load: the batch engine's slots (one drafter each, built from one
// MethodContext) share the case's global trie, so a request drafts from the outputs other slots
// finished, as it would in batch 1; with a trie each (the control) it does not.
TEST(SuffixDrafter, SlotsOfOneCaseShareTheDatasetTrie) {
  const std::vector<int32_t> p1 = {1, 10}, p2 = {1, 20}, p3 = {1, 30};
  SuffixOptions options;
  options.min_token_prob = 0;
  auto store = std::make_shared<SuffixGlobalStore>(options.max_depth);
  SuffixDrafter slot_a(options, store), slot_b(options, store);
  DraftAfter(slot_a, p1, {40, 41, 42, 43});
  DraftAfter(slot_a, p3, {50});  // slot A's next request: p1's output enters the shared trie
  EXPECT_EQ(DraftAfter(slot_b, p2, {40, 41}), (std::vector<int32_t>{42, 43}));
  EXPECT_EQ(slot_b.last_source(), 2);
  SuffixDrafter alone_a(options), alone_b(options);
  DraftAfter(alone_a, p1, {40, 41, 42, 43});
  DraftAfter(alone_a, p3, {50});
  EXPECT_TRUE(DraftAfter(alone_b, p2, {40, 41}).empty());
  // What the factory asks the case's MethodContext for: one store per key, built once, shared by
  // copies of the context.
  MethodContext context;
  const MethodContext copy = context;
  int builds = 0;
  const auto build = [&] {
    ++builds;
    return std::make_shared<SuffixGlobalStore>(24);
  };
  const auto first = context.shared->GetOrBuild<SuffixGlobalStore>("suffix dataset trie 24", build);
  EXPECT_EQ(copy.shared->GetOrBuild<SuffixGlobalStore>("suffix dataset trie 24", build), first);
  EXPECT_NE(context.shared->GetOrBuild<SuffixGlobalStore>("suffix dataset trie 8", build), first);
  EXPECT_EQ(builds, 2);
  options.max_depth = 8;
  EXPECT_THROW(SuffixDrafter(options, store).last_source(), Error);  // 24-deep trie, 8-deep drafter
}

// Scope run: a later case (a new drafter, as the runner builds one per case) drafts from the
// outputs of an earlier case on the same target, including its last request (put in when the
// earlier drafter goes away); another target's store stays apart, and scope dataset starts empty.
TEST(SuffixDrafter, RunScopeSharesOutputsAcrossCasesOfOneTarget) {
  const std::vector<int32_t> p1 = {1, 10}, p2 = {1, 20};
  SuffixOptions options;
  options.min_token_prob = 0;
  options.scope = SuffixScope::kRun;
  options.run_key = "run-scope-test-target";
  {
    SuffixDrafter first_case(options);
    DraftAfter(first_case, p1, {40, 41, 42, 43});
  }
  SuffixDrafter second_case(options);
  EXPECT_EQ(DraftAfter(second_case, p2, {40, 41}), (std::vector<int32_t>{42, 43}));
  EXPECT_EQ(second_case.last_source(), 2);
  options.run_key = "another-target";
  SuffixDrafter other_target(options);
  EXPECT_TRUE(DraftAfter(other_target, p2, {40, 41}).empty());
  options.scope = SuffixScope::kDataset;
  SuffixDrafter dataset(options);
  EXPECT_TRUE(DraftAfter(dataset, p2, {40, 41}).empty());
  EXPECT_EQ(RunSuffixStore("run-scope-test-target", 24),
            RunSuffixStore("run-scope-test-target", 24));
  EXPECT_NE(RunSuffixStore("run-scope-test-target", 24), RunSuffixStore("another-target", 24));
}

TEST(Suffix, MatchesArOnEveryStoryPromptAndOnSpecBench) {
  testing_util::ExpectMatchesArOnStoriesAndSpecBench("suffix",
                                                     {{{"scope", "dataset"}}, {{"scope", "none"}}});
}

// At T = 1 (sample_follow over deterministic tree drafts) the output is the target's
// distribution; the greedy-acceptance negative control fails
// (testing_util::ExpectLosslessAtTemperatureOne). Every draw has the same prompt, so the global
// trie never holds another prompt's output: the drafts come from the request trie.
TEST(Suffix, LosslessAtTemperatureOne) {
  at::set_num_threads(1);
  SuffixOptions suffix;
  suffix.max_depth = 6;
  suffix.spec_factor = 4;
  suffix.min_token_prob = 0;
  testing_util::ExpectLosslessAtTemperatureOne(std::make_unique<SuffixDrafter>(suffix), 4);
}

}  // namespace
}  // namespace specbed
