// Shared trainer pieces on top of the training loop (see train_driver.h).
// Checked by: tests/train/train_driver_test.cpp.
#include "methods/common/train/train_driver.h"

#include <algorithm>

namespace specbed {

OptimConfig CosineOptim(int64_t steps, int64_t batch, double lr, double min_lr, int64_t warmup) {
  OptimConfig o;
  o.steps = steps;
  o.batch = batch;
  o.lr = lr;
  o.min_lr = min_lr;
  o.warmup = warmup;
  return o;
}

std::vector<std::vector<int64_t>> RowBatches(int64_t first, int64_t end, int64_t batch) {
  std::vector<std::vector<int64_t>> batches;
  for (int64_t b0 = first; b0 < end; b0 += batch) {
    std::vector<int64_t> rows;
    for (int64_t i = b0; i < std::min(end, b0 + batch); ++i) rows.push_back(i);
    batches.push_back(std::move(rows));
  }
  return batches;
}

void StepFigures::Add(const std::vector<double>& step_loss, const std::vector<double>& step_top1,
                      const std::vector<double>& step_count) {
  for (size_t k = 0; k < loss.size(); ++k) {
    loss[k] += step_loss[k] * step_count[k];
    hits[k] += step_top1[k] * step_count[k];
    count[k] += step_count[k];
  }
}

ChainFigures StepFigures::Chain(double decay) const {
  ChainFigures f;
  double weight = 1, chain = 1;
  for (size_t k = 0; k < loss.size(); ++k) {
    const double lk = count[k] > 0 ? loss[k] / count[k] : 0;
    const double ak = count[k] > 0 ? hits[k] / count[k] : 0;
    f.weighted_loss += weight * lk;
    weight *= decay;
    f.top1.push_back(ak);
    f.loss.push_back(lk);
    chain *= ak;
    f.tau += chain;
  }
  return f;
}

EvalMetrics StepFigures::ChainMetrics(double decay, const std::string& unit) const {
  const ChainFigures chain = Chain(decay);
  EvalMetrics m;
  m.loss = chain.weighted_loss;
  m.acceptance_proxy = chain.top1[0].get<double>();
  m.extra[unit + "_top1"] = chain.top1;
  m.extra[unit + "_loss"] = chain.loss;
  m.extra["chain_tau_estimate"] = chain.tau;
  m.extra["eval_positions_" + unit + "0"] = count[0];
  return m;
}

}  // namespace specbed
