// The supervised draft-shape classifiers the LTD paper compares against (spec §5), on the same
// EAGLE-3 tree drafter:
// - Disco (Mamou et al. 2024): depth. FFN Linear(W+2 -> hidden)-ReLU-Linear(hidden -> 1) on the
//   beam's path probabilities, the entropy below the best node and the round (spec: 12 inputs
//   for W = 10, hidden 128, 50 epochs).
// - SpecDec++ (Huang et al. 2025a): depth. "ResNet" FFN on the drafter's hidden state at the best
//   node: out = Linear(hidden -> 1)(SiLU(Linear(d -> hidden) x) + Linear(d -> hidden) x) (hidden
//   1024, 5 epochs).
// - C2T (Huo et al. 2025): size. FFN Linear(2 -> hidden)-ReLU-Linear(hidden -> 1) on (cumulative
//   log-prob, depth / 10) of each candidate (hidden 64, 50 epochs, no entropy).
// Each outputs one logit; sigmoid(logit) estimates that the draft is accepted (depth: that the
// accepted path reaches the deepest layer drafted so far; size: that the candidate is on the
// accepted path). This file has the checkpoint (config.json, format "specbed-ltd-classifier",
// plus model.safetensors: fc.weight/bias, out.weight/bias, and skip.weight/bias for SpecDec++),
// the feature encoders and an allocation-free inference forward. Training:
// ltd_classifier_trainer.h. Knobs, defaults and recorded choices: methods/ltd/README.md. Checked
// by: tests/methods/ltd_classifier_test.cpp (features, forward against ATen, checkpoint round trip
// and malformed files, controller decisions, AR identity at T = 0).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace specbed {

enum class LtdClassifierKind { kDisco, kSpecDec, kC2t };
// "disco", "specdecpp", "c2t".
const char* LtdClassifierKindName(LtdClassifierKind kind);
// Throws specbed::Error naming `source` for an unknown name.
LtdClassifierKind ParseLtdClassifierKind(const std::string& name, const std::string& source);

struct LtdClassifierConfig {
  LtdClassifierKind kind = LtdClassifierKind::kDisco;
  int64_t input_dim = 12;  // Disco: top_k + 2; SpecDec++: the head's hidden size; C2T: 2
  int64_t hidden = 128;    // Disco 128, SpecDec++ 1024, C2T 64 (spec §5)
  int64_t top_k = 10;      // W of the drafter the classifier was trained on
  nlohmann::ordered_json training = nlohmann::ordered_json::object();    // recipe
  nlohmann::ordered_json evaluation = nlohmann::ordered_json::object();  // held-out figures
  // Throws specbed::Error naming `source` and the field.
  void Validate(const std::string& source) const;
};

// The spec's network for `kind` (input_dim from top_k, or `hidden_size` for SpecDec++).
LtdClassifierConfig DefaultLtdClassifierConfig(LtdClassifierKind kind, int64_t top_k,
                                               int64_t hidden_size);
LtdClassifierConfig ParseLtdClassifierConfig(const nlohmann::json& j, const std::string& source);
nlohmann::ordered_json LtdClassifierConfigToJson(const LtdClassifierConfig& c);

// Tensor names and shapes ([out, in] weights).
std::map<std::string, std::vector<int64_t>> ExpectedLtdClassifierShapes(
    const LtdClassifierConfig& c);

struct LtdClassifierCheckpoint {
  LtdClassifierConfig config;
  std::map<std::string, at::Tensor> tensors;  // float32 contiguous CPU
};
// Reads dir/config.json + dir/model.safetensors; errors name the file, field or tensor.
LtdClassifierCheckpoint LoadLtdClassifier(const std::string& dir);
void WriteLtdClassifier(const std::string& dir, const LtdClassifierCheckpoint& checkpoint);

// The classifier for a cost twin of the EAGLE-3 head at `width_factor` (models/twin/cost_twin.h):
// SpecDec++ reads the head's hidden state, so its fc and skip inputs are padded with zero columns
// (the twin head's hidden carries the original in its first input_dim dims) and it scores every
// node exactly as the original; Disco and C2T read tree statistics and come back unchanged.
LtdClassifierCheckpoint LtdClassifierTwin(const LtdClassifierCheckpoint& in, int64_t width_factor);

// The training forward: logits float32 [rows] of features float32 CPU [rows, input_dim].
at::Tensor LtdClassifierLogits(const LtdClassifierConfig& c,
                               const std::map<std::string, at::Tensor>& tensors,
                               const at::Tensor& features);

// Feature encoders (float32, written into `out`).
// Disco [top_k + 2]: exp(beam score) of the W best nodes of the latest layer (best first, 0
// where the beam is shorter), the entropy below the best node (nats), rounds / 10.
void EncodeDiscoFeatures(int64_t top_k, const float* beam_scores, int64_t n_beam, double entropy,
                         int64_t rounds, float* out);
// C2T [2]: the candidate's cumulative log-prob and its depth / 10.
void EncodeC2tFeatures(float score, int64_t depth, float* out);
// Depth (1-based) of candidate `index` of a beam tree of width `top_k` in generation order (layer
// 1 = top_k candidates, then top_k^2 per layer).
int64_t BeamCandidateDepth(int64_t index, int64_t top_k);

// Inference: one logit of one feature row. No allocation per call.
class LtdClassifier {
 public:
  explicit LtdClassifier(LtdClassifierCheckpoint checkpoint);
  // x: float32 [input_dim].
  float Logit(const float* x);
  float Probability(const float* x);
  const LtdClassifierConfig& config() const { return config_; }
  std::vector<float>& features() { return features_; }

 private:
  LtdClassifierConfig config_;
  std::vector<float> fc_w_, fc_b_, skip_w_, skip_b_, out_w_;
  float out_b_ = 0;
  std::vector<float> act_, features_;
};

}  // namespace specbed
