// End-to-end test of `specbed blockpilot label|train` (harness/cli/cmd_blockpilot.cpp) and of a
// `specbed run` with `dflash+blockpilot`: runs the real binary (SPECBED_BIN) on stories260K with a
// seeded random DFlash head (written here with WriteDflashCheckpoint, hence LibTorch in this test)
// and checks exit codes (0 ok, 1 specbed::Error, >= 100 usage), the printed figures, the written
// files and the radius mismatch message. Deterministic (fixed seeds): false-failure rate 0.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "methods/dflash/dflash_checkpoint.h"
#include "tests/cli/cli_test_util.h"
#include "tests/methods/head_test_util.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;
using cli_test::Contains;
using cli_test::ContainsAll;
using cli_test::Describe;
using cli_test::RunSpecbedLine;

// A random DFlash head for stories260K (dim 64, 5 layers, vocabulary 512) with block size 4.
void WriteHead(const std::string& dir) {
  const DflashConfig c = testing_util::DflashConfigOf(
      {/*hidden_size=*/64, /*intermediate_size=*/128, /*n_heads=*/8, /*n_kv_heads=*/4,
       /*head_dim=*/8, /*vocab_size=*/512, /*max_position_embeddings=*/512,
       /*rms_norm_eps=*/1e-5, /*rope_theta=*/10000.0, /*bos_token_id=*/-1, /*eos_token_ids=*/{}},
      /*n_layers=*/1, /*block_size=*/4, /*mask_token_id=*/0, /*num_target_layers=*/5,
      /*target_layer_ids=*/{1, 3});
  WriteDflashCheckpoint(dir, c, RandomDflashTensors(c, 4));
}

TEST(BlockpilotCliTest, LabelTrainRunAndErrors) {
  const std::string dir = cli_test::TestDir();
  WriteHead(dir + "/head");
  const std::string labels = dir + "/labels/l.safetensors";

  auto r = RunSpecbedLine("blockpilot label --n-prompts 4 --output " + labels, dir);
  EXPECT_GE(r.exit_code, 100) << Describe(r);  // --drafter missing: a usage error
  EXPECT_TRUE(Contains(r.err, "--drafter is required"));

  r = RunSpecbedLine("blockpilot label -q --drafter " + dir +
                         "/head --n-prompts 12 --prompt-tokens 6 --max-new-tokens 16 --radius 1 "
                         "--output " +
                         labels,
                     dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(
      ContainsAll(r.out, {"12 prompts labelled", "candidates [3,4,5] around trained block size 4",
                          "oracle (best tau)", "trained block size       b=4"}));
  EXPECT_TRUE(fs::exists(labels));
  EXPECT_FALSE(fs::exists(labels + ".partial"));

  const std::string pred = dir + "/pred";
  r = RunSpecbedLine("blockpilot train -q --labels " + labels + " --output " + pred +
                         " --hidden 16 --steps 5 --batch 4",
                     dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(ContainsAll(
      r.out, {"5 steps", "10 train / 2 held-out prompts",
              "held-out prompts (2 prompts; labels: argmax tau)", "predictor accuracy"}));
  for (const char* f : {"config.json", "model.safetensors", "train_log.db", "train_summary.json"})
    EXPECT_TRUE(fs::exists(pred + "/" + f)) << f;
  EXPECT_TRUE(Contains(cli_test::ReadAll(pred + "/config.json"), "\"evaluation\""));

  r = RunSpecbedLine(
      "blockpilot train -q --labels " + dir + "/none.safetensors --output " + pred + "2", dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "does not exist"));

  // `specbed run` with the predictor; then with a radius the predictor was not trained with.
  for (int radius : {1, 2}) {
    const std::string config = dir + "/run" + std::to_string(radius) + ".json";
    cli_test::WriteFile(
        config, "{\"name\": \"bp\", \"output\": \"" + dir + "/run" + std::to_string(radius) +
                    ".db\", \"targets\": [\"stories260K\"], \"methods\": [{\"name\": "
                    "\"dflash+blockpilot\", \"knobs\": {\"drafter\": \"" +
                    dir + "/head\", \"predictor\": \"" + pred +
                    "\", \"radius\": " + std::to_string(radius) +
                    "}}], \"datasets\": [{\"name\": \"stories\", \"limit\": 2}], "
                    "\"temperatures\": [0.0], \"max_new_tokens\": 16, \"warmup\": 0}");
    r = RunSpecbedLine("run " + config + " --quiet", dir);
    if (radius == 1) {
      EXPECT_EQ(r.exit_code, 0) << Describe(r);
    } else {
      EXPECT_EQ(r.exit_code, 1) << Describe(r);
      EXPECT_TRUE(Contains(r.err, "knob 'radius' is 2 but predictor"));
    }
  }
}

}  // namespace
}  // namespace specbed
