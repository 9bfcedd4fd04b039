// The optimiser and its settings (see optimizer.h).
// Checked by: tests/train/train_loop_test.cpp.
#include "methods/common/train/optimizer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "methods/common/json_fields.h"
#include "models/device.h"

namespace specbed {

using ojson = nlohmann::ordered_json;

namespace {
constexpr double kAdamEps = 1e-8;  // as torch.optim.AdamW
}  // namespace

AdamWOptimizer::AdamWOptimizer(std::vector<std::pair<std::string, at::Tensor>> params,
                               std::vector<bool> decay, double beta1, double beta2,
                               double weight_decay)
    : params_(std::move(params)),
      decay_(std::move(decay)),
      beta1_(beta1),
      beta2_(beta2),
      weight_decay_(weight_decay) {
  SPECBED_CHECK(decay_.size() == params_.size(), "AdamW: ", params_.size(), " parameters but ",
                decay_.size(), " decay flags");
  for (const auto& [name, p] : params_) {
    SPECBED_CHECK(p.defined() && p.scalar_type() == at::kFloat && p.requires_grad() && p.is_leaf(),
                  "AdamW: parameter '", name, "' must be a float32 leaf tensor with requires_grad");
    exp_avg_.push_back(at::zeros_like(p.detach()));
    exp_avg_sq_.push_back(at::zeros_like(p.detach()));
  }
}

double AdamWOptimizer::GradNorm() const {
  // Per parameter a float32 sum of squares on the parameter's device, added up in double on the
  // host in parameter order. On the CPU each is read directly; off the CPU they are stacked and
  // copied to the host at once (one sync per call, the same sums).
  std::vector<at::Tensor> sums;
  for (const auto& [name, p] : params_) {
    if (p.grad().defined()) sums.push_back(p.grad().pow(2).sum());
  }
  double sum_sq = 0;
  if (!sums.empty() && !sums.front().is_cpu()) {
    const at::Tensor host = at::stack(sums).to(at::kCPU);
    const float* v = host.data_ptr<float>();
    for (int64_t i = 0; i < host.numel(); ++i) sum_sq += static_cast<double>(v[i]);
    return std::sqrt(sum_sq);
  }
  for (const at::Tensor& s : sums) sum_sq += s.item<double>();
  return std::sqrt(sum_sq);
}

double AdamWOptimizer::Step(double lr, double grad_clip) {
  at::NoGradGuard no_grad;
  const double grad_norm = GradNorm();
  const double scale =
      (grad_clip > 0 && grad_norm > grad_clip) ? grad_clip / (grad_norm + 1e-6) : 1.0;
  ++t_;
  const double bc1 = 1.0 - std::pow(beta1_, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(beta2_, static_cast<double>(t_));
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor p = params_[i].second;
    if (!p.grad().defined()) continue;
    at::Tensor g = p.grad();
    if (scale != 1.0) g = g * scale;
    if (decay_[i] && weight_decay_ > 0) p.mul_(1.0 - lr * weight_decay_);
    exp_avg_[i].mul_(beta1_).add_(g, 1.0 - beta1_);
    exp_avg_sq_[i].mul_(beta2_).addcmul_(g, g, 1.0 - beta2_);
    const at::Tensor denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bc2)).add_(kAdamEps);
    p.addcdiv_(exp_avg_[i], denom, -lr / bc1);
    p.mutable_grad().reset();
  }
  return grad_norm;
}

void CheckOptimConfig(const OptimConfig& c, int64_t train_rows, const std::string& who) {
  SPECBED_CHECK(c.steps >= 1 && c.batch >= 1 && c.batch <= train_rows, who, ": need --steps >= 1 ",
                "and 1 <= --batch <= the number of training rows (got ", c.steps, ", ", c.batch,
                ", ", train_rows, " rows)");
  SPECBED_CHECK(c.lr > 0 && c.min_lr >= 0 && c.min_lr <= c.lr, who, ": need --lr > 0 and ",
                "0 <= --min-lr <= --lr (got ", c.lr, ", ", c.min_lr, ")");
  SPECBED_CHECK(c.warmup >= 0 && c.weight_decay >= 0 && c.grad_clip >= 0, who,
                ": --warmup, --weight-decay and --grad-clip must be >= 0");
  SPECBED_CHECK(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1, who,
                ": --beta1 and --beta2 must be in [0, 1)");
  SPECBED_CHECK(c.checkpoint_every >= 1 && c.log_every >= 1 && c.eval_every >= 0 && c.threads >= 1,
                who, ": --checkpoint-every, --log-every and --threads must be >= 1 and ",
                "--eval-every >= 0");
}

at::Device TrainDevice(const OptimConfig& c, const std::string& who) {
  const at::Device device = ParseDevice(c.device, who + " --device");
  CheckDeviceAvailable(device, who + " --device");
  return device;
}

ojson OptimSettings(const OptimConfig& c) {
  ojson s;
  SPECBED_JSON_PUT(s, c, steps, batch, lr, min_lr, warmup, weight_decay, beta1, beta2, grad_clip,
                   seed);
  return s;
}

nlohmann::ordered_json TrainRecipe(const nlohmann::ordered_json& settings, const OptimConfig& optim,
                                   const std::string& trainer) {
  nlohmann::ordered_json recipe = settings;
  const nlohmann::ordered_json optim_settings = OptimSettings(optim);
  for (const auto& [key, value] : optim_settings.items()) recipe[key] = value;
  recipe["trainer"] = trainer;
  return recipe;
}

double ScheduledLearningRate(const OptimConfig& c, int64_t step) {
  if (step < c.warmup) return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup);
  const int64_t span = std::max<int64_t>(1, c.steps - c.warmup);
  const double progress = std::min(1.0, static_cast<double>(step - c.warmup) / span);
  return c.min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (c.lr - c.min_lr);
}

}  // namespace specbed
