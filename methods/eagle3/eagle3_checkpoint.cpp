// EAGLE-3 head checkpoints: published tensor names and shapes, validation (names, shapes,
// dtypes, draft-vocabulary map), safetensors reading/writing, seeded random tensors and the
// draft-vocabulary construction from token counts.
// Checked by: tests/methods/eagle3_head_test.cpp.
#include "methods/eagle3/eagle3_checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>
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

constexpr const char* kCanonicalPrefix = "midlayer.";
constexpr const char* kVllmPrefix = "layers.0.";

std::string DtypeName(at::ScalarType dtype) {
  return c10::toString(dtype);
}

// `layers.0.` (vLLM / speculators) -> `midlayer.`; other names unchanged.
std::string CanonicalName(const std::string& stored) {
  if (StartsWith(stored, kVllmPrefix)) {
    return kCanonicalPrefix + stored.substr(std::string(kVllmPrefix).size());
  }
  return stored;
}

bool IsVocabMapName(const std::string& name) {
  return name == kEagle3D2t || name == kEagle3T2d;
}

}  // namespace

// Checks `tensors` against `config`; `where(name)` names the input holding tensor `name`, and
// `source` the whole set (for missing tensors).
void ValidateEagle3Tensors(const Eagle3Config& config,
                           const std::map<std::string, at::Tensor>& tensors,
                           const std::string& source, const TensorWhere& where_given) {
  const TensorWhere where = where_given ? where_given : TensorOf(source);
  config.Validate(source);
  const auto expected = ExpectedEagle3TensorShapes(config, /*with_embedding=*/true);
  CheckNoUnexpectedTensor(expected, tensors, "an EAGLE-3 head", where, /*list_expected=*/true);
  const bool identity_vocab = config.draft_vocab_size == config.vocab_size;
  for (const auto& [name, shape] : expected) {
    auto it = tensors.find(name);
    if (it == tensors.end()) {
      if (name == kEagle3Embed) continue;
      if (IsVocabMapName(name) && identity_vocab && tensors.count(kEagle3D2t) == 0 &&
          tensors.count(kEagle3T2d) == 0) {
        continue;
      }
      Fail(source, ": missing tensor '", name, "' (expected shape ", ShapeString(shape), ")",
           IsVocabMapName(name) ? (identity_vocab ? " (d2t and t2d must come together)"
                                                  : " (required when draft_vocab_size != "
                                                    "vocab_size)")
                                : "");
    }
    const at::Tensor& t = it->second;
    if (!IsVocabMapName(name)) {
      CheckWeightTensor(t, shape, where(name));
      continue;
    }
    CheckTensorShape(t, shape, where(name));
    const bool d2t = name == kEagle3D2t;
    SPECBED_CHECK(t.scalar_type() == (d2t ? at::kLong : at::kBool), where(name), ": dtype ",
                  DtypeName(t.scalar_type()), ", expected ",
                  d2t ? "Long (safetensors I64)" : "Bool (safetensors BOOL)");
  }

  // Draft-vocabulary map: d2t maps every draft id into [0, V) without collisions and t2d marks
  // exactly those target ids.
  auto d2t_it = tensors.find(kEagle3D2t);
  if (d2t_it == tensors.end()) return;
  const at::Tensor d2t = d2t_it->second.to(at::kCPU).contiguous();
  const at::Tensor t2d = tensors.at(kEagle3T2d).to(at::kCPU).contiguous();
  const int64_t vd = config.draft_vocab_size, v = config.vocab_size;
  const int64_t* off = d2t.data_ptr<int64_t>();
  const bool* mark = t2d.data_ptr<bool>();
  std::vector<int64_t> owner(v, -1);
  for (int64_t d = 0; d < vd; ++d) {
    const int64_t target = d + off[d];
    SPECBED_CHECK(target >= 0 && target < v, where(kEagle3D2t), ": draft id ", d,
                  " maps to target id ", d, " + ", off[d], " = ", target,
                  ", outside the vocabulary [0, ", v, ")");
    SPECBED_CHECK(owner[target] < 0, where(kEagle3D2t), ": draft ids ", owner[target], " and ", d,
                  " both map to target id ", target);
    owner[target] = d;
  }
  int64_t marked = 0;
  for (int64_t i = 0; i < v; ++i) marked += mark[i] ? 1 : 0;
  SPECBED_CHECK(marked == vd, where(kEagle3T2d), ": marks ", marked,
                " target ids, expected draft_vocab_size = ", vd);
  for (int64_t d = 0; d < vd; ++d) {
    const int64_t target = d + off[d];
    SPECBED_CHECK(mark[target], where(kEagle3T2d), ": target id ", target,
                  " is not marked although d2t maps draft id ", d,
                  " to it (t2d inconsistent with d2t)");
  }
}

namespace {

// d2t / t2d of a sorted list of distinct target ids.
DraftVocabMap VocabMapFromUsed(const std::vector<int64_t>& used, int64_t vocab_size) {
  const int64_t vd = static_cast<int64_t>(used.size());
  DraftVocabMap map;
  map.d2t = at::empty({vd}, at::TensorOptions().dtype(at::kLong));
  map.t2d = at::zeros({vocab_size}, at::TensorOptions().dtype(at::kBool));
  int64_t* d2t = map.d2t.data_ptr<int64_t>();
  bool* t2d = map.t2d.data_ptr<bool>();
  for (int64_t i = 0; i < vd; ++i) {
    d2t[i] = used[i] - i;
    t2d[used[i]] = true;
  }
  return map;
}

}  // namespace

std::map<std::string, std::vector<int64_t>> ExpectedEagle3TensorShapes(const Eagle3Config& c,
                                                                       bool with_embedding) {
  const int64_t h = c.hidden_size;
  std::map<std::string, std::vector<int64_t>> shapes;
  shapes[kEagle3Fc] = {h, c.fc_in_dim()};
  shapes[kEagle3HiddenNorm] = {h};
  shapes[kEagle3InputNorm] = {h};
  shapes[kEagle3QProj] = {c.q_dim(), 2 * h};
  shapes[kEagle3KProj] = {c.kv_dim(), 2 * h};
  shapes[kEagle3VProj] = {c.kv_dim(), 2 * h};
  shapes[kEagle3OProj] = {h, c.q_dim()};
  shapes[kEagle3PostNorm] = {h};
  shapes[kEagle3GateProj] = {c.intermediate_size, h};
  shapes[kEagle3UpProj] = {c.intermediate_size, h};
  shapes[kEagle3DownProj] = {h, c.intermediate_size};
  shapes[kEagle3FinalNorm] = {h};
  shapes[kEagle3LmHead] = {c.draft_vocab_size, h};
  shapes[kEagle3D2t] = {c.draft_vocab_size};
  shapes[kEagle3T2d] = {c.vocab_size};
  if (with_embedding) shapes[kEagle3Embed] = {c.vocab_size, h};
  return shapes;
}

Eagle3Checkpoint LoadEagle3Checkpoint(const std::string& dir) {
  Eagle3Checkpoint ckpt = ReadHeadCheckpointAs<Eagle3Checkpoint>(
      dir, "EAGLE-3",
      ", with the recipe in methods/eagle3/README.md (\"Converting a pytorch_model.bin head\")",
      ParseEagle3Config, ValidateEagle3Tensors, CanonicalName);
  if (ckpt.tensors.count(kEagle3D2t) == 0) {  // identity map (draft vocab == target vocab)
    std::vector<int64_t> used(ckpt.config.vocab_size);
    std::iota(used.begin(), used.end(), 0);
    DraftVocabMap map = VocabMapFromUsed(used, ckpt.config.vocab_size);
    ckpt.tensors[kEagle3D2t] = map.d2t;
    ckpt.tensors[kEagle3T2d] = map.t2d;
  }
  return ckpt;
}

void WriteEagle3Checkpoint(const std::string& dir, const Eagle3Config& config,
                           const std::map<std::string, at::Tensor>& tensors, const json& recipe,
                           SafetensorsDtype float_dtype) {
  WriteHeadCheckpointAs(dir, "EAGLE-3", config, tensors, recipe, float_dtype, Eagle3ConfigToJson,
                        ValidateEagle3Tensors);
}

std::map<std::string, at::Tensor> RandomEagle3Tensors(const Eagle3Config& config, uint64_t seed,
                                                      bool with_embedding) {
  config.Validate("RandomEagle3Tensors config");
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, shape] : ExpectedEagle3TensorShapes(config, with_embedding)) {
    if (IsVocabMapName(name)) continue;
    tensors[name] = EndsWith(name, "norm.weight") ? at::ones(shape, at::kFloat)
                                                  : SeededNormalTensor(shape, seed, name, 0.02);
  }
  // Draft vocabulary: a seeded partial Fisher-Yates draw of Vd target ids, sorted.
  const int64_t v = config.vocab_size, vd = config.draft_vocab_size;
  std::vector<int64_t> ids(v);
  std::iota(ids.begin(), ids.end(), 0);
  if (vd < v) {
    uint64_t state = TensorNameSeed(seed, kEagle3D2t);
    for (int64_t i = 0; i < vd; ++i) {
      state = Mix64(state + 0x9E3779B97F4A7C15ULL);
      const uint64_t range = static_cast<uint64_t>(v - i);
      const int64_t j =
          i + static_cast<int64_t>((static_cast<unsigned __int128>(state) * range) >> 64);
      std::swap(ids[i], ids[j]);
    }
    ids.resize(vd);
    std::sort(ids.begin(), ids.end());
  }
  DraftVocabMap map = VocabMapFromUsed(ids, v);
  tensors[kEagle3D2t] = map.d2t;
  tensors[kEagle3T2d] = map.t2d;
  return tensors;
}

DraftVocabMap BuildDraftVocabMap(const std::vector<int64_t>& target_token_counts,
                                 int64_t draft_vocab_size) {
  const int64_t v = static_cast<int64_t>(target_token_counts.size());
  SPECBED_CHECK(draft_vocab_size >= 1 && draft_vocab_size <= v,
                "BuildDraftVocabMap: draft_vocab_size ", draft_vocab_size,
                " outside [1, vocab_size = ", v, "]");
  for (int64_t i = 0; i < v; ++i) {
    SPECBED_CHECK(target_token_counts[i] >= 0, "BuildDraftVocabMap: token id ", i,
                  " has negative count ", target_token_counts[i]);
  }
  std::vector<int64_t> ids(v);
  std::iota(ids.begin(), ids.end(), 0);
  // Most frequent first, ties by the smaller id.
  std::partial_sort(ids.begin(), ids.begin() + draft_vocab_size, ids.end(),
                    [&](int64_t a, int64_t b) {
                      const int64_t ca = target_token_counts[a], cb = target_token_counts[b];
                      return ca != cb ? ca > cb : a < b;
                    });
  ids.resize(draft_vocab_size);
  std::sort(ids.begin(), ids.end());
  return VocabMapFromUsed(ids, v);
}

}  // namespace specbed
