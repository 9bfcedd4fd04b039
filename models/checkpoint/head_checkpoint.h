// Drafter-head checkpoint directories shared by the EAGLE-3 and DFlash loaders: config.json (with
// SpecBed's training recipe under "specbed_recipe") plus model.safetensors or several
// *.safetensors shards. Reading refuses pickle-only directories and converts stored floats to
// float32 (integer / bool tensors keep their type); writing stores floats in one dtype and the
// other tensors as they are. The callers parse the config and validate names and shapes.
// Checked by: tests/methods/eagle3_head_test.cpp and tests/methods/dflash_head_test.cpp (round
// trips, shards, duplicates, the pickle-only directory).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/checkpoint/safetensors.h"

namespace specbed {

inline constexpr const char* kHeadRecipeKey = "specbed_recipe";

struct HeadConfigFile {
  std::string path;       // dir/config.json
  nlohmann::json config;  // the parsed file
  nlohmann::json recipe;  // config["specbed_recipe"], null when absent
};
// Reads `dir`/config.json. `where` ("EAGLE-3 checkpoint 'dir'") starts every error.
HeadConfigFile ReadHeadConfig(const std::string& dir, const std::string& where);

struct HeadTensors {
  std::vector<std::string> files;             // the tensor files read, in order
  std::map<std::string, at::Tensor> tensors;  // (renamed) name -> tensor
  // name -> "safetensors file 'f', tensor 'stored'", for error messages.
  std::map<std::string, std::string> origin;
};
// Reads `dir`/model.safetensors, else every `dir`/*.safetensors (sorted). `rename` maps a stored
// name to its canonical one (identity when empty); `*rotary_emb.inv_freq` buffers are skipped.
// A directory with only pytorch_model.bin fails: "... Convert it to model.safetensors once,
// offline" + `conversion_hint`. A name stored twice fails naming both places.
HeadTensors ReadHeadTensors(const std::string& dir, const std::string& where,
                            const std::string& conversion_hint,
                            const std::function<std::string(const std::string&)>& rename = {});

// A dtype checkpoints store weights in, as LibTorch, safetensors and config.json's "torch_dtype"
// name it: float32 (F32), bfloat16 (BF16), float16 (F16).
struct WeightDtype {
  at::ScalarType torch;
  SafetensorsDtype stored;
  const char* name;
};
// The weight dtype of `dtype` / `stored`; any other dtype fails naming `where`.
const WeightDtype& WeightDtypeOf(at::ScalarType dtype, const std::string& where);
const WeightDtype& WeightDtypeOf(SafetensorsDtype stored, const std::string& where);

// "float32" / "bfloat16" / "float16" for kF32 / kBF16 / kF16; other dtypes fail naming `where`.
std::string HeadTorchDtype(SafetensorsDtype float_dtype, const std::string& where);

// Writes `dir`/config.json (`config_json` plus the recipe when not null) and
// `dir`/`tensor_file` (model.safetensors; Medusa: medusa_lm_head.safetensors): floating-point
// tensors as `float_dtype`, int64 / bool ones as they are.
// Creates `dir`.
void WriteHeadCheckpoint(const std::string& dir, nlohmann::ordered_json config_json,
                         const nlohmann::json& recipe,
                         const std::map<std::string, at::Tensor>& tensors,
                         SafetensorsDtype float_dtype, const std::string& where,
                         const std::string& tensor_file = "model.safetensors");

// Checks `tensors` against `expected` (name -> shape): every expected name present, defined, of
// its shape and (with `floats_only`) floating point, and no other name. Errors start with `where`
// and name the tensor; an unexpected name's message ends with `expected_names`.
void CheckNamedTensorShapes(const std::map<std::string, std::vector<int64_t>>& expected,
                            const std::map<std::string, at::Tensor>& tensors,
                            const std::string& where, const std::string& expected_names,
                            bool floats_only = true);

// Fails on the first tensor of `tensors` whose name `expected` lacks: `where(name)` names the
// input holding it, `what` the kind of checkpoint ("an EAGLE-3 head"); the message suggests the
// nearest expected name and, with `list_expected`, lists them all.
void CheckNoUnexpectedTensor(const std::map<std::string, std::vector<int64_t>>& expected,
                             const std::map<std::string, at::Tensor>& tensors,
                             const std::string& what,
                             const std::function<std::string(const std::string&)>& where,
                             bool list_expected);

// Checks a tensor `t` found under `where`: defined and of `shape`.
void CheckTensorShape(const at::Tensor& t, const std::vector<int64_t>& shape,
                      const std::string& where);

// Checks a weight tensor `t` found under `where`: defined, of `shape` and floating point.
void CheckWeightTensor(const at::Tensor& t, const std::vector<int64_t>& shape,
                       const std::string& where);

// Seed of a tensor's random init: splitmix64 of seed ^ FNV-1a(name).
uint64_t TensorNameSeed(uint64_t seed, const std::string& name);

// A float32 CPU tensor of `shape` drawn from N(0, stddev^2) with TensorNameSeed(seed, name): the
// same values for the same name whatever else the checkpoint holds (random heads, fresh training).
at::Tensor SeededNormalTensor(const std::vector<int64_t>& shape, uint64_t seed,
                              const std::string& name, double stddev);

}  // namespace specbed
