// The fused decoder-layer ops of the ATen forward path (LibTorch wrappers, layer 3 of 3; raw
// layers: gpu::RmsNormRows / SiluMulRows / RopeKvWrite in kernels/cuda/launchers.h, cpu::* in
// kernels/cpu/references.h). Each replaces a chain of ATen calls with one launch (issue 45):
// RMSNorm 9 calls, SiLU * up 2, RoPE of q and k with the KV-cache writes 13 (with the q/k norms
// of Qwen3, 31), attention over the cache with the mask and the output copy 8 (no [T, S] mask).
// Float32 math, one rounding to the model dtype. Each call announces itself to the op recorder
// (models/op_trace.h) as "specbed::<op>", one launching op. Dtypes: x, gate_up, qkv and the outputs
// float32, bfloat16 or float16 (one dtype per call); weights and RoPE tables float32. Devices: all
// on one device, CPU or CUDA (CUDA builds only). Checked by: tests/kernels/decoder_ops_test.cpp
// (references against ATen compositions, bad arguments, DecoderOpsCuda against the references).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace specbed {

// out = x / sqrt(mean(x^2, last dim) + eps) * w.
//   x:   [rows, d] with unit stride in d (any row stride: e.g. the last token of each sequence)
//   w:   float32 [d], contiguous
//   out: [rows, d] of x's dtype, unit stride in d (may be x)
void FusedRmsNorm(const at::Tensor& x, const at::Tensor& w, double eps, const at::Tensor& out);

// act = silu(gate) * up with gate_up = [gate | up] per row.
//   gate_up: [rows, 2 * hidden] contiguous; act: [rows, hidden] contiguous, same dtype
void FusedSiluMul(const at::Tensor& gate_up, const at::Tensor& act);

// For row r = b * T + t of qkv: the q heads (RMSNorm by q_norm when defined) rotated at
// positions[r] into q_out[b, :, t]; the k heads (k_norm) rotated into layer `layer`'s keys of
// `cache` at slot slots[r]; the v heads copied to its values there. RoPE pairs (i, i + hd / 2),
// or (2i, 2i + 1) when `interleaved`.
//   qkv:        [B * T, (H + 2 KVH) * hd] contiguous
//   positions:  int64 [B * T] on qkv's device; each in [0, cos.size(0))
//   slots:      int64 [B * T] on qkv's device; each in [0, max_len)
//   cos, sin:   float32 [P, hd / 2] contiguous (models/llama_forward_aten.h FillRopeTables)
//   q_norm, k_norm: float32 [hd] or undefined (no q/k norm)
//   q_out:      [B, H, T, hd] contiguous, qkv's dtype
//   cache:      [n_layers, 2, B, KVH, max_len, hd] contiguous, qkv's dtype (KvCache::storage)
// Positions and slots are device data: they are checked on the host only for CPU tensors (the
// CUDA kernel skips a row out of range; reading them back would cost a synchronizing copy).
void FusedRopeKvWrite(const at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& slots,
                      const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& q_norm,
                      const at::Tensor& k_norm, double eps, bool interleaved,
                      const at::Tensor& q_out, const at::Tensor& cache, int64_t layer);

// Attention of T <= 64 new query rows (kernels/decoder_op_args.h TreeAttentionArgs): query row t
// of sequence b sees every cached slot below kv_len[b] and new slot kv_len[b] + i for each bit i
// of tree_bits[b or 0, t]; float32 scores and softmax, one rounding; a row that sees nothing is
// zeros. Grouped-query: head h reads kv head h / (H / KVH).
//   q:         [B, H, T, hd] contiguous (hd <= 256)
//   cache:     [n_layers, 2, B, KVH, max_len, hd] contiguous, q's dtype (the new rows written)
//   kv_len:    int64 [B] on q's device: the cached length before the new rows
//   tree_bits: int64 [B, T] or [1, T] (shared by every sequence) on q's device
//   out:       [B, T, H, hd] contiguous, q's dtype
// kv_len and tree_bits are device data (checked on the host only for CPU tensors: kv_len[b] + T
// <= max_len, no bit at or past T; the CUDA kernel skips slots past max_len).
void FusedTreeAttention(const at::Tensor& q, const at::Tensor& cache, int64_t layer,
                        const at::Tensor& kv_len, const at::Tensor& tree_bits, double scale,
                        const at::Tensor& out);

}  // namespace specbed
