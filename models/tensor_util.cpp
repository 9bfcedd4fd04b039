// The finite-weights check of every checkpoint loader (see tensor_util.h).
// Checked by: tests/models/hf_checkpoint_test.cpp (NaN weights refused, opt-out).
#include "models/tensor_util.h"

#include <ATen/ATen.h>

#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace specbed {

void CheckFiniteWeights(const at::Tensor& t, const std::string& name, const std::string& source) {
  if (!t.defined() || !at::isFloatingType(t.scalar_type())) return;
  const char* allow = std::getenv(kAllowNonFiniteWeightsEnv);
  if (allow != nullptr && std::strcmp(allow, "1") == 0) return;
  const at::Tensor flat = t.reshape({-1});
  // Chunks bound the temporary boolean mask for large embeddings.
  constexpr int64_t kChunk = int64_t{1} << 24;
  for (int64_t begin = 0; begin < flat.numel(); begin += kChunk) {
    const at::Tensor part = flat.slice(0, begin, std::min(flat.numel(), begin + kChunk));
    const at::Tensor bad = at::logical_not(at::isfinite(part));
    if (!bad.any().item<bool>()) continue;
    const int64_t first = begin + at::nonzero(bad).index({0, 0}).item<int64_t>();
    const int64_t count = at::logical_not(at::isfinite(flat)).sum().item<int64_t>();
    Fail(source, ": tensor '", name, "' holds ", count,
         " non-finite value(s) (NaN or Inf), the first at flat index ", first, " (value ",
         flat[first].item<double>(), "); set ", kAllowNonFiniteWeightsEnv, "=1 to load it anyway");
  }
}

at::Tensor RmsNormLastDimAten(const at::Tensor& x, const at::Tensor& w, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  return (xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps) * w.to(at::kFloat))
      .to(x.scalar_type());
}

at::Tensor RotateHalfAten(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor x1 = xf.narrow(-1, 0, half), x2 = xf.narrow(-1, half, half);
  return at::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1).to(x.scalar_type());
}

}  // namespace specbed
