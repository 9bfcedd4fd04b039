// The `ngram` drafter (prompt lookup decoding, Saxena 2023; Spec-Bench's PLD; llama.cpp's
// ngram-simple): each step drafts, as a chain, the tokens that followed an earlier occurrence of
// the context's last n tokens (n = max_n down to min_n) in the prompt and the generated text —
// the earliest with a full continuation by default (the reference code), the latest as a knob. No
// model: the draft is a point mass, so `sample_follow` verification is lossless at T > 0.
// Checked by: tests/methods/ngram_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/engine/method.h"
#include "methods/ngram/ngram_index.h"

namespace specbed {

struct NgramOptions {
  int64_t min_n = 1;  // shortest suffix n-gram looked up
  int64_t max_n = 3;  // longest (tried first)
  NgramLookupRule rule;
};

class NgramDrafter final : public Drafter {
 public:
  explicit NgramDrafter(const NgramOptions& options);

  void Begin(const DraftBegin& begin) override;
  // Indexes the tokens committed since the last step, then drafts at most
  // min(budget.nodes, budget.depth) tokens; none when no suffix n-gram occurred before.
  void Draft(const DraftStep& step, DraftTree& tree) override;
  void Accept(const DraftTree& tree, const Verdict& verdict) override {}

  // n of the last step's match (0 = no draft).
  int64_t last_match_n() const { return last_match_n_; }

 private:
  NgramIndex index_;
  NgramLookupRule rule_;
  std::vector<int32_t> draft_;
  int64_t last_match_n_ = 0;
};

}  // namespace specbed
