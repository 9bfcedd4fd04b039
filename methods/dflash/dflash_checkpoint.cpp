// DFlash draft checkpoints: published tensor names and shapes, validation, safetensors
// reading/writing and seeded random tensors.
// Checked by: tests/methods/dflash_head_test.cpp.
#include "methods/dflash/dflash_checkpoint.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <utility>

#include "harness/base/error.h"
#include "harness/base/hash.h"
#include "harness/base/mapped_file.h"
#include "harness/base/names.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/tensor_util.h"

namespace specbed {
namespace {

using nlohmann::json;

constexpr const char* kConfigFile = "config.json";
constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kPickleFile = "pytorch_model.bin";
constexpr const char* kRecipeKey = "specbed_recipe";

std::string DtypeName(at::ScalarType dtype) {
  return c10::toString(dtype);
}

// Checks `tensors` against `config`; `where(name)` names the input holding tensor `name`, and
// `source` the whole set (for missing tensors).
void CheckTensors(const DflashConfig& config, const std::map<std::string, at::Tensor>& tensors,
                  const std::string& source,
                  const std::function<std::string(const std::string&)>& where) {
  config.Validate(source);
  const auto expected = ExpectedDflashTensorShapes(config);
  std::vector<std::string> known;
  for (const auto& [name, shape] : expected) known.push_back(name);

  for (const auto& [name, t] : tensors) {
    if (expected.count(name)) continue;
    const std::string nearest = NearestName(name, known);
    Fail(where(name), ": unexpected tensor name for a DFlash draft",
         nearest.empty() ? std::string() : " (did you mean '" + nearest + "'?)");
  }
  for (const auto& [name, shape] : expected) {
    auto it = tensors.find(name);
    SPECBED_CHECK(it != tensors.end(), source, ": missing tensor '", name, "' (expected shape ",
                  ShapeString(shape), ")");
    const at::Tensor& t = it->second;
    SPECBED_CHECK(t.defined(), where(name), ": tensor is undefined");
    SPECBED_CHECK(t.sizes() == at::IntArrayRef(shape), where(name), ": shape ",
                  ShapeString(t.sizes()), ", expected ", ShapeString(shape));
    SPECBED_CHECK(t.is_floating_point(), where(name), ": dtype ", DtypeName(t.scalar_type()),
                  ", expected a floating-point dtype (F32, F16 or BF16)");
  }
}

// Copies a stored tensor out of the mapping; F16 / BF16 / F64 become float32, integer and bool
// types keep their type (validation rejects them with the tensor's name).
at::Tensor EntryToTensor(const SafetensorsEntry& entry) {
  at::ScalarType stored = at::kFloat;
  switch (entry.dtype) {
    case SafetensorsDtype::kF64:
      stored = at::kDouble;
      break;
    case SafetensorsDtype::kF32:
      stored = at::kFloat;
      break;
    case SafetensorsDtype::kF16:
      stored = at::kHalf;
      break;
    case SafetensorsDtype::kBF16:
      stored = at::kBFloat16;
      break;
    case SafetensorsDtype::kI64:
      stored = at::kLong;
      break;
    case SafetensorsDtype::kI32:
      stored = at::kInt;
      break;
    case SafetensorsDtype::kI16:
      stored = at::kShort;
      break;
    case SafetensorsDtype::kI8:
      stored = at::kChar;
      break;
    case SafetensorsDtype::kU8:
      stored = at::kByte;
      break;
    case SafetensorsDtype::kBool:
      stored = at::kBool;
      break;
  }
  at::Tensor raw = at::empty(entry.shape, at::TensorOptions().dtype(stored));
  if (entry.nbytes > 0) std::memcpy(raw.data_ptr(), entry.data, entry.nbytes);
  if (raw.is_floating_point() && stored != at::kFloat) raw = raw.to(at::kFloat).contiguous();
  return raw;
}

uint64_t NameKey(uint64_t seed, const std::string& name) {
  return Mix64(seed ^ Fnv1a64(name.data(), name.size()));
}

}  // namespace

std::string DflashLayerTensorName(int64_t layer, const char* suffix) {
  return "layers." + std::to_string(layer) + "." + suffix;
}

std::map<std::string, std::vector<int64_t>> ExpectedDflashTensorShapes(const DflashConfig& c) {
  const int64_t h = c.hidden_size, inter = c.intermediate_size;
  std::map<std::string, std::vector<int64_t>> shapes;
  shapes[kDflashFc] = {h, c.fc_in_dim()};
  shapes[kDflashHiddenNorm] = {h};
  shapes[kDflashFinalNorm] = {h};
  for (int64_t i = 0; i < c.n_layers; ++i) {
    shapes[DflashLayerTensorName(i, kDflashInputNorm)] = {h};
    shapes[DflashLayerTensorName(i, kDflashQProj)] = {c.q_dim(), h};
    shapes[DflashLayerTensorName(i, kDflashKProj)] = {c.kv_dim(), h};
    shapes[DflashLayerTensorName(i, kDflashVProj)] = {c.kv_dim(), h};
    shapes[DflashLayerTensorName(i, kDflashOProj)] = {h, c.q_dim()};
    shapes[DflashLayerTensorName(i, kDflashQNorm)] = {c.head_dim};
    shapes[DflashLayerTensorName(i, kDflashKNorm)] = {c.head_dim};
    shapes[DflashLayerTensorName(i, kDflashPostNorm)] = {h};
    shapes[DflashLayerTensorName(i, kDflashGateProj)] = {inter, h};
    shapes[DflashLayerTensorName(i, kDflashUpProj)] = {inter, h};
    shapes[DflashLayerTensorName(i, kDflashDownProj)] = {h, inter};
  }
  return shapes;
}

void ValidateDflashTensors(const DflashConfig& config,
                           const std::map<std::string, at::Tensor>& tensors,
                           const std::string& source) {
  CheckTensors(config, tensors, source,
               [&](const std::string& name) { return source + ", tensor '" + name + "'"; });
}

DflashCheckpoint LoadDflashCheckpoint(const std::string& dir) {
  const std::string where = "DFlash checkpoint '" + dir + "'";
  SPECBED_CHECK(std::filesystem::is_directory(dir), where,
                ": not a directory (expected a directory with config.json and model.safetensors)");
  const std::string config_path = dir + "/" + kConfigFile;
  SPECBED_CHECK(PathExists(config_path), where, ": missing ", kConfigFile);
  DflashCheckpoint ckpt;
  ckpt.source = dir;
  const json config_json = ParseJsonFile(config_path);
  ckpt.config = ParseDflashConfig(config_json, config_path);
  if (config_json.is_object() && config_json.contains(kRecipeKey)) {
    ckpt.recipe = config_json[kRecipeKey];
  }

  // The tensor files: model.safetensors, else every *.safetensors shard (sorted).
  std::vector<std::string> files;
  if (PathExists(dir + "/" + kSingleFile)) {
    files.push_back(dir + "/" + kSingleFile);
  } else {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.is_regular_file() && e.path().extension() == ".safetensors") {
        files.push_back(e.path().string());
      }
    }
    std::sort(files.begin(), files.end());
  }
  if (files.empty()) {
    SPECBED_CHECK(!PathExists(dir + "/" + kPickleFile), where, ": has only ", kPickleFile,
                  "; SpecBed never reads pickled PyTorch files. Convert it to model.safetensors "
                  "once, offline (see methods/dflash/README.md)");
    Fail(where, ": no ", kSingleFile, " (or other *.safetensors file)");
  }

  std::map<std::string, std::string> origin;  // name -> "safetensors file 'f', tensor 'name'"
  for (const auto& path : files) {
    auto file = SafetensorsFile::Open(path);
    for (const auto& entry : file->entries()) {
      const std::string at = "safetensors file '" + path + "', tensor '" + entry.name + "'";
      if (EndsWith(entry.name, "rotary_emb.inv_freq")) continue;  // recomputed from the config
      SPECBED_CHECK(ckpt.tensors.count(entry.name) == 0, at, ": duplicates ", origin[entry.name]);
      origin[entry.name] = at;
      ckpt.tensors[entry.name] = EntryToTensor(entry);
    }
  }
  CheckTensors(ckpt.config, ckpt.tensors, where + " (" + Join(files, ", ") + ")",
               [&](const std::string& name) { return origin.at(name); });
  return ckpt;
}

void WriteDflashCheckpoint(const std::string& dir, const DflashConfig& config,
                           const std::map<std::string, at::Tensor>& tensors, const json& recipe,
                           SafetensorsDtype float_dtype) {
  const std::string where = "writing DFlash checkpoint '" + dir + "'";
  at::ScalarType store;
  DflashConfig stored = config;
  switch (float_dtype) {
    case SafetensorsDtype::kF32:
      store = at::kFloat;
      stored.torch_dtype = "float32";
      break;
    case SafetensorsDtype::kBF16:
      store = at::kBFloat16;
      stored.torch_dtype = "bfloat16";
      break;
    case SafetensorsDtype::kF16:
      store = at::kHalf;
      stored.torch_dtype = "float16";
      break;
    default:
      Fail(where, ": float dtype ", SafetensorsDtypeName(float_dtype),
           " is not a weight dtype (expected F32, BF16 or F16)");
  }
  ValidateDflashTensors(config, tensors, where);

  nlohmann::ordered_json config_json = DflashConfigToJson(stored);
  if (!recipe.is_null()) config_json[kRecipeKey] = nlohmann::ordered_json(recipe);
  try {
    std::filesystem::create_directories(dir);
  } catch (const std::filesystem::filesystem_error& e) {
    Fail("cannot create checkpoint directory '", dir, "': ", e.what());
  }
  WriteFileAtomically(dir + "/" + kConfigFile, config_json.dump(2) + "\n");

  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, t] : tensors) {
    out.emplace_back(name, t.to(at::kCPU).to(store).contiguous());
  }
  std::vector<SafetensorsTensorView> views;
  for (const auto& [name, t] : out) {
    views.push_back(SafetensorsTensorView{name, float_dtype, t.sizes().vec(), t.data_ptr(),
                                          static_cast<size_t>(t.numel()) * t.element_size()});
  }
  WriteSafetensors(dir + "/" + kSingleFile, views, {{"format", "pt"}});
}

std::map<std::string, at::Tensor> RandomDflashTensors(const DflashConfig& config, uint64_t seed) {
  config.Validate("RandomDflashTensors config");
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, shape] : ExpectedDflashTensorShapes(config)) {
    at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
    if (EndsWith(name, "norm.weight")) {
      t.fill_(1.0f);
    } else {
      FillSeededNormal(t.data_ptr<float>(), t.numel(), NameKey(seed, name), 0.0, 0.02);
    }
    tensors[name] = t;
  }
  return tensors;
}

}  // namespace specbed
