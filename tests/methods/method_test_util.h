// Test helper shared by the method tests: a MethodContext for one loaded target whose
// load_model loads (and caches for the whole test binary) any other model by name, in float32.
// Checked by: tests/methods/eagle3_drafter_test.cpp, tests/methods/osd_test.cpp,
// tests/methods/specblock_test.cpp (the tests that use it).
#pragma once

#include <map>
#include <string>

#include "methods/method_registry.h"
#include "models/model_registry.h"

namespace specbed {
namespace testing_util {

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

}  // namespace testing_util
}  // namespace specbed
