// EAGLE-3 draft head forward on CPU, float32 (see eagle3_head.h for the row convention).
// Checked by: tests/methods/eagle3_head_test.cpp.
#include "methods/eagle3/eagle3_head.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "methods/common/head_aten.h"
#include "methods/common/head_kernels.h"
#include "methods/eagle3/eagle3_checkpoint.h"
#include "models/device.h"
#include "models/tensor_util.h"

namespace specbed {
namespace {

// Rotates `n_heads` vectors of `head_dim` from src into dst (rotate_half pairing: i with
// i + head_dim/2).
void RopeHeads(const float* src, float* dst, int64_t n_heads, int64_t head_dim, const float* cos,
               const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_heads; ++h) {
    const float* s = src + h * head_dim;
    float* d = dst + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float x0 = s[i], x1 = s[i + half];
      d[i] = x0 * cos[i] - x1 * sin[i];
      d[i + half] = x1 * cos[i] + x0 * sin[i];
    }
  }
}

at::Tensor Rows(const at::Tensor& buffer, int64_t n) {
  return buffer.narrow(0, 0, n);
}

}  // namespace

const float* Eagle3HeadOutput::hidden_row(int64_t i) const {
  SPECBED_CHECK(hidden.is_cpu() && hidden.scalar_type() == at::kFloat,
                "Eagle3HeadOutput::hidden_row: the hidden states are ", hidden.scalar_type(),
                " on ", hidden.device(), ", not float32 CPU");
  return hidden.data_ptr<float>() + i * hidden.stride(0);
}

const float* Eagle3HeadOutput::logits_row(int64_t i) const {
  SPECBED_CHECK(logits.is_cpu(), "Eagle3HeadOutput::logits_row: the logits are on ",
                logits.device(), ", not the CPU");
  return logits.data_ptr<float>() + i * logits.stride(0);
}

namespace {

// The target's embedding for the head (the checkpoint has none): as it is on the ATen path;
// float32 or bfloat16 CPU for the row loops.
at::Tensor TargetEmbeddingFor(const Eagle3Config& config, const at::Tensor& target_embedding,
                              const HeadPlacement& placement) {
  const int64_t v = config.vocab_size, h = config.hidden_size;
  SPECBED_CHECK(target_embedding.defined(), "Eagle3Head: the head has no ", kEagle3Embed,
                ", so the target's token embedding [", v, ", ", h, "] is required");
  SPECBED_CHECK(
      target_embedding.dim() == 2 && target_embedding.size(0) == v && target_embedding.size(1) == h,
      "Eagle3Head: target token embedding has shape ", ShapeString(target_embedding.sizes()),
      ", expected [vocab_size, hidden_size] = [", v, ", ", h,
      "] (head and target must share vocabulary and hidden size)");
  SPECBED_CHECK(target_embedding.is_floating_point(),
                "Eagle3Head: target token embedding must be a float tensor, got ",
                c10::toString(target_embedding.scalar_type()));
  if (placement.aten) return PlaceWeight(target_embedding, placement);  // shared when it matches
  at::Tensor e = target_embedding.to(at::kCPU);
  if (e.scalar_type() != at::kFloat && e.scalar_type() != at::kBFloat16) e = e.to(at::kFloat);
  return e.contiguous();
}

// Fills the draft <-> target vocabulary maps from d2t (identity when absent).
void BuildVocabMaps(const std::map<std::string, at::Tensor>& tensors, Eagle3Weights& w) {
  const int64_t vd = w.config.draft_vocab_size;
  w.draft_to_target.assign(vd, 0);
  w.target_to_draft.assign(w.config.vocab_size, -1);
  at::Tensor d2t;
  if (tensors.count(kEagle3D2t)) d2t = tensors.at(kEagle3D2t).to(at::kCPU).contiguous();
  at::Tensor ids = at::empty({vd}, at::kLong);
  for (int64_t d = 0; d < vd; ++d) {
    const int64_t target = d + (d2t.defined() ? d2t.data_ptr<int64_t>()[d] : 0);
    w.draft_to_target[d] = static_cast<int32_t>(target);
    w.target_to_draft[target] = static_cast<int32_t>(d);
    ids.data_ptr<int64_t>()[d] = target;
  }
  w.draft_to_target_t = ids.to(w.placement.device);
}

std::shared_ptr<const Eagle3Weights> NonNullWeights(std::shared_ptr<const Eagle3Weights> w) {
  SPECBED_CHECK(w != nullptr, "Eagle3Head: no weights");
  return w;
}

std::atomic<int64_t> g_forwards{0};

}  // namespace

int64_t Eagle3HeadForwards() {
  return g_forwards.load(std::memory_order_relaxed);
}

Eagle3Weights::Eagle3Weights(const Eagle3Config& config_in,
                             const std::map<std::string, at::Tensor>& tensors,
                             const at::Tensor& target_embedding, const HeadPlacement& placement_in)
    : config(config_in), placement(placement_in) {
  ValidateEagle3Tensors(config, tensors, "Eagle3Head");
  auto get = [&](const char* name) { return PlaceWeight(tensors.at(name), placement); };
  auto norm = [&](const char* name) { return PlaceNormWeight(tensors.at(name), placement); };
  fc = get(kEagle3Fc);
  wqkv = at::cat({get(kEagle3QProj), get(kEagle3KProj), get(kEagle3VProj)}, 0).contiguous();
  wo = get(kEagle3OProj);
  w_gate_up = at::cat({get(kEagle3GateProj), get(kEagle3UpProj)}, 0).contiguous();
  w_down = get(kEagle3DownProj);
  lm_head = get(kEagle3LmHead);
  fc_t = fc.t();
  wqkv_t = wqkv.t();
  wo_t = wo.t();
  w_gate_up_t = w_gate_up.t();
  w_down_t = w_down.t();
  lm_head_t = lm_head.t();
  hidden_norm = norm(kEagle3HiddenNorm);
  input_norm = norm(kEagle3InputNorm);
  post_norm = norm(kEagle3PostNorm);
  final_norm = norm(kEagle3FinalNorm);
  owns_embedding = tensors.count(kEagle3Embed) > 0;
  embedding =
      owns_embedding ? get(kEagle3Embed) : TargetEmbeddingFor(config, target_embedding, placement);
  parameter_count =
      config.ParameterCount() + (owns_embedding ? config.vocab_size * config.hidden_size : 0);
  BuildVocabMaps(tensors, *this);
  inv_freq = RopeInverseFrequencies(config.RopeConfig());
}

Eagle3Head::Eagle3Head(const Eagle3Config& config, const std::map<std::string, at::Tensor>& tensors,
                       const at::Tensor& target_embedding, const HeadPlacement& placement)
    : Eagle3Head(
          std::make_shared<const Eagle3Weights>(config, tensors, target_embedding, placement)) {}

Eagle3Head::Eagle3Head(std::shared_ptr<const Eagle3Weights> weights)
    : w_(NonNullWeights(std::move(weights))), config_(w_->config), placement_(w_->placement) {
  EnsureRope(256);
  EnsureRows(16);
}

void Eagle3Head::EnsureRows(int64_t n) {
  if (n <= row_capacity_) return;
  row_capacity_ = std::max(n, 2 * row_capacity_);
  const auto opts = at::TensorOptions().dtype(at::kFloat);
  const int64_t h = config_.hidden_size, inter = config_.intermediate_size;
  g_ = at::empty({row_capacity_, h}, opts);
  x_ = at::empty({row_capacity_, 2 * h}, opts);
  qkv_ = at::empty({row_capacity_, config_.qkv_dim()}, opts);
  q_ = at::empty({row_capacity_, config_.q_dim()}, opts);
  attn_ = at::empty({row_capacity_, config_.q_dim()}, opts);
  hn_ = at::empty({row_capacity_, h}, opts);
  gate_up_ = at::empty({row_capacity_, 2 * inter}, opts);
  act_ = at::empty({row_capacity_, inter}, opts);
}

void Eagle3Head::EnsureRope(int64_t max_position) {
  GrowRopeTable(w_->inv_freq, max_position, rope_cos_, rope_sin_, rope_capacity_);
}

void Eagle3Head::ResetCache(int64_t capacity) {
  SPECBED_CHECK(capacity >= 1, "Eagle3Head::ResetCache: capacity must be positive, got ", capacity);
  if (capacity > cache_capacity_) {
    const int64_t n_kv = config_.n_kv_heads, hd = config_.head_dim;
    if (placement_.aten) {
      const auto opts = at::TensorOptions(placement_.dtype).device(placement_.device);
      k_cache_t_ = at::zeros({n_kv, capacity, hd}, opts);
      v_cache_t_ = at::zeros({n_kv, capacity, hd}, opts);
    } else {
      k_cache_.assign(static_cast<size_t>(n_kv * capacity * hd), 0.f);
      v_cache_.assign(static_cast<size_t>(n_kv * capacity * hd), 0.f);
    }
    cache_capacity_ = capacity;
  }
  cache_length_ = 0;
}

void Eagle3Head::TruncateCache(int64_t length) {
  SPECBED_CHECK(length >= 0 && length <= cache_length_, "Eagle3Head::TruncateCache: length ",
                length, " outside [0, cache_length = ", cache_length_, "]");
  cache_length_ = length;
}

int64_t Eagle3Head::CheckRows(int64_t feature_width, const int32_t* tokens,
                              const int64_t* positions, int64_t n) const {
  const int64_t h = config_.hidden_size, fc_in = config_.fc_in_dim(), vocab = config_.vocab_size;
  SPECBED_CHECK(n >= 1, "Eagle3Head::Forward: no rows (n = ", n, ")");
  SPECBED_CHECK(tokens != nullptr, "Eagle3Head::Forward: features and tokens are required");
  SPECBED_CHECK(feature_width == h || feature_width == fc_in, "Eagle3Head::Forward: feature width ",
                feature_width, ", expected ", fc_in, " (", kEagle3AuxLayers,
                " target hidden states of ", config_.target_hidden_size, ") or ", h,
                " (the head's own hidden state)");
  const int64_t n_slots = cache_length_ + n;
  SPECBED_CHECK(n_slots <= cache_capacity_, "Eagle3Head::Forward: ", cache_length_, " cached + ", n,
                " new rows exceed the cache capacity ", cache_capacity_, " (see ResetCache)");
  int64_t max_position = n_slots;
  for (int64_t i = 0; i < n; ++i) {
    SPECBED_CHECK(tokens[i] >= 0 && tokens[i] < vocab, "Eagle3Head::Forward: token id ", tokens[i],
                  " (row ", i, ") outside the vocabulary [0, ", vocab, ")");
    if (positions != nullptr) {
      SPECBED_CHECK(positions[i] >= 0, "Eagle3Head::Forward: negative position ", positions[i],
                    " (row ", i, ")");
      max_position = std::max(max_position, positions[i] + 1);
    }
  }
  return max_position;
}

void Eagle3Head::Forward(const at::Tensor& features, const int32_t* tokens,
                         const int64_t* positions, int64_t n, const uint8_t* mask,
                         Eagle3HeadOutput& out) {
  SPECBED_CHECK(features.defined() && features.dim() == 2 && features.size(0) == n,
                "Eagle3Head::Forward: features must be [n = ", n, ", width], got ",
                features.defined() ? ShapeString(features.sizes()) : std::string("undefined"));
  if (!placement_.aten) {
    const at::Tensor host = features.to(at::kCPU, at::kFloat).contiguous();
    Forward(host.data_ptr<float>(), host.size(1), tokens, positions, n, mask, out);
    return;
  }
  ForwardBatch({StageRows(features, tokens, positions, n, mask, out)});
}

void Eagle3Head::Forward(const float* features, int64_t feature_width, const int32_t* tokens,
                         const int64_t* positions, int64_t n, const uint8_t* mask,
                         Eagle3HeadOutput& out) {
  SPECBED_CHECK(features != nullptr, "Eagle3Head::Forward: features and tokens are required");
  if (placement_.aten) {
    const at::Tensor f = at::from_blob(const_cast<float*>(features), {n, feature_width},
                                       at::TensorOptions().dtype(at::kFloat));
    ForwardBatch({StageRows(f.clone(), tokens, positions, n, mask, out)});  // features may alias
    return;
  }
  const int64_t max_position = CheckRows(feature_width, tokens, positions, n);
  g_forwards.fetch_add(1, std::memory_order_relaxed);
  EnsureRows(n);
  EnsureRope(max_position);
  EnsureOutput(n, out);
  at::Tensor hid = Rows(out.hidden_buffer, n);
  FuseRows(features, feature_width, tokens, n, hid);
  RotateIntoCache(positions, n);
  at::Tensor attn = Rows(attn_, n);
  AttendRows(n, mask, attn);
  hid.addmm_(attn, w_->wo_t);  // h = r + o_proj(attn)
  at::Tensor logits = Rows(out.logits_buffer, n);
  MlpAndLogits(n, hid, logits);
  cache_length_ += n;
  out.n = n;
  out.hidden = hid;
  out.logits = logits;
}

void Eagle3Head::EnsureOutput(int64_t n, Eagle3HeadOutput& out) const {
  const int64_t h = config_.hidden_size, vd = config_.draft_vocab_size;
  const int64_t rows = std::max<int64_t>(n, row_capacity_);
  if (!out.hidden_buffer.defined() || out.hidden_buffer.size(0) < n ||
      out.hidden_buffer.size(1) != h) {
    out.hidden_buffer = at::empty({rows, h}, at::TensorOptions().dtype(at::kFloat));
  }
  if (!out.logits_buffer.defined() || out.logits_buffer.size(0) < n ||
      out.logits_buffer.size(1) != vd) {
    out.logits_buffer = at::empty({rows, vd}, at::TensorOptions().dtype(at::kFloat));
  }
}

void Eagle3Head::FuseRows(const float* features, int64_t feature_width, const int32_t* tokens,
                          int64_t n, at::Tensor& hid) {
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  // g: fused target features (fc) or the head's own hidden. Consumes `features` before any
  // output is written, so they may alias out.hidden.
  at::Tensor g = Rows(g_, n);
  float* gp = g.data_ptr<float>();
  if (feature_width != h) {
    at::Tensor f = at::from_blob(const_cast<float*>(features), {n, feature_width},
                                 at::TensorOptions().dtype(at::kFloat));
    at::mm_out(g, f, w_->fc_t);
  } else {
    std::memcpy(gp, features, static_cast<size_t>(n * h) * sizeof(float));
  }
  // x = [input_layernorm(embed(token)) | hidden_norm(g)]; residual r -> hid.
  float* hp = hid.data_ptr<float>();
  float* xp = x_.data_ptr<float>();
  const float* in_norm = w_->input_norm.data_ptr<float>();
  const float* hid_norm = w_->hidden_norm.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    float* xrow = xp + i * 2 * h;
    const int64_t id = tokens[i];
    if (w_->embedding.scalar_type() == at::kFloat) {
      RmsNormRow(w_->embedding.data_ptr<float>() + id * h, in_norm, xrow, h, eps);
    } else {
      RmsNormRow(w_->embedding.data_ptr<c10::BFloat16>() + id * h, in_norm, xrow, h, eps);
    }
    RmsNormRow(gp + i * h, hid_norm, xrow + h, h, eps);
    std::memcpy(hp + i * h, config_.norm_before_residual ? xrow + h : gp + i * h,
                static_cast<size_t>(h) * sizeof(float));
  }
}

void Eagle3Head::RotateIntoCache(const int64_t* positions, int64_t n) {
  const int64_t hd = config_.head_dim, n_heads = config_.n_heads, n_kv = config_.n_kv_heads,
                qkv_dim = config_.qkv_dim(), q_dim = config_.q_dim();
  const int64_t past = cache_length_, half = hd / 2, cap = cache_capacity_;
  at::Tensor qkv = Rows(qkv_, n);
  at::mm_out(qkv, Rows(x_, n), w_->wqkv_t);
  const float* qkvp = qkv.data_ptr<float>();
  float* qp = q_.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = positions != nullptr ? positions[i] : past + i;
    const float* c = rope_cos_.data() + pos * half;
    const float* s = rope_sin_.data() + pos * half;
    const float* qsrc = qkvp + i * qkv_dim;
    const float* ksrc = qsrc + q_dim;
    const float* vsrc = ksrc + n_kv * hd;
    RopeHeads(qsrc, qp + i * q_dim, n_heads, hd, c, s);
    const int64_t slot = past + i;
    for (int64_t kh = 0; kh < n_kv; ++kh) {
      RopeHeads(ksrc + kh * hd, k_cache_.data() + (kh * cap + slot) * hd, 1, hd, c, s);
      std::memcpy(v_cache_.data() + (kh * cap + slot) * hd, vsrc + kh * hd,
                  static_cast<size_t>(hd) * sizeof(float));
    }
  }
}

void Eagle3Head::MlpAndLogits(int64_t n, at::Tensor& hid, at::Tensor& logits) {
  const int64_t h = config_.hidden_size, inter = config_.intermediate_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  float* hp = hid.data_ptr<float>();
  at::Tensor hn = Rows(hn_, n);
  float* hnp = hn.data_ptr<float>();
  const float* post = w_->post_norm.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) RmsNormRow(hp + i * h, post, hnp + i * h, h, eps);
  at::Tensor gate_up = Rows(gate_up_, n);
  at::mm_out(gate_up, hn, w_->w_gate_up_t);
  at::Tensor act = Rows(act_, n);
  SwiGluRows(gate_up.data_ptr<float>(), act.data_ptr<float>(), n, inter);
  hid.addmm_(act, w_->w_down_t);  // h += down(silu(gate(post_ln(h))) * up(post_ln(h)))
  const float* fin = w_->final_norm.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) RmsNormRow(hp + i * h, fin, hnp + i * h, h, eps);
  at::mm_out(logits, hn, w_->lm_head_t);  // logits = lm_head(norm(h))
}

void Eagle3Head::AttendRows(int64_t n, const uint8_t* mask, at::Tensor& attn) {
  const int64_t hd = config_.head_dim, n_heads = config_.n_heads, q_dim = config_.q_dim();
  const int64_t past = cache_length_, n_slots = past + n, cap = cache_capacity_;
  const int threads = at::get_num_threads();
  const int64_t stride = cap + hd;  // scores of every slot + one accumulator row
  if (score_stride_ < stride || scores_.size() < static_cast<size_t>(threads * stride)) {
    score_stride_ = stride;
    scores_.assign(static_cast<size_t>(threads * stride), 0.f);
  }
  float* attnp = attn.data_ptr<float>();
  const float* qp = q_.data_ptr<float>();
  const int64_t group = n_heads / config_.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* kc = k_cache_.data();
  const float* vc = v_cache_.data();
  float* scores_base = scores_.data();
  const int64_t sstride = score_stride_;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, n_slots * hd));
  at::parallel_for(0, n * n_heads, grain, [&](int64_t begin, int64_t end) {
    float* scores = scores_base + at::get_thread_num() * sstride;
    float* acc = scores + cap;
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r / n_heads, head = r % n_heads, kh = head / group;
      const float* qrow = qp + i * q_dim + head * hd;
      const float* kbase = kc + kh * cap * hd;
      const float* vbase = vc + kh * cap * hd;
      const uint8_t* mrow = mask != nullptr ? mask + i * n_slots : nullptr;
      float max_score = -INFINITY;
      for (int64_t s = 0; s < n_slots; ++s) {
        const bool allowed = mrow != nullptr ? mrow[s] != 0 : s <= past + i;
        if (!allowed) {
          scores[s] = -INFINITY;
          continue;
        }
        scores[s] = Dot(qrow, kbase + s * hd, hd) * scale;
        max_score = std::max(max_score, scores[s]);
      }
      float* o = attnp + i * q_dim + head * hd;
      if (max_score == -INFINITY) {
        std::fill(o, o + hd, 0.f);
        continue;
      }
      std::fill(acc, acc + hd, 0.f);
      float denom = 0.f;
      for (int64_t s = 0; s < n_slots; ++s) {
        if (scores[s] == -INFINITY) continue;
        const float p = std::exp(scores[s] - max_score);
        denom += p;
        const float* vrow = vbase + s * hd;
        for (int64_t d = 0; d < hd; ++d) acc[d] += p * vrow[d];
      }
      const float inv = 1.0f / denom;
      for (int64_t d = 0; d < hd; ++d) o[d] = acc[d] * inv;
    }
  });
}

Eagle3DeviceRows Eagle3Head::StageRows(const at::Tensor& features, const int32_t* tokens,
                                       const int64_t* positions, int64_t n, const uint8_t* mask,
                                       Eagle3HeadOutput& out) {
  SPECBED_CHECK(placement_.aten, "Eagle3Head::StageRows: the head runs the row loops; use Forward");
  SPECBED_CHECK(features.defined() && features.dim() == 2 && features.size(0) == n,
                "Eagle3Head::Forward: features must be [n = ", n, ", width], got ",
                features.defined() ? ShapeString(features.sizes()) : std::string("undefined"));
  const int64_t max_position = CheckRows(features.size(1), tokens, positions, n);
  const int64_t past = cache_length_, n_slots = past + n;
  const at::Device device = placement_.device;
  // One upload: tokens, positions, mask.
  staging_.Resize(2 * n, mask != nullptr ? n * n_slots : 0);
  int64_t* ints = staging_.ints();
  for (int64_t i = 0; i < n; ++i) {
    ints[i] = tokens[i];
    ints[n + i] = positions != nullptr ? positions[i] : past + i;
  }
  if (mask != nullptr) std::memcpy(staging_.bytes(), mask, static_cast<size_t>(n * n_slots));
  const auto [ints_d, bytes_d] = staging_.Upload(device);
  const at::Tensor allowed =
      mask != nullptr ? bytes_d.view({n, n_slots}).ne(0) : CausalAllowedAten(n, past, device);
  return {this,         features, ints_d.narrow(0, 0, n), ints_d.narrow(0, n, n), allowed,
          max_position, &out};
}

void Eagle3Head::ForwardOnDevice(const at::Tensor& features, const at::Tensor& tokens,
                                 const at::Tensor& positions, const at::Tensor& allowed,
                                 int64_t max_position, Eagle3HeadOutput& out) {
  ForwardBatch({DeviceRows(features, tokens, positions, allowed, max_position, out)});
}

Eagle3DeviceRows Eagle3Head::DeviceRows(const at::Tensor& features, const at::Tensor& tokens,
                                        const at::Tensor& positions, const at::Tensor& allowed,
                                        int64_t max_position, Eagle3HeadOutput& out) {
  const int64_t n = features.size(0), n_slots = cache_length_ + n;
  const at::Device device = placement_.device;
  SPECBED_CHECK(placement_.aten,
                "Eagle3Head::ForwardOnDevice: the head runs the row loops (its "
                "inputs live on the host); use Forward");
  SPECBED_CHECK(n >= 1 && features.dim() == 2 && features.size(1) == config_.hidden_size,
                "Eagle3Head::ForwardOnDevice: features must be [n >= 1, ", config_.hidden_size,
                "], got ", ShapeString(features.sizes()));
  SPECBED_CHECK(
      tokens.dim() == 1 && tokens.size(0) == n && positions.dim() == 1 && positions.size(0) == n &&
          tokens.scalar_type() == at::kLong && positions.scalar_type() == at::kLong &&
          SameDevice(tokens.device(), device) && SameDevice(positions.device(), device),
      "Eagle3Head::ForwardOnDevice: tokens and positions must be int64 [", n, "] on ", device);
  SPECBED_CHECK(allowed.dim() == 2 && allowed.size(0) == n && allowed.size(1) == n_slots &&
                    allowed.scalar_type() == at::kBool && SameDevice(allowed.device(), device),
                "Eagle3Head::ForwardOnDevice: allowed must be bool [", n, ", ", n_slots, "] on ",
                device, ", got ", ShapeString(allowed.sizes()));
  SPECBED_CHECK(n_slots <= cache_capacity_, "Eagle3Head::ForwardOnDevice: ", cache_length_,
                " cached + ", n, " new rows exceed the cache capacity ", cache_capacity_);
  return {this, features, tokens, positions, allowed, std::max(max_position, n_slots), &out};
}

void Eagle3Head::CheckBatch(const std::vector<Eagle3DeviceRows>& rows) {
  SPECBED_CHECK(!rows.empty(), "Eagle3Head::ForwardBatch: no rows");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Eagle3DeviceRows& r = rows[i];
    SPECBED_CHECK(r.head != nullptr && r.out != nullptr, "Eagle3Head::ForwardBatch: sequence ", i,
                  " has no head or no output");
    SPECBED_CHECK(r.head->w_ == rows[0].head->w_ && r.features.size(1) == rows[0].features.size(1),
                  "Eagle3Head::ForwardBatch: sequence ", i,
                  " has another head's weights than sequence 0's or another feature width");
    for (size_t j = 0; j < i; ++j) {
      SPECBED_CHECK(rows[j].head != r.head, "Eagle3Head::ForwardBatch: sequences ", j, " and ", i,
                    " have the same head");
    }
  }
  SPECBED_CHECK(rows[0].head->placement_.aten,
                "Eagle3Head::ForwardBatch: the heads run the row loops");
}

void Eagle3Head::ForwardBatch(const std::vector<Eagle3DeviceRows>& rows, Eagle3HeadOutput* batch) {
  CheckBatch(rows);
  Eagle3Head& lead = *rows[0].head;  // its device RoPE table serves the batch
  const Eagle3Weights& w = *lead.w_;
  int64_t total = 0, max_position = 1;
  std::vector<at::Tensor> features, tokens, positions;
  for (const Eagle3DeviceRows& r : rows) {
    total += r.features.size(0);
    max_position = std::max(max_position, r.max_position);
    features.push_back(r.features);
    tokens.push_back(r.tokens);
    positions.push_back(r.positions);
  }
  auto all = [&](const std::vector<at::Tensor>& parts) {
    return parts.size() == 1 ? parts[0] : at::cat(parts);
  };
  g_forwards.fetch_add(1, std::memory_order_relaxed);
  const Eagle3Config& c = w.config;
  const int64_t h = c.hidden_size, hd = c.head_dim, n_kv = c.n_kv_heads, q_dim = c.q_dim(),
                kv_dim = c.kv_dim();
  const double eps = c.rms_norm_eps;
  const at::Device device = w.placement.device;
  lead.rope_device_.Ensure(w.inv_freq, max_position, device);
  const at::Tensor f = all(features).to(device, w.placement.dtype), pos = all(positions);
  const at::Tensor g = f.size(1) == h ? f : at::mm(f, w.fc_t);
  const at::Tensor gn = RmsNormRowsAten(g, w.hidden_norm, eps);
  const at::Tensor e = RmsNormRowsAten(w.embedding.index_select(0, all(tokens)), w.input_norm, eps);
  const at::Tensor qkv = at::mm(at::cat({e, gn}, 1), w.wqkv_t);
  const at::Tensor cos = lead.rope_device_.Cos(pos), sin = lead.rope_device_.Sin(pos);
  const at::Tensor q =
      RotateHalfRopeAten(qkv.narrow(1, 0, q_dim).view({total, c.n_heads, hd}), cos, sin);
  const at::Tensor k =
      RotateHalfRopeAten(qkv.narrow(1, q_dim, kv_dim).view({total, n_kv, hd}), cos, sin);
  const at::Tensor v = qkv.narrow(1, q_dim + kv_dim, kv_dim).view({total, n_kv, hd});
  std::vector<at::Tensor> attn;
  for (int64_t i = 0, row = 0; i < static_cast<int64_t>(rows.size()); ++i) {
    Eagle3Head& head = *rows[i].head;
    const int64_t n = rows[i].features.size(0), past = head.cache_length_, n_slots = past + n;
    head.k_cache_t_.narrow(1, past, n).copy_(k.narrow(0, row, n).transpose(0, 1));
    head.v_cache_t_.narrow(1, past, n).copy_(v.narrow(0, row, n).transpose(0, 1));
    attn.push_back(MaskedGqaAttentionAten(q.narrow(0, row, n),
                                          head.k_cache_t_.narrow(1, 0, n_slots),
                                          head.v_cache_t_.narrow(1, 0, n_slots), rows[i].allowed,
                                          1.0 / std::sqrt(static_cast<double>(hd))));
    head.cache_length_ = n_slots;
    row += n;
  }
  at::Tensor hid = (c.norm_before_residual ? gn : g) + at::mm(all(attn), w.wo_t);
  hid +=
      at::mm(SwiGluAten(at::mm(RmsNormRowsAten(hid, w.post_norm, eps), w.w_gate_up_t)), w.w_down_t);
  const at::Tensor logits =
      at::mm(RmsNormRowsAten(hid, w.final_norm, eps), w.lm_head_t).to(at::kFloat);
  for (int64_t i = 0, row = 0; i < static_cast<int64_t>(rows.size()); ++i) {
    const int64_t n = rows[i].features.size(0);
    Eagle3HeadOutput& out = *rows[i].out;
    out.logits = logits.narrow(0, row, n);
    out.hidden = hid.narrow(0, row, n);
    out.n = n;
    row += n;
  }
  if (batch != nullptr) {
    batch->logits = logits;
    batch->hidden = hid;
    batch->n = total;
  }
}

}  // namespace specbed
