// `specbed twin` end to end: a twin of stories260K of a chosen shape generates the same text as
// stories260K and says it is a cost twin; a drafter directory is padded; bad inputs fail clearly;
// `--builtin` prints the cached set; a run on stories260K-twin labels its results and states AR's
// memory-roofline fraction in `specbed summary`.
#include <filesystem>
#include <string>
#include <vector>

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
  ProcResult s = RunSpecbedLine("summary --wide " + dir + "/t.db", dir);  // full knobs
  ASSERT_EQ(s.exit_code, 0) << Describe(s);
  EXPECT_TRUE(Contains(s.out, "stories260K-twin is the cost twin of stories260K"));
  EXPECT_TRUE(Contains(s.out, "AR roofline, case 1 (stories260K-twin, float32, 1 thread"));
  EXPECT_TRUE(Contains(s.out, "of the measured memory bandwidth"));
  EXPECT_TRUE(Contains(s.out, "stories260K-twin-draft"));  // sps's auto drafter
}

// Drafter twins at an explicit attention shape (the 8B-twin recipe of scripts/gpu_check at width
// x4: head_dim 8 -> 32, 16 heads over 4 KV heads): the EAGLE-3, DFlash (also DDTree's) and
// SpecBlock heads padded like the target draft exactly as the originals do: tau on 8 prompts x 48
// tokens is the same number, to the last bit, as on stories260K with its shipped heads.
TEST(CliTwin, DrafterTwinsAtAnExplicitShapeDraftAsTheOriginals) {
  const std::string dir = TestDir();
  const std::string shape = " --width-factor 4 --head-dim 32 --heads 16 --kv-heads 4";
  const std::string src = std::string(SPECBED_SOURCE_DIR) + "/models/stories260K/";
  for (const std::string& what :
       {std::string("stories260K -o ") + dir + "/t --depth 8", src + "eagle3 -o " + dir + "/eagle3",
        src + "dflash -o " + dir + "/dflash", src + "specblock -o " + dir + "/specblock"}) {
    ProcResult r = RunSpecbedLine("twin " + what + shape, dir);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
  }
  const std::string common =
      R"(, "datasets": [{"name": "stories", "limit": 8}], "max_new_tokens": 48, "warmup": 0})";
  WriteFile(dir + "/a.json", R"({"name": "a", "targets": ["stories260K"],
            "methods": ["eagle3", "dflash", "ddtree", "specblock"])" +
                                 common);
  WriteFile(dir + "/b.json", R"({"name": "b", "targets": [")" + dir + R"(/t"], "methods": [
            {"name": "eagle3", "knobs": {"head": ")" +
                                 dir + R"(/eagle3"}},
            {"name": "dflash", "knobs": {"drafter": ")" +
                                 dir + R"(/dflash"}},
            {"name": "ddtree", "knobs": {"drafter": ")" +
                                 dir + R"(/dflash"}},
            {"name": "specblock", "knobs": {"drafter": ")" +
                                 dir + R"(/specblock"}}])" + common);
  std::vector<std::string> taus[2];
  for (int k = 0; k < 2; ++k) {
    const std::string db = dir + (k == 0 ? "/a.db" : "/b.db");
    ProcResult r =
        RunSpecbedLine("run " + dir + (k == 0 ? "/a.json" : "/b.json") + " -o " + db, dir, 300);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    ProcResult s = RunSpecbedLine("summary --json " + db, dir);
    ASSERT_EQ(s.exit_code, 0) << Describe(s);
    for (size_t at = s.out.find("\"tau\""); at != std::string::npos;
         at = s.out.find("\"tau\"", at + 1)) {
      taus[k].push_back(s.out.substr(at, s.out.find_first_of(",}", at) - at));
    }
  }
  ASSERT_EQ(taus[0].size(), 4u);
  EXPECT_EQ(taus[0], taus[1]);
}

}  // namespace
}  // namespace specbed::cli_test
