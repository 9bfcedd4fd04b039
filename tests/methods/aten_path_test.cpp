// Every registered method with its target and draft LMs on the ATen forward path
// (models/llama_forward_aten.h), forced on the CPU with SetCpuForwardPathOverride: token-identical
// to AR on the row kernels at T = 0 on 8 story prompts of stories260K (its shipped drafters), with
// draft tokens accepted. (The twin computes the same function; tests/engine/aten_forward_test.cpp
// checks the ATen path on it.) The T = 1 chi-square tests of SpS, EAGLE-3 and DDTree (with their
// negative controls) run on the ATen path as separate ctest entries (SPECBED_FORWARD=aten,
// tests/methods and tests/engine CMakeLists). With a bfloat16 target every method runs and gets
// drafts accepted. On a CUDA device every method runs on the GPU and matches AR on the CPU
// (AtenPathCuda).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "harness/runner/runner.h"
#include "methods/eagle3/eagle3_drafter.h"
#include "methods/eagle3/eagle3_method.h"
#include "methods/method_registry.h"
#include "models/llama_model.h"
#include "tests/common/cuda_test_util.h"

namespace specbed {
namespace {

// Decodes every prompt of `ids` with `decoder` (greedy unless seeded, `max_tokens` tokens, seed =
// prompt index); adds the steps' accepted drafts to `accepted`.
std::vector<std::vector<int32_t>> DecodeAll(Decoder& decoder, LoadedTarget& target,
                                            const std::vector<std::vector<int32_t>>& ids,
                                            int64_t max_tokens, int64_t& accepted) {
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < ids.size(); ++i) {
    GenerationConfig g;
    g.stop = StopConfigFor(target, max_tokens, {});
    g.seed = i;
    KvCache cache = target.model->NewCache(1, 512);
    DecodeResult r;
    decoder.Generate(ids[i], g, cache, r);
    out.push_back(r.generation.tokens);
    for (const StepStats& s : r.steps) accepted += s.n_accepted;
  }
  return out;
}

// A method context over `target` (drafters in `dtype`) whose load_model loads models by name in
// `dtype` on `device` into `loaded`, once each.
MethodContext LoadingContext(LoadedTarget& target, std::map<std::string, LoadedTarget>& loaded,
                             at::ScalarType dtype, at::Device device = at::kCPU) {
  MethodContext context;
  context.target = &target;
  context.dtype = dtype;
  context.load_model = [&loaded, dtype, device](const std::string& name) -> LoadedTarget& {
    auto it = loaded.find(name);
    if (it == loaded.end()) it = loaded.emplace(name, LoadModel(name, dtype, "", device)).first;
    return it->second;
  };
  return context;
}

// Builds every registered method (default knobs) in `context` and runs `decode` on it, which adds
// the draft tokens accepted to its second argument: a speculative method must have some accepted.
// Stops at a fatal failure.
void ForEveryMethod(MethodContext& context,
                    const std::function<void(Decoder&, int64_t& accepted)>& decode) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  for (const std::string& name : registry.Names()) {
    SCOPED_TRACE(name);
    std::cerr << "[ METHOD   ] " << name << std::endl;  // names the method if the process dies
    std::unique_ptr<Decoder> decoder = registry.Build(name, context, nlohmann::json::object());
    int64_t accepted = 0;
    decode(*decoder, accepted);
    if (::testing::Test::HasFatalFailure()) return;
    if (registry.Info(name).traits.speculative) {
      EXPECT_GT(accepted, 0);
    }
  }
}

TEST(AtenPath, EveryMethodMatchesArOnStories260K) {
  at::set_num_threads(1);
  SetCpuForwardPathOverride(ForwardPath::kAten);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  ASSERT_EQ(target.model->forward_path(), ForwardPath::kAten);
  ModelOptions row_options;
  row_options.forward_path = ForwardPath::kRowKernels;
  LlamaModel rows(target.model->config(), target.model->weights(), row_options);

  const auto prompts = LoadDataset("stories", {});
  ASSERT_GE(prompts.size(), 8u);
  std::vector<std::vector<int32_t>> ids, reference;
  for (size_t i = 0; i < 8; ++i) {
    ids.push_back(BuildPromptIds(target, {{"user", prompts[i].turns[0]}}));
    GenerationConfig g;
    g.stop = StopConfigFor(target, 32, {});
    KvCache cache = rows.NewCache(1, 512);
    reference.push_back(GenerateAr(rows, target.tokenizer.get(), ids[i], g, cache).tokens);
  }

  std::map<std::string, LoadedTarget> loaded;
  MethodContext context = LoadingContext(target, loaded, at::kFloat);
  ForEveryMethod(context, [&](Decoder& decoder, int64_t& accepted) {
    const auto decoded = DecodeAll(decoder, target, ids, 32, accepted);
    for (size_t i = 0; i < ids.size(); ++i) {
      EXPECT_EQ(decoded[i], reference[i]) << "prompt " << i;
    }
  });
  for (const auto& [name, model] : loaded) {
    EXPECT_EQ(model.model->forward_path(), ForwardPath::kAten) << name;
  }
  SetCpuForwardPathOverride(ForwardPath::kAuto);
}

// Every registered method with a bfloat16 target on the ATen path (CPU): the drafter heads run
// in bfloat16 on the target's device as they would on a GPU. bf16 verification of several tokens
// at once may round differently from one-token AR, so this asserts what holds at any rounding:
// each method decodes without error, its first token is AR's (the same prefill), and speculative
// methods get drafts accepted.
TEST(AtenPath, EveryMethodRunsWithABfloat16Target) {
  at::set_num_threads(1);
  SetCpuForwardPathOverride(ForwardPath::kAten);
  LoadedTarget target = LoadModel("stories260K", at::kBFloat16);
  ASSERT_EQ(target.model->forward_path(), ForwardPath::kAten);
  const auto prompts = LoadDataset("stories", {});
  std::vector<std::vector<int32_t>> ids, reference;
  for (size_t i = 0; i < 2; ++i) {
    ids.push_back(BuildPromptIds(target, {{"user", prompts[i].turns[0]}}));
    GenerationConfig g;
    g.stop = StopConfigFor(target, 24, {});
    KvCache cache = target.model->NewCache(1, 512);
    reference.push_back(GenerateAr(*target.model, target.tokenizer.get(), ids[i], g, cache).tokens);
  }
  std::map<std::string, LoadedTarget> loaded;
  MethodContext context = LoadingContext(target, loaded, at::kBFloat16);
  {  // the heads really run in the target's dtype on the ATen path
    MethodRegistry registry;
    RegisterBuiltinMethods(registry);
    Eagle3Drafter* eagle3 = nullptr;
    MakeEagle3Decoder(context, registry.ResolveKnobs("eagle3", {{"head", "stories260K-eagle3"}}),
                      &eagle3);
    ASSERT_NE(eagle3, nullptr);
    EXPECT_TRUE(eagle3->head().placement().aten);
    EXPECT_EQ(eagle3->head().placement().dtype, at::kBFloat16);
  }
  ForEveryMethod(context, [&](Decoder& decoder, int64_t& accepted) {
    const auto decoded = DecodeAll(decoder, target, ids, 24, accepted);
    for (size_t i = 0; i < ids.size(); ++i) {
      ASSERT_FALSE(decoded[i].empty());
      EXPECT_EQ(decoded[i][0], reference[i][0]) << "prompt " << i;
    }
  });
  SetCpuForwardPathOverride(ForwardPath::kAuto);
}

// On a CUDA device (skipped without one; failed with SPECBED_REQUIRE_CUDA=1): every registered
// method with target and drafters on the GPU (float32) is token-identical at T = 0 to AR on the
// CPU row kernels, on the stories260K twin pair.
TEST(AtenPathCuda, EveryMethodOnTheGpuMatchesCpuArOnTheTwin) {
  SPECBED_SKIP_WITHOUT_CUDA();
  const at::Device cuda(at::kCUDA, 0);
  LoadedTarget cpu_target = LoadModel("stories260K-twin", at::kFloat);
  LoadedTarget target = LoadModel("stories260K-twin", at::kFloat, "", cuda);
  const auto prompts = LoadDataset("stories", {});
  std::map<std::string, LoadedTarget> loaded;
  MethodContext context = LoadingContext(target, loaded, at::kFloat, cuda);
  // The CPU references, once: 4 prompts x 48 tokens of AR on the row kernels.
  std::vector<std::vector<int32_t>> ids, reference;
  GenerationConfig g;
  g.stop = StopConfigFor(cpu_target, 48, {});
  for (size_t i = 0; i < 4; ++i) {
    ids.push_back(BuildPromptIds(cpu_target, {{"user", prompts[i].turns[0]}}));
    KvCache cpu_cache = cpu_target.model->NewCache(1, 512);
    reference.push_back(
        GenerateAr(*cpu_target.model, cpu_target.tokenizer.get(), ids[i], g, cpu_cache).tokens);
  }
  ForEveryMethod(context, [&](Decoder& decoder, int64_t& accepted) {
    for (size_t i = 0; i < ids.size(); ++i) {
      KvCache cache = target.model->NewCache(1, 512);
      DecodeResult r;
      decoder.Generate(ids[i], g, cache, r);
      EXPECT_EQ(r.generation.tokens, reference[i]) << "prompt " << i;
      for (const StepStats& s : r.steps) accepted += s.n_accepted;
    }
  });
}

}  // namespace
}  // namespace specbed
