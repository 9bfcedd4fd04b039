// CPU references of SpecBed's speculative-decoding kernels (layer 2 of 3; see
// kernels/README.md). Each has exactly the raw signature of its CUDA launcher in
// kernels/cuda/launchers.h minus the stream; pointers are host memory, row-major, contiguous.
// These are what CPU builds (and CI) run in the decode loop: plain pointer loops for batch 1,
// no allocation, no ATen dispatch.
//
// Tree conventions: methods/common/draft_tree.h (slot 0 = root = last committed token,
// slot i + 1 = node i, parent[i] < i, parent -1 = child of the root).
// Return value: kKernelOk, or kKernelBadInput when an index input breaks the precondition (then
// the outputs are unspecified, but nothing outside the buffers is touched).
// Checked by: tests/kernels/kernel_test.cpp (each reference against an independent naive
// implementation over batch {1,3} x nodes {1,7,63,255} x vocab {111,32000}).
#pragma once

#include <cstdint>

#include "kernels/decoder_op_args.h"
#include "kernels/kernel_status.h"

namespace specbed {
namespace cpu {

// parent: [batch, n] int32 in [-1, i); mask: out [batch, n + 1, prefix_len + n + 1] bool.
// Row s: prefix columns and the root column true; column prefix_len + 1 + j true iff node j is
// slot s's node or one of its ancestors.
int BuildTreeMask(const int32_t* parent, int64_t batch, int64_t n, int64_t prefix_len, bool* mask);

// logits: [batch, n + 1, vocab] float32; tokens, parent: [batch, n] int32;
// accepted: out [batch, n] int32 (node indices in depth order, -1 padded);
// n_accepted, bonus: out [batch] int32. Descends from the root to the lowest-index child whose
// token equals the slot's argmax (lowest index on ties, as harness/engine/sampler.h Argmax);
// bonus = argmax at the last accepted slot.
int GreedyTreeVerify(const float* logits, const int32_t* tokens, const int32_t* parent,
                     int64_t batch, int64_t n, int64_t vocab, int32_t* accepted,
                     int32_t* n_accepted, int32_t* bonus);

// storage: [n_outer, batch, n_heads, max_len, row_bytes] bytes; indices: [batch, keep] int64,
// strictly increasing, >= committed_len, < max_len. Moves row indices[b][j] to
// committed_len + j (rows already in place are not copied).
int CompactKvRows(void* storage, int64_t n_outer, int64_t batch, int64_t n_heads, int64_t max_len,
                  int64_t row_bytes, int64_t committed_len, const int64_t* indices, int64_t keep);

// The compaction after a verify step, from the verdict where the walk left it (no host indices):
// for each sequence b, accepted node accepted[b][j] (j < n_accepted[b]; nodes increasing) moves
// from slot root_slot[b] + 1 + node to root_slot[b] + 1 + j. root_slot: [batch] int32 (the
// committed length before the root); accepted: [batch, n] int32; n_accepted: [batch] int32.
int CompactKvToPath(void* storage, int64_t n_outer, int64_t batch, int64_t n_heads, int64_t max_len,
                    int64_t row_bytes, const int32_t* root_slot, const int32_t* accepted, int64_t n,
                    const int32_t* n_accepted);

// p: [batch, vocab] float32 in/out; q: [batch, vocab] float32; token: [batch] int32 in
// [0, vocab); u: [batch] float32 in [0, 1); accepted: out [batch] uint8. Accepts iff
// u * q[token] < p[token]; on rejection p <- max(p - q, 0) renormalized (double sum), unchanged
// when the residual has zero mass.
int TreeRejectionStep(float* p, const float* q, const int32_t* token, const float* u, int64_t batch,
                      int64_t vocab, uint8_t* accepted);
// The rejection branch of TreeRejectionStep alone: p <- max(p - q, 0) renormalized (double sum),
// unchanged when the residual has zero mass. p, q: [vocab] float32.
void ResidualInPlace(float* p, const float* q, int64_t vocab);
// Sampled (T > 0) verification of a draft tree in one walk; see kernels/cuda/launchers.h
// SampledTreeVerify for the contract (modes, uniforms, outputs). residual: [batch, vocab] scratch.
// Inverse-CDF draws are harness/engine/sampler.h SampleFromProbs with the given uniform.
int SampledTreeVerify(const float* probs, const float* draft_probs, const int32_t* tokens,
                      const int32_t* parent, const double* u, int64_t batch, int64_t n,
                      int64_t vocab, int32_t mode, float* residual, int32_t* accepted,
                      int32_t* n_accepted, int32_t* bonus);

// The fused decoder-layer ops (kernels/decoder_ops.h); `element` is a kElement* code.
// x, out: `rows` rows of `d` elements, row r at x + r * x_stride and out + r * out_stride
// (elements; out may be x); w: float32 [d]. out = x / sqrt(mean(x^2) + eps) * w.
int RmsNormRows(const void* x, int64_t x_stride, const float* w, void* out, int64_t out_stride,
                int64_t rows, int64_t d, float eps, int32_t element);
// gate_up: [rows, 2 * hidden] ([gate | up] per row); act: out [rows, hidden] = silu(gate) * up.
int SiluMulRows(const void* gate_up, void* act, int64_t rows, int64_t hidden, int32_t element);
// RoPE (with the optional q/k norm) of q into q_out and of k into the cache, v into the cache
// (decoder_op_args.h RopeKvWriteArgs).
int RopeKvWrite(const RopeKvWriteArgs& args);
// Attention of T <= 64 new query rows over the cached slots and a bitmask over the new ones
// (decoder_op_args.h TreeAttentionArgs).
int TreeAttention(const TreeAttentionArgs& args);

}  // namespace cpu
}  // namespace specbed
