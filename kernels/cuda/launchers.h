// Raw CUDA launchers of SpecBed's speculative-decoding kernels (layer 1 of 3; see
// kernels/README.md). Plain C++ on purpose: raw pointers and a `void* stream` (a cudaStream_t;
// nullptr = the legacy default stream), no LibTorch and no CUDA headers, so this header can be
// included from any translation unit. Defined in kernels/cuda/*.cu (library
// specbed_kernels_cuda, built only with SPECBED_CUDA=ON).
//
// Every pointer is device memory, row-major and contiguous. Each launcher enqueues its work on
// `stream`, never synchronizes, and returns kKernelOk or the cudaError_t of the launch
// (KernelStatusString names it). Preconditions are those of the CPU references with the same
// signature in kernels/cpu/references.h; the tree conventions are methods/common/draft_tree.h
// (slot 0 = root = last committed token, slot i + 1 = node i, parent[i] < i, -1 = child of the
// root).
// Checked by: tests/kernels/kernel_test.cpp (the *Cuda tests compare every launcher with its CPU
// reference through the LibTorch wrappers; skipped without a CUDA device).
#pragma once

#include <cstdint>

#include "kernels/decoder_op_args.h"
#include "kernels/kernel_status.h"

namespace specbed {
namespace gpu {

// Ancestor mask of a draft tree for the verify forward.
//   parent: [batch, n] int32, parent[i] in [-1, i)
//   mask:   out [batch, n + 1, prefix_len + n + 1] bool. Row s (verify slot s) is true at every
//           prefix column [0, prefix_len), at the root column prefix_len, and at column
//           prefix_len + 1 + j iff node j is slot s's node or one of its ancestors.
// One thread per mask element.
int BuildTreeMask(const int32_t* parent, int64_t batch, int64_t n, int64_t prefix_len, bool* mask,
                  void* stream);

// Greedy verification of a draft tree against the target's logits.
//   logits:     [batch, n + 1, vocab] float32, row s = target logits at verify slot s
//   tokens:     [batch, n] int32, drafted token of node i
//   parent:     [batch, n] int32, parent[i] in [-1, i)
//   accepted:   out [batch, n] int32, accepted node indices in depth order, -1 padded
//   n_accepted: out [batch] int32
//   bonus:      out [batch] int32, target argmax at the last accepted slot
// Argmax = largest value, lowest index on ties, NaN never chosen unless element 0 is NaN
// (exactly harness/engine/sampler.h Argmax). One 1024-thread block per sequence walks the tree;
// only the rows on the accepted path are reduced.
int GreedyTreeVerify(const float* logits, const int32_t* tokens, const int32_t* parent,
                     int64_t batch, int64_t n, int64_t vocab, int32_t* accepted,
                     int32_t* n_accepted, int32_t* bonus, void* stream);

// In-place compaction of kept KV-cache rows.
//   storage: [n_outer, batch, n_heads, max_len, row_bytes] bytes (a KvCache's storage with
//            n_outer = n_layers * 2 and row_bytes = head_dim * element size)
//   indices: [batch, keep] int64, strictly increasing, each >= committed_len and < max_len
// Moves row indices[b][j] to committed_len + j for every outer/head. One thread per
// (outer, b, head, row chunk) walks j in increasing order (a destination may be a later
// source, so j is never parallel).
int CompactKvRows(void* storage, int64_t n_outer, int64_t batch, int64_t n_heads, int64_t max_len,
                  int64_t row_bytes, int64_t committed_len, const int64_t* indices, int64_t keep,
                  void* stream);

// One speculative-sampling step per sequence.
//   p:        [batch, vocab] float32, target (residual) distribution, updated in place
//   q:        [batch, vocab] float32, draft distribution
//   token:    [batch] int32, drafted token, in [0, vocab)
//   u:        [batch] float32, uniform in [0, 1)
//   accepted: out [batch] uint8 (0/1)
// Accepts iff u * q[token] < p[token]. On rejection p <- max(p - q, 0) / sum(max(p - q, 0))
// (the sum accumulated in double), or p unchanged if that sum is 0. One block per sequence.
int CompactKvToPath(void* storage, int64_t n_outer, int64_t batch, int64_t n_heads, int64_t max_len,
                    int64_t row_bytes, const int32_t* root_slot, const int32_t* accepted, int64_t n,
                    const int32_t* n_accepted, void* stream);

int TreeRejectionStep(float* p, const float* q, const int32_t* token, const float* u, int64_t batch,
                      int64_t vocab, uint8_t* accepted, void* stream);

// Sampled (T > 0) verification of a draft tree: one walk from the root per sequence, so a verify
// step needs one launch and one small copy back (no [n + 1, vocab] rows to the host).
//   probs:       [batch, n + 1, vocab] float32, the target's sampling distribution at each slot
//                (temperature / top-k / top-p applied; rows sum to 1)
//   draft_probs: [batch, n + 1, vocab] float32, row s = the distribution slot s's children were
//                drafted from (rejection modes; may be null in the follow modes)
//   tokens, parent: [batch, n] int32 (parent[i] in [-1, i); the walk stays in bounds for any)
//   u:           [batch, n + 1] float64 uniforms in [0, 1), consumed in order: one per child
//                tested, one per draw (a walk never needs more than n + 1)
//   mode:        kSampledRejection (chain_rs / tree_rrs): at slot s the children are tested in
//                increasing index: accept child c iff u * q[tok c] < r[tok c], where r starts as
//                probs row s and becomes the residual max(r - q, 0) / mass (unchanged at zero
//                mass) after each rejection; the first accepted child is descended into; when
//                all are rejected the correction is drawn from r; at a leaf the bonus is drawn
//                from probs row s. A token outside [0, vocab) is rejected.
//                kSampledFollow (sample_follow): y drawn from probs row s; descend into the
//                lowest-index child carrying y, else y is the bonus.
//                kSampledFollowArgmax, kSampledRejectionTargetResidual: the deliberately wrong
//                rules of the losslessness tests' negative controls (y = argmax of row s with the
//                bonus drawn from row s; the correction drawn from probs row s, not the residual)
//   residual:    [batch, vocab] float32 scratch
//   accepted:    out [batch, n] int32, accepted nodes in depth order, -1 padded
//   n_accepted, bonus: out [batch] int32
// A draw is the inverse CDF: the first index whose running sum of positive entries exceeds u,
// else the last positive entry (0 if none). One 1024-thread block per sequence.
int SampledTreeVerify(const float* probs, const float* draft_probs, const int32_t* tokens,
                      const int32_t* parent, const double* u, int64_t batch, int64_t n,
                      int64_t vocab, int32_t mode, float* residual, int32_t* accepted,
                      int32_t* n_accepted, int32_t* bonus, void* stream);

// Human-readable name of a status returned above (cudaGetErrorString for CUDA codes).
// The fused decoder-layer ops (kernels/decoder_ops.h; contracts in kernels/cpu/references.h).
// RmsNormRows: one block per row. SiluMulRows: grid-stride over the elements. RopeKvWrite: one
// block per (row, head) of q, k and v, one thread per RoPE pair.
int RmsNormRows(const void* x, int64_t x_stride, const float* w, void* out, int64_t out_stride,
                int64_t rows, int64_t d, float eps, int32_t element, void* stream);
int SiluMulRows(const void* gate_up, void* act, int64_t rows, int64_t hidden, int32_t element,
                void* stream);
int RopeKvWrite(const RopeKvWriteArgs& args, void* stream);
// TreeAttention: one block per (b, h, t), a warp per key in turn with an online softmax per
// warp, merged at the end (no split over the keys yet).
int TreeAttention(const TreeAttentionArgs& args, void* stream);

const char* KernelStatusString(int status);

}  // namespace gpu
}  // namespace specbed
