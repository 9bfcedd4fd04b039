// `specbed train medusa`: trains Medusa-1 heads (the target frozen) on a target's own outputs (a
// `specbed regen` file: self-distillation, as the Medusa paper's recipe for models without their
// training data) through the shared training loop (train_loop.h). Head k learns token t + k + 2
// from the target's final-normed last hidden state at t, cross-entropy weighted decay^k (the
// paper: 0.8^k); the heads start as Medusa-1 does (blocks = identity, lm_heads = the target's).
// The last n_eval sequences are held out; evaluation reports each head's top-1 and top-k
// accuracy, and the finished heads are written with their calibration (per head, how often the
// held-out label is its r-th candidate, r < kMedusaCalibrationTopK: config.json's
// specbed_calibration, the medusa method's calibrated tree). Knobs and recorded choices:
// methods/medusa/README.md.
// Checked by: tests/methods/medusa_test.cpp (loss goes down, the written heads load, carry their
// calibration and draft).
#pragma once

#include <cstdint>
#include <string>

#include "methods/common/train/regen_head_trainer.h"
#include "methods/common/train/train_loop.h"

namespace specbed {

struct MedusaTrainConfig : RegenHeadTrainConfig {
  int64_t num_heads = 4;   // K (Medusa: 5 for 7B; 4 here by default)
  int64_t num_layers = 1;  // residual blocks per head (Medusa-1: 1)
  double decay = 0.8;      // loss weight decay^k of head k (Medusa: 0.8)
};

// AdamW lr 1e-3 (Medusa-1's), beta (0.9, 0.999), no weight decay, grad clip 1, warmup 40 +
// cosine; batch 16, 800 steps.
OptimConfig DefaultMedusaOptim();

using MedusaTrainResult = RegenHeadTrainResult;

// Trains (or resumes) into out_dir: config.json + medusa_lm_head.safetensors (the published
// layout, float32, recipe under "specbed_recipe"), train_log.db, train_summary.json, work/.
MedusaTrainResult TrainMedusa(const MedusaTrainConfig& config, const std::string& out_dir,
                              const TrainLoopOptions& options = {});

}  // namespace specbed
