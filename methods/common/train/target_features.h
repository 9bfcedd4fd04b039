// Target features for drafter training (EAGLE-3, DFlash, ...): padded batches of regen
// sequences (MakeSequenceBatch) and the target's hidden states (chosen layers, concatenated) and
// full-vocabulary logits at every position of them, from one of two sources:
//   "online": runs the target over the batch (no grad) every time;
//   "disk":   DiskFeatureCache, built once: per-sequence hidden states of the chosen layers and of
//             the last layer (pre-norm) in safetensors shards + manifest.json; logits are
//             recomputed from the last layer with the target's final norm and head, so the
//             full-vocabulary logits are never stored.
// Both return the same thing (float32 storage: equal to ~1e-5). Formats and knobs:
// methods/common/train/README.md ("Target features (online / disk)").
// Checked by: tests/train/regen_test.cpp (batch padding/mask, disk == online in F32 and within
// bf16 rounding in BF16, manifest mismatch errors, rebuild, resumed builds).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/common/train/regen.h"
#include "models/checkpoint/safetensors.h"
#include "models/llama_model.h"

namespace specbed {

struct SequenceBatch {
  // Built on the CPU by MakeSequenceBatch; BatchOnDevice moves them (the training device).
  at::Tensor tokens;   // int64 [B, T], right-padded with 0; T = the longest cropped row
  at::Tensor lengths;  // int64 [B]: min(sequence length, max_len)
  // float32 [B, T]: 1 where the NEXT token (t + 1) is a response token and t + 1 < length,
  // else 0 (prompt positions except the last, the last position, padding).
  at::Tensor loss_mask;
};

// Rows `rows` (indices into `data`, any order, repeats allowed) as a padded batch. A sequence
// longer than `max_len` (>= 1) is cropped to its first max_len tokens (its response is cut; a
// prompt of >= max_len tokens leaves no loss positions).
SequenceBatch MakeSequenceBatch(const RegenData& data, const std::vector<int64_t>& rows,
                                int64_t max_len);
// `batch` with every tensor on `device`: one copy each off the CPU, the same tensors on it.
SequenceBatch BatchOnDevice(const SequenceBatch& batch, const at::Device& device);

struct TargetFeatures {
  // float32 [B, T, n_layers * target_dim] on the target's device: the requested hidden_states
  // layers (HF indexing:
  // 0 = embeddings, l = output of decoder layer l, before the final norm) concatenated along the
  // last dimension in the requested order. 0 at padding positions (t >= lengths[b]).
  at::Tensor hidden;
  // float32 [B, T, vocab] on the target's device: the target's logits; 0 at padding positions.
  at::Tensor logits;
};

class TargetFeatureSource {
 public:
  virtual ~TargetFeatureSource() = default;
  // Features of the batch made by MakeSequenceBatch(data, rows, max_len). The disk source reads
  // by `rows` (and checks the batch's lengths against what it stored); the online source runs
  // the target on batch.tokens. `batch` may be on the host (as MakeSequenceBatch makes it) or on
  // the target's device; the features come on the target's device.
  virtual TargetFeatures Get(const std::vector<int64_t>& rows, const SequenceBatch& batch) = 0;
  // The hidden_states layers of TargetFeatures::hidden, in order.
  virtual const std::vector<int64_t>& layers() const = 0;
  virtual std::string name() const = 0;  // "online" | "disk"
};

class OnlineFeatureSource : public TargetFeatureSource {
 public:
  // `target` must outlive the source. Layers in [0, n_layers] (repeats allowed).
  OnlineFeatureSource(LlamaModel& target, std::vector<int64_t> layers);
  TargetFeatures Get(const std::vector<int64_t>& rows, const SequenceBatch& batch) override;
  const std::vector<int64_t>& layers() const override { return layers_; }
  std::string name() const override { return "online"; }

 private:
  LlamaModel& target_;
  std::vector<int64_t> layers_;
};

struct DiskFeatureCacheOptions {
  // A directory holding a cache with other settings: false = specbed::Error naming the setting;
  // true = delete it and build afresh.
  bool rebuild = false;
  int64_t build_batch_tokens = 4096;         // padded tokens per target forward while building
  int64_t shard_bytes = int64_t{256} << 20;  // a shard is closed once it holds this many bytes
  bool verbose = false;                      // progress bar on stderr while building
};

class DiskFeatureCache : public TargetFeatureSource {
 public:
  // Builds the cache of `data` (sequences cropped to `max_len` tokens) in `dir`, or reuses it
  // when dir/manifest.json records the same settings (target weight fingerprint and dtype,
  // layers, store dtype, max_len, data fingerprint). Shards finished by an interrupted build are
  // kept. store_dtype: kF32, kBF16 or kF16. Throws specbed::Error on a settings mismatch unless
  // options.rebuild. `target` must outlive the cache.
  static std::unique_ptr<DiskFeatureCache> Build(
      LlamaModel& target, const RegenData& data, const std::vector<int64_t>& layers,
      int64_t max_len, const std::string& dir,
      SafetensorsDtype store_dtype = SafetensorsDtype::kF32,
      const DiskFeatureCacheOptions& options = {});
  // Opens a complete cache; its target fingerprint and dtype must match `target`.
  static std::unique_ptr<DiskFeatureCache> Open(LlamaModel& target, const std::string& dir);

  TargetFeatures Get(const std::vector<int64_t>& rows, const SequenceBatch& batch) override;
  const std::vector<int64_t>& layers() const override { return layers_; }
  std::string name() const override { return "disk"; }

  const nlohmann::ordered_json& manifest() const { return manifest_; }
  int64_t size() const { return static_cast<int64_t>(lengths_.size()); }  // sequences
  int64_t stored_length(int64_t row) const { return lengths_.at(row); }   // min(length, max_len)
  bool reused() const { return reused_; }  // Build found the cache complete

 private:
  struct Shard;
  DiskFeatureCache(LlamaModel& target, std::string dir, nlohmann::ordered_json manifest);

  LlamaModel& target_;
  std::string dir_;
  nlohmann::ordered_json manifest_;
  std::vector<int64_t> layers_;   // requested (TargetFeatures::hidden order)
  std::vector<int64_t> slot_of_;  // position of each requested layer among the stored ones
  int64_t final_slot_ = 0;        // position of layer n_layers among the stored ones
  int64_t n_stored_ = 0;          // stored layers per position
  SafetensorsDtype store_dtype_ = SafetensorsDtype::kF32;
  std::vector<int64_t> lengths_;      // per sequence
  std::vector<int64_t> shard_first_;  // first sequence of each shard
  std::vector<std::shared_ptr<Shard>> shards_;
  bool reused_ = false;
};

struct TargetFeatureOptions {
  std::string source = "online";  // "online" | "disk"
  std::vector<int64_t> layers;    // hidden_states layers, in the order wanted
  int64_t max_len = 0;            // disk: crop length of the cached sequences (0 = max_seq_len)
  std::string cache_dir;          // disk: required
  SafetensorsDtype store_dtype = SafetensorsDtype::kF32;  // disk
  DiskFeatureCacheOptions disk;                           // disk
};

// "online", "disk".
std::vector<std::string> TargetFeatureSourceNames();

// The disk cache storage dtype of a `--feature-dtype` value: float32 | bfloat16 | float16.
// Throws specbed::Error naming `who` and the flag otherwise.
SafetensorsDtype ParseFeatureStoreDtype(const std::string& name, const std::string& who);

// The source named options.source (unknown names fail listing the known ones). "disk" builds or
// reuses the cache of `data` first.
std::unique_ptr<TargetFeatureSource> MakeTargetFeatureSource(LlamaModel& target,
                                                             const RegenData& data,
                                                             const TargetFeatureOptions& options);

}  // namespace specbed
