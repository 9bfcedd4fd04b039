// CPU reference of the draft-tree ancestor mask (see kernels/cpu/references.h).
// Checked by: tests/kernels/kernel_test.cpp (TreeMask* tests, against a transitive closure).
#include <algorithm>

#include "kernels/cpu/references.h"

namespace specbed {
namespace cpu {

int BuildTreeMask(const int32_t* parent, int64_t batch, int64_t n, int64_t prefix_len, bool* mask) {
  const int64_t width = prefix_len + n + 1;
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t* par = parent + b * n;
    for (int64_t i = 0; i < n; ++i) {
      if (par[i] < -1 || par[i] >= i) return kKernelBadInput;
    }
    for (int64_t s = 0; s <= n; ++s) {
      bool* row = mask + (b * (n + 1) + s) * width;
      std::fill(row, row + prefix_len + 1, true);
      bool* nodes = row + prefix_len + 1;
      std::fill(nodes, nodes + n, false);
      // Slot s holds node s - 1; walk up to the root (parents strictly decrease).
      for (int64_t i = s - 1; i >= 0; i = par[i]) nodes[i] = true;
    }
  }
  return kKernelOk;
}

}  // namespace cpu
}  // namespace specbed
