// CUDA in-place KV-cache row compaction (launcher declared in kernels/cuda/launchers.h; CPU
// reference kernels/cpu/kv_compact_ref.cpp).
// Checked by: tests/kernels/kernel_test.cpp (KvCompactCuda: equal to the CPU reference, float32
// and bfloat16, overlapping moves included).
#include "kernels/cuda/cuda_util.cuh"

namespace specbed {
namespace gpu {
namespace {

// Copies whole rows in units of `Unit` (16, 8, 4 or 2 bytes, the widest dividing row_bytes and
// the storage alignment). One thread per (outer, b, head, unit of the row) moves its unit for
// j = 0, 1, ... in order: destination committed_len + j may be the source of an earlier j' < j
// only, which this same thread has already read. Rows outside [0, max_len) are skipped.
template <typename Unit>
__global__ void CompactKernel(Unit* __restrict__ storage, int64_t n_outer, int64_t batch,
                              int64_t n_heads, int64_t max_len, int64_t units_per_row,
                              int64_t committed_len, const int64_t* __restrict__ indices,
                              int64_t keep) {
  const int64_t total = n_outer * batch * n_heads * units_per_row;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t unit = e % units_per_row;
    const int64_t head_index = e / units_per_row;  // (outer * batch + b) * n_heads + h
    const int64_t b = (head_index / n_heads) % batch;
    Unit* head = storage + head_index * max_len * units_per_row + unit;
    const int64_t* idx = indices + b * keep;
    for (int64_t j = 0; j < keep; ++j) {
      const int64_t src = idx[j];
      const int64_t dst = committed_len + j;
      if (src == dst || src < 0 || src >= max_len || dst < 0 || dst >= max_len) continue;
      head[dst * units_per_row] = head[src * units_per_row];
    }
  }
}

template <typename Unit>
int Launch(void* storage, int64_t n_outer, int64_t batch, int64_t n_heads, int64_t max_len,
           int64_t row_bytes, int64_t committed_len, const int64_t* indices, int64_t keep,
           cudaStream_t stream) {
  const int64_t units_per_row = row_bytes / static_cast<int64_t>(sizeof(Unit));
  const int64_t total = n_outer * batch * n_heads * units_per_row;
  constexpr int kThreads = 256;
  CompactKernel<Unit><<<GridFor(total, kThreads), kThreads, 0, stream>>>(
      static_cast<Unit*>(storage), n_outer, batch, n_heads, max_len, units_per_row, committed_len,
      indices, keep);
  return LaunchStatus();
}

// As CompactKernel, with the moves read from the verify walk's verdict on the device: 4-byte units
// (the cache's rows are whole multiples of 4 bytes for every supported head_dim and dtype, and
// row_bytes % 4 is checked by the wrapper).
__global__ void CompactToPathKernel(uint32_t* __restrict__ storage, int64_t n_outer, int64_t batch,
                                    int64_t n_heads, int64_t max_len, int64_t units_per_row,
                                    const int32_t* __restrict__ root_slot,
                                    const int32_t* __restrict__ accepted, int64_t n,
                                    const int32_t* __restrict__ n_accepted) {
  const int64_t total = n_outer * batch * n_heads * units_per_row;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t unit = e % units_per_row;
    const int64_t head_index = e / units_per_row;
    const int64_t b = (head_index / n_heads) % batch;
    uint32_t* head = storage + head_index * max_len * units_per_row + unit;
    const int64_t keep = n_accepted[b] < n ? n_accepted[b] : n;
    for (int64_t j = 0; j < keep; ++j) {
      const int64_t src = root_slot[b] + 1 + accepted[b * n + j], dst = root_slot[b] + 1 + j;
      if (src == dst || src < 0 || src >= max_len || dst < 0 || dst >= max_len) continue;
      head[dst * units_per_row] = head[src * units_per_row];
    }
  }
}

}  // namespace

int CompactKvToPath(void* storage, int64_t n_outer, int64_t batch, int64_t n_heads, int64_t max_len,
                    int64_t row_bytes, const int32_t* root_slot, const int32_t* accepted, int64_t n,
                    const int32_t* n_accepted, void* stream) {
  if (n_outer * batch * n_heads * row_bytes == 0 || n == 0) return kKernelOk;
  if (row_bytes % 4 != 0) return kKernelBadInput;
  const int64_t units_per_row = row_bytes / 4;
  const int64_t total = n_outer * batch * n_heads * units_per_row;
  constexpr int kThreads = 256;
  CompactToPathKernel<<<GridFor(total, kThreads), kThreads, 0, AsStream(stream)>>>(
      static_cast<uint32_t*>(storage), n_outer, batch, n_heads, max_len, units_per_row, root_slot,
      accepted, n, n_accepted);
  return LaunchStatus();
}

int CompactKvRows(void* storage, int64_t n_outer, int64_t batch, int64_t n_heads, int64_t max_len,
                  int64_t row_bytes, int64_t committed_len, const int64_t* indices, int64_t keep,
                  void* stream) {
  if (n_outer * batch * n_heads * row_bytes == 0 || keep == 0) return kKernelOk;
  // The widest unit dividing both the row length and the base address.
  const uint64_t align = static_cast<uint64_t>(row_bytes) | reinterpret_cast<uintptr_t>(storage);
  const cudaStream_t s = AsStream(stream);
  if (align % 16 == 0) {
    return Launch<uint4>(storage, n_outer, batch, n_heads, max_len, row_bytes, committed_len,
                         indices, keep, s);
  }
  if (align % 8 == 0) {
    return Launch<uint2>(storage, n_outer, batch, n_heads, max_len, row_bytes, committed_len,
                         indices, keep, s);
  }
  if (align % 4 == 0) {
    return Launch<uint32_t>(storage, n_outer, batch, n_heads, max_len, row_bytes, committed_len,
                            indices, keep, s);
  }
  if (align % 2 == 0) {
    return Launch<uint16_t>(storage, n_outer, batch, n_heads, max_len, row_bytes, committed_len,
                            indices, keep, s);
  }
  return Launch<uint8_t>(storage, n_outer, batch, n_heads, max_len, row_bytes, committed_len,
                         indices, keep, s);
}

}  // namespace gpu
}  // namespace specbed
