// The learned parts outside the HF layout that read hidden states, padded for a cost twin
// (HradTwin, LtdClassifierTwin; models/twin/cost_twin.h PadInputBlocks): on the twin's features
// (the original's in the first dims of each block, zeros after) they compute exactly what the
// original computes on the original features; a misplaced block does not. Disco and C2T read
// tree statistics and come back unchanged. The specbranch factory accepts a twin predictor on a
// target whose feature depth is the predictor's (the end-to-end run on a twin is
// tests/cli/gpu_check_test.sh).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <random>
#include <vector>

#include "base/error.h"
#include "base/paths.h"
#include "methods/ltd/ltd_classifiers.h"
#include "methods/specbranch/hrad.h"
#include "models/twin/cost_twin.h"

namespace specbed {
namespace {

constexpr int64_t kFactor = 4;

// z with every `block` values followed by (factor - 1) * block zeros; `shift` moves each block
// by that many slots inside its padded block (a negative control).
std::vector<float> PadBlocks(const std::vector<float>& z, int64_t block, int64_t shift = 0) {
  std::vector<float> out(z.size() * kFactor, 0.f);
  for (size_t i = 0; i < z.size(); ++i) {
    const int64_t b = static_cast<int64_t>(i) / block, j = static_cast<int64_t>(i) % block;
    out[b * block * kFactor + j + shift] = z[i];
  }
  return out;
}

std::vector<float> RandomFeatures(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> z(n);
  for (float& v : z) v = normal(rng);
  return z;
}

TEST(TwinPredictors, HradTwinClassifiesThePaddedFeaturesExactly) {
  const HradCheckpoint original = LoadHradCheckpoint(SpecBedHome() + "/models/stories260K/hrad");
  const HradCheckpoint twin = HradTwin(original, kFactor);
  EXPECT_EQ(twin.config.target_dim, original.config.target_dim * kFactor);
  EXPECT_EQ(twin.config.target_layers, original.config.target_layers);  // the feature depth
  EXPECT_EQ(twin.config.Layers(), original.config.Layers());
  HradPredictor small(original.config, original.tensors), big(twin.config, twin.tensors);
  int64_t differ = 0;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    const std::vector<float> z = RandomFeatures(original.config.input_dim(), seed);
    const std::vector<float> padded = PadBlocks(z, original.config.target_dim);
    ASSERT_EQ(static_cast<int64_t>(padded.size()), twin.config.input_dim());
    EXPECT_EQ(small.Classify(z), big.Classify(padded));
    for (size_t c = 0; c < small.logits().size(); ++c) {
      EXPECT_NEAR(small.logits()[c], big.logits()[c], 1e-5) << seed;
    }
    // Negative control: the blocks one slot off change the logits.
    big.Classify(PadBlocks(z, original.config.target_dim, /*shift=*/1));
    differ += std::abs(big.logits()[0] - small.logits()[0]) > 1e-3 ? 1 : 0;
  }
  EXPECT_GT(differ, 8);
}

TEST(TwinPredictors, SpecDecTwinScoresThePaddedHiddenExactlyAndTheOthersAreKept) {
  const std::string dir = SpecBedHome() + "/models/stories260K/ltd-baselines";
  const LtdClassifierCheckpoint original = LoadLtdClassifier(dir + "/specdecpp");
  const LtdClassifierCheckpoint twin = LtdClassifierTwin(original, kFactor);
  const int64_t d = original.config.input_dim;
  ASSERT_EQ(twin.config.input_dim, d * kFactor);
  const std::vector<float> z = RandomFeatures(8 * d, 3);
  std::vector<float> padded, shifted;
  for (int64_t r = 0; r < 8; ++r) {
    const std::vector<float> row(z.begin() + r * d, z.begin() + (r + 1) * d);
    const std::vector<float> p = PadBlocks(row, d), q = PadBlocks(row, d, 1);
    padded.insert(padded.end(), p.begin(), p.end());
    shifted.insert(shifted.end(), q.begin(), q.end());
  }
  const at::Tensor small = LtdClassifierLogits(original.config, original.tensors,
                                               at::from_blob((void*)z.data(), {8, d}).clone());
  const at::Tensor big = LtdClassifierLogits(
      twin.config, twin.tensors, at::from_blob((void*)padded.data(), {8, d * kFactor}).clone());
  EXPECT_LT((small - big).abs().max().item<float>(), 1e-5);
  const at::Tensor off = LtdClassifierLogits(
      twin.config, twin.tensors, at::from_blob((void*)shifted.data(), {8, d * kFactor}).clone());
  EXPECT_GT((small - off).abs().max().item<float>(), 1e-3);  // negative control
  for (const char* kind : {"disco", "c2t"}) {
    const LtdClassifierCheckpoint kept = LoadLtdClassifier(dir + "/" + kind);
    const LtdClassifierCheckpoint same = LtdClassifierTwin(kept, kFactor);
    EXPECT_EQ(same.config.input_dim, kept.config.input_dim) << kind;
    for (const auto& [name, t] : kept.tensors) EXPECT_TRUE(t.equal(same.tensors.at(name))) << name;
  }
}

TEST(TwinPredictors, PadInputBlocksRefusesAWeightThatIsNotBlocks) {
  EXPECT_THROW(PadInputBlocks(at::zeros({3, 10}), 4, 8), Error);
  EXPECT_THROW(PadInputBlocks(at::zeros({3, 8}), 4, 2), Error);
  const at::Tensor w = at::arange(8, at::kFloat).view({1, 8});
  const at::Tensor p = PadInputBlocks(w, 4, 6);
  EXPECT_TRUE(p.equal(
      at::tensor({0.f, 1.f, 2.f, 3.f, 0.f, 0.f, 4.f, 5.f, 6.f, 7.f, 0.f, 0.f}).view({1, 12})));
}

}  // namespace
}  // namespace specbed
