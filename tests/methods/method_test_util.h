// Test helpers shared by the method tests: a MethodContext for one loaded target whose
// load_model loads (and caches for the whole test binary) any other model by name, in float32;
// stories260K with every method registered and such a context (and the errors of builds in it);
// a built-in method's traits and default knobs; a cost-model clock for timing-driven decisions
// (TargetForwardClock); and the tiny draft-head shape
// (with a tiny random EAGLE-3 head) for the tiny random target of engine_test_util.h.
// Checked by: tests/methods/eagle3_drafter_test.cpp, tests/methods/osd_test.cpp,
// tests/methods/specblock_test.cpp, tests/methods/ltd_test.cpp, tests/methods/pearl_test.cpp,
// tests/methods/specbranch_test.cpp, tests/methods/jetspec_test.cpp (the tests that use it).
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "base/clock.h"
#include "base/error.h"
#include "methods/eagle3/eagle3_checkpoint.h"
#include "methods/eagle3/eagle3_config.h"
#include "methods/method_registry.h"
#include "models/model_registry.h"

namespace specbed {
namespace testing_util {

// A decision clock (base/clock.h) for tests of timing-driven methods (the SpecBlock
// bandit's throughput reward): 1 ms per forward of `target` (its prefill and each verify step,
// LlamaModel::forward_calls), so the decisions do not depend on the machine's load. Drafter
// forwards and online updates cost nothing in it. `target` must outlive the clock.
inline CostModelClock TargetForwardClock(const LoadedTarget& target) {
  return CostModelClock(
      [&target] { return 1e-3 * static_cast<double>(target.model->forward_calls()); });
}

// target: the case's target (must outlive the context); dtype float32.
inline MethodContext CachingContextFor(LoadedTarget& target) {
  MethodContext c;
  c.target = &target;
  c.dtype = at::kFloat;
  c.load_model = [](const std::string& name) -> LoadedTarget& {
    static std::map<std::string, LoadedTarget> cache;
    auto it = cache.find(name);
    if (it == cache.end()) it = cache.emplace(name, LoadModel(name, at::kFloat)).first;
    return it->second;
  };
  return c;
}

// stories260K in float32, every built-in method registered, and a MethodContext over it made
// by `make_context` (CachingContextFor unless given).
struct StoriesMethods {
  explicit StoriesMethods(MethodContext (*make_context)(LoadedTarget&) = CachingContextFor)
      : target(LoadModel("stories260K", at::kFloat)), context(make_context(target)) {
    RegisterBuiltinMethods(registry);
  }
  StoriesMethods(const StoriesMethods&) = delete;
  StoriesMethods& operator=(const StoriesMethods&) = delete;

  LoadedTarget target;
  MethodRegistry registry;
  MethodContext context;  // points at `target`
};

// Building `method` with `knobs` in `s` throws a specbed::Error whose message contains `part`.
inline void ExpectBuildError(StoriesMethods& s, const std::string& method,
                             const nlohmann::json& knobs, const std::string& part) {
  try {
    s.registry.Build(method, s.context, knobs);
    ADD_FAILURE() << method << " built with " << knobs.dump();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(part), std::string::npos)
        << "'" << part << "' not in: " << message << " (" << method << " with " << knobs.dump()
        << ")";
  }
}

// `name` is a built-in method whose traits hold every entry of `traits` (as MethodTraits::ToJson
// writes them) and whose default knobs, resolved for the model `model` ("": for none), hold every
// entry of `knobs`.
inline void ExpectBuiltin(const std::string& name, const nlohmann::json& traits,
                          const std::string& model, const nlohmann::json& knobs) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  ASSERT_TRUE(registry.Has(name));
  const nlohmann::json got = registry.Info(name).traits.ToJson();
  for (const auto& [key, value] : traits.items()) {
    EXPECT_EQ(got.at(key), value) << name << ": trait " << key;
  }
  const nlohmann::json resolved =
      model.empty() ? registry.ResolveKnobs(name, nlohmann::json::object())
                    : registry.ResolveKnobsFor(name, nlohmann::json::object(), model);
  for (const auto& [key, value] : knobs.items()) {
    EXPECT_EQ(resolved.at(key), value) << name << ": knob " << key;
  }
}

// A random EAGLE-3 head over 3 of the 4 tokens of TinyRandomTarget (engine_test_util.h), its
// lm_head scaled by 80 so that its drafts are sharp.
struct TinyEagle3Head {
  Eagle3Config config;
  std::map<std::string, at::Tensor> tensors;
};

// Sets the shape of a tiny draft head (an Eagle3Config or a SpecBlockConfig) over 3 of the 4
// tokens of TinyRandomTarget, reading its 3 layers: hidden 16, 2 heads of 8 (1 KV head).
template <typename HeadConfig>
void SetTinyHeadShape(HeadConfig& h) {
  h.hidden_size = 16;
  h.intermediate_size = 32;
  h.n_heads = 2;
  h.n_kv_heads = 1;
  h.head_dim = 8;
  h.target_hidden_size = 16;
  h.vocab_size = 4;
  h.draft_vocab_size = 3;
  h.aux_layer_ids = {0, 1, 2};
}

inline TinyEagle3Head MakeTinyEagle3Head() {
  TinyEagle3Head head;
  SetTinyHeadShape(head.config);
  head.tensors = RandomEagle3Tensors(head.config, 5);
  head.tensors[kEagle3LmHead] = head.tensors[kEagle3LmHead] * 80;
  return head;
}

}  // namespace testing_util
}  // namespace specbed
