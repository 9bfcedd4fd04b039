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

int64_t SpsDrafter::BeginChain(const DraftStep& step) {
  Prefill();  // the prompt, unless the decoder ran it already
  const int64_t gamma = std::min(step.budget.nodes, step.budget.depth);
  fed_ = 0;
  base_len_ = cache_.length();
  if (gamma <= 0) return 0;
  const int64_t n_pending = static_cast<int64_t>(pending_.size());
  SPECBED_CHECK(base_len_ + n_pending + gamma - 1 <= cache_.max_len(),
                "SpS drafter: context full (", cache_.max_len(), " positions)");
  if (ids_.size(1) < n_pending) ids_ = at::empty({1, n_pending + 8}, at::kLong);
  int64_t* ids = ids_.data_ptr<int64_t>();
  for (int64_t i = 0; i < n_pending; ++i) ids[i] = pending_[i];
  fed_ = n_pending;
  return gamma;
}

void SpsDrafter::StartHostChain(int64_t gamma, DraftTree& tree) const {
  if (sampler_->params().greedy()) return;
  const int64_t vocab = draft_->config().vocab_size;
  tree.vocab = vocab;
  tree.draft_probs.assign(static_cast<size_t>((gamma + 1) * vocab), 0.f);
}

int32_t SpsDrafter::ChainToken(const at::Tensor& logits, int64_t i, DraftTree& tree) {
  const bool greedy = sampler_->params().greedy();
  const int32_t token = sampler_->DraftToken(logits.data_ptr<float>(), draft_->config().vocab_size,
                                             greedy ? nullptr : tree.DraftProbsRow(i));
  tree.AddNode(token, static_cast<int32_t>(i) - 1);
  ids_.data_ptr<int64_t>()[0] = token;  // the next forward's input
  return token;
}

void SpsDrafter::Draft(const DraftStep& step, DraftTree& tree) {
  const int64_t gamma = BeginChain(step);
  if (gamma == 0) return;
  ForwardOptions options;  // logits of the last position
  ForwardOutput out = draft_->Forward(ids_.narrow(1, 0, fed_), cache_, options);
  if (draft_->forward_path() == ForwardPath::kAten) {
    if (sampler_->params().greedy()) {
      DraftGreedyOnDevice(out, gamma, tree);
    } else {
      DraftSampledOnDevice(out, gamma, tree);
    }
    return;
  }
  StartHostChain(gamma, tree);
  for (int64_t i = 0; i < gamma; ++i) {  // the row path: the CPU logits, read in place
    ChainToken(out.logits, i, tree);
    if (i + 1 < gamma) out = draft_->Forward(ids_.narrow(1, 0, 1), cache_, options);
  }
}

const void* SpsDrafter::DraftBatchKey() const {
  return draft_->forward_path() == ForwardPath::kRowKernels ? draft_.get() : nullptr;
}

void SpsDrafter::DraftBatch(const std::vector<DraftJob>& jobs) {
  struct Chain {
    SpsDrafter* drafter;
    DraftTree* tree;
    int64_t gamma;
  };
  std::vector<Chain> chains;
  std::vector<SeqChunk> chunks;  // chains[c]'s input of this position
  for (const DraftJob& job : jobs) {
    auto* drafter = dynamic_cast<SpsDrafter*>(job.drafter);
    SPECBED_CHECK(drafter != nullptr && drafter->DraftBatchKey() == DraftBatchKey(),
                  "SpS drafter: DraftBatch got a job of another drafter");
    const int64_t gamma = drafter->BeginChain(job.step);
    if (gamma == 0) continue;
    drafter->StartHostChain(gamma, *job.tree);
    chains.push_back({drafter, job.tree, gamma});
    chunks.push_back({&drafter->cache_, drafter->ids_.narrow(1, 0, drafter->fed_)});
  }
  RaggedOptions options;  // batch-invariant: each chain's logits are its batch-1 forward's
  options.logits = LogitsMode::kLast;
  for (int64_t i = 0; !chunks.empty(); ++i) {  // one draft forward per position for all chains
    const RaggedOutput out = draft_->ForwardRagged(chunks, options);
    size_t kept = 0;
    for (size_t c = 0; c < chains.size(); ++c) {
      Chain& chain = chains[c];
      chain.drafter->ChainToken(out.logits[c], i, *chain.tree);
      if (i + 1 >= chain.gamma) continue;  // its last token is never fed (Accept)
      chains[kept] = chain;
      chunks[kept++] = {&chain.drafter->cache_, chain.drafter->ids_.narrow(1, 0, 1)};
    }
    chains.resize(kept);
    chunks.resize(kept);
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
