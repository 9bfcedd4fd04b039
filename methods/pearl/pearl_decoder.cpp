// PEARL's parallel draft/verify loop (see pearl_decoder.h).
#include "methods/pearl/pearl_decoder.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "harness/base/error.h"
#include "harness/base/timer.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/engine/stop_rules.h"
#include "harness/engine/verifier.h"
#include "methods/common/draft_ledger.h"

namespace specbed {

PearlDecoder::PearlDecoder(LlamaModel& target, const Tokenizer* tokenizer,
                           std::shared_ptr<LlamaModel> draft, PearlOptions options)
    : target_(target), tokenizer_(tokenizer), draft_(std::move(draft)), options_(options) {
  SPECBED_CHECK(options_.gamma >= 1, "pearl: gamma must be >= 1, got ", options_.gamma);
  SPECBED_CHECK(options_.draft_threads >= 1, "pearl: draft_threads must be >= 1");
  SPECBED_CHECK(draft_.model().config().vocab_size == target_.config().vocab_size,
                "pearl: the draft model's vocabulary (", draft_.model().config().vocab_size,
                ") differs from the target's (", target_.config().vocab_size, ")");
  ids_ = at::empty({1, options_.gamma + 8}, at::kLong);
}

void PearlDecoder::Generate(const std::vector<int32_t>& prompt, const GenerationConfig& config,
                            KvCache& cache, DecodeResult& result) {
  SPECBED_CHECK(!prompt.empty(), "generation needs a non-empty prompt (add BOS)");
  SPECBED_CHECK(cache.batch() == 1, "pearl uses a batch-1 cache");
  SPECBED_CHECK(static_cast<int64_t>(prompt.size()) < cache.max_len(), "prompt of ", prompt.size(),
                " tokens does not fit the context (", cache.max_len(), " positions)");
  const int64_t vocab = target_.config().vocab_size;
  const int64_t gamma = options_.gamma;
  if (!side_ || side_->threads() != options_.draft_threads || side_->device() != target_.device()) {
    side_ = std::make_unique<SideThread>(options_.draft_threads, target_.device());
  }
  const int target_threads = options_.target_threads > 0
                                 ? options_.target_threads
                                 : std::max(1, at::get_num_threads() - options_.draft_threads);
  ThreadBudget budget(target_threads);
  GenerationResult& gen = result.generation;
  gen = GenerationResult();
  result.steps.clear();
  if (trace_) trace_->steps.clear();
  Sampler sampler(config.sampling, config.seed);
  StopChecker stop(config.stop, tokenizer_, prompt.back());
  cache.Truncate(0);

  // Prefill (identical to AR).
  const int64_t t_start = NowNanos();
  at::Tensor prompt_ids = at::empty({1, static_cast<int64_t>(prompt.size())}, at::kLong);
  for (size_t i = 0; i < prompt.size(); ++i) prompt_ids.data_ptr<int64_t>()[i] = prompt[i];
  ForwardOutput out = target_.Forward(prompt_ids, cache);
  const int32_t first = sampler.Sample(CopyToHost(out.logits).data_ptr<float>(), vocab);
  const int64_t t_prefill_end = NowNanos();
  stop.Push(first);

  std::vector<int32_t> committed(prompt.begin(), prompt.end());
  committed.push_back(first);
  int64_t begin_ns = 0;
  if (!stop.stopped()) {
    begin_ns = side_->RunTimed([&] {
      draft_.Begin(prompt, config.sampling, DrafterSeed(config.seed), cache.max_len() + gamma + 1);
    });
  }
  DraftLedger& ledger = ledger_;  // every drafted position once: the rollback counts
  ledger.Reset();

  std::vector<int32_t> r;  // draft tokens after pend awaiting verification
  std::vector<float> r_q;  // their draft distributions (T > 0)
  std::vector<int32_t> draft_context;
  DraftChunk next;
  const bool greedy = config.sampling.greedy();
  int64_t t_prev_end = t_prefill_end;
  int64_t step_index = 0;
  while (!stop.stopped()) {
    const int64_t free = cache.max_len() - cache.length() - 1;  // slots after pend
    if (free < 0) {
      stop.StopForContext();
      break;
    }
    StepStats stats;
    if (static_cast<int64_t>(r.size()) > free) {  // only at the context limit
      ledger.Trimmed(static_cast<int64_t>(r.size()) - free);
      r.resize(static_cast<size_t>(free));
      if (!greedy) r_q.resize(static_cast<size_t>(free * vocab));
    }
    const int64_t n_r = static_cast<int64_t>(r.size());
    // Tokens still allowed after this step's R and its correction/next token: drafting more
    // could never be emitted.
    const int64_t left = config.stop.max_new_tokens - static_cast<int64_t>(stop.tokens().size());
    const int64_t n_next = std::clamp<int64_t>(left - n_r - 1, 0, gamma);
    draft_context.assign(committed.begin(), committed.end());
    draft_context.insert(draft_context.end(), r.begin(), r.end());

    int64_t d0 = 0, d1 = 0;
    auto draft_job = [&] {
      d0 = NowNanos();
      draft_.Draft(draft_context, n_next, false, next);
      d1 = NowNanos();
    };
    if (n_next > 0) {
      side_->Start(draft_job);
      if (!options_.parallel) side_->Wait();
    } else {
      next.Clear();
    }
    const int64_t v0 = NowNanos();
    // Target side: forward [pend] + R, then the chain acceptance of R.
    int64_t* ids = ids_.data_ptr<int64_t>();
    ids[0] = committed.back();
    for (int64_t i = 0; i < n_r; ++i) ids[i + 1] = r[i];
    ForwardOptions fwd;
    fwd.logits = LogitsMode::kAll;
    const int64_t base = cache.length();
    ForwardOutput vo = target_.Forward(ids_.narrow(1, 0, n_r + 1), cache, fwd);
    const at::Tensor host_logits = CopyToHost(vo.logits);  // the verify rows (device: one copy)
    const float* logits = host_logits.data_ptr<float>();
    int64_t n_acc = 0;
    int32_t correction = -1;
    for (; n_acc < n_r; ++n_acc) {
      const int accepted = AcceptAtSlot(logits + n_acc * vocab, vocab, &r[n_acc], 1,
                                        greedy ? nullptr : r_q.data() + n_acc * vocab, sampler,
                                        scratch_, &correction);
      if (accepted < 0) break;
    }
    const int64_t v1 = NowNanos();
    if (n_next > 0 && options_.parallel) side_->Wait();
    const int64_t t1 = NowNanos();

    std::vector<int32_t> tokens(r.begin(), r.begin() + n_acc);
    std::vector<int32_t> new_r;
    std::vector<float> new_r_q;
    const int64_t n_drafted_next = static_cast<int64_t>(next.tokens.size());
    ledger.Drafted(n_drafted_next);
    ledger.Accepted(n_acc);
    bool rollback = false;
    if (n_acc < n_r) {  // R[n_acc] rejected: R[n_acc:] and the concurrent chunk are discarded
      tokens.push_back(correction);
      cache.Truncate(base + 1 + n_acc);
      ledger.RolledBack((n_r - n_acc) + n_drafted_next);
      rollback = true;
    } else if (n_drafted_next > 0) {  // all of R accepted: test the next chunk's first token
      const int accepted = AcceptAtSlot(logits + n_r * vocab, vocab, next.tokens.data(), 1,
                                        greedy ? nullptr : next.q.data(), sampler, scratch_,
                                        &correction, options_.test_accept_next_unverified);
      if (accepted == 0) {
        ledger.Accepted(1);
        tokens.push_back(next.tokens[0]);
        new_r.assign(next.tokens.begin() + 1, next.tokens.end());
        if (!greedy) new_r_q.assign(next.q.begin() + vocab, next.q.end());
      } else {
        tokens.push_back(correction);
        ledger.RolledBack(n_drafted_next);
        rollback = true;
      }
    } else {  // nothing drafted (end of the answer): an ordinary bonus token
      tokens.push_back(sampler.Sample(logits + n_r * vocab, vocab));
    }
    const size_t before = stop.tokens().size();
    for (int32_t token : tokens) {
      committed.push_back(token);
      if (stop.Push(token) != StopReason::kNone) break;
    }
    if (trace_) {
      trace_->steps.push_back(
          {r, next.tokens, tokens, n_acc, rollback, ledger.step_rolled_back(), new_r});
    }
    r = std::move(new_r);
    r_q = std::move(new_r_q);
    const int64_t t2 = NowNanos();

    // Offered to the verifier this step: R, plus N[0] when it was tested at the end of R.
    const bool tested_next = n_acc == n_r && n_drafted_next > 0;
    stats.n_drafted = n_r + (tested_next ? 1 : 0);
    // Accepted draft tokens committed this step (R's accepted prefix, plus N[0] when accepted).
    stats.n_accepted = static_cast<int64_t>(tokens.size()) - 1;
    ledger.EndStep(stats);
    stats.n_emitted = static_cast<int64_t>(stop.tokens().size() - before);
    stats.draft_depth = stats.n_drafted;
    stats.n_rollback_events = rollback ? 1 : 0;
    stats.n_target_forwards = 1;
    const double draft_busy_ns = static_cast<double>(d1 - d0);
    stats.t_draft_busy_us = (draft_busy_ns + (step_index == 0 ? begin_ns : 0)) * 1e-3;
    stats.t_verify_busy_us = (v1 - v0) * 1e-3;
    // Wall tiling: target side, then draft time still running after it (not hidden).
    stats.t_verify_us = (v1 - v0) * 1e-3;
    const double exposed_ns =
        options_.parallel ? std::max<double>(0, std::min<double>(d1, t1) - std::max<double>(d0, v1))
                          : draft_busy_ns;
    stats.t_draft_us = (exposed_ns + (step_index == 0 ? begin_ns : 0)) * 1e-3;
    stats.t_draft_prefill_us = step_index == 0 ? begin_ns * 1e-3 : 0.0;
    const double step_ns = static_cast<double>(t2 - t_prev_end);
    stats.t_other_us = (step_ns - (v1 - v0) - exposed_ns - (step_index == 0 ? begin_ns : 0)) * 1e-3;
    t_prev_end = t2;
    result.steps.push_back(stats);
    ++step_index;
    ++gen.n_steps;
  }
  const int64_t t_end = NowNanos();
  gen.tokens = stop.tokens();
  gen.text = stop.text();
  gen.stop_reason = stop.reason();
  gen.prefill_ms = (t_prefill_end - t_start) * 1e-6;
  gen.decode_ms = (t_end - t_prefill_end) * 1e-6;
}

}  // namespace specbed
