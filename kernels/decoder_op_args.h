// Arguments of the fused decoder-layer kernels shared by the raw layers (kernels/cpu/references.h
// and kernels/cuda/launchers.h): element type codes and the RoPE + KV-write argument block.
// Plain C++: no LibTorch, no CUDA headers.
// Checked by: tests/kernels/decoder_ops_test.cpp.
#pragma once

#include <cstdint>

namespace specbed {

// Element type of a model-dtype buffer (float32 math inside every kernel, one rounding out).
inline constexpr int32_t kElementFloat32 = 0;
inline constexpr int32_t kElementBFloat16 = 1;
inline constexpr int32_t kElementFloat16 = 2;

// RopeKvWrite: for each row r = b * tokens + t of qkv ([rows, (heads + 2 kv_heads) * head_dim],
// per row [q heads | k heads | v heads]):
//   q head h  -> (optional RMSNorm by q_norm) -> RoPE at positions[r] -> q_out[b][h][t][:]
//   k head kh -> (optional RMSNorm by k_norm) -> RoPE at positions[r] ->
//   k_cache[b][kh][slots[r]][:] v head kh -> v_cache[b][kh][slots[r]][:]
// q_out: [batch, heads, tokens, head_dim]; k_cache, v_cache: [batch, kv_heads, max_len, head_dim]
// (one layer's K or V of a KvCache); cos, sin: float32 [n_positions, head_dim / 2]. RoPE pairs
// (i, i + head_dim / 2), or (2i, 2i + 1) when interleaved: (x0 cos - x1 sin, x1 cos + x0 sin).
// Math in float32, one rounding to the element type (and one after the q/k norm, before RoPE, as
// the row kernels of models/llama_model.cpp round there). A row whose position is outside
// [0, n_positions) or whose slot is outside [0, max_len) breaks the precondition (the CPU
// reference returns kKernelBadInput, the CUDA kernel skips the row).
struct RopeKvWriteArgs {
  const void* qkv = nullptr;
  const int64_t* positions = nullptr;  // [rows]
  const int64_t* slots = nullptr;      // [rows]
  const float* cos = nullptr;
  const float* sin = nullptr;
  const float* q_norm = nullptr;  // float32 [head_dim] or null (no q/k norm)
  const float* k_norm = nullptr;  // float32 [head_dim] or null
  void* q_out = nullptr;
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int64_t batch = 0, tokens = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int64_t max_len = 0, n_positions = 0;
  float eps = 0;
  bool interleaved = false;
  int32_t element = kElementFloat32;
};

// The most new tokens TreeAttention takes (one 64-bit visibility word per query row).
inline constexpr int64_t kTreeAttentionMaxTokens = 64;

// TreeAttention: for query row t of sequence b and head h (kv head h / (heads / kv_heads)):
//   out[b][t][h][:] = sum_j p_j v_j, p = softmax_j(q[b][h][t] . k_j * scale) over the visible j:
//   every cached slot j < kv_len[b], and new slot kv_len[b] + i for each bit i set in
//   tree_bits[b * bits_batch_stride + t] (causal rows: bits 0..t; a tree: the row's ancestors
//   and itself). A row that sees nothing is zeros. Scores, softmax and the sum in float32, one
//   rounding to the element type.
// q: [batch, heads, tokens, head_dim]; k_cache, v_cache: [batch, kv_heads, max_len, head_dim] (one
// layer of a KvCache; the new rows were written there first); out: [batch, tokens, heads,
// head_dim]; kv_len: int64 [batch] (device data: read by the kernel); tree_bits: int64 [batch or
// 1, tokens] (bits_batch_stride = tokens or 0). tokens <= kTreeAttentionMaxTokens. A slot at or
// past max_len breaks the precondition (the CPU reference returns kKernelBadInput, the CUDA
// kernel skips it).
struct TreeAttentionArgs {
  const void* q = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int64_t* kv_len = nullptr;
  const int64_t* tree_bits = nullptr;
  void* out = nullptr;
  int64_t bits_batch_stride = 0;
  int64_t batch = 0, tokens = 0, heads = 0, kv_heads = 0, head_dim = 0, max_len = 0;
  float scale = 1;
  int32_t element = kElementFloat32;
};

}  // namespace specbed
