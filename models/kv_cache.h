// Preallocated key/value cache for one batch of sequences that advance in lockstep.
// Layout per layer: K and V as [batch, n_kv_heads, max_len, head_dim] (contiguous per head, so
// attention streams rows). `length()` positions are filled; LlamaModel::Forward appends the new
// tokens' keys/values at [length, length + T) and advances length. Speculative methods append a
// draft tree, then keep only the accepted nodes: KeepPositions gathers them into place.
// Checked by: tests/engine/llama_model_test.cpp (truncate / keep vs. a fresh forward).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "models/llama_config.h"

namespace specbed {

class KvCache {
 public:
  KvCache() = default;
  // Allocates [n_layers, 2, batch, n_kv_heads, max_len, head_dim] of `dtype` on `device`.
  KvCache(const LlamaConfig& config, int64_t batch, int64_t max_len, at::ScalarType dtype,
          at::Device device = at::kCPU);

  int64_t length() const { return length_; }
  int64_t max_len() const { return max_len_; }
  int64_t batch() const { return batch_; }
  int64_t n_layers() const { return n_layers_; }
  bool defined() const { return storage_.defined(); }
  at::ScalarType dtype() const { return storage_.scalar_type(); }
  at::Device device() const { return storage_.device(); }
  // The whole storage, [n_layers, 2, batch, n_kv_heads, max_len, head_dim].
  const at::Tensor& storage() const { return storage_; }

  // Keys / values of `layer`: [batch, n_kv_heads, max_len, head_dim] views (all slots, filled or
  // not).
  at::Tensor keys(int64_t layer) const;
  at::Tensor values(int64_t layer) const;
  // Raw storage of `layer`'s keys (kv = 0) or values (kv = 1), laid out as keys()/values();
  // for the forward's hot loop, which must not build tensor views per layer.
  void* LayerData(int64_t layer, int kv) const {
    return static_cast<uint8_t*>(storage_.data_ptr()) +
           (layer * 2 + kv) * batch_ * n_kv_heads_ * max_len_ * head_dim_ * storage_.element_size();
  }

  // Drops every position >= new_length (0 <= new_length <= length()).
  void Truncate(int64_t new_length);
  // Sets length after a forward wrote [length, new_length) (called by LlamaModel).
  void Advance(int64_t n_tokens);
  // Keeps, for every sequence b, the cache rows indices[b][0..K) (absolute positions, strictly
  // increasing, each >= committed_length and < length()), moving them to
  // [committed_length, committed_length + K); then length = committed_length + K.
  // indices: [batch, K] int64 CPU (validated there). Rows already in place are not copied; the
  // move runs on the cache's device (kernels/kv_compact.h).
  void KeepPositions(int64_t committed_length, const at::Tensor& indices);

 private:
  at::Tensor storage_;  // [n_layers, 2, batch, n_kv_heads, max_len, head_dim]
  int64_t n_layers_ = 0, batch_ = 0, n_kv_heads_ = 0, max_len_ = 0, head_dim_ = 0;
  int64_t length_ = 0;
};

}  // namespace specbed
