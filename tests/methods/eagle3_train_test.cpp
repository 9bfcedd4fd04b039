// Tests of EAGLE-3 training: the unrolled TTT forward (TrainableEagle3) against the inference head
// (Eagle3Head) run the way the drafter runs it (context rows, then tree nodes with an explicit
// ancestor mask), the TTT loss against a plain-loop version, and `TrainEagle3` end to end on a
// tiny regen file of stories260K (loss goes down, resume, the checkpoint loads in the published
// layout). All inputs are seeded and single-threaded CPU ops are deterministic: false-failure
// rate 0.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "base/error.h"
#include "methods/common/train/regen.h"
#include "methods/eagle3/eagle3_checkpoint.h"
#include "methods/eagle3/eagle3_head.h"
#include "methods/eagle3/eagle3_trainer.h"
#include "methods/eagle3/trainable_eagle3.h"
#include "tests/methods/train_smoke_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using testing_util::TestName;

Eagle3Config SmallConfig() {
  Eagle3Config c;
  c.hidden_size = 32;
  c.intermediate_size = 80;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 12;  // n_heads * head_dim != hidden
  c.target_hidden_size = 24;
  c.vocab_size = 50;
  c.draft_vocab_size = 30;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.aux_layer_ids = {1, 2, 3};
  return c;
}

at::Tensor Randn(std::vector<int64_t> shape, uint64_t seed) {
  at::manual_seed(static_cast<int64_t>(seed));
  return at::randn(shape);
}

TEST(TrainableEagle3Test, UnrolledStepsMatchTheInferenceHeadOnTreeNodes) {
  at::set_num_threads(1);
  const Eagle3Config c = SmallConfig();
  auto tensors = RandomEagle3Tensors(c, 7);
  // Larger weights than the 0.02 init so that mistakes are visible in the outputs.
  for (auto& [name, t] : tensors) {
    if (t.is_floating_point() && t.dim() == 2) t = t * 10;
  }
  const at::Tensor embedding = Randn({c.vocab_size, c.hidden_size}, 3);
  const int64_t t_len = 9, unroll = 3;
  const at::Tensor aux = Randn({1, t_len, c.fc_in_dim()}, 5);
  at::Tensor tokens = at::randint(c.vocab_size, {1, t_len}, at::kLong);
  TrainableEagle3 model(c, tensors, embedding);
  std::vector<at::Tensor> logits;
  {
    at::NoGradGuard no_grad;
    logits = model.Forward(aux, tokens, unroll);
  }
  ASSERT_EQ(logits.size(), 3u);
  ASSERT_EQ(logits[0].sizes(), (std::vector<int64_t>{1, t_len, c.draft_vocab_size}));

  Eagle3Head head(c, tensors, embedding);
  Eagle3HeadOutput out;
  const int64_t n_ctx = t_len - 1;  // rows 0..T-2 (row T-1 would need token T)
  std::vector<int32_t> ctx_tokens(n_ctx);
  for (int64_t i = 0; i < n_ctx; ++i)
    ctx_tokens[i] = static_cast<int32_t>(tokens[0][i + 1].item<int64_t>());
  const at::Tensor aux_c = aux.contiguous();
  auto max_diff = [&](const float* row, const at::Tensor& ref) {
    double d = 0;
    for (int64_t v = 0; v < c.draft_vocab_size; ++v) {
      d = std::max(d, std::abs(static_cast<double>(row[v]) - ref[v].item<double>()));
    }
    return d;
  };
  for (int64_t t : {0, 3, 5}) {
    head.ResetCache(32);
    head.Forward(aux_c.data_ptr<float>(), c.fc_in_dim(), ctx_tokens.data(), nullptr, n_ctx, nullptr,
                 out);
    for (int64_t i = 0; i < n_ctx; ++i) {
      EXPECT_LT(max_diff(out.logits_row(i), logits[0][0][i]), 1e-4) << "step 0 row " << i;
    }
    std::vector<float> feature(out.hidden_row(t), out.hidden_row(t) + c.hidden_size);
    std::vector<int64_t> slots;  // cache slots of the chain's earlier nodes
    for (int64_t k = 1; k < unroll && t + 1 + k < t_len; ++k) {
      const int64_t len = head.cache_length();
      std::vector<uint8_t> mask(len + 1, 0);
      for (int64_t j = 0; j <= t; ++j) mask[j] = 1;  // context rows <= t only
      for (int64_t s : slots) mask[s] = 1;
      mask[len] = 1;
      const int32_t token = static_cast<int32_t>(tokens[0][t + 1 + k].item<int64_t>());
      const int64_t position = t + k;
      head.Forward(feature.data(), c.hidden_size, &token, &position, 1, mask.data(), out);
      EXPECT_LT(max_diff(out.logits_row(0), logits[k][0][t]), 1e-4) << "step " << k << " row " << t;
      slots.push_back(len);
      feature.assign(out.hidden_row(0), out.hidden_row(0) + c.hidden_size);
    }
  }
}

TEST(TrainableEagle3Test, ToPlacesParametersAsLeavesAndKeepsCpuTensors) {
  at::set_num_threads(1);
  const Eagle3Config c = SmallConfig();
  const auto tensors = RandomEagle3Tensors(c, 7);
  const at::Tensor embedding = Randn({c.vocab_size, c.hidden_size}, 3);
  TrainableEagle3 model(c, tensors, embedding);
  const TrainableEagle3 same(c, tensors, embedding);
  std::vector<at::Tensor> before;
  for (const auto& [name, p] : model.named_parameters()) before.push_back(p);
  model.To(at::kCPU);  // already there: the very same tensors
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(model.named_parameters()[i].second.is_same(before[i]));
  }
  const at::Tensor aux = Randn({2, 6, c.fc_in_dim()}, 5);
  const at::Tensor tokens = at::randint(c.vocab_size, {2, 6}, at::kLong);
  const auto a = model.Forward(aux, tokens, 2), b = same.Forward(aux, tokens, 2);
  for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(at::equal(a[k], b[k])) << k;
  // A real move (the meta device exists in every LibTorch build): new leaves, same shapes; the
  // vocabulary maps move too, and host inputs are refused.
  model.To(at::Device(at::kMeta));
  EXPECT_EQ(model.device(), at::Device(at::kMeta));
  EXPECT_TRUE(model.draft_ids().is_meta() && model.t2d().is_meta());
  for (size_t i = 0; i < before.size(); ++i) {
    const at::Tensor& p = model.named_parameters()[i].second;
    EXPECT_TRUE(p.is_meta() && p.is_leaf() && p.requires_grad()) << i;
    EXPECT_EQ(p.sizes(), before[i].sizes());
  }
  EXPECT_THROW(model.Forward(aux, tokens, 2), Error);
}

TEST(TrainableEagle3Test, TttLossMatchesPlainLoops) {
  const int64_t b = 2, t = 5, v = 7, vd = 4;
  const at::Tensor target = Randn({b, t, v}, 11);
  const std::vector<at::Tensor> logits = {Randn({b, t, vd}, 12), Randn({b, t, vd}, 13)};
  at::Tensor mask = at::ones({b, t});
  mask[1][2] = 0;
  const at::Tensor draft_ids = at::tensor({0, 2, 3, 6}, at::kLong);
  at::Tensor t2d = at::zeros({v}, at::kBool);
  for (int64_t id : {0, 2, 3, 6}) t2d[id] = true;
  const double decay = 0.8;
  const TttLossResult r = Eagle3TttLoss(logits, target, mask, draft_ids, t2d, decay);
  const TttLossResult all =
      Eagle3TttLoss(logits, target, mask, draft_ids, t2d, decay, TttLossNorm::kAllPositions);
  double expected = 0, expected_all = 0;
  for (int64_t k = 0; k < 2; ++k) {
    double sum = 0, count = 0;
    for (int64_t bi = 0; bi < b; ++bi) {
      for (int64_t ti = 0; ti < t; ++ti) {
        const int64_t p = ti + 1 + k;
        if (p >= t || mask[bi][p].item<float>() == 0) continue;
        int64_t arg = 0;
        for (int64_t x = 1; x < v; ++x) {
          if (target[bi][p][x].item<float>() > target[bi][p][arg].item<float>()) arg = x;
        }
        if (!t2d[arg].item<bool>()) continue;
        double zt = 0, zq = 0;
        for (int64_t d = 0; d < vd; ++d) {
          zt += std::exp(target[bi][p][draft_ids[d].item<int64_t>()].item<double>());
          zq += std::exp(logits[k][bi][ti][d].item<double>());
        }
        for (int64_t d = 0; d < vd; ++d) {
          const double pt =
              std::exp(target[bi][p][draft_ids[d].item<int64_t>()].item<double>()) / zt;
          sum -= pt * (logits[k][bi][ti][d].item<double>() - std::log(zq));
        }
        count += 1;
      }
    }
    EXPECT_EQ(r.step_count[k], count);
    EXPECT_NEAR(r.step_loss[k], sum / count, 1e-5);
    expected += std::pow(decay, k) * sum / count;
    expected_all += std::pow(decay, k) * sum / static_cast<double>(b * t);  // the reference's mean
    EXPECT_NEAR(all.step_loss[k], sum / count, 1e-5);  // reported per counted position alike
  }
  EXPECT_NEAR(r.loss.item<double>(), expected, 1e-5);
  EXPECT_NEAR(all.loss.item<double>(), expected_all, 1e-5);
  EXPECT_EQ(ParseTttLossNorm("all"), TttLossNorm::kAllPositions);
  EXPECT_THROW(ParseTttLossNorm("mean"), Error);
}

TEST(Eagle3TrainerTest, TrainsResumesAndWritesThePublishedLayout) {
  at::set_num_threads(1);
  const std::string dir = testing_util::ScratchDir("eagle3_trainer_" + TestName());
  Eagle3TrainConfig c;
  c.aux_layers = {1, 3, 5};
  c.draft_vocab = 60;
  c.ttt_steps = 3;
  c.optim = DefaultEagle3Optim();
  Eagle3TrainResult full;
  ASSERT_NO_FATAL_FAILURE(testing_util::ExpectSmokeTrainsAndResumes(
      TrainEagle3, testing_util::WriteSmokeRegenData(dir), c, dir + "/", "eagle3", &full));
  EXPECT_GT(full.draft_vocab_coverage, 0.7);
  EXPECT_LT(full.draft_vocab_coverage, 1.0);

  const Eagle3Checkpoint a = LoadEagle3Checkpoint(dir + "/full");
  const Eagle3Checkpoint b = LoadEagle3Checkpoint(dir + "/split");
  EXPECT_EQ(a.config.aux_layer_ids, (std::vector<int64_t>{1, 3, 5}));
  EXPECT_EQ(a.config.draft_vocab_size, 60);
  EXPECT_EQ(a.recipe["ttt_steps"], 3);
  for (const auto& [name, t] : a.tensors) EXPECT_TRUE(at::equal(t, b.tensors.at(name))) << name;
  EXPECT_EQ(a.tensors.count(kEagle3Embed), 0u);  // the target's embedding is not stored

  // The disk feature cache (float32) trains the same head as online features, up to the
  // recomputed logits' rounding.
  const TrainLoopOptions quiet = testing_util::QuietLoop();
  Eagle3TrainConfig disk = c;
  disk.features = "disk";
  const Eagle3TrainResult from_disk = TrainEagle3(disk, dir + "/disk", quiet);
  ASSERT_TRUE(from_disk.loop.finished);
  EXPECT_NEAR(from_disk.loop.eval.loss, full.loop.eval.loss, 1e-3 * full.loop.eval.loss);
  EXPECT_TRUE(std::filesystem::exists(dir + "/disk/work/features/manifest.json"));

  Eagle3TrainConfig bad = c;
  bad.aux_layers = {1, 3, 9};
  EXPECT_THROW(TrainEagle3(bad, dir + "/bad", quiet), Error);
}

}  // namespace
}  // namespace specbed
