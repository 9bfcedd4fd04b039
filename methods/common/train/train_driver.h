// What every drafter trainer shares on top of the training loop (train_loop.h): its default
// optimiser as a cosine schedule (CosineOptim), the batches of its held-out evaluation
// (RowBatches) and the per-step figures of a multi-step drafter's evaluation (StepFigures). The
// trainers that learn from a `specbed regen` file build on it with their own driver
// (regen_head_trainer.h). Checked by: tests/train/train_driver_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/common/train/train_loop.h"

namespace specbed {

// A trainer's default optimiser: `steps` updates of `batch` rows, AdamW at `lr` decaying (cosine)
// to `min_lr` after `warmup` linear warmup steps. Every other field keeps OptimConfig's default
// (betas (0.9, 0.95), no weight decay, grad clip 1.0, seed 0, a checkpoint every 100 and a log row
// every 10 steps, evaluation only at the end, 1 thread); a trainer sets the ones it differs in.
OptimConfig CosineOptim(int64_t steps, int64_t batch, double lr, double min_lr, int64_t warmup);

// Rows [first, end) in consecutive batches of `batch` rows (the last one shorter; none when
// first >= end).
std::vector<std::vector<int64_t>> RowBatches(int64_t first, int64_t end, int64_t batch);

// The held-out figures of a drafter that predicts several steps (TTT steps, Medusa heads) as a
// greedy chain.
struct ChainFigures {
  double weighted_loss = 0;                                       // sum_k decay^k * loss_k
  nlohmann::ordered_json top1 = nlohmann::ordered_json::array();  // per step
  nlohmann::ordered_json loss = nlohmann::ordered_json::array();  // per step
  // A chain accepts k + 1 tokens only if steps 0..k all agree with the target:
  // 1 + sum_k prod_{j<=k} top1_j (teacher-forced estimate).
  double tau = 1;
};

// Per-step loss and top-1 summed over evaluation batches, weighted by the positions counted.
struct StepFigures {
  explicit StepFigures(int64_t steps) : loss(steps, 0), hits(steps, 0), count(steps, 0) {}
  // One batch: per step its mean loss, its top-1 rate and the positions it counted.
  void Add(const std::vector<double>& step_loss, const std::vector<double>& step_top1,
           const std::vector<double>& step_count);
  // Per-step means (0 where nothing counted) and the chain figures with loss weights decay^k.
  ChainFigures Chain(double decay) const;
  // The evaluation of a greedy chain of these steps, `unit` naming a step ("step", "head"):
  // loss = the decay-weighted loss, acceptance_proxy = step 0's top-1, and extras <unit>_top1,
  // <unit>_loss (per step), chain_tau_estimate and eval_positions_<unit>0.
  EvalMetrics ChainMetrics(double decay, const std::string& unit) const;

  std::vector<double> loss, hits, count;
};

}  // namespace specbed
