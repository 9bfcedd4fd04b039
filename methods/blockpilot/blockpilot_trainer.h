// `specbed blockpilot train`: trains the BlockPilot predictor (blockpilot_predictor.h) with
// cross-entropy on the labels of a `specbed blockpilot label` file, through the shared training
// loop (train_loop.h). The last `holdout` share of the prompts is held out; the evaluation reports
// the predictor's accuracy there and, in τ and in decode throughput, its choice against the
// per-prompt oracle (best b by τ, best b by throughput), the best single fixed b and the drafter's
// trained block size. The figures go into the predictor's config.json ("evaluation") and
// OUT/train_summary.json. Knobs and defaults: methods/blockpilot/README.md.
// Checked by: tests/methods/blockpilot_test.cpp (a synthetic separable label set reaches high
// held-out accuracy with a fixed seed; the figures on hand-made labels; the written predictor
// loads and predicts what the trained MLP predicts).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/blockpilot/blockpilot_labels.h"
#include "methods/common/train/train_loop.h"

namespace specbed {

struct BlockPilotTrainConfig {
  std::string labels;             // `specbed blockpilot label` file (required)
  std::string criterion = "tau";  // label = argmax τ ("tau") or argmax tokens/s ("throughput")
  std::string input = "probs";    // probs | logits | log_probs
  int64_t hidden = 2048;          // hidden width
  int64_t layers = 2;             // Linear layers (1 = a linear classifier)
  double holdout = 0.1;           // share of prompts held out (the last ones), >= 1 prompt
  OptimConfig optim;              // defaults: DefaultBlockPilotOptim()
};

// AdamW lr 1e-3 -> 1e-4 (cosine) after 20 warmup steps, 400 steps of 32 prompts, betas
// (0.9, 0.999), weight decay 0.01 on matrices, grad clip 1.0, seed 0.
OptimConfig DefaultBlockPilotOptim();

// The figures of one choice of block size per prompt, over rows `rows` of `labels`:
// mean τ (per-prompt τ averaged over prompts) and decode throughput (Σ tokens / Σ time).
struct BlockPilotChoiceFigures {
  double mean_tau = 0;
  double tokens_per_s = 0;
};
BlockPilotChoiceFigures ScoreBlockChoice(const BlockPilotLabels& labels,
                                         const std::vector<int64_t>& rows,
                                         const std::vector<int64_t>& choice);

// The comparison table over `rows`: the predictor's choice `predicted` (indices into candidates;
// empty = leave it out) against the oracle by τ, the oracle by throughput, every fixed b (best
// by τ and best by throughput named) and the trained block size; accuracy of `predicted`
// against the labels of `criterion`.
nlohmann::ordered_json BlockPilotFigures(const BlockPilotLabels& labels,
                                         const std::vector<int64_t>& rows,
                                         const std::vector<int64_t>& predicted,
                                         const std::string& criterion);

struct BlockPilotTrainResult {
  TrainLoopResult loop;
  int64_t n_train = 0, n_eval = 0;
  nlohmann::ordered_json evaluation;  // the figures written to config.json (when finished)
};

// Trains (or resumes) into out_dir: config.json + model.safetensors (the predictor, rewritten at
// every checkpoint), train_log.db, train_summary.json (when finished), work/ (train state).
// Errors name the knob.
BlockPilotTrainResult TrainBlockPilot(const BlockPilotTrainConfig& config,
                                      const std::string& out_dir,
                                      const TrainLoopOptions& options = {});

}  // namespace specbed
