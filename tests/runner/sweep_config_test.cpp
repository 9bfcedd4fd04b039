// Tests of harness/runner/sweep_config.h (sweep-file parsing, no method registry, no LibTorch; in
// the sanitizer run): knob range strings and clear errors for bad ones, parse errors naming file
// and key, ToJson read back to the same sweep, MatchesCase, config-relative input paths (only the
// knobs the caller names as path knobs), and file errors (1e400, a repeated key, a wrong type)
// naming the file and the line or JSON pointer.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "harness/runner/sweep_config.h"
#include "tests/common/test_util.h"

namespace specbed {
namespace {

using Json = nlohmann::json;
using testing::ErrorOf;

std::vector<Json> Values(const std::vector<Json>& v) {
  return v;
}

// No method has path knobs.
std::vector<std::string> NoPathKnobs(const std::string&) {
  return {};
}

// Writes `text` to a fresh file under the test scratch folder and returns its path.
std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = std::string(SPECBED_TEST_TMPDIR) + "/sweep_config_" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  return path;
}

TEST(KnobRange, GeometricArithmeticAndDefaultStep) {
  EXPECT_EQ(ParseKnobRange("16-256*2", "k"), Values({16, 32, 64, 128, 256}));
  EXPECT_EQ(ParseKnobRange("16-250*2", "k"), Values({16, 32, 64, 128}));
  EXPECT_EQ(ParseKnobRange("1-7+2", "k"), Values({1, 3, 5, 7}));
  EXPECT_EQ(ParseKnobRange("1-8+2", "k"), Values({1, 3, 5, 7}));
  EXPECT_EQ(ParseKnobRange("2-4", "k"), Values({2, 3, 4}));
  EXPECT_EQ(ParseKnobRange("5-5*3", "k"), Values({5}));
  EXPECT_TRUE(ParseKnobRange("1-7+2", "k")[0].is_number_integer());
  const std::vector<Json> floats = ParseKnobRange("0.5-1+0.25", "k");
  EXPECT_EQ(floats, Values({0.5, 0.75, 1.0}));
  EXPECT_TRUE(floats[0].is_number_float());
  EXPECT_EQ(ParseKnobRange("0.1-0.3+0.1", "k"), Values({0.1, 0.2, 0.3})) << "no drift past the end";
  EXPECT_EQ(ParseKnobRange("1-4*1.5", "k"), Values({1.0, 1.5, 2.25, 3.375}));

  EXPECT_TRUE(LooksLikeKnobRange("16-256*2"));
  EXPECT_TRUE(LooksLikeKnobRange("16-"));
  EXPECT_FALSE(LooksLikeKnobRange("stories260K-draft"));
  EXPECT_FALSE(LooksLikeKnobRange("models/x-1"));
  EXPECT_FALSE(LooksLikeKnobRange("16"));
  EXPECT_FALSE(LooksLikeKnobRange(""));
}

TEST(KnobRange, BadStringsFailClearly) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"16-256*", "expected a number after '*'"},
      {"16-", "expected a number after '-'"},
      {"256-16*2", "end is smaller than the start"},
      {"1-7+0", "step must be > 0"},
      {"0-8*2", "start above 0"},
      {"4-8*1", "factor must be > 1"},
      {"1-7/2", "unexpected '/'"},
      {"1-7+2x", "unexpected text after the step"},
      {"1.2.3-4", "expected '-' after the start"},
      {"1-100000+1", "more than 10000 values"},
  };
  for (const auto& [range, why] : bad) {
    const std::string text = range;  // clang 14 (asan preset) cannot capture a structured binding
    const std::string e = ErrorOf([&] { ParseKnobRange(text, "f.json: methods[0].knobs.depth"); });
    EXPECT_CONTAINS(e, "f.json: methods[0].knobs.depth: bad range \"" + text + "\"");
    EXPECT_CONTAINS(e, why);
    EXPECT_CONTAINS(e, "\"START-END*FACTOR\"");
    EXPECT_CONTAINS(e, "\"START-END+STEP\"");
  }
}

TEST(SweepParse, ErrorsNameFileAndKey) {
  auto error_of = [](const char* json) {
    return ErrorOf([&] { ParseSweepConfig(Json::parse(json), "cfg.json"); });
  };
  std::string e = error_of(R"({"methods":["ar",{"name":"sps","knobs":{"gamma":"4-2+1"}}]})");
  EXPECT_CONTAINS(e, "cfg.json: methods[1].knobs.gamma: bad range \"4-2+1\"");
  e = error_of(R"({"methods":[{"name":"sps","knobs":{"gamma":[1,"3-x"]}}]})");
  EXPECT_CONTAINS(e, "cfg.json: methods[0].knobs.gamma[1]: bad range");
  EXPECT_CONTAINS(error_of(R"({"methods":[{"name":"sps","knobs":{"gamma":[]}}]})"),
                  "methods[0].knobs.gamma: a knob list must not be empty");
  EXPECT_CONTAINS(error_of(R"({"repeats":0})"), "cfg.json: key 'repeats' must be an integer >= 1");
  EXPECT_CONTAINS(error_of(R"({"batch_sizes":[1,0]})"), "cfg.json: key 'batch_sizes'");
  EXPECT_CONTAINS(error_of(R"({"batch_sizes":[]})"), "non-empty array");
  EXPECT_CONTAINS(error_of(R"({"repeat":2})"), "did you mean 'repeats'?");
  EXPECT_CONTAINS(error_of(R"({"repeat":2})"), "cfg.json");
  EXPECT_CONTAINS(error_of(R"({"exclude":[{"methd":"ar"}]})"), "cfg.json: exclude[0]");
  EXPECT_CONTAINS(error_of(R"({"exclude":[{"methd":"ar"}]})"), "did you mean 'method'?");
  EXPECT_CONTAINS(error_of(R"({"only":[{"temperature":"hot"}]})"),
                  "only[0].temperature must be a number");
  EXPECT_CONTAINS(error_of(R"({"only":[{}]})"), "only[0] must name at least one field");
  EXPECT_CONTAINS(error_of(R"({"paper":"Table 2"})"), "key 'paper' must be an object");
  EXPECT_CONTAINS(error_of(R"({"methods":[{"name":"sps","gamma":2}]})"), "unknown key 'gamma'");
  // Run-config keys keep their checks.
  EXPECT_CONTAINS(error_of(R"({"temperatures":[-1]})"), "temperatures must be in [0, 100]");
}

TEST(SweepParse, ToJsonReadsBackToTheSameSweep) {
  const SweepConfig c = ParseSweepConfig(Json::parse(R"({"name":"s","temperatures":[0,1],
      "methods":["ar",{"name":"sps","knobs":{"gamma":"1-3","drafter":["a","b"]}}],
      "repeats":2,"batch_sizes":[1,4],"exclude":[{"method":"sps","knobs":{"gamma":2}}],
      "only":[{"temperature":[0]}],"paper":{"table":"2"}})"),
                                         "s.json");
  ASSERT_EQ(c.base.methods.size(), 1u + 3u * 2u) << "knob lists and ranges crossed";
  EXPECT_EQ(c.method_entries[1]["knobs"]["gamma"], "1-3") << "entries kept as written";
  const Json written = c.ToJson();
  const SweepConfig again = ParseSweepConfig(written, "s.json");
  EXPECT_EQ(again.ToJson(), written);
  EXPECT_EQ(again.base.methods.size(), c.base.methods.size());
  EXPECT_EQ(again.repeats, 2);
  EXPECT_EQ(again.batch_sizes, (std::vector<int64_t>{1, 4}));
  // Found by fuzz_sweep_config: ToJson writes the default synthetic_acceptance [] (off), which
  // ParseRunConfig refused ("must be a non-empty array"), so no stored sweep read back.
  EXPECT_EQ(written["synthetic_acceptance"], Json::array());
  EXPECT_TRUE(ParseSweepConfig(Json::parse(R"({"synthetic_acceptance":[]})"), "s.json")
                  .base.synthetic_acceptance.empty());
  // A plain run config seen as a sweep reads back as itself too.
  const SweepConfig plain = SweepFromRunConfig(c.base);
  EXPECT_EQ(ParseSweepConfig(plain.ToJson(), "p.json").ToJson(), plain.ToJson());
}

TEST(SweepParse, MatchesCaseComparesFieldsKnobsAndAlternatives) {
  CaseConfig c;
  c.target = "stories260K";
  c.method = {"sps", {{"gamma", 4}, {"drafter", "d"}}};
  c.dataset.name = "stories";
  c.temperature = 0.7;
  c.seed = 3;
  c.batch_size = 2;
  EXPECT_TRUE(MatchesCase(Json::parse(R"({"method":"sps","knobs":{"gamma":4}})"), c));
  EXPECT_TRUE(MatchesCase(Json::parse(R"({"method":["ar","sps"],"temperature":0.7})"), c));
  EXPECT_TRUE(MatchesCase(Json::parse(R"({"knobs":{"gamma":[2,4.0]},"seed":[3]})"), c));
  EXPECT_FALSE(MatchesCase(Json::parse(R"({"knobs":{"gamma":3}})"), c));
  EXPECT_FALSE(MatchesCase(Json::parse(R"({"knobs":{"depth":4}})"), c)) << "absent knob";
  EXPECT_FALSE(MatchesCase(Json::parse(R"({"batch_size":1})"), c));
  EXPECT_FALSE(MatchesCase(Json::parse(R"({"dataset":"gsm8k","method":"sps"})"), c));
}

TEST(SweepLoad, InputPathsResolveFromTheConfigFolderForNamedKnobsOnly) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(SPECBED_TEST_TMPDIR) / "sweep_config_paths";
  fs::create_directories(dir / "models");
  std::ofstream(dir / "models" / "m.bin") << "x";
  std::ofstream(dir / "p.jsonl") << "{}";
  const std::string path = (dir / "sweep.json").string();
  std::ofstream(path) << R"({"targets":["models/m.bin","stories260K"],
      "datasets":["p.jsonl",{"name":"p.jsonl","limit":1}],
      "methods":[{"name":"sps","knobs":{"drafter":["models/m.bin"],"other":"models/m.bin"}},
                 {"name":"x","knobs":{"drafter":"models/m.bin"}}]})";
  const SweepConfig c = LoadSweepConfig(path, [](const std::string& method) {
    return method == "sps" ? std::vector<std::string>{"drafter"} : std::vector<std::string>{};
  });
  const std::string model = (dir / "models" / "m.bin").lexically_normal().string();
  const std::string prompts = (dir / "p.jsonl").lexically_normal().string();
  EXPECT_EQ(c.base.targets, (std::vector<std::string>{model, "stories260K"}));
  EXPECT_EQ(c.base.datasets[0].name, prompts);
  EXPECT_EQ(c.base.datasets[1].name, prompts);
  ASSERT_EQ(c.method_entries.size(), 2u);
  EXPECT_EQ(c.method_entries[0]["knobs"]["drafter"], Json::array({model}));
  EXPECT_EQ(c.method_entries[0]["knobs"]["other"], "models/m.bin") << "not a path knob";
  EXPECT_EQ(c.method_entries[1]["knobs"]["drafter"], "models/m.bin") << "not this method's";
}

// The defects of issue 14 through a sweep file: 1e400, a repeated key and a wrong type each fail
// as specbed::Error naming the file and the line or the JSON pointer.
TEST(SweepLoad, FileErrorsNameTheFileLineAndField) {
  std::string e = ErrorOf([] {
    LoadSweepConfig(WriteFile("overflow.json", "{\n  \"repeats\": 2,\n  \"top_p\": 1e400\n}\n"),
                    NoPathKnobs);
  });
  EXPECT_CONTAINS(e, "sweep_config_overflow.json:3: not valid JSON");
  e = ErrorOf([] {
    LoadSweepConfig(
        WriteFile("dup.json",
                  R"({"methods": [{"name": "sps", "knobs": {"gamma": 3, "gamma": 5}}]})"),
        NoPathKnobs);
  });
  EXPECT_CONTAINS(e, "sweep_config_dup.json");
  EXPECT_CONTAINS(e, "duplicate key \"gamma\" at /methods/0/knobs/gamma");
  e = ErrorOf([] {
    LoadSweepConfig(WriteFile("type.json", R"({"datasets": [{"name": "p", "limit": "all"}]})"),
                    NoPathKnobs);
  });
  EXPECT_CONTAINS(e, "sweep_config_type.json");
  EXPECT_CONTAINS(e, "limit");
  e = ErrorOf([] { LoadSweepConfig(WriteFile("array.json", "[1, 2]"), NoPathKnobs); });
  EXPECT_CONTAINS(e, "sweep_config_array.json");
  e = ErrorOf([] {
    LoadSweepConfig(WriteFile("huge.json", R"({"max_new_tokens": 4000000000000})"), NoPathKnobs);
  });
  EXPECT_CONTAINS(e, "sweep_config_huge.json: max_new_tokens must be in [1, 1048576]");
}

}  // namespace
}  // namespace specbed
