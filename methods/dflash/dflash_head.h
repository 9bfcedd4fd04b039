// The DFlash draft head's inference forward: weights read once (DflashWeights, shared by every
// sequence drafting beside one target), and per sequence a DflashHead with its own cache of the
// projected context keys/values: float32 row loops on the CPU, or batched ATen ops on the
// target's device and dtype (HeadPlacement, methods/common/head_aten.h; context K/V device
// tensors, the target's embedding and lm_head shared as they are: no host copy), where
// DflashHead::ForwardBatch drafts several sequences' blocks in one forward.
//
// Context: each committed target position t contributes one feature row, the concatenation of
// the target's hidden states (decoder-layer outputs, pre-final-norm) at the configured
// target_layer_ids (width n * H). AppendContext projects it once, c = hidden_norm(fc(feature)),
// and stores for every draft layer l: K = RoPE(k_norm(k_proj_l(c)), t) and V = v_proj_l(c).
// Context row j has position j (row index == absolute position).
//
// Block forward (one call drafts a block): the n tokens [bonus, MASK, ..., MASK] (n = any
// number of rows >= 1; block_size by default) at positions [start, start + n) are embedded with
// the TARGET's embedding; per draft layer
// (pre-norm Qwen3 layer): x = input_layernorm(h); q = RoPE(q_norm(q_proj(x))),
// k = RoPE(k_norm(k_proj(x))), v = v_proj(x); each block row attends over all cached context rows
// plus the block rows (all n of them; rows <= i when config.causal) with GQA and scale
// 1/sqrt(head_dim); h += o_proj(attn); h += down(silu(gate(post_ln(h))) * up(post_ln(h))).
// Only the block rows propagate; the context K/V are the same injected rows in every call.
// logits = target_lm_head(norm(h)) for every block row (rows 1..n-1 are the drafts).
// Rows past the trained block_size are just more mask rows (the head never saw them in
// training, and with a non-causal head they also change the earlier rows).
// GEMMs go through ATen into preallocated buffers; norms, RoPE, attention and SwiGLU are raw row
// loops. The work buffers grow only when n exceeds every earlier n (none allocated once warm).
// The ATen path runs the same steps as batched ops (norms, RoPE, softmax in float32), with one
// upload of the block's tokens per Forward.
// Checked by: tests/methods/dflash_head_test.cpp (non-causal and causal block forward against a
// plain-loop double reference over the checkpoint tensors at n < block_size, n = block_size and
// n > block_size, incremental context == full context, truncation, errors; the ATen path against
// the row loops, sliding windows included; ForwardBatch against each head's own Forward, bit for
// bit on the row loops, within rounding and one GEMM per projection on the ATen path, and its
// errors).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "methods/common/head_aten.h"
#include "methods/dflash/dflash_config.h"

namespace specbed {

// Output of one DflashHead::Forward call; the buffers are allocated on first use and reused.
struct DflashHeadOutput {
  at::Tensor hidden;  // [n, H] head dtype and device: last layer output before the final norm
  at::Tensor logits;  // float32 [n, V] head device: target-vocabulary logits per block position

  const float* logits_row(int64_t i) const;  // row i of `logits` (V floats); CPU logits only
};

// The head's weights for one placement, read once and shared (const) by every DflashHead that
// drafts beside the same target: the batch slots of a case (MethodContext::shared), whose blocks
// DflashHead::ForwardBatch runs as one forward.
struct DflashWeights {
  // `tensors`: canonical names as from LoadDflashCheckpoint / RandomDflashTensors (checked with
  // ValidateDflashTensors; any float dtype/device, copied to float32 CPU).
  // `target_embedding`: the target's token embedding [V, H], float32 or bfloat16 CPU (shared, not
  // copied; other float dtypes are converted). `target_lm_head`: the target's output projection
  // [V, H], any float dtype (shared when float32 contiguous CPU, else converted to float32).
  // `placement`: the row loops by default; on the ATen path the weights move to its device and
  // dtype and the target's embedding and lm_head are used as they are when they already match.
  // Throws specbed::Error naming the tensor and the shapes on any mismatch.
  DflashWeights(const DflashConfig& config, const std::map<std::string, at::Tensor>& tensors,
                const at::Tensor& target_embedding, const at::Tensor& target_lm_head,
                const HeadPlacement& placement = {});

  struct Layer {
    at::Tensor wqkv_t, wkv_t, wo_t, w_gate_up_t, w_down_t;  // transposed views for x @ W^T
    at::Tensor wqkv, wkv, wo, w_gate_up, w_down;            // [out, in] (placement dtype)
    at::Tensor input_norm, post_norm, q_norm, k_norm;       // float32
    int64_t window = 0;                                     // sliding-window size; 0 = full
  };
  DflashConfig config;
  HeadPlacement placement;
  std::vector<Layer> layers;
  at::Tensor fc_t, fc, hidden_norm, final_norm;
  at::Tensor embedding;           // [V, H] float32 or bfloat16 (ATen path: placement dtype)
  at::Tensor lm_head, lm_head_t;  // [V, H] float32 (ATen: placement dtype) and its transpose
  std::vector<double> inv_freq;   // RoPE
};

class DflashHead;

// One sequence's block for DflashHead::ForwardBatch: `n` >= 1 target-vocabulary ids (int32 host
// memory) at positions [start_position, start_position + n), drafted by `head` against its own
// context, output into *out.
struct DflashBlock {
  DflashHead* head = nullptr;
  const int32_t* tokens = nullptr;
  int64_t n = 0;
  int64_t start_position = 0;
  DflashHeadOutput* out = nullptr;
};

// Block forwards made by every DflashHead of the process (one per Forward, one per ATen-path
// ForwardBatch whatever its number of blocks): a test's way to see that a batch of sequences
// drafted in one forward.
int64_t DflashHeadForwards();

// One sequence's head: the shared weights, this sequence's context K/V and the work buffers.
class DflashHead {
 public:
  // A head over shared weights (never null).
  explicit DflashHead(std::shared_ptr<const DflashWeights> weights);
  // A head with weights of its own (DflashWeights' arguments).
  DflashHead(const DflashConfig& config, const std::map<std::string, at::Tensor>& tensors,
             const at::Tensor& target_embedding, const at::Tensor& target_lm_head,
             const HeadPlacement& placement = {});

  // Empties the context and makes room for `capacity` rows (allocates only when growing).
  void ResetContext(int64_t capacity);
  int64_t context_length() const { return context_length_; }
  int64_t context_capacity() const { return context_capacity_; }
  // Projects `n` feature rows and appends them at positions [context_length(), +n).
  //   features float32 [n, num_features * H] row-major host memory (concat over target_layer_ids
  //            of the target's decoder-layer outputs, low layer first).
  // Grows the context storage (doubling) when full. Throws specbed::Error for n < 1 or a null
  // pointer.
  void AppendContext(const float* features, int64_t n);
  // The same for features [n, num_features * H] of any float dtype on any device.
  void AppendContext(const at::Tensor& features);
  // Drops context rows [length, context_length()).
  void TruncateContext(int64_t length);

  // Drafts one block of n >= 1 rows (any n; rows past config().block_size are untrained mask
  // positions). `block_tokens` int32 [n] host memory, target-vocabulary ids at positions
  // [start_position, start_position + n); start_position >= 0 (usually context_length()).
  // Fills out.logits float32 [n, V] and out.hidden [n, H] on the head's device (row path:
  // float32 CPU, reallocated only when n changes). Does not change the context. Throws
  // specbed::Error for n < 1, a token outside [0, V) or a negative position.
  void Forward(const int32_t* block_tokens, int64_t n, int64_t start_position,
               DflashHeadOutput& out);
  // Forward with n = config().block_size.
  void Forward(const int32_t* block_tokens, int64_t start_position, DflashHeadOutput& out);
  // Forward on [bonus, mask_token_id × (n - 1)] at start_position = context_length(). Throws
  // specbed::Error when the config has no mask_token_id or n < 1.
  void ForwardFromBonus(int32_t bonus_token, int64_t n, DflashHeadOutput& out);
  // ForwardFromBonus with n = config().block_size.
  void ForwardFromBonus(int32_t bonus_token, DflashHeadOutput& out);
  // The block ForwardFromBonus(bonus_token, n, out) runs (its tokens live in this head until the
  // next call), for ForwardBatch.
  DflashBlock BonusBlock(int32_t bonus_token, int64_t n, DflashHeadOutput& out);

  // Every block's Forward, the blocks' heads sharing one DflashWeights (distinct heads). ATen
  // path: one forward for all of them: the embedding, norms, RoPE and every projection once over
  // the concatenated rows, attention per block against its own head's context; each out gets
  // views of that forward's rows (within rounding of its own Forward: one GEMM of more rows). Row
  // path: each block's Forward in turn (the head's block GEMMs are per-sequence calls there, as
  // the target's long chunks, so every draft is the bits batch 1 makes). Throws specbed::Error
  // for an empty batch, a null head or output, heads of other weights or a head twice.
  static void ForwardBatch(const std::vector<DflashBlock>& blocks);

  const DflashConfig& config() const { return config_; }
  // Draft parameters (DflashConfig::ParameterCount), without the shared embedding / lm_head.
  int64_t parameter_count() const { return config_.ParameterCount(); }
  const HeadPlacement& placement() const { return placement_; }
  const std::shared_ptr<const DflashWeights>& weights() const { return w_; }

 private:
  // One layer's context keys and values (rotated keys), [n_kv_heads, context_capacity_, head_dim].
  struct LayerContext {
    std::vector<float> k, v;  // row path
    at::Tensor k_t, v_t;      // ATen path (device tensors)
  };

  void CheckBlock(const int32_t* block_tokens, int64_t n, int64_t start_position) const;
  // Row path: out's float32 CPU [n, V] logits and [n, H] hidden (reallocated when n changes), and
  // the block's embedding (the target's) into h_.
  void EnsureRowOutput(int64_t n, DflashHeadOutput& out) const;
  void EmbedBlock(const int32_t* block_tokens, int64_t n);
  // Attention of block rows over the context and block keys of layer `l` (row path).
  void AttendBlock(size_t l, int64_t b, int64_t start_position);
  void AppendContextAten(const at::Tensor& features);
  // The ATen path of ForwardBatch (blocks checked; one block = Forward).
  static void ForwardBlocksAten(const std::vector<DflashBlock>& blocks);
  // allowed bool [n, context_length() + n] of a block at start_position for a layer's window.
  at::Tensor BlockAllowed(int64_t n, int64_t start_position, int64_t window) const;
  void EnsureRope(int64_t max_position);
  void GrowContext(int64_t capacity);
  // Makes the work buffers hold n rows (reallocated when n > row_capacity_) and the row views
  // below n rows long (re-made only when n changes).
  void EnsureRows(int64_t n);

  std::shared_ptr<const DflashWeights> w_;
  const DflashConfig& config_;
  const HeadPlacement& placement_;
  std::vector<LayerContext> ctx_;  // per draft layer

  std::vector<float> rope_cos_, rope_sin_;  // [rope_capacity_, head_dim / 2]
  int64_t rope_capacity_ = 0;

  int64_t context_capacity_ = 0;
  int64_t context_length_ = 0;

  // Work buffers: storage for row_capacity_ block rows, and views of their first rows_ rows
  // (the n of the latest Forward).
  at::Tensor ctx_rows_;  // [rows, H] projected context rows (grown per AppendContext)
  at::Tensor ctx_kv_;    // [rows, 2 * kv_dim]
  int64_t row_capacity_ = 0, rows_ = 0;
  at::Tensor h_store_, x_store_, qkv_store_, q_store_, attn_store_, gate_up_store_, act_store_;
  at::Tensor h_;                          // [n, H] block hidden (residual stream)
  at::Tensor x_;                          // [n, H] normed
  at::Tensor qkv_;                        // [n, q + 2 kv]
  at::Tensor q_;                          // [n, q] normed + rotated queries
  at::Tensor attn_;                       // [n, q]
  at::Tensor gate_up_;                    // [n, 2 I]
  at::Tensor act_;                        // [n, I]
  std::vector<float> k_block_, v_block_;  // [n_kv_heads, n, head_dim] (row_capacity_ rows)
  std::vector<float> scores_;             // [threads, score_stride_]
  int64_t score_stride_ = 0;
  std::vector<int32_t> bonus_block_;  // [n] (grown on demand)
  DeviceRopeTable rope_device_;       // ATen path
  HostStaging staging_;               // ATen path: the blocks' tokens and positions
};

}  // namespace specbed
