// `specbed train hrad`: builds H-RAD training data and trains the predictor (hrad.h) on the shared
// training loop (train_loop.h).
//
// Data ("regenerated", spec §2.6 [REC]): sequences sampled from the target itself (BOS prompt,
// temperature `temperature`, seeded), so no evaluation prompt is seen. At every position t of a
// sequence (x_t = the newest committed token), the draft greedily proposes gamma tokens after
// x_{<=t} and the target verifies them greedily (one forward over [x_t, d_1..d_gamma] on top of its
// cache): label 0 = none accepted, 2 = all gamma accepted, 1 = otherwise. Features z_t = the
// target's last-K-layer hidden states at position t-1 (whose logits produced x_t) + the target
// embedding of x_t -- exactly what SpecBranchDecoder feeds the predictor.
// Training: cross-entropy with label smoothing 0.1 and inverse-frequency class weights (in place of
// the paper's SMOTE + weighted sampler), dropout 0.4, features standardised with the training
// rows' mean / std (folded into the first layer when the predictor is written, so it reads raw
// features). The last `n_eval_sequences` sequences are held out: accuracy, per-class recall and
// the confusion matrix go into config.json ("evaluation") and OUT/train_summary.json.
// Checked by: tests/methods/specbranch_test.cpp (HradTrain.*).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "methods/common/train/train_loop.h"

namespace specbed {

struct HradTrainConfig {
  std::string target = "stories260K";
  std::string drafter = "auto";  // draft LM (auto = the target's shipped SpS draft)
  int64_t gamma = 4;             // draft length of the labels (= the decoder's gamma_max)
  int64_t feature_layers = 4;    // K
  int64_t n_sequences = 48;      // training sequences
  int64_t n_eval_sequences = 8;  // held-out sequences
  int64_t seq_len = 160;         // tokens per sequence (BOS included)
  double temperature = 0.8;      // sampling temperature of the data
  uint64_t data_seed = 1;
  double dropout = 0.4;
  double label_smoothing = 0.1;
  OptimConfig optim;  // defaults: DefaultHradOptim()
};

// AdamW lr 1e-3 -> 1e-4 (cosine), 20 warmup steps, 2000 steps of 32 rows, weight decay 1e-4,
// grad clip 1.0, seed 0.
OptimConfig DefaultHradOptim();

struct HradTrainResult {
  TrainLoopResult loop;
  int64_t n_train = 0, n_eval = 0;
  nlohmann::ordered_json evaluation;
  double data_seconds = 0;
};

HradTrainResult TrainHrad(const HradTrainConfig& config, const std::string& out_dir,
                          const TrainLoopOptions& options = {});

}  // namespace specbed
