// The ATen forward path (see llama_forward_aten.h).
#include "models/llama_forward_aten.h"

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>

#include "base/error.h"
#include "kernels/decoder_op_args.h"
#include "kernels/decoder_ops.h"
#include "models/device.h"
#include "models/op_trace.h"

namespace specbed {
namespace {

// The views below are made with one as_strided call each, with the sizes, strides and offset
// that view / narrow / permute would give: those dispatch through two or three operators per
// view, most of a tiny model's step.

// The elements of a contiguous buffer from `offset` on, viewed as `shape`
// (buffer.view({-1}).narrow(0, offset, n).view(shape): contiguous strides).
at::Tensor Take(const at::Tensor& buffer, at::IntArrayRef shape, int64_t offset = 0) {
  std::array<int64_t, 8> strides;
  SPECBED_CHECK(shape.size() <= strides.size() && buffer.is_contiguous(), "AtenForward: a view of ",
                shape.size(), " dims (internal error)");
  int64_t n = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = n;
    n *= shape[i];
  }
  SPECBED_CHECK(offset + n <= buffer.numel(), "AtenForward: buffer of ", buffer.numel(),
                " elements viewed as ", shape, " from ", offset, " (internal error)");
  return buffer.as_strided(shape, at::IntArrayRef(strides.data(), shape.size()),
                           buffer.storage_offset() + offset);
}

// The fused attention's bits of causal row t among the new rows: rows 0 .. t.
int64_t CausalBits(int64_t t) {
  return static_cast<int64_t>(t == 63 ? ~uint64_t{0} : (uint64_t{2} << t) - 1);
}

// Whether a chunk's mask (bool [1, T, past + T], CPU) lets every row see the whole past.
bool SeesThePast(const at::Tensor& mask, int64_t past) {
  const int64_t n = mask.size(1), width = mask.size(2);
  const bool* m = mask.data_ptr<bool>();
  for (int64_t t = 0; t < n; ++t) {
    if (!std::all_of(m + t * width, m + t * width + past, [](bool b) { return b; })) return false;
  }
  return true;
}

// Row t's bits over the new slots of such a mask: bit i where row t sees new slot i.
int64_t MaskRowBits(const bool* row, int64_t past, int64_t n) {
  uint64_t bits = 0;
  for (int64_t i = 0; i < n; ++i) bits |= row[past + i] ? uint64_t{1} << i : 0;
  return static_cast<int64_t>(bits);
}

// x.narrow(dim, start, length).
at::Tensor Narrow(const at::Tensor& x, int64_t dim, int64_t start, int64_t length) {
  if (dim < 0) dim += x.dim();
  at::DimVector sizes(x.sizes().begin(), x.sizes().end());
  sizes[dim] = length;
  return x.as_strided(sizes, x.strides(), x.storage_offset() + start * x.stride(dim));
}

at::Tensor Rows(const at::Tensor& buffer, int64_t n) {
  return Narrow(buffer, 0, 0, n);
}

// Slots [first, first + n) of layer l's keys (kv = 0) or values (kv = 1) in the cache storage
// [n_layers, 2, batch, kv_heads, max_len, head_dim] (contiguous): [batch, kv_heads, n, head_dim]
// (cache.keys(l).narrow(2, first, n)), or with `token_major` [batch, n, kv_heads, head_dim]
// (that .permute({0, 2, 1, 3}): where the new rows are written).
at::Tensor CacheSlots(const KvCache& cache, int64_t l, int kv, int64_t first, int64_t n,
                      bool token_major) {
  const at::Tensor& storage = cache.storage();
  const int64_t b = storage.size(2), h = storage.size(3), len = storage.size(4),
                hd = storage.size(5);
  const int64_t offset = storage.storage_offset() + (l * 2 + kv) * storage.stride(1) + first * hd;
  if (token_major) {
    return storage.as_strided({b, n, h, hd}, {h * len * hd, hd, len * hd, 1}, offset);
  }
  return storage.as_strided({b, h, n, hd}, {h * len * hd, len * hd, hd, 1}, offset);
}

// ATen's out= overloads take an lvalue: a view made for the call lives through it.
at::Tensor& Out(at::Tensor&& view) {
  return view;
}

at::Tensor FloatCopy(const at::Tensor& t) {
  return t.defined() ? t.to(at::kFloat).contiguous() : t;
}

}  // namespace

// The shapes of one Run.
struct AtenForward::Step {
  int64_t batch, n_tokens, past, n_slots, rows, max_len;
  int64_t heads, kv_heads, group, head_dim;
  int64_t chunk;  // query tokens per attention chunk
  bool fused;     // attention through FusedTreeAttention (TakesTreeBits)
  bool replay;    // through a StepGraph (ReplaysSteps)
};

AtenForward::AtenForward(const LlamaConfig& config, const LlamaWeights& weights,
                         at::ScalarType dtype, at::Device device)
    : config_(config), weights_(weights), dtype_(dtype), device_(device) {
  for (const LlamaLayerWeights& layer : weights_.layers) {
    wqkv_t_.push_back(layer.wqkv.t());
    wo_t_.push_back(layer.wo.t());
    w_gate_up_t_.push_back(layer.w_gate_up.t());
    w_down_t_.push_back(layer.w_down.t());
    attn_norm_f_.push_back(FloatCopy(layer.attn_norm));
    ffn_norm_f_.push_back(FloatCopy(layer.ffn_norm));
    q_norm_f_.push_back(FloatCopy(layer.q_norm));
    k_norm_f_.push_back(FloatCopy(layer.k_norm));
  }
  final_norm_f_ = FloatCopy(weights_.final_norm);
  scale_ = at::full({}, 1.0 / std::sqrt(static_cast<double>(config_.head_dim)),
                    at::TensorOptions(dtype).device(device_));
  zero_ = at::zeros({}, at::TensorOptions(dtype).device(device_));
  lm_head_t_ = weights_.lm_head.t();
  inv_freq_ = RopeInverseFrequencies(config_);
  graph_mode_ = ResolveGraphMode();
  attention_ = ResolveAttentionKind(device_, graph_mode_);
  // Captured steps: rows for the largest bucket from the start, so no graph is recaptured when
  // a wider step first comes (a regrowth moves every buffer a captured step reads).
  const int64_t rows = graph_mode_ == GraphMode::kOn ? kMaxGraphTokens : 16;
  EnsureCapacity(rows, 16 * config_.n_heads * 256, 256);
  EnsureRope(256);
}

void AtenForward::EnsureCapacity(int64_t rows, int64_t score_elems, int64_t mask_elems) {
  const auto opts = at::TensorOptions(dtype_).device(device_);
  if (rows > row_capacity_) {
    const int64_t cap = std::max(rows, 2 * row_capacity_);
    const LlamaConfig& c = config_;
    ids_ = at::empty({cap}, at::TensorOptions(at::kLong).device(device_));
    positions_ = at::empty({cap}, at::TensorOptions(at::kLong).device(device_));
    tree_bits_ = at::empty({cap}, at::TensorOptions(at::kLong).device(device_));
    staging_.Reserve(4 * cap + cap + MaxStagedExtra(cap), device_);
    hidden_.clear();
    x_ = at::empty({cap, c.dim}, opts);
    xn_ = at::empty({cap, c.dim}, opts);
    qkv_ = at::empty({cap, c.qkv_dim()}, opts);
    gate_up_ = at::empty({cap, 2 * c.hidden_dim}, opts);
    act_ = at::empty({cap, c.hidden_dim}, opts);
    head_in_ = at::empty({cap, c.dim}, opts);
    q_ = at::empty({cap * c.q_dim()}, opts);
    q_chunk_ = at::empty({cap * c.q_dim()}, opts);
    attn_out_ = at::empty({cap * c.q_dim()}, opts);
    attn_rows_ = at::empty({cap, c.q_dim()}, opts);
    logits_ = at::empty({cap, c.vocab_size}, at::TensorOptions(at::kFloat).device(device_));
    if (dtype_ != at::kFloat) logits_lowp_ = at::empty({cap, c.vocab_size}, opts);
    row_capacity_ = cap;
    ++buffer_generation_;
  }
  if (score_elems > score_capacity_) {
    score_capacity_ = std::max(score_elems, 2 * score_capacity_);
    scores_ = at::empty({score_capacity_}, opts);
    probs_ = at::empty({score_capacity_}, opts);
  }
  if (mask_elems > mask_capacity_) {
    mask_capacity_ = std::max(mask_elems, 2 * mask_capacity_);
    mask_add_ = at::empty({mask_capacity_}, opts);
    neg_inf_ = at::full({mask_capacity_}, -std::numeric_limits<float>::infinity(), opts);
    mask_bool_ = at::empty({mask_capacity_}, at::TensorOptions(at::kBool).device(device_));
  }
}

void FillRopeTables(const std::vector<double>& inv_freq, int64_t n_positions, at::Tensor& cos,
                    at::Tensor& sin) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  cos = at::empty({n_positions, half}, at::kFloat);
  sin = at::empty({n_positions, half}, at::kFloat);
  float* c = cos.data_ptr<float>();
  float* s = sin.data_ptr<float>();
  for (int64_t p = 0; p < n_positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq[i];
      c[p * half + i] = static_cast<float>(std::cos(angle));
      s[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void AtenForward::EnsureRope(int64_t max_position) {
  if (max_position <= rope_capacity_) return;
  const int64_t cap = std::max(max_position, 2 * rope_capacity_);
  at::Tensor cos, sin;
  FillRopeTables(inv_freq_, cap, cos, sin);  // the row kernels' table, bit for bit
  rope_cos_ = cos.to(device_);
  rope_sin_ = sin.to(device_);
  rope_capacity_ = cap;
  ++buffer_generation_;
}

void AtenForward::EnsureHidden(size_t count) {
  while (hidden_.size() < count) {
    hidden_.push_back(
        at::empty({row_capacity_, config_.dim}, at::TensorOptions(dtype_).device(device_)));
  }
}

// Host ids are checked here, as the row kernels do.
void AtenForward::CheckHostIds(const at::Tensor& tokens, const Step& s) const {
  if (!tokens.device().is_cpu()) return;
  const at::Tensor ids = tokens.reshape({s.rows}).contiguous();
  const int64_t* p = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < s.rows; ++i) {
    SPECBED_CHECK(p[i] >= 0 && p[i] < config_.vocab_size, "Forward: token id ", p[i],
                  " outside the vocabulary [0, ", config_.vocab_size, ")");
  }
}

void AtenForward::Embed(const Step& s) {
  at::index_select_out(Out(Rows(x_, s.rows)), weights_.tok_embeddings, 0, ids_view_);
}

// The step's small inputs in one host block and one copy to the device (kernels/step_staging.h),
// laid out [ids (rows) | slots (rows) | positions (rows) | tree bits (rows) | kv_len (batch) |
// the caller's staged_extra]:
// the host's token ids; slot past + t of each sequence's new row t; the positions (explicit ones
// from the host, else the slots); the fused attention's bits (the host's tree bits, else causal);
// the cached length. Inputs already on the device are read in place, or, for a captured step
// (fixed addresses), copied into this object's buffers (one op each).
void AtenForward::StageStepInputs(const at::Tensor& tokens, const ForwardOptions& options,
                                  const Step& s) {
  const int64_t rows = s.rows;
  const int64_t extra = options.staged_extra.defined() ? options.staged_extra.numel() : 0;
  SPECBED_CHECK(extra <= MaxStagedExtra(rows) && (extra == 0 || options.staged_extra.is_cpu()),
                "Forward: staged_extra must be int64 on the CPU with at most ",
                MaxStagedExtra(rows), " values for ", rows, " rows, got ", extra);
  const int64_t n = 4 * rows + s.batch + extra;
  int64_t* h = staging_.Host(n);
  int64_t *ids = h, *slot = h + rows, *pos = h + 2 * rows, *bits = h + 3 * rows,
          *kv_len = h + 4 * rows;
  const bool host_ids = tokens.device().is_cpu();
  if (host_ids) {
    const at::Tensor given_ids = tokens.reshape({rows}).contiguous();
    std::copy(given_ids.data_ptr<int64_t>(), given_ids.data_ptr<int64_t>() + rows, ids);
  }
  for (int64_t r = 0; r < rows; ++r) slot[r] = s.past + r % s.n_tokens;
  const bool host_positions = options.positions.defined() && options.positions.device().is_cpu();
  const at::Tensor given_positions = host_positions ? options.positions.contiguous() : at::Tensor();
  const int64_t* given = host_positions ? given_positions.data_ptr<int64_t>() : slot;
  std::copy(given, given + rows, pos);
  const bool host_bits = options.tree_bits.defined() && options.tree_bits.device().is_cpu();
  const at::Tensor given_bits = host_bits ? options.tree_bits.contiguous() : at::Tensor();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = r % s.n_tokens;
    bits[r] = host_bits ? given_bits.data_ptr<int64_t>()[r] : CausalBits(t);
  }
  std::fill(kv_len, kv_len + s.batch, s.past);
  if (extra > 0) {
    const at::Tensor given_extra = options.staged_extra.to(at::kLong).contiguous();
    std::copy(given_extra.data_ptr<int64_t>(), given_extra.data_ptr<int64_t>() + extra,
              kv_len + s.batch);
  }
  const at::Tensor block = staging_.Upload(n);
  extra_view_ = extra > 0 ? Narrow(block, 0, 4 * rows + s.batch, extra) : at::Tensor();
  ids_view_ = Narrow(block, 0, 0, rows);
  slots_view_ = Narrow(block, 0, rows, rows);
  positions_view_ = Narrow(block, 0, 2 * rows, rows);
  tree_bits_view_ = Narrow(block, 0, 3 * rows, rows).view({s.batch, s.n_tokens});
  kv_len_view_ = Narrow(block, 0, 4 * rows, s.batch);
  if (!host_ids) {
    ids_view_ = tokens.reshape({rows});
    if (s.replay) ids_view_ = Rows(ids_, rows).copy_(ids_view_);
  }
  if (options.positions.defined() && !host_positions) {
    positions_view_ = Rows(positions_, rows).copy_(options.positions.reshape({rows}));
  }
  if (options.tree_bits.defined() && !host_bits) {
    tree_bits_view_ = Take(tree_bits_, {s.batch, s.n_tokens}).copy_(options.tree_bits);
  }
}

bool AtenForward::ReplaysSteps(int64_t n_tokens) const {
  return graph_mode_ == GraphMode::kOn && TakesTreeBits(n_tokens) &&
         StepBucket(n_tokens) == n_tokens;
}

bool AtenForward::TakesTreeBits(int64_t n_tokens) const {
  return attention_ == AttentionKind::kFused && n_tokens <= kTreeAttentionMaxTokens &&
         config_.head_dim <= 256;
}

void AtenForward::PrepareMask(const ForwardOptions& options, const Step& s) {
  if (s.fused) return;  // FusedTreeAttention reads the staged kv_len and tree bits
  SPECBED_CHECK(!options.tree_bits.defined(),
                "AtenForward: tree_bits without the fused attention (internal error)");
  if (!options.mask.defined()) {  // causal: -inf where slot s > past + t
    mask_view_ = Take(mask_add_, {1, s.n_tokens, s.n_slots});
    at::triu_out(mask_view_, Take(neg_inf_, {1, s.n_tokens, s.n_slots}), s.past + 1);
    mask5_ = Take(mask_add_, {1, 1, 1, s.n_tokens, s.n_slots});
    return;
  }
  at::Tensor allowed = options.mask;
  if (!SameDevice(allowed.device(), device_) || !allowed.is_contiguous()) {
    allowed = Take(mask_bool_, allowed.sizes()).copy_(allowed);
  }
  mask_view_ = Take(mask_add_, {s.batch, s.n_tokens, s.n_slots});
  mask_view_.copy_(Take(neg_inf_, {s.batch, s.n_tokens, s.n_slots}));
  mask_view_.masked_fill_(allowed, zero_);
  mask5_ = Take(mask_add_, {s.batch, 1, 1, s.n_tokens, s.n_slots});
}

void AtenForward::NormQkv(int64_t l, const Step& s) {
  const LlamaLayerWeights& w = weights_.layers[l];
  at::Tensor x = Rows(x_, s.rows), xn = Rows(xn_, s.rows), qkv = Rows(qkv_, s.rows);
  FusedRmsNorm(x, attn_norm_f_[l], config_.norm_eps, xn);
  if (w.bqkv.defined()) {
    at::addmm_out(qkv, w.bqkv, xn, wqkv_t_[l]);
  } else {
    at::mm_out(qkv, xn, wqkv_t_[l]);
  }
}

void AtenForward::AttentionLayer(int64_t l, KvCache& cache, const Step& s) {
  const int64_t hd = s.head_dim;
  at::Tensor x = Rows(x_, s.rows), qkv = Rows(qkv_, s.rows);
  NormQkv(l, s);
  // q (RoPE, Qwen3's q norm) into [batch, kv_heads, group, T, hd] = [batch, heads, T, hd] (head
  // h = kv_head * group + g); k (RoPE, k norm) and v into the cache at the slots.
  FusedRopeKvWrite(qkv, positions_view_, slots_view_, rope_cos_, rope_sin_, q_norm_f_[l],
                   k_norm_f_[l], config_.norm_eps, config_.rope_interleaved,
                   Take(q_, {s.batch, s.heads, s.n_tokens, hd}), cache.storage(), l);
  if (s.fused) {
    FusedTreeAttention(Take(q_, {s.batch, s.heads, s.n_tokens, hd}), cache.storage(), l,
                       kv_len_view_, tree_bits_view_, 1.0 / std::sqrt(static_cast<double>(hd)),
                       Take(attn_rows_, {s.batch, s.n_tokens, s.heads, hd}));
  } else {
    Attend(CacheSlots(cache, l, 0, 0, s.n_slots, /*token_major=*/false),
           CacheSlots(cache, l, 1, 0, s.n_slots, /*token_major=*/false), s);
  }
  x.addmm_(Rows(attn_rows_, s.rows), wo_t_[l]);
}

// attn_rows_[b, t, h, :] = softmax(q k^T / sqrt(hd) + mask) v; k, v: [B, KVH, S, hd] views.
void AtenForward::Attend(const at::Tensor& k, const at::Tensor& v, const Step& s) {
  const int64_t hd = s.head_dim, bk = s.batch * s.kv_heads, S = s.n_slots;
  at::Tensor q5 = Take(q_, {s.batch, s.kv_heads, s.group, s.n_tokens, hd});
  at::Tensor rows5 = Take(attn_rows_, {s.batch, s.n_tokens, s.kv_heads, s.group, hd});
  if (attention_ == AttentionKind::kSdpa) {
    at::Tensor o = at::scaled_dot_product_attention(
        q5.view({s.batch, s.heads, s.n_tokens, hd}), k, v, mask_view_.unsqueeze(1),
        /*dropout_p=*/0.0, /*is_causal=*/false, /*scale=*/std::nullopt, /*enable_gqa=*/true);
    rows5.view({s.batch, s.n_tokens, s.heads, hd}).copy_(o.transpose(1, 2));
    return;
  }
  const at::Tensor k3 = k.reshape({bk, S, hd}).transpose(1, 2);  // a view: S, hd are dense
  const at::Tensor v3 = v.reshape({bk, S, hd});
  for (int64_t t0 = 0; t0 < s.n_tokens; t0 += s.chunk) {
    const int64_t tc = std::min(s.chunk, s.n_tokens - t0);
    at::Tensor qc = q5;
    if (tc != s.n_tokens) {
      qc = Take(q_chunk_, {s.batch, s.kv_heads, s.group, tc, hd}).copy_(q5.narrow(3, t0, tc));
    }
    at::Tensor scores = Take(scores_, {bk, s.group * tc, S});
    at::bmm_out(scores, qc.view({bk, s.group * tc, hd}), k3);
    scores.mul_(scale_);
    Take(scores_, {s.batch, s.kv_heads, s.group, tc, S})
        .add_(tc == s.n_tokens ? mask5_ : Narrow(mask_view_, 1, t0, tc).unsqueeze(1).unsqueeze(1));
    at::Tensor probs = Take(probs_, {bk, s.group * tc, S});
    at::_softmax_out(probs, scores, -1, /*half_to_float=*/false);
    probs.nan_to_num_(0.0);  // a fully masked row attends to nothing: zeros, as the row kernels
    at::Tensor out = Take(attn_out_, {bk, s.group * tc, hd});
    at::bmm_out(out, probs, v3);
    rows5.narrow(1, t0, tc).copy_(
        out.view({s.batch, s.kv_heads, s.group, tc, hd}).permute({0, 3, 1, 2, 4}));
  }
}

void AtenForward::Mlp(int64_t l, const Step& s) {
  at::Tensor x = Rows(x_, s.rows), xn = Rows(xn_, s.rows), gate_up = Rows(gate_up_, s.rows),
             act = Rows(act_, s.rows);
  FusedRmsNorm(x, ffn_norm_f_[l], config_.norm_eps, xn);
  at::mm_out(gate_up, xn, w_gate_up_t_[l]);
  FusedSiluMul(gate_up, act);
  x.addmm_(act, w_down_t_[l]);
}

at::Tensor AtenForward::Logits(LogitsMode mode, const Step& s) {
  if (mode == LogitsMode::kNone) return at::Tensor();
  const bool all = mode == LogitsMode::kAll;
  const int64_t n_out = all ? s.rows : s.batch;
  at::Tensor x = Rows(x_, s.rows);
  // The last token of each sequence: x.view({batch, T, dim}).select(1, T - 1).
  const at::Tensor last = all ? x
                              : x.as_strided({s.batch, config_.dim}, {s.n_tokens * config_.dim, 1},
                                             x.storage_offset() + (s.n_tokens - 1) * config_.dim);
  return HeadLogits(last, n_out);
}

at::Tensor AtenForward::HeadLogits(const at::Tensor& in, int64_t n_out) {
  at::Tensor head_in = Rows(head_in_, n_out);
  FusedRmsNorm(in, final_norm_f_, config_.norm_eps, head_in);
  at::Tensor logits = Rows(logits_, n_out);
  if (dtype_ == at::kFloat) {
    at::mm_out(logits, head_in, lm_head_t_);
  } else {
    at::mm_out(Out(Rows(logits_lowp_, n_out)), head_in, lm_head_t_);
    logits.copy_(Rows(logits_lowp_, n_out));
  }
  return logits;
}

AttentionKind ResolveAttentionKind(const at::Device& device, GraphMode graphs) {
  const char* env = std::getenv("SPECBED_ATTENTION");
  const std::string name = env == nullptr ? "" : env;
  const bool graphed = graphs == GraphMode::kOn;
  if (name.empty()) {
    return device.is_cuda() && !graphed ? AttentionKind::kSdpa : AttentionKind::kFused;
  }
  if (name == "fused") return AttentionKind::kFused;
  SPECBED_CHECK(!graphed || (name != "bmm" && name != "sdpa"), "SPECBED_ATTENTION=", name,
                " with SPECBED_GRAPHS=on: captured steps need the fused attention (set ",
                "SPECBED_ATTENTION=fused or leave it unset)");
  if (name == "bmm") return AttentionKind::kBmm;
  if (name == "sdpa") return device.is_cuda() ? AttentionKind::kSdpa : AttentionKind::kBmm;
  throw Error(StrCat("SPECBED_ATTENTION=", name, ": expected fused, sdpa or bmm"));
}

void AtenForward::Program(KvCache& cache, const ForwardOptions& options, const Step& s,
                          ForwardOutput* out) {
  auto keep_hidden = [&](int64_t index) {
    for (size_t i = 0; i < options.hidden_layers.size(); ++i) {
      if (options.hidden_layers[i] != index) continue;
      if (s.replay) {
        Rows(hidden_[i], s.rows).copy_(Rows(x_, s.rows));
      } else {
        out->hidden.resize(options.hidden_layers.size());
        out->hidden[i] = Rows(x_, s.rows).clone().view({s.batch, s.n_tokens, config_.dim});
      }
    }
  };
  RunLayers(
      s, [&](int64_t l) { AttentionLayer(l, cache, s); }, keep_hidden);
  Logits(options.logits, s);
}

void AtenForward::RunLayers(const Step& s, const std::function<void(int64_t)>& attention,
                            const std::function<void(int64_t)>& keep) {
  Embed(s);
  keep(0);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    MarkOpTrace("layer");
    attention(l);
    Mlp(l, s);
    keep(l + 1);
  }
  MarkOpTrace("layers_end");
}

StepGraph& AtenForward::GraphFor(const std::vector<int64_t>& key) {
  auto found = graphs_.find(key);
  if (found != graphs_.end()) return *found->second;
  if (graphs_.size() >= kMaxGraphs) {  // release them all; steps recapture as they come
    graph_stats_.dropped += static_cast<int64_t>(graphs_.size());
    graphs_.clear();
  }
  return *(graphs_[key] = std::make_unique<StepGraph>());
}

// The key holds everything the captured ops bake in: the shapes, the outputs asked for, and the
// addresses of the cache and of each input view (a staged block view, or a buffer a device input
// was copied into); this object's own buffers move only when they grow (buffer_generation_).
void AtenForward::ReplayProgram(KvCache& cache, const ForwardOptions& options, const Step& s,
                                ForwardOutput& out) {
  EnsureHidden(options.hidden_layers.size());
  std::vector<int64_t> key = {s.batch, s.n_tokens, static_cast<int64_t>(options.logits),
                              buffer_generation_};
  for (const at::Tensor* t : std::initializer_list<const at::Tensor*>{
           &cache.storage(), &ids_view_, &slots_view_, &positions_view_, &tree_bits_view_,
           &kv_len_view_}) {
    key.push_back(reinterpret_cast<int64_t>(t->data_ptr()));
  }
  key.insert(key.end(), options.hidden_layers.begin(), options.hidden_layers.end());
  GraphFor(key).Run(
      device_, [&] { Program(cache, options, s, nullptr); },
      s.n_tokens == 1 ? "a decode step" : "a verify step", graph_stats_);
  out.hidden.clear();
  for (size_t i = 0; i < options.hidden_layers.size(); ++i) {
    out.hidden.push_back(Rows(hidden_[i], s.rows).clone().view({s.batch, s.n_tokens, config_.dim}));
  }
}

int64_t AtenForward::ScoresPerToken(const Step& s) {
  return s.batch * s.heads * s.max_len;
}

AtenForward::Step AtenForward::StepOf(int64_t batch, int64_t n_tokens, int64_t past,
                                      int64_t max_len) const {
  Step s;
  s.batch = batch;
  s.n_tokens = n_tokens;
  s.past = past;
  s.n_slots = past + n_tokens;
  s.rows = batch * n_tokens;
  s.max_len = max_len;
  s.heads = config_.n_heads;
  s.kv_heads = config_.n_kv_heads;
  s.group = s.heads / s.kv_heads;
  s.head_dim = config_.head_dim;
  // Scores for up to the cache's max_len slots, so a growing context does not regrow them.
  s.chunk = std::max<int64_t>(1, std::min(n_tokens, kAttentionScoreBudget / ScoresPerToken(s)));
  s.fused = s.replay = false;
  return s;
}

// One upload holds the inner steps' [slot | position | tree bits | cached length] (4 values
// each); the program points the step's input views at step i's four before running it, so the
// captured chain reads each step's inputs from its own fixed addresses.
void AtenForward::RunChain(const at::Tensor& first, KvCache& cache, int64_t n,
                           const at::Tensor& ids, const ChainPick& pick,
                           const std::vector<int64_t>& pick_key) {
  SPECBED_CHECK(ChainsSteps(n) && cache.batch() == 1, "RunChain: a chain of ", n,
                " tokens needs captured steps, batch 1 and n in [2, ", kMaxGraphTokens + 1, "]");
  SPECBED_CHECK(
      ids.numel() >= n && ids.scalar_type() == at::kLong && SameDevice(ids.device(), device_),
      "RunChain: ids must be int64 [>= ", n, "] on ", device_.str());
  std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd(std::in_place);
  const int64_t past = cache.length(), steps = n - 1;
  SPECBED_CHECK(past + steps <= cache.max_len(), "context length ", past + steps,
                " exceeds the KV cache (", cache.max_len(), " positions)");
  Step s = StepOf(1, 1, past, cache.max_len());
  s.fused = s.replay = true;
  EnsureCapacity(s.rows, s.chunk * ScoresPerToken(s), s.rows * s.max_len);
  EnsureRope(s.max_len);
  // Checked after the buffers are sized: a regrowth would have moved the logits `first` views.
  SPECBED_CHECK(first.defined() && first.data_ptr() == logits_.data_ptr(),
                "RunChain: the first logits must be the last Run's (LogitsMode::kLast) on this "
                "cache");
  int64_t* h = staging_.Host(4 * steps);
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t values[4] = {past + i, past + i, 1, past + i};  // slot, position, bits, length
    std::copy(values, values + 4, h + 4 * i);
  }
  const at::Tensor block = staging_.Upload(4 * steps);
  const at::Tensor logits = Rows(logits_, 1);
  ForwardOptions options;  // the last (only) row's logits, no hidden states
  auto program = [&] {
    for (int64_t i = 0; i < n; ++i) {
      pick(i, logits, Narrow(ids, 0, i, 1));
      if (i + 1 == n) break;
      s.past = past + i;
      s.n_slots = s.past + 1;
      ids_view_ = Narrow(ids, 0, i, 1);
      slots_view_ = Narrow(block, 0, 4 * i, 1);
      positions_view_ = Narrow(block, 0, 4 * i + 1, 1);
      tree_bits_view_ = Narrow(block, 0, 4 * i + 2, 1).view({1, 1});
      kv_len_view_ = Narrow(block, 0, 4 * i + 3, 1);
      Program(cache, options, s, nullptr);
    }
  };
  std::vector<int64_t> key = {-1,
                              n,
                              buffer_generation_,
                              reinterpret_cast<int64_t>(cache.storage().data_ptr()),
                              reinterpret_cast<int64_t>(block.data_ptr()),
                              reinterpret_cast<int64_t>(ids.data_ptr())};
  key.insert(key.end(), pick_key.begin(), pick_key.end());
  StepGraph& graph = GraphFor(key);
  graph.Run(device_, program, "a draft chain", graph_stats_);
}

ForwardOutput AtenForward::Run(const at::Tensor& tokens, KvCache& cache,
                               const ForwardOptions& options) {
  // Every op below reads the weights and writes this object's buffers and the cache through out=
  // and in-place ops, which autograd cannot differentiate anyway: dispatch below the autograd and
  // view-tracking layers, whose bookkeeping (view metadata per view, version bumps) is most of a
  // tiny model's step. Unlike InferenceMode this makes ordinary tensors (the hidden-state clones),
  // and the returned logits view is made after the guard, as an ordinary view of its buffer.
  std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd(std::in_place);
  Step s = StepOf(tokens.size(0), tokens.size(1), cache.length(), cache.max_len());
  s.fused = TakesTreeBits(s.n_tokens) && !options.mask.defined();
  s.replay = s.fused && ReplaysSteps(s.n_tokens);
  EnsureCapacity(s.rows, s.chunk * ScoresPerToken(s), s.rows * s.max_len);
  int64_t max_position = s.n_slots;
  if (options.positions.defined() && options.positions.device().is_cpu()) {
    const at::Tensor pos = options.positions.contiguous();
    const int64_t* p = pos.data_ptr<int64_t>();
    for (int64_t i = 0; i < s.rows; ++i) {
      SPECBED_CHECK(p[i] >= 0, "Forward: negative position");
      max_position = std::max(max_position, p[i] + 1);
    }
  }
  EnsureRope(std::max(max_position, s.max_len));

  CheckHostIds(tokens, s);
  StageStepInputs(tokens, options, s);
  PrepareMask(options, s);
  ForwardOutput out;
  out.staged_extra = extra_view_;
  if (s.replay) {
    ReplayProgram(cache, options, s, out);
  } else {
    Program(cache, options, s, &out);
  }
  const at::Tensor logits =
      options.logits == LogitsMode::kNone
          ? at::Tensor()
          : Rows(logits_, options.logits == LogitsMode::kAll ? s.rows : s.batch);
  below_autograd.reset();
  if (logits.defined()) {
    const int64_t per_sequence = options.logits == LogitsMode::kAll ? s.n_tokens : 1;
    out.logits = logits.view({s.batch, per_sequence, config_.vocab_size});
  }
  return out;
}

bool AtenForward::BatchesRagged(const std::vector<SeqChunk>& chunks) const {
  return std::all_of(chunks.begin(), chunks.end(), [&](const SeqChunk& ch) {
    return TakesTreeBits(ch.tokens.size(1)) &&
           (!ch.mask.defined() || SeesThePast(ch.mask, ch.cache->length()));
  });
}

// The block: [ids (rows) | slots (rows) | positions (rows) | tree bits (rows) | kv_len (chunks) |
// last row (chunks)], each chunk's rows from ragged_first_[c] (its slots past + t, its
// positions given or past + t, its bits from its mask or causal).
void AtenForward::StageRaggedInputs(const std::vector<SeqChunk>& chunks, const Step& s) {
  const int64_t rows = s.rows, n_chunks = static_cast<int64_t>(chunks.size());
  const int64_t n_values = 4 * rows + 2 * n_chunks;
  int64_t* h = staging_.Host(n_values);
  int64_t *ids = h, *slot = h + rows, *pos = h + 2 * rows, *bits = h + 3 * rows,
          *kv_len = h + 4 * rows, *last = kv_len + n_chunks;
  for (int64_t c = 0; c < n_chunks; ++c) {
    const SeqChunk& ch = chunks[c];
    const int64_t r0 = ragged_first_[c], n = ch.tokens.size(1), past = ch.cache->length();
    const int64_t* tokens = ch.tokens.data_ptr<int64_t>();
    const int64_t* given = ch.positions.defined() ? ch.positions.data_ptr<int64_t>() : nullptr;
    const bool* mask = ch.mask.defined() ? ch.mask.data_ptr<bool>() : nullptr;
    for (int64_t t = 0; t < n; ++t) {
      SPECBED_CHECK(tokens[t] >= 0 && tokens[t] < config_.vocab_size, "ForwardRagged: chunk ", c,
                    ": token id ", tokens[t], " outside the vocabulary [0, ", config_.vocab_size,
                    ")");
      ids[r0 + t] = tokens[t];
      slot[r0 + t] = past + t;
      pos[r0 + t] = given != nullptr ? given[t] : past + t;
      bits[r0 + t] = mask != nullptr ? MaskRowBits(mask + t * (past + n), past, n) : CausalBits(t);
    }
    kv_len[c] = past;
    last[c] = r0 + n - 1;
  }
  const at::Tensor block = staging_.Upload(n_values);
  ids_view_ = Narrow(block, 0, 0, rows);
  slots_view_ = Narrow(block, 0, rows, rows);
  positions_view_ = Narrow(block, 0, 2 * rows, rows);
  tree_bits_view_ = Narrow(block, 0, 3 * rows, rows);
  kv_len_view_ = Narrow(block, 0, 4 * rows, n_chunks);
  last_rows_view_ = Narrow(block, 0, 4 * rows + n_chunks, n_chunks);
}

void AtenForward::RaggedAttentionLayer(int64_t l, const std::vector<SeqChunk>& chunks,
                                       const Step& s) {
  NormQkv(l, s);
  const at::Tensor qkv = Rows(qkv_, s.rows);
  const int64_t hd = s.head_dim, q_dim = config_.q_dim();
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int64_t r0 = ragged_first_[c], n = ragged_first_[c + 1] - r0;
    const at::Tensor& cache = chunks[c].cache->storage();
    const at::Tensor q = Take(q_, {1, s.heads, n, hd}, r0 * q_dim);
    FusedRopeKvWrite(Narrow(qkv, 0, r0, n), Narrow(positions_view_, 0, r0, n),
                     Narrow(slots_view_, 0, r0, n), rope_cos_, rope_sin_, q_norm_f_[l],
                     k_norm_f_[l], config_.norm_eps, config_.rope_interleaved, q, cache, l);
    const at::Tensor bits = Narrow(tree_bits_view_, 0, r0, n);
    FusedTreeAttention(q, cache, l, Narrow(kv_len_view_, 0, static_cast<int64_t>(c), 1),
                       bits.as_strided({1, n}, {n, 1}), scale,
                       Take(attn_rows_, {1, n, s.heads, hd}, r0 * q_dim));
  }
  Rows(x_, s.rows).addmm_(Rows(attn_rows_, s.rows), wo_t_[l]);
}

void AtenForward::RaggedLogits(LogitsMode mode, int64_t n_chunks, const Step& s) {
  if (mode != LogitsMode::kLast) {  // every row, or none
    Logits(mode, s);
    return;
  }
  at::Tensor last = Rows(xn_, n_chunks);  // free after the last layer
  at::index_select_out(last, Rows(x_, s.rows), 0, last_rows_view_);
  HeadLogits(last, n_chunks);
}

RaggedOutput AtenForward::RunRagged(const std::vector<SeqChunk>& chunks,
                                    const RaggedOptions& options) {
  std::optional<at::AutoDispatchBelowADInplaceOrView> below_autograd(std::in_place);
  const int64_t n_chunks = static_cast<int64_t>(chunks.size());
  ragged_first_.assign(1, 0);
  int64_t max_position = 1, max_len = 1;
  for (const SeqChunk& ch : chunks) {
    const int64_t n = ch.tokens.size(1);
    ragged_first_.push_back(ragged_first_.back() + n);
    max_len = std::max(max_len, ch.cache->max_len());
    max_position = std::max(max_position, ch.cache->length() + n);
    for (int64_t t = 0; ch.positions.defined() && t < n; ++t) {
      const int64_t p = ch.positions.data_ptr<int64_t>()[t];
      SPECBED_CHECK(p >= 0, "ForwardRagged: negative position");
      max_position = std::max(max_position, p + 1);
    }
  }
  // One sequence of all the rows: the norms, GEMMs, embedding and logits read s.rows only.
  Step s = StepOf(1, ragged_first_.back(), 0, max_len);
  s.fused = true;
  EnsureCapacity(s.rows, 0, 0);
  EnsureRope(std::max(max_position, max_len));
  StageRaggedInputs(chunks, s);
  std::vector<at::Tensor> kept(options.hidden_layers.size());
  auto keep_hidden = [&](int64_t index) {
    for (size_t i = 0; i < kept.size(); ++i) {
      if (options.hidden_layers[i] == index) kept[i] = Rows(x_, s.rows).clone();
    }
  };
  RunLayers(
      s, [&](int64_t l) { RaggedAttentionLayer(l, chunks, s); }, keep_hidden);
  RaggedLogits(options.logits, n_chunks, s);
  below_autograd.reset();  // the views returned below are ordinary views of their buffers
  const bool all = options.logits == LogitsMode::kAll;
  const at::Tensor logits =
      options.logits == LogitsMode::kNone ? at::Tensor() : Rows(logits_, all ? s.rows : n_chunks);
  RaggedOutput out;
  out.hidden.resize(chunks.size());
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t r0 = ragged_first_[c], n = ragged_first_[c + 1] - r0;
    if (logits.defined()) {
      out.logits.push_back(all ? logits.narrow(0, r0, n) : logits.narrow(0, c, 1));
    }
    for (const at::Tensor& h : kept) out.hidden[c].push_back(h.narrow(0, r0, n).view({1, n, -1}));
  }
  return out;
}

}  // namespace specbed
