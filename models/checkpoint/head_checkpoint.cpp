// Drafter-head checkpoint directories (see head_checkpoint.h).
// Checked by: tests/methods/eagle3_head_test.cpp, tests/methods/dflash_head_test.cpp.
#include "models/checkpoint/head_checkpoint.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "base/error.h"
#include "base/hash.h"
#include "base/json_read.h"
#include "base/mapped_file.h"
#include "base/names.h"
#include "base/paths.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/tensor_util.h"

namespace specbed {
namespace {

constexpr const char* kPickleFile = "pytorch_model.bin";

// Copies a stored tensor out of the mapping; F16 / BF16 / F64 become float32, integer and bool
// types keep their type (the caller's validation decides whether they fit the name).
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

SafetensorsDtype StoredDtype(at::ScalarType dtype, const std::string& where) {
  switch (dtype) {
    case at::kFloat:
      return SafetensorsDtype::kF32;
    case at::kBFloat16:
      return SafetensorsDtype::kBF16;
    case at::kHalf:
      return SafetensorsDtype::kF16;
    case at::kLong:
      return SafetensorsDtype::kI64;
    case at::kBool:
      return SafetensorsDtype::kBool;
    default:
      Fail(where, ": cannot store a tensor of dtype ", c10::toString(dtype));
  }
}

}  // namespace

HeadConfigFile ReadHeadConfig(const std::string& dir, const std::string& where) {
  SPECBED_CHECK(std::filesystem::is_directory(dir), where,
                ": not a directory (expected a directory with config.json and model.safetensors)");
  HeadConfigFile f;
  f.path = dir + "/" + kHfConfigFile;
  SPECBED_CHECK(PathExists(f.path), where, ": missing ", kHfConfigFile);
  f.config = ReadJsonFile(f.path);
  if (f.config.is_object() && f.config.contains(kHeadRecipeKey)) {
    f.recipe = f.config[kHeadRecipeKey];
  }
  return f;
}

HeadTensors ReadHeadTensors(const std::string& dir, const std::string& where,
                            const std::string& conversion_hint,
                            const std::function<std::string(const std::string&)>& rename) {
  HeadTensors out;
  if (PathExists(dir + "/" + kHfSingleFile)) {
    out.files.push_back(dir + "/" + kHfSingleFile);
  } else {
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.is_regular_file() && e.path().extension() == ".safetensors") {
        out.files.push_back(e.path().string());
      }
    }
    std::sort(out.files.begin(), out.files.end());
  }
  if (out.files.empty()) {
    SPECBED_CHECK(!PathExists(dir + "/" + kPickleFile), where, ": has only ", kPickleFile,
                  "; SpecBed never reads pickled PyTorch files. Convert it to model.safetensors "
                  "once, offline",
                  conversion_hint);
    Fail(where, ": no ", kHfSingleFile, " (or other *.safetensors file)");
  }
  for (const auto& path : out.files) {
    auto file = SafetensorsFile::Open(path);
    for (const auto& entry : file->entries()) {
      const std::string at = "safetensors file '" + path + "', tensor '" + entry.name + "'";
      if (EndsWith(entry.name, "rotary_emb.inv_freq")) continue;  // recomputed from the config
      const std::string name = rename ? rename(entry.name) : entry.name;
      SPECBED_CHECK(out.tensors.count(name) == 0, at, ": duplicates ", out.origin[name],
                    name == entry.name ? "" : " (both are '" + name + "')");
      out.origin[name] = at;
      out.tensors[name] = EntryToTensor(entry);
      CheckFiniteWeights(out.tensors[name], entry.name, "safetensors file '" + path + "'");
    }
  }
  return out;
}

constexpr WeightDtype kWeightDtypes[] = {{at::kFloat, SafetensorsDtype::kF32, "float32"},
                                         {at::kBFloat16, SafetensorsDtype::kBF16, "bfloat16"},
                                         {at::kHalf, SafetensorsDtype::kF16, "float16"}};

const WeightDtype& WeightDtypeOf(at::ScalarType dtype, const std::string& where) {
  for (const WeightDtype& d : kWeightDtypes) {
    if (d.torch == dtype) return d;
  }
  Fail(where, ": cannot store weights as ", c10::toString(dtype),
       " (expected Float, BFloat16 or Half)");
}

const WeightDtype& WeightDtypeOf(SafetensorsDtype stored, const std::string& where) {
  for (const WeightDtype& d : kWeightDtypes) {
    if (d.stored == stored) return d;
  }
  Fail(where, ": float dtype ", SafetensorsDtypeName(stored),
       " is not a weight dtype (expected F32, BF16 or F16)");
}

std::string HeadTorchDtype(SafetensorsDtype float_dtype, const std::string& where) {
  return WeightDtypeOf(float_dtype, where).name;
}

void WriteHeadCheckpoint(const std::string& dir, nlohmann::ordered_json config_json,
                         const nlohmann::json& recipe,
                         const std::map<std::string, at::Tensor>& tensors,
                         SafetensorsDtype float_dtype, const std::string& where,
                         const std::string& tensor_file) {
  const at::ScalarType store = WeightDtypeOf(float_dtype, where).torch;
  if (!recipe.is_null()) config_json[kHeadRecipeKey] = nlohmann::ordered_json(recipe);
  try {
    std::filesystem::create_directories(dir);
  } catch (const std::filesystem::filesystem_error& e) {
    Fail("cannot create checkpoint directory '", dir, "': ", e.what());
  }
  WriteFileAtomically(dir + "/" + kHfConfigFile, config_json.dump(2) + "\n");

  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& [name, t] : tensors) {
    at::Tensor cpu = t.to(at::kCPU);
    if (cpu.is_floating_point()) cpu = cpu.to(store);
    out.emplace_back(name, cpu.contiguous());
  }
  std::vector<SafetensorsTensorView> views;
  for (const auto& [name, t] : out) {
    views.push_back(SafetensorsTensorView{name, StoredDtype(t.scalar_type(), where),
                                          t.sizes().vec(), t.data_ptr(),
                                          static_cast<size_t>(t.numel()) * t.element_size()});
  }
  WriteSafetensors(dir + "/" + tensor_file, views, {{"format", "pt"}});
}

uint64_t TensorNameSeed(uint64_t seed, const std::string& name) {
  return Mix64(seed ^ Fnv1a64(name.data(), name.size()));
}

at::Tensor SeededNormalTensor(const std::vector<int64_t>& shape, uint64_t seed,
                              const std::string& name, double stddev) {
  at::Tensor t = at::empty(shape, at::TensorOptions().dtype(at::kFloat));
  FillSeededNormal(t.data_ptr<float>(), t.numel(), TensorNameSeed(seed, name), 0.0, stddev);
  return t;
}

void CheckNamedTensorShapes(const std::map<std::string, std::vector<int64_t>>& expected,
                            const std::map<std::string, at::Tensor>& tensors,
                            const std::string& where, const std::string& expected_names,
                            bool floats_only) {
  for (const auto& [name, shape] : expected) {
    auto it = tensors.find(name);
    SPECBED_CHECK(it != tensors.end() && it->second.defined(), where, ": missing tensor '", name,
                  "'");
    SPECBED_CHECK(it->second.sizes().vec() == shape, where, ": tensor '", name, "' has shape ",
                  it->second.sizes(), ", expected ", at::IntArrayRef(shape));
    SPECBED_CHECK(!floats_only || it->second.is_floating_point(), where, ": tensor '", name,
                  "' must be floating point");
  }
  for (const auto& [name, t] : tensors) {
    SPECBED_CHECK(expected.count(name) == 1, where, ": unexpected tensor '", name, "' ",
                  expected_names);
  }
}

void CheckNoUnexpectedTensor(const std::map<std::string, std::vector<int64_t>>& expected,
                             const std::map<std::string, at::Tensor>& tensors,
                             const std::string& what,
                             const std::function<std::string(const std::string&)>& where,
                             bool list_expected) {
  std::vector<std::string> known;
  for (const auto& [name, shape] : expected) known.push_back(name);
  for (const auto& [name, t] : tensors) {
    if (expected.count(name)) continue;
    const std::string nearest = NearestName(name, known);
    Fail(where(name), ": unexpected tensor name for ", what,
         nearest.empty() ? std::string() : " (did you mean '" + nearest + "'?)",
         list_expected ? "; expected names: " + Join(known, ", ") : std::string());
  }
}

void CheckTensorShape(const at::Tensor& t, const std::vector<int64_t>& shape,
                      const std::string& where) {
  SPECBED_CHECK(t.defined(), where, ": tensor is undefined");
  SPECBED_CHECK(t.sizes() == at::IntArrayRef(shape), where, ": shape ", ShapeString(t.sizes()),
                ", expected ", ShapeString(shape));
}

void CheckWeightTensor(const at::Tensor& t, const std::vector<int64_t>& shape,
                       const std::string& where) {
  CheckTensorShape(t, shape, where);
  SPECBED_CHECK(t.is_floating_point(), where, ": dtype ", c10::toString(t.scalar_type()),
                ", expected a floating-point dtype (F32, F16 or BF16)");
}

}  // namespace specbed
