// The built-in method registry (RegisterBuiltinMethods), built once per test binary, for the tests
// that expand sweeps or check configs and method names against it (header only).
// Checked by: tests/engine/sweep_test.cpp
#pragma once

#include "methods/method_registry.h"

namespace specbed::testing {

inline const MethodRegistry& BuiltinMethods() {
  static const MethodRegistry registry = [] {
    MethodRegistry r;
    RegisterBuiltinMethods(r);
    return r;
  }();
  return registry;
}

}  // namespace specbed::testing
