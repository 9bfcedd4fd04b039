// Parity with Hugging Face transformers: the fixtures written by tests/parity/make_hf_fixtures.py
// (tiny random Llama-3 with GQA and llama3 rope scaling, Qwen2 with q/k/v biases and a tied head,
// Qwen3 with q/k norm and an explicit head_dim, Mistral with a sliding window wider than its
// sequences; save_pretrained checkpoints plus transformers' logits and greedy ids) loaded by
// SpecBed's HF loader and run by both forward paths:
// - float32 logits of every prompt position within 1e-4 x max(1, max |logit|) (row kernels and
//   the ATen path on the CPU; the ATen path on CUDA when a GPU is visible);
// - greedy ids of 16 tokens after each prompt, decoded with the KV cache, equal to transformers';
// - bfloat16 last-position logits within a relative L2 error of 3e-2 of transformers' bfloat16.
// The fixtures live in tests/parity/fixtures (the GPU machine's committed record) or
// $SPECBED_PARITY_FIXTURES (ctest's TransformersLive.LogitsAndIds writes them there on every run
// with the project's .venv: tests/parity/live_parity.sh). Families absent from the folder are
// skipped (the committed record predates mistral); with none present every test skips, saying how
// to make them. SPECBED_PARITY_REQUIRE=1 (the live run) turns every absent family into a failure.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/paths.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/llama_model.h"
#include "tests/common/cuda_test_util.h"

namespace specbed {
namespace {

const char* const kModels[] = {"llama3", "qwen2", "qwen3", "mistral"};

std::string FixtureRoot() {
  const char* env = std::getenv("SPECBED_PARITY_FIXTURES");
  return env != nullptr && *env != '\0' ? std::string(env) : HomePath("tests/parity/fixtures");
}

bool Required() {
  const char* env = std::getenv("SPECBED_PARITY_REQUIRE");
  return env != nullptr && std::string(env) == "1";
}

// The families with fixtures in FixtureRoot(); under SPECBED_PARITY_REQUIRE=1 a missing one fails.
std::vector<std::string> FixtureModels() {
  std::vector<std::string> present, missing;
  for (const char* name : kModels) {
    (std::ifstream(FixtureRoot() + "/" + name + "/expected.json") ? present : missing)
        .push_back(name);
  }
  for (const std::string& name : missing) {
    if (Required()) {
      ADD_FAILURE() << "SPECBED_PARITY_REQUIRE=1: no " << name << " fixture in " << FixtureRoot();
    } else if (!present.empty()) {
      std::cout << "[ PARITY   ] " << name << ": no fixture in " << FixtureRoot()
                << " (skipped; tests/parity/make_hf_fixtures.py writes it)" << std::endl;
    }
  }
  return present;
}

#define FIXTURE_MODELS_OR_SKIP(models)                                                         \
  const std::vector<std::string> models = FixtureModels();                                     \
  if (models.empty() && Required()) FAIL() << "no transformers fixtures in " << FixtureRoot(); \
  if (models.empty())                                                                          \
  GTEST_SKIP() << "no transformers fixtures in " << FixtureRoot()                              \
               << " (make them where transformers is installed: "                              \
                  "tests/parity/make_hf_fixtures.py tests/parity/fixtures, or scripts/gpu_check)"

nlohmann::json Expected(const std::string& name) {
  std::ifstream in(FixtureRoot() + "/" + name + "/expected.json");
  return nlohmann::json::parse(in);
}

at::Tensor Ids(const std::vector<int64_t>& ids, at::Device device) {
  return at::tensor(ids, at::kLong).reshape({1, -1}).to(device);
}

at::Tensor Rows(const nlohmann::json& rows) {  // [T][V] -> float32 [T, V]
  std::vector<float> flat;
  for (const auto& r : rows) {
    for (const auto& v : r) flat.push_back(v.get<float>());
  }
  return at::tensor(flat).reshape({static_cast<int64_t>(rows.size()), -1});
}

LlamaModel Load(const std::string& name, at::ScalarType dtype, at::Device device,
                ForwardPath path) {
  LoadedModel m = LoadHfCheckpoint(FixtureRoot() + "/" + name, dtype);
  ModelOptions options;
  options.forward_path = path;
  return LlamaModel(m.config, m.weights.To(dtype, device), options);
}

std::vector<int64_t> Greedy(LlamaModel& model, const std::vector<int64_t>& prompt, int n) {
  KvCache cache = model.NewCache(1, static_cast<int64_t>(prompt.size()) + n + 1);
  at::Tensor logits = model.Forward(Ids(prompt, model.device()), cache).logits;
  std::vector<int64_t> out;
  for (int i = 0; i < n; ++i) {
    out.push_back(logits.reshape({-1}).argmax().item<int64_t>());
    logits = model.Forward(Ids({out.back()}, model.device()), cache).logits;
  }
  return out;
}

// Float32 logits and greedy ids of every fixture model on `device` through `path`.
void ExpectFloat32Parity(const std::vector<std::string>& models, at::Device device,
                         ForwardPath path, const char* path_name) {
  for (const std::string& name : models) {
    SCOPED_TRACE(name);
    const nlohmann::json e = Expected(name);
    LlamaModel model = Load(name, at::kFloat, device, path);
    double worst = 0;
    for (size_t p = 0; p < e["prompts"].size(); ++p) {
      const auto prompt = e["prompts"][p].get<std::vector<int64_t>>();
      const at::Tensor ref = Rows(e["logits"][p]);
      KvCache cache = model.NewCache(1, static_cast<int64_t>(prompt.size()));
      ForwardOptions options;
      options.logits = LogitsMode::kAll;
      const at::Tensor got = model.Forward(Ids(prompt, device), cache, options).logits[0].cpu();
      ASSERT_EQ(got.sizes(), ref.sizes()) << "prompt " << p;
      const double tol = 1e-4 * std::max(1.0, ref.abs().max().item<double>());
      const double err = (got - ref).abs().max().item<double>();
      worst = std::max(worst, err);
      EXPECT_LE(err, tol) << "prompt " << p << ": max |logit - transformers|";
      EXPECT_EQ(Greedy(model, prompt, e["n_new"].get<int>()),
                e["greedy"][p].get<std::vector<int64_t>>())
          << "prompt " << p << ": greedy ids differ from transformers'";
    }
    std::cout << "[ PARITY   ] " << name << " float32 (" << path_name << ") on " << device
              << ": max |logit - "
              << "transformers " << e["transformers"].get<std::string>() << "| = " << worst
              << std::endl;
    ::testing::Test::RecordProperty(name + "_max_abs_err", std::to_string(worst));
  }
}

TEST(HfParity, Float32LogitsAndGreedyIdsMatchTransformersOnTheRowKernels) {
  FIXTURE_MODELS_OR_SKIP(models);
  ExpectFloat32Parity(models, at::kCPU, ForwardPath::kRowKernels, "row kernels");
}

TEST(HfParity, Float32LogitsAndGreedyIdsMatchTransformersOnTheAtenPath) {
  FIXTURE_MODELS_OR_SKIP(models);
  ExpectFloat32Parity(models, at::kCPU, ForwardPath::kAten, "ATen path");
}

TEST(HfParity, Bfloat16LastLogitsStayCloseToTransformers) {
  FIXTURE_MODELS_OR_SKIP(models);
  for (const std::string& name : models) {
    SCOPED_TRACE(name);
    const nlohmann::json e = Expected(name);
    LlamaModel model = Load(name, at::kBFloat16, at::kCPU, ForwardPath::kAuto);
    double worst_abs = 0, worst_rel = 0;
    for (size_t p = 0; p < e["prompts"].size(); ++p) {
      const auto prompt = e["prompts"][p].get<std::vector<int64_t>>();
      KvCache cache = model.NewCache(1, static_cast<int64_t>(prompt.size()));
      const at::Tensor got = model.Forward(Ids(prompt, at::kCPU), cache).logits.reshape({-1});
      const at::Tensor ref = at::tensor(e["bf16_last_logits"][p].get<std::vector<float>>());
      const double rel = ((got.to(at::kFloat) - ref).norm() / ref.norm()).item<double>();
      EXPECT_LT(rel, 3e-2) << "prompt " << p << ": relative L2 error of bfloat16 logits";
      worst_rel = std::max(worst_rel, rel);
      worst_abs = std::max(worst_abs, (got.to(at::kFloat) - ref).abs().max().item<double>());
    }
    std::cout << "[ PARITY   ] " << name << " bfloat16 on cpu (transformers' on "
              << e.value("bf16_device", std::string("?"))
              << "): max |logit - transformers| = " << worst_abs << ", max relative L2 "
              << worst_rel << std::endl;
  }
}

TEST(HfParityCuda, Float32LogitsAndGreedyIdsMatchTransformersOnCuda) {
  SPECBED_SKIP_WITHOUT_CUDA();
  FIXTURE_MODELS_OR_SKIP(models);
  ExpectFloat32Parity(models, at::Device(at::kCUDA, 0), ForwardPath::kAuto, "auto path");
}

}  // namespace
}  // namespace specbed
