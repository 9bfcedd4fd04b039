// The built-in method registry (BuiltinMethodRegistry), built once per process, for the tests
// that expand sweeps or check configs and method names against it (header only).
// Checked by: tests/engine/sweep_test.cpp
#pragma once

#include "methods/method_registry.h"

namespace specbed::testing {

inline const MethodRegistry& BuiltinMethods() {
  return BuiltinMethodRegistry();
}

}  // namespace specbed::testing
