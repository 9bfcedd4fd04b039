// Target features for drafter training (see target_features.h and README.md beside it).
// Checked by: tests/train/regen_test.cpp.
#include "methods/common/train/target_features.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <type_traits>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/names.h"
#include "base/progress.h"
#include "base/timer.h"
#include "methods/common/train/param_device.h"
#include "methods/common/train/train_util.h"
#include "models/model_registry.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

constexpr const char* kCacheFormat = "specbed-target-features";
constexpr int64_t kCacheFormatVersion = 1;
constexpr const char* kShardMetadataKey = "specbed_target_features";
constexpr const char* kManifest = "manifest.json";

std::string ShardName(int64_t index) {
  char name[40];
  std::snprintf(name, sizeof(name), "shard-%05lld.safetensors", static_cast<long long>(index));
  return name;
}

at::ScalarType StoreScalarType(SafetensorsDtype dtype) {
  switch (dtype) {
    case SafetensorsDtype::kF32:
      return at::kFloat;
    case SafetensorsDtype::kBF16:
      return at::kBFloat16;
    case SafetensorsDtype::kF16:
      return at::kHalf;
    default:
      Fail("feature cache: store dtype must be F32, BF16 or F16, got ",
           SafetensorsDtypeName(dtype));
  }
}

void CheckLayers(const LlamaModel& target, const std::vector<int64_t>& layers) {
  const int64_t n = target.config().n_layers;
  for (int64_t l : layers) {
    SPECBED_CHECK(l >= 0 && l <= n, "target features: hidden layer ", l, " outside [0, ", n,
                  "] (0 = embeddings, ", n, " = last decoder layer)");
  }
}

// The layers a cache stores: the requested ones without repeats, then the last layer when absent.
std::vector<int64_t> StoredLayers(const std::vector<int64_t>& layers, int64_t n_layers) {
  std::vector<int64_t> stored;
  for (int64_t l : layers) {
    if (std::find(stored.begin(), stored.end(), l) == stored.end()) stored.push_back(l);
  }
  if (std::find(stored.begin(), stored.end(), n_layers) == stored.end()) stored.push_back(n_layers);
  return stored;
}

// The batch's shape against `rows`; returns B and T.
void CheckBatch(const std::vector<int64_t>& rows, const SequenceBatch& batch, int64_t* b,
                int64_t* t) {
  SPECBED_CHECK(
      batch.tokens.defined() && batch.tokens.dim() == 2 && batch.tokens.scalar_type() == at::kLong,
      "target features: batch.tokens must be int64 [B, T]");
  *b = batch.tokens.size(0);
  *t = batch.tokens.size(1);
  SPECBED_CHECK(batch.lengths.defined() && batch.lengths.dim() == 1 &&
                    batch.lengths.size(0) == *b && batch.lengths.scalar_type() == at::kLong,
                "target features: batch.lengths must be int64 [B] with B = ", *b);
  SPECBED_CHECK(static_cast<int64_t>(rows.size()) == *b, "target features: ", rows.size(),
                " rows for a batch of ", *b);
}

// Copies `n` values from a stored row (dtype Src) to float32.
template <typename Src>
void ToFloat(const uint8_t* src, float* dst, int64_t n) {
  if constexpr (std::is_same_v<Src, float>) {
    std::memcpy(dst, src, n * sizeof(float));
  } else {
    const Src* s = reinterpret_cast<const Src*>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
  }
}

// Removes the manifest and the shards (and their .tmp files) with an index >= `from_shard` from
// `dir`; other files are left alone.
void RemoveCacheFiles(const std::string& dir, int64_t from_shard = 0) {
  fs::remove(fs::path(dir) / kManifest);
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("shard-", 0) != 0) continue;
    const int64_t index = std::atoll(name.c_str() + 6);
    if (index >= from_shard) fs::remove(entry.path());
  }
}

ojson ParseManifest(const std::string& path) {
  const ojson m = ojson::parse(ReadFileToString(path), nullptr, /*allow_exceptions=*/false);
  SPECBED_CHECK(m.is_object() && m.value("format", "") == kCacheFormat, path,
                ": not a specbed target-feature manifest (\"format\" != \"", kCacheFormat, "\")");
  SPECBED_CHECK(m.contains("settings") && m["settings"].is_object() && m.contains("shards"), path,
                ": manifest has no 'settings' or 'shards'");
  return m;
}

// Throws naming the first setting that differs between a stored cache and this request.
void CheckSameSettings(const ojson& stored, const ojson& wanted, const std::string& dir) {
  for (const auto& [key, value] : wanted.items()) {
    const bool has = stored.contains(key);
    if (has && stored[key] == value) continue;
    const std::string hint =
        "; rebuild it (DiskFeatureCacheOptions::rebuild) or use another cache directory";
    if (key == "target_fingerprint") {
      Fail("feature cache '", dir, "' was built from other target weights (fingerprint ",
           has ? stored[key].dump() : "none", ", this target's ", value.dump(), ")", hint);
    }
    if (key == "data_fingerprint") {
      Fail("feature cache '", dir, "' was built for other training data (data fingerprint ",
           has ? stored[key].dump() : "none", ", this data's ", value.dump(), ")", hint);
    }
    Fail("feature cache '", dir, "' was built with different settings: '", key, "' is ",
         has ? stored[key].dump() : "absent", " there but ", value.dump(), " now", hint);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Batches.

SequenceBatch BatchOnDevice(const SequenceBatch& batch, const at::Device& device) {
  return {OnDevice(batch.tokens, device), OnDevice(batch.lengths, device),
          OnDevice(batch.loss_mask, device)};
}

SequenceBatch MakeSequenceBatch(const RegenData& data, const std::vector<int64_t>& rows,
                                int64_t max_len) {
  SPECBED_CHECK(max_len >= 1, "MakeSequenceBatch: max_len must be >= 1, got ", max_len);
  SPECBED_CHECK(!rows.empty(), "MakeSequenceBatch: no rows");
  const int64_t b_size = static_cast<int64_t>(rows.size());
  int64_t t_size = 0;
  for (int64_t r : rows) {
    SPECBED_CHECK(r >= 0 && r < data.size(), "MakeSequenceBatch: row ", r, " outside [0, ",
                  data.size(), ")");
    t_size = std::max(t_size, std::min(data.sequence(r).length, max_len));
  }
  SequenceBatch batch;
  batch.tokens = at::zeros({b_size, t_size}, at::kLong);
  batch.lengths = at::empty({b_size}, at::kLong);
  batch.loss_mask = at::zeros({b_size, t_size}, at::kFloat);
  int64_t* tok = batch.tokens.data_ptr<int64_t>();
  int64_t* len = batch.lengths.data_ptr<int64_t>();
  float* mask = batch.loss_mask.data_ptr<float>();
  for (int64_t b = 0; b < b_size; ++b) {
    const RegenSequence s = data.sequence(rows[b]);
    const int64_t n = std::min(s.length, max_len);
    len[b] = n;
    for (int64_t t = 0; t < n; ++t) tok[b * t_size + t] = s[t];
    // Position t predicts token t + 1: a loss position when t + 1 is a response token.
    for (int64_t t = std::max<int64_t>(0, s.prompt_length - 1); t + 1 < n; ++t) {
      mask[b * t_size + t] = 1.f;
    }
  }
  return batch;
}

// ---------------------------------------------------------------------------------------------
// Online.

OnlineFeatureSource::OnlineFeatureSource(LlamaModel& target, std::vector<int64_t> layers)
    : target_(target), layers_(std::move(layers)) {
  CheckLayers(target_, layers_);
}

TargetFeatures OnlineFeatureSource::Get(const std::vector<int64_t>& rows,
                                        const SequenceBatch& batch) {
  int64_t b_size = 0, t_size = 0;
  CheckBatch(rows, batch, &b_size, &t_size);
  at::NoGradGuard no_grad;
  KvCache cache = target_.NewCache(b_size, t_size);
  ForwardOptions fo;
  fo.hidden_layers = layers_;
  fo.logits = LogitsMode::kAll;
  // On the target's device (a copy of the host batch's tokens and lengths off the CPU).
  const at::Device device = target_.device();
  const at::Tensor lengths = OnDevice(batch.lengths, device);
  ForwardOutput out = target_.Forward(OnDevice(batch.tokens, device), cache, fo);
  TargetFeatures f;
  if (layers_.empty()) {
    f.hidden = at::zeros({b_size, t_size, 0}, at::dtype(at::kFloat).device(device));
  } else {
    std::vector<at::Tensor> parts;
    for (const at::Tensor& h : out.hidden) parts.push_back(h.to(at::kFloat));
    f.hidden = at::cat(parts, -1);
  }
  f.logits = out.logits.clone();  // the forward's buffer is reused by the next call
  const at::Tensor padding =
      at::arange(t_size, lengths.options()).unsqueeze(0).ge(lengths.unsqueeze(1)).unsqueeze(-1);
  f.hidden.masked_fill_(padding, 0.f);
  f.logits.masked_fill_(padding, 0.f);
  return f;
}

// ---------------------------------------------------------------------------------------------
// Disk.

struct DiskFeatureCache::Shard {
  std::shared_ptr<SafetensorsFile> file;
  std::vector<int64_t> offsets;  // [count + 1] positions
  const int32_t* tokens = nullptr;
  const uint8_t* hidden = nullptr;  // [positions, n_stored, dim] store dtype
};

DiskFeatureCache::DiskFeatureCache(LlamaModel& target, std::string dir, ojson manifest)
    : target_(target), dir_(std::move(dir)), manifest_(std::move(manifest)) {
  const ojson& s = manifest_["settings"];
  const std::string where = "feature cache '" + dir_ + "'";
  layers_ = s.at("layers").get<std::vector<int64_t>>();
  const auto stored = s.at("stored_layers").get<std::vector<int64_t>>();
  n_stored_ = static_cast<int64_t>(stored.size());
  for (int64_t l : layers_) {
    slot_of_.push_back(std::find(stored.begin(), stored.end(), l) - stored.begin());
  }
  final_slot_ = std::find(stored.begin(), stored.end(), target_.config().n_layers) - stored.begin();
  SPECBED_CHECK(final_slot_ < n_stored_, where, ": stored layers lack the last layer");
  store_dtype_ = ParseSafetensorsDtype(s.at("store_dtype").get<std::string>());
  StoreScalarType(store_dtype_);
  const int64_t dim = target_.config().dim;
  const size_t esize = SafetensorsDtypeSize(store_dtype_);
  int64_t first = 0;
  for (const ojson& entry : manifest_["shards"]) {
    auto shard = std::make_shared<Shard>();
    const std::string path = (fs::path(dir_) / entry.at("file").get<std::string>()).string();
    shard->file = SafetensorsFile::Open(path);
    const auto& meta = shard->file->metadata();
    const auto it = meta.find(kShardMetadataKey);
    SPECBED_CHECK(it != meta.end(), path, ": not a feature-cache shard");
    const ojson sm = ojson::parse(it->second, nullptr, false);
    const int64_t count = entry.at("count").get<int64_t>();
    SPECBED_CHECK(sm.is_object() && sm.value("settings", ojson()) == s &&
                      sm.value("first", int64_t{-1}) == first &&
                      sm.value("count", int64_t{-1}) == count,
                  path, ": shard does not belong to ", where,
                  " (settings or sequence range "
                  "differ from the manifest; rebuild the cache)");
    const SafetensorsEntry* off = shard->file->Find("offsets");
    const SafetensorsEntry* tok = shard->file->Find("tokens");
    const SafetensorsEntry* hid = shard->file->Find("hidden");
    SPECBED_CHECK(off && off->dtype == SafetensorsDtype::kI64 &&
                      off->shape == std::vector<int64_t>{count + 1},
                  path, ": 'offsets' must be I64 [", count + 1, "]");
    shard->offsets.resize(count + 1);
    std::memcpy(shard->offsets.data(), off->data, off->nbytes);
    const int64_t positions = shard->offsets.back();
    SPECBED_CHECK(shard->offsets[0] == 0, path, ": offsets[0] != 0");
    for (int64_t i = 0; i < count; ++i) {
      SPECBED_CHECK(shard->offsets[i + 1] > shard->offsets[i], path, ": offsets must increase");
      lengths_.push_back(shard->offsets[i + 1] - shard->offsets[i]);
    }
    SPECBED_CHECK(tok && tok->dtype == SafetensorsDtype::kI32 &&
                      tok->shape == std::vector<int64_t>{positions},
                  path, ": 'tokens' must be I32 [", positions, "]");
    SPECBED_CHECK(hid && hid->dtype == store_dtype_ &&
                      hid->shape == (std::vector<int64_t>{positions, n_stored_, dim}),
                  path, ": 'hidden' must be ", SafetensorsDtypeName(store_dtype_), " [", positions,
                  ", ", n_stored_, ", ", dim, "]");
    SPECBED_CHECK(reinterpret_cast<uintptr_t>(hid->data) % esize == 0 &&
                      reinterpret_cast<uintptr_t>(tok->data) % sizeof(int32_t) == 0,
                  path, ": misaligned tensor data");
    shard->tokens = reinterpret_cast<const int32_t*>(tok->data);
    shard->hidden = hid->data;
    shard_first_.push_back(first);
    shards_.push_back(shard);
    first += count;
  }
  SPECBED_CHECK(first == s.at("n_sequences").get<int64_t>(), where, ": shards hold ", first,
                " sequences, the manifest says ", s.at("n_sequences").dump());
}

std::unique_ptr<DiskFeatureCache> DiskFeatureCache::Open(LlamaModel& target,
                                                         const std::string& dir) {
  const std::string path = (fs::path(dir) / kManifest).string();
  SPECBED_CHECK(PathExists(path), "feature cache '", dir, "' has no ", kManifest,
                " (not built, or its build was interrupted)");
  const ojson m = ParseManifest(path);
  const ojson& s = m["settings"];
  SPECBED_CHECK(m.value("format_version", int64_t{0}) == kCacheFormatVersion, path,
                ": format version ", m.value("format_version", ojson()).dump(), ", expected ",
                kCacheFormatVersion, " (rebuild the cache)");
  ojson wanted;
  wanted["target_fingerprint"] = TargetFingerprint(target);
  wanted["target_dtype"] = DtypeName(target.dtype());
  wanted["dim"] = target.config().dim;
  CheckSameSettings(s, wanted, dir);
  return std::unique_ptr<DiskFeatureCache>(new DiskFeatureCache(target, dir, m));
}

namespace {

// The settings a cache is built for (its manifest's and every shard's "settings").
ojson CacheSettings(const LlamaModel& target, const RegenData& data,
                    const std::vector<int64_t>& layers, const std::vector<int64_t>& stored,
                    SafetensorsDtype store_dtype, int64_t max_len) {
  ojson settings;
  settings["format_version"] = kCacheFormatVersion;
  settings["target_fingerprint"] = TargetFingerprint(target);
  settings["target_dtype"] = DtypeName(target.dtype());
  settings["dim"] = target.config().dim;
  settings["layers"] = layers;
  settings["stored_layers"] = stored;
  settings["store_dtype"] = SafetensorsDtypeName(store_dtype);
  settings["max_len"] = max_len;
  settings["data_fingerprint"] = RegenDataFingerprint(data);
  settings["n_sequences"] = data.size();
  return settings;
}

// The manifest of a complete cache of `settings` in `dir` (null when there is none). A cache of
// other settings fails naming the first difference unless `rebuild` (then it is removed, as is a
// cache whose shards were lost).
ojson ReusableManifest(const std::string& dir, const ojson& settings, bool rebuild) {
  const std::string manifest_path = (fs::path(dir) / kManifest).string();
  if (!PathExists(manifest_path)) {
    if (rebuild) RemoveCacheFiles(dir);
    return ojson();
  }
  const ojson m = ParseManifest(manifest_path);
  if (m["settings"] == settings) {
    bool complete = true;
    for (const ojson& e : m["shards"]) {
      complete = complete && PathExists((fs::path(dir) / e.at("file").get<std::string>()).string());
    }
    if (complete) return m;
    RemoveCacheFiles(dir);  // shards lost: build afresh
  } else if (rebuild) {
    RemoveCacheFiles(dir);
  } else {
    CheckSameSettings(m["settings"], settings, dir);
  }
  return ojson();
}

// The manifest entry of shard `k` when an interrupted build of `settings` finished it with the
// sequences from `first` on; null otherwise.
ojson KeptShard(const std::string& dir, int64_t k, const ojson& settings, int64_t first) {
  const std::string path = (fs::path(dir) / ShardName(k)).string();
  if (!PathExists(path)) return ojson();
  try {
    const auto f = SafetensorsFile::Open(path);
    const auto it = f->metadata().find(kShardMetadataKey);
    if (it == f->metadata().end()) return ojson();
    const ojson sm = ojson::parse(it->second, nullptr, false);
    if (!sm.is_object() || sm.value("settings", ojson()) != settings ||
        sm.value("first", int64_t{-1}) != first) {
      return ojson();
    }
    return {{"file", ShardName(k)},
            {"first", first},
            {"count", sm.at("count").get<int64_t>()},
            {"positions", sm.at("positions")},
            {"bytes", f->mapping()->size()}};
  } catch (const Error&) {
    return ojson();
  }
}

// Writes the cache's shards: sequences are appended in order and a shard is closed once it holds
// shard_bytes of hidden states.
class ShardWriter {
 public:
  ShardWriter(std::string dir, ojson settings, SafetensorsDtype store_dtype, int64_t n_stored,
              int64_t dim, int64_t shard_bytes)
      : dir_(std::move(dir)),
        settings_(std::move(settings)),
        store_dtype_(store_dtype),
        n_stored_(n_stored),
        dim_(dim),
        shard_bytes_(shard_bytes),
        row_bytes_(n_stored * dim * SafetensorsDtypeSize(store_dtype)) {}

  // Keeps the shards an interrupted build of the same settings finished, in order, and removes
  // the rest; returns the first sequence still to build.
  int64_t Resume() {
    for (int64_t k = 0;; ++k) {
      const ojson e = KeptShard(dir_, k, settings_, first_);
      if (e.is_null()) break;
      shards_.push_back(e);
      first_ += e["count"].get<int64_t>();
    }
    RemoveCacheFiles(dir_, static_cast<int64_t>(shards_.size()));
    return first_;
  }

  // One sequence: `len` positions of tokens and hidden states ([len, n_stored, dim] at `hidden`).
  void Append(const int64_t* tokens, const uint8_t* hidden, int64_t len) {
    hidden_.insert(hidden_.end(), hidden, hidden + len * row_bytes_);
    for (int64_t t = 0; t < len; ++t) tokens_.push_back(static_cast<int32_t>(tokens[t]));
    offsets_.push_back(offsets_.back() + len);
    if (static_cast<int64_t>(hidden_.size()) >= shard_bytes_) Flush();
  }

  void Flush() {
    const int64_t count = static_cast<int64_t>(offsets_.size()) - 1;
    if (count == 0) return;
    const int64_t positions = offsets_.back();
    const std::string name = ShardName(static_cast<int64_t>(shards_.size()));
    ojson sm;
    sm["settings"] = settings_;
    sm["first"] = first_;
    sm["count"] = count;
    sm["positions"] = positions;
    WriteSafetensors(
        (fs::path(dir_) / name).string(),
        {{"offsets",
          SafetensorsDtype::kI64,
          {count + 1},
          offsets_.data(),
          offsets_.size() * sizeof(int64_t)},
         {"tokens",
          SafetensorsDtype::kI32,
          {positions},
          tokens_.data(),
          tokens_.size() * sizeof(int32_t)},
         {"hidden", store_dtype_, {positions, n_stored_, dim_}, hidden_.data(), hidden_.size()}},
        {{kShardMetadataKey, sm.dump()}});
    const int64_t bytes = static_cast<int64_t>(fs::file_size(fs::path(dir_) / name));
    shards_.push_back({{"file", name},
                       {"first", first_},
                       {"count", count},
                       {"positions", positions},
                       {"bytes", bytes}});
    first_ += count;
    offsets_.assign(1, 0);
    tokens_.clear();
    hidden_.clear();
  }

  int64_t row_bytes() const { return row_bytes_; }
  const ojson& shards() const { return shards_; }

 private:
  std::string dir_;
  ojson settings_;
  SafetensorsDtype store_dtype_;
  int64_t n_stored_, dim_, shard_bytes_, row_bytes_;
  ojson shards_ = ojson::array();
  int64_t first_ = 0;  // first sequence of the shard being filled
  std::vector<int64_t> offsets_ = {0};
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> hidden_;
};

// Consecutive rows from `next` while the padded batch stays within build_batch_tokens.
std::vector<int64_t> NextBuildRows(const RegenData& data, int64_t next, int64_t max_len,
                                   int64_t build_batch_tokens) {
  const int64_t n = data.size();
  std::vector<int64_t> rows = {next};
  int64_t longest = std::min(data.sequence(next).length, max_len);
  while (next + static_cast<int64_t>(rows.size()) < n) {
    const int64_t r = next + static_cast<int64_t>(rows.size());
    const int64_t len = std::min(data.sequence(r).length, max_len);
    if (static_cast<int64_t>(rows.size() + 1) * std::max(longest, len) > build_batch_tokens) break;
    rows.push_back(r);
    longest = std::max(longest, len);
  }
  return rows;
}

// Runs the target over the sequences from `next` on and hands each one's hidden states (the
// stored layers, in the store dtype) to `writer`.
void BuildShards(LlamaModel& target, const RegenData& data, const std::vector<int64_t>& stored,
                 int64_t max_len, at::ScalarType store_type, int64_t next,
                 const DiskFeatureCacheOptions& options, ShardWriter& writer) {
  const int64_t n = data.size();
  std::unique_ptr<ProgressBar> bar;
  if (options.verbose) bar = std::make_unique<ProgressBar>("feature cache", n - next, "seq");
  at::NoGradGuard no_grad;
  ForwardOptions fo;
  fo.hidden_layers = stored;
  fo.logits = LogitsMode::kNone;
  while (next < n) {
    const std::vector<int64_t> rows =
        NextBuildRows(data, next, max_len, options.build_batch_tokens);
    const SequenceBatch batch = MakeSequenceBatch(data, rows, max_len);
    const int64_t t_size = batch.tokens.size(1);
    KvCache cache = target.NewCache(static_cast<int64_t>(rows.size()), t_size);
    const ForwardOutput out = target.Forward(OnDevice(batch.tokens, target.device()), cache, fo);
    // [B, T, n_stored, dim] in the store dtype, on the host (shards are written from host copies).
    const at::Tensor h = ToHost(at::stack(out.hidden, 2).to(store_type)).contiguous();
    const uint8_t* hp = static_cast<const uint8_t*>(h.data_ptr());
    const int64_t* lens = batch.lengths.data_ptr<int64_t>();
    const int64_t* tok = batch.tokens.data_ptr<int64_t>();
    for (size_t b = 0; b < rows.size(); ++b) {
      writer.Append(tok + b * t_size, hp + b * t_size * writer.row_bytes(), lens[b]);
    }
    next += static_cast<int64_t>(rows.size());
    if (bar) bar->Advance(static_cast<int64_t>(rows.size()));
  }
  writer.Flush();
  if (bar) bar->Finish();
}

// The manifest of a finished build.
ojson BuiltManifest(const ojson& settings, const ojson& shards, int64_t resumed_from,
                    double build_seconds) {
  ojson m;
  m["format"] = kCacheFormat;
  m["format_version"] = kCacheFormatVersion;
  m["settings"] = settings;
  m["shards"] = shards;
  int64_t positions = 0, bytes = 0;
  for (const ojson& e : shards) {
    positions += e["positions"].get<int64_t>();
    bytes += e["bytes"].get<int64_t>();
  }
  m["total_positions"] = positions;
  m["bytes"] = bytes;
  m["resumed_from_sequence"] = resumed_from;
  m["build_seconds"] = build_seconds;
  m["created_utc"] = NowRfc3339();
  return m;
}

}  // namespace

std::unique_ptr<DiskFeatureCache> DiskFeatureCache::Build(LlamaModel& target, const RegenData& data,
                                                          const std::vector<int64_t>& layers,
                                                          int64_t max_len, const std::string& dir,
                                                          SafetensorsDtype store_dtype,
                                                          const DiskFeatureCacheOptions& options) {
  CheckLayers(target, layers);
  SPECBED_CHECK(max_len >= 1, "feature cache: max_len must be >= 1, got ", max_len);
  SPECBED_CHECK(!dir.empty(), "feature cache: no directory given");
  SPECBED_CHECK(data.size() >= 1, "feature cache: the training data has no sequences");
  SPECBED_CHECK(options.build_batch_tokens >= 1 && options.shard_bytes >= 1,
                "feature cache: build_batch_tokens and shard_bytes must be >= 1");
  const at::ScalarType store_type = StoreScalarType(store_dtype);
  const LlamaConfig& tc = target.config();
  const std::vector<int64_t> stored = StoredLayers(layers, tc.n_layers);
  const ojson settings = CacheSettings(target, data, layers, stored, store_dtype, max_len);

  fs::create_directories(dir);
  const ojson reusable = ReusableManifest(dir, settings, options.rebuild);
  if (!reusable.is_null()) {
    std::unique_ptr<DiskFeatureCache> cache(new DiskFeatureCache(target, dir, reusable));
    cache->reused_ = true;
    return cache;
  }
  ShardWriter writer(dir, settings, store_dtype, static_cast<int64_t>(stored.size()), tc.dim,
                     options.shard_bytes);
  const int64_t resumed_from = writer.Resume();
  const int64_t t0 = NowMicros();
  BuildShards(target, data, stored, max_len, store_type, resumed_from, options, writer);
  const ojson m = BuiltManifest(settings, writer.shards(), resumed_from, (NowMicros() - t0) * 1e-6);
  WriteFileAtomically((fs::path(dir) / kManifest).string(), m.dump(2) + "\n");
  return std::unique_ptr<DiskFeatureCache>(new DiskFeatureCache(target, dir, m));
}

TargetFeatures DiskFeatureCache::Get(const std::vector<int64_t>& rows, const SequenceBatch& batch) {
  int64_t b_size = 0, t_size = 0;
  CheckBatch(rows, batch, &b_size, &t_size);
  const int64_t dim = target_.config().dim;
  const int64_t n_req = static_cast<int64_t>(layers_.size());
  const size_t esize = SafetensorsDtypeSize(store_dtype_);
  TargetFeatures f;
  f.hidden = at::zeros({b_size, t_size, n_req * dim}, at::kFloat);
  at::Tensor final_h = at::zeros({b_size, t_size, dim}, at::kFloat);
  float* hid = f.hidden.data_ptr<float>();
  float* fin = final_h.data_ptr<float>();
  const at::Tensor tokens = ToHost(batch.tokens).contiguous();  // the host batch: no copy
  const int64_t* tok = tokens.data_ptr<int64_t>();
  const at::Tensor lengths = ToHost(batch.lengths).contiguous();
  const int64_t* lens = lengths.data_ptr<int64_t>();
  auto copy = [&](auto tag) {
    using Src = decltype(tag);
    for (int64_t b = 0; b < b_size; ++b) {
      const int64_t row = rows[b];
      SPECBED_CHECK(row >= 0 && row < size(), "feature cache '", dir_, "': row ", row,
                    " outside [0, ", size(), ")");
      const int64_t len = lens[b];
      SPECBED_CHECK(len >= 0 && len <= t_size && len <= lengths_[row], "feature cache '", dir_,
                    "': batch row ", b, " (sequence ", row, ") has length ", len,
                    ", the cache stored ", lengths_[row], " positions of it (built with max_len ",
                    manifest_["settings"]["max_len"].dump(), ")");
      const int64_t s = std::upper_bound(shard_first_.begin(), shard_first_.end(), row) -
                        shard_first_.begin() - 1;
      const Shard& shard = *shards_[s];
      const int64_t start = shard.offsets[row - shard_first_[s]];
      for (int64_t t = 0; t < len; ++t) {
        SPECBED_CHECK(shard.tokens[start + t] == tok[b * t_size + t], "feature cache '", dir_,
                      "': batch row ", b, " position ", t, " holds token ", tok[b * t_size + t],
                      " but sequence ", row, " of the cached data has ", shard.tokens[start + t],
                      " (rows do not index the data the cache was "
                      "built for)");
        const uint8_t* src = shard.hidden + (start + t) * n_stored_ * dim * esize;
        float* dst = hid + (b * t_size + t) * n_req * dim;
        for (int64_t j = 0; j < n_req; ++j) {
          ToFloat<Src>(src + slot_of_[j] * dim * esize, dst + j * dim, dim);
        }
        ToFloat<Src>(src + final_slot_ * dim * esize, fin + (b * t_size + t) * dim, dim);
      }
    }
  };
  switch (store_dtype_) {
    case SafetensorsDtype::kBF16:
      copy(c10::BFloat16());
      break;
    case SafetensorsDtype::kF16:
      copy(c10::Half());
      break;
    default:
      copy(float());
  }
  // Read on the host, then one copy each to the target's device (none on the CPU).
  f.hidden = OnDevice(f.hidden, target_.device());
  final_h = OnDevice(final_h, target_.device());
  // logits = lm_head(final_norm(h)) as the engine computes them: RMSNorm in float32, the head
  // GEMM in the model dtype. Padding rows are 0 and stay 0.
  at::NoGradGuard no_grad;
  const LlamaWeights& w = target_.weights();
  const at::Tensor norm = w.final_norm.to(at::kFloat);
  const at::Tensor xn =
      final_h * at::rsqrt(final_h.pow(2).mean(-1, /*keepdim=*/true) + target_.config().norm_eps) *
      norm;
  f.logits = at::matmul(xn.to(target_.dtype()), w.lm_head.t()).to(at::kFloat);
  return f;
}

// ---------------------------------------------------------------------------------------------
// Factory.

SafetensorsDtype ParseFeatureStoreDtype(const std::string& name, const std::string& who) {
  if (name == "float32") return SafetensorsDtype::kF32;
  if (name == "bfloat16") return SafetensorsDtype::kBF16;
  if (name == "float16") return SafetensorsDtype::kF16;
  Fail(who, ": --feature-dtype must be float32, bfloat16 or float16, got '", name, "'");
}

std::vector<std::string> TargetFeatureSourceNames() {
  return {"online", "disk"};
}

std::unique_ptr<TargetFeatureSource> MakeTargetFeatureSource(LlamaModel& target,
                                                             const RegenData& data,
                                                             const TargetFeatureOptions& options) {
  if (options.source == "online") {
    return std::make_unique<OnlineFeatureSource>(target, options.layers);
  }
  if (options.source == "disk") {
    SPECBED_CHECK(!options.cache_dir.empty(),
                  "target features: source 'disk' needs a cache directory");
    const int64_t max_len = options.max_len > 0 ? options.max_len : target.config().max_seq_len;
    return DiskFeatureCache::Build(target, data, options.layers, max_len, options.cache_dir,
                                   options.store_dtype, options.disk);
  }
  FailUnknownName("target feature source", options.source, TargetFeatureSourceNames());
}

}  // namespace specbed
