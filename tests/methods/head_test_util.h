// Shared helpers for the draft-head tests (EAGLE-3, DFlash): the config fields both heads have
// (set and compared), small DFlash head configs, config.json as the parsers read it and the names
// it starts with, a loaded checkpoint against what was written, the message of a specbed::Error,
// checkpoint directories written as they are (no validation), tensor-map comparisons, the
// half-precision round-trip check, the checkpoint directory errors, and the row-loop / ATen path
// parameter of the forward tests.
// Checked by: tests/methods/eagle3_head_test.cpp, tests/methods/dflash_head_test.cpp,
// tests/methods/dflash_train_test.cpp, tests/cli/blockpilot_cli_test.cpp.
#pragma once

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/mapped_file.h"
#include "methods/common/head_aten.h"
#include "methods/dflash/dflash_config.h"
#include "methods/eagle3/eagle3_config.h"
#include "models/checkpoint/safetensors.h"

namespace specbed {
namespace testing_util {

using TensorMap = std::map<std::string, at::Tensor>;

// The message of the specbed::Error `fn` throws ("" and a test failure when it does not throw).
template <typename Fn>
std::string ErrorOf(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a specbed::Error";
  return "";
}

// The shape of a draft head's attention block and of what it reads: the fields every draft-head
// config (Eagle3Config, DflashConfig) has. The special tokens default to none, as in the configs.
struct HeadShape {
  int64_t hidden_size = 0, intermediate_size = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int64_t vocab_size = 0, max_position_embeddings = 0;
  double rms_norm_eps = 0, rope_theta = 0;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
};

// Sets `shape` in the draft-head config `c`.
template <typename HeadConfig>
void SetHeadShape(HeadConfig& c, const HeadShape& shape) {
  c.hidden_size = shape.hidden_size;
  c.intermediate_size = shape.intermediate_size;
  c.n_heads = shape.n_heads;
  c.n_kv_heads = shape.n_kv_heads;
  c.head_dim = shape.head_dim;
  c.vocab_size = shape.vocab_size;
  c.max_position_embeddings = shape.max_position_embeddings;
  c.rms_norm_eps = shape.rms_norm_eps;
  c.rope_theta = shape.rope_theta;
  c.bos_token_id = shape.bos_token_id;
  c.eos_token_ids = shape.eos_token_ids;
}

// A DFlash head config of `shape` with `n_layers` layers drafting blocks of `block_size` (mask
// token `mask_token_id`), reading layers `target_layer_ids` of a target of `num_target_layers`;
// every other field keeps its default (bidirectional blocks).
inline DflashConfig DflashConfigOf(const HeadShape& shape, int64_t n_layers, int64_t block_size,
                                   int64_t mask_token_id, int64_t num_target_layers,
                                   std::vector<int64_t> target_layer_ids) {
  DflashConfig c;
  SetHeadShape(c, shape);
  c.n_layers = n_layers;
  c.block_size = block_size;
  c.mask_token_id = mask_token_id;
  c.num_target_layers = num_target_layers;
  c.target_layer_ids = std::move(target_layer_ids);
  return c;
}

// The fields every draft-head config has (HeadShape, the RoPE scaling type and factor, the
// special tokens and the stored dtype) are equal in `a` and `b`.
template <typename HeadConfig>
void ExpectSameHeadConfigBase(const HeadConfig& a, const HeadConfig& b) {
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.n_heads, b.n_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
  EXPECT_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
  EXPECT_EQ(a.torch_dtype, b.torch_dtype);
}

// config.json of `c` as written (XConfigToJson), as a plain json for the parsers.
inline nlohmann::json ConfigJson(const DflashConfig& c) {
  return nlohmann::json::parse(DflashConfigToJson(c).dump());
}
inline nlohmann::json ConfigJson(const Eagle3Config& c) {
  return nlohmann::json::parse(Eagle3ConfigToJson(c).dump());
}

// The written config.json `j` names the architecture `architecture` (alone) and the model type
// `model_type`.
inline void ExpectConfigJsonNames(const nlohmann::ordered_json& j, const std::string& architecture,
                                  const std::string& model_type) {
  EXPECT_EQ(j["architectures"], nlohmann::ordered_json::array({architecture}));
  EXPECT_EQ(j["model_type"], model_type);
}

// The safetensors dtype a tensor of `type` is stored as (a test failure for any other type).
inline SafetensorsDtype SafetensorsDtypeOf(at::ScalarType type) {
  static const std::map<at::ScalarType, SafetensorsDtype> kDtypes = {
      {at::kFloat, SafetensorsDtype::kF32},     {at::kHalf, SafetensorsDtype::kF16},
      {at::kBFloat16, SafetensorsDtype::kBF16}, {at::kLong, SafetensorsDtype::kI64},
      {at::kInt, SafetensorsDtype::kI32},       {at::kByte, SafetensorsDtype::kU8},
      {at::kBool, SafetensorsDtype::kBool}};
  const auto it = kDtypes.find(type);
  if (it == kDtypes.end()) {
    ADD_FAILURE() << "unsupported dtype " << type;
    return SafetensorsDtype::kF32;
  }
  return it->second;
}

// Writes `text` to `path`, replacing the file.
inline void WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

// Writes config.json and the tensors as they are (no validation), with the stored names given.
inline void WriteRawCheckpoint(const std::string& dir, const nlohmann::json& config,
                               const TensorMap& tensors,
                               const std::string& file = "model.safetensors") {
  std::filesystem::create_directories(dir);
  WriteTextFile(dir + "/config.json", config.dump(2));
  std::vector<at::Tensor> keep;
  std::vector<SafetensorsTensorView> views;
  for (const auto& [name, t] : tensors) {
    const at::Tensor c = t.contiguous();
    keep.push_back(c);
    views.push_back({name, SafetensorsDtypeOf(c.scalar_type()), c.sizes().vec(), c.data_ptr(),
                     static_cast<size_t>(c.numel()) * c.element_size()});
  }
  WriteSafetensors(dir + "/" + file, views);
}

// `got` holds exactly the tensors of `want`, with the same dtypes and values.
inline void ExpectTensorsEqual(const TensorMap& got, const TensorMap& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, t] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_EQ(got.at(name).scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(at::equal(got.at(name), t)) << name;
  }
}

// `ckpt`, loaded from `dir` where `tensors` were written with `recipe`, holds them exactly and
// names `dir` as its source; dir/config.json names `architecture` first and stores `recipe` as
// "specbed_recipe".
template <typename Checkpoint>
void ExpectLoadedAsWritten(const Checkpoint& ckpt, const std::string& dir, const TensorMap& tensors,
                           const nlohmann::json& recipe, const std::string& architecture) {
  ExpectTensorsEqual(ckpt.tensors, tensors);
  EXPECT_EQ(ckpt.recipe, recipe);
  EXPECT_EQ(ckpt.source, dir);
  const nlohmann::json cj = nlohmann::json::parse(ReadFileToString(dir + "/config.json"));
  EXPECT_EQ(cj["architectures"][0], architecture);
  EXPECT_EQ(cj["specbed_recipe"], recipe);
}

// The half-precision storage dtypes a checkpoint writer accepts: (stored, torch, config name).
inline const std::vector<std::tuple<SafetensorsDtype, at::ScalarType, const char*>>&
HalfPrecisions() {
  static const std::vector<std::tuple<SafetensorsDtype, at::ScalarType, const char*>> kAll = {
      {SafetensorsDtype::kBF16, at::kBFloat16, "bfloat16"},
      {SafetensorsDtype::kF16, at::kHalf, "float16"}};
  return kAll;
}

// `got` (loaded from a checkpoint stored in `torch_dtype`, named `name`) holds the float32
// tensors of `want` rounded to that dtype exactly (within the dtype's tolerance of the original);
// tensors that are not floating point come back unchanged.
inline void ExpectStoredRounding(const TensorMap& got, const TensorMap& want,
                                 at::ScalarType torch_dtype, const std::string& name) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [tname, t] : want) {
    const at::Tensor& g = got.at(tname);
    if (!t.is_floating_point()) {
      EXPECT_TRUE(at::equal(g, t)) << tname;
      continue;
    }
    EXPECT_EQ(g.scalar_type(), at::kFloat) << tname;
    EXPECT_TRUE(at::equal(g, t.to(torch_dtype).to(at::kFloat))) << tname << " " << name;
    EXPECT_TRUE(at::allclose(g, t, /*rtol=*/1e-2, /*atol=*/1e-4)) << tname;
  }
}

// The directory errors every head checkpoint loader reports: a missing directory, no
// config.json, no model.safetensors, and only a pickled pytorch_model.bin (whose message must
// contain every one of `pickle_parts`). `dir` is an empty scratch directory.
inline void ExpectCheckpointDirectoryErrors(const std::string& dir, const nlohmann::json& config,
                                            const std::function<void(const std::string&)>& load,
                                            const std::vector<std::string>& pickle_parts) {
  using ::testing::HasSubstr;
  EXPECT_THAT(ErrorOf([&] { load(dir + "/nope"); }), HasSubstr("not a directory"));
  EXPECT_THAT(ErrorOf([&] { load(dir); }), HasSubstr("missing config.json"));
  WriteTextFile(dir + "/config.json", config.dump());
  EXPECT_THAT(ErrorOf([&] { load(dir); }), HasSubstr("no model.safetensors"));
  WriteTextFile(dir + "/pytorch_model.bin", "pickle");
  const std::string msg = ErrorOf([&] { load(dir); });
  for (const std::string& part : pickle_parts) EXPECT_THAT(msg, HasSubstr(part));
}

// |got - want| / |want| in the L2 norm.
inline double RelativeL2(const at::Tensor& got, const at::Tensor& want) {
  return (got - want).norm().item<double>() / want.norm().item<double>();
}

// On the GPU in float32 and bfloat16, `run` (given the placement) matches `rows` (the row loops'
// result) within 1e-4 and 3e-2 relative L2; `run` moves its inputs to the placement's device.
inline void ExpectGpuMatchesRows(const at::Tensor& rows,
                                 const std::function<at::Tensor(const HeadPlacement&)>& run) {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const HeadPlacement gpu{at::Device(at::kCUDA, 0), dtype, true};
    EXPECT_LT(RelativeL2(run(gpu), rows), dtype == at::kFloat ? 1e-4 : 3e-2) << dtype;
  }
}

// Test names of the forward suites parameterized on the path: "Aten" or "Rows".
inline std::string PathName(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "Aten" : "Rows";
}

}  // namespace testing_util
}  // namespace specbed
