// DraftLm and AcceptAtSlot (see draft_lm.h).
#include "methods/pearl/draft_lm.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "harness/engine/verifier.h"
#include "kernels/cpu/references.h"
#include "methods/common/draft_chain.h"

namespace specbed {

DraftLm::DraftLm(std::shared_ptr<LlamaModel> model) : model_(std::move(model)) {
  SPECBED_CHECK(model_ != nullptr, "draft LM: no model");
  ids_ = at::empty({1, 64}, at::kLong);
}

void DraftLm::Begin(const std::vector<int32_t>& prompt, const SamplingParams& sampling,
                    uint64_t seed, int64_t max_len) {
  SPECBED_CHECK(!prompt.empty(), "draft LM: empty prompt");
  max_len = std::min<int64_t>(max_len, model_->config().max_seq_len);
  if (!cache_.defined() || cache_.max_len() < max_len) cache_ = model_->NewCache(1, max_len);
  cache_.Truncate(0);
  sampler_ = std::make_unique<Sampler>(sampling, seed);
  cached_.clear();
  forwards_ = 0;
  host_copies_ = 0;
  // The prompt without its last token: Draft feeds at least one token to get logits.
  if (prompt.size() > 1) {
    const int64_t n = static_cast<int64_t>(prompt.size()) - 1;
    at::Tensor ids = at::empty({1, n}, at::kLong);
    for (int64_t i = 0; i < n; ++i) ids.data_ptr<int64_t>()[i] = prompt[i];
    ForwardOptions options;
    options.logits = LogitsMode::kNone;
    model_->Forward(ids, cache_, options);
    ++forwards_;
    cached_.assign(prompt.begin(), prompt.end() - 1);
  }
}

void DraftLm::Draft(const std::vector<int32_t>& context, int64_t n, bool confidence,
                    DraftChunk& out, bool keep_logits, bool next, float stop_below) {
  out.Clear();
  if (n <= 0 && !next) return;
  SPECBED_CHECK(!context.empty(), "draft LM: empty context");
  const int64_t vocab = model_->config().vocab_size;
  // Keep the longest shared prefix (at most context - 1 tokens: one is fed for logits).
  size_t keep = 0;
  const size_t limit = std::min(cached_.size(), context.size() - 1);
  while (keep < limit && cached_[keep] == context[keep]) ++keep;
  cache_.Truncate(static_cast<int64_t>(keep));
  cached_.resize(keep);
  const int64_t feed = static_cast<int64_t>(context.size() - keep);
  SPECBED_CHECK(static_cast<int64_t>(keep) + feed + n - (next ? 0 : 1) <= cache_.max_len(),
                "draft LM: context full (", cache_.max_len(), " positions)");
  if (ids_.size(1) < feed) ids_ = at::empty({1, feed + 64}, at::kLong);
  int64_t* ids = ids_.data_ptr<int64_t>();
  for (int64_t i = 0; i < feed; ++i) ids[i] = context[keep + i];
  ForwardOptions options;  // logits of the last position
  ForwardOutput fwd = model_->Forward(ids_.narrow(1, 0, feed), cache_, options);
  ++forwards_;
  cached_.insert(cached_.end(), context.begin() + keep, context.end());
  const bool greedy = sampler_->params().greedy();
  if (n > 0 && !confidence && !keep_logits && !next &&
      model_->forward_path() == ForwardPath::kAten) {
    DraftChainOnDevice(fwd, n, out);
    return;
  }
  at::Tensor host = ToHost(fwd.logits);  // the CPU: the buffer; a device: one copy per token
  if (!greedy) out.q.resize(static_cast<size_t>(n * vocab));
  for (int64_t i = 0; i < n; ++i) {
    const float* logits = host.data_ptr<float>();
    const int32_t token =
        sampler_->DraftToken(logits, vocab, greedy ? nullptr : out.q.data() + i * vocab);
    out.tokens.push_back(token);
    if (confidence) out.conf.push_back(SoftmaxProb(logits, vocab, token));
    if (keep_logits) out.logits.insert(out.logits.end(), logits, logits + vocab);
    if (confidence && stop_below > 0 && out.conf.back() < stop_below) return;
    if (i + 1 < n || next) {
      ids[0] = token;
      fwd = model_->Forward(ids_.narrow(1, 0, 1), cache_, options);
      host = ToHost(fwd.logits);
      ++forwards_;
      cached_.push_back(token);
    }
  }
  if (next) {
    const float* logits = host.data_ptr<float>();
    out.next_logits.assign(logits, logits + vocab);
  }
}

void DraftLm::DraftChainOnDevice(ForwardOutput fwd, int64_t n, DraftChunk& out) {
  const bool greedy = sampler_->params().greedy();
  if (greedy) {
    const at::Tensor host = GreedyChainOnDevice(*model_, cache_, std::move(fwd), n, drafted_);
    const int64_t* ids = host.data_ptr<int64_t>();
    out.tokens.assign(ids, ids + n);
  } else {
    const at::Tensor host =
        SampledChainOnDevice(*model_, cache_, std::move(fwd), n, *sampler_, draws_, drafted_);
    const int32_t* ids = host.data_ptr<int32_t>();
    out.tokens.assign(ids, ids + n);
    // The chunk's distributions for the host bookkeeping of R (one copy of [n, V]).
    const at::Tensor q = ToHost(draws_.probs().narrow(0, 0, n)).contiguous();
    out.q.assign(q.data_ptr<float>(), q.data_ptr<float>() + q.numel());
  }
  forwards_ += n - 1;
  if (!model_->device().is_cpu()) ++host_copies_;  // the chain's ids
  cached_.insert(cached_.end(), out.tokens.begin(), out.tokens.end() - 1);
}

at::Tensor DraftLm::ToHost(const at::Tensor& t) {
  if (!t.device().is_cpu()) ++host_copies_;
  return CopyToHost(t);
}

float SoftmaxProb(const float* logits, int64_t vocab, int32_t token) {
  float mx = logits[0];
  for (int64_t i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  return static_cast<float>(std::exp(static_cast<double>(logits[token] - mx)) / sum);
}

int AcceptAtSlot(const float* logits, int64_t vocab, const int32_t* candidates, int64_t k,
                 const float* q, Sampler& sampler, std::vector<float>& scratch, int32_t* correction,
                 bool accept_first) {
  if (accept_first && k > 0) return 0;
  if (sampler.params().greedy()) {
    const int32_t best = Argmax(logits, vocab);
    for (int64_t i = 0; i < k; ++i) {
      if (candidates[i] == best) return static_cast<int>(i);
    }
    *correction = best;
    return -1;
  }
  SPECBED_CHECK(k == 0 || q != nullptr, "rejection sampling needs the draft distributions");
  sampler.Distribution(logits, vocab, scratch);
  for (int64_t i = 0; i < k; ++i) {
    const float u = static_cast<float>(Uniform01(sampler.rng()));
    uint8_t accepted = 0;
    const int status = cpu::TreeRejectionStep(scratch.data(), q + i * vocab, candidates + i, &u, 1,
                                              vocab, &accepted);
    SPECBED_CHECK(status == kKernelOk, "rejection step: token out of range");
    if (accepted) return static_cast<int>(i);
  }
  *correction = SampleFromProbs(scratch.data(), vocab, sampler.rng());
  return -1;
}

}  // namespace specbed
