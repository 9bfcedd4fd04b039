// In-place compaction of kept KV-cache rows after verification (LibTorch wrapper, layer 3 of 3;
// raw layers: gpu::CompactKvRows in kernels/cuda/launchers.h, cpu::CompactKvRows in
// kernels/cpu/references.h). KvCache::KeepPositions (models/kv_cache.cpp) calls it.
// Checked by: tests/kernels/kernel_test.cpp (KvCompact* tests) and
// tests/engine/llama_model_test.cpp (KeepPositions vs. a fresh forward).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace specbed {

// Moves row indices[b][j] to committed_len + j, in place, for every layer, K/V and head.
//   storage:       [n_layers, 2, B, H, max_len, D] float32, bfloat16 or float16, contiguous,
//                  CPU or CUDA (a KvCache's storage)
//   committed_len: in [0, max_len]; rows before it are untouched
//   indices:       [B, K] int64, contiguous, on the CPU or on storage's device; each row
//                  strictly increasing, every entry >= committed_len and < max_len (validated
//                  on the host; a CUDA tensor is copied there first). K = 0 does nothing.
// Rows already in place are not copied. CUDA storage: the move runs on the current CUDA stream
// (CUDA builds only; otherwise specbed::Error).
void CompactKvCache(const at::Tensor& storage, int64_t committed_len, const at::Tensor& indices);

// The compaction of a verify step from its verdict where the walk left it (kernels/greedy_verify.h,
// sampled_verify.h): for each sequence b, accepted node accepted[b][j] (j < n_accepted[b]) moves
// from slot root_slot[b] + 1 + node to root_slot[b] + 1 + j, in place, every layer, K/V and head.
// No host indices and no scalar that depends on the context: a step's trace stays the same.
//   storage:    as CompactKvCache (row bytes a multiple of 4)
//   root_slot:  int32 [B], the committed length before the root
//   accepted:   int32 [B, n], node indices increasing, -1 padded; n_accepted: int32 [B] in [0, n]
// All on storage's device. Device data is checked on the host only for CPU tensors (the CUDA
// kernel skips a move out of range). The caller sets the cache's length (KvCache::Truncate to
// root_slot + 1 + n_accepted, which it knows from the verdict it copied back).
void CompactKvCacheToPath(const at::Tensor& storage, const at::Tensor& root_slot,
                          const at::Tensor& accepted, const at::Tensor& n_accepted);

}  // namespace specbed
