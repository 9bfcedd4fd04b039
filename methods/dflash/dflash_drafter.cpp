// DFlash / DDTree / JetSpec drafting (see dflash_drafter.h).
// Checked by: tests/methods/dflash_drafter_test.cpp, tests/methods/jetspec_test.cpp.
#include "methods/dflash/dflash_drafter.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "harness/base/error.h"
#include "methods/common/host_features.h"

namespace specbed {

DflashDrafter::DflashDrafter(std::unique_ptr<DflashHead> head, DflashDraftOptions options)
    : head_(std::move(head)), options_(options) {
  SPECBED_CHECK(head_ != nullptr, "dflash drafter needs a head");
  const DflashConfig& c = head_->config();
  for (int64_t id : c.TargetLayerIds()) layers_.push_back(id + 1);
  h_ = c.hidden_size;
  vocab_ = c.vocab_size;
  SPECBED_CHECK(options_.block_size >= 0, "dflash: block_size must be >= 0 (0 = the head's ",
                c.block_size, "), got ", options_.block_size);
  set_block_size(options_.block_size > 0 ? options_.block_size : c.block_size);
  SPECBED_CHECK(
      options_.kind == DflashTreeKind::kChain || (options_.top_k >= 1 && options_.top_k <= vocab_),
      "dflash: top_k / width ", options_.top_k, " must be in [1, vocab = ", vocab_, "]");
  SPECBED_CHECK(options_.budget >= 0, "dflash: the budget must be >= 0, got ", options_.budget);
}

void DflashDrafter::set_block_size(int64_t b) {
  SPECBED_CHECK(b >= 2, "dflash: block_size ", b,
                " must be >= 2 (the root row and at least one mask row)");
  block_ = b;
}

std::vector<int64_t> DflashDrafter::TargetHiddenLayers() const {
  return layers_;
}

void DflashDrafter::QueueContext(const std::vector<at::Tensor>& hidden, int64_t n) {
  SPECBED_CHECK(hidden.size() == layers_.size(), "dflash: expected ", layers_.size(),
                " target hidden states, got ", hidden.size());
  const int64_t width = static_cast<int64_t>(layers_.size()) * h_;
  const size_t base = pending_.size();
  pending_.resize(base + static_cast<size_t>(n * width));
  for (size_t l = 0; l < hidden.size(); ++l) {
    const at::Tensor t = HostFloat32(hidden[l]);
    SPECBED_CHECK(t.dim() == 3 && t.size(1) >= n && t.size(2) == h_, "dflash: target hidden ",
                  "state ", l, " has shape ", t.sizes(), ", expected [1, >=", n, ", ", h_, "]");
    const float* src = t.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(pending_.data() + base + i * width + l * h_, src + i * h_, sizeof(float) * h_);
    }
  }
  pending_rows_ += n;
}

void DflashDrafter::Begin(const DraftBegin& begin) {
  head_->ResetContext(begin.max_len + 1);
  pending_.clear();
  pending_rows_ = 0;
  sampler_ = std::make_unique<Sampler>(begin.sampling, begin.seed);
  QueueContext(begin.hidden, static_cast<int64_t>(begin.prompt->size()));
}

void DflashDrafter::Accept(const DraftTree& tree, const Verdict& verdict) {
  QueueContext(verdict.hidden, 1 + verdict.n_accepted());
}

void DflashDrafter::Draft(const DraftStep& step, DraftTree& tree) {
  const int64_t depth = std::min({block_ - 1, step.budget.depth, step.budget.nodes});
  if (depth <= 0) return;
  if (pending_rows_ > 0) {
    head_->AppendContext(pending_.data(), pending_rows_);
    pending_.clear();
    pending_rows_ = 0;
  }
  head_->ForwardFromBonus(step.root, block_, out_);
  if (options_.kind == DflashTreeKind::kChain) {  // DFlash: a chain of the per-row choices
    const bool greedy = sampler_->params().greedy() || options_.argmax_drafts;
    if (!greedy) {
      tree.vocab = vocab_;
      tree.draft_probs.assign(static_cast<size_t>((depth + 1) * vocab_), 0.f);
    }
    for (int64_t d = 1; d <= depth; ++d) {
      const float* logits = out_.logits_row(d);
      int32_t token;
      if (greedy) {
        token = Argmax(logits, vocab_);
      } else {
        sampler_->Distribution(logits, vocab_, probs_);
        float* row = tree.DraftProbsRow(d - 1);
        std::copy(probs_.begin(), probs_.end(), row);
        token = SampleFromProbs(row, vocab_, sampler_->rng());
      }
      tree.AddNode(token, static_cast<int32_t>(d) - 2);
    }
    return;
  }
  // Trees: per-depth top-K log-probs (no temperature), then DDTree's best-first tree or
  // JetSpec's group expansion.
  const int64_t k = options_.top_k;
  logp_.resize(static_cast<size_t>(depth * k));
  tokens_.resize(static_cast<size_t>(depth * k));
  order_.resize(static_cast<size_t>(vocab_));
  for (int64_t d = 1; d <= depth; ++d) {
    const float* row = out_.logits_row(d);
    float max_v = -std::numeric_limits<float>::infinity();
    for (int64_t v = 0; v < vocab_; ++v) max_v = std::max(max_v, row[v]);
    float sum = 0;
    for (int64_t v = 0; v < vocab_; ++v) sum += std::exp(row[v] - max_v);
    const float log_z = max_v + std::log(sum);
    // The k best ids, highest first; ties: smaller id first (a strict total order, so the
    // selection is unique). O(V + k log k) per depth: nth_element, then sort the top k.
    std::iota(order_.begin(), order_.end(), 0);
    const auto better = [row](int32_t a, int32_t b) {
      return row[a] > row[b] || (row[a] == row[b] && a < b);
    };
    if (k < vocab_) std::nth_element(order_.begin(), order_.begin() + k, order_.end(), better);
    std::sort(order_.begin(), order_.begin() + k, better);
    for (int64_t r = 0; r < k; ++r) {
      tokens_[(d - 1) * k + r] = order_[r];
      logp_[(d - 1) * k + r] = std::min(0.0f, row[order_[r]] - log_z);
    }
  }
  const int64_t budget = std::min(options_.budget, step.budget.nodes);
  if (options_.kind == DflashTreeKind::kBestFirst) {
    best_first_.Build(logp_.data(), tokens_.data(), depth, k, budget, tree);
  } else {
    group_expand_.Build(logp_.data(), tokens_.data(), depth, k, budget, tree);
  }
}

}  // namespace specbed
