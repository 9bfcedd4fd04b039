// SpecBed's one decoder engine: a Llama-family transformer forward over (KV cache + new tokens)
// on any LibTorch device. Used by AR and by every speculative method (target and drafters).
//
// Two forward paths behind one Forward() contract (ForwardPath):
// - kRowKernels (the CPU fast path, float32 / bfloat16), described below;
// - kAten (models/llama_forward_aten.h): the same computation as batched ATen ops (GEMMs,
//   RMSNorm, RoPE, KV write, attention with the causal or tree mask, SwiGLU) into preallocated
//   buffers; used on every non-CPU device (float32 / bfloat16 / float16) and selectable on the
//   CPU (ModelOptions::forward_path, or SPECBED_FORWARD=aten), so CPU CI tests it against the
//   row kernels.
//
// Row-kernel design (llama.cpp / llm.c style, for low per-token overhead):
// - q/k/v and gate/up projections are fused (two GEMMs per layer plus two in-place addmm for the
//   residual adds); GEMMs go through ATen (OpenBLAS for fp32, oneDNN for bf16), except for a
//   few rows (decode steps, short verify blocks: rows <= GemvMaxRows), which use SpecBed's own
//   matrix-vector kernel (models/gemv.h) so that AR speed does not depend on BLAS's kernel choice.
// - RMSNorm, q/k-norm + RoPE + cache write, attention and SwiGLU are hand-written row kernels:
//   every query row is computed by the same code in the same order whatever the number of new
//   tokens, so a row's attention result does not depend on how the tokens were batched.
// - All activations live in buffers preallocated for the largest batch*tokens seen; a steady
//   decode step allocates only tensor views.
// - An explicit attention mask over (cache + new tokens) and explicit positions make tree
//   verification possible; hidden states of any layers can be returned for drafters.
// Checked by: tests/engine/llama_model_test.cpp against models/reference_forward.h (plain loops
// over the original unfused tensors), for llama2.c and HF Llama-3 / Qwen2 / Qwen3 checkpoints;
// tests/engine/aten_forward_test.cpp (the ATen path against the row kernels); staged_extra in
// tests/engine/step_graph_test.cpp (StepGraph.VerifyStepIsOneUploadAndOneDownload).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/step_graph.h"
#include "models/kv_cache.h"
#include "models/llama_config.h"
#include "models/llama_weights.h"
#include "models/weight_arena.h"

namespace specbed {

enum class LogitsMode { kNone, kLast, kAll };

// Which implementation runs LlamaModel::Forward (see the file comment).
enum class ForwardPath {
  kAuto,        // the row kernels on the CPU (unless SPECBED_FORWARD=aten), ATen elsewhere
  kRowKernels,  // CPU only
  kAten,
};
// "auto" | "rows" | "aten"; anything else fails naming `context`.
ForwardPath ParseForwardPath(const std::string& name, const std::string& context);
const char* ForwardPathName(ForwardPath path);
// The path kAuto resolves to on `device`: kAten off the CPU; on the CPU kRowKernels unless the
// environment variable SPECBED_FORWARD is "aten" (or a process-wide override is set).
ForwardPath ResolveForwardPath(ForwardPath requested, const at::Device& device);
// Process-wide override of what kAuto resolves to on the CPU (tests run every method on the ATen
// path with it); kAuto = none (SPECBED_FORWARD decides). Set it before models are built.
void SetCpuForwardPathOverride(ForwardPath path);

struct ModelOptions {
  ForwardPath forward_path = ForwardPath::kAuto;
};

class AtenForward;
struct RowStep;  // models/llama_model.cpp

struct ForwardOptions {
  // [batch, T] int64, on the CPU or the model's device: RoPE position of each new token.
  // Undefined: cache.length() + t.
  at::Tensor positions;
  // [batch, T, cache.length() + T] bool, on the CPU or the model's device, true = query t may
  // attend to slot s. Undefined: causal (or tree_bits).
  at::Tensor mask;
  // Hidden states to return: 0 = embedding output, l (1..n_layers) = output of decoder layer l,
  // always BEFORE the final norm. This equals Hugging Face's `hidden_states[l]` for
  // l < n_layers; HF's last entry (l = n_layers) is taken AFTER the final norm, ours before it.
  // EAGLE-3's default layers {2, L/2, L-3} are below it; a DFlash head naming the target's last
  // layer (target_layer_ids id L-1 -> index L) reads the pre-norm state where the DFlash
  // reference reads HF's post-norm one (the published heads' ids stop below L-1).
  std::vector<int64_t> hidden_layers;
  LogitsMode logits = LogitsMode::kLast;
  // Instead of `mask` when every cached slot is visible and T <= 64 (a draft tree): int64
  // [batch, T] on the CPU or the model's device, bit j of row t set = query t may attend to new
  // token j (TreeBitsOf). The ATen path's fused attention reads them on the device (no [T, S]
  // mask); every other path gets the mask they stand for.
  at::Tensor tree_bits;
  // int64 [m] on the CPU, m <= 3 * T + 2: values the caller needs on the device right after this
  // step (the verifier's tree and uniforms), carried in the ATen path's one upload of the step's
  // inputs (kernels/step_staging.h) instead of a copy of their own; ForwardOutput::staged_extra
  // is their device view. Other paths ignore it.
  at::Tensor staged_extra;
};

// The tree_bits of a draft tree's verify rows: row 0 is the root (bit 0), row i + 1 node i
// (its parent's row's bits and bit i + 1). parent: [n], -1 = child of the root, parent[i] < i;
// out: [n + 1] (n + 1 <= 64).
void TreeBitsOf(const int32_t* parent, int64_t n, int64_t* out);
// The bool mask [batch, T, past + T] that tree_bits [batch, T] (CPU or device) stand for.
at::Tensor TreeBitsMask(const at::Tensor& tree_bits, int64_t past);

struct ForwardOutput {
  // float32 [batch, T, vocab] (kAll) or [batch, 1, vocab] (kLast) on the model's device;
  // undefined for kNone. A view of a model-owned buffer: valid until the next Forward call on
  // this model.
  at::Tensor logits;
  // One tensor per requested hidden layer: [batch, T, dim], model dtype and device, owned.
  std::vector<at::Tensor> hidden;
  // ForwardOptions::staged_extra on the model's device (int64 [m], a view of the staged block:
  // valid until the next Forward); undefined when none was given or the path does not stage.
  at::Tensor staged_extra;
};

// One sequence's part of LlamaModel::ForwardRagged: its own batch-1 cache (NewCache(1, ...)) and
// the T tokens appended after cache->length() (the cache advances by T).
struct SeqChunk {
  KvCache* cache = nullptr;
  at::Tensor tokens;     // int64 [1, T], CPU
  at::Tensor positions;  // int64 [1, T], CPU; undefined: cache->length() + t
  at::Tensor mask;       // bool [1, T, cache->length() + T], CPU; undefined: causal
};

struct RaggedOptions {
  std::vector<int64_t> hidden_layers;    // as ForwardOptions::hidden_layers
  LogitsMode logits = LogitsMode::kAll;  // kAll: every row; kLast: each chunk's last row
  // The row kernels: each chunk's rows go through the matrix kernel batch 1 would give them
  // (GEMV for a chunk of <= GemvMaxRows rows, all such chunks in one GEMV call; a longer chunk
  // its own GEMM call), so every chunk's logits are bit-identical to its batch-1 Forward. false:
  // GEMV or one GEMM by the step's total rows (faster past the threshold; rows may differ in the
  // last bits from batch 1). Ignored off the row kernels.
  bool batch_invariant = true;
};

struct RaggedOutput {
  // Per chunk (in the order given): float32 logits [T, vocab] (kAll) or [1, vocab] (kLast) on
  // the model's device, views of a model-owned buffer valid until the next forward; empty for
  // kNone.
  std::vector<at::Tensor> logits;
  // Per chunk, one tensor per requested hidden layer: [1, T, dim], model dtype and device.
  std::vector<std::vector<at::Tensor>> hidden;
};

// A draft chain's choice of token i (LlamaModel::DecodeChain): from `logits` (float32 [1, V] on
// the model's device) write the token id into `id` (int64 [1] on the device), on the device.
using ChainPick = std::function<void(int64_t i, const at::Tensor& logits, const at::Tensor& id)>;

class LlamaModel {
 public:
  // `weights` all of one dtype and on one device; they become the model's dtype and device.
  // The row kernels take CPU float32 / bfloat16; the ATen path also float16 (off the CPU).
  LlamaModel(LlamaConfig config, LlamaWeights weights, ModelOptions options = {});
  ~LlamaModel();
  LlamaModel(LlamaModel&&) noexcept;
  LlamaModel& operator=(LlamaModel&&) noexcept;

  // Runs the decoder over `tokens` ([batch, T] int64, on the CPU or the model's device)
  // appended after cache.length() and advances the cache by T. The cache must have been made by
  // NewCache (same batch, on the model's device).
  ForwardOutput Forward(const at::Tensor& tokens, KvCache& cache,
                        const ForwardOptions& options = {});

  // One forward over several sequences at once, each with its own cache, length and mask
  // (continuous batching: harness/engine/batch_engine.h). The row kernels run one matrix pass
  // per projection over every chunk's rows (the weights are read once for the whole batch) and
  // attention per chunk against its own cache; a chunk's rows never see another chunk's. So does
  // the ATen path with its fused attention (AtenForward::RunRagged: one GEMM per projection,
  // RoPE + KV write and attention per chunk; within float tolerance of each chunk's Forward);
  // with another attention kind, or a mask that hides part of the past, it runs the chunks one
  // Forward each. Caches must be distinct, batch 1 and on the model's device.
  RaggedOutput ForwardRagged(const std::vector<SeqChunk>& chunks,
                             const RaggedOptions& options = {});

  // A cache for `batch` sequences of up to `max_len` positions (default: config.max_seq_len),
  // on the model's device. More positions than a Mistral config's sliding_window are refused.
  KvCache NewCache(int64_t batch, int64_t max_len = -1) const;

  const LlamaConfig& config() const { return config_; }
  const LlamaWeights& weights() const { return weights_; }
  at::ScalarType dtype() const { return dtype_; }
  at::Device device() const { return device_; }
  // The resolved path (never kAuto).
  ForwardPath forward_path() const { return path_; }
  // Whether a forward of n_tokens new tokens reads ForwardOptions::tree_bits as they are (the
  // ATen path's fused attention); otherwise Forward turns them into a mask (allocated per call:
  // give such a model the mask instead).
  bool TakesTreeBits(int64_t n_tokens) const;
  // Whether a forward of n_tokens new tokens replays a captured step (the ATen path with
  // SPECBED_GRAPHS=on: kernels/step_graph.h); the verifier pads a verify step to
  // StepBucket(n) rows when ReplaysSteps(StepBucket(n)). Off on the row kernels.
  bool ReplaysSteps(int64_t n_tokens) const;
  // The draft chain of n tokens after the last Forward (whose LogitsMode::kLast logits are
  // `first`) as one captured step program: pick(0) on `first`, then n - 1 width-1 forwards, each
  // over the token the previous pick wrote into `ids` (int64 [>= n] on the device) and followed by
  // pick(i) on its logits; the cache advances by n - 1 (the last token is not fed). `pick_key`
  // names what `pick` bakes into a graph (its buffers' addresses and parameters). Only where
  // ChainsSteps(n) (AtenForward::RunChain); otherwise call Forward per token.
  bool ChainsSteps(int64_t n) const;
  void DecodeChain(const at::Tensor& first, KvCache& cache, int64_t n, const at::Tensor& ids,
                   const ChainPick& pick, const std::vector<int64_t>& pick_key);
  // SPECBED_GRAPHS as this model resolved it (kOff on the row kernels) and what its captured
  // steps did so far (zeros when off).
  GraphMode graph_mode() const;
  GraphStats graph_stats() const;
  // Forward calls since construction (tests count the target forwards a method makes).
  int64_t forward_calls() const { return forward_calls_; }
  // The streamed matrices' huge-page arena (models/weight_arena.h); bytes == 0 when the weights
  // stayed where they were loaded (ATen path, SPECBED_HUGE_PAGES=0).
  const WeightArenaStats& weight_arena() const { return weight_arena_; }

 private:
  ForwardOutput ForwardRows(const at::Tensor& tokens, KvCache& cache,
                            const ForwardOptions& options);
  RaggedOutput RaggedRows(const std::vector<SeqChunk>& chunks, const RaggedOptions& options);
  RaggedOutput RaggedAten(const std::vector<SeqChunk>& chunks, const RaggedOptions& options);
  // The row kernels over `step`'s chunks (token ids in buffer order): logits into *logits
  // (null = none), hidden states [rows, dim] of `hidden_layers` into `hidden`.
  void RunRows(const int64_t* ids, const RowStep& step, const std::vector<int64_t>& hidden_layers,
               at::Tensor* logits, std::vector<at::Tensor>& hidden);

  void EnsureCapacity(int64_t n_rows, int64_t n_slots);
  void EnsureRope(int64_t max_position);
  // Views of the leading `rows` rows of the activation buffers, one set per row count seen (all
  // dropped when EnsureCapacity reallocates): a small model's step otherwise pays six ATen view
  // dispatches, which cost more than its matrix products (Speculative.SpsIsLossless...).
  struct RowViews {
    int64_t rows = -1;
    at::Tensor x, xn, qkv, attn, gate_up, act;
  };
  const RowViews& RowViewsFor(int64_t rows);

  LlamaConfig config_;
  LlamaWeights weights_;
  at::ScalarType dtype_;
  at::Device device_ = at::kCPU;
  ForwardPath path_ = ForwardPath::kRowKernels;
  int64_t forward_calls_ = 0;
  WeightArenaStats weight_arena_;
  std::unique_ptr<AtenForward> aten_;  // the ATen path's buffers (kAten only)
  // Transposed weight views ([in, out]) so that out = in @ w_t.
  std::vector<at::Tensor> wqkv_t_, wo_t_, w_gate_up_t_, w_down_t_;
  at::Tensor lm_head_t_;
  // Preallocated activations, capacity_ rows each.
  int64_t capacity_ = 0;
  at::Tensor x_, xn_, qkv_, q_, attn_, gate_up_, act_, logits_, logits_lowp_, head_in_;
  std::vector<RowViews> row_views_;  // [rows], filled as used
  at::Tensor scores_;                // float32 [threads, slot_capacity_]
  int64_t slot_capacity_ = 0;
  // RoPE tables, float32 [rope_capacity_, head_dim / 2].
  at::Tensor rope_cos_, rope_sin_;
  int64_t rope_capacity_ = 0;
  std::vector<double> inv_freq_;
};

}  // namespace specbed
