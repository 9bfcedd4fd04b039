// H-RAD predictor (see hrad.h).
#include "methods/specbranch/hrad.h"

#include <ATen/ATen.h>

#include <cmath>
#include <random>

#include "base/error.h"
#include "base/json_read.h"
#include "methods/common/host_features.h"
#include "models/checkpoint/head_checkpoint.h"
#include "models/checkpoint/safetensors.h"
#include "models/twin/cost_twin.h"

namespace specbed {

std::vector<int64_t> HradConfig::Layers() const {
  std::vector<int64_t> layers;
  for (int64_t l = target_layers - feature_layers + 1; l <= target_layers; ++l) {
    layers.push_back(std::max<int64_t>(l, 0));
  }
  return layers;
}

nlohmann::ordered_json HradConfigToJson(const HradConfig& c) {
  nlohmann::ordered_json j;
  j["format"] = "specbed-hrad";
  j["version"] = 1;
  j["target_dim"] = c.target_dim;
  j["feature_layers"] = c.feature_layers;
  j["target_layers"] = c.target_layers;
  j["hidden"] = c.hidden;
  j["classes"] = {"all_reject", "confidence", "all_accept"};
  j["features"] =
      "concat(hidden states of target layers L-K+1..L (residual stream, before the final norm) "
      "at the last verified position, target tok_embeddings[newest token]), float32";
  j["training"] = c.training;
  j["evaluation"] = c.evaluation;
  return j;
}

// The fields of ParseHradConfig; nlohmann type errors escape (see ParseHradConfig).
static HradConfig ParseHradConfigFields(const nlohmann::json& j, const std::string& source) {
  SPECBED_CHECK(j.is_object() && j.value("format", "") == "specbed-hrad", source,
                ": not an H-RAD predictor config (format must be \"specbed-hrad\")");
  SPECBED_CHECK(j.value("version", 0) == 1, source, ": unsupported H-RAD config version");
  HradConfig c;
  c.target_dim = j.at("target_dim").get<int64_t>();
  c.feature_layers = j.at("feature_layers").get<int64_t>();
  c.target_layers = j.at("target_layers").get<int64_t>();
  c.hidden = j.at("hidden").get<std::vector<int64_t>>();
  if (j.contains("training")) c.training = j.at("training");
  if (j.contains("evaluation")) c.evaluation = j.at("evaluation");
  SPECBED_CHECK(
      c.target_dim > 0 && c.feature_layers >= 1 && c.target_layers >= 1 && c.hidden.size() == 2,
      source, ": impossible H-RAD config (target_dim ", c.target_dim, ", K ", c.feature_layers,
      ", target_layers ", c.target_layers, ")");
  return c;
}

HradConfig ParseHradConfig(const nlohmann::json& j, const std::string& source) {
  // A type error (a string where a number belongs, ...) names the file and the field's JSON
  // pointer.
  return WithJsonContext(source, [&] { return ParseHradConfigFields(j, source); });
}

namespace {
std::vector<std::pair<int64_t, int64_t>> Shapes(const HradConfig& c) {
  return {{c.hidden[0], c.input_dim()}, {c.hidden[1], c.hidden[0]}, {3, c.hidden[1]}};
}
std::string Name(size_t i, bool bias) {
  return "mlp." + std::to_string(i) + (bias ? ".bias" : ".weight");
}
}  // namespace

std::map<std::string, at::Tensor> RandomHradTensors(const HradConfig& config, uint64_t seed) {
  std::map<std::string, at::Tensor> t;
  const auto shapes = Shapes(config);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto [out, in] = shapes[i];
    std::mt19937_64 rng(TensorNameSeed(seed, Name(i, false)));
    std::normal_distribution<float> normal(0.f, 1.f / std::sqrt(3.f * in));
    at::Tensor w = at::empty({out, in}, at::kFloat);
    float* p = w.data_ptr<float>();
    for (int64_t k = 0; k < out * in; ++k) p[k] = normal(rng);
    t[Name(i, false)] = w;
    t[Name(i, true)] = at::zeros({out}, at::kFloat);
  }
  return t;
}

HradCheckpoint LoadHradCheckpoint(const std::string& dir) {
  const std::string where = "H-RAD predictor '" + dir + "'";
  const HeadConfigFile file = ReadHeadConfig(dir, where);
  HradCheckpoint ckpt;
  ckpt.source = dir;
  ckpt.config = ParseHradConfig(file.config, file.path);
  HeadTensors stored = ReadHeadTensors(dir, where, " (see methods/specbranch/README.md)");
  ckpt.tensors = std::move(stored.tensors);
  return ckpt;
}

HradCheckpoint HradTwin(const HradCheckpoint& in, int64_t width_factor) {
  SPECBED_CHECK(width_factor >= 1 && width_factor <= 64, in.source,
                ": cost-twin width factor must be in [1, 64], got ", width_factor);
  HradCheckpoint out = in;
  out.config.target_dim = in.config.target_dim * width_factor;
  out.tensors["mlp.0.weight"] =
      PadInputBlocks(in.tensors.at("mlp.0.weight"), in.config.target_dim, out.config.target_dim);
  out.config.training["cost_twin"] = {{"of", in.source}, {"width_factor", width_factor}};
  return out;
}

void WriteHradCheckpoint(const std::string& dir, const HradConfig& config,
                         const std::map<std::string, at::Tensor>& tensors) {
  WriteHeadCheckpoint(dir, HradConfigToJson(config), nullptr, tensors, SafetensorsDtype::kF32,
                      "writing H-RAD predictor '" + dir + "'");
}

void HradFeatures(const std::vector<at::Tensor>& hidden, int64_t slot, const at::Tensor& embedding,
                  int32_t token, std::vector<float>& out) {
  const int64_t dim = embedding.size(1);
  out.resize(static_cast<size_t>((hidden.size() + 1) * dim));
  for (size_t k = 0; k < hidden.size(); ++k) {
    const at::Tensor row = HostFloat32(hidden[k].select(0, 0).select(0, slot));
    std::copy(row.data_ptr<float>(), row.data_ptr<float>() + dim, out.data() + k * dim);
  }
  const at::Tensor e = HostFloat32(embedding.select(0, token));
  std::copy(e.data_ptr<float>(), e.data_ptr<float>() + dim, out.data() + hidden.size() * dim);
}

HradPredictor::HradPredictor(HradConfig config, const std::map<std::string, at::Tensor>& tensors)
    : config_(std::move(config)) {
  const auto shapes = Shapes(config_);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const auto [out, in] = shapes[i];
    for (bool bias : {false, true}) {
      auto it = tensors.find(Name(i, bias));
      SPECBED_CHECK(it != tensors.end(), "H-RAD predictor: missing tensor '", Name(i, bias), "'");
      const at::Tensor t = it->second.to(at::kFloat).contiguous();
      SPECBED_CHECK(bias ? (t.dim() == 1 && t.size(0) == out)
                         : (t.dim() == 2 && t.size(0) == out && t.size(1) == in),
                    "H-RAD predictor: tensor '", Name(i, bias), "' has shape ", t.sizes(),
                    ", expected [", out, bias ? "" : ", " + std::to_string(in), "]");
      std::vector<float> v(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
      (bias ? b_ : w_).push_back(std::move(v));
    }
    in_.push_back(in);
    out_.push_back(out);
  }
}

int HradPredictor::Classify(const std::vector<float>& z) {
  SPECBED_CHECK(static_cast<int64_t>(z.size()) == in_[0], "H-RAD: feature size ", z.size(),
                ", expected ", in_[0]);
  const std::vector<float>* x = &z;
  std::vector<float>* outs[3] = {&a_, &b2_, &logits_};
  for (size_t l = 0; l < 3; ++l) {
    std::vector<float>& y = *outs[l];
    y.assign(static_cast<size_t>(out_[l]), 0.f);
    for (int64_t o = 0; o < out_[l]; ++o) {
      const float* w = w_[l].data() + o * in_[l];
      double acc = b_[l][o];
      for (int64_t i = 0; i < in_[l]; ++i) acc += static_cast<double>(w[i]) * (*x)[i];
      y[o] = (l < 2 && acc < 0) ? 0.f : static_cast<float>(acc);
    }
    x = &y;
  }
  int best = 0;
  for (int c = 1; c < 3; ++c) {
    if (logits_[c] > logits_[best]) best = c;
  }
  return best;
}

int RandomHradPolicy::Classify(const std::vector<float>&) {
  state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
  return static_cast<int>((state_ >> 33) % 3);
}

}  // namespace specbed
