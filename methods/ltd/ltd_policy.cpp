// LTD policy config, tensors, observations and inference (see ltd_policy.h).
// Checked by: tests/methods/ltd_test.cpp.
#include "methods/ltd/ltd_policy.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "base/json_read.h"
#include "methods/common/json_fields.h"
#include "models/checkpoint/head_checkpoint.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/config_fields.h"

namespace specbed {
namespace cf = config_fields;

const char* LtdPolicyKindName(LtdPolicyKind kind) {
  return kind == LtdPolicyKind::kDepth ? "depth" : "size";
}

int64_t LtdPolicyConfig::obs_dim() const {
  const int64_t scores =
      kind == LtdPolicyKind::kDepth ? top_k * top_k : top_k + max_depth * top_k * top_k;
  return scores + 2 * feature_repeat;
}

void LtdPolicyConfig::Validate(const std::string& source) const {
  SPECBED_CHECK(top_k >= 1 && top_k <= 64, source, ": top_k must be in [1, 64], got ", top_k);
  SPECBED_CHECK(max_depth >= 1 && max_depth <= 31, source, ": max_depth must be in [1, 31], got ",
                max_depth);
  SPECBED_CHECK(feature_repeat >= 1, source, ": feature_repeat must be >= 1, got ", feature_repeat);
  SPECBED_CHECK(size_step >= 1, source, ": size_step must be >= 1, got ", size_step);
  SPECBED_CHECK(kind == LtdPolicyKind::kDepth ? n_actions == 2 : n_actions >= 1, source,
                ": n_actions must be 2 for a depth policy and >= 1 for a size policy, got ",
                n_actions);
  SPECBED_CHECK(depth_every >= 1, source, ": depth_every must be >= 1, got ", depth_every);
  SPECBED_CHECK(activation == "tanh" || activation == "relu", source,
                ": activation must be \"tanh\" or \"relu\", got \"", activation, "\"");
  SPECBED_CHECK(length_feature == "length" || length_feature == "constant", source,
                ": length_feature must be \"length\" or \"constant\", got \"", length_feature,
                "\"");
  for (int64_t h : actor_hidden)
    SPECBED_CHECK(h >= 1, source, ": actor_hidden widths must be >= 1");
  for (int64_t h : critic_hidden)
    SPECBED_CHECK(h >= 1, source, ": critic_hidden widths must be >= 1");
}

LtdPolicyConfig DefaultLtdPolicyConfig(LtdPolicyKind kind) {
  LtdPolicyConfig c;
  c.kind = kind;
  if (kind == LtdPolicyKind::kDepth) {
    c.feature_repeat = 14;
    c.n_actions = 2;
    c.actor_hidden = {1024};
  } else {
    c.feature_repeat = 29;
    c.n_actions = 24;
    c.actor_hidden = {1024, 256};
  }
  c.critic_hidden = {1024, 256};
  return c;
}

// The fields of ParseLtdPolicyConfig; nlohmann type errors escape (see ParseLtdPolicyConfig).
static LtdPolicyConfig ParseLtdPolicyConfigFields(const nlohmann::json& j,
                                                  const std::string& source) {
  CheckLtdConfigFormat(j, "specbed-ltd-policy", source);
  const std::string kind = cf::GetString(j, "kind", source, "");
  SPECBED_CHECK(kind == "depth" || kind == "size", source,
                ": field 'kind' must be \"depth\" or \"size\", got \"", kind, "\"");
  LtdPolicyConfig c =
      DefaultLtdPolicyConfig(kind == "depth" ? LtdPolicyKind::kDepth : LtdPolicyKind::kSize);
  c.top_k = cf::GetInt(j, "top_k", source);
  c.max_depth = cf::GetInt(j, "max_depth", source);
  c.feature_repeat = cf::GetInt(j, "feature_repeat", source);
  c.size_step = cf::GetInt(j, "size_step", source, c.size_step);
  c.n_actions = cf::GetInt(j, "n_actions", source);
  c.depth_every = cf::GetInt(j, "depth_every", source, c.depth_every);
  c.actor_hidden = cf::GetIntList(j, "actor_hidden", source);
  c.critic_hidden = cf::GetIntList(j, "critic_hidden", source);
  c.activation = cf::GetString(j, "activation", source, c.activation);
  c.length_feature = cf::GetString(j, "length_feature", source, c.length_feature);
  ReadLtdRecords(j, c.training, c.evaluation);
  c.Validate(source);
  return c;
}

LtdPolicyConfig ParseLtdPolicyConfig(const nlohmann::json& j, const std::string& source) {
  // A type error (a string where a number belongs, ...) names the file and the field's JSON
  // pointer.
  return WithJsonContext(source, [&] { return ParseLtdPolicyConfigFields(j, source); });
}

void CheckLtdConfigFormat(const nlohmann::json& j, const char* format, const std::string& source) {
  SPECBED_CHECK(j.is_object(), source, ": expected a JSON object");
  const std::string got = cf::GetString(j, "format", source, "");
  SPECBED_CHECK(got == format, source, ": field 'format' must be \"", format, "\", got \"", got,
                "\"");
}

nlohmann::ordered_json LtdConfigHead(const char* format, const char* kind) {
  nlohmann::ordered_json j;
  j["format"] = format;
  j["version"] = 1;
  j["kind"] = kind;
  return j;
}

void ReadLtdRecords(const nlohmann::json& j, nlohmann::ordered_json& training,
                    nlohmann::ordered_json& evaluation) {
  if (j.contains("training")) training = j["training"];
  if (j.contains("evaluation")) evaluation = j["evaluation"];
}

nlohmann::ordered_json LtdPolicyConfigToJson(const LtdPolicyConfig& c) {
  nlohmann::ordered_json j = LtdConfigHead("specbed-ltd-policy", LtdPolicyKindName(c.kind));
  SPECBED_JSON_PUT(j, c, top_k, max_depth, feature_repeat);
  j["obs_dim"] = c.obs_dim();
  SPECBED_JSON_PUT(j, c, size_step, n_actions, depth_every, actor_hidden, critic_hidden, activation,
                   length_feature, training, evaluation);
  return j;
}

namespace {

void AddMlpShapes(std::map<std::string, std::vector<int64_t>>& shapes, const std::string& prefix,
                  int64_t in, const std::vector<int64_t>& hidden, int64_t out) {
  int64_t width = in;
  for (size_t i = 0; i < hidden.size(); ++i) {
    shapes[prefix + "." + std::to_string(i) + ".weight"] = {hidden[i], width};
    shapes[prefix + "." + std::to_string(i) + ".bias"] = {hidden[i]};
    width = hidden[i];
  }
  shapes[prefix + "_out.weight"] = {out, width};
  shapes[prefix + "_out.bias"] = {out};
}

}  // namespace

std::map<std::string, std::vector<int64_t>> ExpectedLtdPolicyShapes(const LtdPolicyConfig& c) {
  std::map<std::string, std::vector<int64_t>> shapes;
  AddMlpShapes(shapes, "actor", c.obs_dim(), c.actor_hidden, c.actions());
  AddMlpShapes(shapes, "critic", c.obs_dim(), c.critic_hidden, 1);
  return shapes;
}

std::map<std::string, at::Tensor> RandomLtdPolicyTensors(const LtdPolicyConfig& c, uint64_t seed) {
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, shape] : ExpectedLtdPolicyShapes(c)) {
    double gain = std::sqrt(2.0);
    if (name == "actor_out.weight") gain = 0.01;
    if (name == "critic_out.weight") gain = 1.0;
    tensors[name] =
        shape.size() == 2
            ? SeededNormalTensor(shape, seed, name, gain / std::sqrt(static_cast<double>(shape[1])))
            : at::zeros(shape, at::kFloat);
  }
  return tensors;
}

std::map<std::string, at::Tensor> ReadLtdTensors(
    const std::string& dir, const std::string& where,
    const std::map<std::string, std::vector<int64_t>>& shapes, const std::string& detail) {
  HeadTensors stored = ReadHeadTensors(dir, where, " (see methods/ltd/README.md)");
  CheckNamedTensorShapes(shapes, stored.tensors, where + "/model.safetensors", detail);
  std::map<std::string, at::Tensor> tensors;
  for (auto& [name, t] : stored.tensors) tensors[name] = t.to(at::kFloat).contiguous();
  return tensors;
}

void WriteLtdCheckpoint(const std::string& dir, nlohmann::ordered_json config_json,
                        const std::map<std::string, at::Tensor>& tensors,
                        const std::map<std::string, std::vector<int64_t>>& shapes,
                        const std::string& detail, const std::string& where) {
  CheckNamedTensorShapes(shapes, tensors, where, detail);
  std::map<std::string, at::Tensor> detached;
  for (const auto& [name, t] : tensors) detached[name] = t.detach().to(at::kFloat).contiguous();
  WriteHeadCheckpoint(dir, std::move(config_json), nullptr, detached, SafetensorsDtype::kF32,
                      where);
}

namespace {
constexpr const char* kPolicyTensorNames =
    "(expected actor.{i}, actor_out, critic.{i}, critic_out)";
}  // namespace

LtdPolicyCheckpoint LoadLtdPolicy(const std::string& dir) {
  return LoadLtdCheckpointAs<LtdPolicyCheckpoint>(
      dir, "LTD policy", ParseLtdPolicyConfig, ExpectedLtdPolicyShapes,
      [](const LtdPolicyConfig&) { return std::string(kPolicyTensorNames); });
}

void WriteLtdPolicy(const std::string& dir, const LtdPolicyConfig& config,
                    const std::map<std::string, at::Tensor>& tensors) {
  const std::string where = "writing LTD policy '" + dir + "'";
  config.Validate(where);
  WriteLtdCheckpoint(dir, LtdPolicyConfigToJson(config), tensors, ExpectedLtdPolicyShapes(config),
                     kPolicyTensorNames, where);
}

namespace {

void FillFeatures(const LtdPolicyConfig& c, int64_t context_len, int64_t rounds, float* tail) {
  const float l = c.length_feature == "constant" ? 0.01f : static_cast<float>(context_len) / 1000.f;
  const float d = static_cast<float>(rounds) / 10.f;
  for (int64_t i = 0; i < c.feature_repeat; ++i) {
    tail[i] = l;
    tail[c.feature_repeat + i] = d;
  }
}

}  // namespace

void EncodeDepthObservation(const LtdPolicyConfig& c, const float* child_scores, int64_t n,
                            int64_t context_len, int64_t rounds, float* obs) {
  const int64_t slots = c.top_k * c.top_k;
  const int64_t m = std::min(n, slots);
  std::copy(child_scores, child_scores + m, obs);
  std::fill(obs + m, obs + slots, 0.f);
  FillFeatures(c, context_len, rounds, obs + slots);
}

void EncodeSizeObservation(const LtdPolicyConfig& c, const float* scores, int64_t n,
                           int64_t context_len, int64_t rounds, float* obs) {
  const int64_t slots = c.top_k + c.max_depth * c.top_k * c.top_k;
  const int64_t m = std::min(n, slots);
  std::copy(scores, scores + m, obs);
  std::fill(obs + m, obs + slots, 0.f);
  FillFeatures(c, context_len, rounds, obs + slots);
}

int64_t LtdVerifySize(const LtdPolicyConfig& c, int64_t action) {
  return c.size_step * (action + 1);
}

float LtdDot(const float* a, const float* b, int64_t n) {
  // Eight independent partial sums (vectorisable without reassociating a single chain).
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

LtdPolicy::LtdPolicy(LtdPolicyCheckpoint checkpoint) : config_(std::move(checkpoint.config)) {
  config_.Validate("LTD policy");
  relu_ = config_.activation == "relu";
  int64_t width = config_.obs_dim();
  const size_t layers = config_.actor_hidden.size() + 1;
  for (size_t i = 0; i < layers; ++i) {
    const std::string prefix =
        i + 1 == layers ? std::string("actor_out") : "actor." + std::to_string(i);
    const at::Tensor w = checkpoint.tensors.at(prefix + ".weight").contiguous();
    const at::Tensor b = checkpoint.tensors.at(prefix + ".bias").contiguous();
    weights_.emplace_back(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
    biases_.emplace_back(b.data_ptr<float>(), b.data_ptr<float>() + b.numel());
    in_.push_back(width);
    out_.push_back(w.size(0));
    acts_.emplace_back(static_cast<size_t>(w.size(0)));
    width = w.size(0);
  }
  obs_.assign(static_cast<size_t>(config_.obs_dim()), 0.f);
}

int64_t LtdPolicy::Act(const float* obs) {
  const float* x = obs;
  for (size_t l = 0; l < weights_.size(); ++l) {
    const float* w = weights_[l].data();
    float* y = acts_[l].data();
    const int64_t in = in_[l];
    for (int64_t j = 0; j < out_[l]; ++j) {
      float s = LtdDot(w + j * in, x, in) + biases_[l][j];
      if (l + 1 < weights_.size()) s = relu_ ? std::max(s, 0.f) : std::tanh(s);
      y[j] = s;
    }
    x = y;
  }
  const std::vector<float>& z = acts_.back();
  int64_t best = 0;
  for (size_t a = 1; a < z.size(); ++a) {
    if (z[a] > z[best]) best = static_cast<int64_t>(a);
  }
  return best;
}

}  // namespace specbed
