// Shared helpers for tests/engine: paths, loading stories260K, comparing logits.
#pragma once

#include <cmath>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "models/checkpoint/hf_checkpoint.h"
#include "models/checkpoint/llama2c_checkpoint.h"
#include "models/llama_model.h"

namespace specbed {
namespace testing_util {

inline std::string SourcePath(const std::string& relative) {
  return std::string(SPECBED_SOURCE_DIR) + "/" + relative;
}

inline const Llama2cCheckpoint& Stories260K() {
  static const Llama2cCheckpoint ckpt =
      ReadLlama2cCheckpoint(SourcePath("models/stories260K/stories260K.bin"));
  return ckpt;
}

inline LlamaModel Stories260KModel(at::ScalarType dtype = at::kFloat) {
  const auto& ckpt = Stories260K();
  return LlamaModel(ckpt.config,
                    WeightsFromHfTensors(ckpt.config, ckpt.tensors, "stories260K").To(dtype));
}

inline at::Tensor Ids(const std::vector<int32_t>& ids) {
  at::Tensor t = at::empty({1, static_cast<int64_t>(ids.size())}, at::kLong);
  for (size_t i = 0; i < ids.size(); ++i) t.data_ptr<int64_t>()[i] = ids[i];
  return t;
}

// Max |a - b| between engine logits rows [T, V] and reference rows.
inline double MaxAbsDiff(const at::Tensor& logits, const std::vector<std::vector<float>>& ref) {
  const at::Tensor l = logits.reshape({-1, logits.size(-1)}).to(at::kFloat).contiguous();
  EXPECT_EQ(l.size(0), static_cast<int64_t>(ref.size()));
  double worst = 0;
  for (size_t t = 0; t < ref.size(); ++t) {
    const float* row = l.data_ptr<float>() + t * l.size(1);
    for (size_t v = 0; v < ref[t].size(); ++v) {
      worst = std::max(worst, static_cast<double>(std::abs(row[v] - ref[t][v])));
    }
  }
  return worst;
}

// Upper tail of the standard normal.
inline double NormalSf(double z) {
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

// Upper tail of chi-square with k degrees of freedom (Wilson-Hilferty approximation), for the
// statistical losslessness tests.
inline double ChiSquareSf(double x, int k) {
  const double a = 2.0 / (9.0 * k);
  const double z = (std::cbrt(x / k) - (1.0 - a)) / std::sqrt(a);
  return NormalSf(z);
}

}  // namespace testing_util
}  // namespace specbed
