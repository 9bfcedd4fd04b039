// The `suffix` drafter (suffix decoding, Oliaro et al., NeurIPS 2025; vLLM / ArcticInference
// `suffix`): two counted substring tries, one over the current request (prompt + output so far)
// and one global over the outputs of earlier requests (its scope a knob). Each step scores, for
// every length of context suffix (up to max_depth - 1 tokens) that was followed by something in
// a trie, the speculation tree grown from it, best first by the product of the continuations'
// empirical frequencies, at most spec_factor x (match length) nodes, none below min_token_prob;
// the tree with the highest expected accepted length (sum of its nodes' path probabilities) over
// every match length and both tries is drafted (as the reference implementation does). The drafts
// are deterministic, so `sample_follow` verification is lossless. Checked by:
// tests/methods/suffix_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "harness/engine/method.h"
#include "methods/common/persist_scope.h"
#include "methods/suffix/suffix_trie.h"

namespace specbed {

// kNone: no global trie, only the current request; kDataset: the latest output of every other
// prompt this case decoded (same dataset, knobs); kRun: one global trie shared by every suffix
// case of this process's run on the same target (and trie depth).
using SuffixScope = PersistScope;

struct SuffixOptions {
  int64_t max_depth = 24;           // longest suffix matched, and the tries' depth
  double spec_factor = 1.0;         // tree nodes <= spec_factor x match length
  double min_token_prob = 0.1;      // a node's path probability must reach this
  bool longest_match_only = false;  // true: grow a tree from the longest match only (the old rule)
  SuffixScope scope = SuffixScope::kDataset;
  std::string run_key;  // kRun: the target's name (outputs of other targets never mix)
};

// The global trie and the latest output per prompt (keyed by HashTokens of the prompt) that it
// counts: a drafter's own for scope dataset, shared through RunSuffixStore for scope run.
struct SuffixGlobalStore {
  explicit SuffixGlobalStore(int64_t max_depth) : trie(max_depth) {}
  SuffixTrie trie;
  std::unordered_map<uint64_t, std::vector<int32_t>> outputs;
};

// The process-wide store of scope run for `run_key` and trie depth `max_depth` (created on first
// use; cases run one at a time).
std::shared_ptr<SuffixGlobalStore> RunSuffixStore(const std::string& run_key, int64_t max_depth);

// One speculation tree: tokens with their parent (-1 = the root) and path probabilities.
struct SuffixSpeculation {
  std::vector<int32_t> tokens, parents;
  std::vector<double> probs;
  double score = 0;  // sum of probs: the expected number of accepted tokens
  int64_t match_length = 0;
};

// For every suffix of `context` of 1 .. trie.max_depth() - 1 tokens that was followed by a token
// in `trie`, grows the best-first tree from it: at most min(max_nodes, spec_factor x match
// length) nodes, at most max_depth deep (and at most trie.max_depth() - match length: the trie
// holds nothing deeper), none with a path probability below min_prob. Returns the tree with the
// highest score (ties: the longer match). Empty when nothing matches. `longest_only`: only the
// longest matched suffix grows a tree (SpecBed's rule before 2026-12-03; knob match_lengths).
SuffixSpeculation SpeculateFromTrie(const SuffixTrie& trie, const std::vector<int32_t>& context,
                                    int64_t max_nodes, int64_t max_depth, double spec_factor,
                                    double min_prob, bool longest_only = false);

class SuffixDrafter final : public Drafter {
 public:
  // `dataset_store`: scope dataset's global trie when several drafters serve one case (the batch
  // engine's slots: every slot's finished requests reach every other's drafts, as one trie in
  // batch 1); null = this drafter's own. Ignored for scopes none and run.
  explicit SuffixDrafter(const SuffixOptions& options,
                         std::shared_ptr<SuffixGlobalStore> dataset_store = nullptr);
  // Scope run: puts the last request's output into the shared store (a later case reads it).
  ~SuffixDrafter() override;

  // Moves the previous request's output into the global trie (scope dataset), and takes this
  // prompt's own earlier output out of it, so no request drafts from its own earlier answer.
  void Begin(const DraftBegin& begin) override;
  void Draft(const DraftStep& step, DraftTree& tree) override;
  void Accept(const DraftTree& tree, const Verdict& verdict) override;

  // Which trie the last step drafted from: 0 none, 1 the request's, 2 the global one.
  int last_source() const { return last_source_; }

 private:
  void FinishSequence();
  void SyncRequest(const std::vector<int32_t>& committed);

  SuffixOptions options_;
  SuffixTrie request_;
  std::shared_ptr<SuffixGlobalStore> global_;
  std::vector<int32_t> sequence_;  // prompt + committed tokens of the current request
  int64_t prompt_len_ = 0;
  uint64_t prompt_key_ = 0;
  bool active_ = false;
  int last_source_ = 0;
};

}  // namespace specbed
