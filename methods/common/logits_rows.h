// Token ids read from a few rows of the target's verify logits (Verdict::logits), for drafters
// that learn from every verified slot, rejected ones included (lookahead's Jacobi outputs, Token
// Recycling's adjacency matrix): the top-k ids of chosen rows, computed where the logits live
// (one pass over the row on the CPU; ATen ops on a device, then one small device-to-host copy).
// Checked by: tests/methods/recycling_test.cpp (the CPU pass against at::topk).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace specbed {

// The ids of the `k` largest entries of each row `rows[i]` of `logits`, best first (ties to the
// lower id on the CPU), row-major into `out` ([rows.size(), k], resized).
// logits: float32 [n_rows, vocab], contiguous, any device; 1 <= k <= vocab; every row index in
// [0, n_rows).
void TopkRows(const at::Tensor& logits, const std::vector<int64_t>& rows, int64_t k,
              std::vector<int32_t>& out);

}  // namespace specbed
