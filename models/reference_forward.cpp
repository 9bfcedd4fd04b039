// Plain-loop reference forward (double accumulation, no ATen math) over HF-named tensors.
// Checked by: tests/models/reference_forward_test.cpp.
#include "models/reference_forward.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "base/error.h"
#include "models/tensor_util.h"

namespace specbed {
namespace {

constexpr const char* kSource = "ReferenceForward";

// A row-major float matrix (or vector, cols == 1) copied out of a tensor.
struct Mat {
  std::vector<float> data;
  int64_t rows = 0;
  int64_t cols = 0;
};

// Reads tensor `name` (expected shape [rows, cols], or [rows] when cols == 0) as float32.
Mat Load(const std::map<std::string, at::Tensor>& tensors, const std::string& name, int64_t rows,
         int64_t cols) {
  auto it = tensors.find(name);
  SPECBED_CHECK(it != tensors.end() && it->second.defined(), kSource, ": missing tensor '", name,
                "'");
  const std::vector<int64_t> shape =
      cols == 0 ? std::vector<int64_t>{rows} : std::vector<int64_t>{rows, cols};
  SPECBED_CHECK(it->second.sizes() == at::IntArrayRef(shape), kSource, ": tensor '", name,
                "' has shape ", ShapeString(it->second.sizes()), ", expected ", ShapeString(shape));
  const at::Tensor t = it->second.to(at::kCPU).contiguous().to(at::kFloat).contiguous();
  Mat m;
  m.rows = rows;
  m.cols = cols == 0 ? 1 : cols;
  const float* p = t.data_ptr<float>();
  m.data.assign(p, p + rows * m.cols);
  return m;
}

// out[r] = sum_c W[r, c] * x[c]  (+ bias[r])
std::vector<double> MatVec(const Mat& w, const std::vector<double>& x, const Mat* bias = nullptr) {
  std::vector<double> out(w.rows);
  for (int64_t r = 0; r < w.rows; ++r) {
    const float* row = w.data.data() + r * w.cols;
    double acc = 0.0;
    for (int64_t c = 0; c < w.cols; ++c) acc += static_cast<double>(row[c]) * x[c];
    out[r] = acc + (bias != nullptr ? bias->data[r] : 0.0);
  }
  return out;
}

// In place: x[offset .. offset+n) = x * 1/sqrt(mean(x^2) + eps) * w.
void RmsNorm(std::vector<double>& x, int64_t offset, int64_t n, const Mat& w, double eps) {
  double sum_sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sum_sq += x[offset + i] * x[offset + i];
  const double scale = 1.0 / std::sqrt(sum_sq / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[offset + i] = x[offset + i] * scale * w.data[i];
}

// Rotates every head of `x` ([n_heads * head_dim]) for position `pos`.
void Rope(std::vector<double>& x, int64_t n_heads, int64_t head_dim, bool interleaved,
          const std::vector<double>& cos_t, const std::vector<double>& sin_t) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    double* v = x.data() + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      // Pair (a, b): adjacent elements (llama2.c / Meta) or the two halves (HF rotate_half).
      const int64_t ia = interleaved ? 2 * i : i;
      const int64_t ib = interleaved ? 2 * i + 1 : i + half;
      const double a = v[ia];
      const double b = v[ib];
      v[ia] = a * cos_t[i] - b * sin_t[i];
      v[ib] = a * sin_t[i] + b * cos_t[i];
    }
  }
}

struct RefLayer {
  Mat attn_norm, wq, wk, wv, bq, bk, bv, q_norm, k_norm, wo, ffn_norm, gate, up, down;
};

// Layer l's weights from the HF tensor names, shapes checked.
RefLayer LoadLayer(const LlamaConfig& config, const std::map<std::string, at::Tensor>& hf_tensors,
                   int64_t l) {
  const int64_t dim = config.dim, hd = config.head_dim, hidden = config.hidden_dim;
  const int64_t q_dim = config.n_heads * hd, kv_dim = config.n_kv_heads * hd;
  RefLayer L;
  const std::string p = "model.layers." + std::to_string(l) + ".";
  L.attn_norm = Load(hf_tensors, p + "input_layernorm.weight", dim, 0);
  L.wq = Load(hf_tensors, p + "self_attn.q_proj.weight", q_dim, dim);
  L.wk = Load(hf_tensors, p + "self_attn.k_proj.weight", kv_dim, dim);
  L.wv = Load(hf_tensors, p + "self_attn.v_proj.weight", kv_dim, dim);
  if (config.qkv_bias) {
    L.bq = Load(hf_tensors, p + "self_attn.q_proj.bias", q_dim, 0);
    L.bk = Load(hf_tensors, p + "self_attn.k_proj.bias", kv_dim, 0);
    L.bv = Load(hf_tensors, p + "self_attn.v_proj.bias", kv_dim, 0);
  }
  if (config.qk_norm) {
    L.q_norm = Load(hf_tensors, p + "self_attn.q_norm.weight", hd, 0);
    L.k_norm = Load(hf_tensors, p + "self_attn.k_norm.weight", hd, 0);
  }
  L.wo = Load(hf_tensors, p + "self_attn.o_proj.weight", dim, q_dim);
  L.ffn_norm = Load(hf_tensors, p + "post_attention_layernorm.weight", dim, 0);
  L.gate = Load(hf_tensors, p + "mlp.gate_proj.weight", hidden, dim);
  L.up = Load(hf_tensors, p + "mlp.up_proj.weight", hidden, dim);
  L.down = Load(hf_tensors, p + "mlp.down_proj.weight", dim, hidden);
  return L;
}

}  // namespace

std::vector<std::vector<float>> ReferenceForward(
    const LlamaConfig& config, const std::map<std::string, at::Tensor>& hf_tensors,
    const std::vector<int32_t>& tokens) {
  config.Validate(kSource);
  const int64_t dim = config.dim, n_heads = config.n_heads, n_kv = config.n_kv_heads;
  const int64_t hd = config.head_dim, hidden = config.hidden_dim, vocab = config.vocab_size;
  const int64_t q_dim = n_heads * hd, kv_dim = n_kv * hd;
  const int64_t group = n_heads / n_kv;
  const double eps = config.norm_eps;
  const int64_t n_tokens = static_cast<int64_t>(tokens.size());
  for (int64_t t = 0; t < n_tokens; ++t) {
    SPECBED_CHECK(tokens[t] >= 0 && tokens[t] < vocab, kSource, ": token ", tokens[t],
                  " at position ", t, " is outside the vocabulary [0, ", vocab, ")");
  }

  const Mat embed = Load(hf_tensors, "model.embed_tokens.weight", vocab, dim);
  const Mat final_norm = Load(hf_tensors, "model.norm.weight", dim, 0);
  const Mat head = config.tie_embeddings ? embed : Load(hf_tensors, "lm_head.weight", vocab, dim);
  std::vector<RefLayer> layers;
  for (int64_t l = 0; l < config.n_layers; ++l) layers.push_back(LoadLayer(config, hf_tensors, l));

  const std::vector<double> inv_freq = RopeInverseFrequencies(config);
  // Per layer: keys/values of every position so far, [position][kv_dim].
  std::vector<std::vector<double>> k_cache(config.n_layers), v_cache(config.n_layers);
  for (int64_t l = 0; l < config.n_layers; ++l) {
    k_cache[l].resize(n_tokens * kv_dim);
    v_cache[l].resize(n_tokens * kv_dim);
  }

  std::vector<std::vector<float>> logits(n_tokens, std::vector<float>(vocab));
  const double attn_scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> scores(n_tokens);
  for (int64_t pos = 0; pos < n_tokens; ++pos) {
    std::vector<double> cos_t(hd / 2), sin_t(hd / 2);
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double angle = static_cast<double>(pos) * inv_freq[i];
      cos_t[i] = std::cos(angle);
      sin_t[i] = std::sin(angle);
    }
    std::vector<double> x(dim);
    for (int64_t c = 0; c < dim; ++c) x[c] = embed.data[tokens[pos] * dim + c];

    for (int64_t l = 0; l < config.n_layers; ++l) {
      const RefLayer& L = layers[l];
      // Attention block.
      std::vector<double> xn = x;
      RmsNorm(xn, 0, dim, L.attn_norm, eps);
      std::vector<double> q = MatVec(L.wq, xn, config.qkv_bias ? &L.bq : nullptr);
      std::vector<double> k = MatVec(L.wk, xn, config.qkv_bias ? &L.bk : nullptr);
      std::vector<double> v = MatVec(L.wv, xn, config.qkv_bias ? &L.bv : nullptr);
      if (config.qk_norm) {
        for (int64_t h = 0; h < n_heads; ++h) RmsNorm(q, h * hd, hd, L.q_norm, eps);
        for (int64_t h = 0; h < n_kv; ++h) RmsNorm(k, h * hd, hd, L.k_norm, eps);
      }
      Rope(q, n_heads, hd, config.rope_interleaved, cos_t, sin_t);
      Rope(k, n_kv, hd, config.rope_interleaved, cos_t, sin_t);
      std::copy(k.begin(), k.end(), k_cache[l].begin() + pos * kv_dim);
      std::copy(v.begin(), v.end(), v_cache[l].begin() + pos * kv_dim);

      std::vector<double> attn(q_dim, 0.0);
      for (int64_t h = 0; h < n_heads; ++h) {
        const int64_t kvh = h / group;  // GQA: consecutive query heads share a kv head
        const double* qh = q.data() + h * hd;
        double max_score = -INFINITY;
        for (int64_t j = 0; j <= pos; ++j) {
          const double* kj = k_cache[l].data() + j * kv_dim + kvh * hd;
          double dot = 0.0;
          for (int64_t d = 0; d < hd; ++d) dot += qh[d] * kj[d];
          scores[j] = dot * attn_scale;
          max_score = std::max(max_score, scores[j]);
        }
        double denom = 0.0;
        for (int64_t j = 0; j <= pos; ++j) {
          scores[j] = std::exp(scores[j] - max_score);
          denom += scores[j];
        }
        double* out = attn.data() + h * hd;
        for (int64_t j = 0; j <= pos; ++j) {
          const double p = scores[j] / denom;
          const double* vj = v_cache[l].data() + j * kv_dim + kvh * hd;
          for (int64_t d = 0; d < hd; ++d) out[d] += p * vj[d];
        }
      }
      const std::vector<double> attn_out = MatVec(L.wo, attn);
      for (int64_t c = 0; c < dim; ++c) x[c] += attn_out[c];

      // SwiGLU MLP block.
      xn = x;
      RmsNorm(xn, 0, dim, L.ffn_norm, eps);
      const std::vector<double> g = MatVec(L.gate, xn);
      const std::vector<double> u = MatVec(L.up, xn);
      std::vector<double> act(hidden);
      for (int64_t i = 0; i < hidden; ++i) act[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const std::vector<double> mlp_out = MatVec(L.down, act);
      for (int64_t c = 0; c < dim; ++c) x[c] += mlp_out[c];
    }

    RmsNorm(x, 0, dim, final_norm, eps);
    const std::vector<double> row = MatVec(head, x);
    for (int64_t v = 0; v < vocab; ++v) logits[pos][v] = static_cast<float>(row[v]);
  }
  return logits;
}

}  // namespace specbed
