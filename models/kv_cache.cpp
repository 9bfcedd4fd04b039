// Preallocated KV cache: truncate and in-place gather of kept positions.
#include "models/kv_cache.h"

#include <ATen/ATen.h>

#include "base/error.h"
#include "kernels/kv_compact.h"

namespace specbed {

KvCache::KvCache(const LlamaConfig& config, int64_t batch, int64_t max_len, at::ScalarType dtype,
                 at::Device device)
    : n_layers_(config.n_layers),
      batch_(batch),
      n_kv_heads_(config.n_kv_heads),
      max_len_(max_len),
      head_dim_(config.head_dim) {
  SPECBED_CHECK(batch >= 1 && max_len >= 1,
                "KV cache needs batch >= 1 and max_len >= 1 (got batch=", batch,
                ", max_len=", max_len, ")");
  storage_ = at::zeros({n_layers_, 2, batch_, n_kv_heads_, max_len_, head_dim_},
                       at::TensorOptions(dtype).device(device));
}

at::Tensor KvCache::keys(int64_t layer) const {
  return storage_[layer][0];
}
at::Tensor KvCache::values(int64_t layer) const {
  return storage_[layer][1];
}

void KvCache::Truncate(int64_t new_length) {
  SPECBED_CHECK(new_length >= 0 && new_length <= length_, "KV cache truncate to ", new_length,
                " outside [0, ", length_, "]");
  length_ = new_length;
}

void KvCache::Advance(int64_t n_tokens) {
  SPECBED_CHECK(length_ + n_tokens <= max_len_, "KV cache overflow: ", length_, " + ", n_tokens,
                " > max_len ", max_len_);
  length_ += n_tokens;
}

void KvCache::KeepPositions(int64_t committed_length, const at::Tensor& indices) {
  SPECBED_CHECK(
      indices.dim() == 2 && indices.size(0) == batch_ && indices.scalar_type() == at::kLong,
      "KeepPositions: indices must be int64 [batch=", batch_, ", K]");
  SPECBED_CHECK(committed_length >= 0 && committed_length <= length_,
                "KeepPositions: committed_length ", committed_length, " outside [0, ", length_,
                "]");
  const at::Tensor idx = indices.device().is_cpu() ? indices.contiguous() : indices.cpu();
  const int64_t keep = idx.size(1);
  const int64_t* ip = idx.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch_; ++b) {
    int64_t prev = committed_length - 1;
    for (int64_t j = 0; j < keep; ++j) {
      const int64_t src = ip[b * keep + j];
      SPECBED_CHECK(src > prev && src < length_, "KeepPositions: index ", src,
                    " must be increasing, >= committed_length ", committed_length, " and < length ",
                    length_);
      prev = src;
    }
  }
  CompactKvCache(storage_, committed_length, idx);
  length_ = committed_length + keep;
}

}  // namespace specbed
