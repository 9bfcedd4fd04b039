// Small tensor helpers shared by loaders and trainers (error messages).
// Checked by: the loader tests that assert on their messages (tests/models/hf_checkpoint_test.cpp,
// tests/methods/eagle3_head_test.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace specbed {

// "[4, 8]" for a shape.
inline std::string ShapeString(at::IntArrayRef shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace specbed
