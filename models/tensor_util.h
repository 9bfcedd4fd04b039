// Small tensor helpers shared by loaders, heads and trainers (error messages, the finite-weights
// check, and the differentiable ATen RMSNorm and rotate_half RoPE of the heads and trainers).
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

// Environment variable that turns CheckFiniteWeights off ("1"): loading a checkpoint that holds
// NaN or Inf on purpose (e.g. to study a broken one).
constexpr const char* kAllowNonFiniteWeightsEnv = "SPECBED_ALLOW_NONFINITE_WEIGHTS";

// Fails naming `source` and `name` when `t` (any shape, floating dtype, CPU or CUDA) holds a NaN
// or an infinity, with the count and the first flat index; a no-op when
// SPECBED_ALLOW_NONFINITE_WEIGHTS=1. Loaders call it on every weight they read.
void CheckFiniteWeights(const at::Tensor& t, const std::string& name, const std::string& source);

// x [..., d] any float dtype; w [d] on x's device -> x * rsqrt(mean(x^2) + eps) * w over the last
// dimension, float32 math, in x's dtype. Differentiable: the trainable heads use it too.
at::Tensor RmsNormLastDimAten(const at::Tensor& x, const at::Tensor& w, double eps);

// x [..., head_dim] any float dtype; cos, sin float32, broadcastable to [..., head_dim / 2] ->
// x rotated with the rotate_half pairing, float32 math, in x's dtype. Differentiable.
at::Tensor RotateHalfAten(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace specbed
