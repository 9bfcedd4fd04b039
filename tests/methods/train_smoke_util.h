// A smoke harness for the drafter trainers' end-to-end tests (EAGLE-3, Medusa, DFlash/JetSpec):
// a small `regen` data file on stories260K, a 30-step optimizer setting, and the full run vs
// stopped-and-resumed run check every trainer must pass (with the smoke setting applied).
// Checked by: tests/methods/eagle3_train_test.cpp, tests/methods/medusa_test.cpp,
// tests/methods/dflash_train_test.cpp.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "methods/common/train/regen.h"
#include "methods/common/train/train_loop.h"

namespace specbed {
namespace testing_util {

// Writes 24 BOS-started sequences of 40 new tokens (seed 3) to dir/data.regen.safetensors and
// returns that path.
inline std::string WriteSmokeRegenData(const std::string& dir) {
  RegenConfig rc;
  rc.prompts = "bos";
  rc.n_sequences = 24;
  rc.max_new_tokens = 40;
  rc.seed = 3;
  const std::string path = dir + "/data.regen.safetensors";
  WriteRegenData(path, GenerateRegenData(rc, false));
  return path;
}

// 30 steps of batch 4, 3 warmup steps, lr 1e-2, a checkpoint every 10 steps, no periodic eval.
inline void SetSmokeOptim(OptimConfig& o) {
  o.steps = 30;
  o.batch = 4;
  o.warmup = 3;
  o.lr = 1e-2;
  o.checkpoint_every = 10;
  o.eval_every = 0;
}

// A trainer config on the smoke data file `data`: sequences cut to 32 tokens, 4 held out for
// evaluation, and SetSmokeOptim on its optimizer setting.
template <typename TrainConfig>
void UseSmokeSetting(const std::string& data, TrainConfig& c) {
  c.data = data;
  c.max_len = 32;
  c.n_eval = 4;
  SetSmokeOptim(c.optim);
}

// Quiet training-loop options.
inline TrainLoopOptions QuietLoop() {
  TrainLoopOptions quiet;
  quiet.verbose = false;
  return quiet;
}

// `train(out_dir, options)` runs one trainer. The run into prefix + "full" finishes with its loss
// down by 20%; a run into prefix + "split" stopped after 14 steps does not finish, and resumed it
// finishes with the full run's eval loss exactly. Sets `*full` to the full run's result.
template <typename Result>
void ExpectTrainsAndResumesExactly(
    const std::function<Result(const std::string&, const TrainLoopOptions&)>& train,
    const std::string& prefix, const std::string& what, Result* full) {
  const TrainLoopOptions quiet = QuietLoop();
  *full = train(prefix + "full", quiet);
  ASSERT_TRUE(full->loop.finished) << what;
  EXPECT_LT(full->loop.final_loss, 0.8 * full->loop.first_loss) << what;
  TrainLoopOptions stop = quiet;
  stop.stop_after = 14;
  EXPECT_FALSE(train(prefix + "split", stop).loop.finished) << what;
  const Result resumed = train(prefix + "split", quiet);
  ASSERT_TRUE(resumed.loop.finished) << what;
  EXPECT_EQ(resumed.loop.eval.loss, full->loop.eval.loss) << what;
}

// The trainer `train` with config `c` put on the smoke setting of data file `data`
// (UseSmokeSetting) passes ExpectTrainsAndResumesExactly with runs into prefix + "full" and
// prefix + "split". Sets `*full` to the full run's result.
template <typename TrainConfig, typename Result>
void ExpectSmokeTrainsAndResumes(Result (*train)(const TrainConfig&, const std::string&,
                                                 const TrainLoopOptions&),
                                 const std::string& data, TrainConfig& c, const std::string& prefix,
                                 const std::string& what, Result* full) {
  UseSmokeSetting(data, c);
  ExpectTrainsAndResumesExactly<Result>(
      [&](const std::string& out, const TrainLoopOptions& options) {
        return train(c, out, options);
      },
      prefix, what, full);
}

}  // namespace testing_util
}  // namespace specbed
