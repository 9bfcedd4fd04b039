// CPU reference of one speculative-sampling (rejection) step (see kernels/cpu/references.h).
// Checked by: tests/kernels/kernel_test.cpp (RejectionStep* tests: a double-precision formula,
// acceptance frequency ~ min(1, p/q), and the output distribution of a full step ~ p).
#include "kernels/cpu/references.h"

namespace specbed {
namespace cpu {

void ResidualInPlace(float* p, const float* q, int64_t vocab) {
  // Each difference is rounded to float once (as on the GPU) and the mass is accumulated in
  // double, in 8 independent partial sums (no serial dependency chain; the grouping only changes
  // the double result by rounding far below float resolution).
  double partial[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  int64_t i = 0;
  for (; i + 8 <= vocab; i += 8) {
    for (int k = 0; k < 8; ++k) {
      const float d = p[i + k] - q[i + k];
      partial[k] += d > 0.f ? d : 0.f;
    }
  }
  for (; i < vocab; ++i) {
    const float d = p[i] - q[i];
    partial[0] += d > 0.f ? d : 0.f;
  }
  const double mass = ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
                      ((partial[4] + partial[5]) + (partial[6] + partial[7]));
  if (!(mass > 0.0)) return;  // p == q: no residual mass, p stays as it is
  const double inv_mass = 1.0 / mass;
  for (int64_t j = 0; j < vocab; ++j) {
    const float d = p[j] - q[j];
    p[j] = d > 0.f ? static_cast<float>(d * inv_mass) : 0.f;
  }
}

int TreeRejectionStep(float* p, const float* q, const int32_t* token, const float* u, int64_t batch,
                      int64_t vocab, uint8_t* accepted) {
  for (int64_t b = 0; b < batch; ++b) {
    if (token[b] < 0 || token[b] >= vocab) return kKernelBadInput;
  }
  for (int64_t b = 0; b < batch; ++b) {
    float* pr = p + b * vocab;
    const float* qr = q + b * vocab;
    const int32_t t = token[b];
    const bool accept = u[b] * qr[t] < pr[t];
    accepted[b] = accept ? 1 : 0;
    if (accept) continue;
    ResidualInPlace(pr, qr, vocab);
  }
  return kKernelOk;
}

}  // namespace cpu
}  // namespace specbed
