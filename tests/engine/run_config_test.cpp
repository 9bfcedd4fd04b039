// Tests of run-config parsing, case expansion and case keys, and of the runner's resume logic.
#include <gtest/gtest.h>

#include <fstream>

#include <cstdlib>
#include <filesystem>

#include "base/error.h"
#include "harness/runner/run_config.h"
#include "harness/runner/runner.h"

namespace specbed {
namespace {

using Json = nlohmann::json;

std::string ErrorOf(const Json& j) {
  try {
    ParseRunConfig(j, "cfg.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RunConfig, DefaultsAndExpansion) {
  const RunConfig c = ParseRunConfig(
      Json::parse(R"({"targets":["stories260K"],"methods":["ar",{"name":"ar","knobs":{}}],
                      "datasets":[{"name":"stories","limit":2,"categories":["story"]},"spec_bench"],
                      "temperatures":[0,1],"seeds":[0,1,2]})"),
      "cfg.json");
  EXPECT_EQ(c.max_new_tokens, 128);
  EXPECT_EQ(c.dtype, "float32");
  const auto cases = ExpandCases(c);
  EXPECT_EQ(cases.size(), 1u * 2 * 2 * 2 * 3);
  EXPECT_EQ(cases[0].dataset.limit, 2);
  EXPECT_EQ(cases[0].dataset.categories, std::vector<std::string>{"story"});
}

TEST(RunConfig, KeysAreStableAndDistinguishCases) {
  const RunConfig c = ParseRunConfig(Json::parse(R"({"temperatures":[0,1]})"), "cfg.json");
  const auto a = ExpandCases(c), b = ExpandCases(c);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].Key(), b[0].Key());
  EXPECT_NE(a[0].Key(), a[1].Key());
  EXPECT_EQ(a[0].Key().size(), 16u);
}

// The device joins the key and the stored config only off the CPU (cases of configs written
// before devices keep their keys and match in `compare`), and separates workloads (an AR case on
// the CPU is no baseline for a GPU case).
TEST(RunConfig, DeviceIsInTheKeyOnlyOffTheCpu) {
  RunConfig c;
  const auto cpu = ExpandCases(c);
  c.device = "cuda:0";
  const auto gpu = ExpandCases(c);
  EXPECT_FALSE(cpu[0].IdentityJson().contains("device"));
  EXPECT_EQ(gpu[0].IdentityJson()["device"], "cuda:0");
  // The stored config names the device off the CPU only, so `compare` matches cases stored before
  // devices (its key hashes the stored config); the cases table's device column always has it.
  EXPECT_FALSE(cpu[0].ToJson().contains("device"));
  EXPECT_EQ(gpu[0].ToJson()["device"], "cuda:0");
  EXPECT_NE(cpu[0].Key(), gpu[0].Key());
  EXPECT_NE(WorkloadKey(cpu[0]), WorkloadKey(gpu[0]));
  EXPECT_NE(gpu[0].Label().find("device=cuda:0"), std::string::npos);
}

TEST(RunConfig, BadInputNamesFileAndKey) {
  EXPECT_NE(ErrorOf(Json::parse(R"({"temperatrues":[0]})")).find("did you mean 'temperatures'"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Json::parse(R"({"max_new_tokens":"64"})"))
                .find("cfg.json: key 'max_new_tokens' must be an integer"),
            std::string::npos);
  EXPECT_NE(
      ErrorOf(Json::parse(R"({"temperatures":[-1]})")).find("temperatures must be in [0, 100]"),
      std::string::npos);
  EXPECT_NE(ErrorOf(Json::parse(R"({"top_p":1.5})")).find("top_p must be in (0, 1]"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Json::parse(R"({"max_new_tokens":0})")).find("max_new_tokens must be in [1, "),
            std::string::npos);
  EXPECT_NE(ErrorOf(Json::parse(R"({"dtype":"float64"})")).find("dtype must be"),
            std::string::npos);
  // Devices: syntax here; availability when the case runs (runner, models/device.h).
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "CUDA", "cuda:1234"}) {
    EXPECT_NE(ErrorOf(Json{{"device", bad}}).find("device must be \"cpu\", \"cuda\" or \"cuda:N\""),
              std::string::npos)
        << bad;
  }
  EXPECT_EQ(ParseRunConfig(Json{{"device", "cuda:1"}}, "x.json").device, "cuda:1");
  EXPECT_NE(ErrorOf(Json::parse(R"({"datasets":[{"name":"stories","limt":3}]})")).find("limt"),
            std::string::npos);
  EXPECT_NE(ErrorOf(Json::parse(R"({"methods":[]})")).find("must be non-empty"), std::string::npos);
  EXPECT_NE(ErrorOf(Json::parse(R"([1,2])")).find("must be a JSON object"), std::string::npos);
}

TEST(RunConfig, MalformedJsonFileIsNamed) {
  const std::string path = std::string(SPECBED_TEST_TMPDIR) + "/bad_run_config.json";
  std::ofstream(path) << "{\"targets\": [\"stories260K\",]";
  try {
    LoadRunConfig(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos) << e.what();
  }
}

TEST(Runner, RunsCasesOnceAndResumes) {
  const std::string db = std::string(SPECBED_TEST_TMPDIR) + "/runner_resume.db";
  std::filesystem::remove(db);
  RunConfig c = ParseRunConfig(Json::parse(R"({"datasets":[{"name":"stories","limit":2}],
      "temperatures":[0,1],"max_new_tokens":8,"warmup":0})"),
                               "cfg.json");
  auto store = ResultsStore::Open(db);
  RunnerOptions options;
  options.show_progress = false;
  Runner runner(*store, options);
  const RunnerSummary first = runner.Run(c);
  EXPECT_EQ(first.cases_run, 2);
  c.temperatures = {0, 1, 2};
  const RunnerSummary second = runner.Run(c);
  EXPECT_EQ(second.cases_run, 1);
  EXPECT_EQ(second.cases_skipped, 2);
  EXPECT_EQ(store->CountRows("cases"), 3);
  EXPECT_EQ(store->CountRows("samples"), 6);
  for (const auto& row : store->ListCases()) {
    for (const auto& s : store->LoadSamples(row.case_id)) {
      EXPECT_GE(s.n_output_tokens, 1);
      EXPECT_LE(s.n_output_tokens, 8);
      EXPECT_EQ(s.output_hash.size(), 16u);
    }
  }
}

// Every case records its target's engine settings and what its captured steps did in the warm-up
// and in the timed prompts (kernels/step_graph.h): on the ATen path with SPECBED_GRAPHS=on the
// AR decode step is captured during the warm-up and only replayed while timed.
TEST(Runner, RecordsTheEngineAndItsCapturedSteps) {
  const std::string db = std::string(SPECBED_TEST_TMPDIR) + "/runner_engine.db";
  std::filesystem::remove(db);
  setenv("SPECBED_FORWARD", "aten", 1);
  setenv("SPECBED_GRAPHS", "on", 1);
  const RunConfig c = ParseRunConfig(Json::parse(R"({"datasets":[{"name":"stories","limit":2}],
      "max_new_tokens":12,"warmup":1})"),
                                     "cfg.json");
  auto store = ResultsStore::Open(db);
  RunnerOptions options;
  options.show_progress = false;
  Runner runner(*store, options);
  runner.Run(c);
  unsetenv("SPECBED_FORWARD");
  unsetenv("SPECBED_GRAPHS");
  const auto cases = store->ListCases();
  ASSERT_EQ(cases.size(), 1u);
  const Json engine = Json::parse(cases[0].record.config_json).at("engine");
  EXPECT_EQ(engine.at("forward_path"), "aten") << engine;
  EXPECT_EQ(engine.at("graphs"), "on") << engine;
  EXPECT_EQ(engine.at("graphs_warmup").at("captures"), 1) << engine;
  EXPECT_EQ(engine.at("graphs_timed").at("captures"), 0) << engine;
  EXPECT_GE(engine.at("graphs_timed").at("replays").get<int64_t>(), 2 * 10) << engine;
}

TEST(Runner, UnknownNamesFailBeforeAnythingRuns) {
  const std::string db = std::string(SPECBED_TEST_TMPDIR) + "/runner_unknown.db";
  std::filesystem::remove(db);
  auto store = ResultsStore::Open(db);
  RunnerOptions options;
  options.show_progress = false;
  Runner runner(*store, options);
  auto error_of = [&](const char* json) {
    try {
      runner.Run(ParseRunConfig(Json::parse(json), "cfg.json"));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of(R"({"methods":["eagle9"]})").find("known methods: ar"), std::string::npos);
  EXPECT_NE(error_of(R"({"targets":["stories260k"]})").find("did you mean 'stories260K'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"datasets":["storys"]})").find("did you mean 'stories'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"methods":[{"name":"ar","knobs":{"depth":3}}]})").find("unknown knob"),
            std::string::npos);
  EXPECT_EQ(store->CountRows("cases"), 0);
  EXPECT_EQ(store->CountRows("runs"), 0);
}

}  // namespace
}  // namespace specbed

namespace specbed {
namespace {

std::string LoadError(const std::string& name, const std::string& text) {
  const std::string path = std::string(SPECBED_TEST_TMPDIR) + "/" + name;
  std::ofstream(path) << text;
  try {
    LoadRunConfig(path);
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("non-specbed exception: ") + e.what();
  }
  return "<no error>";
}

// 1e400 used to escape as nlohmann::json::out_of_range naming neither file nor line; a repeated
// key was silently last-wins; a huge max_new_tokens died in a reservation (std::bad_alloc).
TEST(RunConfig, OverflowDuplicateKeysAndHugeMaxNewTokensAreErrorsNamingTheFile) {
  const std::string overflow =
      LoadError("overflow_run.json", "{\n  \"temperatures\": [0],\n  \"top_p\": 1e400\n}\n");
  EXPECT_NE(overflow.find("overflow_run.json:3: not valid JSON"), std::string::npos) << overflow;
  const std::string dup = LoadError(
      "dup_run.json", R"({"methods": [{"name": "sps", "knobs": {"gamma": 3, "gamma": 5}}]})");
  EXPECT_NE(dup.find("dup_run.json"), std::string::npos) << dup;
  EXPECT_NE(dup.find("duplicate key \"gamma\" at /methods/0/knobs/gamma"), std::string::npos)
      << dup;
  const std::string huge = LoadError("huge_run.json", R"({"max_new_tokens": 4000000000000})");
  EXPECT_NE(huge.find("huge_run.json: max_new_tokens must be in [1, 1048576]"), std::string::npos)
      << huge;
  EXPECT_THROW(StopChecker({int64_t{1} << 40, true, {}, {}}, nullptr, 1), Error);
}

}  // namespace
}  // namespace specbed
