// Disco / SpecDec++ / C2T classifiers: checkpoint, features, inference (see ltd_classifiers.h).
// Checked by: tests/methods/ltd_classifier_test.cpp.
#include "methods/ltd/ltd_classifiers.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "base/enum_names.h"
#include "base/error.h"
#include "base/json_read.h"
#include "methods/common/json_fields.h"
#include "methods/ltd/ltd_policy.h"
#include "models/checkpoint/head_checkpoint.h"
#include "models/config_fields.h"
#include "models/twin/cost_twin.h"

namespace specbed {
namespace cf = config_fields;

SPECBED_ENUM_NAMES(LtdClassifierKind, "classifier kind", LtdClassifierKindName,
                   ParseLtdClassifierKind, {LtdClassifierKind::kDisco, "disco"},
                   {LtdClassifierKind::kSpecDec, "specdecpp"}, {LtdClassifierKind::kC2t, "c2t"})

void LtdClassifierConfig::Validate(const std::string& source) const {
  SPECBED_CHECK(top_k >= 1 && top_k <= 64, source, ": top_k must be in [1, 64], got ", top_k);
  SPECBED_CHECK(hidden >= 1 && hidden <= 65536, source, ": hidden must be in [1, 65536], got ",
                hidden);
  const int64_t want = kind == LtdClassifierKind::kDisco ? top_k + 2
                       : kind == LtdClassifierKind::kC2t ? 2
                                                         : input_dim;
  SPECBED_CHECK(
      input_dim >= 1 && input_dim == want, source, ": input_dim ", input_dim, " does not fit a ",
      LtdClassifierKindName(kind), " classifier (expected ",
      kind == LtdClassifierKind::kSpecDec ? "the head's hidden size, >= 1" : std::to_string(want),
      ")");
}

LtdClassifierConfig DefaultLtdClassifierConfig(LtdClassifierKind kind, int64_t top_k,
                                               int64_t hidden_size) {
  LtdClassifierConfig c;
  c.kind = kind;
  c.top_k = top_k;
  switch (kind) {
    case LtdClassifierKind::kDisco:
      c.input_dim = top_k + 2;
      c.hidden = 128;
      break;
    case LtdClassifierKind::kSpecDec:
      c.input_dim = hidden_size;
      c.hidden = 1024;
      break;
    case LtdClassifierKind::kC2t:
      c.input_dim = 2;
      c.hidden = 64;
      break;
  }
  return c;
}

static LtdClassifierConfig ParseFields(const nlohmann::json& j, const std::string& source) {
  CheckLtdConfigFormat(j, "specbed-ltd-classifier", source);
  LtdClassifierConfig c;
  c.kind = ParseLtdClassifierKind(cf::GetString(j, "kind", source, ""), source + " field 'kind'");
  c.input_dim = cf::GetInt(j, "input_dim", source);
  c.hidden = cf::GetInt(j, "hidden", source);
  c.top_k = cf::GetInt(j, "top_k", source);
  ReadLtdRecords(j, c.training, c.evaluation);
  c.Validate(source);
  return c;
}

LtdClassifierConfig ParseLtdClassifierConfig(const nlohmann::json& j, const std::string& source) {
  return WithJsonContext(source, [&] { return ParseFields(j, source); });
}

nlohmann::ordered_json LtdClassifierConfigToJson(const LtdClassifierConfig& c) {
  nlohmann::ordered_json j = LtdConfigHead("specbed-ltd-classifier", LtdClassifierKindName(c.kind));
  SPECBED_JSON_PUT(j, c, input_dim, hidden, top_k, training, evaluation);
  return j;
}

std::map<std::string, std::vector<int64_t>> ExpectedLtdClassifierShapes(
    const LtdClassifierConfig& c) {
  std::map<std::string, std::vector<int64_t>> s = {
      {"fc.weight", {c.hidden, c.input_dim}},
      {"fc.bias", {c.hidden}},
      {"out.weight", {1, c.hidden}},
      {"out.bias", {1}},
  };
  if (c.kind == LtdClassifierKind::kSpecDec) {
    s["skip.weight"] = {c.hidden, c.input_dim};
    s["skip.bias"] = {c.hidden};
  }
  return s;
}

namespace {

// What a shape mismatch adds to its message.
std::string TensorDetail(const LtdClassifierConfig& c) {
  return std::string("for a ") + LtdClassifierKindName(c.kind) + " classifier";
}

void ValidateTensors(const LtdClassifierConfig& c, const std::map<std::string, at::Tensor>& tensors,
                     const std::string& where) {
  CheckNamedTensorShapes(ExpectedLtdClassifierShapes(c), tensors, where, TensorDetail(c));
}

}  // namespace

LtdClassifierCheckpoint LoadLtdClassifier(const std::string& dir) {
  return LoadLtdCheckpointAs<LtdClassifierCheckpoint>(dir, "LTD baseline classifier",
                                                      ParseLtdClassifierConfig,
                                                      ExpectedLtdClassifierShapes, TensorDetail);
}

void WriteLtdClassifier(const std::string& dir, const LtdClassifierCheckpoint& checkpoint) {
  const std::string where = "writing LTD baseline classifier '" + dir + "'";
  const LtdClassifierConfig& c = checkpoint.config;
  c.Validate(where);
  WriteLtdCheckpoint(dir, LtdClassifierConfigToJson(c), checkpoint.tensors,
                     ExpectedLtdClassifierShapes(c), TensorDetail(c), where);
}

LtdClassifierCheckpoint LtdClassifierTwin(const LtdClassifierCheckpoint& in, int64_t width_factor) {
  SPECBED_CHECK(width_factor >= 1 && width_factor <= 64,
                "LTD classifier twin: width factor must be in [1, 64], got ", width_factor);
  if (in.config.kind != LtdClassifierKind::kSpecDec) return in;
  LtdClassifierCheckpoint out = in;
  out.config.input_dim = in.config.input_dim * width_factor;
  for (const char* name : {"fc.weight", "skip.weight"}) {
    out.tensors[name] =
        PadInputBlocks(in.tensors.at(name), in.config.input_dim, out.config.input_dim);
  }
  out.config.training["cost_twin"] = {{"width_factor", width_factor}};
  return out;
}

at::Tensor LtdClassifierLogits(const LtdClassifierConfig& c,
                               const std::map<std::string, at::Tensor>& w,
                               const at::Tensor& features) {
  const at::Tensor h = at::linear(features, w.at("fc.weight"), w.at("fc.bias"));
  const at::Tensor a =
      c.kind == LtdClassifierKind::kSpecDec
          ? at::silu(h) + at::linear(features, w.at("skip.weight"), w.at("skip.bias"))
          : at::relu(h);
  return at::linear(a, w.at("out.weight"), w.at("out.bias")).squeeze(-1);
}

void EncodeDiscoFeatures(int64_t top_k, const float* beam_scores, int64_t n_beam, double entropy,
                         int64_t rounds, float* out) {
  for (int64_t i = 0; i < top_k; ++i) out[i] = i < n_beam ? std::exp(beam_scores[i]) : 0.f;
  out[top_k] = static_cast<float>(entropy);
  out[top_k + 1] = static_cast<float>(rounds) / 10.f;
}

void EncodeC2tFeatures(float score, int64_t depth, float* out) {
  out[0] = score;
  out[1] = static_cast<float>(depth) / 10.f;
}

int64_t BeamCandidateDepth(int64_t index, int64_t top_k) {
  if (index < top_k) return 1;
  return 2 + (index - top_k) / (top_k * top_k);
}

namespace {

std::vector<float> HostCopy(const at::Tensor& t) {
  const at::Tensor c = t.to(at::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

}  // namespace

LtdClassifier::LtdClassifier(LtdClassifierCheckpoint checkpoint)
    : config_(std::move(checkpoint.config)) {
  config_.Validate("LTD baseline classifier");
  ValidateTensors(config_, checkpoint.tensors, "LTD baseline classifier");
  fc_w_ = HostCopy(checkpoint.tensors.at("fc.weight"));
  fc_b_ = HostCopy(checkpoint.tensors.at("fc.bias"));
  out_w_ = HostCopy(checkpoint.tensors.at("out.weight"));
  out_b_ = HostCopy(checkpoint.tensors.at("out.bias"))[0];
  if (config_.kind == LtdClassifierKind::kSpecDec) {
    skip_w_ = HostCopy(checkpoint.tensors.at("skip.weight"));
    skip_b_ = HostCopy(checkpoint.tensors.at("skip.bias"));
  }
  act_.assign(static_cast<size_t>(config_.hidden), 0.f);
  features_.assign(static_cast<size_t>(config_.input_dim), 0.f);
}

float LtdClassifier::Logit(const float* x) {
  const int64_t in = config_.input_dim;
  const bool resnet = config_.kind == LtdClassifierKind::kSpecDec;
  for (int64_t j = 0; j < config_.hidden; ++j) {
    const float h = LtdDot(fc_w_.data() + j * in, x, in) + fc_b_[j];
    act_[j] = resnet
                  ? h / (1.f + std::exp(-h)) + LtdDot(skip_w_.data() + j * in, x, in) + skip_b_[j]
                  : std::max(h, 0.f);
  }
  return LtdDot(out_w_.data(), act_.data(), config_.hidden) + out_b_;
}

float LtdClassifier::Probability(const float* x) {
  return 1.f / (1.f + std::exp(-Logit(x)));
}

}  // namespace specbed
