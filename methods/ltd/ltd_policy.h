// LTD's policies (Zhang et al., "Learning to Draft", ICLR 2026; spec §3): the depth policy pi_D
// (CONTINUE / STOP after an expansion round of the EAGLE-3 tree) and the size policy pi_V (how
// many top-scored candidates the target verifies), each a small actor-critic MLP pair. This file
// has the policy's config (config.json, format "specbed-ltd-policy"), its tensors
// (model.safetensors: actor.{i}, actor_out, critic.{i}, critic_out), the observation encoders
// (spec §3.1 / §3.2, generalised to any beam width W and maximum depth), the action map, a seeded
// init and the inference forward (actor only, argmax, no allocation). Training: ltd_ppo.h.
// Knobs, defaults and recorded choices: methods/ltd/README.md.
// Checked by: tests/methods/ltd_test.cpp (observation layout, action map, checkpoint round trip
// and malformed files, inference forward against the ATen forward used in training).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/checkpoint/head_checkpoint.h"

namespace specbed {

enum class LtdPolicyKind { kDepth, kSize };
const char* LtdPolicyKindName(LtdPolicyKind kind);

struct LtdPolicyConfig {
  LtdPolicyKind kind = LtdPolicyKind::kSize;
  int64_t top_k = 10;  // W: beam width of the drafter the policy was trained on
  int64_t max_depth =
      12;  // Dmax: most expansion rounds (the size observation reserves W + Dmax W^2)
  // Scalar features repeated this many times (spec: 14 in the depth obs, 29 in the size obs).
  int64_t feature_repeat = 29;
  // Size action a -> V = size_step * (a + 1), a in [0, n_actions) (code: 10 x 24; paper: 20 x 12).
  int64_t size_step = 10;
  int64_t n_actions = 24;  // depth policy: 2 (0 = STOP, 1 = CONTINUE)
  // Depth policy: asked after every `depth_every`-th expansion round (code at inference: 3).
  int64_t depth_every = 3;
  std::vector<int64_t> actor_hidden = {1024, 256};
  std::vector<int64_t> critic_hidden = {1024, 256};
  std::string activation = "tanh";  // tanh (SB3 default, the released code) | relu (paper)
  // L feature: "length" = L / 1000 (training and the paper); "constant" = 0.01 (the released
  // inference code's bug, spec §9.5).
  std::string length_feature = "length";
  nlohmann::ordered_json training = nlohmann::ordered_json::object();    // recipe
  nlohmann::ordered_json evaluation = nlohmann::ordered_json::object();  // held-out figures

  int64_t obs_dim() const;
  int64_t actions() const { return kind == LtdPolicyKind::kDepth ? 2 : n_actions; }
  // Throws specbed::Error naming `source` and the field.
  void Validate(const std::string& source) const;
};

// The spec's defaults: depth 128 -> [1024] -> 2 (critic [1024, 256]); size 1268 -> [1024, 256] ->
// 24 (critic [1024, 256]); W 10, Dmax 12, tanh.
LtdPolicyConfig DefaultLtdPolicyConfig(LtdPolicyKind kind);

LtdPolicyConfig ParseLtdPolicyConfig(const nlohmann::json& j, const std::string& source);

// What every LTD config.json (policies here, classifiers in ltd_classifiers.h) shares: a JSON
// object tagged "format" (checked on reading; errors name `source`), opened by {"format",
// "version": 1, "kind"} on writing, and carrying the "training" recipe and "evaluation" records
// (optional on reading).
void CheckLtdConfigFormat(const nlohmann::json& j, const char* format, const std::string& source);
nlohmann::ordered_json LtdConfigHead(const char* format, const char* kind);
void ReadLtdRecords(const nlohmann::json& j, nlohmann::ordered_json& training,
                    nlohmann::ordered_json& evaluation);
nlohmann::ordered_json LtdPolicyConfigToJson(const LtdPolicyConfig& config);

// Tensor names and shapes ([out, in] weights).
std::map<std::string, std::vector<int64_t>> ExpectedLtdPolicyShapes(const LtdPolicyConfig& c);
// Seeded init, float32 CPU: normal(0, gain / sqrt(in)) weights (gain sqrt(2) hidden, 0.01 actor
// output, 1 critic output: SB3's orthogonal-init gains), zero biases.
std::map<std::string, at::Tensor> RandomLtdPolicyTensors(const LtdPolicyConfig& c, uint64_t seed);

struct LtdPolicyCheckpoint {
  LtdPolicyConfig config;
  std::map<std::string, at::Tensor> tensors;  // float32 contiguous CPU
};
// Reads dir/config.json + dir/model.safetensors; errors name the file, field or tensor.
LtdPolicyCheckpoint LoadLtdPolicy(const std::string& dir);
void WriteLtdPolicy(const std::string& dir, const LtdPolicyConfig& config,
                    const std::map<std::string, at::Tensor>& tensors);

// The tensor side of every LTD checkpoint directory (policies, classifiers): model.safetensors
// read and checked against `shapes` (a mismatch names `where` and `detail`), as float32
// contiguous; written as float32 beside `config_json` once the tensors fit `shapes`.
std::map<std::string, at::Tensor> ReadLtdTensors(
    const std::string& dir, const std::string& where,
    const std::map<std::string, std::vector<int64_t>>& shapes, const std::string& detail);
// An LTD checkpoint directory (`what` = "LTD policy" names it in errors): config.json through
// parse(json, path) into ckpt.config, then the tensors checked against shapes_of(config) with
// detail_of(config).
template <typename Checkpoint, typename Parse, typename Shapes, typename Detail>
Checkpoint LoadLtdCheckpointAs(const std::string& dir, const std::string& what, Parse parse,
                               Shapes shapes_of, Detail detail_of) {
  const std::string where = what + " '" + dir + "'";
  const HeadConfigFile file = ReadHeadConfig(dir, where);
  Checkpoint ckpt;
  ckpt.config = parse(file.config, file.path);
  ckpt.tensors = ReadLtdTensors(dir, where, shapes_of(ckpt.config), detail_of(ckpt.config));
  return ckpt;
}
void WriteLtdCheckpoint(const std::string& dir, nlohmann::ordered_json config_json,
                        const std::map<std::string, at::Tensor>& tensors,
                        const std::map<std::string, std::vector<int64_t>>& shapes,
                        const std::string& detail, const std::string& where);

// Observation encoders (float32, written into `obs` [config.obs_dim()], zeros where unused).
// Depth: [child scores zero-padded to W^2 | L/1000 x repeat | D/10 x repeat].
// child_scores: [n] cumulative log-probs of the latest round's children (n <= W^2 used).
void EncodeDepthObservation(const LtdPolicyConfig& c, const float* child_scores, int64_t n,
                            int64_t context_len, int64_t rounds, float* obs);
// Size: [all scores zero-padded to W + Dmax W^2 | L/1000 x repeat | D/10 x repeat].
void EncodeSizeObservation(const LtdPolicyConfig& c, const float* scores, int64_t n,
                           int64_t context_len, int64_t rounds, float* obs);
// V of size action `a` (>= 1).
int64_t LtdVerifySize(const LtdPolicyConfig& c, int64_t action);

// Dot product of float32 host vectors a, b [n] (the inference forwards' inner loop; fixed
// summation order, so results do not depend on the caller).
float LtdDot(const float* a, const float* b, int64_t n);

// Inference: the actor MLP, argmax (ties: lowest action). No allocation per call.
class LtdPolicy {
 public:
  explicit LtdPolicy(LtdPolicyCheckpoint checkpoint);
  // obs: float32 [obs_dim]. Returns the action.
  int64_t Act(const float* obs);
  // The actor's logits of the last Act: [actions].
  const std::vector<float>& logits() const { return acts_.back(); }
  const LtdPolicyConfig& config() const { return config_; }
  std::vector<float>& obs_buffer() { return obs_; }

 private:
  LtdPolicyConfig config_;
  std::vector<std::vector<float>> weights_, biases_;  // per actor layer, [out * in], [out]
  std::vector<int64_t> in_, out_;
  std::vector<std::vector<float>> acts_;
  std::vector<float> obs_;
  bool relu_ = false;
};

}  // namespace specbed
