// The EAGLE-3 draft head's inference forward: weights read once (Eagle3Weights, shared by every
// sequence drafting beside one target) and per sequence an Eagle3Head with its own KV cache:
// float32 row loops on the CPU, or batched ATen ops on the target's device and dtype
// (HeadPlacement, methods/common/head_aten.h), where Eagle3Head::ForwardBatch runs several
// sequences' rows in one forward.
//
// Row convention (as in SafeAILab/EAGLE `topK_genrate`): a row pairs the feature of target
// position t with token t+1 and predicts token t+2. On the first step the feature is the
// concatenation of the target's three aux hidden states at position t (width 3 * Ht; `fc` maps it
// to H); later tree depths feed the head's own output hidden of the parent row (width H, `fc`
// skipped). Token ids are target-vocabulary ids; logits are over the draft vocabulary
// (DraftToTarget maps a draft id back).
//
// Per row:  g = fc(feature) (or feature when its width is H);  e = embed(token);
//   x = [input_layernorm(e) | hidden_norm(g)] (2H);  q, k, v = proj(x);  RoPE(q, k) at the row's
//   position (rotate_half pairing, head_dim from the config);  a = attention over the cached rows
//   the mask allows (GQA, scale 1/sqrt(head_dim));  h = r + o_proj(a) with r = g (or
//   hidden_norm(g) when norm_before_residual);  h += down(silu(gate(post_ln(h))) * up(post_ln(h)));
//   hidden = h (un-normed: the next depth's feature);  logits = lm_head(norm(h)).
// q/k/v and gate/up are fused. Row path: GEMMs go through ATen into preallocated buffers, norms,
// RoPE, attention and SwiGLU are raw row loops. ATen path: the same steps as batched ATen ops
// (norms, RoPE and softmax in float32), KV cache a device tensor, one upload of the step's tokens,
// positions and mask.
// Checked by: tests/methods/eagle3_head_test.cpp (full causal sequence, incremental == full, tree
// mask + positions, feature width H, all against a plain-loop reference over the unfused tensors;
// the ATen path against the row path; ForwardBatch against each head's own forward and its
// errors); ForwardOnDevice through the device frontier, whose trees
// equal the host path's (tests/methods/eagle3_drafter_test.cpp, Eagle3DeviceFrontier.*).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "methods/common/head_aten.h"
#include "methods/eagle3/eagle3_config.h"

namespace specbed {

// Output rows of one Eagle3Head::Forward call, valid until the next call. Row path: views of the
// first `n` rows of buffers reused across calls (grown, never shrunk). ATen path: fresh tensors on
// the head's device (the caching allocator reuses their memory).
struct Eagle3HeadOutput {
  at::Tensor hidden;  // [n, H] head dtype, head device: layer output before the final norm
  at::Tensor logits;  // float32 [n, Vd] head device: draft-vocabulary logits
  int64_t n = 0;
  at::Tensor hidden_buffer;  // float32 [capacity, H] CPU (row path)
  at::Tensor logits_buffer;  // float32 [capacity, Vd] CPU (row path)

  // Row i of `hidden` (H floats) / `logits` (Vd floats); float32 CPU outputs only.
  const float* hidden_row(int64_t i) const;
  const float* logits_row(int64_t i) const;
};

// The head's weights for one placement, read once and shared (const) by every Eagle3Head that
// drafts beside the same target: the batch slots of a case (MethodContext::shared), whose rows
// Eagle3Head::ForwardBatch runs as one forward on the ATen path.
struct Eagle3Weights {
  // `tensors`: canonical names as from LoadEagle3Checkpoint / RandomEagle3Tensors (checked with
  // ValidateEagle3Tensors; any float dtype/device, copied to float32 CPU; d2t int64 [Vd] and
  // t2d bool [V], optional when Vd == V). `target_embedding`: the target's frozen token
  // embedding, [V, H] float32 or bfloat16 CPU (shared, not copied; other float dtypes are
  // converted); used when `tensors` has no embed_tokens.weight (the checkpoint's own wins) and
  // may then be undefined. `placement`: where the head runs (the row loops by default; the
  // target's device and dtype on the ATen path, where the target's embedding is shared as is).
  // Throws specbed::Error on any mismatch (names the tensor and shapes).
  Eagle3Weights(const Eagle3Config& config, const std::map<std::string, at::Tensor>& tensors,
                const at::Tensor& target_embedding, const HeadPlacement& placement = {});

  Eagle3Config config;
  HeadPlacement placement;
  // float32 contiguous CPU on the row path, else placement dtype and device; norms float32;
  // *_t are transposed views for x @ W^T.
  at::Tensor fc, wqkv, wo, w_gate_up, w_down, lm_head;
  at::Tensor fc_t, wqkv_t, wo_t, w_gate_up_t, w_down_t, lm_head_t;
  at::Tensor hidden_norm, input_norm, post_norm, final_norm;
  at::Tensor embedding;  // [V, H] float32 or bfloat16 (row path), placement dtype (ATen path)
  bool owns_embedding = false;
  int64_t parameter_count = 0;
  std::vector<int32_t> draft_to_target;  // [Vd]
  std::vector<int32_t> target_to_draft;  // [V], -1 = absent
  at::Tensor draft_to_target_t;          // int64 [Vd], head device
  std::vector<double> inv_freq;          // RoPE
};

class Eagle3Head;

// One sequence's rows for Eagle3Head::ForwardBatch, every input on the head's device (ATen path):
// features [n, width] (width 3 * target hidden, fc applied, or H), tokens and positions int64 [n],
// allowed bool [n, cache_length() + n], RoPE positions below max_position. Made by
// Eagle3Head::StageRows (host inputs, one upload) or Eagle3Head::DeviceRows (device inputs).
struct Eagle3DeviceRows {
  Eagle3Head* head = nullptr;
  at::Tensor features, tokens, positions, allowed;
  int64_t max_position = 0;
  Eagle3HeadOutput* out = nullptr;
};

// Row forwards made by every Eagle3Head of the process (one per Forward / ForwardOnDevice, one
// per ForwardBatch whatever its number of sequences): a test's way to see that a batch of
// sequences drafted in one forward a tree layer.
int64_t Eagle3HeadForwards();

// One sequence's head: the shared weights, this sequence's KV cache and the work buffers.
class Eagle3Head {
 public:
  // A head over shared weights (never null).
  explicit Eagle3Head(std::shared_ptr<const Eagle3Weights> weights);
  // A head with weights of its own (Eagle3Weights' arguments).
  Eagle3Head(const Eagle3Config& config, const std::map<std::string, at::Tensor>& tensors,
             const at::Tensor& target_embedding, const HeadPlacement& placement = {});

  // Empties the cache and makes room for `capacity` rows (allocates only when growing).
  void ResetCache(int64_t capacity);
  int64_t cache_length() const { return cache_length_; }
  int64_t cache_capacity() const { return cache_capacity_; }
  // Drops cached rows [length, cache_length()).
  void TruncateCache(int64_t length);

  // Runs `n` rows and appends them to the cache at [cache_length(), cache_length() + n).
  //   features  float32 [n, feature_width] row-major host memory; feature_width is
  //             3 * target_hidden_size (fc applied) or hidden_size (fc skipped). When both are
  //             equal, fc is skipped (as in the reference: fc only when width != H). May alias
  //             out.hidden (features are consumed before any output is written).
  //   tokens    int32 [n] target-vocabulary ids.
  //   positions int64 [n] RoPE positions (>= 0), or nullptr = cache_length() + i.
  //   mask      uint8 [n, cache_length() + n] row-major, 1 = row i may attend to cache slot j
  //             (slots >= cache_length() are this call's rows); nullptr = causal. A row that may
  //             attend to nothing gets a zero attention output.
  // Throws specbed::Error for a bad width, token id, position, n < 1 or a full cache.
  void Forward(const float* features, int64_t feature_width, const int32_t* tokens,
               const int64_t* positions, int64_t n, const uint8_t* mask, Eagle3HeadOutput& out);
  // The same with `features` a tensor [n, feature_width] of any float dtype on any device (the
  // row path copies it to float32 CPU; the ATen path casts it to the head's dtype and device).
  void Forward(const at::Tensor& features, const int32_t* tokens, const int64_t* positions,
               int64_t n, const uint8_t* mask, Eagle3HeadOutput& out);

  // The ATen path with every input already on the head's device (no upload, no host read; the
  // device frontier, methods/eagle3/eagle3_device_frontier.h), for rows fed the head's own hidden:
  //   features   [n, H] head dtype, head device.
  //   tokens     int64 [n] head device, target-vocabulary ids (not checked: no host read).
  //   positions  int64 [n] head device, RoPE positions, each < max_position.
  //   allowed    bool [n, cache_length() + n] head device (true = row i may attend to slot j).
  // Appends the rows to the cache like Forward. Throws specbed::Error off the ATen path or for a
  // bad shape, dtype or device.
  void ForwardOnDevice(const at::Tensor& features, const at::Tensor& tokens,
                       const at::Tensor& positions, const at::Tensor& allowed, int64_t max_position,
                       Eagle3HeadOutput& out);
  // ForwardOnDevice's rows, checked the same way, for ForwardBatch.
  Eagle3DeviceRows DeviceRows(const at::Tensor& features, const at::Tensor& tokens,
                              const at::Tensor& positions, const at::Tensor& allowed,
                              int64_t max_position, Eagle3HeadOutput& out);
  // Forward's rows on the ATen path (host tokens, positions and mask checked and uploaded in one
  // copy), for ForwardBatch. Throws specbed::Error on the row loops.
  Eagle3DeviceRows StageRows(const at::Tensor& features, const int32_t* tokens,
                             const int64_t* positions, int64_t n, const uint8_t* mask,
                             Eagle3HeadOutput& out);
  // Every sequence's rows in one forward on the ATen path: fc, the norms, RoPE and every
  // projection once over the concatenated rows, each sequence's keys and values into its own
  // cache and its attention against it; each out gets views of that forward's rows (within
  // rounding of its own forward: one GEMM of more rows) and each cache grows by its rows. The
  // heads share one Eagle3Weights (distinct heads) and the rows one feature width. Throws
  // specbed::Error otherwise, for an empty batch or on the row loops. `batch` (optional) gets the
  // whole forward's rows (sequence after sequence, in `rows` order).
  static void ForwardBatch(const std::vector<Eagle3DeviceRows>& rows,
                           Eagle3HeadOutput* batch = nullptr);

  // Target id of draft id d (d + d2t[d]); d in [0, Vd).
  int32_t DraftToTarget(int32_t d) const { return w_->draft_to_target[d]; }
  // True when target id t (in [0, V)) is in the draft vocabulary.
  bool InDraftVocab(int32_t t) const { return w_->target_to_draft[t] >= 0; }
  // Draft id of target id t, or -1 when t is not in the draft vocabulary.
  int32_t TargetToDraft(int32_t t) const { return w_->target_to_draft[t]; }
  // Draft id -> target id for every draft id ([Vd]).
  const std::vector<int32_t>& draft_to_target() const { return w_->draft_to_target; }
  // The same as int64 [Vd] on the head's device.
  const at::Tensor& draft_to_target_tensor() const { return w_->draft_to_target_t; }
  const HeadPlacement& placement() const { return placement_; }

  const Eagle3Config& config() const { return config_; }
  // Parameters of the head (Eagle3Config::ParameterCount), plus embed_tokens when it is the
  // checkpoint's own.
  int64_t parameter_count() const { return w_->parameter_count; }
  bool owns_embedding() const { return w_->owns_embedding; }
  const std::shared_ptr<const Eagle3Weights>& weights() const { return w_; }

 private:
  // ForwardBatch's checks.
  static void CheckBatch(const std::vector<Eagle3DeviceRows>& rows);
  // Checks one Forward's rows; returns the largest RoPE position + 1 it needs.
  int64_t CheckRows(int64_t feature_width, const int32_t* tokens, const int64_t* positions,
                    int64_t n) const;
  void EnsureRows(int64_t n);
  void EnsureRope(int64_t max_position);
  // Row path, in order: output buffers; g and x = [norm(embed) | norm(g)] with the residual into
  // `hid`; q/k/v from x, RoPE, k and v into the cache; attention; SwiGLU MLP and logits.
  void EnsureOutput(int64_t n, Eagle3HeadOutput& out) const;
  void FuseRows(const float* features, int64_t feature_width, const int32_t* tokens, int64_t n,
                at::Tensor& hid);
  void RotateIntoCache(const int64_t* positions, int64_t n);
  void MlpAndLogits(int64_t n, at::Tensor& hid, at::Tensor& logits);
  // Attention of every (row, head) of q_ over the cache slots `mask` allows (row path).
  void AttendRows(int64_t n, const uint8_t* mask, at::Tensor& attn);

  std::shared_ptr<const Eagle3Weights> w_;
  const Eagle3Config& config_;
  const HeadPlacement& placement_;

  // RoPE table [rope_capacity_, head_dim / 2].
  std::vector<float> rope_cos_, rope_sin_;
  int64_t rope_capacity_ = 0;

  // KV cache [n_kv_heads, cache_capacity_, head_dim] float32.
  std::vector<float> k_cache_, v_cache_;
  int64_t cache_capacity_ = 0;
  int64_t cache_length_ = 0;

  // Work buffers for up to row_capacity_ rows.
  int64_t row_capacity_ = 0;
  at::Tensor g_;               // [rows, H]
  at::Tensor x_;               // [rows, 2H]
  at::Tensor qkv_;             // [rows, qkv_dim]
  at::Tensor q_;               // [rows, q_dim] rotated queries
  at::Tensor attn_;            // [rows, q_dim]
  at::Tensor hn_;              // [rows, H] normed hidden
  at::Tensor gate_up_;         // [rows, 2I]
  at::Tensor act_;             // [rows, I]
  std::vector<float> scores_;  // [threads, score_stride_]
  int64_t score_stride_ = 0;

  // ATen path: KV cache [n_kv_heads, cache_capacity_, head_dim] (placement dtype and device),
  // the RoPE table on the device and the step's input upload.
  at::Tensor k_cache_t_, v_cache_t_;
  DeviceRopeTable rope_device_;
  HostStaging staging_;
};

}  // namespace specbed
