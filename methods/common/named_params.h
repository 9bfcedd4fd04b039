// A trainable model's parameters as an ordered list of (checkpoint name, leaf tensor), and what
// every trainable head does with it: look a parameter up by name, count the weights, and take a
// detached copy to save. Used by TrainableLlama, TrainableEagle3, TrainableDflash and
// SpecBlockModel.
// Checked by: tests/methods/eagle3_train_test.cpp, tests/methods/dflash_train_test.cpp,
// tests/train/train_test.cpp (parameter counts, checkpoints round-tripped by name).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"

namespace specbed {

// (checkpoint name, float leaf tensor with requires_grad), in creation order.
using NamedParams = std::vector<std::pair<std::string, at::Tensor>>;

// The parameter called `name`; fails naming `who` (the model) when there is none.
inline const at::Tensor& FindParam(const NamedParams& params, const std::string& name,
                                   const char* who) {
  for (const auto& [n, p] : params) {
    if (n == name) return p;
  }
  Fail(who, ": no parameter '", name, "'");
}

// The number of weights over all parameters.
inline int64_t CountParams(const NamedParams& params) {
  int64_t n = 0;
  for (const auto& [name, p] : params) n += p.numel();
  return n;
}

// Detached copies of every parameter by name (for a checkpoint).
inline std::map<std::string, at::Tensor> CloneParams(const NamedParams& params) {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, p] : params) out[name] = p.detach().clone();
  return out;
}

}  // namespace specbed
