// BlockPilot's block-size predictor (Zhang et al., "BlockPilot: Instance-Adaptive Policy Learning
// for Diffusion-based Speculative Decoding"): an MLP over the target's next-token distribution at
// the last prompt position, p(x), giving logits over the candidate block sizes
// {B - k, ..., B + k} of a DFlash drafter trained at block size B (candidates below 2 dropped).
// Also: the candidate set, the label rule (argmax with ties toward B, then the smaller b), the
// input transform (probs | logits | log_probs), the checkpoint directory (config.json +
// model.safetensors) with validation, and a seeded init. Knobs and recorded choices:
// methods/blockpilot/README.md.
// Checked by: tests/methods/blockpilot_test.cpp (forward against a plain-loop double reference for
// every input kind and depth, checkpoint round trip, malformed config / tensors, the label rule).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace specbed {

// What the MLP reads from the target's last-position logits z [V].
enum class BlockPilotInput {
  kProbs,     // softmax(z) (default: "the raw distribution")
  kLogits,    // z itself
  kLogProbs,  // log_softmax(z)
};
const char* BlockPilotInputName(BlockPilotInput input);
// Parses "probs" | "logits" | "log_probs"; errors name `context` and list the known names.
BlockPilotInput ParseBlockPilotInput(const std::string& name, const std::string& context);

// {B - radius, ..., B + radius} without the values below 2, ascending. Throws for B < 2 or
// radius < 0.
std::vector<int64_t> BlockPilotCandidates(int64_t trained_block_size, int64_t radius);

// The label rule: the index (into `candidates`) of the largest of values[0 .. C); among exactly
// equal maxima the candidate equal to `trained_block_size` wins, then the smaller block size.
// NaN values never win (all NaN: index of the trained block size, else 0).
int64_t ChooseBlockLabel(const double* values, const std::vector<int64_t>& candidates,
                         int64_t trained_block_size);

// The predictor's architecture and metadata (config.json).
struct BlockPilotConfig {
  int64_t vocab_size = 0;
  int64_t trained_block_size = 0;   // B: the DFlash drafter's training block size
  int64_t radius = 2;               // k
  std::vector<int64_t> candidates;  // BlockPilotCandidates(B, k): the output classes, ascending
  BlockPilotInput input = BlockPilotInput::kProbs;
  int64_t hidden_size = 2048;
  // Linear layers: 1 = Linear(V, C); 2 = Linear(V, h) + ReLU + Linear(h, C); n = n - 1 hidden
  // layers of width h, ReLU after each.
  int64_t num_layers = 2;
  // Free-form records written to config.json as they are: how it was trained (prompt set,
  // drafter, label criterion, labels file, optimiser) and the held-out figures.
  nlohmann::ordered_json training = nlohmann::ordered_json::object();
  nlohmann::ordered_json evaluation = nlohmann::ordered_json::object();

  int64_t n_candidates() const { return static_cast<int64_t>(candidates.size()); }
  // Throws specbed::Error naming `source` and the field for impossible values, or candidates that
  // are not BlockPilotCandidates(trained_block_size, radius).
  void Validate(const std::string& source) const;
};

// Parses config.json (format "specbed-blockpilot-predictor", version 1); errors name `source`.
BlockPilotConfig ParseBlockPilotConfig(const nlohmann::json& j, const std::string& source);
nlohmann::ordered_json BlockPilotConfigToJson(const BlockPilotConfig& config);

// Tensor names: "mlp.{i}.weight" [out_i, in_i] and "mlp.{i}.bias" [out_i] for i < num_layers,
// in_0 = V, out_last = C, hidden widths h.
std::string BlockPilotTensorName(int64_t layer, bool bias);
std::map<std::string, std::vector<int64_t>> ExpectedBlockPilotShapes(
    const BlockPilotConfig& config);
// Checks names (unknown ones get the nearest expected name), shapes and float dtypes; errors name
// `source`.
void ValidateBlockPilotTensors(const BlockPilotConfig& config,
                               const std::map<std::string, at::Tensor>& tensors,
                               const std::string& source);
// Seeded init (float32 CPU): weights normal(0, 1 / sqrt(3 * in)) (the variance of
// torch.nn.Linear's default uniform init), biases 0. Deterministic in (seed, tensor name),
// independent of LibTorch's RNG and thread count.
std::map<std::string, at::Tensor> RandomBlockPilotTensors(const BlockPilotConfig& config,
                                                          uint64_t seed);

struct BlockPilotCheckpoint {
  BlockPilotConfig config;
  std::map<std::string, at::Tensor> tensors;  // float32 contiguous CPU
  std::string source;                         // the directory
  nlohmann::json recipe;                      // config.json's specbed_recipe (null when absent)
};
// Reads `dir`/config.json and `dir`/model.safetensors. Errors name the file (and tensor) and
// what was expected.
BlockPilotCheckpoint LoadBlockPilotCheckpoint(const std::string& dir);
// Writes `dir`/config.json and `dir`/model.safetensors (float32) after validating; creates `dir`.
void WriteBlockPilotCheckpoint(const std::string& dir, const BlockPilotConfig& config,
                               const std::map<std::string, at::Tensor>& tensors);

// The input transform of one row: `logits` float32 [V] -> `out` float32 [V] (may alias).
void BlockPilotInputRow(BlockPilotInput input, const float* logits, int64_t vocab, float* out);
// The same over rows: `logits` float32 [N, V] CPU -> float32 [N, V] (differentiable ATen ops).
at::Tensor BlockPilotInputs(BlockPilotInput input, const at::Tensor& logits);

// Inference: one MLP forward per prompt into preallocated buffers (one GEMV per layer).
class BlockPilotPredictor {
 public:
  // `tensors`: as ValidateBlockPilotTensors accepts (any float dtype; copied to float32 CPU).
  BlockPilotPredictor(BlockPilotConfig config, const std::map<std::string, at::Tensor>& tensors);

  // Scores the candidates for the target's last-position logits `target_logits` float32 [V]
  // (vocab_size floats, host memory) and returns the chosen block size (the argmax of the
  // scores; exact ties go to the smaller block size).
  int64_t Predict(const float* target_logits);
  // The candidates' logits of the last Predict, float32 [C] CPU.
  const at::Tensor& scores() const { return scores_; }
  const BlockPilotConfig& config() const { return config_; }

 private:
  BlockPilotConfig config_;
  std::vector<at::Tensor> weights_, biases_;  // float32 contiguous, weights [out, in]
  at::Tensor input_;                          // [V]
  std::vector<at::Tensor> acts_;              // per layer output: [h] ... [C]
  at::Tensor scores_;                         // == acts_.back()
};

}  // namespace specbed
