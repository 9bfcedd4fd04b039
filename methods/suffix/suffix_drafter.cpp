// SuffixDrafter and SpeculateFromTrie (see suffix_drafter.h).
#include "methods/suffix/suffix_drafter.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <queue>

#include "base/error.h"

namespace specbed {
namespace {

struct Candidate {
  double prob;
  int32_t node;    // trie node
  int32_t parent;  // speculation index of its parent (-1 = root)
  int64_t depth;
  bool operator<(const Candidate& o) const { return prob < o.prob; }
};

void PushChildren(const SuffixTrie& trie, int32_t node, double prob, int32_t parent, int64_t depth,
                  std::priority_queue<Candidate>& queue) {
  const double total = static_cast<double>(trie.continuations(node));
  if (total <= 0) return;
  for (int32_t c : trie.children(node)) {
    if (trie.count(c) > 0) queue.push({prob * trie.count(c) / total, c, parent, depth + 1});
  }
}

// The best-first tree below trie node `match` (the context's last `match_length` tokens): at
// most `limit` nodes, at most max_depth deep, none below min_prob.
SuffixSpeculation GrowTree(const SuffixTrie& trie, int32_t match, int64_t match_length,
                           int64_t limit, int64_t max_depth, double min_prob) {
  SuffixSpeculation spec;
  spec.match_length = match_length;
  std::priority_queue<Candidate> queue;
  PushChildren(trie, match, 1.0, -1, 0, queue);
  while (!queue.empty() && static_cast<int64_t>(spec.tokens.size()) < limit) {
    const Candidate c = queue.top();
    queue.pop();
    if (c.prob < min_prob) break;  // the best left is below the floor
    const int32_t index = static_cast<int32_t>(spec.tokens.size());
    spec.tokens.push_back(trie.token(c.node));
    spec.parents.push_back(c.parent);
    spec.probs.push_back(c.prob);
    spec.score += c.prob;
    if (c.depth < max_depth) PushChildren(trie, c.node, c.prob, index, c.depth, queue);
  }
  return spec;
}

}  // namespace

SuffixSpeculation SpeculateFromTrie(const SuffixTrie& trie, const std::vector<int32_t>& context,
                                    int64_t max_nodes, int64_t max_depth, double spec_factor,
                                    double min_prob, bool longest_only) {
  const int64_t n = static_cast<int64_t>(context.size());
  // The matched lengths with a continuation, shortest first.
  std::vector<std::pair<int64_t, int32_t>> matches;
  for (int64_t length = 1; length <= std::min(trie.max_depth() - 1, n); ++length) {
    const int32_t node = trie.Find(context.data() + (n - length), length);
    if (node == SuffixTrie::kNone) break;  // no longer suffix occurred either
    if (trie.continuations(node) > 0) matches.emplace_back(length, node);
  }
  if (longest_only && !matches.empty()) matches.erase(matches.begin(), matches.end() - 1);
  SuffixSpeculation best;
  for (const auto& [length, node] : matches) {
    const int64_t limit = std::min<int64_t>(
        max_nodes, static_cast<int64_t>(spec_factor * static_cast<double>(length)));
    SuffixSpeculation spec = GrowTree(trie, node, length, limit, max_depth, min_prob);
    // Ties go to the longer match (more context agrees with it).
    if (!spec.tokens.empty() && spec.score >= best.score) best = std::move(spec);
  }
  return best;
}

std::shared_ptr<SuffixGlobalStore> RunSuffixStore(const std::string& run_key, int64_t max_depth) {
  static std::mutex mu;
  static std::map<std::pair<std::string, int64_t>, std::shared_ptr<SuffixGlobalStore>> stores;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<SuffixGlobalStore>& store = stores[{run_key, max_depth}];
  if (store == nullptr) store = std::make_shared<SuffixGlobalStore>(max_depth);
  return store;
}

SuffixDrafter::SuffixDrafter(const SuffixOptions& options,
                             std::shared_ptr<SuffixGlobalStore> dataset_store)
    : options_(options), request_(options.max_depth) {
  if (options.scope == SuffixScope::kRun) {
    global_ = RunSuffixStore(options.run_key, options.max_depth);
  } else if (options.scope == SuffixScope::kDataset && dataset_store != nullptr) {
    global_ = std::move(dataset_store);
  } else {
    global_ = std::make_shared<SuffixGlobalStore>(options.max_depth);
  }
  SPECBED_CHECK(global_->trie.max_depth() == options.max_depth,
                "suffix drafter: the shared trie is ", global_->trie.max_depth(),
                " deep, the drafter's max_depth is ", options.max_depth);
  SPECBED_CHECK(
      options.spec_factor > 0 && options.min_token_prob >= 0 && options.min_token_prob <= 1,
      "suffix drafter: need spec_factor > 0 and min_token_prob in [0, 1]");
}

SuffixDrafter::~SuffixDrafter() {
  if (global_.use_count() > 1) FinishSequence();  // only a shared store outlives us
}

void SuffixDrafter::FinishSequence() {
  if (!active_ || options_.scope == SuffixScope::kNone) return;
  active_ = false;
  std::vector<int32_t> output(sequence_.begin() + prompt_len_, sequence_.end());
  const auto earlier = global_->outputs.find(prompt_key_);
  if (earlier != global_->outputs.end()) global_->trie.AddSequence(earlier->second, -1);
  global_->trie.AddSequence(output, +1);
  global_->outputs[prompt_key_] = std::move(output);
}

void SuffixDrafter::Begin(const DraftBegin& begin) {
  SPECBED_CHECK(begin.prompt != nullptr && !begin.prompt->empty(), "suffix drafter: empty prompt");
  FinishSequence();
  prompt_key_ = HashTokens(*begin.prompt);
  const auto earlier = global_->outputs.find(prompt_key_);
  if (earlier != global_->outputs.end()) {  // this prompt's own earlier answer (warmup, repeat)
    global_->trie.AddSequence(earlier->second, -1);
    global_->outputs.erase(earlier);
  }
  request_.Clear();
  prompt_len_ = static_cast<int64_t>(begin.prompt->size());
  sequence_.clear();
  SyncRequest(*begin.prompt);
  sequence_.push_back(begin.root);
  request_.Append(begin.root);
  active_ = true;
}

void SuffixDrafter::SyncRequest(const std::vector<int32_t>& committed) {
  SPECBED_CHECK(committed.size() >= sequence_.size(),
                "suffix drafter: the committed tokens shrank");
  for (size_t i = sequence_.size(); i < committed.size(); ++i) {
    sequence_.push_back(committed[i]);
    request_.Append(committed[i]);
  }
}

void SuffixDrafter::Draft(const DraftStep& step, DraftTree& tree) {
  SyncRequest(*step.committed);
  const int64_t nodes = step.budget.nodes, depth = step.budget.depth;
  SuffixSpeculation best =
      SpeculateFromTrie(request_, sequence_, nodes, depth, options_.spec_factor,
                        options_.min_token_prob, options_.longest_match_only);
  last_source_ = best.tokens.empty() ? 0 : 1;
  if (options_.scope != SuffixScope::kNone) {
    SuffixSpeculation global =
        SpeculateFromTrie(global_->trie, sequence_, nodes, depth, options_.spec_factor,
                          options_.min_token_prob, options_.longest_match_only);
    if (global.score > best.score) {
      best = std::move(global);
      last_source_ = 2;
    }
  }
  for (size_t i = 0; i < best.tokens.size(); ++i) tree.AddNode(best.tokens[i], best.parents[i]);
}

void SuffixDrafter::Accept(const DraftTree& tree, const Verdict& verdict) {
  for (int32_t t : verdict.tokens) {  // the committed tokens, also those of the last step
    sequence_.push_back(t);
    request_.Append(t);
  }
}

}  // namespace specbed
