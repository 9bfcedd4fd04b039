// The one place that papers over LibTorch 1.13 (Debian, CPU) vs 2.x (GPU machine) differences.
// Include this instead of guessing: optional types, data pointers, attention availability.
// Checked by: building on both (CI builds 1.13; the GPU machine builds 2.x).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>
#include <torch/version.h>

namespace specbed {

// c10::optional is its own type in 1.13 and an alias of std::optional in 2.x; ATen ops accept
// c10::optional in both.
template <typename T>
using TorchOptional = c10::optional<T>;
inline constexpr auto kTorchNullopt = c10::nullopt;

// const_data_ptr()/mutable_data_ptr() only exist in 2.x; data_ptr<T>() exists in both.
template <typename T>
inline const T* ConstData(const at::Tensor& t) {
  return t.data_ptr<T>();
}
template <typename T>
inline T* MutableData(const at::Tensor& t) {
  return t.data_ptr<T>();
}

// True for LibTorch >= 2.0.
inline constexpr bool kTorch2 = TORCH_VERSION_MAJOR >= 2;

}  // namespace specbed
