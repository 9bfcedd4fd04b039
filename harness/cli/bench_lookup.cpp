// RunLookupBench (see bench_lookup.h).
#include "harness/cli/bench_lookup.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "base/error.h"
#include "base/timer.h"
#include "harness/runner/runner.h"
#include "methods/ngram/ngram_drafter.h"
#include "methods/suffix/suffix_drafter.h"

namespace specbed::cli {
namespace {

constexpr int64_t kRepeatPeriod = 100;  // tokens of the `repeated` text's period

// At least `n` tokens of stories sampled from `model` at T = 1 (seeds 0, 1, ...), concatenated.
std::vector<int32_t> GenerateText(const std::string& model, int64_t n) {
  LoadedTarget target = LoadModel(model, at::kFloat);
  const std::vector<int32_t> prompt = BuildPromptIds(target, {{"user", "Once upon a time"}});
  std::vector<int32_t> text;
  for (uint64_t seed = 0; static_cast<int64_t>(text.size()) < n; ++seed) {
    GenerationConfig g;
    g.sampling.temperature = 1.0;
    g.seed = seed;
    const int64_t room = target.model->config().max_seq_len - static_cast<int64_t>(prompt.size());
    g.stop = StopConfigFor(target, room - 1, {});
    KvCache cache = target.model->NewCache(1, target.model->config().max_seq_len);
    const auto tokens = GenerateAr(*target.model, target.tokenizer.get(), prompt, g, cache).tokens;
    SPECBED_CHECK(!tokens.empty(), "bench --lookup-contexts: '", model, "' generated nothing");
    text.insert(text.end(), tokens.begin(), tokens.end());
  }
  return text;
}

// `text` tiled to `n` tokens from its first `period`: repeats far longer than the suffix trie's
// depth (what agentic loops and code edits look like to a lookup drafter).
std::vector<int32_t> RepeatedText(const std::vector<int32_t>& text, int64_t period, int64_t n) {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(n));
  while (static_cast<int64_t>(out.size()) < n) out.push_back(text[out.size() % period]);
  return out;
}

struct LookupTiming {
  double begin_ms = 0, step_us = 0, drafted = 0, matched = 0;
};

// The longest root path of `tree` that `next` (the text's continuation) follows: what greedy
// verification would accept if the target wrote the text.
int64_t MatchedDepth(const DraftTree& tree, const int32_t* next, int64_t n_next) {
  std::vector<char> on_path(static_cast<size_t>(tree.size()), 0);
  int64_t best = 0;
  for (int64_t i = 0; i < tree.size(); ++i) {
    const int32_t parent = tree.parent[i];
    const int64_t depth = tree.depth[i];
    if ((parent < 0 || on_path[parent]) && depth <= n_next && tree.token[i] == next[depth - 1]) {
      on_path[i] = 1;
      best = std::max(best, depth);
    }
  }
  return best;
}

// Begin over text[0, context), then `steps` steps each committing the next text token.
LookupTiming TimeDrafter(Drafter& drafter, const std::vector<int32_t>& text, int64_t context,
                         int64_t steps) {
  const std::vector<int32_t> prompt(text.begin(), text.begin() + context);
  DraftBegin begin;
  begin.prompt = &prompt;
  begin.root = text[context];
  LookupTiming t;
  const int64_t b0 = NowNanos();
  drafter.Begin(begin);
  t.begin_ms = static_cast<double>(NowNanos() - b0) / 1e6;
  std::vector<int32_t> committed(text.begin(), text.begin() + context + 1);
  DraftStep step;
  step.committed = &committed;
  step.budget = {16, 16};
  DraftTree tree;
  Verdict verdict;
  int64_t drafted = 0, matched = 0, match_ns = 0;
  const int64_t s0 = NowNanos();
  for (int64_t i = 0; i < steps; ++i) {
    tree.Clear();
    step.root = committed.back();
    drafter.Draft(step, tree);
    drafted += tree.size();
    const int64_t m0 = NowNanos();  // not the drafter's cost
    const int64_t next = context + 1 + i;
    matched += MatchedDepth(tree, text.data() + next, static_cast<int64_t>(text.size()) - next);
    match_ns += NowNanos() - m0;
    verdict.tokens.assign(1, text[context + 1 + i]);
    drafter.Accept(tree, verdict);
    committed.push_back(verdict.tokens[0]);
  }
  t.step_us = static_cast<double>(NowNanos() - s0 - match_ns) / 1e3 / static_cast<double>(steps);
  t.drafted = static_cast<double>(drafted) / static_cast<double>(steps);
  t.matched = static_cast<double>(matched) / static_cast<double>(steps);
  return t;
}

}  // namespace

void RunLookupBench(const std::string& model, const std::vector<int64_t>& contexts, int64_t steps) {
  SPECBED_CHECK(!contexts.empty() && steps >= 1,
                "bench --lookup-contexts needs context lengths and --lookup-steps >= 1");
  for (int64_t c : contexts) {
    SPECBED_CHECK(c >= 1, "bench --lookup-contexts: context lengths must be >= 1, got ", c);
  }
  const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
  const std::vector<int32_t> sampled = GenerateText(model, longest + steps + 1);
  const std::vector<int32_t> repeated =
      RepeatedText(sampled, std::min<int64_t>(kRepeatPeriod, longest), longest + steps + 1);
  std::printf(
      "\nLookup drafters on text from %s: `sampled` = stories sampled at T = 1, concatenated; "
      "`repeated` = its first %lld tokens over and over. %lld steps per row, one committed token "
      "per step, budget 16 nodes; matched / step = the longest draft path the text's next tokens "
      "follow (what greedy verification would accept)\n\n",
      model.c_str(), static_cast<long long>(std::min<int64_t>(kRepeatPeriod, longest)),
      static_cast<long long>(steps));
  std::printf(
      "| drafter | text | context | µs / step | drafted / step | matched / step | Begin ms |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|\n");
  for (const auto& [text_name, text] :
       {std::pair<const char*, const std::vector<int32_t>*>{"sampled", &sampled},
        {"repeated", &repeated}}) {
    for (int64_t context : contexts) {
      NgramDrafter ngram(NgramOptions{});
      SuffixOptions none;
      none.scope = SuffixScope::kNone;
      SuffixDrafter suffix(none);
      none.longest_match_only = true;
      SuffixDrafter longest(none);
      const std::pair<const char*, Drafter*> drafters[] = {
          {"ngram (defaults)", &ngram},
          {"suffix (scope none)", &suffix},
          {"suffix (scope none, longest match only)", &longest}};
      for (const auto& [name, drafter] : drafters) {
        const LookupTiming t = TimeDrafter(*drafter, *text, context, steps);
        std::printf("| %s | %s | %lld | %.2f | %.2f | %.2f | %.3f |\n", name, text_name,
                    static_cast<long long>(context), t.step_us, t.drafted, t.matched, t.begin_ms);
      }
    }
  }
  std::fflush(stdout);
}

}  // namespace specbed::cli
