// H-RAD (SpecBranch §2, specs/specbranch.md §2): a 3-class MLP over the target's hidden states of
// its last K decoder layers at the last verified position plus the target's input embedding of
// the newest committed token, z = concat(h^{L-K+1}, ..., h^{L}, e) (dim (K + 1) * d_model),
// predicting for the next draft: 0 = all rejected, 1 = mixed (use the draft's confidence),
// 2 = all accepted. Architecture: Linear(in, 256) + ReLU + Linear(256, 64) + ReLU + Linear(64, 3)
// (dropout 0.4 after each ReLU in training only). Hidden states are the raw residual stream after
// each layer (before the final norm; ForwardOptions::hidden_layers l = L-K+1 .. L), in float32.
// Checkpoint: a directory with config.json (format "specbed-hrad", version 1, with the training
// recipe) and model.safetensors ("mlp.{0,1,2}.{weight,bias}").
// Checked by: tests/methods/specbranch_test.cpp (forward vs. a plain loop, round trip).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace specbed {

struct HradConfig {
  int64_t target_dim = 0;      // d_model of the target
  int64_t feature_layers = 4;  // K
  int64_t target_layers = 0;   // the target's number of decoder layers (features: L-K+1..L)
  std::vector<int64_t> hidden = {256, 64};
  nlohmann::ordered_json training = nlohmann::ordered_json::object();
  nlohmann::ordered_json evaluation = nlohmann::ordered_json::object();
  int64_t input_dim() const { return (feature_layers + 1) * target_dim; }
  // HF hidden_states indices of the K feature layers.
  std::vector<int64_t> Layers() const;
};

nlohmann::ordered_json HradConfigToJson(const HradConfig& config);
HradConfig ParseHradConfig(const nlohmann::json& j, const std::string& source);

// Seeded init (normal(0, 1/sqrt(3*in)), zero biases).
std::map<std::string, at::Tensor> RandomHradTensors(const HradConfig& config, uint64_t seed);

struct HradCheckpoint {
  HradConfig config;
  std::map<std::string, at::Tensor> tensors;
  std::string source;
};
HradCheckpoint LoadHradCheckpoint(const std::string& dir);
void WriteHradCheckpoint(const std::string& dir, const HradConfig& config,
                         const std::map<std::string, at::Tensor>& tensors);

// The predictor for a cost twin of its target at `width_factor` (models/twin/cost_twin.h): the
// first layer's input blocks padded with zero columns (the twin's hidden states and embeddings
// carry the original in their first target_dim dims), so it classifies every z exactly as the
// original; target_dim grows, target_layers stays the original depth (the twin's feature depth).
HradCheckpoint HradTwin(const HradCheckpoint& in, int64_t width_factor);

// Builds z into `out` (input_dim floats): hidden[k] is [1, T, dim] (any float dtype) for feature
// layer k, `slot` the position within T, `embedding` the target's tok_embeddings [V, dim],
// `token` the newest committed token.
void HradFeatures(const std::vector<at::Tensor>& hidden, int64_t slot, const at::Tensor& embedding,
                  int32_t token, std::vector<float>& out);

// The decision rule H-RAD feeds. Classify returns 0, 1 or 2.
class HradPolicy {
 public:
  virtual ~HradPolicy() = default;
  virtual int Classify(const std::vector<float>& z) = 0;
};

class HradPredictor : public HradPolicy {
 public:
  HradPredictor(HradConfig config, const std::map<std::string, at::Tensor>& tensors);
  int Classify(const std::vector<float>& z) override;
  // The class logits of the last Classify.
  const std::vector<float>& logits() const { return logits_; }
  const HradConfig& config() const { return config_; }

 private:
  HradConfig config_;
  std::vector<std::vector<float>> w_, b_;  // [out * in] row-major, [out]
  std::vector<int64_t> in_, out_;
  std::vector<float> a_, b2_, logits_;
};

// A fixed class (w/o H-RAD = always 2), or a seeded pseudo-random class per call (tests: covers
// every branch of the decoder).
class FixedHradPolicy : public HradPolicy {
 public:
  explicit FixedHradPolicy(int cls) : cls_(cls) {}
  int Classify(const std::vector<float>&) override { return cls_; }

 private:
  int cls_;
};
class RandomHradPolicy : public HradPolicy {
 public:
  explicit RandomHradPolicy(uint64_t seed) : state_(seed) {}
  int Classify(const std::vector<float>& z) override;

 private:
  uint64_t state_;
};

}  // namespace specbed
