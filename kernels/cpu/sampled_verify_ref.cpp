// CPU reference of sampled (T > 0) tree verification in one walk (see kernels/cpu/references.h
// and the contract in kernels/cuda/launchers.h).
// Checked by: tests/kernels/sampled_verify_test.cpp (committed tokens ~ the target distribution
// by chi-square for chains, trees and sample_follow; the negative-control modes fail it; the
// walk equals harness/engine/verifier.h AcceptTree's rules step by step).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/cpu/references.h"

namespace specbed {
namespace cpu {
namespace {

// Inverse-CDF draw from row[0..vocab) with uniform u (harness/engine/sampler.h SampleFromProbs).
int32_t Draw(const float* row, int64_t vocab, double u) {
  double cum = 0.0;
  int32_t last_positive = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!(row[i] > 0.f)) continue;
    cum += row[i];
    last_positive = static_cast<int32_t>(i);
    if (u < cum) return last_positive;
  }
  return last_positive;
}

int32_t ArgmaxOf(const float* row, int64_t vocab) {
  return static_cast<int32_t>(std::max_element(row, row + vocab) - row);
}

// The lowest-index child of `slot` after node `after` (-1: the first), or -1.
int32_t NextChild(const int32_t* parent, int64_t n, int64_t slot, int32_t after) {
  for (int64_t j = std::max<int64_t>(after + 1, slot); j < n; ++j) {
    if (parent[j] == slot - 1) return static_cast<int32_t>(j);
  }
  return -1;
}

int32_t ChildCarrying(const int32_t* parent, const int32_t* tokens, int64_t n, int64_t slot,
                      int32_t token) {
  for (int32_t c = NextChild(parent, n, slot, -1); c >= 0; c = NextChild(parent, n, slot, c)) {
    if (tokens[c] == token) return c;
  }
  return -1;
}

// One sequence's walk state: the uniforms left and the outputs.
struct Walk {
  const double* u;
  int32_t next_u = 0;
  double Take() { return u[next_u++]; }
};

// Rejection at `slot`: the accepted child, or -1 with *bonus = the correction.
int32_t RejectAtSlot(const float* p, const float* q, const int32_t* tokens, const int32_t* parent,
                     int64_t n, int64_t slot, int64_t vocab, bool wrong_residual, float* r,
                     Walk& walk, int32_t* bonus) {
  std::copy(p, p + vocab, r);
  for (int32_t c = NextChild(parent, n, slot, -1); c >= 0; c = NextChild(parent, n, slot, c)) {
    const int32_t t = tokens[c];
    const double u = walk.Take();
    if (t >= 0 && t < vocab && u * static_cast<double>(q[t]) < static_cast<double>(r[t])) return c;
    ResidualInPlace(r, q, vocab);
  }
  *bonus = Draw(wrong_residual ? p : r, vocab, walk.Take());
  return -1;
}

// Follow modes at `slot`: the child carrying the target's token, or -1 with *bonus set.
int32_t FollowAtSlot(const float* p, const int32_t* tokens, const int32_t* parent, int64_t n,
                     int64_t slot, int64_t vocab, bool argmax, Walk& walk, int32_t* bonus) {
  const int32_t y = argmax ? ArgmaxOf(p, vocab) : Draw(p, vocab, walk.Take());
  const int32_t c = ChildCarrying(parent, tokens, n, slot, y);
  if (c < 0) *bonus = argmax ? Draw(p, vocab, walk.Take()) : y;
  return c;
}

}  // namespace

int SampledTreeVerify(const float* probs, const float* draft_probs, const int32_t* tokens,
                      const int32_t* parent, const double* u, int64_t batch, int64_t n,
                      int64_t vocab, int32_t mode, float* residual, int32_t* accepted,
                      int32_t* n_accepted, int32_t* bonus) {
  const bool rejection = mode == kSampledRejection || mode == kSampledRejectionTargetResidual;
  if (mode < kSampledRejection || mode > kSampledRejectionTargetResidual) return kKernelBadInput;
  if (rejection && n > 0 && draft_probs == nullptr) return kKernelBadInput;
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t* tok = tokens + b * n;
    const int32_t* par = parent + b * n;
    int32_t* acc = accepted + b * n;
    Walk walk{u + b * (n + 1)};
    int64_t slot = 0, count = 0;
    while (true) {
      const int64_t row = (b * (n + 1) + slot) * vocab;
      int32_t c = NextChild(par, n, slot, -1);
      if (c < 0) {  // a leaf: the bonus from the target
        bonus[b] = Draw(probs + row, vocab, walk.Take());
        break;
      }
      c = rejection ? RejectAtSlot(probs + row, draft_probs + row, tok, par, n, slot, vocab,
                                   mode == kSampledRejectionTargetResidual, residual + b * vocab,
                                   walk, &bonus[b])
                    : FollowAtSlot(probs + row, tok, par, n, slot, vocab,
                                   mode == kSampledFollowArgmax, walk, &bonus[b]);
      if (c < 0) break;
      acc[count++] = c;
      slot = c + 1;
    }
    std::fill(acc + count, acc + n, -1);
    n_accepted[b] = static_cast<int32_t>(count);
  }
  return kKernelOk;
}

}  // namespace cpu
}  // namespace specbed
