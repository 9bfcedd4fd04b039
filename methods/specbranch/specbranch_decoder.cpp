// SpecBranch's loop (see specbranch_decoder.h).
#include "methods/specbranch/specbranch_decoder.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "harness/base/error.h"
#include "harness/base/timer.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/engine/stop_rules.h"
#include "harness/engine/verifier.h"
#include "methods/common/draft_ledger.h"

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
    : target_(target),
      tokenizer_(tokenizer),
      draft_(std::move(draft)),
      policy_(std::move(policy)),
      feature_layers_(std::move(feature_layers)),
      options_(options) {
  SPECBED_CHECK(options_.gamma_max >= 1, "specbranch: gamma_max must be >= 1");
  SPECBED_CHECK(options_.k_max >= 1, "specbranch: k_max must be >= 1");
  SPECBED_CHECK(!options_.hrad || policy_ != nullptr, "specbranch: H-RAD needs a predictor");
  SPECBED_CHECK(!options_.hrad || !feature_layers_.empty(),
                "specbranch: H-RAD needs its feature layers");
  SPECBED_CHECK(draft_.model().config().vocab_size == target_.config().vocab_size,
                "specbranch: the draft model's vocabulary (", draft_.model().config().vocab_size,
                ") differs from the target's (", target_.config().vocab_size, ")");
  if (!options_.hrad) feature_layers_.clear();
  ids_ = at::empty({1, options_.gamma_max + 8}, at::kLong);
}

int SpecBranchDecoder::PrepareSides() {
  const int draft_threads = options_.branch ? options_.draft_threads : at::get_num_threads();
  if (!side_ || side_->threads() != draft_threads || side_->device() != target_.device()) {
    side_ = std::make_unique<SideThread>(draft_threads, target_.device());
  }
  if (!options_.branch) return at::get_num_threads();
  return options_.target_threads > 0 ? options_.target_threads
                                     : std::max(1, at::get_num_threads() - options_.draft_threads);
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
    draft_.sampler().Distribution(qb.data(), vocab, dist_);
    for (int64_t i = 0; i < k; ++i) {
      double mass = 0;
      for (float v : dist_) mass += v;
      if (!(mass > 0)) break;
      for (float& v : dist_) v = static_cast<float>(v / mass);
      cand_q.insert(cand_q.end(), dist_.begin(), dist_.end());
      const int32_t c = (i == 0 && bp_token >= 0)
                            ? bp_token
                            : SampleFromProbs(dist_.data(), vocab, draft_.sampler().rng());
      candidates.push_back(c);
      dist_[c] = 0.f;  // without replacement
    }
  }
  ++counters_.branch_points;
  counters_.branches += static_cast<int64_t>(candidates.size());
}

int SpecBranchDecoder::Classify(const std::vector<float>& z) {
  const int s = options_.hrad ? policy_->Classify(z) : 2;
  ++counters_.hrad_calls;
  ++counters_.class_count[s];
  return s;
}

void SpecBranchDecoder::Generate(const std::vector<int32_t>& prompt, const GenerationConfig& config,
                                 KvCache& cache, DecodeResult& result) {
  SPECBED_CHECK(!prompt.empty(), "generation needs a non-empty prompt (add BOS)");
  SPECBED_CHECK(cache.batch() == 1, "specbranch uses a batch-1 cache");
  SPECBED_CHECK(static_cast<int64_t>(prompt.size()) < cache.max_len(), "prompt of ", prompt.size(),
                " tokens does not fit the context (", cache.max_len(), " positions)");
  const int64_t vocab = target_.config().vocab_size;
  const int64_t gmax = options_.gamma_max;
  const bool branching = options_.branch;
  ThreadBudget budget(PrepareSides());
  const at::Tensor& embedding = target_.weights().tok_embeddings;
  GenerationResult& gen = result.generation;
  gen = GenerationResult();
  result.steps.clear();
  Sampler sampler(config.sampling, config.seed);
  StopChecker stop(config.stop, tokenizer_, prompt.back());
  cache.Truncate(0);
  const bool greedy = config.sampling.greedy();
  const float eps = static_cast<float>(options_.epsilon);

  // Prefill (identical to AR) with the H-RAD features of the last prompt position.
  const int64_t t_start = NowNanos();
  at::Tensor prompt_ids = at::empty({1, static_cast<int64_t>(prompt.size())}, at::kLong);
  for (size_t i = 0; i < prompt.size(); ++i) prompt_ids.data_ptr<int64_t>()[i] = prompt[i];
  ForwardOptions prefill;
  prefill.hidden_layers = feature_layers_;
  ForwardOutput out = target_.Forward(prompt_ids, cache, prefill);
  const int32_t first = sampler.Sample(CopyToHost(out.logits).data_ptr<float>(), vocab);
  if (options_.hrad) {
    HradFeatures(out.hidden, static_cast<int64_t>(prompt.size()) - 1, embedding, first, z_);
  }
  const int64_t t_prefill_end = NowNanos();
  stop.Push(first);

  std::vector<int32_t> committed(prompt.begin(), prompt.end());
  committed.push_back(first);
  int64_t begin_ns = 0;
  if (!stop.stopped()) {
    begin_ns = side_->RunTimed([&] {
      draft_.Begin(prompt, config.sampling, DrafterSeed(config.seed), cache.max_len() + gmax + 2);
    });
  }
  DraftLedger& ledger = ledger_;  // every drafted position once: the rollback counts
  ledger.Reset();

  std::vector<int32_t> r;  // retained draft tokens after pend
  std::vector<float> r_q;  // their sampling distributions (T > 0)
  std::vector<float> qb;   // draft logits at the branch point (after R)
  // The token the draft already drew at the branch point (-1 = none): it becomes the first
  // candidate there (T > 0 losslessness: methods/specbranch/README.md, "Stop token").
  int32_t bp_token = -1;
  bool draft_stage = true;
  std::vector<int32_t> context;
  DraftChunk chunk;
  std::vector<DraftChunk> branches;
  std::vector<int32_t> candidates;
  std::vector<float> cand_q;  // [k, vocab] proposal of each candidate (T > 0)
  int64_t t_prev_end = t_prefill_end;
  int64_t step_index = 0;
  while (!stop.stopped()) {
    const int64_t free = cache.max_len() - cache.length() - 1;  // slots after pend
    if (free < 0) {
      stop.StopForContext();
      break;
    }
    StepStats stats;
    const int64_t left = config.stop.max_new_tokens - static_cast<int64_t>(stop.tokens().size());
    // --- DRAFT stage (serial, target idle) ---
    int64_t serial_ns = 0;
    if (draft_stage || !branching) {
      const int64_t s0 = NowNanos();
      ++counters_.draft_stages;
      const int s = Classify(z_);
      const int64_t gm = std::clamp<int64_t>(std::min(left - 1, free), 0, gmax);
      context = committed;
      side_->Start([&] {
        if (s == 0 || gm == 0) {
          draft_.Draft(context, 0, false, chunk, false, /*next=*/true);
        } else {
          draft_.Draft(context, gm, true, chunk, true, /*next=*/true, s == 1 ? eps : -1.f);
        }
      });
      side_->Wait();
      r = chunk.tokens;
      if (!greedy) r_q = chunk.q;
      ledger.Drafted(static_cast<int64_t>(chunk.tokens.size()));
      bp_token = -1;
      if (branching && !chunk.conf.empty() && s == 1 && chunk.conf.back() < eps) {
        // The unconfident token's position is the branch point; the token drawn there becomes
        // its first candidate (w/o branch it simply ends the chain and is verified with it).
        bp_token = r.back();
        r.pop_back();
        if (!greedy) r_q.resize(r.size() * static_cast<size_t>(vocab));
        qb.assign(chunk.logits.end() - vocab, chunk.logits.end());
      } else {
        qb = chunk.next_logits;
      }
      draft_stage = false;
      serial_ns = NowNanos() - s0;
    }
    if (static_cast<int64_t>(r.size()) > free) {  // only at the context limit
      ledger.Trimmed(static_cast<int64_t>(r.size()) - free);
      r.resize(static_cast<size_t>(free));
      if (!greedy) r_q.resize(static_cast<size_t>(free * vocab));
    }
    const int64_t n_r = static_cast<int64_t>(r.size());
    // --- branch resampling at the branch point (draft side) ---
    const int64_t lb = branching ? std::clamp<int64_t>(left - n_r - 1, 0, gmax) : 0;
    candidates.clear();
    cand_q.clear();
    if (lb > 0) PickCandidates(qb, bp_token, greedy, candidates, cand_q);
    const int64_t n_cand = static_cast<int64_t>(candidates.size());
    branches.resize(static_cast<size_t>(n_cand));
    context = committed;
    context.insert(context.end(), r.begin(), r.end());
    int64_t d0 = 0, d1 = 0;
    auto draft_job = [&] {
      d0 = NowNanos();
      std::vector<int32_t> ctx = context;
      ctx.push_back(-1);
      for (int64_t i = 0; i < n_cand; ++i) {
        ctx.back() = candidates[i];
        draft_.Draft(ctx, lb - 1, true, branches[i], true, /*next=*/true);
      }
      d1 = NowNanos();
    };
    if (n_cand > 0) {
      side_->Start(draft_job);
      if (!options_.parallel) side_->Wait();
    }
    // --- verification of [pend] + R (target side) ---
    const int64_t v0 = NowNanos();
    int64_t* ids = ids_.data_ptr<int64_t>();
    ids[0] = committed.back();
    for (int64_t i = 0; i < n_r; ++i) ids[i + 1] = r[i];
    ForwardOptions fwd;
    fwd.logits = LogitsMode::kAll;
    fwd.hidden_layers = feature_layers_;
    const int64_t base = cache.length();
    ForwardOutput vo = target_.Forward(ids_.narrow(1, 0, n_r + 1), cache, fwd);
    const at::Tensor host_logits = CopyToHost(vo.logits);  // the verify rows (device: one copy)
    const float* logits = host_logits.data_ptr<float>();
    int64_t n_acc = 0;
    int32_t correction = -1;
    for (; n_acc < n_r; ++n_acc) {
      if (AcceptAtSlot(logits + n_acc * vocab, vocab, &r[n_acc], 1,
                       greedy ? nullptr : r_q.data() + n_acc * vocab, sampler, scratch_,
                       &correction) < 0) {
        break;
      }
    }
    const int64_t v1 = NowNanos();
    if (n_cand > 0 && options_.parallel) side_->Wait();
    const int64_t t1 = NowNanos();
    (void)t1;

    // --- join: rollback, or branch selection + posterior H-RAD ---
    std::vector<int32_t> tokens(r.begin(), r.begin() + n_acc);
    std::vector<int32_t> new_r;
    std::vector<float> new_r_q;
    bool rollback = false;
    int64_t feature_slot = n_acc;
    // Positions after R: the branch point and the branches' tokens, once per position however
    // many branches drafted there; a branch-point token drawn earlier is already counted.
    const int64_t bp_pending = bp_token >= 0 ? 1 : 0;
    int64_t after_r = bp_pending;
    if (n_cand > 0) {
      int64_t longest = 0;
      for (const DraftChunk& b : branches) {
        longest = std::max<int64_t>(longest, static_cast<int64_t>(b.tokens.size()));
      }
      after_r = 1 + longest;
      ledger.Drafted(after_r - bp_pending);
    }
    ledger.Accepted(n_acc);
    bool tested_branch = false;
    if (n_acc < n_r) {
      tokens.push_back(correction);
      cache.Truncate(base + 1 + n_acc);
      ledger.RolledBack((n_r - n_acc) + after_r);
      rollback = true;
    } else if (n_cand == 0) {  // no branches (w/o branch, or the end of the answer)
      tokens.push_back(sampler.Sample(logits + n_r * vocab, vocab));
      ledger.Trimmed(bp_pending);  // a branch-point token with no room to branch
      draft_stage = true;
    } else {
      tested_branch = true;
      const int j = AcceptAtSlot(logits + n_r * vocab, vocab, candidates.data(), n_cand,
                                 greedy ? nullptr : cand_q.data(), sampler, scratch_, &correction,
                                 options_.test_accept_first_branch);
      if (j < 0) {
        tokens.push_back(correction);
        ledger.RolledBack(after_r);
        rollback = true;
      } else {
        const int32_t c = candidates[j];
        tokens.push_back(c);
        DraftChunk& b = branches[j];
        if (options_.hrad) HradFeatures(vo.hidden, n_r, embedding, c, z_);
        const int s = Classify(z_);
        const int64_t nb = static_cast<int64_t>(b.tokens.size());
        int64_t keep = nb;
        if (s == 0) {
          keep = 0;
        } else if (s == 1) {
          for (int64_t u = 0; u < nb; ++u) {
            if (b.conf[u] < eps) {
              keep = u;
              break;
            }
          }
        }
        new_r.assign(b.tokens.begin(), b.tokens.begin() + keep);
        if (!greedy) new_r_q.assign(b.q.begin(), b.q.begin() + keep * vocab);
        if (keep < nb) {
          qb.assign(b.logits.begin() + keep * vocab, b.logits.begin() + (keep + 1) * vocab);
          bp_token = b.tokens[keep];  // already drawn there: the next branch point's first
        } else {
          qb = b.next_logits;
          bp_token = -1;
        }
        // The candidate is accepted; the kept tokens and the next branch-point token stay
        // pending; the rest of the positions is trimmed.
        ledger.Accepted(1);
        ledger.Trimmed(after_r - 1 - keep - (bp_token >= 0 ? 1 : 0));
      }
    }
    if (rollback) {
      ++counters_.rollbacks;
      draft_stage = true;
      feature_slot = n_acc;
    }
    if (options_.hrad && (rollback || n_cand == 0)) {
      HradFeatures(vo.hidden, feature_slot, embedding, tokens.back(), z_);
    }
    const size_t before = stop.tokens().size();
    for (int32_t token : tokens) {
      committed.push_back(token);
      if (stop.Push(token) != StopReason::kNone) break;
    }
    r = std::move(new_r);
    r_q = std::move(new_r_q);
    const int64_t t2 = NowNanos();

    stats.n_drafted = n_r + (tested_branch ? 1 : 0);
    stats.n_accepted = static_cast<int64_t>(tokens.size()) - 1;
    stats.n_emitted = static_cast<int64_t>(stop.tokens().size() - before);
    stats.draft_depth = stats.n_drafted;
    stats.n_rollback_events = rollback ? 1 : 0;
    stats.n_target_forwards = 1;
    ledger.EndStep(stats);
    const double branch_ns = n_cand > 0 ? static_cast<double>(d1 - d0) : 0.0;
    const double first_ns = step_index == 0 ? static_cast<double>(begin_ns) : 0.0;
    stats.t_draft_busy_us = (serial_ns + branch_ns + first_ns) * 1e-3;
    stats.t_verify_busy_us = (v1 - v0) * 1e-3;
    stats.t_verify_us = (v1 - v0) * 1e-3;
    double exposed_ns = 0;
    if (n_cand > 0) {
      exposed_ns = options_.parallel
                       ? std::max<double>(0, static_cast<double>(d1) - std::max<double>(d0, v1))
                       : branch_ns;
    }
    stats.t_draft_us = (serial_ns + exposed_ns + first_ns) * 1e-3;
    stats.t_draft_prefill_us = first_ns * 1e-3;
    const double step_ns = static_cast<double>(t2 - t_prev_end);
    stats.t_other_us = (step_ns - (v1 - v0) - exposed_ns - serial_ns - first_ns) * 1e-3;
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
