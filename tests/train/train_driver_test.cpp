// The drafter-training driver's shared pieces: CosineOptim (a trainer's default optimiser),
// RowBatches (held-out batches), StepFigures (per-step means and the chain estimate) and the
// regen trainers' RegenHeadDriver (held-out split, run identity, errors naming the flags).
// Checked by: tests/train/train_driver_test.cpp.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/base/error.h"
#include "methods/common/train/regen.h"
#include "methods/common/train/regen_head_trainer.h"
#include "methods/common/train/train_driver.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

TEST(TrainDriverTest, CosineOptimSetsTheScheduleAndKeepsTheDefaults) {
  const OptimConfig o = CosineOptim(800, 24, 3e-3, 3e-4, 40);
  const OptimConfig d;
  EXPECT_EQ(o.steps, 800);
  EXPECT_EQ(o.batch, 24);
  EXPECT_EQ(o.lr, 3e-3);
  EXPECT_EQ(o.min_lr, 3e-4);
  EXPECT_EQ(o.warmup, 40);
  EXPECT_EQ(o.weight_decay, d.weight_decay);
  EXPECT_EQ(o.beta1, d.beta1);
  EXPECT_EQ(o.beta2, d.beta2);
  EXPECT_EQ(o.grad_clip, d.grad_clip);
  EXPECT_EQ(o.seed, d.seed);
  EXPECT_EQ(o.checkpoint_every, d.checkpoint_every);
  EXPECT_EQ(o.log_every, d.log_every);
  EXPECT_EQ(o.eval_every, d.eval_every);
  EXPECT_EQ(o.threads, d.threads);
}

TEST(TrainDriverTest, RowBatchesCoverTheRangeInOrder) {
  using Batches = std::vector<std::vector<int64_t>>;
  EXPECT_EQ(RowBatches(5, 12, 3), (Batches{{5, 6, 7}, {8, 9, 10}, {11}}));
  EXPECT_EQ(RowBatches(0, 4, 4), (Batches{{0, 1, 2, 3}}));
  EXPECT_TRUE(RowBatches(7, 7, 2).empty());
}

TEST(TrainDriverTest, StepFiguresWeighByCountsAndChainTheTop1) {
  StepFigures f(3);
  f.Add({1.0, 2.0, 4.0}, {0.5, 0.25, 0.0}, {2, 4, 0});
  f.Add({3.0, 2.0, 4.0}, {1.0, 0.75, 0.0}, {2, 4, 0});
  const ChainFigures c = f.Chain(0.5);
  EXPECT_DOUBLE_EQ(c.loss[0].get<double>(), 2.0);  // (1 * 2 + 3 * 2) / 4
  EXPECT_DOUBLE_EQ(c.loss[1].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(c.loss[2].get<double>(), 0.0);  // nothing counted
  EXPECT_DOUBLE_EQ(c.top1[0].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(c.top1[1].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(c.weighted_loss, 2.0 + 0.5 * 2.0);
  EXPECT_DOUBLE_EQ(c.tau, 1 + 0.75 + 0.75 * 0.5);
  EXPECT_EQ(f.count[1], 8);
}

TEST(TrainDriverTest, RegenHeadDriverSplitsTheDataAndStartsTheIdentity) {
  const std::string dir = testing_util::ScratchDir("train_driver_regen");
  RegenConfig rc;
  rc.prompts = "bos";
  rc.n_sequences = 6;
  rc.max_new_tokens = 12;
  rc.seed = 1;
  WriteRegenData(dir + "/d.regen.safetensors", GenerateRegenData(rc, false));
  RegenHeadSpec spec;
  spec.who = "probe";
  spec.target = "stories260K";
  spec.dtype = "float32";
  spec.data = dir + "/d.regen.safetensors";
  spec.max_len = 16;
  spec.n_eval = 2;
  const RegenHeadDriver driver(spec, dir + "/out", {});
  EXPECT_EQ(driver.n_train(), 4);
  const nlohmann::ordered_json id = driver.Identity();
  std::vector<std::string> keys;
  for (const auto& [key, value] : id.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"target", "target_fingerprint", "dtype",
                                            "data_fingerprint"}));
  spec.dtype = "";  // float32, not recorded (Medusa)
  EXPECT_FALSE(RegenHeadDriver(spec, dir + "/out", {}).Identity().contains("dtype"));

  spec.n_eval = 6;
  try {
    RegenHeadDriver bad(spec, dir + "/out", {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("probe: '"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("need more than --n-eval 6"), std::string::npos);
  }
  spec.n_eval = 2;
  spec.max_len = 1 << 20;
  EXPECT_THROW(RegenHeadDriver(spec, dir + "/out", {}), Error);  // beyond the target's context
  spec.check_context = false;
  EXPECT_NO_THROW(RegenHeadDriver(spec, dir + "/out", {}));
}

}  // namespace
}  // namespace specbed
