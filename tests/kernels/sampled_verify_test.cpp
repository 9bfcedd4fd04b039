// Tests of SampledTreeVerify (kernels/sampled_verify.h): the CPU reference on hand-made walks
// whose outcome follows from the uniforms (accept / reject / residual correction / leaf bonus /
// follow / the negative-control modes), argument errors, and, on a machine with a CUDA device and
// a CUDA build, the CUDA kernel against the CPU reference on random trees in every mode (skipped
// otherwise; failed instead with SPECBED_REQUIRE_CUDA=1). Its losslessness is tested where a
// user relies on it: tests/engine/verifier_test.cpp (DeviceVerifierLossless, chi-square).
// Every random input comes from fixed seeds.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "base/error.h"
#include "kernels/kernel_status.h"
#include "kernels/sampled_verify.h"
#include "tests/common/cuda_test_util.h"

namespace specbed {
namespace {

// One walk's tensors (batch 1 unless built otherwise) and its outputs.
struct Walk {
  at::Tensor probs, q, tokens, parent, u, residual, accepted, n_accepted, bonus;

  Walk(const std::vector<std::vector<float>>& p_rows, const std::vector<std::vector<float>>& q_rows,
       const std::vector<int32_t>& tok, const std::vector<int32_t>& par,
       const std::vector<double>& uniforms) {
    const int64_t n = static_cast<int64_t>(tok.size());
    const int64_t vocab = static_cast<int64_t>(p_rows[0].size());
    probs = Rows(p_rows).view({1, n + 1, vocab});
    if (!q_rows.empty()) q = Rows(q_rows).view({1, n + 1, vocab});
    tokens = at::tensor(std::vector<int32_t>(tok), at::kInt).view({1, n});
    parent = at::tensor(std::vector<int32_t>(par), at::kInt).view({1, n});
    u = at::tensor(std::vector<double>(uniforms), at::kDouble).view({1, n + 1});
    residual = at::zeros({1, vocab}, at::kFloat);
    accepted = at::zeros({1, n}, at::kInt);
    n_accepted = at::zeros({1}, at::kInt);
    bonus = at::zeros({1}, at::kInt);
  }
  static at::Tensor Rows(const std::vector<std::vector<float>>& rows) {
    std::vector<float> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    return at::tensor(flat, at::kFloat);
  }
  void Run(int32_t mode) {
    SampledTreeVerify(probs, q, tokens, parent, u, mode, residual, accepted, n_accepted, bonus);
  }
  std::vector<int32_t> Path() const {
    std::vector<int32_t> path;
    for (int32_t i = 0; i < n_accepted.item<int32_t>(); ++i) {
      path.push_back(accepted[0][i].item<int32_t>());
    }
    return path;
  }
};

// A chain of two nodes (tokens 1, 2) over a 3-token vocabulary.
const std::vector<std::vector<float>> kP = {
    {0.5f, 0.3f, 0.2f}, {0.2f, 0.2f, 0.6f}, {0.1f, 0.1f, 0.8f}};
const std::vector<std::vector<float>> kQ = {
    {0.0f, 0.6f, 0.4f}, {0.0f, 0.1f, 0.9f}, {0.3f, 0.3f, 0.4f}};

TEST(SampledVerify, RejectionAcceptsWhenUTimesQIsBelowPThenDrawsTheBonusAtTheLeaf) {
  // slot 0: u 0.4 * q(1) 0.6 = 0.24 < p(1) 0.3 -> accept node 0; slot 1: 0.5 * 0.9 < 0.6 ->
  // accept node 1; leaf: bonus drawn from p row 2 with u 0.95 -> token 2.
  Walk w(kP, kQ, {1, 2}, {-1, 0}, {0.4, 0.5, 0.95});
  w.Run(kSampledRejection);
  EXPECT_EQ(w.Path(), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(w.bonus.item<int32_t>(), 2);
}

TEST(SampledVerify, RejectionCorrectsFromTheResidual) {
  // slot 0: 0.9 * 0.6 = 0.54 >= 0.3 -> reject; residual max(p - q, 0) = (0.5, 0, 0) -> token 0
  // whatever the uniform. Under the target-residual control the draw reads p: u 0.9 -> token 2.
  Walk w(kP, kQ, {1, 2}, {-1, 0}, {0.9, 0.9, 0.0});
  w.Run(kSampledRejection);
  EXPECT_TRUE(w.Path().empty());
  EXPECT_EQ(w.bonus.item<int32_t>(), 0);
  w.Run(kSampledRejectionTargetResidual);
  EXPECT_EQ(w.bonus.item<int32_t>(), 2);
}

TEST(SampledVerify, RejectionTriesSiblingsInIndexOrderAgainstTheResidual) {
  // Root children: node 0 (token 1), node 1 (token 0). Node 0 is rejected (0.9 * 0.6 >= 0.3);
  // the residual is (1, 0, 0) and q(0) = 0, so node 1 is accepted whatever its uniform.
  Walk w(kP, kQ, {1, 0}, {-1, -1}, {0.9, 0.99, 0.05});
  w.Run(kSampledRejection);
  EXPECT_EQ(w.Path(), (std::vector<int32_t>{1}));
  EXPECT_EQ(w.bonus.item<int32_t>(), 0);  // leaf node 1: p row 2 with u 0.05 -> token 0
}

TEST(SampledVerify, FollowDrawsTheTargetTokenAndDescendsIntoTheFirstChildCarryingIt) {
  // slot 0: u 0.6 on (0.5, 0.3, 0.2) -> token 1 = node 0; slot 1: u 0.1 -> token 0, no child
  // carries it -> bonus 0. No draft distributions needed.
  Walk w(kP, {}, {1, 2}, {-1, 0}, {0.6, 0.1, 0.7});
  w.Run(kSampledFollow);
  EXPECT_EQ(w.Path(), (std::vector<int32_t>{0}));
  EXPECT_EQ(w.bonus.item<int32_t>(), 0);
  // The argmax control: slot 0's argmax is token 0, no child carries it; bonus drawn with u 0.6.
  w.Run(kSampledFollowArgmax);
  EXPECT_TRUE(w.Path().empty());
  EXPECT_EQ(w.bonus.item<int32_t>(), 1);
}

TEST(SampledVerify, EmptyTreeIsOneDrawAndRoundingPastTheTotalTakesTheLastPositiveEntry) {
  Walk w({{0.25f, 0.5f, 0.25f, 0.0f}}, {}, {}, {}, {0.3});
  w.Run(kSampledFollow);
  EXPECT_EQ(w.bonus.item<int32_t>(), 1);
  Walk past({{0.2f, 0.3f, 0.0f}}, {}, {}, {}, {0.999});  // mass 0.5 < u
  past.Run(kSampledRejection);
  EXPECT_EQ(past.bonus.item<int32_t>(), 1);
}

TEST(SampledVerify, RejectsBadArguments) {
  Walk w(kP, kQ, {1, 2}, {-1, 0}, {0.4, 0.5, 0.95});
  EXPECT_THROW(w.Run(7), Error);  // no such mode
  Walk no_q(kP, {}, {1, 2}, {-1, 0}, {0.4, 0.5, 0.95});
  EXPECT_THROW(no_q.Run(kSampledRejection), Error);  // rejection needs draft_probs
  Walk bad_parent(kP, kQ, {1, 2}, {-1, 1}, {0.4, 0.5, 0.95});
  EXPECT_THROW(bad_parent.Run(kSampledRejection), Error);
  Walk float_u(kP, kQ, {1, 2}, {-1, 0}, {0.4, 0.5, 0.95});
  float_u.u = float_u.u.to(at::kFloat);
  EXPECT_THROW(float_u.Run(kSampledRejection), Error);
}

// Random walks for the CUDA comparison: softmax rows with some exact zeros, random trees.
struct RandomWalk {
  at::Tensor probs, q, tokens, parent, u;
};

RandomWalk MakeRandomWalk(std::mt19937_64& rng, int64_t batch, int64_t n, int64_t vocab) {
  RandomWalk w;
  w.probs = at::softmax(at::randn({batch, n + 1, vocab}, at::kFloat) * 3.0, -1);
  w.probs = w.probs * (at::rand({batch, n + 1, vocab}) > 0.2);
  w.probs = w.probs / w.probs.sum(-1, true);
  w.q = at::softmax(at::randn({batch, n + 1, vocab}, at::kFloat) * 3.0, -1);
  std::vector<int32_t> tok(batch * n), par(batch * n);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      // Few distinct tokens so that acceptance and follow both happen often.
      tok[b * n + i] = static_cast<int32_t>(rng() % std::min<int64_t>(vocab, 4));
      par[b * n + i] = i == 0 ? -1 : static_cast<int32_t>(rng() % (i + 1)) - 1;
    }
  }
  w.tokens = at::tensor(tok, at::kInt).view({batch, n});
  w.parent = at::tensor(par, at::kInt).view({batch, n});
  w.u = at::rand({batch, n + 1}, at::kDouble);
  return w;
}

TEST(SampledVerifyCuda, MatchesCpuReferenceOnRandomTreesInEveryMode) {
  SPECBED_SKIP_WITHOUT_CUDA_KERNELS();
  at::manual_seed(555);
  std::mt19937_64 rng(555);
  for (int64_t batch : {1, 3}) {
    for (int64_t n : {0, 1, 7, 63}) {
      for (int64_t vocab : {111, 32000}) {
        for (int32_t mode : {kSampledRejection, kSampledFollow, kSampledFollowArgmax,
                             kSampledRejectionTargetResidual}) {
          SCOPED_TRACE(testing::Message() << "batch " << batch << " n " << n << " vocab " << vocab
                                          << " mode " << mode);
          const RandomWalk w = MakeRandomWalk(rng, batch, n, vocab);
          auto run = [&](const at::Device& d) {
            const at::TensorOptions i32 = at::TensorOptions(at::kInt).device(d);
            at::Tensor acc = at::empty({batch, n}, i32), count = at::empty({batch}, i32),
                       bonus = at::empty({batch}, i32);
            SampledTreeVerify(w.probs.to(d), w.q.to(d), w.tokens.to(d), w.parent.to(d), w.u.to(d),
                              mode, at::empty({batch, vocab}, w.probs.options().device(d)), acc,
                              count, bonus);
            return at::cat({acc.cpu().view({-1}), count.cpu(), bonus.cpu()});
          };
          EXPECT_TRUE(at::equal(run(at::kCUDA), run(at::kCPU)));
        }
      }
    }
  }
}

}  // namespace
}  // namespace specbed
