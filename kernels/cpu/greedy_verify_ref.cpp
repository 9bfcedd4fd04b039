// CPU reference of greedy draft-tree verification (see kernels/cpu/references.h).
// Checked by: tests/kernels/kernel_test.cpp (GreedyVerify* tests, against a recursive search
// that uses harness/engine/sampler.h Argmax).
#include "kernels/cpu/references.h"

namespace specbed {
namespace cpu {
namespace {

// Largest value, lowest index on ties; NaN is never chosen unless row[0] is NaN (then 0).
// Must stay identical to harness/engine/sampler.h Argmax (a sequential scan with '>' from
// row[0]) and to the CUDA block reduction. Two passes so the first one vectorizes: the maximum
// over non-NaN values in 8 independent lanes ('v > m ? v : m' skips NaN), then the first index
// holding it (-0 and +0 compare equal, as in the scan).
int32_t RowArgmax(const float* row, int64_t vocab) {
  const float first = row[0];
  if (first != first) return 0;
  float lane[8];
  for (float& m : lane) m = first;
  int64_t i = 0;
  for (; i + 8 <= vocab; i += 8) {
    for (int k = 0; k < 8; ++k) lane[k] = row[i + k] > lane[k] ? row[i + k] : lane[k];
  }
  float best = first;
  for (; i < vocab; ++i) best = row[i] > best ? row[i] : best;
  for (float m : lane) best = m > best ? m : best;
  for (int64_t j = 0; j < vocab; ++j) {
    if (row[j] == best) return static_cast<int32_t>(j);
  }
  return 0;  // unreachable: best is one of the row's values
}

}  // namespace

int GreedyTreeVerify(const float* logits, const int32_t* tokens, const int32_t* parent,
                     int64_t batch, int64_t n, int64_t vocab, int32_t* accepted,
                     int32_t* n_accepted, int32_t* bonus) {
  if (vocab < 1) return kKernelBadInput;
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t* tok = tokens + b * n;
    const int32_t* par = parent + b * n;
    int32_t* acc = accepted + b * n;
    for (int64_t i = 0; i < n; ++i) {
      if (par[i] < -1 || par[i] >= i) return kKernelBadInput;
    }
    int64_t count = 0;
    int64_t slot = 0;
    int32_t target = 0;
    while (true) {
      target = RowArgmax(logits + (b * (n + 1) + slot) * vocab, vocab);
      // Children of slot s (node s - 1) have parent s - 1, hence index >= s.
      int64_t child = -1;
      for (int64_t j = slot; j < n; ++j) {
        if (par[j] == slot - 1 && tok[j] == target) {
          child = j;
          break;
        }
      }
      if (child < 0) break;
      acc[count++] = static_cast<int32_t>(child);
      slot = child + 1;
    }
    for (int64_t j = count; j < n; ++j) acc[j] = -1;
    n_accepted[b] = static_cast<int32_t>(count);
    bonus[b] = target;
  }
  return kKernelOk;
}

}  // namespace cpu
}  // namespace specbed
