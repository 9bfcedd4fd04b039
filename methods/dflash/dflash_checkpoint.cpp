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

#include "base/error.h"
#include "base/hash.h"
#include "base/mapped_file.h"
#include "base/names.h"
#include "methods/common/head_config.h"
#include "models/checkpoint/head_checkpoint.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/tensor_util.h"

namespace specbed {
namespace {

using nlohmann::json;

}  // namespace

// Checks `tensors` against `config`; `where(name)` names the input holding tensor `name`, and
// `source` the whole set (for missing tensors).
void ValidateDflashTensors(const DflashConfig& config,
                           const std::map<std::string, at::Tensor>& tensors,
                           const std::string& source, const TensorWhere& where_given) {
  const TensorWhere where = where_given ? where_given : TensorOf(source);
  config.Validate(source);
  const auto expected = ExpectedDflashTensorShapes(config);
  CheckNoUnexpectedTensor(expected, tensors, "a DFlash draft", where, /*list_expected=*/false);
  for (const auto& [name, shape] : expected) {
    auto it = tensors.find(name);
    SPECBED_CHECK(it != tensors.end(), source, ": missing tensor '", name, "' (expected shape ",
                  ShapeString(shape), ")");
    CheckWeightTensor(it->second, shape, where(name));
  }
}

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

DflashCheckpoint LoadDflashCheckpoint(const std::string& dir) {
  return ReadHeadCheckpointAs<DflashCheckpoint>(dir, "DFlash", " (see methods/dflash/README.md)",
                                                ParseDflashConfig, ValidateDflashTensors);
}

void WriteDflashCheckpoint(const std::string& dir, const DflashConfig& config,
                           const std::map<std::string, at::Tensor>& tensors, const json& recipe,
                           SafetensorsDtype float_dtype) {
  WriteHeadCheckpointAs(dir, "DFlash", config, tensors, recipe, float_dtype, DflashConfigToJson,
                        ValidateDflashTensors);
}

std::map<std::string, at::Tensor> RandomDflashTensors(const DflashConfig& config, uint64_t seed) {
  config.Validate("RandomDflashTensors config");
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, shape] : ExpectedDflashTensorShapes(config)) {
    tensors[name] = EndsWith(name, "norm.weight") ? at::ones(shape, at::kFloat)
                                                  : SeededNormalTensor(shape, seed, name, 0.02);
  }
  return tensors;
}

}  // namespace specbed
