// Every registered method with its target and draft LMs on the ATen forward path
// (models/llama_forward_aten.h), forced on the CPU with SetCpuForwardPathOverride: token-identical
// to AR on the row kernels at T = 0 on 8 story prompts of stories260K (its shipped drafters), with
// draft tokens accepted. (The twin computes the same function; tests/engine/aten_forward_test.cpp
// checks the ATen path on it.) The T = 1 chi-square tests of SpS, EAGLE-3 and DDTree (with their
// negative controls) run on the ATen path as separate ctest entries (SPECBED_FORWARD=aten,
// tests/methods and tests/engine CMakeLists).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "harness/runner/runner.h"
#include "methods/method_registry.h"
#include "models/llama_model.h"

namespace specbed {
namespace {

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
  MethodContext context;
  context.target = &target;
  context.load_model = [&](const std::string& name) -> LoadedTarget& {
    auto it = loaded.find(name);
    if (it == loaded.end()) it = loaded.emplace(name, LoadModel(name, at::kFloat)).first;
    EXPECT_EQ(it->second.model->forward_path(), ForwardPath::kAten) << name;
    return it->second;
  };
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  for (const std::string& name : registry.Names()) {
    SCOPED_TRACE(name);
    std::unique_ptr<Decoder> decoder = registry.Build(name, context, nlohmann::json::object());
    int64_t accepted = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      GenerationConfig g;
      g.stop = StopConfigFor(target, 32, {});
      g.seed = i;
      KvCache cache = target.model->NewCache(1, 512);
      DecodeResult r;
      decoder->Generate(ids[i], g, cache, r);
      EXPECT_EQ(r.generation.tokens, reference[i]) << "prompt " << i;
      for (const StepStats& s : r.steps) accepted += s.n_accepted;
    }
    if (registry.Info(name).traits.speculative) EXPECT_GT(accepted, 0);
  }
  SetCpuForwardPathOverride(ForwardPath::kAuto);
}

}  // namespace
}  // namespace specbed
