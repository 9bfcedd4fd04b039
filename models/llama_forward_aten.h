// The ATen forward path of LlamaModel (ForwardPath::kAten): the decoder as batched ATen ops on
// any LibTorch device, behind LlamaModel::Forward's contract (llama_model.h).
//
// Per layer (issue 45 counts these as launching ops; `specbed bench --count-ops` prints them):
// RMSNorm (kernels/decoder_ops.h FusedRmsNorm: float32 math, one rounding), the fused qkv GEMM
// (+ bias), FusedRopeKvWrite (Qwen3's q/k norms, RoPE at the device-held positions, k and v
// written into the KV cache at the device-held slots, q into a [batch, kv_heads, group, T,
// head_dim] query buffer, so grouped-query attention is one batched GEMM per side with no repeat
// of K/V); the causal or tree mask is added as -inf; softmax; the wo GEMM accumulates into the
// residual; RMSNorm; the fused gate/up GEMM; FusedSiluMul; the down GEMM accumulates. Attention
// (SPECBED_ATTENTION, AttentionKind): `fused` (the CPU default) runs FusedTreeAttention for steps
// of <= 64 new tokens (the cached length on the device, the tree as a bitmask over the new rows,
// no [T, S] mask) and batched GEMMs above; `sdpa` (the CUDA default until a GPU run proves the
// fused kernel) at::scaled_dot_product_attention (grouped-query, explicit mask; LibTorch >= 2.5);
// `bmm` the batched GEMMs with the mask added as -inf. The ops of a step are marked per layer
// for the op recorder (models/op_trace.h).
//
// Every activation lives in a buffer preallocated for the largest batch * T (and the cache's
// max_len) seen, so a steady decode step allocates only tensor views; attention scores larger
// than kAttentionScoreBudget elements are computed in query chunks (long prefills). Per-op
// overhead, which dominates small models: Run dispatches below the autograd and view-tracking
// layers (at::AutoDispatchBelowADInplaceOrView: out= and in-place ops into buffers are never
// differentiated; no inference tensors are made), and each view is one as_strided call.
// Checked by: tests/engine/step_ops_test.cpp (9 launching ops per layer, trace identity of a step
// across context lengths), tests/engine/aten_forward_test.cpp (against the row kernels on the CPU:
// logits within 1e-4 in float32 and identical greedy ids on stories260K, its twin and random
// Llama-3 / Qwen2 / Qwen3 checkpoints, causal and tree masks, hidden states; no allocation in a
// steady decode step).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "kernels/step_graph.h"
#include "kernels/step_staging.h"
#include "models/kv_cache.h"
#include "models/llama_config.h"
#include "models/llama_model.h"
#include "models/llama_weights.h"

namespace specbed {

// How the ATen path attends (SPECBED_ATTENTION = fused | sdpa | bmm; unset: fused on the CPU
// and wherever `graphs` is on, sdpa on CUDA; sdpa on the CPU means bmm). Any other value throws
// naming the variable, as does sdpa or bmm with graphs on (a captured step needs the fused
// attention: the others bake the context length in).
enum class AttentionKind { kFused, kSdpa, kBmm };
AttentionKind ResolveAttentionKind(const at::Device& device, GraphMode graphs = GraphMode::kOff);

// RoPE tables shared by both forward paths: float32 CPU [n_positions, inv_freq.size()] of
// cos / sin(position * inv_freq[i]), each angle computed in double.
void FillRopeTables(const std::vector<double>& inv_freq, int64_t n_positions, at::Tensor& cos,
                    at::Tensor& sin);

class AtenForward {
 public:
  // The most attention-score elements one chunk holds (64 MiB of float32).
  static constexpr int64_t kAttentionScoreBudget = int64_t{1} << 24;

  // weights: of `dtype` on `device` (shared with the owning LlamaModel, not copied).
  AtenForward(const LlamaConfig& config, const LlamaWeights& weights, at::ScalarType dtype,
              at::Device device);

  // LlamaModel::Forward's contract; the arguments were checked by the caller.
  ForwardOutput Run(const at::Tensor& tokens, KvCache& cache, const ForwardOptions& options);
  // Whether a step of n_tokens new tokens runs FusedTreeAttention, i.e. takes
  // ForwardOptions::tree_bits (else LlamaModel::Forward turns them into a mask).
  bool TakesTreeBits(int64_t n_tokens) const;
  // Whether a step of n_tokens new tokens replays a captured step program (SPECBED_GRAPHS=on,
  // the fused attention, n_tokens a StepBucket width); the verifier pads its rows up to one.
  bool ReplaysSteps(int64_t n_tokens) const;
  // The draft chain as one step program (issue 45, step 5): `pick`(0) chooses token 0 from the
  // logits the last Run left (`first`: a view of this object's logits buffer, LogitsMode::kLast,
  // batch 1), then for i = 1 .. n - 1 a width-1 step over token i - 1 and `pick`(i) on its
  // logits. The n - 1 steps' slots, positions and cached lengths go up in one staged copy, token
  // ids never leave the device (`ids`: int64 [n] on the device, written by `pick`), and the whole
  // chain is one StepGraph keyed by n, the buffers and `pick_key` (what `pick` bakes in: its
  // buffers' addresses, its parameters). Needs ChainsSteps(n); the caller advances the cache.
  void RunChain(const at::Tensor& first, KvCache& cache, int64_t n, const at::Tensor& ids,
                const ChainPick& pick, const std::vector<int64_t>& pick_key);
  // Whether RunChain takes a chain of n tokens: captured steps on (width 1 replays) and n - 1
  // steps within the staging block.
  bool ChainsSteps(int64_t n) const {
    return ReplaysSteps(1) && n >= 2 && n - 1 <= kMaxGraphTokens;
  }
  // LlamaModel::ForwardRagged on this path (the chunks checked by the caller, which advances the
  // caches): one RMSNorm and one GEMM per projection over every chunk's rows, so the weights are
  // read once for the whole batch; RoPE + KV write and FusedTreeAttention per chunk against its
  // own cache (2 launches a chunk a layer: 7 + 2 * chunks per layer in all, against 9 * chunks
  // for a Forward each); eager, never a captured step. Needs BatchesRagged(chunks).
  RaggedOutput RunRagged(const std::vector<SeqChunk>& chunks, const RaggedOptions& options);
  // Whether RunRagged takes these chunks: the fused attention at every chunk's width, and every
  // mask (if any) lets each row see the whole cached past (a tree over the new rows, as the tree
  // verifiers stage it). Otherwise LlamaModel runs the chunks one Forward each.
  bool BatchesRagged(const std::vector<SeqChunk>& chunks) const;
  GraphMode graph_mode() const { return graph_mode_; }
  const GraphStats& graph_stats() const { return graph_stats_; }

 private:
  struct Step;  // the shapes of one Run
  // The most step graphs one model keeps (buckets x caches x output sets); past it all are
  // released and recaptured as steps come.
  static constexpr size_t kMaxGraphs = 64;

  void EnsureCapacity(int64_t rows, int64_t batch_heads_tokens, int64_t max_slots);
  void EnsureRope(int64_t max_position);
  void CheckHostIds(const at::Tensor& tokens, const Step& s) const;
  void Embed(const Step& s);
  void StageStepInputs(const at::Tensor& tokens, const ForwardOptions& options, const Step& s);
  // The shapes of a step of n_tokens per sequence after `past` cached ones (fused and replay
  // left false: the caller decides them).
  Step StepOf(int64_t batch, int64_t n_tokens, int64_t past, int64_t max_len) const;
  // Attention-score elements one query token needs (every cached slot of every head).
  static int64_t ScoresPerToken(const Step& s);
  // The step after its inputs are staged: embedding, layers, logits; hidden states are cloned
  // into `out` (eager) or copied into hidden_ (a captured program: fixed outputs).
  void Program(KvCache& cache, const ForwardOptions& options, const Step& s, ForwardOutput* out);
  // The embedding, then every layer (`attention`(l), the MLP) between the op trace's "layer" and
  // "layers_end" marks; `keep`(index) after the embedding (0) and after each layer (l + 1).
  void RunLayers(const Step& s, const std::function<void(int64_t)>& attention,
                 const std::function<void(int64_t)>& keep);
  // Program through the StepGraph of this shape and these buffer addresses.
  void ReplayProgram(KvCache& cache, const ForwardOptions& options, const Step& s,
                     ForwardOutput& out);
  void EnsureHidden(size_t count);
  // The StepGraph of `key` (made when new; all released first when kMaxGraphs are held).
  StepGraph& GraphFor(const std::vector<int64_t>& key);
  void PrepareMask(const ForwardOptions& options, const Step& s);
  // RMSNorm and the qkv GEMM (+ bias) of layer `layer` over the step's rows, into qkv_.
  void NormQkv(int64_t layer, const Step& s);
  void AttentionLayer(int64_t layer, KvCache& cache, const Step& s);
  // RunRagged's pieces: the chunks' inputs staged as StageStepInputs does (the rows of chunk c
  // from ragged_first_[c]; kv_len and last-row indices per chunk); a layer's attention with
  // RoPE, KV write and attention per chunk; the logits of every row or of each chunk's last.
  void StageRaggedInputs(const std::vector<SeqChunk>& chunks, const Step& s);
  void RaggedAttentionLayer(int64_t layer, const std::vector<SeqChunk>& chunks, const Step& s);
  void RaggedLogits(LogitsMode mode, int64_t n_chunks, const Step& s);
  void Attend(const at::Tensor& k, const at::Tensor& v, const Step& s);
  void Mlp(int64_t layer, const Step& s);
  // The logits rows (float32 [batch or rows, vocab]); undefined for kNone.
  at::Tensor Logits(LogitsMode mode, const Step& s);
  // The final norm of `in` ([n_out, dim] rows of x_ or a gather of them) and the LM head: float32
  // logits [n_out, vocab] (a view of logits_).
  at::Tensor HeadLogits(const at::Tensor& in, int64_t n_out);

  LlamaConfig config_;
  LlamaWeights weights_;
  at::ScalarType dtype_;
  at::Device device_;
  std::vector<at::Tensor> wqkv_t_, wo_t_, w_gate_up_t_, w_down_t_;
  at::Tensor lm_head_t_;
  // Norm weights as float32 (the norms compute in float32).
  std::vector<at::Tensor> attn_norm_f_, ffn_norm_f_, q_norm_f_, k_norm_f_;
  at::Tensor final_norm_f_;
  // 0-dim constants of the model dtype (an ATen Scalar argument allocates a wrapped tensor on
  // every call): 1 / sqrt(head_dim), 0.
  at::Tensor scale_, zero_;

  // Preallocated buffers (model dtype unless noted), grown, never shrunk.
  int64_t row_capacity_ = 0, score_capacity_ = 0, mask_capacity_ = 0;
  at::Tensor ids_;        // int64 [rows] (copy of device tokens, for a captured step)
  at::Tensor positions_;  // int64 [rows] (copy of explicit positions already on the device)
  at::Tensor tree_bits_;  // int64 [rows] (copy of tree bits already on the device)
  StepStaging staging_;   // ids, slots, positions, tree bits, kv_len: one upload per step
  at::Tensor x_, xn_, qkv_, gate_up_, act_, head_in_;
  at::Tensor q_, q_chunk_, attn_out_, attn_rows_;  // [rows * q_dim] each
  at::Tensor scores_, probs_;                      // [score elements]
  at::Tensor mask_add_, neg_inf_;                  // additive mask [mask elements]; all -inf
  at::Tensor mask_bool_;                           // bool [mask elements] (device copy)
  at::Tensor logits_, logits_lowp_;                // float32 / model dtype [rows, vocab]
  at::Tensor rope_cos_, rope_sin_;                 // float [rope_capacity_, head_dim / 2]
  int64_t rope_capacity_ = 0;
  std::vector<double> inv_freq_;
  AttentionKind attention_ = AttentionKind::kFused;
  // This step's inputs on the device (views of the staged block, StageStepInputs): int64
  // token ids [rows], slots [rows], RoPE positions [rows], tree bits [batch, T], cached length
  // [batch].
  at::Tensor ids_view_, slots_view_, positions_view_, tree_bits_view_, kv_len_view_;
  at::Tensor extra_view_;      // ForwardOptions::staged_extra's device view (undefined: none)
  at::Tensor last_rows_view_;  // RunRagged: int64 [chunks], each chunk's last row
  std::vector<int64_t> ragged_first_;  // RunRagged: chunk c's first row; back() = all rows
  // Room for staged_extra in the block of a step of `rows` rows.
  static constexpr int64_t MaxStagedExtra(int64_t rows) { return 3 * rows + 2; }
  at::Tensor mask_view_;  // this step's additive mask [batch or 1, T, S]
  at::Tensor mask5_;      // mask_view_ as [batch or 1, 1, 1, T, S] (scores' layout)

  // Captured steps (kernels/step_graph.h): keyed by the step's shape, outputs and every buffer
  // address the program reads or writes; buffer_generation_ counts regrowths of the row buffers
  // and RoPE tables (each moves what a captured step reads; it never reads scores or masks).
  GraphMode graph_mode_ = GraphMode::kOff;
  GraphStats graph_stats_;
  std::map<std::vector<int64_t>, std::unique_ptr<StepGraph>> graphs_;
  int64_t buffer_generation_ = 0;
  std::vector<at::Tensor> hidden_;  // model dtype [row capacity, dim] per requested layer
};

}  // namespace specbed
