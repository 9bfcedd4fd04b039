// CPU reference of in-place KV-cache row compaction (see kernels/cpu/references.h); what
// KvCache::KeepPositions runs on CPU.
// Checked by: tests/kernels/kernel_test.cpp (KvCompact* tests, against index_select copies) and
// tests/engine/llama_model_test.cpp (KeepPositions vs. a fresh forward).
#include <cstring>

#include "kernels/cpu/references.h"

namespace specbed {
namespace cpu {

int CompactKvRows(void* storage, int64_t n_outer, int64_t batch, int64_t n_heads, int64_t max_len,
                  int64_t row_bytes, int64_t committed_len, const int64_t* indices, int64_t keep) {
  for (int64_t b = 0; b < batch; ++b) {
    int64_t prev = committed_len - 1;
    for (int64_t j = 0; j < keep; ++j) {
      const int64_t src = indices[b * keep + j];
      if (src <= prev || src >= max_len) return kKernelBadInput;
      prev = src;
    }
  }
  if (committed_len < 0) return kKernelBadInput;
  uint8_t* base = static_cast<uint8_t*>(storage);
  for (int64_t o = 0; o < n_outer; ++o) {
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t* idx = indices + b * keep;
      for (int64_t h = 0; h < n_heads; ++h) {
        uint8_t* head = base + (((o * batch + b) * n_heads + h) * max_len) * row_bytes;
        // Increasing j: the destination committed_len + j <= indices[j] is never a later
        // source that is still unread.
        for (int64_t j = 0; j < keep; ++j) {
          const int64_t src = idx[j];
          const int64_t dst = committed_len + j;
          if (src != dst) std::memcpy(head + dst * row_bytes, head + src * row_bytes, row_bytes);
        }
      }
    }
  }
  return kKernelOk;
}

int CompactKvToPath(void* storage, int64_t n_outer, int64_t batch, int64_t n_heads, int64_t max_len,
                    int64_t row_bytes, const int32_t* root_slot, const int32_t* accepted, int64_t n,
                    const int32_t* n_accepted) {
  for (int64_t b = 0; b < batch; ++b) {
    if (n_accepted[b] < 0 || n_accepted[b] > n || root_slot[b] < 0) return kKernelBadInput;
    int64_t prev = -1;
    for (int64_t j = 0; j < n_accepted[b]; ++j) {
      const int64_t node = accepted[b * n + j];
      if (node <= prev || node >= n || root_slot[b] + 1 + node >= max_len) return kKernelBadInput;
      prev = node;
    }
  }
  uint8_t* base = static_cast<uint8_t*>(storage);
  for (int64_t o = 0; o < n_outer; ++o) {
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t h = 0; h < n_heads; ++h) {
        uint8_t* head = base + (((o * batch + b) * n_heads + h) * max_len) * row_bytes;
        for (int64_t j = 0; j < n_accepted[b]; ++j) {  // increasing j, as CompactKvRows
          const int64_t src = root_slot[b] + 1 + accepted[b * n + j], dst = root_slot[b] + 1 + j;
          if (src != dst) std::memcpy(head + dst * row_bytes, head + src * row_bytes, row_bytes);
        }
      }
    }
  }
  return kKernelOk;
}

}  // namespace cpu
}  // namespace specbed
