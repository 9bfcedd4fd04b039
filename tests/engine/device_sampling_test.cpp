// Tests of harness/engine/device_sampling.h on CPU tensors (the ATen path forced on the CPU; a
// GPU runs the same code with the CUDA kernels, tests/methods/aten_path_test.cpp AtenPathCuda):
// SamplingProbs equals Sampler::Distribution row by row (temperature, top-k, top-p, ties,
// greedy, bfloat16 logits); DeviceVerifier::SampleToken draws the tokens the host Sampler draws
// from the same seed (one uniform per token, the same inverse CDF); a sampled verify step reads
// the draft distributions it needs and refuses a tree without them; the walk's inputs staged in
// the forward's upload give the uploaded walk's verdict.
// Randomness: fixed seeds (at::manual_seed, Sampler seeds); no statistical test here (the
// chi-square losslessness of DeviceVerifier is in verifier_test.cpp).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "base/error.h"
#include "harness/engine/device_sampling.h"
#include "harness/engine/sampler.h"
#include "harness/engine/verifier.h"
#include "kernels/kernel_status.h"
#include "methods/common/tree_builders.h"
#include "models/op_trace.h"
#include "tests/engine/engine_test_util.h"

namespace specbed {
namespace {

SamplingParams Params(double t, int64_t top_k = 0, double top_p = 1.0) {
  return testing_util::Temperature(t, top_k, top_p);
}

void ExpectSameAsHostSampler(const at::Tensor& logits, const SamplingParams& params) {
  const at::Tensor probs = SamplingProbs(logits, params);
  const at::Tensor host = logits.to(at::kFloat).contiguous();
  ASSERT_EQ(probs.scalar_type(), at::kFloat);
  Sampler sampler(params, 0);
  std::vector<float> expected;
  for (int64_t r = 0; r < logits.size(0); ++r) {
    sampler.Distribution(host[r].data_ptr<float>(), logits.size(1), expected);
    const at::Tensor want = at::tensor(expected, at::kFloat);
    EXPECT_LE((probs[r] - want).abs().max().item<float>(), 1e-6f)
        << "row " << r << " T " << params.temperature << " top_k " << params.top_k << " top_p "
        << params.top_p;
    // The same support: a token kept on one side and dropped on the other is a different rule.
    EXPECT_TRUE(at::equal(probs[r] > 0, want > 0)) << "row " << r;
  }
}

TEST(SamplingProbs, EqualsTheHostSamplersDistributionRowByRow) {
  at::manual_seed(7);
  at::Tensor logits = at::randn({6, 50}) * 2.0;
  logits[1].fill_(0.5);                   // all ties
  logits[2].narrow(0, 10, 5).fill_(3.0);  // a tie at the top
  for (const SamplingParams& p :
       {Params(1.0), Params(0.7), Params(1.0, 5), Params(1.2, 0, 0.8), Params(0.9, 7, 0.6),
        Params(1.0, 1), Params(0.0), Params(1.0, 50, 1.0)}) {
    ExpectSameAsHostSampler(logits, p);
  }
  ExpectSameAsHostSampler(logits.to(at::kBFloat16), Params(0.8, 10, 0.9));
}

TEST(DeviceVerifier, SampleTokenDrawsTheTokensOfTheHostSamplerFromTheSameSeed) {
  at::manual_seed(11);
  const at::Tensor logits = at::randn({1, 64}) * 1.5;
  for (const SamplingParams& p : {Params(1.0), Params(0.8, 8), Params(1.1, 0, 0.7), Params(0.0)}) {
    Sampler host(p, 99), device_side(p, 99);
    DeviceVerifier device;
    for (int i = 0; i < 500; ++i) {
      ASSERT_EQ(device.SampleToken(logits, device_side), host.Sample(logits.data_ptr<float>(), 64))
          << "draw " << i << " T " << p.temperature;
    }
  }
}

TEST(DeviceVerifier, SampledRejectionNeedsTheDraftDistributions) {
  DraftTree tree;
  tree.AddNode(3, -1);
  const at::Tensor logits = at::zeros({2, 8});
  Sampler sampler(Params(1.0), 1);
  Verdict verdict;
  DeviceVerifier device;
  EXPECT_THROW(device.AcceptSampled(tree, logits, kSampledRejection, sampler, verdict), Error);
  device.AcceptSampled(tree, logits, kSampledFollow, sampler, verdict);  // needs none
  EXPECT_LE(verdict.path.size(), 1u);
  tree.ResizeDraftProbs(8);
  for (int64_t s = 0; s < 2; ++s)
    std::fill(tree.DraftProbsRow(s), tree.DraftProbsRow(s) + 8, 0.125f);
  // Uniform target and draft: every drafted token is accepted (u * 1/8 < 1/8 for u < 1).
  device.AcceptSampled(tree, logits, kSampledRejection, sampler, verdict);
  EXPECT_EQ(verdict.path, (std::vector<int32_t>{0}));
}

TEST(SamplingProbs, IntoBuffersEqualsSamplingProbsAndAllocatesNothingWithoutTruncation) {
  at::manual_seed(3);
  const at::Tensor logits = at::randn({5, 40}) * 2.0;
  const at::Tensor out = at::empty({5, 40}), scratch = at::empty({5, 40});
  for (const SamplingParams& p : {Params(1.0), Params(0.6), Params(1.0, 4), Params(0.8, 0, 0.7)}) {
    SamplingProbsInto(logits, p, scratch, out);
    EXPECT_TRUE(at::allclose(out, SamplingProbs(logits, p), 0.0, 1e-7)) << p.temperature;
  }
  SamplingProbsInto(logits.to(at::kBFloat16), Params(0.9), scratch, out);
  EXPECT_TRUE(at::allclose(out, SamplingProbs(logits.to(at::kBFloat16), Params(0.9)), 0.0, 1e-7));
  AllocationCount counting;
  for (int i = 0; i < 4; ++i) SamplingProbsInto(logits, Params(0.7), scratch, out);
  EXPECT_EQ(counting.count(), 0) << "temperature only: no storage allocated";
  EXPECT_THROW(SamplingProbsInto(logits, Params(1.0), scratch.narrow(0, 0, 4), out), Error);
}

// Chain rows drawn one at a time (feeding `ids`, as a draft chain does) and a block drawn at once
// both draw the tokens SampleFromProbs draws from the same seed, from the host sampler's
// distributions, which they keep (row n zero).
TEST(DeviceDraftSampler, DrawsTheHostSamplersTokensAndKeepsTheirDistributions) {
  at::manual_seed(5);
  const int64_t n = 6, vocab = 48;
  const at::Tensor logits = at::randn({n, vocab}) * 1.5;
  for (const SamplingParams& p : {Params(1.0), Params(0.7, 6), Params(1.2, 0, 0.8)}) {
    for (uint64_t seed : {1u, 2u, 3u, 4u}) {
      Sampler host(p, seed), chain_side(p, seed), block_side(p, seed);
      std::vector<float> row;
      std::vector<int32_t> want;
      DeviceDraftSampler chain, block;
      chain.Begin(n, vocab, at::kCPU, chain_side.rng());
      block.Begin(n, vocab, at::kCPU, block_side.rng());
      const at::Tensor ids = at::empty({n}, at::kLong);
      for (int64_t i = 0; i < n; ++i) {
        host.Distribution(logits[i].data_ptr<float>(), vocab, row);
        want.push_back(SampleFromProbs(row.data(), vocab, host.rng()));
        chain.Sample(logits.narrow(0, i, 1), p, i, ids.narrow(0, i, 1));
        EXPECT_LE((chain.probs()[i] - at::tensor(row)).abs().max().item<float>(), 1e-6f);
      }
      block.Sample(logits, p, 0);
      const at::Tensor a = chain.TokensToHost(), b = block.TokensToHost();
      EXPECT_EQ(std::vector<int32_t>(a.data_ptr<int32_t>(), a.data_ptr<int32_t>() + n), want)
          << "seed " << seed << " T " << p.temperature;
      EXPECT_TRUE(at::equal(a, b));
      EXPECT_TRUE(at::equal(ids, a.to(at::kLong)));
      EXPECT_EQ(chain.probs()[n].abs().sum().item<float>(), 0.f);
      EXPECT_TRUE(at::equal(chain.probs().narrow(0, 0, n + 1), block.probs().narrow(0, 0, n + 1)));
    }
  }
  DeviceDraftSampler sampler;
  Sampler s(Params(1.0), 1);
  sampler.Begin(2, vocab, at::kCPU, s.rng());
  EXPECT_THROW(sampler.Sample(logits.narrow(0, 0, 3), Params(1.0), 0), Error);  // past row n
  EXPECT_THROW(sampler.Begin(0, vocab, at::kCPU, s.rng()), Error);
}

// The tree's rows as a device tensor with spare rows (a drafter's buffer), host rows cleared.
DraftTree WithDeviceRows(const DraftTree& host_tree, at::Tensor& rows) {
  const int64_t n = host_tree.size(), vocab = host_tree.vocab;
  rows = at::zeros({n + 3, vocab});
  rows.narrow(0, 0, n + 1)
      .copy_(at::from_blob(const_cast<float*>(host_tree.draft_probs.data()), {n + 1, vocab},
                           at::kFloat));
  DraftTree tree = host_tree;
  tree.draft_probs.clear();
  tree.draft_probs_device = &rows;
  return tree;
}

TEST(DeviceVerifier, DraftRowsLeftOnTheDeviceGiveTheVerdictOfTheSameRowsOnTheHost) {
  const int64_t vocab = 12;
  at::manual_seed(9);
  RandomTreeOptions options;
  options.with_draft_probs = true;
  options.duplicate_sibling_prob = 0.3;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    const DraftTree host_tree = RandomTree(7, vocab, seed, options);
    at::Tensor rows;
    const DraftTree device_tree = WithDeviceRows(host_tree, rows);
    EXPECT_TRUE(device_tree.has_draft_probs());
    device_tree.ValidateStructure(vocab);
    const at::Tensor logits = at::randn({8, vocab});
    Sampler a(Params(1.0), seed), b(Params(1.0), seed), c(Params(1.0), seed), d(Params(1.0), seed);
    Verdict va, vb, vc, vd;
    DeviceVerifier device;
    device.AcceptSampled(host_tree, logits, kSampledRejection, a, va);
    device.AcceptSampled(device_tree, logits, kSampledRejection, b, vb);
    EXPECT_EQ(va.path, vb.path) << "seed " << seed;
    EXPECT_EQ(va.bonus, vb.bonus) << "seed " << seed;
    AcceptTree(host_tree, logits.data_ptr<float>(), vocab, VerifyRule::kTreeRrs, c, vc);
    AcceptTree(device_tree, logits.data_ptr<float>(), vocab, VerifyRule::kTreeRrs, d, vd);
    EXPECT_EQ(vc.path, vd.path) << "seed " << seed;
    EXPECT_EQ(vc.bonus, vd.bonus) << "seed " << seed;
  }
}

// The walk's inputs carried in the forward's upload (StageTree, ForwardOutput::staged_extra) give
// the verdict the walk's own upload gives, with the same uniforms drawn (greedy, sample-follow
// and rejection walks of random trees).
TEST(DeviceVerifier, StagedTreeAndUniformsGiveTheUploadedVerdict) {
  const int64_t vocab = 9;
  RandomTreeOptions options;
  options.with_draft_probs = true;
  int64_t accepted = 0;
  for (uint64_t seed = 0; seed < 45; ++seed) {
    const DraftTree tree = RandomTree(1 + seed % 11, vocab, seed, options);
    at::manual_seed(seed);
    const at::Tensor logits = at::randn({tree.size() + 1, vocab}) * 2;
    const double t = seed % 3 == 0 ? 0.0 : 1.0;
    const int32_t mode = seed % 3 == 1 ? kSampledFollow : kSampledRejection;
    Sampler a(Params(t), seed), b(Params(t), seed);
    Verdict staged, uploaded;
    DeviceVerifier with_staging, without;
    const at::Tensor in = with_staging.StageTree(tree, 17, t == 0.0 ? nullptr : &a);
    ASSERT_EQ(in.numel(), t == 0.0 ? 2 * tree.size() + 1 : 3 * tree.size() + 2);
    if (t == 0.0) {
      with_staging.AcceptGreedy(tree, logits, staged, {}, in.clone());
      without.AcceptGreedy(tree, logits, uploaded);
    } else {
      with_staging.AcceptSampled(tree, logits, mode, a, staged, {}, in.clone());
      without.AcceptSampled(tree, logits, mode, b, uploaded);
    }
    EXPECT_EQ(staged.path, uploaded.path) << "seed " << seed;
    EXPECT_EQ(staged.bonus, uploaded.bonus) << "seed " << seed;
    EXPECT_EQ(a.rng()(), b.rng()()) << "seed " << seed << ": another number of uniforms drawn";
    accepted += static_cast<int64_t>(staged.path.size());
  }
  EXPECT_GT(accepted, 10);
}

// The rows hidden states are gathered by after a walk come from the verdict on the device: the
// root's row, then 1 + each accepted node, for greedy and sampled walks of random trees.
TEST(DeviceVerifier, PathSlotsAreTheRootAndTheAcceptedRows) {
  const int64_t vocab = 6;
  RandomTreeOptions options;
  options.with_draft_probs = true;
  int64_t accepted_somewhere = 0;
  for (uint64_t seed = 0; seed < 30; ++seed) {
    const DraftTree tree = RandomTree(9, vocab, seed, options);
    at::manual_seed(seed);
    const at::Tensor logits = at::randn({10, vocab}) * 3;
    Sampler sampler(Params(seed % 2 == 0 ? 0.0 : 1.0), seed);
    Verdict verdict;
    DeviceVerifier device;
    if (seed % 2 == 0) {
      device.AcceptGreedy(tree, logits, verdict);
    } else {
      device.AcceptSampled(tree, logits, kSampledRejection, sampler, verdict);
    }
    const int64_t k = static_cast<int64_t>(verdict.path.size());
    accepted_somewhere += k;
    std::vector<int32_t> expected = {0};
    for (int32_t node : verdict.path) expected.push_back(node + 1);
    const at::Tensor slots = device.PathSlots(tree.size(), k);
    ASSERT_EQ(slots.scalar_type(), at::kInt);
    EXPECT_EQ(std::vector<int32_t>(slots.data_ptr<int32_t>(), slots.data_ptr<int32_t>() + k + 1),
              expected)
        << "seed " << seed;
  }
  EXPECT_GT(accepted_somewhere, 0);  // some walk went past the root
  DeviceVerifier fresh;
  EXPECT_THROW(fresh.PathSlots(3, 1), Error);
}

TEST(DeviceVerifier, RefusesDeviceDraftRowsOfTheWrongShapeOrTwoForms) {
  RandomTreeOptions options;
  options.with_draft_probs = true;
  const DraftTree host_tree = RandomTree(3, 8, 1, options);
  at::Tensor rows;
  DraftTree tree = WithDeviceRows(host_tree, rows);
  const at::Tensor logits = at::zeros({4, 8});
  Sampler sampler(Params(1.0), 1);
  Verdict verdict;
  DeviceVerifier device;
  at::Tensor narrow = at::zeros({4, 7});  // a row length other than the vocabulary
  tree.draft_probs_device = &narrow;
  EXPECT_THROW(device.AcceptSampled(tree, logits, kSampledRejection, sampler, verdict), Error);
  at::Tensor doubles = rows.to(at::kDouble);
  tree.draft_probs_device = &doubles;
  EXPECT_THROW(device.AcceptSampled(tree, logits, kSampledRejection, sampler, verdict), Error);
  tree.draft_probs_device = &rows;
  tree.draft_probs = host_tree.draft_probs;  // both forms: which one is meant?
  EXPECT_THROW(tree.ValidateStructure(8), Error);
  tree.Clear();
  EXPECT_EQ(tree.draft_probs_device, nullptr);
  EXPECT_FALSE(tree.has_draft_probs());
}

}  // namespace
}  // namespace specbed
