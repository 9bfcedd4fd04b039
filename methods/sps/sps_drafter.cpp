// SpS drafter (see sps_drafter.h).
#include "methods/sps/sps_drafter.h"

#include <ATen/ATen.h>

#include "base/error.h"
#include "harness/engine/verifier.h"
#include "methods/common/draft_chain.h"

namespace specbed {

SpsDrafter::SpsDrafter(std::shared_ptr<LlamaModel> draft) : draft_(std::move(draft)) {
  SPECBED_CHECK(draft_ != nullptr, "SpS needs a draft model");
  ids_ = at::empty({1, 8}, at::kLong);
}

void SpsDrafter::ReplaceModel(std::shared_ptr<LlamaModel> draft) {
  SPECBED_CHECK(draft != nullptr && draft->config().ToHfJson() == draft_->config().ToHfJson(),
                "SpS drafter: a replacement draft model must have the same config");
  draft_ = std::move(draft);
}

void SpsDrafter::Begin(const DraftBegin& begin) {
  const auto& prompt = *begin.prompt;
  SPECBED_CHECK(!prompt.empty(), "SpS drafter: empty prompt");
  if (!cache_.defined() || cache_.max_len() < begin.max_len) {
    cache_ = draft_->NewCache(1, begin.max_len);
  }
  cache_.Truncate(0);
  sampler_ = std::make_unique<Sampler>(begin.sampling, begin.seed);
  prompt_ = at::empty({1, static_cast<int64_t>(prompt.size())}, at::kLong);  // for Prefill
  std::copy(prompt.begin(), prompt.end(), prompt_.data_ptr<int64_t>());
  pending_.assign(1, begin.root);
  fed_ = 0;
}

void SpsDrafter::Prefill() {
  if (!prompt_.defined()) return;
  ForwardOptions options;
  options.logits = LogitsMode::kNone;
  draft_->Forward(prompt_, cache_, options);
  prompt_ = at::Tensor();
}

void SpsDrafter::Draft(const DraftStep& step, DraftTree& tree) {
  Prefill();  // the prompt, unless the decoder ran it already
  const int64_t gamma = std::min(step.budget.nodes, step.budget.depth);
  fed_ = 0;
  base_len_ = cache_.length();
  if (gamma <= 0) return;
  const int64_t vocab = draft_->config().vocab_size;
  const int64_t n_pending = static_cast<int64_t>(pending_.size());
  SPECBED_CHECK(base_len_ + n_pending + gamma - 1 <= cache_.max_len(),
                "SpS drafter: context full (", cache_.max_len(), " positions)");
  const bool greedy = sampler_->params().greedy();
  if (ids_.size(1) < n_pending) ids_ = at::empty({1, n_pending + 8}, at::kLong);
  int64_t* ids = ids_.data_ptr<int64_t>();
  for (int64_t i = 0; i < n_pending; ++i) ids[i] = pending_[i];
  ForwardOptions options;  // logits of the last position
  ForwardOutput out = draft_->Forward(ids_.narrow(1, 0, n_pending), cache_, options);
  fed_ = n_pending;
  if (draft_->forward_path() == ForwardPath::kAten) {
    if (greedy) {
      DraftGreedyOnDevice(out, gamma, tree);
    } else {
      DraftSampledOnDevice(out, gamma, tree);
    }
    return;
  }
  if (!greedy) {
    tree.vocab = vocab;
    tree.draft_probs.assign(static_cast<size_t>((gamma + 1) * vocab), 0.f);
  }
  for (int64_t i = 0; i < gamma; ++i) {  // the row path: the CPU logits, read in place
    const int32_t token = sampler_->DraftToken(out.logits.data_ptr<float>(), vocab,
                                               greedy ? nullptr : tree.DraftProbsRow(i));
    tree.AddNode(token, static_cast<int32_t>(i) - 1);
    if (i + 1 < gamma) {
      ids[0] = token;
      out = draft_->Forward(ids_.narrow(1, 0, 1), cache_, options);
    }
  }
}

void SpsDrafter::DraftGreedyOnDevice(ForwardOutput out, int64_t gamma, DraftTree& tree) {
  const at::Tensor ids = GreedyChainOnDevice(*draft_, cache_, std::move(out), gamma, device_ids_);
  const int64_t* t = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < gamma; ++i)
    tree.AddNode(static_cast<int32_t>(t[i]), static_cast<int32_t>(i) - 1);
}

void SpsDrafter::DraftSampledOnDevice(ForwardOutput out, int64_t gamma, DraftTree& tree) {
  const at::Tensor ids =
      SampledChainOnDevice(*draft_, cache_, std::move(out), gamma, *sampler_, draws_, device_ids_);
  const int32_t* t = ids.data_ptr<int32_t>();
  for (int64_t i = 0; i < gamma; ++i) tree.AddNode(t[i], static_cast<int32_t>(i) - 1);
  tree.vocab = draft_->config().vocab_size;
  tree.draft_probs_device = &draws_.probs();
}

void SpsDrafter::Accept(const DraftTree& tree, const Verdict& verdict) {
  const int64_t gamma = tree.size();
  const int64_t k = verdict.n_accepted();
  if (fed_ == 0) {  // nothing drafted: the pending tokens are still pending
    pending_.push_back(verdict.bonus);
    return;
  }
  if (k < gamma) {
    cache_.Truncate(base_len_ + fed_ + k);
    pending_.assign(1, verdict.bonus);
  } else {  // the last draft token was never fed to the draft model
    pending_.assign({tree.token[gamma - 1], verdict.bonus});
  }
  fed_ = 0;  // an Accept without a Draft before it (a K = 0 step) drafted nothing
}

}  // namespace specbed
