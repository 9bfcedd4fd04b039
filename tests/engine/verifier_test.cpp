// Losslessness of the verification rules (harness/engine/verifier.h AcceptTree), measured the way
// a user relies on it: generate 3 tokens by repeated draft/verify steps against a synthetic
// Markov "target" on a 4-token vocabulary, and compare the distribution of the 64 possible
// 3-token outputs with the product of the target's conditionals (after the sampling transform:
// temperature / top-k / top-p) by a chi-square test over 10^5 draws.
// Drafts: chains (chain_rs), trees whose children are i.i.d. samples of the draft distribution
// with duplicate siblings (tree_rrs), arbitrary trees (sample_follow). The draft distribution has
// zeros where the target has mass (token 0 is never drafted, and its probability is high).
// False-failure rate: each test rejects when the chi-square p-value is below 1e-4 (Wilson-
// Hilferty approximation), i.e. a correct verifier fails with probability ~1e-4 per test per
// seed; the seeds are fixed, so the outcome is deterministic. A deliberately wrong acceptor fails
// the same test (PowerCheck), which shows the test can fail. The same tests run on the ATen
// path's acceptance (DeviceVerifierLossless: the kernels/ walk), with its two negative-control
// modes failing them (FaultPValue: looked at after an eighth, a quarter and half of the draws, so
// a gross fault stops early).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/error.h"
#include "harness/engine/device_sampling.h"
#include "harness/engine/verifier.h"
#include "kernels/kernel_status.h"
#include "methods/common/tree_builders.h"
#include "tests/engine/engine_test_util.h"

namespace specbed {
namespace {

using testing_util::ChiSquareSf;
using testing_util::Temperature;

constexpr int64_t kVocab = 4;
constexpr int kOutputLen = 3;
constexpr int kDraws = 100000;

// Target logits given the previous token (a Markov chain), and the draft distribution.
const float kTargetLogits[kVocab][kVocab] = {
    {1.2f, 0.3f, -0.5f, 0.9f},
    {0.8f, 1.5f, 0.1f, -1.0f},
    {1.7f, -0.2f, 0.6f, 0.4f},
    {0.5f, 0.2f, 1.1f, 0.0f},
};
// Rows sum to 1; token 0 never drafted (zero draft mass where the target has the most mass).
const float kDraft[kVocab][kVocab] = {
    {0.0f, 0.5f, 0.2f, 0.3f},
    {0.0f, 0.2f, 0.7f, 0.1f},
    {0.0f, 0.3f, 0.3f, 0.4f},
    {0.0f, 0.6f, 0.1f, 0.3f},
};

enum class DraftShape { kChain, kIidTree, kArbitraryTree };

// Drafts below `root` (the last committed token) with a fixed shape of `n` nodes.
void MakeDraft(DraftShape shape, int32_t root, std::mt19937_64& rng, DraftTree& tree) {
  tree.Clear();
  auto sample_q = [&](int32_t prev) {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    double cum = 0;
    for (int v = 0; v < kVocab; ++v) {
      cum += kDraft[prev][v];
      if (u < cum) return v;
    }
    return static_cast<int>(kVocab - 1);
  };
  if (shape == DraftShape::kArbitraryTree) {
    // Depth-2 tree with 3 children at the root (duplicates allowed) and 2 below the first.
    std::uniform_int_distribution<int> any(0, kVocab - 1);
    const int32_t a = tree.AddNode(any(rng), -1);
    tree.AddNode(any(rng), -1);
    tree.AddNode(tree.token[a], -1);  // duplicate sibling
    tree.AddNode(any(rng), a);
    tree.AddNode(any(rng), a);
    return;
  }
  // Children of each expanded slot drawn i.i.d. from the draft row of the slot's token.
  const int width = shape == DraftShape::kChain ? 1 : 3;
  const int depth = shape == DraftShape::kChain ? 3 : 2;
  std::vector<int32_t> frontier{-1};
  for (int d = 0; d < depth; ++d) {
    std::vector<int32_t> next;
    for (int32_t parent : frontier) {
      const int32_t prev = parent < 0 ? root : tree.token[parent];
      for (int w = 0; w < width; ++w) next.push_back(tree.AddNode(sample_q(prev), parent));
    }
    // Expand only the first child of each level (keeps the tree small, still deep).
    frontier.assign(1, next.front());
  }
  tree.vocab = kVocab;
  tree.draft_probs.assign((tree.size() + 1) * kVocab, 0.f);
  for (int64_t slot = 0; slot <= tree.size(); ++slot) {
    const int32_t tok = slot == 0 ? root : tree.token[slot - 1];
    std::copy(kDraft[tok], kDraft[tok] + kVocab, tree.DraftProbsRow(slot));
  }
}

using Acceptor = void (*)(const DraftTree&, const float*, int64_t, VerifyRule, Sampler&, Verdict&);

// Accepts every drafted token of the first root path (a lossy rule, for the power check).
void AcceptEverything(const DraftTree& tree, const float* logits, int64_t vocab, VerifyRule,
                      Sampler& sampler, Verdict& verdict) {
  verdict.path.clear();
  int32_t slot = 0;
  for (int64_t i = 0; i < tree.size(); ++i) {
    if (tree.parent[i] == slot - 1) {
      verdict.path.push_back(static_cast<int32_t>(i));
      slot = static_cast<int32_t>(i) + 1;
    }
  }
  verdict.bonus = sampler.Sample(logits + slot * vocab, vocab);
  verdict.tokens.clear();
  for (int32_t node : verdict.path) verdict.tokens.push_back(tree.token[node]);
  verdict.tokens.push_back(verdict.bonus);
}

// The 3-token outputs of repeated draft/verify steps for one rule/shape/sampling, and their
// chi-square p-value against the product of the target's transformed conditionals.
class OutputSample {
 public:
  OutputSample(VerifyRule rule, DraftShape shape, SamplingParams params, uint64_t seed,
               Acceptor accept)
      : rule_(rule),
        shape_(shape),
        params_(params),
        accept_(accept),
        sampler_(params, seed),
        draft_rng_(seed ^ 0x5bd1e995ULL),
        counts_(64, 0) {}

  // Draws outputs until `total` have been drawn.
  void DrawUpTo(int total) {
    for (; draws_ < total; ++draws_) {
      std::vector<int32_t> out;
      int32_t root = kStart;
      while (static_cast<int>(out.size()) < kOutputLen) {
        MakeDraft(shape_, root, draft_rng_, tree_);
        logits_.resize((tree_.size() + 1) * kVocab);
        for (int64_t slot = 0; slot <= tree_.size(); ++slot) {
          const int32_t tok = slot == 0 ? root : tree_.token[slot - 1];
          std::copy(kTargetLogits[tok], kTargetLogits[tok] + kVocab,
                    logits_.begin() + slot * kVocab);
        }
        accept_(tree_, logits_.data(), kVocab, rule_, sampler_, verdict_);
        // Invariant: the accepted nodes form a path from the root.
        for (size_t j = 0; j < verdict_.path.size(); ++j) {
          EXPECT_EQ(tree_.parent[verdict_.path[j]], j == 0 ? -1 : verdict_.path[j - 1]);
        }
        for (int32_t t : verdict_.tokens) out.push_back(t);
        root = verdict_.tokens.back();
      }
      counts_[out[0] * 16 + out[1] * 4 + out[2]]++;
    }
  }

  double PValue() const {
    const std::vector<double> expected = Expected();
    double chi2 = 0;
    int cells = 0;
    for (int i = 0; i < 64; ++i) {
      if (expected[i] <= 0) {
        if (counts_[i] != 0) return 0.0;  // an impossible output was produced
        continue;
      }
      const double e = expected[i] * draws_;
      chi2 += (counts_[i] - e) * (counts_[i] - e) / e;
      ++cells;
    }
    return ChiSquareSf(chi2, cells - 1);
  }

 private:
  static constexpr int32_t kStart = 2;

  // Product of the target's transformed conditionals.
  std::vector<double> Expected() const {
    std::vector<double> expected(64, 0.0);
    std::vector<float> p1, p2, p3;
    Sampler dist(params_, 0);
    dist.Distribution(kTargetLogits[kStart], kVocab, p1);
    for (int a = 0; a < kVocab; ++a) {
      dist.Distribution(kTargetLogits[a], kVocab, p2);
      for (int b = 0; b < kVocab; ++b) {
        dist.Distribution(kTargetLogits[b], kVocab, p3);
        for (int c = 0; c < kVocab; ++c) expected[a * 16 + b * 4 + c] = p1[a] * p2[b] * p3[c];
      }
    }
    return expected;
  }

  VerifyRule rule_;
  DraftShape shape_;
  SamplingParams params_;
  Acceptor accept_;
  Sampler sampler_;
  std::mt19937_64 draft_rng_;
  std::vector<int64_t> counts_;
  int draws_ = 0;
  DraftTree tree_;
  Verdict verdict_;
  std::vector<float> logits_;
};

// Chi-square p-value of the 3-token output distribution over `draws` draws.
double LosslessnessPValue(VerifyRule rule, DraftShape shape, SamplingParams params, uint64_t seed,
                          Acceptor accept = &AcceptTree, int draws = kDraws) {
  OutputSample sample(rule, shape, params, seed, accept);
  sample.DrawUpTo(draws);
  return sample.PValue();
}

// The p-value a negative control checks against `threshold`: the same draws, looked at after
// kDraws/8, /4 and /2, stopping at the first look whose p-value is below threshold / 10; else
// the p-value of all kDraws. A gross fault is caught after an eighth of the draws; a fault the
// full draw detects is still detected; a no-op "fault" would pass the control with probability
// <= 3 x threshold / 10 + threshold.
double FaultPValue(VerifyRule rule, DraftShape shape, SamplingParams params, uint64_t seed,
                   double threshold, Acceptor accept = &AcceptTree) {
  OutputSample sample(rule, shape, params, seed, accept);
  for (int look : {kDraws / 8, kDraws / 4, kDraws / 2}) {
    sample.DrawUpTo(look);
    const double p = sample.PValue();
    if (p < threshold / 10) return p;
  }
  sample.DrawUpTo(kDraws);
  return sample.PValue();
}

constexpr double kAlpha = 1e-4;

// The ATen path's acceptance (harness/engine/device_sampling.h DeviceVerifier) on CPU tensors:
// the rule as TreeVerifier::Verify maps it (the test fault included) through the kernels/ walk
// (its CPU reference here, the CUDA kernel on a GPU).
void AcceptOnDevice(const DraftTree& tree, const float* logits, int64_t vocab, VerifyRule rule,
                    Sampler& sampler, Verdict& verdict) {
  static DeviceVerifier device;
  const at::Tensor rows =
      at::from_blob(const_cast<float*>(logits), {tree.size() + 1, vocab}, at::kFloat);
  const VerifierFault fault = VerifierFaultForTesting();
  int32_t mode = rule == VerifyRule::kSampleFollow ? kSampledFollow : kSampledRejection;
  if (fault == VerifierFault::kGreedyAcceptance) mode = kSampledFollowArgmax;
  if (fault == VerifierFault::kTargetAsResidual && mode == kSampledRejection) {
    mode = kSampledRejectionTargetResidual;
  }
  device.AcceptSampled(tree, rows, mode, sampler, verdict);
  verdict.tokens.clear();
  for (int32_t node : verdict.path) verdict.tokens.push_back(tree.token[node]);
  verdict.tokens.push_back(verdict.bonus);
}

// The device walk repeats the host rules (tested above with kDraws each) through the kernels/
// walk, whose bugs are ones of structure (a wrong slot, residual or descent), caught by far fewer
// draws: 20,000 per rule (the CPU reference of the walk is ~5x slower per draw than AcceptTree;
// this test took 219 s of CI at kDraws, 64-168 s at 40,000). False-failure rate still kAlpha per
// rule; the negative controls below fail at p < 1e-12.
constexpr int kDeviceDraws = 20000;

TEST(DeviceVerifierLossless, EveryRuleOnTheWalkKernel) {
  EXPECT_GT(LosslessnessPValue(VerifyRule::kChainRs, DraftShape::kChain, Temperature(1.0), 21,
                               &AcceptOnDevice, kDeviceDraws),
            kAlpha);
  EXPECT_GT(LosslessnessPValue(VerifyRule::kChainRs, DraftShape::kChain, Temperature(0.7, 3), 22,
                               &AcceptOnDevice, kDeviceDraws),
            kAlpha);
  EXPECT_GT(LosslessnessPValue(VerifyRule::kTreeRrs, DraftShape::kIidTree, Temperature(1.3, 0, 0.8),
                               23, &AcceptOnDevice, kDeviceDraws),
            kAlpha);
  EXPECT_GT(LosslessnessPValue(VerifyRule::kSampleFollow, DraftShape::kArbitraryTree,
                               Temperature(1.0), 24, &AcceptOnDevice, kDeviceDraws),
            kAlpha);
}

TEST(DeviceVerifierLossless, NegativeControlsFailTheSameTest) {
  {
    ScopedVerifierFault fault(VerifierFault::kTargetAsResidual);
    EXPECT_LT(FaultPValue(VerifyRule::kChainRs, DraftShape::kChain, Temperature(1.0), 21, 1e-12,
                          &AcceptOnDevice),
              1e-12);
  }
  ScopedVerifierFault fault(VerifierFault::kGreedyAcceptance);
  EXPECT_LT(FaultPValue(VerifyRule::kSampleFollow, DraftShape::kArbitraryTree, Temperature(1.0), 24,
                        1e-12, &AcceptOnDevice),
            1e-12);
}

TEST(VerifierLossless, ChainRejectionSampling) {
  EXPECT_GT(LosslessnessPValue(VerifyRule::kChainRs, DraftShape::kChain, Temperature(1.0), 11),
            kAlpha);
}

TEST(VerifierLossless, ChainRejectionSamplingTopK) {
  // top-k = 3 and T = 0.7: the target's transformed distribution has zeros; the draft (not
  // transformed) still proposes those tokens.
  EXPECT_GT(LosslessnessPValue(VerifyRule::kChainRs, DraftShape::kChain, Temperature(0.7, 3), 12),
            kAlpha);
}

TEST(VerifierLossless, TreeRecursiveRejectionWithDuplicateSiblings) {
  EXPECT_GT(LosslessnessPValue(VerifyRule::kTreeRrs, DraftShape::kIidTree, Temperature(1.0), 13),
            kAlpha);
}

TEST(VerifierLossless, TreeRecursiveRejectionTopP) {
  EXPECT_GT(
      LosslessnessPValue(VerifyRule::kTreeRrs, DraftShape::kIidTree, Temperature(1.3, 0, 0.8), 14),
      kAlpha);
}

TEST(VerifierLossless, SampleThenFollowAnyTree) {
  EXPECT_GT(LosslessnessPValue(VerifyRule::kSampleFollow, DraftShape::kArbitraryTree,
                               Temperature(1.0), 15),
            kAlpha);
  EXPECT_GT(
      LosslessnessPValue(VerifyRule::kSampleFollow, DraftShape::kIidTree, Temperature(0.8, 2), 16),
      kAlpha);
}

TEST(VerifierLossless, PowerCheckWrongAcceptorFails) {
  // The same test rejects a lossy rule decisively.
  EXPECT_LT(LosslessnessPValue(VerifyRule::kChainRs, DraftShape::kChain, Temperature(1.0), 11,
                               &AcceptEverything),
            1e-12);
}

TEST(Verifier, GreedyFollowsArgmaxAndFirstMatchingChild) {
  // Root children: node 0 (token 1), node 1 (token 3), node 2 (token 3, duplicate); node 3 below
  // node 1 (token 0), node 4 below node 2 (token 2).
  DraftTree tree;
  tree.AddNode(1, -1);
  tree.AddNode(3, -1);
  tree.AddNode(3, -1);
  tree.AddNode(0, 1);
  tree.AddNode(2, 2);
  std::vector<float> logits((tree.size() + 1) * kVocab, 0.f);
  auto set_argmax = [&](int slot, int token) { logits[slot * kVocab + token] = 5.f; };
  set_argmax(0, 3);  // root -> 3: first child with token 3 is node 1
  set_argmax(2, 0);  // node 1 -> 0: node 3
  set_argmax(4, 1);  // node 3 -> 1: no child, bonus 1
  Sampler sampler(Temperature(0.0), 0);
  Verdict verdict;
  AcceptTree(tree, logits.data(), kVocab, VerifyRule::kTreeRrs, sampler, verdict);
  EXPECT_EQ(verdict.path, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(verdict.bonus, 1);
  EXPECT_EQ(verdict.tokens, (std::vector<int32_t>{3, 0, 1}));
}

TEST(Verifier, EmptyTreeIsOneArStep) {
  DraftTree tree;
  std::vector<float> logits = {0.f, 2.f, 1.f, 0.f};
  Sampler sampler(Temperature(0.0), 0);
  Verdict verdict;
  AcceptTree(tree, logits.data(), kVocab, VerifyRule::kChainRs, sampler, verdict);
  EXPECT_TRUE(verdict.path.empty());
  EXPECT_EQ(verdict.tokens, (std::vector<int32_t>{1}));
}

TEST(Verifier, RejectionRulesNeedDraftDistributions) {
  DraftTree tree;
  tree.AddNode(1, -1);
  std::vector<float> logits(2 * kVocab, 0.f);
  Sampler sampler(Temperature(1.0), 0);
  Verdict verdict;
  try {
    AcceptTree(tree, logits.data(), kVocab, VerifyRule::kChainRs, sampler, verdict);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("draft distributions"), std::string::npos) << e.what();
  }
  DraftTree branching;
  branching.AddNode(1, -1);
  branching.AddNode(2, -1);
  branching.vocab = kVocab;
  branching.draft_probs.assign(3 * kVocab, 0.25f);
  std::vector<float> logits3(3 * kVocab, 0.f);
  EXPECT_THROW(
      AcceptTree(branching, logits3.data(), kVocab, VerifyRule::kChainRs, sampler, verdict), Error);
}

TEST(Verifier, ParseRuleNames) {
  EXPECT_EQ(ParseVerifyRule("tree_rrs", "test"), VerifyRule::kTreeRrs);
  EXPECT_THROW(ParseVerifyRule("typical", "test"), Error);
}

}  // namespace
}  // namespace specbed
