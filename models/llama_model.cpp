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

// out[n, :] = x[n, :] / rms(x[n, :]) * w, for rows [0, n_rows).
template <typename T>
void RmsNormRows(const T* x, const T* w, T* out, int64_t n_rows, int64_t dim, float eps) {
  for (int64_t n = 0; n < n_rows; ++n) {
    const T* row = x + n * dim;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < dim; ++i) ss += Load(row, i) * Load(row, i);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    T* o = out + n * dim;
    for (int64_t i = 0; i < dim; ++i) o[i] = static_cast<T>(Load(row, i) * inv * Load(w, i));
  }
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

// The sizes every row kernel of one forward step shares: `n_tokens` new rows of each of `batch`
// sequences after `past` cached slots, in a cache of `max_len` slots.
struct RowsShape {
  int64_t batch, n_tokens, n_heads, n_kv_heads, head_dim, past, max_len;
};

RowsShape StepShape(const LlamaConfig& c, int64_t batch, int64_t n_tokens, int64_t past,
                    int64_t max_len) {
  return {batch, n_tokens, c.n_heads, c.n_kv_heads, c.head_dim, past, max_len};
}

struct AttentionArgs : RowsShape {
  const bool* mask;  // [batch, n_tokens, past + n_tokens] or nullptr (causal)
  float* scores;     // [threads, >= past + n_tokens]
  int64_t scores_stride;
};

// attn[b, t, h, :] = softmax(q . K^T * scale over allowed slots) @ V.
// q: [batch*n_tokens, n_heads*head_dim]; k, v: [batch, n_kv_heads, max_len, head_dim].
template <typename T>
void Attention(const T* q, const T* k, const T* v, T* attn, const AttentionArgs& a) {
  const int64_t n_slots = a.past + a.n_tokens;
  const int64_t group = a.n_heads / a.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(a.head_dim));
  const int64_t total = a.batch * a.n_heads * a.n_tokens;
  const int64_t work_per_row = std::max<int64_t>(1, n_slots * a.head_dim);
  const int64_t grain = std::max<int64_t>(1, 32768 / work_per_row);
  at::parallel_for(0, total, grain, [&](int64_t begin, int64_t end) {
    float* scores = a.scores + at::get_thread_num() * a.scores_stride;
    std::vector<float> acc(a.head_dim);
    for (int64_t r = begin; r < end; ++r) {
      const int64_t t = r % a.n_tokens;
      const int64_t h = (r / a.n_tokens) % a.n_heads;
      const int64_t b = r / (a.n_tokens * a.n_heads);
      const int64_t kvh = h / group;
      const T* qrow = q + ((b * a.n_tokens + t) * a.n_heads + h) * a.head_dim;
      const T* kbase = k + ((b * a.n_kv_heads + kvh) * a.max_len) * a.head_dim;
      const T* vbase = v + ((b * a.n_kv_heads + kvh) * a.max_len) * a.head_dim;
      const bool* mrow = a.mask ? a.mask + (b * a.n_tokens + t) * n_slots : nullptr;
      const int64_t causal_end = a.past + t + 1;
      float max_score = -INFINITY;
      for (int64_t s = 0; s < n_slots; ++s) {
        const bool allowed = mrow ? mrow[s] : s < causal_end;
        if (!allowed) {
          scores[s] = -INFINITY;
          continue;
        }
        const float sc = Dot(qrow, kbase + s * a.head_dim, a.head_dim) * scale;
        scores[s] = sc;
        max_score = std::max(max_score, sc);
      }
      std::fill(acc.begin(), acc.end(), 0.f);
      T* out = attn + ((b * a.n_tokens + t) * a.n_heads + h) * a.head_dim;
      if (max_score == -INFINITY) {  // fully masked row: output zeros
        for (int64_t i = 0; i < a.head_dim; ++i) out[i] = static_cast<T>(0.f);
        continue;
      }
      float denom = 0.f;
      for (int64_t s = 0; s < n_slots; ++s) {
        if (scores[s] == -INFINITY) continue;
        const float p = std::exp(scores[s] - max_score);
        denom += p;
        const T* vrow = vbase + s * a.head_dim;
        float* ap = acc.data();
#pragma omp simd
        for (int64_t i = 0; i < a.head_dim; ++i) ap[i] += p * Load(vrow, i);
      }
      const float inv = 1.0f / denom;
      for (int64_t i = 0; i < a.head_dim; ++i) out[i] = static_cast<T>(acc[i] * inv);
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

// One layer's q/k norm (Qwen3), RoPE, and the cache write of k and v at slots [past, past + T).
template <typename T>
struct QkvToCacheArgs : RowsShape {
  const int64_t* positions;  // [batch * T] or null (past + t)
  const float *cos_table, *sin_table;
  const T *q_norm, *k_norm;  // null when absent
  float eps;
  bool interleaved;
};
template <typename T>
void QkvToCache(T* qkv, T* q, T* kcache, T* vcache, const QkvToCacheArgs<T>& a) {
  const int64_t hd = a.head_dim, half = hd / 2, qkv_dim = (a.n_heads + 2 * a.n_kv_heads) * hd;
  for (int64_t b = 0; b < a.batch; ++b) {
    for (int64_t t = 0; t < a.n_tokens; ++t) {
      const int64_t row = b * a.n_tokens + t;
      const int64_t pos = a.positions ? a.positions[row] : a.past + t;
      T* qsrc = qkv + row * qkv_dim;
      T* ksrc = qsrc + a.n_heads * hd;
      T* vsrc = ksrc + a.n_kv_heads * hd;
      if (a.q_norm) HeadNorm(qsrc, a.q_norm, a.n_heads, hd, a.eps);
      if (a.k_norm) HeadNorm(ksrc, a.k_norm, a.n_kv_heads, hd, a.eps);
      const float* c = a.cos_table + pos * half;
      const float* s = a.sin_table + pos * half;
      Rope(qsrc, q + row * a.n_heads * hd, a.n_heads, hd, c, s, a.interleaved);
      const int64_t slot = a.past + t;
      for (int64_t h = 0; h < a.n_kv_heads; ++h) {
        const int64_t at = ((b * a.n_kv_heads + h) * a.max_len + slot) * hd;
        Rope(ksrc + h * hd, kcache + at, 1, hd, c, s, a.interleaved);
        std::memcpy(vcache + at, vsrc + h * hd, hd * sizeof(T));
      }
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

// The model's buffers and weights the logits read.
struct HeadBuffers {
  at::Tensor x, head_in, logits, logits_lowp;  // model-owned buffers (logits_lowp: bf16 only)
  at::Tensor final_norm, lm_head, lm_head_t;
};

// The logits of every row (`all`) or of each sequence's last row: the final RMSNorm of x into
// head_in, then lm_head (through logits_lowp for a low-precision model) into the float32 logits
// buffer; returns a view [batch, T or 1, vocab].
template <typename T>
at::Tensor LogitsRows(const HeadBuffers& h, int64_t batch, int64_t n_tokens, bool all, float eps) {
  const int64_t dim = h.final_norm.size(0), vocab = h.lm_head.size(0);
  const int64_t n_out = all ? batch * n_tokens : batch;
  const T* xp = h.x.data_ptr<T>();
  T* head_in = h.head_in.data_ptr<T>();
  const T* final_norm = h.final_norm.data_ptr<T>();
  if (all) {
    RmsNormRows(xp, final_norm, head_in, n_out, dim, eps);
  } else {
    for (int64_t b = 0; b < batch; ++b) {
      RmsNormRows(xp + (b * n_tokens + n_tokens - 1) * dim, final_norm, head_in + b * dim, 1, dim,
                  eps);
    }
  }
  const bool low_precision = h.x.scalar_type() != at::kFloat;
  at::Tensor logits = LeadingRows(h.logits, n_out);
  at::Tensor head_out = low_precision ? LeadingRows(h.logits_lowp, n_out) : logits;
  RowsLinear(LeadingRows(h.head_in, n_out), h.lm_head, {}, h.lm_head_t, head_out,
             n_out <= GemvMaxRows(h.x.scalar_type()), /*accumulate=*/false);
  if (low_precision) logits.copy_(head_out);
  return logits.view({batch, all ? n_tokens : 1, vocab});
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
  }
  if (n_slots > slot_capacity_ || scores_.size(0) < at::get_num_threads()) {
    slot_capacity_ = std::max(n_slots, slot_capacity_);
    scores_ = at::empty({at::get_num_threads(), slot_capacity_}, at::TensorOptions(at::kFloat));
  }
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
  SPECBED_CHECK(cache.device() == device_, "Forward: the KV cache is on ", cache.device().str(),
                ", the model on ", device_.str(), " (make caches with NewCache)");
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
  SPECBED_CHECK(cache.device() == device_ && cache.batch() == 1,
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
  const int64_t rows = batch * n_tokens;
  EnsureCapacity(rows, past + n_tokens);
  const at::Tensor positions =
      options.positions.defined() ? options.positions.contiguous() : at::Tensor();
  EnsureRope(RopeRowsNeeded(positions, rows, past + n_tokens));
  const at::Tensor mask = options.mask.defined() ? options.mask.contiguous() : at::Tensor();

  ForwardOutput out;
  auto capture = [&](int64_t index, const at::Tensor& x) {
    for (size_t i = 0; i < options.hidden_layers.size(); ++i) {
      if (options.hidden_layers[i] == index) {
        out.hidden.resize(options.hidden_layers.size());
        out.hidden[i] = x.clone().view({batch, n_tokens, config_.dim});
      }
    }
  };
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype_, "LlamaModel::Forward", [&] {
    using T = scalar_t;
    const int64_t dim = config_.dim;
    const float eps = static_cast<float>(config_.norm_eps);
    // Few rows: SpecBed's own matrix-vector kernel (models/gemv.h); otherwise ATen's GEMM.
    const bool use_gemv = rows <= GemvMaxRows(dtype_);
    at::Tensor x = LeadingRows(x_, rows), xn = LeadingRows(xn_, rows),
               qkv = LeadingRows(qkv_, rows), attn = LeadingRows(attn_, rows),
               gate_up = LeadingRows(gate_up_, rows), act = LeadingRows(act_, rows);
    T* xp = x.data_ptr<T>();
    T* xnp = xn.data_ptr<T>();
    EmbedRows(weights_.tok_embeddings.data_ptr<T>(), tokens.data_ptr<int64_t>(), rows, dim,
              config_.vocab_size, xp);
    capture(0, x);
    const RowsShape shape = StepShape(config_, batch, n_tokens, past, cache.max_len());
    QkvToCacheArgs<T> rope{shape,
                           positions.defined() ? positions.data_ptr<int64_t>() : nullptr,
                           rope_cos_.data_ptr<float>(),
                           rope_sin_.data_ptr<float>(),
                           nullptr,
                           nullptr,
                           eps,
                           config_.rope_interleaved};
    AttentionArgs args{shape, mask.defined() ? mask.data_ptr<bool>() : nullptr,
                       scores_.data_ptr<float>(), slot_capacity_};
    for (int64_t l = 0; l < config_.n_layers; ++l) {
      const LlamaLayerWeights& w = weights_.layers[l];
      RmsNormRows(xp, w.attn_norm.data_ptr<T>(), xnp, rows, dim, eps);
      RowsLinear(xn, w.wqkv, w.bqkv, wqkv_t_[l], qkv, use_gemv, /*accumulate=*/false);
      T* kcache = static_cast<T*>(cache.LayerData(l, 0));
      T* vcache = static_cast<T*>(cache.LayerData(l, 1));
      rope.q_norm = w.q_norm.defined() ? w.q_norm.data_ptr<T>() : nullptr;
      rope.k_norm = w.k_norm.defined() ? w.k_norm.data_ptr<T>() : nullptr;
      QkvToCache(qkv.data_ptr<T>(), q_.data_ptr<T>(), kcache, vcache, rope);
      Attention(q_.data_ptr<T>(), kcache, vcache, attn.data_ptr<T>(), args);
      RowsLinear(attn, w.wo, {}, wo_t_[l], x, use_gemv, /*accumulate=*/true);
      RmsNormRows(xp, w.ffn_norm.data_ptr<T>(), xnp, rows, dim, eps);
      RowsLinear(xn, w.w_gate_up, {}, w_gate_up_t_[l], gate_up, use_gemv, /*accumulate=*/false);
      SiluMul(gate_up.data_ptr<T>(), act.data_ptr<T>(), rows, config_.hidden_dim);
      RowsLinear(act, w.w_down, {}, w_down_t_[l], x, use_gemv, /*accumulate=*/true);
      capture(l + 1, x);
    }
    if (options.logits != LogitsMode::kNone) {
      const HeadBuffers head{
          x_, head_in_, logits_, logits_lowp_, weights_.final_norm, weights_.lm_head, lm_head_t_};
      out.logits = LogitsRows<T>(head, batch, n_tokens, options.logits == LogitsMode::kAll, eps);
    }
  });
  return out;
}

}  // namespace specbed
