// DFlash / DDTree / JetSpec drafting (see dflash_drafter.h).
// Checked by: tests/methods/dflash_drafter_test.cpp, tests/methods/jetspec_test.cpp.
#include "methods/dflash/dflash_drafter.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "base/error.h"
#include "kernels/engine_counters.h"

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
  std::vector<at::Tensor> parts;
  for (size_t l = 0; l < hidden.size(); ++l) {
    const at::Tensor& t = hidden[l];
    SPECBED_CHECK(t.dim() == 3 && t.size(1) >= n && t.size(2) == h_, "dflash: target hidden ",
                  "state ", l, " has shape ", t.sizes(), ", expected [1, >=", n, ", ", h_, "]");
    parts.push_back(t.select(0, 0).narrow(0, 0, n));
  }
  pending_.push_back(at::cat(parts, 1));
}

void DflashDrafter::Begin(const DraftBegin& begin) {
  head_->ResetContext(begin.max_len + 1);
  pending_.clear();
  sampler_ = std::make_unique<Sampler>(begin.sampling, begin.seed);
  QueueContext(begin.hidden, static_cast<int64_t>(begin.prompt->size()));
}

void DflashDrafter::AppendPendingContext() {
  if (pending_.empty()) return;
  head_->AppendContext(pending_.size() == 1 ? pending_[0] : at::cat(pending_, 0));
  pending_.clear();
}

void DflashDrafter::Accept(const DraftTree& tree, const Verdict& verdict) {
  QueueContext(verdict.hidden, 1 + verdict.n_accepted());
}

int64_t DflashDrafter::PrepareDraft(const DraftStep& step) {
  const int64_t depth = std::min({block_ - 1, step.budget.depth, step.budget.nodes});
  if (depth > 0) AppendPendingContext();
  return depth;
}

void DflashDrafter::Draft(const DraftStep& step, DraftTree& tree) {
  const int64_t depth = PrepareDraft(step);
  if (depth <= 0) return;
  head_->ForwardFromBonus(step.root, block_, out_);
  BuildDraft(step, depth, tree);
}

const void* DflashDrafter::DraftBatchKey() const {
  return head_->placement().aten ? head_->weights().get() : nullptr;
}

void DflashDrafter::DraftBatch(const std::vector<DraftJob>& jobs) {
  std::vector<DflashBlock> blocks;
  std::vector<int64_t> depths(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    auto* drafter = dynamic_cast<DflashDrafter*>(jobs[i].drafter);
    SPECBED_CHECK(drafter != nullptr && drafter->DraftBatchKey() == DraftBatchKey(),
                  "dflash drafter: DraftBatch got a job of another drafter");
    depths[i] = drafter->PrepareDraft(jobs[i].step);
    if (depths[i] <= 0) continue;
    blocks.push_back(drafter->head_->BonusBlock(jobs[i].step.root, drafter->block_, drafter->out_));
  }
  if (blocks.empty()) return;
  DflashHead::ForwardBatch(blocks);  // one head forward for every drafting sequence
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (depths[i] <= 0) continue;
    static_cast<DflashDrafter*>(jobs[i].drafter)
        ->BuildDraft(jobs[i].step, depths[i], *jobs[i].tree);
  }
}

void DflashDrafter::BuildDraft(const DraftStep& step, int64_t depth, DraftTree& tree) {
  if (options_.kind == DflashTreeKind::kChain) {  // DFlash: a chain of the per-row choices
    DraftChain(depth, tree);
    return;
  }
  // Trees: per-depth top-K log-probs (no temperature), then DDTree's best-first tree or
  // JetSpec's group expansion.
  const int64_t k = options_.top_k;
  TopKPerDepth(depth, k);
  const int64_t budget = std::min(options_.budget, step.budget.nodes);
  if (options_.kind == DflashTreeKind::kBestFirst) {
    best_first_.Build(logp_.data(), tokens_.data(), depth, k, budget, tree);
  } else {
    group_expand_.Build(logp_.data(), tokens_.data(), depth, k, budget, tree);
  }
}

void DflashDrafter::DraftChain(int64_t depth, DraftTree& tree) {
  const bool greedy = sampler_->params().greedy() || options_.argmax_drafts;
  const at::Tensor rows = out_.logits.narrow(0, 1, depth);
  if (greedy && !rows.is_cpu()) {  // one download of the depth argmax ids
    const TransferScope transfer(Transfer::kDeviceToHost);
    const at::Tensor ids = rows.argmax(-1).to(at::kInt).cpu();
    for (int64_t d = 1; d <= depth; ++d) {
      tree.AddNode(ids.data_ptr<int32_t>()[d - 1], static_cast<int32_t>(d) - 2);
    }
    return;
  }
  if (!greedy && head_->placement().aten) {
    SampleChainOnDevice(rows, depth, tree);
    return;
  }
  // The host pass (the row loops; greedy on the CPU ATen path reads the rows in place).
  const TransferScope transfer(Transfer::kDeviceToHost);  // counted on the CPU too
  const at::Tensor host = rows.is_cpu() ? rows.contiguous() : rows.cpu();
  if (!greedy) {
    tree.vocab = vocab_;
    tree.draft_probs.assign(static_cast<size_t>((depth + 1) * vocab_), 0.f);
  }
  for (int64_t d = 1; d <= depth; ++d) {
    const float* logits = host.data_ptr<float>() + (d - 1) * vocab_;
    const int32_t token = greedy ? Argmax(logits, vocab_)
                                 : sampler_->DraftToken(logits, vocab_, tree.DraftProbsRow(d - 1));
    tree.AddNode(token, static_cast<int32_t>(d) - 2);
  }
}

void DflashDrafter::SampleChainOnDevice(const at::Tensor& rows, int64_t depth, DraftTree& tree) {
  draws_.Begin(depth, vocab_, rows.device(), sampler_->rng());
  draws_.Sample(rows, sampler_->params(), 0);  // one draw per row, the rows kept on the device
  const at::Tensor ids = draws_.TokensToHost();
  for (int64_t d = 1; d <= depth; ++d) {
    tree.AddNode(ids.data_ptr<int32_t>()[d - 1], static_cast<int32_t>(d) - 2);
  }
  tree.vocab = vocab_;
  tree.draft_probs_device = &draws_.probs();
}

void DflashDrafter::TopKPerDepth(int64_t depth, int64_t k) {
  logp_.resize(static_cast<size_t>(depth * k));
  tokens_.resize(static_cast<size_t>(depth * k));
  const at::Tensor rows = out_.logits.narrow(0, 1, depth);
  const TransferScope transfer(Transfer::kDeviceToHost);  // counted on the CPU too
  if (!rows.is_cpu()) {  // one download of [depth, k] ids and log-probs
    DownloadTopKLogProbs(rows, k, at::Tensor(), tokens_.data(), logp_.data());
    return;
  }
  order_.resize(static_cast<size_t>(vocab_));
  const at::Tensor host = rows.contiguous();
  for (int64_t d = 1; d <= depth; ++d) {
    const float* row = host.data_ptr<float>() + (d - 1) * vocab_;
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
}

}  // namespace specbed
