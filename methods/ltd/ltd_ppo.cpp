// Clipped PPO with GAE (see ltd_ppo.h).
// Checked by: tests/methods/ltd_ppo_test.cpp.
#include "methods/ltd/ltd_ppo.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include "base/error.h"
#include "base/json_read.h"
#include "base/mapped_file.h"
#include "methods/common/json_fields.h"
#include "models/checkpoint/safetensors.h"

namespace specbed {

nlohmann::ordered_json PpoConfigToJson(const PpoConfig& c) {
  nlohmann::ordered_json j;
  SPECBED_JSON_PUT(j, c, n_steps, minibatch, epochs, lr, warmup_frac, total_steps, gamma,
                   gae_lambda, clip, ent_coef, vf_coef, max_grad_norm, normalize_advantage, seed);
  return j;
}

namespace {

// Empties each of the rollout's buffers.
template <typename... Buffers>
void ClearAll(Buffers&... buffers) {
  (buffers.clear(), ...);
}

std::vector<std::string> MlpNames(const std::string& prefix, size_t hidden) {
  std::vector<std::string> names;
  for (size_t i = 0; i < hidden; ++i) {
    names.push_back(prefix + "." + std::to_string(i) + ".weight");
    names.push_back(prefix + "." + std::to_string(i) + ".bias");
  }
  names.push_back(prefix + "_out.weight");
  names.push_back(prefix + "_out.bias");
  return names;
}

void CheckConfig(const PpoConfig& c) {
  SPECBED_CHECK(c.n_steps >= 1 && c.minibatch >= 1 && c.epochs >= 1 && c.total_steps >= 1,
                "PPO: n_steps, minibatch, epochs and total_steps must be >= 1");
  SPECBED_CHECK(c.lr > 0 && c.clip > 0 && c.gamma >= 0 && c.gamma <= 1 && c.gae_lambda >= 0 &&
                    c.gae_lambda <= 1,
                "PPO: need lr > 0, clip > 0, gamma and gae_lambda in [0, 1]");
}

}  // namespace

PpoAgent::PpoAgent(PpoArch arch, const std::map<std::string, at::Tensor>& init, PpoConfig config)
    : arch_(std::move(arch)), config_(config), rng_(config.seed) {
  CheckConfig(config_);
  SPECBED_CHECK(arch_.obs_dim >= 1 && arch_.actions >= 1, "PPO: bad architecture");
  for (const std::string& name : MlpNames("actor", arch_.actor_hidden.size())) {
    SPECBED_CHECK(init.count(name) == 1, "PPO: initial tensors lack '", name, "'");
    params_[name] = init.at(name).detach().to(at::kFloat).clone().set_requires_grad(true);
  }
  for (const std::string& name : MlpNames("critic", arch_.critic_hidden.size())) {
    SPECBED_CHECK(init.count(name) == 1, "PPO: initial tensors lack '", name, "'");
    params_[name] = init.at(name).detach().to(at::kFloat).clone().set_requires_grad(true);
  }
  SPECBED_CHECK(params_.at("actor_out.weight").size(0) == arch_.actions &&
                    params_.at("critic_out.weight").size(0) == 1,
                "PPO: output layer shapes do not match the architecture");
  ResetOptimizer(config_);
  probs_.resize(static_cast<size_t>(arch_.actions));
}

std::vector<std::pair<std::string, at::Tensor>> PpoAgent::NamedParams() const {
  std::vector<std::pair<std::string, at::Tensor>> named(params_.begin(), params_.end());
  return named;
}

void PpoAgent::ResetOptimizer(PpoConfig config) {
  CheckConfig(config);
  config_ = config;
  const auto named = NamedParams();
  opt_ = std::make_unique<AdamWOptimizer>(named, std::vector<bool>(named.size(), false), 0.9, 0.999,
                                          0.0);
  rng_.seed(config_.seed);
  steps_done_ = 0;
  updates_done_ = 0;
  ClearAll(obs_, actions_, logp_, values_, rewards_, dones_);
  open_ = false;
}

at::Tensor PpoAgent::Forward(const at::Tensor& obs, bool actor) const {
  const std::string prefix = actor ? "actor" : "critic";
  const size_t hidden = actor ? arch_.actor_hidden.size() : arch_.critic_hidden.size();
  at::Tensor x = obs;
  for (size_t i = 0; i < hidden; ++i) {
    const std::string p = prefix + "." + std::to_string(i);
    x = at::addmm(params_.at(p + ".bias"), x, params_.at(p + ".weight").t());
    x = arch_.relu ? at::relu(x) : at::tanh(x);
  }
  x = at::addmm(params_.at(prefix + "_out.bias"), x, params_.at(prefix + "_out.weight").t());
  return actor ? x : x.squeeze(1);
}

int64_t PpoAgent::Act(const float* obs) {
  if (open_) {  // the previous decision of this episode: reward 0, not terminal
    rewards_.push_back(0.f);
    dones_.push_back(0);
    open_ = false;
  }
  at::NoGradGuard no_grad;
  const at::Tensor x =
      at::from_blob(const_cast<float*>(obs), {1, arch_.obs_dim}, at::kFloat).clone();
  const at::Tensor logits = Forward(x, true);
  const at::Tensor logp_all = at::log_softmax(logits, 1).contiguous();
  const float* lp = logp_all.data_ptr<float>();
  // Inverse-CDF sampling with SpecBed's own uniform (53 random bits), not std:: distributions.
  const double u = static_cast<double>(rng_() >> 11) * (1.0 / 9007199254740992.0);
  double acc = 0;
  int64_t a = arch_.actions - 1;
  for (int64_t i = 0; i < arch_.actions; ++i) {
    acc += std::exp(static_cast<double>(lp[i]));
    if (u < acc) {
      a = i;
      break;
    }
  }
  const float value = Forward(x, false).item<float>();
  obs_.insert(obs_.end(), obs, obs + arch_.obs_dim);
  actions_.push_back(a);
  logp_.push_back(lp[a]);
  values_.push_back(value);
  open_ = true;
  return a;
}

int64_t PpoAgent::Greedy(const float* obs) {
  at::NoGradGuard no_grad;
  const at::Tensor x =
      at::from_blob(const_cast<float*>(obs), {1, arch_.obs_dim}, at::kFloat).clone();
  const at::Tensor logits = Forward(x, true).contiguous();
  const float* z = logits.data_ptr<float>();
  int64_t best = 0;
  for (int64_t i = 1; i < arch_.actions; ++i) {
    if (z[i] > z[best]) best = i;
  }
  return best;
}

void PpoAgent::EndEpisode(double reward) {
  if (!open_) return;
  rewards_.push_back(static_cast<float>(reward));
  dones_.push_back(1);
  open_ = false;
}

void PpoAgent::DropOpen() {
  if (!open_) return;
  obs_.resize(obs_.size() - static_cast<size_t>(arch_.obs_dim));
  actions_.pop_back();
  logp_.pop_back();
  values_.pop_back();
  open_ = false;
  // An earlier decision of the cut episode stays with reward 0; mark the last one terminal.
  if (!dones_.empty() && dones_.back() == 0) dones_.back() = 1;
}

bool PpoAgent::ReadyToUpdate() const {
  return !open_ && static_cast<int64_t>(rewards_.size()) >= config_.n_steps && !dones_.empty() &&
         dones_.back() == 1;
}

double PpoAgent::LearningRate() const {
  const double total = static_cast<double>(config_.total_steps);
  const double warm = config_.warmup_frac * total;
  const double t = static_cast<double>(steps_done_);
  if (warm > 0 && t < warm) return config_.lr * std::max(t, 1.0) / warm;
  const double span = std::max(1.0, total - warm);
  return config_.lr * std::max(0.0, (total - t) / span);
}

PpoUpdateStats PpoAgent::Update() {
  SPECBED_CHECK(!open_ && !rewards_.empty() && dones_.back() == 1,
                "PPO: update needs a rollout that ends on an episode boundary");
  const int64_t n = static_cast<int64_t>(rewards_.size());
  PpoUpdateStats stats;
  stats.transitions = n;
  // GAE (the rollout ends on a terminal transition, so nothing is bootstrapped past it).
  std::vector<float> adv(static_cast<size_t>(n)), ret(static_cast<size_t>(n));
  double last = 0;
  double reward_sum = 0;
  for (int64_t t = n - 1; t >= 0; --t) {
    const double not_done = dones_[t] ? 0.0 : 1.0;
    const double next_value = t + 1 < n ? values_[t + 1] : 0.0;
    const double delta = rewards_[t] + config_.gamma * next_value * not_done - values_[t];
    last = delta + config_.gamma * config_.gae_lambda * not_done * last;
    adv[t] = static_cast<float>(last);
    ret[t] = static_cast<float>(last + values_[t]);
    if (dones_[t]) {
      reward_sum += rewards_[t];
      ++stats.episodes;
    }
  }
  stats.mean_reward = stats.episodes > 0 ? reward_sum / stats.episodes : 0;
  const at::Tensor obs = at::from_blob(obs_.data(), {n, arch_.obs_dim}, at::kFloat);
  const at::Tensor actions = at::from_blob(actions_.data(), {n}, at::kLong);
  const at::Tensor old_logp = at::from_blob(logp_.data(), {n}, at::kFloat);
  const at::Tensor advantages = at::from_blob(adv.data(), {n}, at::kFloat);
  const at::Tensor returns = at::from_blob(ret.data(), {n}, at::kFloat);

  const double lr = LearningRate();
  stats.lr = lr;
  std::vector<int64_t> order(static_cast<size_t>(n));
  int64_t batches = 0;
  for (int64_t epoch = 0; epoch < config_.epochs; ++epoch) {
    std::iota(order.begin(), order.end(), 0);
    for (int64_t i = n - 1; i > 0; --i) {  // Fisher-Yates with the agent's RNG
      const int64_t j = static_cast<int64_t>(rng_() % static_cast<uint64_t>(i + 1));
      std::swap(order[i], order[j]);
    }
    for (int64_t start = 0; start < n; start += config_.minibatch) {
      const int64_t m = std::min(config_.minibatch, n - start);
      const at::Tensor idx = at::from_blob(order.data() + start, {m}, at::kLong).clone();
      const at::Tensor o = obs.index_select(0, idx);
      const at::Tensor a = actions.index_select(0, idx);
      at::Tensor A = advantages.index_select(0, idx);
      if (config_.normalize_advantage && m > 1) A = (A - A.mean()) / (A.std() + 1e-8);
      if (config_.flip_policy_gradient) A = -A;
      const at::Tensor logp_all = at::log_softmax(Forward(o, true), 1);
      const at::Tensor logp = logp_all.gather(1, a.unsqueeze(1)).squeeze(1);
      const at::Tensor ratio = at::exp(logp - old_logp.index_select(0, idx));
      const at::Tensor surrogate =
          at::min(ratio * A, at::clamp(ratio, 1.0 - config_.clip, 1.0 + config_.clip) * A);
      const at::Tensor policy_loss = -surrogate.mean();
      const at::Tensor entropy = -(at::exp(logp_all) * logp_all).sum(1).mean();
      const at::Tensor value_loss =
          (Forward(o, false) - returns.index_select(0, idx)).pow(2).mean();
      const at::Tensor loss =
          policy_loss - config_.ent_coef * entropy + config_.vf_coef * value_loss;
      loss.backward();
      stats.grad_norm += opt_->Step(lr, config_.max_grad_norm);
      {
        at::NoGradGuard no_grad;
        const at::Tensor log_ratio = logp - old_logp.index_select(0, idx);
        stats.approx_kl += ((at::exp(log_ratio) - 1) - log_ratio).mean().item<double>();
        stats.clip_fraction +=
            ((ratio - 1).abs() > config_.clip).to(at::kFloat).mean().item<double>();
        stats.policy_loss += policy_loss.item<double>();
        stats.value_loss += value_loss.item<double>();
        stats.entropy += entropy.item<double>();
      }
      ++batches;
    }
  }
  const double b = static_cast<double>(std::max<int64_t>(batches, 1));
  stats.policy_loss /= b;
  stats.value_loss /= b;
  stats.entropy /= b;
  stats.approx_kl /= b;
  stats.clip_fraction /= b;
  stats.grad_norm /= b;
  steps_done_ += n;
  ++updates_done_;
  ClearAll(obs_, actions_, logp_, values_, rewards_, dones_);
  return stats;
}

std::map<std::string, at::Tensor> PpoAgent::Tensors() const {
  std::map<std::string, at::Tensor> out;
  for (const auto& [name, t] : params_) out[name] = t.detach().clone();
  return out;
}

void PpoAgent::SetTensors(const std::map<std::string, at::Tensor>& tensors) {
  at::NoGradGuard no_grad;
  for (auto& [name, t] : params_) {
    auto it = tensors.find(name);
    SPECBED_CHECK(it != tensors.end() && it->second.sizes() == t.sizes(), "PPO: tensor '", name,
                  "' missing or of the wrong shape");
    t.copy_(it->second.to(at::kFloat));
  }
}

void PpoAgent::Save(const std::string& path) const {
  SPECBED_CHECK(!open_ && rewards_.empty(), "PPO: save only at a rollout boundary");
  std::vector<at::Tensor> keep;
  std::vector<SafetensorsTensorView> views;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    keep.push_back(t.detach().to(at::kFloat).contiguous());
    SafetensorsTensorView v;
    v.name = name;
    v.dtype = SafetensorsDtype::kF32;
    v.shape = keep.back().sizes().vec();
    v.data = keep.back().data_ptr();
    v.nbytes = static_cast<size_t>(keep.back().numel()) * sizeof(float);
    views.push_back(v);
  };
  // `keep` must not reallocate while views point into it.
  keep.reserve(params_.size() * 3);
  for (const auto& [name, t] : params_) add("param." + name, t);
  const auto& ps = opt_->params();
  for (size_t i = 0; i < ps.size(); ++i) {
    if (opt_->exp_avg()[i].defined()) add("exp_avg." + ps[i].first, opt_->exp_avg()[i]);
    if (opt_->exp_avg_sq()[i].defined()) add("exp_avg_sq." + ps[i].first, opt_->exp_avg_sq()[i]);
  }
  WriteSafetensors(path + ".safetensors", views);
  std::ostringstream rng;
  rng << rng_;
  nlohmann::ordered_json j;
  j["steps_done"] = steps_done_;
  j["updates_done"] = updates_done_;
  j["adam_steps"] = opt_->steps_done();
  j["rng"] = rng.str();
  j["config"] = PpoConfigToJson(config_);
  WriteFileAtomically(path + ".json", j.dump(2));
}

void PpoAgent::Load(const std::string& path) {
  const nlohmann::json j = ReadJsonFile(path + ".json");
  const auto file = SafetensorsFile::Open(path + ".safetensors");
  auto read = [&](const std::string& name, const at::Tensor& like) -> at::Tensor {
    const SafetensorsEntry* e = file->Find(name);
    SPECBED_CHECK(
        e != nullptr && e->dtype == SafetensorsDtype::kF32 && e->shape == like.sizes().vec(),
        "PPO state '", path, ".safetensors': tensor '", name, "' missing or not F32 of shape ",
        like.sizes());
    at::Tensor t = at::empty(e->shape, at::kFloat);
    std::memcpy(t.data_ptr<float>(), e->data, e->nbytes);
    return t;
  };
  at::NoGradGuard no_grad;
  for (auto& [name, t] : params_) t.copy_(read("param." + name, t));
  const auto& ps = opt_->params();
  for (size_t i = 0; i < ps.size(); ++i) {
    if (file->Find("exp_avg." + ps[i].first) != nullptr) {
      opt_->exp_avg()[i] = read("exp_avg." + ps[i].first, ps[i].second);
      opt_->exp_avg_sq()[i] = read("exp_avg_sq." + ps[i].first, ps[i].second);
    }
  }
  // A missing or mistyped counter names the file and the field (WithJsonContext).
  WithJsonContext(path + ".json", [&] {
    opt_->set_steps_done(j.at("adam_steps").get<int64_t>());
    steps_done_ = j.at("steps_done").get<int64_t>();
    updates_done_ = j.at("updates_done").get<int64_t>();
    std::istringstream rng(j.at("rng").get<std::string>());
    rng >> rng_;
  });
}

}  // namespace specbed
