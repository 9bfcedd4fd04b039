// Hugging Face checkpoint directories: read (single file or sharded safetensors), map HF names
// to fused engine weights, write, and seeded random HF-named tensors.
// Checked by: tests/models/hf_checkpoint_test.cpp.
#include "models/checkpoint/hf_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include "base/error.h"
#include "base/hash.h"
#include "base/json_read.h"
#include "base/mapped_file.h"
#include "base/names.h"
#include "models/checkpoint/head_checkpoint.h"
#include "models/checkpoint/safetensors.h"
#include "models/device.h"
#include "models/tensor_util.h"

namespace specbed {
namespace {

using nlohmann::json;

constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string DtypeName(at::ScalarType dtype) {
  return c10::toString(dtype);
}

// Copies a stored tensor out of the mapping and converts it to `dtype`.
at::Tensor EntryToTensor(const SafetensorsEntry& entry, at::ScalarType dtype,
                         const std::string& file) {
  at::ScalarType stored;
  switch (entry.dtype) {
    case SafetensorsDtype::kF32:
      stored = at::kFloat;
      break;
    case SafetensorsDtype::kBF16:
      stored = at::kBFloat16;
      break;
    case SafetensorsDtype::kF16:
      stored = at::kHalf;
      break;
    default:
      Fail("safetensors file '", file, "', tensor '", entry.name, "': dtype ",
           SafetensorsDtypeName(entry.dtype), " is not a weight dtype (expected F32, F16 or BF16)");
  }
  at::Tensor raw = at::empty(entry.shape, at::TensorOptions().dtype(stored));
  if (entry.nbytes > 0) std::memcpy(raw.data_ptr(), entry.data, entry.nbytes);
  if (stored == dtype) return raw;
  return raw.to(dtype).contiguous();
}

void AddEntries(const SafetensorsFile& file, at::ScalarType dtype,
                const std::map<std::string, std::string>* weight_map, const std::string& shard,
                std::map<std::string, at::Tensor>* tensors) {
  for (const auto& entry : file.entries()) {
    if (weight_map != nullptr) {
      auto it = weight_map->find(entry.name);
      SPECBED_CHECK(it != weight_map->end(), "safetensors file '", file.path(), "': tensor '",
                    entry.name, "' is not listed in the weight_map of ", kIndexFile);
      SPECBED_CHECK(it->second == shard, "safetensors file '", file.path(), "': tensor '",
                    entry.name, "' is listed under shard '", it->second, "' in ", kIndexFile);
    }
    SPECBED_CHECK(tensors->count(entry.name) == 0, "safetensors file '", file.path(), "': tensor '",
                  entry.name, "' appears in more than one shard");
    at::Tensor t = EntryToTensor(entry, dtype, file.path());
    CheckFiniteWeights(t, entry.name, "safetensors file '" + file.path() + "'");
    (*tensors)[entry.name] = std::move(t);
  }
}

std::string LayerPrefix(int64_t i) {
  return "model.layers." + std::to_string(i) + ".";
}

// Fills `out` with standard normal values: Box-Muller over counter-based uniforms keyed by `key`,
// so the result depends only on (key, index), not on threads or library versions.
void FillNormalImpl(float* out, int64_t n, uint64_t key, double mean, double stddev) {
  const int64_t pairs = (n + 1) / 2;
  at::parallel_for(0, pairs, 1 << 14, [&](int64_t begin, int64_t end) {
    for (int64_t p = begin; p < end; ++p) {
      const uint64_t a = Mix64(key + static_cast<uint64_t>(2 * p + 1) * 0x9E3779B97F4A7C15ULL);
      const uint64_t b = Mix64(key + static_cast<uint64_t>(2 * p + 2) * 0x9E3779B97F4A7C15ULL);
      const double u1 = (static_cast<double>(a >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
      const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;          // [0, 1)
      const double r = std::sqrt(-2.0 * std::log(u1));
      const double angle = 2.0 * M_PI * u2;
      out[2 * p] = static_cast<float>(mean + stddev * r * std::cos(angle));
      if (2 * p + 1 < n) out[2 * p + 1] = static_cast<float>(mean + stddev * r * std::sin(angle));
    }
  });
}

}  // namespace

std::map<std::string, std::vector<int64_t>> ExpectedHfTensorShapes(const LlamaConfig& c) {
  std::map<std::string, std::vector<int64_t>> shapes;
  shapes["model.embed_tokens.weight"] = {c.vocab_size, c.dim};
  shapes["model.norm.weight"] = {c.dim};
  if (!c.tie_embeddings) shapes["lm_head.weight"] = {c.vocab_size, c.dim};
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string p = LayerPrefix(i);
    shapes[p + "input_layernorm.weight"] = {c.dim};
    shapes[p + "self_attn.q_proj.weight"] = {c.q_dim(), c.dim};
    shapes[p + "self_attn.k_proj.weight"] = {c.kv_dim(), c.dim};
    shapes[p + "self_attn.v_proj.weight"] = {c.kv_dim(), c.dim};
    if (c.qkv_bias) {
      shapes[p + "self_attn.q_proj.bias"] = {c.q_dim()};
      shapes[p + "self_attn.k_proj.bias"] = {c.kv_dim()};
      shapes[p + "self_attn.v_proj.bias"] = {c.kv_dim()};
    }
    if (c.qk_norm) {
      shapes[p + "self_attn.q_norm.weight"] = {c.head_dim};
      shapes[p + "self_attn.k_norm.weight"] = {c.head_dim};
    }
    shapes[p + "self_attn.o_proj.weight"] = {c.dim, c.q_dim()};
    shapes[p + "post_attention_layernorm.weight"] = {c.dim};
    shapes[p + "mlp.gate_proj.weight"] = {c.hidden_dim, c.dim};
    shapes[p + "mlp.up_proj.weight"] = {c.hidden_dim, c.dim};
    shapes[p + "mlp.down_proj.weight"] = {c.dim, c.hidden_dim};
  }
  return shapes;
}

HfModel ReadHfCheckpoint(const std::string& dir, at::ScalarType dtype) {
  SPECBED_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
                "reading checkpoint '", dir, "': dtype must be Float, BFloat16 or Half, got ",
                DtypeName(dtype));
  SPECBED_CHECK(PathExists(dir), "checkpoint directory '", dir, "' does not exist");
  const std::string config_path = dir + "/" + kHfConfigFile;
  SPECBED_CHECK(PathExists(config_path), "checkpoint directory '", dir, "' has no ", kHfConfigFile);
  HfModel model;
  model.config = ParseHfConfig(ReadJsonFile(config_path), config_path);

  const std::string single = dir + "/" + kHfSingleFile;
  const std::string index = dir + "/" + kIndexFile;
  if (PathExists(single)) {
    auto file = SafetensorsFile::Open(single);
    AddEntries(*file, dtype, nullptr, kHfSingleFile, &model.tensors);
    return model;
  }
  SPECBED_CHECK(PathExists(index), "checkpoint directory '", dir, "' has neither ", kHfSingleFile,
                " nor ", kIndexFile);
  const json index_json = ReadJsonFile(index);
  SPECBED_CHECK(index_json.is_object() && index_json.contains("weight_map") &&
                    index_json["weight_map"].is_object(),
                index, ": expected an object with a \"weight_map\" object");
  std::map<std::string, std::string> weight_map;
  std::set<std::string> shards;
  for (auto it = index_json["weight_map"].begin(); it != index_json["weight_map"].end(); ++it) {
    SPECBED_CHECK(it.value().is_string(), index, ": weight_map entry '", it.key(),
                  "' must be a shard file name, got ", it.value().dump());
    const std::string shard = it.value().get<std::string>();
    SPECBED_CHECK(!shard.empty() && shard.find('/') == std::string::npos, index,
                  ": weight_map entry '", it.key(), "' names shard '", shard,
                  "', expected a file name in the same directory");
    weight_map[it.key()] = shard;
    shards.insert(shard);
  }
  for (const auto& shard : shards) {
    SPECBED_CHECK(PathExists(dir + "/" + shard), index, ": shard '", shard, "' does not exist");
  }
  for (const auto& shard : shards) {
    const std::string path = dir + "/" + shard;
    auto file = SafetensorsFile::Open(path);
    AddEntries(*file, dtype, &weight_map, shard, &model.tensors);
  }
  for (const auto& [name, shard] : weight_map) {
    SPECBED_CHECK(model.tensors.count(name) == 1, index, ": tensor '", name,
                  "' is listed under shard '", shard, "' but that file does not contain it");
  }
  return model;
}

LlamaWeights WeightsFromHfTensors(const LlamaConfig& config,
                                  const std::map<std::string, at::Tensor>& tensors,
                                  const std::string& source) {
  config.Validate(source);
  // Compare the config's layer count with the layers the checkpoint holds before building the
  // expected-tensor table, whose size follows the config.
  int64_t layers_present = 0;
  const std::string layer_prefix = "model.layers.";
  for (const auto& entry : tensors) {
    const std::string& name = entry.first;
    if (name.compare(0, layer_prefix.size(), layer_prefix) != 0) continue;
    int64_t index = 0;
    size_t i = layer_prefix.size();
    for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && index <= kMaxConfigLayers; ++i) {
      index = index * 10 + (name[i] - '0');
    }
    if (i > layer_prefix.size()) layers_present = std::max(layers_present, index + 1);
  }
  SPECBED_CHECK(config.n_layers <= layers_present, source,
                ": config has num_hidden_layers = ", config.n_layers,
                " but the checkpoint holds tensors for ", layers_present,
                " layer(s) (model.layers.0 .. model.layers.", layers_present - 1, ")");
  const auto expected = ExpectedHfTensorShapes(config);
  const std::string embed_name = "model.embed_tokens.weight";

  auto embed_it = tensors.find(embed_name);
  SPECBED_CHECK(embed_it != tensors.end() && embed_it->second.defined(), source,
                ": missing tensor '", embed_name, "' (expected shape ",
                ShapeString(expected.at(embed_name)), ")");
  const at::ScalarType dtype = embed_it->second.scalar_type();
  const at::Device device = embed_it->second.device();
  SPECBED_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf, source,
                ": tensor '", embed_name, "' has dtype ", DtypeName(dtype),
                ", expected Float, BFloat16 or Half");

  for (const auto& [name, shape] : expected) {
    auto it = tensors.find(name);
    if (it == tensors.end() || !it->second.defined()) {
      Fail(source, ": missing tensor '", name, "' (expected shape ", ShapeString(shape), ")",
           name == "lm_head.weight" ? " (config has tie_word_embeddings = false)" : "");
    }
    const at::Tensor& t = it->second;
    SPECBED_CHECK(t.sizes() == at::IntArrayRef(shape), source, ": tensor '", name, "' has shape ",
                  ShapeString(t.sizes()), ", expected ", ShapeString(shape));
    SPECBED_CHECK(t.scalar_type() == dtype, source, ": tensor '", name, "' has dtype ",
                  DtypeName(t.scalar_type()), " but '", embed_name, "' has ", DtypeName(dtype),
                  " (all tensors must share one dtype)");
    SPECBED_CHECK(SameDevice(t.device(), device), source, ": tensor '", name, "' is on ",
                  t.device(), " but '", embed_name, "' is on ", device);
  }

  std::vector<std::string> unexpected;
  for (const auto& [name, t] : tensors) {
    if (expected.count(name)) continue;
    if (name == "lm_head.weight" && config.tie_embeddings) {
      const at::Tensor& embed = embed_it->second;
      const bool same = t.defined() && t.sizes() == embed.sizes() &&
                        t.scalar_type() == embed.scalar_type() && t.device() == embed.device() &&
                        at::equal(t, embed);
      SPECBED_CHECK(same, source, ": tensor 'lm_head.weight' differs from '", embed_name,
                    "' but config has tie_word_embeddings = true");
      continue;
    }
    if (EndsWith(name, "rotary_emb.inv_freq")) continue;  // recomputed from the config
    unexpected.push_back(name);
  }
  if (!unexpected.empty()) {
    const size_t shown = std::min<size_t>(unexpected.size(), 8);
    std::vector<std::string> head(unexpected.begin(), unexpected.begin() + shown);
    Fail(source, ": ", unexpected.size(), " unexpected tensor(s) not used by ", config.architecture,
         " (qkv_bias = ", config.qkv_bias, ", qk_norm = ", config.qk_norm,
         ", tie_word_embeddings = ", config.tie_embeddings, "): ", Join(head, ", "),
         unexpected.size() > shown ? ", ..." : "");
  }

  auto get = [&](const std::string& name) { return tensors.at(name).contiguous(); };
  LlamaWeights w;
  w.tok_embeddings = get(embed_name);
  w.final_norm = get("model.norm.weight");
  w.lm_head = config.tie_embeddings ? w.tok_embeddings : get("lm_head.weight");
  for (int64_t i = 0; i < config.n_layers; ++i) {
    const std::string p = LayerPrefix(i);
    LlamaLayerWeights l;
    l.attn_norm = get(p + "input_layernorm.weight");
    l.wqkv = at::cat({get(p + "self_attn.q_proj.weight"), get(p + "self_attn.k_proj.weight"),
                      get(p + "self_attn.v_proj.weight")},
                     0)
                 .contiguous();
    if (config.qkv_bias) {
      l.bqkv = at::cat({get(p + "self_attn.q_proj.bias"), get(p + "self_attn.k_proj.bias"),
                        get(p + "self_attn.v_proj.bias")},
                       0)
                   .contiguous();
    }
    if (config.qk_norm) {
      l.q_norm = get(p + "self_attn.q_norm.weight");
      l.k_norm = get(p + "self_attn.k_norm.weight");
    }
    l.wo = get(p + "self_attn.o_proj.weight");
    l.ffn_norm = get(p + "post_attention_layernorm.weight");
    l.w_gate_up =
        at::cat({get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")}, 0).contiguous();
    l.w_down = get(p + "mlp.down_proj.weight");
    w.layers.push_back(std::move(l));
  }
  w.Validate(config, source);
  return w;
}

LoadedModel LoadHfCheckpoint(const std::string& dir, at::ScalarType dtype) {
  HfModel model = ReadHfCheckpoint(dir, dtype);
  LoadedModel loaded;
  loaded.weights = WeightsFromHfTensors(model.config, model.tensors, "checkpoint '" + dir + "'");
  loaded.config = std::move(model.config);
  return loaded;
}

void WriteHfCheckpoint(const std::string& dir, const LlamaConfig& config,
                       const std::map<std::string, at::Tensor>& tensors, at::ScalarType store_dtype,
                       int64_t max_shard_bytes) {
  const WeightDtype& weight_dtype = WeightDtypeOf(store_dtype, "writing checkpoint '" + dir + "'");
  const SafetensorsDtype st_dtype = weight_dtype.stored;
  SPECBED_CHECK(max_shard_bytes >= 0, "writing checkpoint '", dir,
                "': max_shard_bytes must be >= 0, got ", max_shard_bytes);
  LlamaConfig stored = config;
  stored.torch_dtype = weight_dtype.name;
  const json config_json = stored.ToHfJson();
  try {
    std::filesystem::create_directories(dir);
  } catch (const std::filesystem::filesystem_error& e) {
    Fail("cannot create checkpoint directory '", dir, "': ", e.what());
  }
  WriteFileAtomically(dir + "/" + kHfConfigFile, config_json.dump(2) + "\n");

  std::vector<std::pair<std::string, at::Tensor>> stored_tensors;
  for (const auto& [name, t] : tensors) {
    SPECBED_CHECK(t.defined() && t.is_floating_point(), "writing checkpoint '", dir, "': tensor '",
                  name, "' is ", t.defined() ? DtypeName(t.scalar_type()) : "undefined",
                  ", expected a floating-point tensor");
    stored_tensors.emplace_back(name, t.to(at::kCPU).to(store_dtype).contiguous());
  }
  auto view = [&](const std::pair<std::string, at::Tensor>& nt) {
    const at::Tensor& t = nt.second;
    return SafetensorsTensorView{nt.first, st_dtype, t.sizes().vec(), t.data_ptr(),
                                 static_cast<size_t>(t.numel()) * t.element_size()};
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  const std::string single = dir + "/" + kHfSingleFile;
  const std::string index = dir + "/" + kIndexFile;

  if (max_shard_bytes == 0) {
    std::vector<SafetensorsTensorView> views;
    for (const auto& nt : stored_tensors) views.push_back(view(nt));
    WriteSafetensors(single, views, metadata);
    std::remove(index.c_str());
    return;
  }
  std::vector<std::vector<SafetensorsTensorView>> shards;
  int64_t shard_bytes = 0;
  int64_t total_bytes = 0;
  for (const auto& nt : stored_tensors) {
    SafetensorsTensorView v = view(nt);
    const int64_t n = static_cast<int64_t>(v.nbytes);
    if (shards.empty() || (!shards.back().empty() && shard_bytes + n > max_shard_bytes)) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(std::move(v));
    shard_bytes += n;
    total_bytes += n;
  }
  if (shards.empty()) shards.emplace_back();
  json weight_map = json::object();
  const int count = static_cast<int>(shards.size());
  for (int i = 0; i < count; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", i + 1, count);
    WriteSafetensors(dir + "/" + name, shards[i], metadata);
    for (const auto& v : shards[i]) weight_map[v.name] = name;
  }
  const json index_json = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
  WriteFileAtomically(index, index_json.dump(2) + "\n");
  std::remove(single.c_str());
}

std::map<std::string, at::Tensor> RandomHfTensors(const LlamaConfig& config, uint64_t seed,
                                                  at::ScalarType dtype) {
  config.Validate("RandomHfTensors config");
  SPECBED_CHECK(dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf,
                "RandomHfTensors: dtype must be Float, BFloat16 or Half, got ", DtypeName(dtype));
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, shape] : ExpectedHfTensorShapes(config)) {
    at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
    const uint64_t key = Mix64(seed ^ Fnv1a64(name.data(), name.size()));
    const bool is_norm = EndsWith(name, "norm.weight");
    FillSeededNormal(t.data_ptr<float>(), t.numel(), key, is_norm ? 1.0 : 0.0,
                     is_norm ? 0.1 : 0.02);
    tensors[name] = dtype == at::kFloat ? t : t.to(dtype);
  }
  return tensors;
}

void FillSeededNormal(float* out, int64_t n, uint64_t key, double mean, double stddev) {
  FillNormalImpl(out, n, key, mean, stddev);
}

void FillSeededUniform(float* out, int64_t n, uint64_t key, double bound) {
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t a = Mix64(key + static_cast<uint64_t>(i + 1) * 0x9E3779B97F4A7C15ULL);
    out[i] = static_cast<float>(bound * (2.0 * static_cast<double>(a >> 11) * 0x1.0p-53 - 1.0));
  }
}

}  // namespace specbed
