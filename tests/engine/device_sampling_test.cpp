// Tests of harness/engine/device_sampling.h on CPU tensors (the ATen path forced on the CPU; a
// GPU runs the same code with the CUDA kernels, tests/methods/aten_path_test.cpp AtenPathCuda):
// SamplingProbs equals Sampler::Distribution row by row (temperature, top-k, top-p, ties,
// greedy, bfloat16 logits); DeviceVerifier::SampleToken draws the tokens the host Sampler draws
// from the same seed (one uniform per token, the same inverse CDF); a sampled verify step reads
// the draft distributions it needs and refuses a tree without them.
// Randomness: fixed seeds (at::manual_seed, Sampler seeds); no statistical test here (the
// chi-square losslessness of DeviceVerifier is in verifier_test.cpp).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "harness/base/error.h"
#include "harness/engine/device_sampling.h"
#include "harness/engine/sampler.h"
#include "kernels/kernel_status.h"
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

}  // namespace
}  // namespace specbed
