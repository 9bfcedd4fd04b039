// PEARL's parallel draft/verify loop (see pearl_decoder.h).
#include "methods/pearl/pearl_decoder.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "base/error.h"
#include "models/device.h"

namespace specbed {

PearlDecoder::PearlDecoder(LlamaModel& target, const Tokenizer* tokenizer,
                           std::shared_ptr<LlamaModel> draft, PearlOptions options)
    : ParallelDecoder(target, tokenizer, std::move(draft), options.gamma, "pearl"),
      options_(options) {
  SPECBED_CHECK(options_.gamma >= 1, "pearl: gamma must be >= 1, got ", options_.gamma);
  SPECBED_CHECK(options_.draft_threads >= 1, "pearl: draft_threads must be >= 1");
}

void PearlDecoder::Generate(const std::vector<int32_t>& prompt, const GenerationConfig& config,
                            KvCache& cache, DecodeResult& result) {
  BeginAnswer(prompt, cache, options_.draft_threads, result);
  ThreadBudget budget(TargetThreads(options_.target_threads, options_.draft_threads));
  if (trace_) trace_->steps.clear();
  ParallelAnswer answer(prompt, config, tokenizer_);
  Prefill(prompt, cache, /*hidden_layers=*/{}, options_.gamma + 1, answer);
  r_.clear();
  r_q_.clear();
  RunSteps(answer, cache, result);
}

void PearlDecoder::Step(ParallelAnswer& answer, KvCache& cache, int64_t free,
                        DecodeResult& result) {
  FitToContext(free, answer.greedy, r_, r_q_);
  const int64_t n_r = static_cast<int64_t>(r_.size());
  // Tokens still allowed after this step's R and its correction/next token: drafting more could
  // never be emitted.
  const int64_t n_next = std::clamp<int64_t>(answer.left() - n_r - 1, 0, options_.gamma);
  DraftClock clock;
  StartNextChunk(answer, n_next, clock);
  ChainVerdict verdict;
  VerifyChain(answer, r_, r_q_, /*hidden_layers=*/{}, cache, verdict);
  if (clock.ran && options_.parallel) side_->Wait();
  if (AcceptsOnDevice(answer.greedy)) {  // R, then the next chunk's first token, in one walk
    const int64_t k = next_.tokens.empty() ? 0 : 1;
    SettleOnDevice(answer, r_, r_q_, next_.tokens.data(), k, next_.q.data(),
                   options_.test_accept_next_unverified, verdict);
  }
  std::vector<int32_t> verified;
  if (trace_) verified = r_;
  const StepOutcome outcome = Join(answer, verdict, cache);
  const int64_t emitted = Commit(answer, outcome.tokens);
  if (trace_) {
    trace_->steps.push_back({verified, next_.tokens, outcome.tokens, verdict.n_accepted,
                             outcome.rollback, ledger_.step_rolled_back(), r_});
  }
  EndStep(outcome, emitted, verdict, clock, options_.parallel, answer, result);
}

void PearlDecoder::StartNextChunk(const ParallelAnswer& answer, int64_t n_next, DraftClock& clock) {
  if (n_next == 0) {
    next_.Clear();
    return;
  }
  draft_context_.assign(answer.committed.begin(), answer.committed.end());
  draft_context_.insert(draft_context_.end(), r_.begin(), r_.end());
  const at::Device device = target_.device();
  clock.ran = true;
  side_->Start([this, n_next, device, &clock] {
    clock.d0 = DeviceNowNanos(device);
    draft_.Draft(draft_context_, n_next, false, next_);
    clock.d1 = DeviceNowNanos(device);
  });
  if (!options_.parallel) side_->Wait();
}

StepOutcome PearlDecoder::Join(ParallelAnswer& answer, const ChainVerdict& verdict,
                               KvCache& cache) {
  const int64_t vocab = target_.config().vocab_size;
  const int64_t n_r = static_cast<int64_t>(r_.size());
  const int64_t n_acc = verdict.n_accepted;
  const int64_t n_next = static_cast<int64_t>(next_.tokens.size());
  StepOutcome outcome;
  outcome.tokens.assign(r_.begin(), r_.begin() + n_acc);
  outcome.n_offered = n_r;
  ledger_.Drafted(n_next);
  ledger_.Accepted(n_acc);
  std::vector<int32_t> new_r;
  std::vector<float> new_r_q;
  if (n_acc < n_r) {  // R[n_acc] rejected: R[n_acc:] and the concurrent chunk are discarded
    outcome.tokens.push_back(verdict.correction);
    cache.Truncate(verdict.base + 1 + n_acc);
    ledger_.RolledBack((n_r - n_acc) + n_next);
    outcome.rollback = true;
  } else if (n_next > 0) {  // all of R accepted: test the next chunk's first token
    outcome.n_offered = n_r + 1;
    int32_t correction = -1;
    const int accepted =
        AcceptAt(n_r, next_.tokens.data(), 1, answer.greedy ? nullptr : next_.q.data(),
                 answer.sampler, &correction, options_.test_accept_next_unverified);
    if (accepted == 0) {
      ledger_.Accepted(1);
      outcome.tokens.push_back(next_.tokens[0]);
      new_r.assign(next_.tokens.begin() + 1, next_.tokens.end());
      if (!answer.greedy) new_r_q.assign(next_.q.begin() + vocab, next_.q.end());
    } else {
      outcome.tokens.push_back(correction);
      ledger_.RolledBack(n_next);
      outcome.rollback = true;
    }
  } else {  // nothing drafted (end of the answer): an ordinary bonus token
    outcome.tokens.push_back(SampleAt(n_r, answer.sampler));
  }
  r_ = std::move(new_r);
  r_q_ = std::move(new_r_q);
  return outcome;
}

}  // namespace specbed
