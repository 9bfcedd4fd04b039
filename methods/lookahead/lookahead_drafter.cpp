// LookaheadDrafter and its n-gram pool (see lookahead_drafter.h).
#include "methods/lookahead/lookahead_drafter.h"

#include <algorithm>

#include "base/enum_names.h"
#include "base/error.h"
#include "methods/common/logits_rows.h"

namespace specbed {

SPECBED_ENUM_NAMES(LookaheadLayout, "lookahead layout", LookaheadLayoutName, ParseLookaheadLayout,
                   {LookaheadLayout::kReference, "reference"},
                   {LookaheadLayout::kOwnColumn, "own_column"})

DraftBudget LookaheadBudget(const LookaheadOptions& options) {
  const int64_t levels = options.level - 1;
  DraftBudget b;
  b.nodes = (options.window + options.guess) * levels;
  b.depth = std::max(options.window + options.level - 2, levels);
  return b;
}

void NgramPool::Insert(int32_t key, const int32_t* continuation) {
  if (capacity_ == 0) return;
  std::vector<int32_t>& list = pool_[key];
  const int64_t count = static_cast<int64_t>(list.size()) / length_;
  int64_t found = count;
  for (int64_t i = 0; i < count && found == count; ++i) {
    if (std::equal(continuation, continuation + length_, list.begin() + i * length_)) found = i;
  }
  if (found == count) {  // new: make room at the front, dropping the oldest when full
    if (count < capacity_) list.resize(list.size() + length_);
    found = std::min(count, capacity_ - 1);
  }
  // Shift entries [0, found) back by one and put the continuation first.
  std::copy_backward(list.begin(), list.begin() + found * length_,
                     list.begin() + (found + 1) * length_);
  std::copy(continuation, continuation + length_, list.begin());
}

const std::vector<int32_t>* NgramPool::Find(int32_t key) const {
  const auto it = pool_.find(key);
  return it == pool_.end() ? nullptr : &it->second;
}

LookaheadDrafter::LookaheadDrafter(const LookaheadOptions& options)
    : options_(options), pool_(options.level - 1, options.guess) {
  SPECBED_CHECK(options.window >= 1 && options.level >= 2 && options.guess >= 0,
                "lookahead: window (", options.window, ") >= 1, level (", options.level,
                ") >= 2 and guess (", options.guess, ") >= 0 are required");
  levels_.assign(static_cast<size_t>(options.level - 1),
                 std::vector<int32_t>(static_cast<size_t>(options.window), 0));
}

void LookaheadDrafter::Begin(const DraftBegin& begin) {
  SPECBED_CHECK(begin.prompt != nullptr && !begin.prompt->empty(),
                "lookahead drafter: empty prompt");
  const std::vector<int32_t>& prompt = *begin.prompt;
  pool_.Clear();
  const int64_t n = options_.level;
  history_.clear();
  if (options_.pool_from_prompt) {
    for (size_t i = 0; i + n <= prompt.size(); ++i) pool_.Insert(prompt[i], &prompt[i + 1]);
    const size_t keep = std::min(prompt.size(), static_cast<size_t>(n - 1));
    history_.assign(prompt.end() - static_cast<std::ptrdiff_t>(keep), prompt.end());
  }
  rng_.seed(begin.seed);
  std::uniform_int_distribution<size_t> pick(0, prompt.size() - 1);
  for (auto& level : levels_) {
    for (int32_t& t : level) t = prompt[pick(rng_)];
  }
  placed_columns_ = 0;
}

void LookaheadDrafter::AddCandidates(int32_t root, int64_t max_nodes, int64_t max_depth,
                                     DraftTree& tree) {
  last_candidates_ = 0;
  const std::vector<int32_t>* list = pool_.Find(root);
  if (list == nullptr) return;
  const int64_t len = pool_.length();
  const int64_t count = static_cast<int64_t>(list->size()) / len;
  for (int64_t c = 0; c < count && tree.size() < max_nodes; ++c) {
    int32_t parent = -1;
    for (int64_t d = 0; d < std::min(len, max_depth); ++d) {
      const int32_t token = (*list)[c * len + d];
      int32_t child = -1;  // an existing child of `parent` carrying `token` (trie merge)
      for (int32_t i = parent + 1; i < tree.size() && child < 0; ++i) {
        if (tree.parent[i] == parent && tree.token[i] == token) child = i;
      }
      if (child < 0) {
        if (tree.size() == max_nodes) break;
        child = tree.AddNode(token, parent);
      }
      parent = child;
    }
    ++last_candidates_;
  }
}

void LookaheadDrafter::AddWindow(int64_t columns, DraftTree& tree) {
  const int64_t levels = options_.level - 1;
  const bool reference = options_.layout == LookaheadLayout::kReference;
  top_slots_.clear();
  int32_t left = -1;  // level-1 node of the previous column (the chain)
  const int64_t chain = reference ? columns - 1 : columns;
  level1_.resize(static_cast<size_t>(chain));
  for (int64_t j = 0; j < chain; ++j) {
    left = tree.AddNode(levels_[0][j], left);
    level1_[j] = left;
  }
  for (int64_t j = 0; j < columns; ++j) {
    // The node column j's upper levels hang from (-1: the root, verify slot 0).
    int32_t node = !reference ? level1_[j] : j == 0 ? -1 : level1_[j - 1];
    for (int64_t l = 1; l < levels; ++l) node = tree.AddNode(levels_[l][j], node);
    top_slots_.push_back(node + 1);
  }
}

int64_t LookaheadDrafter::ColumnsThatFit(int64_t nodes, int64_t depth) const {
  // k columns take k (N-1) nodes, k + N - 2 deep (kOwnColumn); one chain node and one level
  // less with kReference (column 0 hangs below the root).
  const int64_t levels = options_.level - 1;
  const int64_t saved = options_.layout == LookaheadLayout::kReference ? 1 : 0;
  const int64_t by_nodes = (nodes + saved) / levels;
  const int64_t by_depth = depth - (levels - 1) + saved;
  return std::max<int64_t>(0, std::min({options_.window, by_nodes, by_depth}));
}

void LookaheadDrafter::Draft(const DraftStep& step, DraftTree& tree) {
  const int64_t levels = options_.level - 1;
  root_ = step.root;
  AddCandidates(step.root, std::min<int64_t>(step.budget.nodes, options_.guess * levels),
                step.budget.depth, tree);
  placed_columns_ = ColumnsThatFit(step.budget.nodes - tree.size(), step.budget.depth);
  if (placed_columns_ > 0) AddWindow(placed_columns_, tree);
}

void LookaheadDrafter::Accept(const DraftTree& tree, const Verdict& verdict) {
  if (placed_columns_ > 0) {
    SPECBED_CHECK(verdict.logits.defined(),
                  "lookahead drafter: the verdict carries no target logits (a decoder other than "
                  "SpeculativeDecoder?)");
    TopkRows(verdict.logits, top_slots_, 1, next_);
    AddWindowNgrams();
    MoveWindow();
  }
  if (options_.pool_from_prompt) AddCommittedNgrams(verdict.tokens);
  placed_columns_ = 0;  // an Accept without a Draft before it (a K = 0 step) placed no window
  if (!verdict.tokens.empty()) root_ = verdict.tokens.back();
}

void LookaheadDrafter::AddWindowNgrams() {
  // Column j's N-gram: its key, then its upper levels and R[j]. The key is the token the column
  // hangs from: its own level-1 token (kOwnColumn), or the one before it (kReference: the root
  // for column 0, chain token j - 1 otherwise), whose level-1 token is then not in it.
  const int64_t levels = options_.level - 1;
  const bool reference = options_.layout == LookaheadLayout::kReference;
  ngram_.resize(static_cast<size_t>(levels));
  for (int64_t j = 0; j < placed_columns_; ++j) {
    for (int64_t l = 1; l < levels; ++l) ngram_[l - 1] = levels_[l][j];
    ngram_[levels - 1] = next_[j];
    const int32_t key = !reference ? levels_[0][j] : j == 0 ? root_ : levels_[0][j - 1];
    pool_.Insert(key, ngram_.data());
  }
}

void LookaheadDrafter::MoveWindow() {
  const int64_t levels = options_.level - 1;
  if (options_.layout == LookaheadLayout::kReference) {
    // The chain's token k sat one position after column k + 1's level 2 (or R): it takes it, as
    // the committed token took column 0's place; columns that did not fit keep theirs.
    for (int64_t k = 0; k + 1 < placed_columns_; ++k) {
      levels_[0][k] = levels > 1 ? levels_[1][k + 1] : next_[k + 1];
    }
    for (int64_t j = 0; j < placed_columns_ && levels > 1; ++j) {
      for (int64_t l = 1; l + 1 < levels; ++l) levels_[l][j] = levels_[l + 1][j];
      levels_[levels - 1][j] = next_[j];
    }
    return;
  }
  for (int64_t j = 0; j < placed_columns_; ++j) {
    for (int64_t l = 0; l + 1 < levels; ++l) levels_[l][j] = levels_[l + 1][j];
    levels_[levels - 1][j] = next_[j];
  }
}

void LookaheadDrafter::AddCommittedNgrams(const std::vector<int32_t>& tokens) {
  const size_t n = static_cast<size_t>(options_.level);
  for (int32_t t : tokens) {
    history_.push_back(t);
    if (history_.size() < n) continue;
    pool_.Insert(history_[0], &history_[1]);
    history_.erase(history_.begin());
  }
}

}  // namespace specbed
