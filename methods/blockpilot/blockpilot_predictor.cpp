// BlockPilot predictor: candidates, label rule, input transform, checkpoint, inference forward
// (see blockpilot_predictor.h).
// Checked by: tests/methods/blockpilot_test.cpp.
#include "methods/blockpilot/blockpilot_predictor.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/enum_names.h"
#include "base/error.h"
#include "base/json_read.h"
#include "base/names.h"
#include "methods/common/head_config.h"
#include "methods/common/json_fields.h"
#include "models/checkpoint/head_checkpoint.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/config_fields.h"
#include "models/tensor_util.h"

namespace specbed {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

constexpr const char* kFormat = "specbed-blockpilot-predictor";
constexpr int64_t kFormatVersion = 1;
constexpr const char* kActivation = "relu";

// Widths [in_0, out_0 = in_1, ..., out_last].
std::vector<int64_t> LayerWidths(const BlockPilotConfig& c) {
  std::vector<int64_t> w{c.vocab_size};
  for (int64_t i = 0; i + 1 < c.num_layers; ++i) w.push_back(c.hidden_size);
  w.push_back(c.n_candidates());
  return w;
}

}  // namespace

SPECBED_ENUM_NAMES(BlockPilotInput, "BlockPilot input", BlockPilotInputName, ParseBlockPilotInput,
                   {BlockPilotInput::kProbs, "probs"}, {BlockPilotInput::kLogits, "logits"},
                   {BlockPilotInput::kLogProbs, "log_probs"})

std::vector<int64_t> BlockPilotCandidates(int64_t trained_block_size, int64_t radius) {
  SPECBED_CHECK(trained_block_size >= 2, "BlockPilot: the drafter's block size must be >= 2, got ",
                trained_block_size);
  SPECBED_CHECK(radius >= 0, "BlockPilot: radius must be >= 0, got ", radius);
  std::vector<int64_t> c;
  for (int64_t b = trained_block_size - radius; b <= trained_block_size + radius; ++b) {
    if (b >= 2) c.push_back(b);
  }
  return c;
}

int64_t ChooseBlockLabel(const double* values, const std::vector<int64_t>& candidates,
                         int64_t trained_block_size) {
  int64_t best = -1;
  for (int64_t i = 0; i < static_cast<int64_t>(candidates.size()); ++i) {
    const double v = values[i];
    if (std::isnan(v)) continue;
    if (best < 0 || v > values[best]) {
      best = i;
    } else if (v == values[best]) {
      // Ties: the trained block size, then the smaller b (candidates are ascending, so the
      // earlier index is the smaller b unless the current best is not the trained size).
      if (candidates[i] == trained_block_size) best = i;
    }
  }
  if (best >= 0) return best;
  for (int64_t i = 0; i < static_cast<int64_t>(candidates.size()); ++i) {
    if (candidates[i] == trained_block_size) return i;
  }
  return 0;
}

void BlockPilotConfig::Validate(const std::string& source) const {
  SPECBED_CHECK(vocab_size >= 1, source, ": vocab_size must be positive, got ", vocab_size);
  SPECBED_CHECK(trained_block_size >= 2, source, ": trained_block_size must be >= 2, got ",
                trained_block_size);
  SPECBED_CHECK(radius >= 0, source, ": radius must be >= 0, got ", radius);
  SPECBED_CHECK(num_layers >= 1, source, ": num_layers must be >= 1, got ", num_layers);
  SPECBED_CHECK(hidden_size >= 1, source, ": hidden_size must be positive, got ", hidden_size);
  const std::vector<int64_t> want = BlockPilotCandidates(trained_block_size, radius);
  SPECBED_CHECK(candidates == want, source, ": candidates ", ojson(candidates).dump(),
                " are not the block sizes {B - radius .. B + radius} >= 2 for trained_block_size ",
                trained_block_size, " and radius ", radius, ": expected ", ojson(want).dump());
  SPECBED_CHECK(candidates.size() >= 2, source, ": needs at least 2 candidate block sizes, got ",
                ojson(candidates).dump());
}

// The fields of ParseBlockPilotConfig; nlohmann type errors escape (see ParseBlockPilotConfig).
static BlockPilotConfig ParseBlockPilotConfigFields(const json& j, const std::string& source) {
  using config_fields::GetInt;
  using config_fields::GetString;
  SPECBED_CHECK(j.is_object(), source, ": expected a JSON object");
  const std::string format = GetString(j, "format", source, "");
  SPECBED_CHECK(format == kFormat, source, ": field \"format\" is '", format, "', expected '",
                kFormat, "' (a BlockPilot predictor written by `specbed blockpilot train`)");
  const int64_t version = GetInt(j, "format_version", source);
  SPECBED_CHECK(version == kFormatVersion, source, ": format_version ", version,
                " is not supported (this build reads ", kFormatVersion, ")");
  BlockPilotConfig c;
  c.vocab_size = GetInt(j, "vocab_size", source);
  c.trained_block_size = GetInt(j, "trained_block_size", source);
  c.radius = GetInt(j, "radius", source);
  c.hidden_size = GetInt(j, "hidden_size", source);
  c.num_layers = GetInt(j, "num_layers", source);
  c.input =
      ParseBlockPilotInput(GetString(j, "input", source, "probs"), source + ", field \"input\"");
  const std::string act = GetString(j, "activation", source, kActivation);
  SPECBED_CHECK(act == kActivation, source, ": field \"activation\" is '", act,
                "'; only 'relu' is supported");
  SPECBED_CHECK(j.contains("candidates") && j["candidates"].is_array(), source,
                ": field \"candidates\" must be a list of block sizes");
  for (const auto& e : j["candidates"]) {
    SPECBED_CHECK(e.is_number_integer(), source,
                  ": field \"candidates\" must contain only integers, got ",
                  j["candidates"].dump());
    c.candidates.push_back(e.get<int64_t>());
  }
  if (j.contains("training") && j["training"].is_object()) c.training = j["training"];
  if (j.contains("evaluation") && j["evaluation"].is_object()) c.evaluation = j["evaluation"];
  c.Validate(source);
  return c;
}

BlockPilotConfig ParseBlockPilotConfig(const json& j, const std::string& source) {
  // A type error (a string where a number belongs, ...) names the file and the field's JSON
  // pointer.
  return WithJsonContext(source, [&] { return ParseBlockPilotConfigFields(j, source); });
}

ojson BlockPilotConfigToJson(const BlockPilotConfig& c) {
  ojson j;
  j["format"] = kFormat;
  j["format_version"] = kFormatVersion;
  SPECBED_JSON_PUT(j, c, vocab_size, trained_block_size, radius, candidates);
  j["input"] = BlockPilotInputName(c.input);
  SPECBED_JSON_PUT(j, c, hidden_size, num_layers);
  j["activation"] = kActivation;
  j["training"] = c.training;
  j["evaluation"] = c.evaluation;
  return j;
}

std::string BlockPilotTensorName(int64_t layer, bool bias) {
  return "mlp." + std::to_string(layer) + (bias ? ".bias" : ".weight");
}

std::map<std::string, std::vector<int64_t>> ExpectedBlockPilotShapes(const BlockPilotConfig& c) {
  const std::vector<int64_t> w = LayerWidths(c);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    shapes[BlockPilotTensorName(i, false)] = {w[i + 1], w[i]};
    shapes[BlockPilotTensorName(i, true)] = {w[i + 1]};
  }
  return shapes;
}

void ValidateBlockPilotTensors(const BlockPilotConfig& config,
                               const std::map<std::string, at::Tensor>& tensors,
                               const std::string& source) {
  config.Validate(source);
  const auto expected = ExpectedBlockPilotShapes(config);
  std::vector<std::string> known;
  for (const auto& [name, shape] : expected) known.push_back(name);
  for (const auto& [name, t] : tensors) {
    if (expected.count(name)) continue;
    const std::string nearest = NearestName(name, known);
    Fail(source, ", tensor '", name, "': unexpected tensor name for a BlockPilot predictor",
         nearest.empty() ? std::string() : " (did you mean '" + nearest + "'?)");
  }
  for (const auto& [name, shape] : expected) {
    auto it = tensors.find(name);
    SPECBED_CHECK(it != tensors.end(), source, ": missing tensor '", name, "' (expected shape ",
                  ShapeString(shape), ")");
    const at::Tensor& t = it->second;
    SPECBED_CHECK(t.defined() && t.is_floating_point(), source, ", tensor '", name,
                  "': expected a floating-point tensor");
    SPECBED_CHECK(t.sizes() == at::IntArrayRef(shape), source, ", tensor '", name, "': shape ",
                  ShapeString(t.sizes()), ", expected ", ShapeString(shape), " (num_layers ",
                  config.num_layers, ", vocab ", config.vocab_size, ", hidden ", config.hidden_size,
                  ", ", config.n_candidates(), " candidates)");
  }
}

std::map<std::string, at::Tensor> RandomBlockPilotTensors(const BlockPilotConfig& config,
                                                          uint64_t seed) {
  config.Validate("RandomBlockPilotTensors config");
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, shape] : ExpectedBlockPilotShapes(config)) {
    tensors[name] = shape.size() == 2
                        ? SeededNormalTensor(shape, seed, name,
                                             1.0 / std::sqrt(3.0 * static_cast<double>(shape[1])))
                        : at::zeros(shape, at::kFloat);
  }
  return tensors;
}

BlockPilotCheckpoint LoadBlockPilotCheckpoint(const std::string& dir) {
  BlockPilotCheckpoint ckpt = ReadHeadCheckpointAs<BlockPilotCheckpoint>(
      dir, "BlockPilot predictor", " (see methods/blockpilot/README.md)", ParseBlockPilotConfig,
      [](const BlockPilotConfig& config, const std::map<std::string, at::Tensor>& tensors,
         const std::string& where,
         const auto& /*origin*/) { ValidateBlockPilotTensors(config, tensors, where); });
  for (auto& [name, t] : ckpt.tensors) t = t.to(at::kFloat).contiguous();
  return ckpt;
}

void WriteBlockPilotCheckpoint(const std::string& dir, const BlockPilotConfig& config,
                               const std::map<std::string, at::Tensor>& tensors) {
  const std::string where = "writing BlockPilot predictor '" + dir + "'";
  ValidateBlockPilotTensors(config, tensors, where);
  WriteHeadCheckpoint(dir, BlockPilotConfigToJson(config), nullptr, tensors, SafetensorsDtype::kF32,
                      where);
}

void BlockPilotInputRow(BlockPilotInput input, const float* logits, int64_t vocab, float* out) {
  if (input == BlockPilotInput::kLogits) {
    if (out != logits) std::copy(logits, logits + vocab, out);
    return;
  }
  float max_v = -std::numeric_limits<float>::infinity();
  for (int64_t v = 0; v < vocab; ++v) max_v = std::max(max_v, logits[v]);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v] - max_v));
  if (input == BlockPilotInput::kLogProbs) {
    const float log_z = max_v + static_cast<float>(std::log(sum));
    for (int64_t v = 0; v < vocab; ++v) out[v] = logits[v] - log_z;
    return;
  }
  const double inv = 1.0 / sum;
  for (int64_t v = 0; v < vocab; ++v) {
    out[v] = static_cast<float>(std::exp(static_cast<double>(logits[v] - max_v)) * inv);
  }
}

at::Tensor BlockPilotInputs(BlockPilotInput input, const at::Tensor& logits) {
  switch (input) {
    case BlockPilotInput::kProbs:
      return at::softmax(logits, -1);
    case BlockPilotInput::kLogProbs:
      return at::log_softmax(logits, -1);
    case BlockPilotInput::kLogits:
      return logits;
  }
  return logits;
}

BlockPilotPredictor::BlockPilotPredictor(BlockPilotConfig config,
                                         const std::map<std::string, at::Tensor>& tensors)
    : config_(std::move(config)) {
  ValidateBlockPilotTensors(config_, tensors, "BlockPilot predictor");
  const std::vector<int64_t> w = LayerWidths(config_);
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    weights_.push_back(tensors.at(BlockPilotTensorName(i, false)).to(at::kFloat).contiguous());
    biases_.push_back(tensors.at(BlockPilotTensorName(i, true)).to(at::kFloat).contiguous());
    acts_.push_back(at::empty({w[i + 1]}, at::kFloat));
  }
  input_ = at::empty({config_.vocab_size}, at::kFloat);
  scores_ = acts_.back();
}

int64_t BlockPilotPredictor::Predict(const float* target_logits) {
  SPECBED_CHECK(target_logits != nullptr, "BlockPilot predictor: no target logits");
  BlockPilotInputRow(config_.input, target_logits, config_.vocab_size, input_.data_ptr<float>());
  const at::Tensor* x = &input_;
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    at::addmv_out(acts_[i], biases_[i], weights_[i], *x);
    if (i + 1 < config_.num_layers) {
      float* a = acts_[i].data_ptr<float>();
      for (int64_t j = 0; j < acts_[i].numel(); ++j) a[j] = std::max(a[j], 0.0f);
    }
    x = &acts_[i];
  }
  const float* s = scores_.data_ptr<float>();
  int64_t best = 0;
  for (int64_t c = 1; c < config_.n_candidates(); ++c) {
    if (s[c] > s[best]) best = c;
  }
  return config_.candidates[best];
}

}  // namespace specbed
