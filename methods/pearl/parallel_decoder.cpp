// The parallel draft/verify scaffolding (see parallel_decoder.h).
#include "methods/pearl/parallel_decoder.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "base/error.h"
#include "harness/engine/device_sampling.h"
#include "harness/engine/speculative_decoder.h"
#include "kernels/kernel_status.h"
#include "models/device.h"

namespace specbed {

ParallelAnswer::ParallelAnswer(const std::vector<int32_t>& prompt, const GenerationConfig& config,
                               const Tokenizer* tokenizer)
    : config(config),
      sampler(config.sampling, config.seed),
      stop(config.stop, tokenizer, prompt.back()),
      committed(prompt.begin(), prompt.end()),
      greedy(config.sampling.greedy()) {}

int64_t ParallelAnswer::left() const {
  return config.stop.max_new_tokens - static_cast<int64_t>(stop.tokens().size());
}

ParallelDecoder::ParallelDecoder(LlamaModel& target, const Tokenizer* tokenizer,
                                 std::shared_ptr<LlamaModel> draft, int64_t max_chunk,
                                 const char* name)
    : target_(target), tokenizer_(tokenizer), draft_(std::move(draft)), name_(name) {
  SPECBED_CHECK(draft_.model().config().vocab_size == target_.config().vocab_size, name_,
                ": the draft model's vocabulary (", draft_.model().config().vocab_size,
                ") differs from the target's (", target_.config().vocab_size, ")");
  ids_ = at::empty({1, max_chunk + 8}, at::kLong);
}

void ParallelDecoder::BeginAnswer(const std::vector<int32_t>& prompt, const KvCache& cache,
                                  int draft_threads, DecodeResult& result) {
  SPECBED_CHECK(!prompt.empty(), "generation needs a non-empty prompt (add BOS)");
  SPECBED_CHECK(cache.batch() == 1, name_, " uses a batch-1 cache");
  SPECBED_CHECK(static_cast<int64_t>(prompt.size()) < cache.max_len(), "prompt of ", prompt.size(),
                " tokens does not fit the context (", cache.max_len(), " positions)");
  if (!side_ || side_->threads() != draft_threads ||
      !SameDevice(side_->device(), target_.device())) {
    side_ = std::make_unique<SideThread>(draft_threads, target_.device());
  }
  result.generation = GenerationResult();
  result.steps.clear();
  ledger_.Reset();
}

int ParallelDecoder::TargetThreads(int option, int draft_threads) {
  return option > 0 ? option : std::max(1, at::get_num_threads() - draft_threads);
}

ForwardOutput ParallelDecoder::Prefill(const std::vector<int32_t>& prompt, KvCache& cache,
                                       const std::vector<int64_t>& hidden_layers,
                                       int64_t draft_margin, ParallelAnswer& answer) {
  cache.Truncate(0);
  answer.t_start = DeviceNowNanos(target_.device());
  at::Tensor prompt_ids = at::empty({1, static_cast<int64_t>(prompt.size())}, at::kLong);
  for (size_t i = 0; i < prompt.size(); ++i) prompt_ids.data_ptr<int64_t>()[i] = prompt[i];
  ForwardOptions options;
  options.hidden_layers = hidden_layers;
  ForwardOutput out = target_.Forward(prompt_ids, cache, options);
  const int64_t vocab = target_.config().vocab_size;
  const int32_t first = answer.sampler.Sample(CopyToHost(out.logits).data_ptr<float>(), vocab);
  answer.t_prefill_end = DeviceNowNanos(target_.device());
  answer.t_prev_end = answer.t_prefill_end;
  answer.stop.Push(first);
  answer.committed.push_back(first);
  if (!answer.stop.stopped()) {
    const GenerationConfig& config = answer.config;
    answer.draft_begin_ns = side_->RunTimed([&] {
      draft_.Begin(prompt, config.sampling, DrafterSeed(config.seed),
                   cache.max_len() + draft_margin);
    });
  }
  return out;
}

void ParallelDecoder::FitToContext(int64_t free, bool greedy, std::vector<int32_t>& r,
                                   std::vector<float>& r_q) {
  if (static_cast<int64_t>(r.size()) <= free) return;
  ledger_.Trimmed(static_cast<int64_t>(r.size()) - free);
  r.resize(static_cast<size_t>(free));
  if (!greedy) r_q.resize(static_cast<size_t>(free * target_.config().vocab_size));
}

void ParallelDecoder::VerifyChain(ParallelAnswer& answer, const std::vector<int32_t>& r,
                                  const std::vector<float>& r_q,
                                  const std::vector<int64_t>& hidden_layers, KvCache& cache,
                                  ChainVerdict& verdict) {
  verdict.v0 = DeviceNowNanos(target_.device());
  const int64_t n_r = static_cast<int64_t>(r.size());
  int64_t* ids = ids_.data_ptr<int64_t>();
  ids[0] = answer.committed.back();
  for (int64_t i = 0; i < n_r; ++i) ids[i + 1] = r[i];
  ForwardOptions options;
  options.logits = LogitsMode::kAll;
  options.hidden_layers = hidden_layers;
  verdict.base = cache.length();
  verdict.out = target_.Forward(ids_.narrow(1, 0, n_r + 1), cache, options);
  verdict.n_accepted = 0;
  verdict.correction = -1;
  verdict.settle_ns = 0;
  on_device_ = AcceptsOnDevice(answer.greedy);
  settled_slot_ = -1;
  if (on_device_) {  // T > 0 on the ATen path: SettleOnDevice accepts after the join
    host_rows_ = at::Tensor();
    argmax_ids_ = at::Tensor();
    verdict.v1 = DeviceNowNanos(target_.device());
    return;
  }
  if (answer.greedy && target_.forward_path() == ForwardPath::kAten) {
    // The rows' argmax where the logits are: n + 1 ids come back, not [n + 1, V] logits.
    argmax_ids_ = CopyToHost(verdict.out.logits[0].argmax(-1));
    host_rows_ = at::Tensor();
  } else {
    host_rows_ = CopyToHost(verdict.out.logits);
    if (target_.forward_path() == ForwardPath::kAten) ++verify_row_copies_;
    argmax_ids_ = at::Tensor();
  }
  const int64_t vocab = target_.config().vocab_size;
  for (; verdict.n_accepted < n_r; ++verdict.n_accepted) {
    const int64_t i = verdict.n_accepted;
    const float* q = answer.greedy ? nullptr : r_q.data() + i * vocab;
    if (AcceptAt(i, &r[i], 1, q, answer.sampler, &verdict.correction) < 0) break;
  }
  verdict.v1 = DeviceNowNanos(target_.device());
}

bool ParallelDecoder::AcceptsOnDevice(bool greedy) const {
  return !greedy && target_.forward_path() == ForwardPath::kAten;
}

void ParallelDecoder::SettleOnDevice(ParallelAnswer& answer, const std::vector<int32_t>& r,
                                     const std::vector<float>& r_q, const int32_t* candidates,
                                     int64_t k, const float* q, bool accept_first,
                                     ChainVerdict& verdict) {
  SPECBED_CHECK(on_device_, name_, ": SettleOnDevice without a deferred verify");
  const int64_t t0 = DeviceNowNanos(target_.device());
  const int64_t vocab = target_.config().vocab_size;
  const int64_t n_r = static_cast<int64_t>(r.size());
  const int64_t siblings = accept_first ? 0 : k;  // the control takes candidate 0 untested
  const int64_t n = n_r + siblings;
  // The tree: R as a chain from the root, the candidates as children of R's last node (the slot
  // after R). draft_probs row s = the distribution the children of slot s were drawn from: R's
  // rows, then q for every sibling (i.i.d. draws); rows after n_r are never read. The walk
  // (tree_rrs): per slot, child c accepted iff u q(c) < r(c), r = p then norm(max(r - q, 0))
  // after each rejection, the correction drawn from r. With one child per slot this is the host
  // rule (AcceptAtSlot, k = 1); with k i.i.d. siblings it is recursive rejection sampling, whose
  // output is p: after a rejection the rest is the standard rule against the residual r with
  // proposals independent of the rejected ones (README "Acceptance on the device").
  tree_.token.assign(r.begin(), r.end());
  tree_.token.insert(tree_.token.end(), candidates, candidates + siblings);
  tree_.parent.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tree_.parent[i] = static_cast<int32_t>(std::min(i, n_r) - 1);
  tree_.vocab = vocab;
  tree_.draft_probs.resize(static_cast<size_t>((n + 1) * vocab));
  std::copy(r_q.begin(), r_q.begin() + n_r * vocab, tree_.draft_probs.begin());
  if (siblings > 0) std::copy(q, q + vocab, tree_.draft_probs.begin() + n_r * vocab);
  // The verify rows [n_r + 1, V]; a sibling's row (read only for a bonus after it, discarded:
  // the branch continues there) repeats the last one.
  at::Tensor rows = verdict.out.logits[0];
  if (siblings > 0) rows = at::cat({rows, rows.narrow(0, n_r, 1).expand({siblings, vocab})});
  device_verifier_.AcceptSampled(tree_, rows, kSampledRejection, answer.sampler, device_verdict_);
  ++device_walks_;
  const std::vector<int32_t>& path = device_verdict_.path;
  verdict.n_accepted = std::min<int64_t>(static_cast<int64_t>(path.size()), n_r);
  verdict.correction = verdict.n_accepted < n_r ? device_verdict_.bonus : -1;
  settled_slot_ = n_r;
  slot_token_ = device_verdict_.bonus;  // the correction, or the target's token (k = 0)
  slot_choice_ = -1;
  if (static_cast<int64_t>(path.size()) > n_r) {
    slot_choice_ = path[n_r] - static_cast<int>(n_r);
  } else if (accept_first && k > 0 && verdict.n_accepted == n_r) {
    slot_choice_ = 0;
  }
  verdict.settle_ns = DeviceNowNanos(target_.device()) - t0;
}

int ParallelDecoder::AcceptAt(int64_t slot, const int32_t* candidates, int64_t k, const float* q,
                              Sampler& sampler, int32_t* correction, bool accept_first) {
  if (on_device_) {  // the outcome SettleOnDevice found at the slot after R
    SPECBED_CHECK(slot == settled_slot_, name_, ": slot ", slot, " was not settled on the device");
    if (slot_choice_ < 0) *correction = slot_token_;
    return slot_choice_;
  }
  if (argmax_ids_.defined()) {  // T = 0 on the ATen path: the rule needs only the argmax
    if (accept_first && k > 0) return 0;
    const int32_t best = static_cast<int32_t>(argmax_ids_.data_ptr<int64_t>()[slot]);
    for (int64_t i = 0; i < k; ++i) {
      if (candidates[i] == best) return static_cast<int>(i);
    }
    *correction = best;
    return -1;
  }
  const int64_t vocab = target_.config().vocab_size;
  return AcceptAtSlot(host_rows_.data_ptr<float>() + slot * vocab, vocab, candidates, k, q, sampler,
                      scratch_, correction, accept_first);
}

int32_t ParallelDecoder::SampleAt(int64_t slot, Sampler& sampler) {
  if (on_device_) {
    SPECBED_CHECK(slot == settled_slot_, name_, ": slot ", slot, " was not settled on the device");
    return slot_token_;
  }
  if (argmax_ids_.defined()) return static_cast<int32_t>(argmax_ids_.data_ptr<int64_t>()[slot]);
  const int64_t vocab = target_.config().vocab_size;
  return sampler.Sample(host_rows_.data_ptr<float>() + slot * vocab, vocab);
}

void ParallelDecoder::RunSteps(ParallelAnswer& answer, KvCache& cache, DecodeResult& result) {
  while (!answer.stop.stopped()) {
    const int64_t free = cache.max_len() - cache.length() - 1;  // slots after pend
    if (free < 0) {
      answer.stop.StopForContext();
      break;
    }
    Step(answer, cache, free, result);
  }
  FinishAnswer(answer, result);
}

int64_t ParallelDecoder::Commit(ParallelAnswer& answer, const std::vector<int32_t>& tokens) {
  const size_t before = answer.stop.tokens().size();
  for (int32_t token : tokens) {
    answer.committed.push_back(token);
    if (answer.stop.Push(token) != StopReason::kNone) break;
  }
  return static_cast<int64_t>(answer.stop.tokens().size() - before);
}

void ParallelDecoder::EndStep(const StepOutcome& outcome, int64_t n_emitted,
                              const ChainVerdict& verdict, const DraftClock& draft, bool parallel,
                              ParallelAnswer& answer, DecodeResult& result) {
  const int64_t t_end = DeviceNowNanos(target_.device());
  StepStats stats;
  stats.n_drafted = outcome.n_offered;
  stats.n_accepted = static_cast<int64_t>(outcome.tokens.size()) - 1;
  stats.n_emitted = n_emitted;
  stats.draft_depth = stats.n_drafted;
  stats.n_rollback_events = outcome.rollback ? 1 : 0;
  stats.n_target_forwards = 1;
  ledger_.EndStep(stats);
  // Wall tiling: serial drafting, the target side, then draft time still running after it.
  const double busy_ns = draft.ran ? static_cast<double>(draft.d1 - draft.d0) : 0.0;
  double exposed_ns = busy_ns;
  if (draft.ran && parallel) {
    exposed_ns = std::max<double>(
        0, static_cast<double>(draft.d1) - static_cast<double>(std::max(draft.d0, verdict.v1)));
  }
  const double first_ns = answer.step_index == 0 ? static_cast<double>(answer.draft_begin_ns) : 0;
  const double serial_ns = static_cast<double>(draft.serial_ns);
  const double verify_ns = static_cast<double>(verdict.v1 - verdict.v0 + verdict.settle_ns);
  stats.t_draft_busy_us = (serial_ns + busy_ns + first_ns) * 1e-3;
  stats.t_verify_busy_us = verify_ns * 1e-3;
  stats.t_verify_us = verify_ns * 1e-3;
  stats.t_draft_us = (serial_ns + exposed_ns + first_ns) * 1e-3;
  stats.t_draft_prefill_us = first_ns * 1e-3;
  const double step_ns = static_cast<double>(t_end - answer.t_prev_end);
  stats.t_other_us = (step_ns - verify_ns - exposed_ns - serial_ns - first_ns) * 1e-3;
  answer.t_prev_end = t_end;
  result.steps.push_back(stats);
  ++answer.step_index;
  ++result.generation.n_steps;
}

void ParallelDecoder::FinishAnswer(const ParallelAnswer& answer, DecodeResult& result) {
  const int64_t t_end = NowNanos();
  GenerationResult& gen = result.generation;
  gen.tokens = answer.stop.tokens();
  gen.text = answer.stop.text();
  gen.stop_reason = answer.stop.reason();
  gen.prefill_ms = (answer.t_prefill_end - answer.t_start) * 1e-6;
  gen.decode_ms = (t_end - answer.t_prefill_end) * 1e-6;
}

}  // namespace specbed
