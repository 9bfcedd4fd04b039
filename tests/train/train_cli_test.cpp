// End-to-end test of `specbed train draft-lm` (harness/cli/cmd_train.cpp): runs the real binary
// (path baked in as SPECBED_BIN) and checks its exit codes (0 ok, 1 specbed::Error, >= 100 usage),
// interrupt + automatic resume from the command line, and the settings-mismatch message. No
// LibTorch in the test itself. Deterministic (fixed seeds), so its false-failure rate is 0.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include "tests/cli/cli_test_util.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace {

namespace fs = std::filesystem;

using specbed::cli_test::ReadAll;

specbed::cli_test::ProcResult Specbed(const std::string& args, const std::string& dir) {
  return specbed::cli_test::RunSpecbedLine(args, dir);
}

TEST(TrainCliTest, ExitCodesResumeAndMismatch) {
  const std::string dir = std::string(SPECBED_TEST_TMPDIR) + "/train_cli";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string out = dir + "/draft";
  // Everything but --target and --seq-len (CLI11 rejects an option given twice).
  const std::string knobs = "train draft-lm --output " + out +
                            " --n-sequences 6 --n-eval-sequences 1 --steps 6 --batch 2 --dim 16"
                            " --heads 2 --seed 3";
  const std::string tiny = knobs + " --target stories260K --seq-len 24";

  auto r = Specbed("train draft-lm --dim 16", dir);  // -o/--output missing: a usage error
  EXPECT_GE(r.exit_code, 100) << r.err;
  EXPECT_NE(r.err.find("--output is required"), std::string::npos) << r.err;

  r = Specbed(tiny + " --stop-after 3", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("stopped at step 3 of 6"), std::string::npos) << r.out;

  r = Specbed(tiny, dir);  // resumes automatically and finishes
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("resuming"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("6 steps"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));

  r = Specbed(knobs + " --target stories260K --seq-len 32",
              dir);  // another run identity: a specbed::Error
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'seq_len' (--seq-len) is 24 there but 32 now"), std::string::npos) << r.err;

  r = Specbed(knobs + " --restart --target no-such-model", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no-such-model"), std::string::npos) << r.err;
}

}  // namespace

TEST(TrainCliTest, Eagle3FromRegenDataAndErrors) {
  const std::string dir = std::string(SPECBED_TEST_TMPDIR) + "/train_cli_eagle3";
  fs::remove_all(dir);
  fs::create_directories(dir);
  auto r = Specbed("regen --n-sequences 10 --max-new-tokens 30 --seed 2 -q --output " + dir +
                       "/data.regen.safetensors",
                   dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string train = "train eagle3 -q --data " + dir + "/data.regen.safetensors --n-eval 2" +
                            " --max-len 24 --ttt-steps 2 --steps 6 --batch 2 --output " + dir +
                            "/head";
  r = Specbed(train + " --aux-layers 1 3 5", dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("6 steps"), std::string::npos) << r.out;
  for (const char* f : {"config.json", "model.safetensors", "train_log.db", "train_summary.json"}) {
    EXPECT_TRUE(fs::exists(dir + "/head/" + f)) << f;
  }
  EXPECT_NE(ReadAll(dir + "/head/config.json").find("LlamaForCausalLMEagle3"), std::string::npos);

  r = Specbed(train + " --aux-layers 1 3 9 --restart", dir);  // layer 9 of a 5-layer target
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("aux layer 9 is outside [0, 5]"), std::string::npos) << r.err;
  r = Specbed(train + " --aux-layers 1 3 5 --lr 0.5", dir);  // another setting than the stored run
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'lr' (--lr)"), std::string::npos) << r.err;
  r = Specbed("train eagle3 --output " + dir + "/x --data " + dir + "/missing.safetensors", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("missing.safetensors"), std::string::npos) << r.err;
}
