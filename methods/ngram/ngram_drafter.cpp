// NgramDrafter (see ngram_drafter.h).
#include "methods/ngram/ngram_drafter.h"

#include <algorithm>

#include "base/error.h"

namespace specbed {

NgramDrafter::NgramDrafter(const NgramOptions& options)
    : index_(options.min_n, options.max_n), rule_(options.rule) {}

void NgramDrafter::Begin(const DraftBegin& begin) {
  SPECBED_CHECK(begin.prompt != nullptr && !begin.prompt->empty(), "ngram drafter: empty prompt");
  index_.Clear();
  for (int32_t t : *begin.prompt) index_.Push(t);
  index_.Push(begin.root);
  last_match_n_ = 0;
}

void NgramDrafter::Draft(const DraftStep& step, DraftTree& tree) {
  const std::vector<int32_t>& committed = *step.committed;
  SPECBED_CHECK(committed.size() >= index_.tokens().size(),
                "ngram drafter: the committed tokens shrank (", committed.size(), " after ",
                index_.tokens().size(), ")");
  for (size_t i = index_.tokens().size(); i < committed.size(); ++i) index_.Push(committed[i]);
  draft_.clear();
  last_match_n_ = index_.Lookup(std::min(step.budget.nodes, step.budget.depth), draft_, rule_);
  for (size_t i = 0; i < draft_.size(); ++i) {
    tree.AddNode(draft_[i], static_cast<int32_t>(i) - 1);
  }
}

}  // namespace specbed
