// `specbed train ltd` in the simulated-reward mode (methods/ltd/ltd_trainer.h) on stories260K with
// its shipped EAGLE-3 head and hand-written cost tables:
// - two runs with the same settings write bitwise-identical policies (the simulated mode is
//   deterministic; measured rewards are not, see methods/ltd/README.md);
// - the written policies load into `ltd` and stay token-identical to AR;
// - the size stage learns what the tables favour: with a steep T_verify(V) its greedy policy
//   verifies few nodes (mean V <= 3 of 1..16); with a flat T_verify it verifies many (mean V >= 8).
// - an unavailable --device fails naming it before the target loads; on a GPU (LtdTrainerCuda)
//   a simulated run trains with the target and head on cuda and its policies stay
//   token-identical to AR there.
// Seeded and single-threaded: deterministic outcomes (no false-failure rate).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/runner/runner.h"
#include "methods/ltd/ltd_policy.h"
#include "methods/ltd/ltd_trainer.h"
#include "methods/method_registry.h"
#include "tests/common/cuda_test_util.h"
#include "tests/methods/ppo_test_util.h"
#include "tests/methods/story_test_util.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;

// T_draft(D) = D ms; T_verify(V) = 1 ms + slope * V ms.
std::string WriteTables(const std::string& dir, double slope) {
  fs::create_directories(dir);
  nlohmann::ordered_json j;
  j["t_draft"] = nlohmann::ordered_json::array();
  for (int d = 1; d <= 12; ++d) j["t_draft"].push_back({{"D", d}, {"ms", 1.0 * d}});
  j["t_verify"] = nlohmann::ordered_json::array();
  for (int v = 1; v <= 16; ++v) j["t_verify"].push_back({{"V", v}, {"ms", 1.0 + slope * v}});
  const std::string path = dir + "/input_tables.json";
  std::ofstream(path) << j.dump(2);
  return path;
}

LtdTrainConfig SmallConfig(const std::string& tables) {
  LtdTrainConfig c = DefaultLtdTrainConfig();
  c.target = "stories260K";
  c.timing = "simulated";
  c.tables = tables;
  c.max_new_tokens = 32;
  c.val_count = 2;
  c.n_actions = 16;
  c.size_step = 1;
  c.partner_rounds_max = 4;
  c.partner_nodes = 4;
  c.depth_hidden = {32};
  c.size_hidden = {32, 16};
  c.critic_hidden = {32, 16};
  c.size_steps = 1024;
  c.depth_steps = 256;
  c.iter_steps = 128;
  c.iterations = 1;
  testing_util::SetSmallPpo(c.ppo);
  c.eval_every = 100;
  return c;
}

// The policies in `dir` loaded into `ltd` (top_k 10, max_depth 12) with stories260K on `device`
// decode the first `n_prompts` story prompts token-identically to AR (48 tokens each).
void ExpectPoliciesMatchAr(const std::string& dir, const at::Device& device, size_t n_prompts) {
  LoadedTarget target = LoadModel("stories260K", at::kFloat, "", device);
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context;
  context.target = &target;
  context.device = device;
  context.load_model = [](const std::string& n) -> LoadedTarget& { Fail("unexpected ", n); };
  std::unique_ptr<Decoder> decoder =
      registry.Build("ltd", context, {{"policy", dir}, {"top_k", 10}, {"max_depth", 12}});
  const auto prompts = LoadDataset("stories", {});
  for (size_t i = 0; i < n_prompts; ++i) {
    const testing_util::StoryRun run =
        testing_util::RunStoryPrompt(target, *decoder, prompts[i], {48, /*extra_cache=*/-1, 0});
    EXPECT_EQ(run.spec.generation.tokens, run.ar.tokens) << "prompt " << i;
  }
}

TEST(LtdTrainer, SimulatedModeIsReproducibleAndItsPoliciesRunExactly) {
  at::set_num_threads(1);
  const std::string root = ::testing::TempDir() + "/ltd_trainer_repro";
  fs::remove_all(root);
  const std::string tables = WriteTables(root, 2.0);
  LtdTrainConfig c = SmallConfig(tables);
  c.size_steps = 256;
  const LtdTrainResult a = TrainLtd(c, root + "/a", false);
  const LtdTrainResult b = TrainLtd(c, root + "/b", false);
  ASSERT_TRUE(a.finished && b.finished);
  for (const char* part : {"depth", "size"}) {
    const auto ta = LoadLtdPolicy(root + "/a/" + part).tensors;
    const auto tb = LoadLtdPolicy(root + "/b/" + part).tensors;
    for (const auto& [name, t] : ta) EXPECT_TRUE(at::equal(t, tb.at(name))) << part << " " << name;
  }
  // Every simulated figure agrees (policy_us_per_cycle is a measured inference time).
  auto figures = [](nlohmann::ordered_json f) {
    for (auto& [k, v] : f.items()) v.erase("policy_us_per_cycle");
    return f.dump();
  };
  EXPECT_EQ(figures(a.summary["final_validation"]), figures(b.summary["final_validation"]));
  // A rerun of a finished directory trains nothing and keeps the result.
  const LtdTrainResult again = TrainLtd(c, root + "/a", false);
  EXPECT_TRUE(again.finished);

  ExpectPoliciesMatchAr(root + "/a", at::kCPU, 4);
}

TEST(LtdTrainer, SizeStageLearnsWhatTheTablesFavour) {
  at::set_num_threads(1);
  const std::string root = ::testing::TempDir() + "/ltd_trainer_tables";
  fs::remove_all(root);
  double mean_v[2];
  for (int k = 0; k < 2; ++k) {
    const std::string dir = root + (k == 0 ? "/steep" : "/flat");
    const LtdTrainConfig c = SmallConfig(WriteTables(dir, k == 0 ? 3.0 : 0.0));
    const LtdTrainResult r = TrainLtd(c, dir + "/out", false, /*stop_after_stages=*/1);
    EXPECT_EQ(r.stages_done, 1);
    const LtdPolicyCheckpoint size = LoadLtdPolicy(dir + "/out/size");
    mean_v[k] = size.config.evaluation["validation"]["mean_V"].get<double>();
  }
  EXPECT_LE(mean_v[0], 3.0) << "steep T_verify: expected few verified nodes";
  EXPECT_GE(mean_v[1], 8.0) << "flat T_verify: expected many verified nodes";
}

// The device is checked before anything loads: the (unknown) target is never opened.
TEST(LtdTrainer, UnavailableDeviceFailsBeforeTheTargetLoads) {
  if (at::globalContext().hasCUDA()) GTEST_SKIP() << "a CUDA device is visible";
  LtdTrainConfig c = SmallConfig("unused.json");
  c.target = "no-such-model";
  c.device = "cuda:7";
  try {
    TrainLtd(c, ::testing::TempDir() + "/ltd_trainer_device", false);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--device"), std::string::npos) << what;
    EXPECT_NE(what.find("device 'cuda:7' is not available"), std::string::npos) << what;
  }
}

// On a GPU: the target and the EAGLE-3 head of a simulated run live on cuda (the policies stay
// host MLPs), and the written policies decode token-identically to AR on cuda.
TEST(LtdTrainerCuda, SimulatedRunOnCudaWritesPoliciesThatStayLossless) {
  SPECBED_SKIP_WITHOUT_CUDA();
  at::set_num_threads(1);
  const std::string root = ::testing::TempDir() + "/ltd_trainer_cuda";
  fs::remove_all(root);
  LtdTrainConfig c = SmallConfig(WriteTables(root, 2.0));
  c.size_steps = 256;
  c.device = "cuda";
  const LtdTrainResult r = TrainLtd(c, root + "/out", false);
  ASSERT_TRUE(r.finished);

  ExpectPoliciesMatchAr(root + "/out", at::Device(at::kCUDA), 2);
}

}  // namespace
}  // namespace specbed
