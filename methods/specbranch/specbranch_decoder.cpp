// SpecBranch's loop (see specbranch_decoder.h).
#include "methods/specbranch/specbranch_decoder.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/error.h"
#include "harness/engine/verifier.h"
#include "models/device.h"

namespace specbed {

namespace {

// Temperature-1 top-1 probability of a logits row.
float TopProb(const float* logits, int64_t vocab) {
  return SoftmaxProb(logits, vocab, Argmax(logits, vocab));
}

// The k largest logits' ids, descending (ties: lower id first).
std::vector<int32_t> TopK(const float* logits, int64_t vocab, int64_t k) {
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  k = std::min(k, vocab);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  ids.resize(static_cast<size_t>(k));
  return ids;
}

}  // namespace

SpecBranchDecoder::SpecBranchDecoder(LlamaModel& target, const Tokenizer* tokenizer,
                                     std::shared_ptr<LlamaModel> draft,
                                     std::unique_ptr<HradPolicy> policy,
                                     std::vector<int64_t> feature_layers, SpecBranchOptions options)
    : ParallelDecoder(target, tokenizer, std::move(draft), options.gamma_max, "specbranch"),
      policy_(std::move(policy)),
      feature_layers_(std::move(feature_layers)),
      options_(options) {
  SPECBED_CHECK(options_.gamma_max >= 1, "specbranch: gamma_max must be >= 1");
  SPECBED_CHECK(options_.k_max >= 1, "specbranch: k_max must be >= 1");
  SPECBED_CHECK(!options_.hrad || policy_ != nullptr, "specbranch: H-RAD needs a predictor");
  SPECBED_CHECK(!options_.hrad || !feature_layers_.empty(),
                "specbranch: H-RAD needs its feature layers");
  if (!options_.hrad) feature_layers_.clear();
}

void SpecBranchDecoder::PickCandidates(const std::vector<float>& qb, int32_t bp_token, bool greedy,
                                       std::vector<int32_t>& candidates,
                                       std::vector<float>& cand_q) {
  const int64_t vocab = target_.config().vocab_size;
  SPECBED_CHECK(static_cast<int64_t>(qb.size()) == vocab, "specbranch: no branch point");
  const float conf_b = TopProb(qb.data(), vocab);
  const int64_t k = std::max<int64_t>(
      1, static_cast<int64_t>(std::floor(static_cast<double>(options_.k_max) * (1.0 - conf_b))));
  if (greedy) {
    candidates = TopK(qb.data(), vocab, k);  // bp_token (a greedy draw) is the first
  } else {
    // T > 0, every path: k i.i.d. draws from q_b (repeats allowed), accepted by recursive
    // rejection sampling with q_b as every candidate's proposal (README "Acceptance on the
    // device"). The host rule (AcceptAtSlot) reads one proposal row per candidate, the device
    // walk one shared row.
    draft_.sampler().Distribution(qb.data(), vocab, dist_);
    for (int64_t i = 0; i < k; ++i) {
      candidates.push_back((i == 0 && bp_token >= 0)
                               ? bp_token
                               : SampleFromProbs(dist_.data(), vocab, draft_.sampler().rng()));
    }
    const int64_t rows = AcceptsOnDevice(greedy) ? 1 : k;
    for (int64_t i = 0; i < rows; ++i) cand_q.insert(cand_q.end(), dist_.begin(), dist_.end());
  }
  ++counters_.branch_points;
  counters_.branches += static_cast<int64_t>(candidates.size());
  for (size_t i = 1; i < candidates.size(); ++i) {
    counters_.repeated_candidates += std::find(candidates.begin(), candidates.begin() + i,
                                               candidates[i]) != candidates.begin() + i;
  }
}

int SpecBranchDecoder::Classify(const std::vector<float>& z) {
  const int s = options_.hrad ? policy_->Classify(z) : 2;
  ++counters_.hrad_calls;
  ++counters_.class_count[s];
  return s;
}

void SpecBranchDecoder::Generate(const std::vector<int32_t>& prompt, const GenerationConfig& config,
                                 KvCache& cache, DecodeResult& result) {
  // W/o branch the draft stage runs alone, so it gets the caller's whole width.
  const int width = at::get_num_threads();
  BeginAnswer(prompt, cache, options_.branch ? options_.draft_threads : width, result);
  ThreadBudget budget(
      options_.branch ? TargetThreads(options_.target_threads, options_.draft_threads) : width);
  ParallelAnswer answer(prompt, config, tokenizer_);
  // Prefill (identical to AR) with the H-RAD features of the last prompt position.
  const ForwardOutput out = Prefill(prompt, cache, feature_layers_, options_.gamma_max + 2, answer);
  if (options_.hrad) {
    HradFeatures(out.hidden, static_cast<int64_t>(prompt.size()) - 1,
                 target_.weights().tok_embeddings, answer.committed.back(), z_);
  }
  r_.clear();
  r_q_.clear();
  qb_.clear();
  bp_token_ = -1;
  draft_stage_ = true;
  RunSteps(answer, cache, result);
}

void SpecBranchDecoder::Step(ParallelAnswer& answer, KvCache& cache, int64_t free,
                             DecodeResult& result) {
  DraftClock clock;
  if (draft_stage_ || !options_.branch) DraftStage(answer, free, clock);
  FitToContext(free, answer.greedy, r_, r_q_);
  const int64_t n_r = static_cast<int64_t>(r_.size());
  const int64_t lb =
      options_.branch ? std::clamp<int64_t>(answer.left() - n_r - 1, 0, options_.gamma_max) : 0;
  StartBranches(answer, lb, clock);
  ChainVerdict verdict;
  VerifyChain(answer, r_, r_q_, feature_layers_, cache, verdict);
  if (clock.ran && options_.parallel) side_->Wait();
  if (AcceptsOnDevice(answer.greedy)) {  // R, then the branch point's candidates, in one walk
    SettleOnDevice(answer, r_, r_q_, candidates_.data(), static_cast<int64_t>(candidates_.size()),
                   cand_q_.data(), options_.test_accept_first_branch, verdict);
  }
  const StepOutcome outcome = Join(answer, verdict, cache);
  const int64_t emitted = Commit(answer, outcome.tokens);
  EndStep(outcome, emitted, verdict, clock, options_.parallel, answer, result);
}

void SpecBranchDecoder::DraftStage(const ParallelAnswer& answer, int64_t free, DraftClock& clock) {
  const int64_t s0 = DeviceNowNanos(target_.device());
  const int64_t vocab = target_.config().vocab_size;
  const float eps = static_cast<float>(options_.epsilon);
  ++counters_.draft_stages;
  const int s = Classify(z_);
  const int64_t gm = std::clamp<int64_t>(std::min(answer.left() - 1, free), 0, options_.gamma_max);
  context_ = answer.committed;
  side_->Start([&] {
    if (s == 0 || gm == 0) {
      draft_.Draft(context_, 0, false, chunk_, false, /*next=*/true);
    } else {
      draft_.Draft(context_, gm, true, chunk_, true, /*next=*/true, s == 1 ? eps : -1.f);
    }
  });
  side_->Wait();
  r_ = chunk_.tokens;
  if (!answer.greedy) r_q_ = chunk_.q;
  ledger_.Drafted(static_cast<int64_t>(chunk_.tokens.size()));
  bp_token_ = -1;
  if (options_.branch && !chunk_.conf.empty() && s == 1 && chunk_.conf.back() < eps) {
    // The unconfident token's position is the branch point; the token drawn there becomes its
    // first candidate (w/o branch it simply ends the chain and is verified with it).
    bp_token_ = r_.back();
    r_.pop_back();
    if (!answer.greedy) r_q_.resize(r_.size() * static_cast<size_t>(vocab));
    qb_.assign(chunk_.logits.end() - vocab, chunk_.logits.end());
  } else {
    qb_ = chunk_.next_logits;
  }
  draft_stage_ = false;
  clock.serial_ns = DeviceNowNanos(target_.device()) - s0;
}

void SpecBranchDecoder::StartBranches(const ParallelAnswer& answer, int64_t lb, DraftClock& clock) {
  candidates_.clear();
  cand_q_.clear();
  if (lb > 0) PickCandidates(qb_, bp_token_, answer.greedy, candidates_, cand_q_);
  const int64_t n_cand = static_cast<int64_t>(candidates_.size());
  branches_.resize(static_cast<size_t>(n_cand));
  if (n_cand == 0) return;
  context_ = answer.committed;
  context_.insert(context_.end(), r_.begin(), r_.end());
  const at::Device device = target_.device();
  clock.ran = true;
  side_->Start([this, n_cand, lb, device, &clock] {
    clock.d0 = DeviceNowNanos(device);
    std::vector<int32_t> ctx = context_;
    ctx.push_back(-1);
    for (int64_t i = 0; i < n_cand; ++i) {
      const auto first = std::find(candidates_.begin(), candidates_.begin() + i, candidates_[i]);
      if (first != candidates_.begin() + i) {  // a repeated i.i.d. draw: its branch is drafted
        branches_[i] = branches_[first - candidates_.begin()];
        continue;
      }
      ctx.back() = candidates_[i];
      draft_.Draft(ctx, lb - 1, true, branches_[i], true, /*next=*/true);
    }
    clock.d1 = DeviceNowNanos(device);
  });
  if (!options_.parallel) side_->Wait();
}

int64_t SpecBranchDecoder::PositionsAfterR(int64_t bp_pending) {
  // The branch point and the branches' tokens, once per position however many branches drafted
  // there; a branch-point token drawn earlier is already counted.
  if (candidates_.empty()) return bp_pending;
  int64_t longest = 0;
  for (const DraftChunk& b : branches_) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(b.tokens.size()));
  }
  ledger_.Drafted(1 + longest - bp_pending);
  return 1 + longest;
}

StepOutcome SpecBranchDecoder::Join(ParallelAnswer& answer, const ChainVerdict& verdict,
                                    KvCache& cache) {
  const int64_t n_r = static_cast<int64_t>(r_.size());
  const int64_t n_acc = verdict.n_accepted;
  StepOutcome outcome;
  outcome.tokens.assign(r_.begin(), r_.begin() + n_acc);
  outcome.n_offered = n_r;
  const int64_t bp_pending = bp_token_ >= 0 ? 1 : 0;
  const int64_t after_r = PositionsAfterR(bp_pending);
  ledger_.Accepted(n_acc);
  const bool branched = !candidates_.empty();
  if (n_acc < n_r) {
    outcome.tokens.push_back(verdict.correction);
    cache.Truncate(verdict.base + 1 + n_acc);
    ledger_.RolledBack((n_r - n_acc) + after_r);
    outcome.rollback = true;
  } else if (!branched) {  // no branches (w/o branch, or the end of the answer)
    outcome.tokens.push_back(SampleAt(n_r, answer.sampler));
    ledger_.Trimmed(bp_pending);  // a branch-point token with no room to branch
    draft_stage_ = true;
  } else {
    outcome.n_offered = n_r + 1;
    SelectBranch(answer, verdict, after_r, outcome);  // moves R on when a branch is kept
  }
  if (outcome.rollback) {
    ++counters_.rollbacks;
    draft_stage_ = true;
  }
  if (outcome.rollback || !branched) {
    r_.clear();
    r_q_.clear();
    if (options_.hrad) {
      HradFeatures(verdict.out.hidden, n_acc, target_.weights().tok_embeddings,
                   outcome.tokens.back(), z_);
    }
  }
  return outcome;
}

void SpecBranchDecoder::SelectBranch(ParallelAnswer& answer, const ChainVerdict& verdict,
                                     int64_t after_r, StepOutcome& outcome) {
  const int64_t n_r = static_cast<int64_t>(r_.size());
  int32_t correction = -1;
  const int j = AcceptAt(n_r, candidates_.data(), static_cast<int64_t>(candidates_.size()),
                         answer.greedy ? nullptr : cand_q_.data(), answer.sampler, &correction,
                         options_.test_accept_first_branch);
  if (j < 0) {
    outcome.tokens.push_back(correction);
    ledger_.RolledBack(after_r);
    outcome.rollback = true;
    return;
  }
  const int32_t c = candidates_[j];
  outcome.tokens.push_back(c);
  const DraftChunk& b = branches_[j];
  if (options_.hrad) HradFeatures(verdict.out.hidden, n_r, target_.weights().tok_embeddings, c, z_);
  const int s = Classify(z_);
  const int64_t nb = static_cast<int64_t>(b.tokens.size());
  int64_t keep = nb;  // s = 2: the whole branch
  if (s == 0) {
    keep = 0;
  } else if (s == 1) {
    for (int64_t u = 0; u < nb; ++u) {
      if (b.conf[u] < static_cast<float>(options_.epsilon)) {
        keep = u;
        break;
      }
    }
  }
  TakeBranch(b, keep, answer.greedy);
  // The candidate is accepted; the kept tokens and the next branch-point token stay pending; the
  // rest of the positions is trimmed.
  ledger_.Accepted(1);
  ledger_.Trimmed(after_r - 1 - keep - (bp_token_ >= 0 ? 1 : 0));
}

void SpecBranchDecoder::TakeBranch(const DraftChunk& branch, int64_t keep, bool greedy) {
  const int64_t vocab = target_.config().vocab_size;
  const int64_t nb = static_cast<int64_t>(branch.tokens.size());
  r_.assign(branch.tokens.begin(), branch.tokens.begin() + keep);
  if (!greedy) r_q_.assign(branch.q.begin(), branch.q.begin() + keep * vocab);
  if (keep < nb) {
    qb_.assign(branch.logits.begin() + keep * vocab, branch.logits.begin() + (keep + 1) * vocab);
    bp_token_ = branch.tokens[keep];  // already drawn there: the next branch point's first
  } else {
    qb_ = branch.next_logits;
    bp_token_ = -1;
  }
}

}  // namespace specbed
