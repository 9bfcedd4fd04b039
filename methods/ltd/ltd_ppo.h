// Clipped PPO (Schulman et al. 2017) with GAE and a separate value network, in C++ on LibTorch
// autograd, as LTD trains its policies (spec §4.5): categorical actor and critic MLPs, rollouts of
// at least n_steps transitions ending on an episode boundary, GAE(gamma, lambda), per-minibatch
// advantage normalisation, ratio clipping, entropy bonus, value MSE, global gradient-norm
// clipping, Adam, linear warm-up then linear decay of the learning rate to 0 (set once per
// update), seeded sampling and minibatch order. The agent is driven by callbacks (Act, then
// EndEpisode with the terminal reward), so an environment can live inside a decoder's hooks.
// Checked by: tests/methods/ltd_ppo_test.cpp (a contextual bandit and a stop-or-continue chain
// with known optima are learned within a fixed budget, and are not with the policy-gradient sign
// flipped; resume from a saved state continues bitwise like an uninterrupted run).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/common/train/optimizer.h"

namespace specbed {

struct PpoConfig {
  int64_t n_steps = 2048;  // transitions per rollout (the rollout ends on an episode boundary)
  int64_t minibatch = 256;
  int64_t epochs = 20;
  double lr = 1e-3;
  double warmup_frac = 0.01;  // linear warm-up over this share of total_steps, then linear to 0
  int64_t total_steps = 100000;
  double gamma = 0.9;
  double gae_lambda = 0.95;
  double clip = 0.2;
  double ent_coef = 0.01;
  double vf_coef = 0.5;
  double max_grad_norm = 0.5;
  bool normalize_advantage = true;
  uint64_t seed = 0;
  // Test-only negative control: negates the advantages in the policy loss (gradient ascent on
  // the wrong objective). Never set by `specbed train ltd`.
  bool flip_policy_gradient = false;
};
nlohmann::ordered_json PpoConfigToJson(const PpoConfig& c);

// Architecture of the actor-critic pair (tensor names as LtdPolicy: actor.{i}, actor_out,
// critic.{i}, critic_out).
struct PpoArch {
  int64_t obs_dim = 0;
  int64_t actions = 0;
  std::vector<int64_t> actor_hidden, critic_hidden;
  bool relu = false;  // else tanh
};

struct PpoUpdateStats {
  double policy_loss = 0, value_loss = 0, entropy = 0, approx_kl = 0, clip_fraction = 0;
  double grad_norm = 0, lr = 0, mean_reward = 0;  // mean terminal reward of the rollout
  int64_t transitions = 0, episodes = 0;
};

class PpoAgent {
 public:
  // `init`: tensors for every name of the arch (e.g. RandomLtdPolicyTensors); copied.
  PpoAgent(PpoArch arch, const std::map<std::string, at::Tensor>& init, PpoConfig config);

  // Samples an action for `obs` [obs_dim] and records the transition (an earlier transition of
  // the same episode still open gets reward 0, not terminal).
  int64_t Act(const float* obs);
  // Argmax action (no recording).
  int64_t Greedy(const float* obs);
  // Closes the open transition (if any) as terminal with `reward`.
  void EndEpisode(double reward);
  // Drops the open transition (an episode cut short outside the agent's control).
  void DropOpen();
  // Whether the rollout holds >= n_steps transitions and ends on an episode boundary.
  bool ReadyToUpdate() const;
  // One PPO update on the rollout (then cleared).
  PpoUpdateStats Update();

  int64_t steps_done() const { return steps_done_; }  // transitions consumed by updates
  int64_t updates_done() const { return updates_done_; }
  double LearningRate() const;
  // Current weights (float32 CPU, detached copies).
  std::map<std::string, at::Tensor> Tensors() const;
  void SetTensors(const std::map<std::string, at::Tensor>& tensors);
  // Saves / restores everything an exact resume needs (weights, Adam moments, counters, RNG) to
  // `path`.safetensors + `path`.json, at a rollout boundary (the rollout is not saved).
  void Save(const std::string& path) const;
  void Load(const std::string& path);
  // The same without the optimiser: a fresh Adam and counters (next training stage).
  void ResetOptimizer(PpoConfig config);
  const PpoConfig& config() const { return config_; }

 private:
  at::Tensor Forward(const at::Tensor& obs, bool actor) const;  // [N, obs] -> logits / values
  std::vector<std::pair<std::string, at::Tensor>> NamedParams() const;

  PpoArch arch_;
  PpoConfig config_;
  std::map<std::string, at::Tensor> params_;  // leaves with requires_grad
  std::unique_ptr<AdamWOptimizer> opt_;
  std::mt19937_64 rng_;
  int64_t steps_done_ = 0, updates_done_ = 0;
  // Rollout.
  std::vector<float> obs_;
  std::vector<int64_t> actions_;
  std::vector<float> logp_, values_, rewards_;
  std::vector<uint8_t> dones_;
  bool open_ = false;
  std::vector<float> probs_;
};

}  // namespace specbed
