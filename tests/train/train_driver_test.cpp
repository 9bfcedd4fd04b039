// The drafter-training driver's shared pieces: CosineOptim (a trainer's default optimiser),
// RowBatches (held-out batches), StepFigures (per-step means and the chain estimate) and the
// regen trainers' RegenHeadDriver (held-out split, run identity, errors naming the flags, the
// training device checked first), `train specblock` resuming exactly; TrainLoopCuda: EAGLE-3,
// Medusa, DFlash / JetSpec, SpecBlock and H-RAD trained on cuda against the CPU.
// Checked by: tests/train/train_driver_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "methods/common/train/regen.h"
#include "methods/common/train/regen_head_trainer.h"
#include "methods/common/train/target_features.h"
#include "methods/common/train/train_driver.h"
#include "methods/dflash/dflash_trainer.h"
#include "methods/eagle3/eagle3_checkpoint.h"
#include "methods/eagle3/eagle3_trainer.h"
#include "methods/medusa/medusa_trainer.h"
#include "methods/specblock/specblock_model.h"
#include "methods/specblock/specblock_trainer.h"
#include "methods/specbranch/hrad_trainer.h"
#include "tests/common/cuda_test_util.h"
#include "tests/methods/train_smoke_util.h"
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

// --device is checked before the target loads (a missing target would fail otherwise), the
// driver's device is where the trainer places its model, and a batch is built on the host and
// placed with BatchOnDevice (the same tensors on the CPU, no copy).
TEST(TrainDriverTest, DeviceIsCheckedFirstAndBatchesArePlaced) {
  const std::string dir = testing_util::ScratchDir("train_driver_device");
  RegenHeadSpec spec;
  spec.who = "probe";
  spec.target = "no-such-target";
  spec.data = dir + "/none.regen.safetensors";
  spec.optim.device = "cuda:7";
  try {
    RegenHeadDriver bad(spec, dir + "/out", {});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("probe --device"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cuda:7"), std::string::npos) << e.what();
  }
  RegenConfig rc;
  rc.prompts = "bos";
  rc.n_sequences = 4;
  rc.max_new_tokens = 8;
  const RegenData data = GenerateRegenData(rc, false);
  const SequenceBatch host = MakeSequenceBatch(data, {0, 2}, 16);
  const SequenceBatch same = BatchOnDevice(host, at::kCPU);
  EXPECT_TRUE(same.tokens.is_same(host.tokens) && same.lengths.is_same(host.lengths) &&
              same.loss_mask.is_same(host.loss_mask));
  const SequenceBatch meta = BatchOnDevice(host, at::Device(at::kMeta));
  EXPECT_TRUE(meta.tokens.is_meta() && meta.lengths.is_meta() && meta.loss_mask.is_meta());
  EXPECT_EQ(meta.tokens.sizes(), host.tokens.sizes());
  spec.target = "stories260K";
  spec.optim.device = "cpu";
  spec.max_len = 16;
  spec.n_eval = 1;
  WriteRegenData(spec.data, data);
  EXPECT_EQ(RegenHeadDriver(spec, dir + "/out", {}).device(), at::Device(at::kCPU));
}

// Max |a - b| over the tensors two EAGLE-3 checkpoints share.
double MaxHeadDiff(const std::string& a, const std::string& b) {
  const Eagle3Checkpoint ca = LoadEagle3Checkpoint(a), cb = LoadEagle3Checkpoint(b);
  double worst = 0;
  for (const auto& [name, t] : ca.tensors) {
    if (!t.is_floating_point()) continue;
    worst = std::max(worst, (t - cb.tensors.at(name)).abs().max().item<double>());
  }
  return worst;
}

// A regen head trainer (EAGLE-3, the smoke setting) on cuda against the CPU: the target, its
// features (online and the disk cache) and the head on the GPU. float32 with other kernels:
// held-out loss within 1e-3 relative, weights within 1e-3 absolute. A cuda checkpoint resumes
// on the CPU.
TEST(TrainLoopCuda, Eagle3OnCudaMatchesCpu) {
  SPECBED_SKIP_WITHOUT_CUDA();
  at::set_num_threads(1);
  const std::string dir = testing_util::ScratchDir("train_driver_eagle3_cuda");
  Eagle3TrainConfig c;
  c.aux_layers = {1, 3, 5};
  c.draft_vocab = 60;
  c.ttt_steps = 3;
  c.optim = DefaultEagle3Optim();
  testing_util::UseSmokeSetting(testing_util::WriteSmokeRegenData(dir), c);
  const TrainLoopOptions quiet = testing_util::QuietLoop();
  const Eagle3TrainResult cpu = TrainEagle3(c, dir + "/cpu", quiet);
  ASSERT_TRUE(cpu.loop.finished);
  Eagle3TrainConfig g = c;
  g.optim.device = "cuda";
  for (const char* features : {"online", "disk"}) {
    g.features = features;
    const std::string out = dir + "/cuda_" + features;
    const Eagle3TrainResult cuda = TrainEagle3(g, out, quiet);
    ASSERT_TRUE(cuda.loop.finished) << features;
    EXPECT_EQ(cuda.loop.device, "cuda");
    EXPECT_NEAR(cuda.loop.first_loss, cpu.loop.first_loss, 1e-3 * cpu.loop.first_loss) << features;
    EXPECT_NEAR(cuda.loop.eval.loss, cpu.loop.eval.loss, 1e-3 * cpu.loop.eval.loss) << features;
    EXPECT_LT(MaxHeadDiff(dir + "/cpu", out), 1e-3) << features;
  }
  g.features = "online";
  TrainLoopOptions stop = quiet;
  stop.stop_after = 14;
  EXPECT_FALSE(TrainEagle3(g, dir + "/g2c", stop).loop.finished);
  const Eagle3TrainResult resumed = TrainEagle3(c, dir + "/g2c", quiet);  // on the CPU
  ASSERT_TRUE(resumed.loop.finished);
  EXPECT_NEAR(resumed.loop.eval.loss, cpu.loop.eval.loss, 1e-3 * cpu.loop.eval.loss);
  EXPECT_LT(MaxHeadDiff(dir + "/cpu", dir + "/g2c"), 1e-3);
}

// A small SpecBlock drafter on the smoke setting (stories260K regen data).
SpecBlockTrainConfig SmokeSpecBlock(const std::string& data) {
  SpecBlockTrainConfig c;
  c.aux_layers = {1, 3, 5};
  c.draft_vocab = 60;
  c.block_size = 3;
  c.layers = 1;
  c.rank_hidden = 16;
  c.optim = DefaultSpecBlockOptim();
  testing_util::UseSmokeSetting(data, c);
  return c;
}

// `train specblock` end to end on the CPU, its model placed through HeadPlacement on the
// driver's device: a run stopped after 14 steps and resumed ends with the uninterrupted run's
// held-out loss and weights exactly, and the summary records the device.
TEST(TrainDriverTest, SpecBlockTrainsAndResumesExactly) {
  at::set_num_threads(1);
  const std::string dir = testing_util::ScratchDir("train_driver_specblock");
  const SpecBlockTrainConfig c = SmokeSpecBlock(testing_util::WriteSmokeRegenData(dir));
  const TrainLoopOptions quiet = testing_util::QuietLoop();
  const SpecBlockTrainResult full = TrainSpecBlock(c, dir + "/full", quiet);
  ASSERT_TRUE(full.loop.finished);
  EXPECT_EQ(full.loop.device, "cpu");
  TrainLoopOptions stop = quiet;
  stop.stop_after = 14;
  EXPECT_FALSE(TrainSpecBlock(c, dir + "/split", stop).loop.finished);
  const SpecBlockTrainResult resumed = TrainSpecBlock(c, dir + "/split", quiet);
  ASSERT_TRUE(resumed.loop.finished);
  EXPECT_EQ(resumed.loop.eval.loss, full.loop.eval.loss);
  const SpecBlockCheckpoint a = LoadSpecBlockCheckpoint(dir + "/full");
  const SpecBlockCheckpoint b = LoadSpecBlockCheckpoint(dir + "/split");
  for (const auto& [name, t] : a.tensors) EXPECT_TRUE(at::equal(t, b.tensors.at(name))) << name;
}

// The other regen trainers and H-RAD on cuda against the CPU, each on its smoke setting: the
// first training loss and the held-out loss within 1e-3 relative (SpecBlock: 1e-2, since its
// valid-prefix mask and rank labels follow argmax hits, which a float32 rounding difference
// can flip at a near tie), and the summary names the device.
TEST(TrainLoopCuda, RegenTrainersAndHradOnCudaMatchCpu) {
  SPECBED_SKIP_WITHOUT_CUDA();
  at::set_num_threads(1);
  const std::string dir = testing_util::ScratchDir("train_driver_regen_cuda");
  const std::string data = testing_util::WriteSmokeRegenData(dir);
  const TrainLoopOptions quiet = testing_util::QuietLoop();
  auto expect_close = [](const TrainLoopResult& cpu, const TrainLoopResult& cuda, double rel,
                         const std::string& what) {
    ASSERT_TRUE(cpu.finished && cuda.finished) << what;
    EXPECT_EQ(cuda.device, "cuda") << what;
    EXPECT_NEAR(cuda.first_loss, cpu.first_loss, rel * cpu.first_loss) << what;
    EXPECT_NEAR(cuda.eval.loss, cpu.eval.loss, rel * cpu.eval.loss) << what;
  };
  {
    MedusaTrainConfig c;
    c.num_heads = 3;
    c.optim = DefaultMedusaOptim();
    testing_util::UseSmokeSetting(data, c);
    MedusaTrainConfig g = c;
    g.optim.device = "cuda";
    expect_close(TrainMedusa(c, dir + "/medusa_cpu", quiet).loop,
                 TrainMedusa(g, dir + "/medusa_cuda", quiet).loop, 1e-3, "medusa");
  }
  for (const std::string variant : {"dflash", "jetspec"}) {
    DflashTrainConfig c = DefaultDflashTrainConfig(variant);
    c.block_size = 6;
    c.layers = 1;
    c.anchors = 6;
    testing_util::UseSmokeSetting(data, c);
    DflashTrainConfig g = c;
    g.optim.device = "cuda";
    expect_close(TrainDflash(c, dir + "/" + variant + "_cpu", quiet).loop,
                 TrainDflash(g, dir + "/" + variant + "_cuda", quiet).loop, 1e-3, variant);
  }
  {
    const SpecBlockTrainConfig c = SmokeSpecBlock(data);
    SpecBlockTrainConfig g = c;
    g.optim.device = "cuda";
    expect_close(TrainSpecBlock(c, dir + "/specblock_cpu", quiet).loop,
                 TrainSpecBlock(g, dir + "/specblock_cuda", quiet).loop, 1e-2, "specblock");
  }
  {
    HradTrainConfig c;
    c.n_sequences = 6;
    c.n_eval_sequences = 2;
    c.seq_len = 48;
    c.optim = DefaultHradOptim();
    c.optim.steps = 60;
    HradTrainConfig g = c;
    g.optim.device = "cuda";
    expect_close(TrainHrad(c, dir + "/hrad_cpu", quiet).loop,
                 TrainHrad(g, dir + "/hrad_cuda", quiet).loop, 1e-3, "hrad");
  }
}

}  // namespace
}  // namespace specbed
