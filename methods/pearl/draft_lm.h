// Pieces shared by the parallel draft/verify decoders (PEARL, SpecBranch): a draft LM that keeps
// its own KV cache in step with whatever context it is asked to continue, and the acceptance rule
// for one slot with one or several candidates.
// Checked by: tests/methods/pearl_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "harness/engine/device_sampling.h"
#include "harness/engine/sampler.h"
#include "models/llama_model.h"

namespace specbed {

// A chunk drafted by DraftLm::Draft.
struct DraftChunk {
  std::vector<int32_t> tokens;
  // Sampling-temperature draft distribution each token was drawn from, [n, vocab] row-major
  // (empty at T = 0, where tokens are argmaxes).
  std::vector<float> q;
  // Temperature-1 probability of each drafted token (its "confidence"), when asked for.
  std::vector<float> conf;
  // Raw draft logits each token was drawn from, [n, vocab] (when asked for), and the logits after
  // the last token ([vocab], when asked for: one more draft forward).
  std::vector<float> logits;
  std::vector<float> next_logits;
  void Clear() {
    tokens.clear();
    q.clear();
    conf.clear();
    logits.clear();
    next_logits.clear();
  }
};

// A draft LM with its own cache. Draft(context, n) continues any context (prompt + committed +
// speculative tokens): the cache keeps the longest prefix it shares with `context` and is fed the
// rest, so a rollback needs no explicit bookkeeping (the next context simply diverges).
class DraftLm {
 public:
  explicit DraftLm(std::shared_ptr<LlamaModel> model);
  // Starts a sequence: prefills `prompt`; the cache holds max_len positions.
  void Begin(const std::vector<int32_t>& prompt, const SamplingParams& sampling, uint64_t seed,
             int64_t max_len);
  // Drafts n tokens after `context` (non-empty; sampling with the case settings, argmax at
  // T = 0). With `confidence`, out.conf gets each token's temperature-1 probability.
  // With `keep_logits`, out.logits gets the raw logits rows; with `next`, out.next_logits gets
  // the logits after the last drafted token (n = 0 with `next`: the logits after `context`).
  // With `stop_below` > 0 (needs `confidence`), drafting stops right after the first token whose
  // confidence is below it (that token is kept in `out`, not fed; no next_logits then).
  // With only the tokens asked for, on the ATen path, each token (the argmax at T = 0, a draw at
  // T > 0) feeds the next forward on the model's device and the n ids come to the host in one
  // copy, at T > 0 with the chunk's [n, V] distributions in a second (no [V] row per token).
  void Draft(const std::vector<int32_t>& context, int64_t n, bool confidence, DraftChunk& out,
             bool keep_logits = false, bool next = false, float stop_below = -1.f);
  // Tokens whose KV the cache holds (a prefix of the last drafted context + its draft).
  const std::vector<int32_t>& cached() const { return cached_; }
  int64_t forwards() const { return forwards_; }
  // Device-to-host copies this draft LM made in the sequence (0 on the CPU): its share of
  // DeviceToHostCopies(), which PEARL's two threads both add to.
  int64_t host_copies() const { return host_copies_; }
  const LlamaModel& model() const { return *model_; }
  LlamaModel& mutable_model() { return *model_; }
  KvCache& cache() { return cache_; }
  Sampler& sampler() { return *sampler_; }

 private:
  std::shared_ptr<LlamaModel> model_;
  KvCache cache_;
  std::unique_ptr<Sampler> sampler_;
  std::vector<int32_t> cached_;
  // Tokens only, ATen path: the chunk drafted on the model's device (draft_chain.h).
  void DraftChainOnDevice(ForwardOutput fwd, int64_t n, DraftChunk& out);
  // CopyToHost, counted in host_copies_.
  at::Tensor ToHost(const at::Tensor& t);

  at::Tensor ids_, drafted_;
  DeviceDraftSampler draws_;  // T > 0 on the ATen path
  int64_t forwards_ = 0;
  int64_t host_copies_ = 0;
};

// Temperature-1 probability of `token` under `logits` (a softmax entry).
float SoftmaxProb(const float* logits, int64_t vocab, int32_t token);

// The acceptance rule at one slot with target logits `logits` and candidates c_1..c_k, candidate
// i drafted from q_i = q + i * vocab (q may be null at T = 0). T = 0: the first candidate equal to
// the target argmax is accepted; else the correction is the argmax. T > 0 (multi-candidate
// rejection sampling, SpecInfer / SpecBranch §4.2): p' = target distribution; for each candidate
// accept with probability min(1, p'(c_i)/q_i(c_i)), on rejection p' <- norm(max(p' - q_i, 0)); if
// none is accepted the correction is sampled from p'. Lossless when c_i ~ q_i given the previous
// rejections (i.i.d. from q, or without replacement with q_i the renormalised remainder).
// Returns the accepted candidate's index or -1 (then *correction holds the token).
// `accept_first` (negative control for tests only, NOT lossless): always accepts candidate 0.
int AcceptAtSlot(const float* logits, int64_t vocab, const int32_t* candidates, int64_t k,
                 const float* q, Sampler& sampler, std::vector<float>& scratch, int32_t* correction,
                 bool accept_first = false);

}  // namespace specbed
