// `specbed twin` end to end: a twin of stories260K of a chosen shape generates the same text as
// stories260K and says it is a cost twin; a drafter directory is padded; bad inputs fail clearly;
// `--builtin` prints the cached set; a run on stories260K-twin labels its results and states AR's
// memory-roofline fraction in `specbed summary`.
#include <filesystem>
#include <string>

#include "gtest/gtest.h"
#include "tests/cli/cli_test_util.h"

namespace specbed::cli_test {
namespace {

TEST(CliTwin, PadsAModelAndADrafterAndTheTwinGeneratesTheSameText) {
  const std::string dir = TestDir();
  ProcResult r =
      RunSpecbedLine("twin stories260K --width-factor 4 --depth 7 -o " + dir + "/t", dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "cost twin of stories260K (width 256, 7 layers"));
  const std::string config = ReadAll(dir + "/t/config.json");
  EXPECT_TRUE(Contains(config, "\"feature_depth\": 5"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/t/tokenizer.bin"));  // the source's tokenizer
  const std::string args = " --prompt Once --max-new-tokens 24 --temperature 0 --json";
  ProcResult a = RunSpecbedLine("generate --target stories260K" + args, dir);
  ASSERT_EQ(a.exit_code, 0) << Describe(a);
  ProcResult b = RunSpecbedLine("generate --target " + dir + "/t" + args, dir);
  ASSERT_EQ(b.exit_code, 0) << Describe(b);
  const auto ids = [](const std::string& json) {
    const size_t at = json.find("\"generated_ids\"");
    return json.substr(at, json.find(']', at) - at);
  };
  EXPECT_EQ(ids(a.out), ids(b.out));
  EXPECT_TRUE(Contains(b.out, "cost twin of stories260K"));
  ProcResult c = RunSpecbedLine("twin " + std::string(SPECBED_SOURCE_DIR) +
                                    "/models/stories260K/eagle3 --width-factor 2 -o " + dir + "/h",
                                dir);
  ASSERT_EQ(c.exit_code, 0) << Describe(c);
  EXPECT_TRUE(Contains(ReadAll(dir + "/h/config.json"), "\"target_hidden_size\": 128"));
}

TEST(CliTwin, BadInputsFailClearly) {
  const std::string dir = TestDir();
  ProcResult r = RunSpecbedLine("twin stories260K --depth 3 -o " + dir + "/t", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "depth 3 is below the original's 5 layers"));
  r = RunSpecbedLine("twin no/such/model -o " + dir + "/t", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "no/such/model"));
  r = RunSpecbedLine("twin stories260K", dir);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "-o DIR"));
  r = RunSpecbedLine("twin stories260K --width-factor 0 -o x", dir);
  EXPECT_GE(r.exit_code, 100);  // CLI11 range check
}

TEST(CliTwin, RunOnTheTwinIsLabelledWithItsRoofline) {
  const std::string dir = TestDir();
  ProcResult b = RunSpecbedLine("twin --builtin", dir);
  ASSERT_EQ(b.exit_code, 0) << Describe(b);
  EXPECT_TRUE(Contains(b.out, "stories260K-twin set"));
  WriteFile(dir + "/twin.json",
            R"({"name": "twin", "targets": ["stories260K-twin"],
                "methods": ["ar", {"name": "sps", "knobs": {"gamma": 3}}],
                "datasets": [{"name": "stories", "limit": 2}], "max_new_tokens": 12,
                "warmup": 0})");
  ProcResult r = RunSpecbedLine("run " + dir + "/twin.json --output " + dir + "/t.db", dir, 300);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ProcResult s = RunSpecbedLine("summary " + dir + "/t.db", dir);
  ASSERT_EQ(s.exit_code, 0) << Describe(s);
  EXPECT_TRUE(Contains(s.out, "stories260K-twin is the cost twin of stories260K"));
  EXPECT_TRUE(Contains(s.out, "AR roofline, case 1 (stories260K-twin, float32, 1 thread"));
  EXPECT_TRUE(Contains(s.out, "of the measured memory bandwidth"));
  EXPECT_TRUE(Contains(s.out, "stories260K-twin-draft"));  // sps's auto drafter
}

}  // namespace
}  // namespace specbed::cli_test
