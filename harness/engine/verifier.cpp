// The verifier (see verifier.h). On the CPU the per-slot work runs on raw rows through the CPU
// references of kernels/ (the same contracts the CUDA kernels implement), so a step allocates
// nothing once its buffers are warm. On the ATen path (every device) acceptance runs where the
// logits are (device_sampling.h: the kernels/ walk, greedy or sampled) and copies back only the
// accepted path and the bonus token.
#include "harness/engine/verifier.h"

#include <algorithm>
#include <atomic>

#include <ATen/ATen.h>

#include "base/enum_names.h"
#include "base/error.h"
#include "kernels/cpu/references.h"
#include "kernels/kernel_status.h"
#include "kernels/tree_mask.h"
#include "methods/common/tree_builders.h"

namespace specbed {

SPECBED_ENUM_NAMES(VerifyRule, "verification rule", VerifyRuleName, ParseVerifyRule,
                   {VerifyRule::kGreedy, "greedy"}, {VerifyRule::kChainRs, "chain_rs"},
                   {VerifyRule::kTreeRrs, "tree_rrs"}, {VerifyRule::kSampleFollow, "sample_follow"})

namespace {

// Per-thread scratch for AcceptTree (one decode loop per thread).
struct AcceptScratch {
  std::vector<int32_t> first_child, next_sibling;
  std::vector<float> p;
  std::vector<float> p_target;  // VerifierFault::kTargetAsResidual only
};

std::atomic<int> g_fault{static_cast<int>(VerifierFault::kNone)};

AcceptScratch& Scratch() {
  thread_local AcceptScratch scratch;
  return scratch;
}

void Finish(const DraftTree& tree, Verdict& verdict) {
  verdict.tokens.clear();
  for (int32_t node : verdict.path) verdict.tokens.push_back(tree.token[node]);
  verdict.tokens.push_back(verdict.bonus);
}

// KV compaction after a verify over [root, tree] appended at `committed`: keeps the root and the
// accepted `path` (a truncation when the path is nodes 0..k-1, always for chains). keep_buf: int64
// CPU scratch of at least path.size() + 1 entries.
void CompactToPath(const std::vector<int32_t>& path, int64_t committed, at::Tensor& keep_buf,
                   KvCache& cache) {
  const int64_t k = static_cast<int64_t>(path.size());
  bool prefix = true;
  for (int64_t j = 0; j < k; ++j) prefix = prefix && path[j] == j;
  if (prefix) {
    cache.Truncate(committed + 1 + k);
    return;
  }
  int64_t* keep = keep_buf.data_ptr<int64_t>();
  keep[0] = committed;
  for (int64_t j = 0; j < k; ++j) keep[j + 1] = committed + 1 + path[j];
  cache.KeepPositions(committed, keep_buf.narrow(0, 0, k + 1).view({1, k + 1}));
}

// The preconditions of the sampling rules (chain_rs needs a chain; both rejection rules need
// the draft distributions).
void CheckSamplingRule(const DraftTree& tree, VerifyRule rule, int64_t vocab) {
  const int64_t n = tree.size();
  if (rule == VerifyRule::kChainRs) {
    SPECBED_CHECK(tree.IsChain(), "chain rejection sampling needs a chain draft, got a tree of ", n,
                  " nodes (use tree_rrs or sample_follow)");
  }
  if (rule == VerifyRule::kChainRs || rule == VerifyRule::kTreeRrs) {
    SPECBED_CHECK(n == 0 || (tree.has_draft_probs() && tree.vocab == vocab), VerifyRuleName(rule),
                  " verification needs the draft distributions (tree.draft_probs [n+1, ", vocab,
                  "]); the drafter did not provide them");
  }
}

// Row 0 of the tree's draft distributions on the host: tree.draft_probs, or the drafter's device
// rows copied once into `keep` (a drafter on the ATen path serving a target on the row path).
const float* HostDraftProbs(const DraftTree& tree, at::Tensor& keep) {
  if (tree.draft_probs_device == nullptr) return tree.draft_probs.data();
  keep = CopyToHost(tree.draft_probs_device->narrow(0, 0, tree.size() + 1)).contiguous();
  return keep.data_ptr<float>();
}

// The SampledTreeVerify mode of a sampling rule under the test fault (negative controls).
int32_t SampledMode(VerifyRule rule, VerifierFault fault) {
  if (fault == VerifierFault::kGreedyAcceptance) return kSampledFollowArgmax;
  if (rule == VerifyRule::kSampleFollow) return kSampledFollow;
  return fault == VerifierFault::kTargetAsResidual ? kSampledRejectionTargetResidual
                                                   : kSampledRejection;
}

}  // namespace

void SetVerifierFaultForTesting(VerifierFault fault) {
  g_fault.store(static_cast<int>(fault), std::memory_order_relaxed);
}

VerifierFault VerifierFaultForTesting() {
  return static_cast<VerifierFault>(g_fault.load(std::memory_order_relaxed));
}

void AcceptTree(const DraftTree& tree, const float* logits, int64_t vocab, VerifyRule rule,
                Sampler& sampler, Verdict& verdict) {
  const int64_t n = tree.size();
  verdict.path.clear();
  if (sampler.params().greedy()) rule = VerifyRule::kGreedy;

  if (rule == VerifyRule::kGreedy) {
    verdict.path.resize(n > 0 ? n : 1);
    int32_t n_accepted = 0;
    const int status =
        cpu::GreedyTreeVerify(logits, tree.token.data(), tree.parent.data(), 1, n, vocab,
                              verdict.path.data(), &n_accepted, &verdict.bonus);
    SPECBED_CHECK(status == kKernelOk, "greedy verification: malformed draft tree");
    verdict.path.resize(n_accepted);
    Finish(tree, verdict);
    return;
  }

  CheckSamplingRule(tree, rule, vocab);
  at::Tensor q_keep;
  const bool rejection = rule == VerifyRule::kChainRs || rule == VerifyRule::kTreeRrs;
  const float* q_rows = rejection && n > 0 ? HostDraftProbs(tree, q_keep) : nullptr;
  AcceptScratch& s = Scratch();
  ChildrenLists(tree, s.first_child, s.next_sibling);
  std::mt19937_64& rng = sampler.rng();
  const VerifierFault fault = VerifierFaultForTesting();
  int32_t slot = 0;  // current slot (0 = root, i + 1 = node i)
  while (true) {
    sampler.Distribution(logits + slot * vocab, vocab, s.p);
    int32_t child = s.first_child[slot];
    if (child < 0) {  // leaf (or root of an empty tree): bonus from the target
      verdict.bonus = SampleFromProbs(s.p.data(), vocab, rng);
      break;
    }
    int32_t next = -1;
    if (fault == VerifierFault::kGreedyAcceptance) {  // a wrong rule (negative controls)
      const int32_t y =
          static_cast<int32_t>(std::max_element(s.p.begin(), s.p.begin() + vocab) - s.p.begin());
      for (; child >= 0; child = s.next_sibling[child]) {
        if (tree.token[child] == y) break;
      }
      if (child < 0) {
        verdict.bonus = SampleFromProbs(s.p.data(), vocab, rng);
        break;
      }
      next = child;
    } else if (rule == VerifyRule::kSampleFollow) {
      const int32_t y = SampleFromProbs(s.p.data(), vocab, rng);
      for (; child >= 0; child = s.next_sibling[child]) {
        if (tree.token[child] == y) break;
      }
      if (child < 0) {
        verdict.bonus = y;
        break;
      }
      next = child;
    } else {
      const float* q = q_rows + slot * vocab;
      if (fault == VerifierFault::kTargetAsResidual) s.p_target = s.p;
      for (; child >= 0; child = s.next_sibling[child]) {
        const float u = static_cast<float>(Uniform01(rng));
        uint8_t accepted = 0;
        cpu::TreeRejectionStep(s.p.data(), q, &tree.token[child], &u, 1, vocab, &accepted);
        if (accepted) break;
      }
      if (child < 0) {  // every child rejected: correction from the residual
        const bool wrong = fault == VerifierFault::kTargetAsResidual;  // negative controls
        verdict.bonus = SampleFromProbs(wrong ? s.p_target.data() : s.p.data(), vocab, rng);
        break;
      }
      next = child;
    }
    verdict.path.push_back(next);
    slot = next + 1;
  }
  Finish(tree, verdict);
}

void AcceptSynthetic(const DraftTree& tree, const float* logits, int64_t vocab,
                     const std::vector<double>& acceptance, std::mt19937_64& rng, Sampler& sampler,
                     Verdict& verdict) {
  verdict.path.clear();
  verdict.tokens.clear();
  int32_t slot = -1;  // -1 = the root
  for (size_t depth = 0;; ++depth) {
    int32_t child = -1;
    for (int64_t i = 0; i < tree.size(); ++i) {
      if (tree.parent[i] == slot) {
        child = static_cast<int32_t>(i);
        break;
      }
    }
    if (child < 0) break;
    const double a = acceptance[std::min(depth, acceptance.size() - 1)];
    if (!(Uniform01(rng) < a)) break;
    verdict.path.push_back(child);
    verdict.tokens.push_back(tree.token[child]);
    slot = child;
  }
  verdict.bonus = sampler.Sample(logits + static_cast<int64_t>(slot + 1) * vocab, vocab);
  verdict.tokens.push_back(verdict.bonus);
}

void TreeVerifier::SetSyntheticAcceptance(std::vector<double> acceptance, uint64_t seed) {
  for (double a : acceptance) {
    SPECBED_CHECK(a >= 0 && a <= 1, "synthetic_acceptance: every entry must be a probability in ",
                  "[0, 1], got ", a);
  }
  synthetic_ = std::move(acceptance);
  synthetic_rng_.seed(seed);
}

// The hidden states at the committed rows (root + accepted path). After a device walk (`walked`
// = the tree's size) the row indices come from the walk's verdict on the device; otherwise from
// the host path (the row kernels: CPU tensors).
void TreeVerifier::GatherHidden(const std::vector<at::Tensor>& hidden, Verdict& verdict,
                                int64_t walked) {
  verdict.hidden.clear();
  if (hidden.empty()) return;
  const int64_t k = static_cast<int64_t>(verdict.path.size());
  at::Tensor index;
  if (walked >= 0) {
    index = device_.PathSlots(walked, k);
  } else {
    index = keep_buf_.narrow(0, 0, k + 1);
    int64_t* slots = index.data_ptr<int64_t>();
    slots[0] = 0;
    for (int64_t j = 0; j < k; ++j) slots[j + 1] = verdict.path[j] + 1;
    if (!hidden[0].device().is_cpu()) index = index.to(hidden[0].device());  // synthetic
  }
  for (const at::Tensor& h : hidden) verdict.hidden.push_back(h.index_select(1, index));
}

int64_t TreeVerifier::PaddedWidth(int64_t n_slots, int64_t room) const {
  const int64_t bucket = StepBucket(n_slots);
  return bucket <= room && target_.ReplaysSteps(bucket) ? bucket : n_slots;
}

// Pad rows (width > n + 1; a captured step's fixed width): token 0 at the root's position,
// attending to the committed cache, the root and itself. No walk ever sees them (the walks take
// the tree's n nodes and rows [0, n] of the logits), so they are never accepted, draw no uniform
// and are dropped by the compaction.
at::Tensor TreeVerifier::StageRows(int32_t root, const DraftTree& tree, int64_t committed,
                                   int64_t width, bool bits, ForwardOptions& options) {
  const int64_t n = tree.size(), n_slots = n + 1;
  int64_t* tok = tokens_buf_.data_ptr<int64_t>();
  tok[0] = root;
  for (int64_t i = 0; i < n; ++i) tok[i + 1] = tree.token[i];
  std::fill(tok + n_slots, tok + width, 0);
  if (!tree.IsChain()) {  // a chain (and its pad rows after it) is the plain causal step
    int64_t* pos = positions_buf_.data_ptr<int64_t>();
    pos[0] = committed;
    for (int64_t i = 0; i < n; ++i) pos[i + 1] = committed + tree.depth[i];
    std::fill(pos + n_slots, pos + width, committed);
    options.positions = positions_buf_.narrow(0, 0, width).view({1, width});
    if (bits && target_.TakesTreeBits(width)) {  // a bitmask over the new rows, no [T, S] mask
      int64_t* bits = bits_buf_.data_ptr<int64_t>();
      TreeBitsOf(tree.parent.data(), n, bits);
      for (int64_t r = n_slots; r < width; ++r)
        bits[r] = 1 | static_cast<int64_t>(uint64_t{1} << r);
      options.tree_bits = bits_buf_.narrow(0, 0, width).view({1, width});
    } else {
      BuildMask(tree, committed, options);  // width == n + 1: padding needs the bits
    }
  }
  return tokens_buf_.narrow(0, 0, width).view({1, width});
}

// The ancestor mask [1, n + 1, committed + n + 1] of the verify rows (kernels/tree_mask), in a
// reused buffer.
void TreeVerifier::BuildMask(const DraftTree& tree, int64_t committed, ForwardOptions& options) {
  const int64_t n = tree.size(), n_slots = n + 1;
  const int64_t mask_numel = n_slots * (committed + n_slots);
  if (!mask_buf_.defined() || mask_buf_.numel() < mask_numel) {
    mask_buf_ = at::empty({std::max<int64_t>(mask_numel, 4096)}, at::kBool);
  }
  std::copy(tree.parent.begin(), tree.parent.end(), parent_buf_.data_ptr<int32_t>());
  at::Tensor mask = mask_buf_.narrow(0, 0, mask_numel).view({1, n_slots, committed + n_slots});
  BuildTreeMask(parent_buf_.narrow(0, 0, n).view({1, n}), committed, mask);
  options.mask = mask;
}

void TreeVerifier::Verify(int32_t root, const DraftTree& tree, VerifyRule rule, Sampler& sampler,
                          KvCache& cache, const std::vector<int64_t>& hidden_layers,
                          Verdict& verdict) {
  const int64_t n = tree.size();
  const int64_t committed = cache.length();
  const int64_t n_slots = n + 1;
  SPECBED_CHECK(committed + n_slots <= cache.max_len(), "verify: ", n_slots,
                " slots do not fit after ", committed, " committed positions (context ",
                cache.max_len(), ")");
  const int64_t vocab = target_.config().vocab_size;
  const int64_t width = PaddedWidth(n_slots, cache.max_len() - committed);
  GrowBuffers(width);
  // On the ATen path (every device; forced on the CPU in tests) acceptance, greedy or sampled,
  // runs through the kernels/ walks on the logits' device, their inputs (tree, uniforms) carried
  // in the forward's one upload; the row kernels' CPU logits are read in place.
  const bool greedy = sampler.params().greedy() || rule == VerifyRule::kGreedy;
  const bool on_device = target_.forward_path() == ForwardPath::kAten && synthetic_.empty();
  if (on_device && !greedy) CheckSamplingRule(tree, rule, vocab);
  ForwardOptions options;
  options.logits = LogitsMode::kAll;
  options.hidden_layers = hidden_layers;
  if (on_device)
    options.staged_extra = device_.StageTree(tree, committed, greedy ? nullptr : &sampler);
  const at::Tensor tokens = StageRows(root, tree, committed, width, /*bits=*/true, options);
  ForwardOutput out = target_.Forward(tokens, cache, options);
  if (width > n_slots) out.logits = out.logits.narrow(1, 0, n_slots);  // the pad rows' dropped
  if (on_device) {  // the walk and the compaction on the device, one copy back
    const CompactAfterWalk compact{&cache, committed};
    if (greedy) {
      device_.AcceptGreedy(tree, out.logits, verdict, compact, out.staged_extra);
    } else {
      device_.AcceptSampled(tree, out.logits, SampledMode(rule, VerifierFaultForTesting()), sampler,
                            verdict, compact, out.staged_extra);
    }
    Finish(tree, verdict);
    verdict.logits = out.logits.reshape({n_slots, vocab});
    GatherHidden(out.hidden, verdict, n);
  } else {
    AcceptOnHost(tree, rule, sampler, cache, committed, out.logits.reshape({n_slots, vocab}),
                 out.hidden, verdict);
  }
}

void TreeVerifier::GrowBuffers(int64_t width) {
  if (tokens_buf_.defined() && tokens_buf_.numel() >= width) return;
  const int64_t cap = std::max<int64_t>(width, 64);
  tokens_buf_ = at::empty({cap}, at::kLong);
  positions_buf_ = at::empty({cap}, at::kLong);
  parent_buf_ = at::empty({cap}, at::kInt);
  keep_buf_ = at::empty({cap}, at::kLong);
  bits_buf_ = at::empty({cap}, at::kLong);
}

SeqChunk TreeVerifier::StageChunk(int32_t root, const DraftTree& tree, KvCache& cache) {
  const int64_t n_slots = tree.size() + 1, committed = cache.length();
  SPECBED_CHECK(committed + n_slots <= cache.max_len(), "verify: ", n_slots,
                " slots do not fit after ", committed, " committed positions (context ",
                cache.max_len(), ")");
  GrowBuffers(n_slots);
  ForwardOptions options;
  SeqChunk chunk;
  chunk.cache = &cache;
  chunk.tokens = StageRows(root, tree, committed, n_slots, /*bits=*/false, options);
  chunk.positions = options.positions;
  chunk.mask = options.mask;
  return chunk;
}

void TreeVerifier::Conclude(const DraftTree& tree, VerifyRule rule, Sampler& sampler,
                            KvCache& cache, const at::Tensor& logits,
                            const std::vector<at::Tensor>& hidden, Verdict& verdict) {
  const int64_t n_slots = tree.size() + 1, vocab = target_.config().vocab_size;
  SPECBED_CHECK(cache.length() >= n_slots && logits.dim() == 2 && logits.size(0) == n_slots &&
                    logits.size(1) == vocab,
                "verify: logits [", n_slots, ", ", vocab, "] expected after the forward");
  GrowBuffers(n_slots);
  AcceptOnHost(tree, rule, sampler, cache, cache.length() - n_slots, logits, hidden, verdict);
}

// The row kernels: the CPU logits buffer itself. Elsewhere (a ragged batch, or synthetic
// acceptance on a device) the verify rows copied to the host (docs/ARCHITECTURE.md, host syncs).
void TreeVerifier::AcceptOnHost(const DraftTree& tree, VerifyRule rule, Sampler& sampler,
                                KvCache& cache, int64_t committed, const at::Tensor& logits,
                                const std::vector<at::Tensor>& hidden, Verdict& verdict) {
  const int64_t vocab = target_.config().vocab_size;
  const at::Tensor host = CopyToHost(logits);
  if (synthetic_.empty()) {
    AcceptTree(tree, host.data_ptr<float>(), vocab, rule, sampler, verdict);
  } else {
    AcceptSynthetic(tree, host.data_ptr<float>(), vocab, synthetic_, synthetic_rng_, sampler,
                    verdict);
  }
  verdict.logits = logits;
  CompactToPath(verdict.path, committed, keep_buf_, cache);
  GatherHidden(hidden, verdict, -1);
}

}  // namespace specbed
