// End-to-end test of `specbed train ltd` (harness/cli/cmd_train.cpp): the real binary
// (SPECBED_BIN) on stories260K with its shipped EAGLE-3 head, simulated rewards from a tables file
// written here. Checks exit codes (0 ok, 1 specbed::Error, >= 100 usage), a stop after one stage
// and its resume to the end, the files written, and the errors for a bad --reward and for other
// settings in the same -o/--output; `train ltd-baselines` (errors, a tiny run's files) and
// `ltd-adaptation` (files, a bad policy). Deterministic (fixed seeds, simulated rewards):
// false-failure rate 0.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tests/cli/cli_test_util.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;
using cli_test::Contains;
using cli_test::Describe;
using cli_test::RunSpecbedLine;

TEST(LtdCliTest, TrainStopResumeAndErrors) {
  const std::string dir = cli_test::TestDir();
  std::string tables = "{\"t_draft\": [";
  for (int d = 1; d <= 12; ++d) {
    tables += (d > 1 ? "," : "") + std::string("{\"D\": ") + std::to_string(d) +
              ", \"ms\": " + std::to_string(d) + "}";
  }
  tables += "], \"t_verify\": [";
  for (int v = 1; v <= 16; ++v) {
    tables += (v > 1 ? "," : "") + std::string("{\"V\": ") + std::to_string(v) +
              ", \"ms\": " + std::to_string(1 + 2 * v) + "}";
  }
  tables += "]}";
  cli_test::WriteFile(dir + "/tables.json", tables);
  const std::string common =
      "train ltd --target stories260K --timing simulated --tables " + dir +
      "/tables.json --max-new-tokens 24 --val-count 2 --size-step 1 --n-actions 16 "
      "--depth-hidden 16 --size-hidden 16 8 --critic-hidden 16 8 --size-steps 128 "
      "--depth-steps 128 --iter-steps 64 --iterations 1 --n-steps 64 --minibatch 32 "
      "--epochs 2 --partner-rounds-max 4 --output " +
      dir + "/out";

  auto r = RunSpecbedLine("train ltd --target stories260K", dir);
  EXPECT_GE(r.exit_code, 100) << Describe(r);  // -o/--output missing: a usage error

  r = RunSpecbedLine(common + " --reward speed", dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "--reward must be throughput or tau"));

  r = RunSpecbedLine(common + " --stop-after-stages 1", dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "stopped after 1 stages"));
  EXPECT_TRUE(fs::exists(dir + "/out/size/config.json"));
  EXPECT_FALSE(fs::exists(dir + "/out/depth/config.json"));

  r = RunSpecbedLine(common, dir);  // resumes at stage 2 and finishes
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "\"both\""));
  for (const char* f : {"depth/model.safetensors", "size/model.safetensors", "tables.json",
                        "train_log.db", "train_summary.json"}) {
    EXPECT_TRUE(fs::exists(dir + "/out/" + f)) << f;
  }

  r = RunSpecbedLine(common + " --seed 3", dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "holds a run with other settings"));
}

TEST(LtdCliTest, BaselineTrainingAndAdaptationProbe) {
  const std::string dir = cli_test::TestDir();
  auto r = RunSpecbedLine("train ltd-baselines --target stories260K -o " + dir + "/b --val-count 0",
                          dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "--val-count must be >= 1"));
  r = RunSpecbedLine("train ltd-baselines --target stories260K -o " + dir + "/b --train-from 40",
                     dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "too few for --train-from 40"));
  r = RunSpecbedLine("train ltd-baselines --target stories260K -o " + dir +
                         "/b --train-from 28 --val-from 26 --val-count 2 -n 16 "
                         "--specdec-hidden 16 --disco-epochs 2 --specdec-epochs 1 --c2t-epochs 1",
                     dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  for (const char* f : {"disco/config.json", "specdecpp/model.safetensors", "c2t/config.json",
                        "train_summary.json"}) {
    EXPECT_TRUE(fs::exists(dir + "/b/" + f)) << f;
  }

  r = RunSpecbedLine("ltd-adaptation --target stories260K --limit 2 -n 16 -o " + dir + "/a", dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  for (const char* f : {"decisions.tsv", "adaptation.json", "adaptation.md"}) {
    EXPECT_TRUE(fs::exists(dir + "/a/" + f)) << f;
  }
  EXPECT_TRUE(Contains(r.out, "\"adapts\""));
  r = RunSpecbedLine(
      "ltd-adaptation --target stories260K --policy /nonexistent/p -o " + dir + "/a2", dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "/nonexistent/p"));
}

}  // namespace
}  // namespace specbed
