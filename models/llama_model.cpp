// Llama-family decoder forward: path selection, argument checks, and the CPU row kernels (see
// llama_model.h for the design; the ATen path is models/llama_forward_aten.cpp).
#include "models/llama_model.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "base/enum_names.h"
#include "base/error.h"
#include "models/device.h"
#include "models/gemv.h"
#include "models/half_bits.h"
#include "models/llama_forward_aten.h"
#include "models/weight_arena.h"

namespace specbed {
namespace {

// ---------------------------------------------------------------------------------------------
// Row kernels, templated on the storage type (float, c10::BFloat16 or c10::Half); math is
// float32.

template <typename T>
inline float Load(const T* p, int64_t i) {
  return static_cast<float>(p[i]);
}

// float16: a conversion the `omp simd` loops vectorize (attention's K and V rows above all; with
// c10's scalar one attention was about 40% of a stories260K-twin fp16 decode step).
inline float Load(const c10::Half* p, int64_t i) {
  return HalfBitsToFloat(p[i].x);
}

// out[:] = x[:] / rms(x[:]) * w for one row of `dim`. Not inlined into the row loop, so every
// row runs the same compiled code whatever the row count (with the loop over rows visible, the
// compiler vectorized across rows: the last row of a 3-row norm differed from the same row
// normed alone by ~4e-6 in the logits, which broke batch-1 bit-identity of ragged steps).
template <typename T>
__attribute__((noinline)) void RmsNormRow(const T* row, const T* w, T* o, int64_t dim, float eps) {
  float ss = 0.f;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < dim; ++i) ss += Load(row, i) * Load(row, i);
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
  for (int64_t i = 0; i < dim; ++i) o[i] = static_cast<T>(Load(row, i) * inv * Load(w, i));
}

// out[n, :] = x[n, :] / rms(x[n, :]) * w, for rows [0, n_rows).
template <typename T>
void RmsNormRows(const T* x, const T* w, T* out, int64_t n_rows, int64_t dim, float eps) {
  for (int64_t n = 0; n < n_rows; ++n) RmsNormRow(x + n * dim, w, out + n * dim, dim, eps);
}

// In-place per-head RMSNorm of `n_heads` vectors of `head_dim` starting at v (Qwen3 q/k norm).
template <typename T>
void HeadNorm(T* v, const T* w, int64_t n_heads, int64_t head_dim, float eps) {
  for (int64_t h = 0; h < n_heads; ++h) {
    T* row = v + h * head_dim;
    float ss = 0.f;
    for (int64_t i = 0; i < head_dim; ++i) ss += Load(row, i) * Load(row, i);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(head_dim) + eps);
    for (int64_t i = 0; i < head_dim; ++i) row[i] = static_cast<T>(Load(row, i) * inv * Load(w, i));
  }
}

// Rotates `n_heads` vectors of `head_dim` from src into dst (may alias) at one position.
template <typename T>
void Rope(const T* src, T* dst, int64_t n_heads, int64_t head_dim, const float* cos,
          const float* sin, bool interleaved) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    const T* s = src + h * head_dim;
    T* d = dst + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t i0 = interleaved ? 2 * i : i;
      const int64_t i1 = interleaved ? 2 * i + 1 : i + half;
      const float x0 = Load(s, i0), x1 = Load(s, i1);
      d[i0] = static_cast<T>(x0 * cos[i] - x1 * sin[i]);
      d[i1] = static_cast<T>(x1 * cos[i] + x0 * sin[i]);
    }
  }
}

template <typename T>
inline float Dot(const T* a, const T* b, int64_t n) {
  float acc = 0.f;
#pragma omp simd reduction(+ : acc)
  for (int64_t i = 0; i < n; ++i) acc += Load(a, i) * Load(b, i);
  return acc;
}

}  // namespace

// One sequence's rows in a row-kernel step: rows [row, row + n_tokens) of the step's buffers,
// written at slots [past, past + n_tokens) of batch row `b` of `cache`.
struct RowChunk {
  const KvCache* cache;
  int64_t b, row, n_tokens, past;
  const int64_t* positions;  // [n_tokens] RoPE positions, or null (past + t)
  const bool* mask;          // [n_tokens, past + n_tokens], or null (causal)
};

// Batch row `b` of a layer's keys (kv = 0) or values (kv = 1): [n_kv_heads, max_len, head_dim].
template <typename T>
static T* CacheRows(const RowChunk& ch, int64_t layer, int kv, int64_t n_kv_heads,
                    int64_t head_dim) {
  return static_cast<T*>(ch.cache->LayerData(layer, kv)) +
         ch.b * n_kv_heads * ch.cache->max_len() * head_dim;
}

// Which rows of a step go through SpecBed's GEMV kernel (the leading gemv_rows) and which through
// ATen's GEMM (each segment its own call, so a segment's rows get the bits the same call at batch
// 1 gives them).
struct RowPlan {
  int64_t gemv_rows = 0;
  std::vector<std::pair<int64_t, int64_t>> blas;  // (first row, rows)
};

// One row-kernel forward: its chunks in buffer order, the plans of the layers' matrices and of
// the lm_head, and which logits it returns.
struct RowStep {
  std::vector<RowChunk> chunks;
  RowPlan body, head;
  bool all_logits = false;
  int64_t rows() const { return chunks.empty() ? 0 : chunks.back().row + chunks.back().n_tokens; }
};

namespace {

// The head sizes every row kernel shares.
struct HeadShape {
  int64_t n_heads, n_kv_heads, head_dim;
};

// Attention over a step's chunks (RowStep: each chunk is one sequence's rows and cache).
// attn[row, h, :] = softmax(q . K^T * scale over allowed slots) @ V, per row of every chunk;
// q, attn: [rows, n_heads * head_dim]. One parallel loop over every (chunk, head, token) item;
// each row is computed by the same code in the same order whatever its batch-mates.
template <typename T>
void Attention(const T* q, T* attn, const RowStep& step, int64_t layer, const HeadShape& s,
               float* scores_base, int64_t scores_stride) {
  const int64_t group = s.n_heads / s.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  std::vector<int64_t> work_begin(step.chunks.size() + 1, 0);
  int64_t max_slots = 1;
  for (size_t c = 0; c < step.chunks.size(); ++c) {
    work_begin[c + 1] = work_begin[c] + s.n_heads * step.chunks[c].n_tokens;
    max_slots = std::max(max_slots, step.chunks[c].past + step.chunks[c].n_tokens);
  }
  const int64_t grain = std::max<int64_t>(1, 32768 / (max_slots * s.head_dim));
  at::parallel_for(0, work_begin.back(), grain, [&](int64_t begin, int64_t end) {
    float* scores = scores_base + at::get_thread_num() * scores_stride;
    std::vector<float> acc(s.head_dim);
    for (int64_t r = begin; r < end; ++r) {
      const auto c =
          std::upper_bound(work_begin.begin(), work_begin.end(), r) - work_begin.begin() - 1;
      const RowChunk& ch = step.chunks[c];
      const int64_t local = r - work_begin[c];
      const int64_t t = local % ch.n_tokens, h = local / ch.n_tokens;
      const int64_t n_slots = ch.past + ch.n_tokens, max_len = ch.cache->max_len();
      const T* qrow = q + ((ch.row + t) * s.n_heads + h) * s.head_dim;
      const T* kbase =
          CacheRows<T>(ch, layer, 0, s.n_kv_heads, s.head_dim) + (h / group) * max_len * s.head_dim;
      const T* vbase =
          CacheRows<T>(ch, layer, 1, s.n_kv_heads, s.head_dim) + (h / group) * max_len * s.head_dim;
      const bool* mrow = ch.mask ? ch.mask + t * n_slots : nullptr;
      const int64_t causal_end = ch.past + t + 1;
      float max_score = -INFINITY;
      for (int64_t slot = 0; slot < n_slots; ++slot) {
        const bool allowed = mrow ? mrow[slot] : slot < causal_end;
        if (!allowed) {
          scores[slot] = -INFINITY;
          continue;
        }
        const float sc = Dot(qrow, kbase + slot * s.head_dim, s.head_dim) * scale;
        scores[slot] = sc;
        max_score = std::max(max_score, sc);
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      T* out = attn + ((ch.row + t) * s.n_heads + h) * s.head_dim;
      if (max_score == -INFINITY) {  // fully masked row: output zeros
        for (int64_t i = 0; i < s.head_dim; ++i) out[i] = static_cast<T>(0.f);
        continue;
      }
      float denom = 0.f;
      for (int64_t slot = 0; slot < n_slots; ++slot) {
        if (scores[slot] == -INFINITY) continue;
        const float p = std::exp(scores[slot] - max_score);
        denom += p;
        const T* vrow = vbase + slot * s.head_dim;
        float* ap = acc.data();
#pragma omp simd
        for (int64_t i = 0; i < s.head_dim; ++i) ap[i] += p * Load(vrow, i);
      }
      const float inv = 1.0f / denom;
      for (int64_t i = 0; i < s.head_dim; ++i) out[i] = static_cast<T>(acc[i] * inv);
    }
  });
}

// act[n, f] = silu(gate[n, f]) * up[n, f], with gate_up = [gate | up] per row.
template <typename T>
void SiluMul(const T* gate_up, T* act, int64_t n_rows, int64_t hidden) {
  for (int64_t n = 0; n < n_rows; ++n) {
    const T* g = gate_up + n * 2 * hidden;
    const T* u = g + hidden;
    T* o = act + n * hidden;
    for (int64_t f = 0; f < hidden; ++f) {
      const float gv = Load(g, f);
      o[f] = static_cast<T>(gv / (1.0f + std::exp(-gv)) * Load(u, f));
    }
  }
}

at::Tensor LeadingRows(const at::Tensor& buffer, int64_t n) {
  return buffer.narrow(0, 0, n);
}

// The rows' embeddings: x[i] = emb[ids[i]] (ids checked against the vocabulary).
template <typename T>
void EmbedRows(const T* emb, const int64_t* ids, int64_t rows, int64_t dim, int64_t vocab, T* x) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t id = ids[i];
    SPECBED_CHECK(id >= 0 && id < vocab, "Forward: token id ", id, " outside the vocabulary [0, ",
                  vocab, ")");
    std::memcpy(x + i * dim, emb + id * dim, dim * sizeof(T));
  }
}

// One layer's q/k norm (Qwen3), RoPE, and the cache write of k and v at the chunk's slots
// [past, past + n_tokens).
template <typename T>
struct QkvToCacheArgs {
  HeadShape shape;
  const float *cos_table, *sin_table;
  const T *q_norm, *k_norm;  // null when absent
  float eps;
  bool interleaved;
};
template <typename T>
void QkvToCache(T* qkv, T* q, const RowChunk& ch, int64_t layer, const QkvToCacheArgs<T>& a) {
  const int64_t n_heads = a.shape.n_heads, n_kv = a.shape.n_kv_heads, hd = a.shape.head_dim;
  const int64_t half = hd / 2, qkv_dim = (n_heads + 2 * n_kv) * hd, max_len = ch.cache->max_len();
  T* kcache = CacheRows<T>(ch, layer, 0, n_kv, hd);
  T* vcache = CacheRows<T>(ch, layer, 1, n_kv, hd);
  for (int64_t t = 0; t < ch.n_tokens; ++t) {
    const int64_t row = ch.row + t;
    const int64_t pos = ch.positions ? ch.positions[t] : ch.past + t;
    T* qsrc = qkv + row * qkv_dim;
    T* ksrc = qsrc + n_heads * hd;
    T* vsrc = ksrc + n_kv * hd;
    if (a.q_norm) HeadNorm(qsrc, a.q_norm, n_heads, hd, a.eps);
    if (a.k_norm) HeadNorm(ksrc, a.k_norm, n_kv, hd, a.eps);
    const float* c = a.cos_table + pos * half;
    const float* s = a.sin_table + pos * half;
    Rope(qsrc, q + row * n_heads * hd, n_heads, hd, c, s, a.interleaved);
    const int64_t slot = ch.past + t;
    for (int64_t h = 0; h < n_kv; ++h) {
      const int64_t at = (h * max_len + slot) * hd;
      Rope(ksrc + h * hd, kcache + at, 1, hd, c, s, a.interleaved);
      std::memcpy(vcache + at, vsrc + h * hd, hd * sizeof(T));
    }
  }
}

// out = in w^T (+ bias), or out += in w^T with `accumulate`: SpecBed's matrix-vector kernel for
// few rows (models/gemv.h, reads w [out, in]), else ATen's GEMM on the transposed copy w_t.
void RowsLinear(const at::Tensor& in, const at::Tensor& w, const at::Tensor& bias,
                const at::Tensor& w_t, at::Tensor& out, bool use_gemv, bool accumulate) {
  if (use_gemv) {
    GemvRows(in, w, bias, out, accumulate);
  } else if (accumulate) {
    out.addmm_(in, w_t);
  } else if (bias.defined()) {
    at::addmm_out(out, bias, in, w_t);
  } else {
    at::mm_out(out, in, w_t);
  }
}

// RowsLinear over the rows of `plan`: the leading GEMV rows in one call, then each GEMM segment.
void PlannedLinear(const at::Tensor& in, const at::Tensor& w, const at::Tensor& bias,
                   const at::Tensor& w_t, const at::Tensor& out, const RowPlan& plan,
                   bool accumulate) {
  // Rows [first, first + n) of `t`: `t` itself when that is all of it (the usual one-call plan),
  // so a step of a small model does not pay ATen's view dispatch per projection.
  auto rows = [](const at::Tensor& t, int64_t first, int64_t n) {
    return first == 0 && n == t.size(0) ? t : t.narrow(0, first, n);
  };
  if (plan.gemv_rows > 0) {
    at::Tensor o = rows(out, 0, plan.gemv_rows);
    RowsLinear(rows(in, 0, plan.gemv_rows), w, bias, w_t, o, true, accumulate);
  }
  for (const auto& [first, n] : plan.blas) {
    at::Tensor o = rows(out, first, n);
    RowsLinear(rows(in, first, n), w, bias, w_t, o, false, accumulate);
  }
}

// The plan of `segments` rows each (in buffer order): by the total (one GEMV call up to
// max_rows, else one GEMM), or batch-invariant (`per_segment`: a segment of <= max_rows rows
// through GEMV, as alone; such segments must come first, the others each one GEMM call).
RowPlan PlanRows(const std::vector<int64_t>& segments, int64_t max_rows, bool per_segment) {
  RowPlan plan;
  int64_t total = 0;
  for (int64_t n : segments) total += n;
  if (!per_segment) {
    if (total <= max_rows) {
      plan.gemv_rows = total;
    } else {
      plan.blas.push_back({0, total});
    }
    return plan;
  }
  int64_t row = 0;
  for (int64_t n : segments) {
    if (n <= max_rows) {
      SPECBED_CHECK(plan.blas.empty(), "PlanRows: GEMV segments must come first");
      plan.gemv_rows += n;
    } else {
      plan.blas.push_back({row, n});
    }
    row += n;
  }
  return plan;
}

// The model's buffers and weights the logits read.
struct HeadBuffers {
  at::Tensor x, head_in, logits, logits_lowp;  // model-owned buffers (logits_lowp: bf16 only)
  at::Tensor final_norm, lm_head, lm_head_t;
};

// The logits of every row (step.all_logits) or of each chunk's last row: the final RMSNorm of x
// into head_in, then lm_head (through logits_lowp for a low-precision model; step.head's plan)
// into the float32 logits buffer; returns a view [rows or chunks, vocab].
template <typename T>
at::Tensor LogitsRows(const HeadBuffers& h, const RowStep& step, float eps) {
  const int64_t dim = h.final_norm.size(0);
  const int64_t n_out = step.all_logits ? step.rows() : static_cast<int64_t>(step.chunks.size());
  const T* xp = h.x.data_ptr<T>();
  T* head_in = h.head_in.data_ptr<T>();
  const T* final_norm = h.final_norm.data_ptr<T>();
  if (step.all_logits) {
    RmsNormRows(xp, final_norm, head_in, n_out, dim, eps);
  } else {
    for (size_t c = 0; c < step.chunks.size(); ++c) {
      const RowChunk& ch = step.chunks[c];
      RmsNormRows(xp + (ch.row + ch.n_tokens - 1) * dim, final_norm, head_in + c * dim, 1, dim,
                  eps);
    }
  }
  const bool low_precision = h.x.scalar_type() != at::kFloat;
  at::Tensor logits = LeadingRows(h.logits, n_out);
  at::Tensor head_out = low_precision ? LeadingRows(h.logits_lowp, n_out) : logits;
  PlannedLinear(LeadingRows(h.head_in, n_out), h.lm_head, {}, h.lm_head_t, head_out, step.head,
                /*accumulate=*/false);
  if (low_precision) logits.copy_(head_out);
  return logits;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

namespace {
std::atomic<int> g_cpu_path_override{static_cast<int>(ForwardPath::kAuto)};
}  // namespace

SPECBED_ENUM_NAMES(ForwardPath, "forward path", ForwardPathName, ParseForwardPath,
                   {ForwardPath::kAuto, "auto"}, {ForwardPath::kRowKernels, "rows"},
                   {ForwardPath::kAten, "aten"})

void SetCpuForwardPathOverride(ForwardPath path) {
  g_cpu_path_override.store(static_cast<int>(path), std::memory_order_relaxed);
}

ForwardPath ResolveForwardPath(ForwardPath requested, const at::Device& device) {
  if (!device.is_cpu()) {
    SPECBED_CHECK(requested != ForwardPath::kRowKernels,
                  "forward path 'rows' runs on the CPU "
                  "only; the model is on ",
                  device.str(), " (use 'aten' or 'auto')");
    return ForwardPath::kAten;
  }
  if (requested != ForwardPath::kAuto) return requested;
  const auto forced = static_cast<ForwardPath>(g_cpu_path_override.load(std::memory_order_relaxed));
  if (forced != ForwardPath::kAuto) return forced;
  const char* env = std::getenv("SPECBED_FORWARD");
  if (env == nullptr || *env == 0) return ForwardPath::kRowKernels;
  const ForwardPath from_env = ParseForwardPath(env, "environment variable SPECBED_FORWARD");
  return from_env == ForwardPath::kAuto ? ForwardPath::kRowKernels : from_env;
}

LlamaModel::LlamaModel(LlamaConfig config, LlamaWeights weights, ModelOptions options)
    : config_(std::move(config)), weights_(std::move(weights)) {
  config_.Validate("LlamaModel");
  weights_.Validate(config_, "LlamaModel");
  dtype_ = weights_.tok_embeddings.scalar_type();
  device_ = weights_.tok_embeddings.device();
  path_ = ResolveForwardPath(options.forward_path, device_);
  if (path_ == ForwardPath::kRowKernels) {
    SPECBED_CHECK(dtype_ == at::kFloat || dtype_ == at::kBFloat16 || dtype_ == at::kHalf,
                  "LlamaModel: the CPU row kernels support float32, bfloat16 and float16 weights, "
                  "got ",
                  dtype_);
  }
  // GemvRows reads the untransposed [out, in] matrices and needs them contiguous.
  std::vector<at::Tensor*> streamed = {&weights_.lm_head};
  for (auto& layer : weights_.layers) {
    for (at::Tensor* m : {&layer.wqkv, &layer.wo, &layer.w_gate_up, &layer.w_down, &layer.bqkv}) {
      if (m->defined()) *m = m->contiguous();
      streamed.push_back(m);
    }
  }
  if (!weights_.lm_head.is_contiguous()) weights_.lm_head = weights_.lm_head.contiguous();
  if (path_ == ForwardPath::kRowKernels && WeightHugePagesEnabled()) {
    weight_arena_ = PackIntoHugePages(streamed);
  }
  if (path_ == ForwardPath::kAten) {
    aten_ = std::make_unique<AtenForward>(config_, weights_, dtype_, device_);
    return;
  }
  for (auto& layer : weights_.layers) {
    wqkv_t_.push_back(layer.wqkv.t());
    wo_t_.push_back(layer.wo.t());
    w_gate_up_t_.push_back(layer.w_gate_up.t());
    w_down_t_.push_back(layer.w_down.t());
  }
  lm_head_t_ = weights_.lm_head.t();
  inv_freq_ = RopeInverseFrequencies(config_);
  EnsureCapacity(16, 256);
  EnsureRope(256);
}

LlamaModel::~LlamaModel() = default;
LlamaModel::LlamaModel(LlamaModel&&) noexcept = default;
LlamaModel& LlamaModel::operator=(LlamaModel&&) noexcept = default;

KvCache LlamaModel::NewCache(int64_t batch, int64_t max_len) const {
  const int64_t len = max_len > 0 ? max_len : config_.max_seq_len;
  // Full attention equals a Mistral window of W positions only while a sequence holds <= W tokens.
  SPECBED_CHECK(config_.sliding_window == 0 || len <= config_.sliding_window, "NewCache: ", len,
                " positions exceed the model's sliding_window ", config_.sliding_window,
                " (SpecBed attends to every earlier position, which equals the windowed attention "
                "only up to the window)");
  return KvCache(config_, batch, len, dtype_, device_);
}

void LlamaModel::EnsureCapacity(int64_t n_rows, int64_t n_slots) {
  if (n_rows > capacity_) {
    capacity_ = std::max(n_rows, 2 * capacity_);
    const auto opts = at::TensorOptions(dtype_);
    x_ = at::empty({capacity_, config_.dim}, opts);
    xn_ = at::empty({capacity_, config_.dim}, opts);
    qkv_ = at::empty({capacity_, config_.qkv_dim()}, opts);
    q_ = at::empty({capacity_, config_.q_dim()}, opts);
    attn_ = at::empty({capacity_, config_.q_dim()}, opts);
    gate_up_ = at::empty({capacity_, 2 * config_.hidden_dim}, opts);
    act_ = at::empty({capacity_, config_.hidden_dim}, opts);
    head_in_ = at::empty({capacity_, config_.dim}, opts);
    logits_ = at::empty({capacity_, config_.vocab_size}, at::TensorOptions(at::kFloat));
    if (dtype_ != at::kFloat) logits_lowp_ = at::empty({capacity_, config_.vocab_size}, opts);
    row_views_.assign(capacity_ + 1, RowViews{});
  }
  if (n_slots > slot_capacity_ || scores_.size(0) < at::get_num_threads()) {
    slot_capacity_ = std::max(n_slots, slot_capacity_);
    scores_ = at::empty({at::get_num_threads(), slot_capacity_}, at::TensorOptions(at::kFloat));
  }
}

const LlamaModel::RowViews& LlamaModel::RowViewsFor(int64_t rows) {
  RowViews& v = row_views_[rows];  // rows <= capacity_ (EnsureCapacity)
  if (v.rows != rows) {
    v = {rows,
         LeadingRows(x_, rows),
         LeadingRows(xn_, rows),
         LeadingRows(qkv_, rows),
         LeadingRows(attn_, rows),
         LeadingRows(gate_up_, rows),
         LeadingRows(act_, rows)};
  }
  return v;
}

void LlamaModel::EnsureRope(int64_t max_position) {
  if (max_position <= rope_capacity_) return;
  const int64_t cap = std::max(max_position, 2 * rope_capacity_);
  FillRopeTables(inv_freq_, cap, rope_cos_, rope_sin_);
  rope_capacity_ = cap;
}

ForwardOutput LlamaModel::Forward(const at::Tensor& tokens, KvCache& cache,
                                  const ForwardOptions& options) {
  ++forward_calls_;
  SPECBED_CHECK(tokens.dim() == 2 && tokens.scalar_type() == at::kLong,
                "Forward: tokens must be int64 [batch, T]");
  const int64_t batch = tokens.size(0), n_tokens = tokens.size(1);
  SPECBED_CHECK(batch == cache.batch(), "Forward: tokens batch ", batch, " != cache batch ",
                cache.batch());
  SPECBED_CHECK(n_tokens >= 1, "Forward: no tokens");
  SPECBED_CHECK(SameDevice(cache.device(), device_), "Forward: the KV cache is on ",
                cache.device().str(), ", the model on ", device_.str(),
                " (make caches with NewCache)");
  const int64_t n_slots = cache.length() + n_tokens;
  SPECBED_CHECK(n_slots <= cache.max_len(), "context length ", n_slots, " exceeds the KV cache (",
                cache.max_len(), " positions)");
  if (options.positions.defined()) {
    SPECBED_CHECK(
        options.positions.sizes() == tokens.sizes() && options.positions.scalar_type() == at::kLong,
        "Forward: positions must be int64 [batch, T] like tokens");
  }
  if (options.mask.defined()) {
    SPECBED_CHECK(options.mask.dim() == 3 && options.mask.size(0) == batch &&
                      options.mask.size(1) == n_tokens && options.mask.size(2) == n_slots &&
                      options.mask.scalar_type() == at::kBool,
                  "Forward: mask must be bool [batch, T, cache_length + T] = [", batch, ", ",
                  n_tokens, ", ", n_slots, "]");
  }
  for (int64_t l : options.hidden_layers) {
    SPECBED_CHECK(l >= 0 && l <= config_.n_layers, "Forward: hidden layer ", l,
                  " outside [0, n_layers=", config_.n_layers, "]");
  }
  ForwardOutput out;
  if (options.tree_bits.defined()) {
    SPECBED_CHECK(!options.mask.defined(), "Forward: give mask or tree_bits, not both");
    SPECBED_CHECK(options.tree_bits.sizes() == tokens.sizes() &&
                      options.tree_bits.scalar_type() == at::kLong && n_tokens <= 64,
                  "Forward: tree_bits must be int64 [batch, T] like tokens, T <= 64");
    if (!TakesTreeBits(n_tokens)) {  // the mask they stand for
      ForwardOptions with_mask = options;
      with_mask.tree_bits = at::Tensor();
      with_mask.mask = TreeBitsMask(options.tree_bits, cache.length());
      out = aten_ ? aten_->Run(tokens, cache, with_mask) : ForwardRows(tokens, cache, with_mask);
      cache.Advance(n_tokens);
      return out;
    }
  }
  out = aten_ ? aten_->Run(tokens, cache, options) : ForwardRows(tokens, cache, options);
  cache.Advance(n_tokens);
  return out;
}

bool LlamaModel::TakesTreeBits(int64_t n_tokens) const {
  return aten_ != nullptr && aten_->TakesTreeBits(n_tokens);
}

bool LlamaModel::ReplaysSteps(int64_t n_tokens) const {
  return aten_ != nullptr && aten_->ReplaysSteps(n_tokens);
}

bool LlamaModel::ChainsSteps(int64_t n) const {
  return aten_ != nullptr && aten_->ChainsSteps(n);
}

void LlamaModel::DecodeChain(const at::Tensor& first, KvCache& cache, int64_t n,
                             const at::Tensor& ids, const ChainPick& pick,
                             const std::vector<int64_t>& pick_key) {
  SPECBED_CHECK(ChainsSteps(n), "DecodeChain: this model does not chain ", n,
                " tokens (captured steps off, or n outside [2, 65])");
  SPECBED_CHECK(SameDevice(cache.device(), device_) && cache.batch() == 1,
                "DecodeChain: the cache must be this model's, batch 1");
  aten_->RunChain(first, cache, n, ids, pick, pick_key);
  cache.Advance(n - 1);
  forward_calls_ += n - 1;
}

GraphMode LlamaModel::graph_mode() const {
  return aten_ != nullptr ? aten_->graph_mode() : GraphMode::kOff;
}

GraphStats LlamaModel::graph_stats() const {
  return aten_ != nullptr ? aten_->graph_stats() : GraphStats{};
}

void TreeBitsOf(const int32_t* parent, int64_t n, int64_t* out) {
  SPECBED_CHECK(n + 1 <= 64, "TreeBitsOf: ", n + 1, " verify rows do not fit 64 bits");
  out[0] = 1;
  for (int64_t i = 0; i < n; ++i) {
    SPECBED_CHECK(parent[i] >= -1 && parent[i] < i, "TreeBitsOf: parent[", i, "] = ", parent[i],
                  " outside [-1, ", i, ")");
    const auto bits = static_cast<uint64_t>(out[parent[i] + 1]) | (uint64_t{1} << (i + 1));
    out[i + 1] = static_cast<int64_t>(bits);
  }
}

at::Tensor TreeBitsMask(const at::Tensor& tree_bits, int64_t past) {
  const at::Tensor bits = tree_bits.cpu().contiguous();
  const int64_t batch = bits.size(0), n = bits.size(1);
  at::Tensor mask = at::zeros({batch, n, past + n}, at::kBool);
  const int64_t* b = bits.data_ptr<int64_t>();
  bool* m = mask.data_ptr<bool>();
  for (int64_t r = 0; r < batch * n; ++r) {
    bool* row = m + r * (past + n);
    std::fill(row, row + past, true);
    for (int64_t j = 0; j < n; ++j) row[past + j] = ((static_cast<uint64_t>(b[r]) >> j) & 1) != 0;
  }
  return mask;
}

// The RoPE table rows a step needs: `fallback` (past + n_tokens) or one past the largest of the
// `rows` explicit positions (int64, CPU; undefined = none), which must not be negative.
static int64_t RopeRowsNeeded(const at::Tensor& positions, int64_t rows, int64_t fallback) {
  int64_t needed = fallback;
  for (int64_t i = 0; positions.defined() && i < rows; ++i) {
    const int64_t p = positions.data_ptr<int64_t>()[i];
    SPECBED_CHECK(p >= 0, "Forward: negative position");
    needed = std::max(needed, p + 1);
  }
  return needed;
}

ForwardOutput LlamaModel::ForwardRows(const at::Tensor& tokens_in, KvCache& cache,
                                      const ForwardOptions& options) {
  const at::Tensor tokens =
      (tokens_in.device().is_cpu() ? tokens_in : tokens_in.cpu()).contiguous();
  const int64_t batch = tokens.size(0), n_tokens = tokens.size(1);
  const int64_t past = cache.length();
  const at::Tensor positions =
      options.positions.defined() ? options.positions.contiguous() : at::Tensor();
  const at::Tensor mask = options.mask.defined() ? options.mask.contiguous() : at::Tensor();
  // The lockstep batch: one chunk per batch row of `cache`; GEMV or GEMM by the total rows.
  RowStep step;
  for (int64_t b = 0; b < batch; ++b) {
    step.chunks.push_back(
        {&cache, b, b * n_tokens, n_tokens, past,
         positions.defined() ? positions.data_ptr<int64_t>() + b * n_tokens : nullptr,
         mask.defined() ? mask.data_ptr<bool>() + b * n_tokens * (past + n_tokens) : nullptr});
  }
  const int64_t rows = batch * n_tokens, max_rows = GemvMaxRows(dtype_);
  const bool all = options.logits == LogitsMode::kAll;
  step.body = PlanRows({rows}, max_rows, false);
  step.head = PlanRows({all ? rows : batch}, max_rows, false);
  step.all_logits = all;
  EnsureRope(RopeRowsNeeded(positions, rows, past + n_tokens));
  ForwardOutput out;
  at::Tensor logits;
  RunRows(tokens.data_ptr<int64_t>(), step, options.hidden_layers,
          options.logits != LogitsMode::kNone ? &logits : nullptr, out.hidden);
  for (at::Tensor& h : out.hidden) h = h.view({batch, n_tokens, config_.dim});
  if (logits.defined()) out.logits = logits.view({batch, all ? n_tokens : 1, -1});
  return out;
}

void LlamaModel::RunRows(const int64_t* ids, const RowStep& step,
                         const std::vector<int64_t>& hidden_layers, at::Tensor* logits,
                         std::vector<at::Tensor>& hidden) {
  const int64_t rows = step.rows();
  int64_t max_slots = 1;
  for (const RowChunk& ch : step.chunks) max_slots = std::max(max_slots, ch.past + ch.n_tokens);
  EnsureCapacity(rows, max_slots);
  auto capture = [&](int64_t index, const at::Tensor& x) {
    for (size_t i = 0; i < hidden_layers.size(); ++i) {
      if (hidden_layers[i] != index) continue;
      hidden.resize(hidden_layers.size());
      hidden[i] = x.clone();
    }
  };
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype_, "LlamaModel::Forward", [&] {
    using T = scalar_t;
    const int64_t dim = config_.dim;
    const float eps = static_cast<float>(config_.norm_eps);
    const RowViews& v = RowViewsFor(rows);
    const at::Tensor &x = v.x, &xn = v.xn, &qkv = v.qkv, &attn = v.attn, &gate_up = v.gate_up,
                     &act = v.act;
    T* xp = x.data_ptr<T>();
    T* xnp = xn.data_ptr<T>();
    EmbedRows(weights_.tok_embeddings.data_ptr<T>(), ids, rows, dim, config_.vocab_size, xp);
    capture(0, x);
    const HeadShape heads{config_.n_heads, config_.n_kv_heads, config_.head_dim};
    QkvToCacheArgs<T> rope{
        heads, rope_cos_.data_ptr<float>(), rope_sin_.data_ptr<float>(), nullptr, nullptr,
        eps,   config_.rope_interleaved};
    for (int64_t l = 0; l < config_.n_layers; ++l) {
      const LlamaLayerWeights& w = weights_.layers[l];
      RmsNormRows(xp, w.attn_norm.data_ptr<T>(), xnp, rows, dim, eps);
      PlannedLinear(xn, w.wqkv, w.bqkv, wqkv_t_[l], qkv, step.body, /*accumulate=*/false);
      rope.q_norm = w.q_norm.defined() ? w.q_norm.data_ptr<T>() : nullptr;
      rope.k_norm = w.k_norm.defined() ? w.k_norm.data_ptr<T>() : nullptr;
      for (const RowChunk& ch : step.chunks)
        QkvToCache(qkv.data_ptr<T>(), q_.data_ptr<T>(), ch, l, rope);
      Attention(q_.data_ptr<T>(), attn.data_ptr<T>(), step, l, heads, scores_.data_ptr<float>(),
                slot_capacity_);
      PlannedLinear(attn, w.wo, {}, wo_t_[l], x, step.body, /*accumulate=*/true);
      RmsNormRows(xp, w.ffn_norm.data_ptr<T>(), xnp, rows, dim, eps);
      PlannedLinear(xn, w.w_gate_up, {}, w_gate_up_t_[l], gate_up, step.body, /*accumulate=*/false);
      SiluMul(gate_up.data_ptr<T>(), act.data_ptr<T>(), rows, config_.hidden_dim);
      PlannedLinear(act, w.w_down, {}, w_down_t_[l], x, step.body, /*accumulate=*/true);
      capture(l + 1, x);
    }
    if (logits != nullptr) {
      const HeadBuffers head{
          x_, head_in_, logits_, logits_lowp_, weights_.final_norm, weights_.lm_head, lm_head_t_};
      *logits = LogitsRows<T>(head, step, eps);
    }
  });
}

// A ragged chunk's arguments, checked against its cache (index c names it in errors).
static void CheckChunk(const SeqChunk& ch, size_t c, const at::Device& device) {
  SPECBED_CHECK(ch.cache != nullptr && ch.cache->defined(), "ForwardRagged: chunk ", c,
                " has no cache");
  SPECBED_CHECK(ch.cache->batch() == 1 && SameDevice(ch.cache->device(), device),
                "ForwardRagged: chunk ", c, "'s cache must be batch 1 on ", device.str());
  SPECBED_CHECK(ch.tokens.dim() == 2 && ch.tokens.size(0) == 1 && ch.tokens.size(1) >= 1 &&
                    ch.tokens.scalar_type() == at::kLong && ch.tokens.device().is_cpu() &&
                    ch.tokens.is_contiguous(),
                "ForwardRagged: chunk ", c,
                "'s tokens must be contiguous int64 [1, T >= 1] on the CPU");
  const int64_t n = ch.tokens.size(1), slots = ch.cache->length() + n;
  SPECBED_CHECK(slots <= ch.cache->max_len(), "ForwardRagged: chunk ", c, ": context length ",
                slots, " exceeds its KV cache (", ch.cache->max_len(), " positions)");
  SPECBED_CHECK(
      !ch.positions.defined() ||
          (ch.positions.sizes() == ch.tokens.sizes() && ch.positions.scalar_type() == at::kLong &&
           ch.positions.device().is_cpu() && ch.positions.is_contiguous()),
      "ForwardRagged: chunk ", c, "'s positions must be int64 [1, T] on the CPU");
  SPECBED_CHECK(
      !ch.mask.defined() || (ch.mask.dim() == 3 && ch.mask.size(0) == 1 && ch.mask.size(1) == n &&
                             ch.mask.size(2) == slots && ch.mask.scalar_type() == at::kBool &&
                             ch.mask.device().is_cpu() && ch.mask.is_contiguous()),
      "ForwardRagged: chunk ", c, "'s mask must be bool [1, T, length + T] = [1, ", n, ", ", slots,
      "]");
}

RaggedOutput LlamaModel::ForwardRagged(const std::vector<SeqChunk>& chunks,
                                       const RaggedOptions& options) {
  SPECBED_CHECK(!chunks.empty(), "ForwardRagged: no chunks");
  for (size_t c = 0; c < chunks.size(); ++c) {
    CheckChunk(chunks[c], c, device_);
    for (size_t d = 0; d < c; ++d) {
      SPECBED_CHECK(chunks[d].cache != chunks[c].cache, "ForwardRagged: chunks ", d, " and ", c,
                    " share a cache");
    }
  }
  for (int64_t l : options.hidden_layers) {
    SPECBED_CHECK(l >= 0 && l <= config_.n_layers, "ForwardRagged: hidden layer ", l,
                  " outside [0, n_layers=", config_.n_layers, "]");
  }
  ++forward_calls_;
  RaggedOutput out = aten_ ? RaggedAten(chunks, options) : RaggedRows(chunks, options);
  for (const SeqChunk& ch : chunks) ch.cache->Advance(ch.tokens.size(1));
  return out;
}

// The ATen path: one batched step (AtenForward::RunRagged) where the fused attention takes every
// chunk, else one Forward per chunk (their logits copied out of the shared buffer).
RaggedOutput LlamaModel::RaggedAten(const std::vector<SeqChunk>& chunks,
                                    const RaggedOptions& options) {
  if (aten_->BatchesRagged(chunks)) return aten_->RunRagged(chunks, options);
  RaggedOutput out;
  for (const SeqChunk& ch : chunks) {
    ForwardOptions fo;
    fo.positions = ch.positions;
    fo.mask = ch.mask;
    fo.hidden_layers = options.hidden_layers;
    fo.logits = options.logits;
    ForwardOutput one = aten_->Run(ch.tokens, *ch.cache, fo);  // ForwardRagged advances
    if (one.logits.defined()) out.logits.push_back(one.logits[0].clone());
    out.hidden.push_back(std::move(one.hidden));
  }
  return out;
}

// The row kernels: chunks of <= GemvMaxRows rows first (one GEMV call over all of them), then the
// longer ones, each its own GEMM call (batch_invariant), or one plan by the total rows.
RaggedOutput LlamaModel::RaggedRows(const std::vector<SeqChunk>& chunks,
                                    const RaggedOptions& options) {
  const int64_t max_rows = GemvMaxRows(dtype_);
  std::vector<size_t> order;  // buffer order: short chunks first, then long ones
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t c = 0; c < chunks.size(); ++c) {
      if ((chunks[c].tokens.size(1) > max_rows) == (pass == 1)) order.push_back(c);
    }
  }
  RowStep step;
  std::vector<int64_t> ids, segments, first_row(chunks.size());
  int64_t needed_rope = 1;
  for (size_t c : order) {
    const SeqChunk& ch = chunks[c];
    const int64_t n = ch.tokens.size(1), past = ch.cache->length();
    first_row[c] = static_cast<int64_t>(ids.size());
    step.chunks.push_back({ch.cache, 0, first_row[c], n, past,
                           ch.positions.defined() ? ch.positions.data_ptr<int64_t>() : nullptr,
                           ch.mask.defined() ? ch.mask.data_ptr<bool>() : nullptr});
    const int64_t* t = ch.tokens.data_ptr<int64_t>();
    ids.insert(ids.end(), t, t + n);
    segments.push_back(n);
    needed_rope = std::max(needed_rope, RopeRowsNeeded(ch.positions, n, past + n));
  }
  const bool all = options.logits == LogitsMode::kAll;
  step.body = PlanRows(segments, max_rows, options.batch_invariant);
  step.head =
      all ? step.body
          : PlanRows(std::vector<int64_t>(chunks.size(), 1), max_rows, options.batch_invariant);
  step.all_logits = all;
  EnsureRope(needed_rope);
  at::Tensor logits;
  std::vector<at::Tensor> hidden;
  RunRows(ids.data(), step, options.hidden_layers,
          options.logits != LogitsMode::kNone ? &logits : nullptr, hidden);
  RaggedOutput out;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int64_t n = chunks[c].tokens.size(1);
    if (logits.defined()) {
      const size_t at = std::find(order.begin(), order.end(), c) - order.begin();
      out.logits.push_back(all ? logits.narrow(0, first_row[c], n)
                               : logits.narrow(0, static_cast<int64_t>(at), 1));
    }
    std::vector<at::Tensor> mine;
    for (const at::Tensor& h : hidden) mine.push_back(h.narrow(0, first_row[c], n).unsqueeze(0));
    out.hidden.push_back(std::move(mine));
  }
  return out;
}

}  // namespace specbed
