// Tests of DFlash / JetSpec block-head training: the parallel-block forward (TrainableDflash)
// against the inference head (DflashHead) run the drafter's way (context rows of the positions
// before the anchor, then one block), causal and bidirectional; the three block losses and the
// position weights against plain loops; random anchors; and `TrainDflash` end to end on a tiny
// regen file of stories260K (loss goes down, bitwise resume, the checkpoint loads and drafts
// token-identically to AR at T = 0). All inputs are seeded and single-threaded CPU ops are
// deterministic: false-failure rate 0.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "base/error.h"
#include "methods/common/train/regen.h"
#include "methods/dflash/dflash_checkpoint.h"
#include "methods/dflash/dflash_head.h"
#include "methods/dflash/dflash_trainer.h"
#include "methods/dflash/trainable_dflash.h"
#include "tests/methods/head_test_util.h"
#include "tests/methods/train_smoke_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using testing_util::TestName;

DflashConfig SmallConfig(bool causal) {
  DflashConfig c = testing_util::DflashConfigOf(
      {/*hidden_size=*/16, /*intermediate_size=*/24, /*n_heads=*/4, /*n_kv_heads=*/2,
       /*head_dim=*/6 /* q_dim 24 != hidden */, /*vocab_size=*/30,
       /*max_position_embeddings=*/32768, /*rms_norm_eps=*/1e-5, /*rope_theta=*/10000.0},
      /*n_layers=*/2, /*block_size=*/5, /*mask_token_id=*/29, /*num_target_layers=*/4,
      /*target_layer_ids=*/{0, 2});
  c.causal = causal;
  return c;
}

at::Tensor Randn(std::vector<int64_t> shape, uint64_t seed) {
  at::manual_seed(static_cast<int64_t>(seed));
  return at::randn(shape);
}

class TrainableDflashMatchTest : public testing::TestWithParam<bool> {};

TEST_P(TrainableDflashMatchTest, BlocksMatchTheInferenceHead) {
  at::set_num_threads(1);
  const DflashConfig c = SmallConfig(GetParam());
  auto tensors = RandomDflashTensors(c, 5);
  // Larger weights than the 0.02 init so that mistakes are visible in the outputs.
  for (auto& [name, t] : tensors) {
    if (t.dim() == 2) t = t * 12;
  }
  const at::Tensor embedding = Randn({c.vocab_size, c.hidden_size}, 1);
  const at::Tensor lm_head = Randn({c.vocab_size, c.hidden_size}, 2);
  const int64_t n = 2, t = 11;
  const at::Tensor features = Randn({n, t, c.fc_in_dim()}, 3);
  at::manual_seed(4);
  const at::Tensor tokens = at::randint(0, c.vocab_size - 1, {n, t}, at::kLong);
  // Anchors at the start (empty context), in the middle, overlapping blocks, near the end (the
  // block runs past T: positions beyond the sequence still get RoPE and logits) and unused.
  const at::Tensor anchors = at::tensor({0, 3, 4, 9, 10, -1, 1, 2}, at::kLong).view({n, 4});

  TrainableDflash trainable(c, tensors, embedding, lm_head);
  at::Tensor logits;
  {
    at::NoGradGuard no_grad;
    logits = trainable.Forward(features, tokens, anchors);
  }
  ASSERT_EQ(logits.sizes(), at::IntArrayRef({n, 4, c.block_size, c.vocab_size}));

  DflashHead head(c, tensors, embedding, lm_head);
  DflashHeadOutput out;
  int64_t compared = 0;
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t i = 0; i < 4; ++i) {
      const int64_t a = anchors[row][i].item<int64_t>();
      if (a < 0) continue;
      head.ResetContext(16);
      if (a > 0) {
        const at::Tensor ctx = features[row].narrow(0, 0, a).contiguous();
        head.AppendContext(ctx.data_ptr<float>(), a);
      }
      std::vector<int32_t> block(c.block_size, static_cast<int32_t>(c.mask_token_id));
      block[0] = static_cast<int32_t>(tokens[row][a].item<int64_t>());
      head.Forward(block.data(), a, out);
      const at::Tensor mine = logits[row][i];
      const double scale = out.logits.abs().max().item<double>();
      EXPECT_LT((mine - out.logits).abs().max().item<double>(), 1e-4 * std::max(1.0, scale))
          << "row " << row << " anchor " << a;
      ++compared;
    }
  }
  EXPECT_EQ(compared, 7);
}

INSTANTIATE_TEST_SUITE_P(CausalAndBidirectional, TrainableDflashMatchTest, testing::Bool());

TEST(TrainableDflashTest, GradientsReachEveryParameter) {
  const DflashConfig c = SmallConfig(false);
  TrainableDflash trainable(c, RandomDflashTensors(c, 9), Randn({c.vocab_size, c.hidden_size}, 1),
                            Randn({c.vocab_size, c.hidden_size}, 2));
  const at::Tensor tokens = at::randint(0, c.vocab_size, {1, 8}, at::kLong);
  const at::Tensor mask = at::ones({1, 8});
  const at::Tensor anchors = at::tensor({1, 4}, at::kLong).view({1, 2});
  const at::Tensor logits = trainable.Forward(Randn({1, 8, c.fc_in_dim()}, 3), tokens, anchors);
  DflashLossOptions o;
  DflashBlockLoss(logits, tokens, anchors, mask, at::Tensor(), o).loss.backward();
  for (const auto& [name, p] : trainable.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_GT(p.grad().abs().sum().item<double>(), 0) << name;
  }
}

// The losses against plain loops over (row, anchor, block row).
TEST(DflashBlockLossTest, MatchesPlainLoops) {
  const int64_t n = 2, a = 3, b = 4, v = 6, t = 9;
  const at::Tensor logits = Randn({n, a, b, v}, 21);
  const at::Tensor target = Randn({n, t, v}, 22);
  at::manual_seed(23);
  const at::Tensor tokens = at::randint(0, v, {n, t}, at::kLong);
  at::Tensor mask = at::ones({n, t});
  mask[0][0] = 0;  // a prompt position: token 1 unsupervised
  mask[1][5] = 0;
  mask[0][t - 1] = 0;
  mask[1][t - 1] = 0;
  const at::Tensor anchors = at::tensor({0, 2, 6, 4, 7, -1}, at::kLong).view({n, a});
  for (const std::string kind : {"ce", "forward_kl", "reverse_kl"}) {
    for (const double gamma : {0.0, 2.0}) {
      DflashLossOptions o;
      o.kind = ParseDflashLossKind(kind);
      o.gamma = gamma;
      o.temperature = kind == "ce" ? 1.0 : 1.5;
      const DflashLossResult r = DflashBlockLoss(logits, tokens, anchors, mask, target, o);
      double num = 0, den = 0;
      std::vector<double> count(b, 0);
      for (int64_t ni = 0; ni < n; ++ni) {
        for (int64_t ai = 0; ai < a; ++ai) {
          const int64_t anchor = anchors[ni][ai].item<int64_t>();
          if (anchor < 0) continue;
          for (int64_t k = 1; k < b; ++k) {
            const int64_t pos = anchor + k;
            if (pos - 1 >= t || mask[ni][pos - 1].item<float>() == 0) continue;
            const double w = gamma > 0 ? std::exp(-(k - 1) / gamma) : 1.0;
            std::vector<double> q(v), p(v);
            double zq = 0, zp = 0;
            for (int64_t x = 0; x < v; ++x) {
              q[x] = std::exp(logits[ni][ai][k][x].item<double>() / o.temperature);
              p[x] = std::exp(target[ni][pos - 1][x].item<double>() / o.temperature);
              zq += q[x];
              zp += p[x];
            }
            double l = 0;
            if (kind == "ce") {
              l = -std::log(q[tokens[ni][pos].item<int64_t>()] / zq);
            } else {
              for (int64_t x = 0; x < v; ++x) {
                const double px = p[x] / zp, qx = q[x] / zq;
                l += kind == "forward_kl" ? px * std::log(px / qx) : qx * std::log(qx / px);
              }
            }
            num += w * l;
            den += w;
            count[k] += 1;
          }
        }
      }
      EXPECT_NEAR(r.loss.item<double>(), num / den, 1e-5) << kind << " gamma " << gamma;
      EXPECT_EQ(r.row_count, count) << kind;
    }
  }
  DflashLossOptions kl;
  kl.kind = DflashLossKind::kForwardKl;
  EXPECT_THROW(DflashBlockLoss(logits, tokens, anchors, mask, at::Tensor(), kl), Error);
  EXPECT_THROW(ParseDflashLossKind("kl"), Error);
}

TEST(DflashBlockLossTest, ChainTauCountsLeadingCorrectRows) {
  // One block of 4 rows over vocab 3; logits make rows 1 and 2 right and row 3 right too, but
  // a second block has row 1 wrong.
  const int64_t v = 3;
  at::Tensor logits = at::zeros({1, 2, 4, v});
  const at::Tensor tokens = at::tensor({0, 1, 2, 0, 1, 2, 0, 1}, at::kLong).view({1, 8});
  // Block at anchor 0 predicts tokens 1, 2, 0 (rows 1..3): all right.
  logits[0][0][1][1] = 5;
  logits[0][0][2][2] = 5;
  logits[0][0][3][0] = 5;
  // Block at anchor 3 predicts tokens 1, 2, 0: row 1 wrong, rows 2-3 right.
  logits[0][1][1][0] = 5;
  logits[0][1][2][2] = 5;
  logits[0][1][3][0] = 5;
  const at::Tensor anchors = at::tensor({0, 3}, at::kLong).view({1, 2});
  const DflashLossResult r =
      DflashBlockLoss(logits, tokens, anchors, at::ones({1, 8}), at::Tensor(), {});
  EXPECT_DOUBLE_EQ(r.blocks, 2);
  EXPECT_DOUBLE_EQ(r.chain_tau, 1.0 + (3 + 0) / 2.0);
  EXPECT_DOUBLE_EQ(r.row_top1[1], 0.5);
  EXPECT_DOUBLE_EQ(r.row_top1[2], 1.0);
}

TEST(DflashAnchorsTest, DistinctSortedSupervisedAndSeeded) {
  at::Tensor mask = at::zeros({3, 20});
  for (int64_t i = 5; i < 19; ++i) mask[0][i] = 1;  // 14 candidates
  mask[1][7] = 1;                                   // 1 candidate
  // row 2: none
  const at::Tensor a = SampleDflashAnchors(mask, 6, {1, 2, 3});
  ASSERT_EQ(a.sizes(), at::IntArrayRef({3, 6}));
  std::set<int64_t> seen;
  for (int64_t i = 0; i < 6; ++i) {
    const int64_t x = a[0][i].item<int64_t>();
    EXPECT_GE(x, 5);
    EXPECT_LT(x, 19);
    if (i > 0) EXPECT_GT(x, a[0][i - 1].item<int64_t>());
    seen.insert(x);
  }
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_EQ(a[1][0].item<int64_t>(), 7);
  for (int64_t i = 1; i < 6; ++i) EXPECT_EQ(a[1][i].item<int64_t>(), -1);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(a[2][i].item<int64_t>(), -1);
  EXPECT_TRUE(at::equal(a, SampleDflashAnchors(mask, 6, {1, 2, 3})));
  EXPECT_FALSE(at::equal(a, SampleDflashAnchors(mask, 6, {4, 2, 3})));
  // Over many seeds every candidate is drawn (uniform without replacement).
  std::set<int64_t> all;
  for (uint64_t s = 0; s < 50; ++s) {
    const at::Tensor x = SampleDflashAnchors(mask.narrow(0, 0, 1), 3, {s});
    for (int64_t i = 0; i < 3; ++i) all.insert(x[0][i].item<int64_t>());
  }
  EXPECT_EQ(all.size(), 14u);
}

TEST(DflashTrainerTest, TrainsResumesAndWritesThePublishedLayout) {
  at::set_num_threads(1);
  const std::string dir = testing_util::ScratchDir("dflash_trainer_" + TestName());
  const std::string data = testing_util::WriteSmokeRegenData(dir);

  for (const std::string variant : {"dflash", "jetspec"}) {
    DflashTrainConfig c = DefaultDflashTrainConfig(variant);
    c.block_size = 6;
    c.layers = 1;
    c.anchors = 6;
    const std::string out = dir + "/" + variant;
    DflashTrainResult full;
    ASSERT_NO_FATAL_FAILURE(
        testing_util::ExpectSmokeTrainsAndResumes(TrainDflash, data, c, out + "_", variant, &full));
    EXPECT_EQ(full.target_layers, (std::vector<int64_t>{2}));  // one draft layer: L / 2

    const DflashCheckpoint a = LoadDflashCheckpoint(out + "_full");
    const DflashCheckpoint b = LoadDflashCheckpoint(out + "_split");
    EXPECT_EQ(a.config.block_size, 6);
    EXPECT_EQ(a.config.mask_token_id, 0);
    EXPECT_EQ(a.config.causal, variant == "jetspec");
    EXPECT_EQ(a.recipe["loss"], variant == "jetspec" ? "forward_kl" : "ce");
    for (const auto& [name, t] : a.tensors) EXPECT_TRUE(at::equal(t, b.tensors.at(name))) << name;
  }

  DflashTrainConfig bad = DefaultDflashTrainConfig("dflash");
  bad.data = dir + "/data.regen.safetensors";
  bad.target_layers = {1, 9};
  const TrainLoopOptions quiet = testing_util::QuietLoop();
  EXPECT_THROW(TrainDflash(bad, dir + "/bad", quiet), Error);
  bad.target_layers = {};
  bad.mask_token = 512;
  EXPECT_THROW(TrainDflash(bad, dir + "/bad", quiet), Error);
  EXPECT_THROW(DefaultDflashTrainConfig("medusa"), Error);
}

}  // namespace
}  // namespace specbed
