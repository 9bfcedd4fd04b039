// `specbed train ltd-baselines`: trains the Disco, SpecDec++ and C2T classifiers of the LTD
// paper's table (spec §5, ltd_classifiers.h) on supervised data from EAGLE-3 runs, as the paper
// describes: generations of the EAGLE-3 drafter at the dynamic-depth baselines' shape (W = top_k,
// up to max_depth rounds, V = nodes) on the training prompts, recording per expansion round the
// Disco features and the drafter's hidden state at the best node (label: the accepted path
// reached the deepest layer drafted so far) and per verified node its (score, depth) (label: the
// node is on the accepted path). Positives and negatives are balanced by subsampling the larger
// class (seeded); AdamW, binary cross-entropy, minibatches, the spec's epochs per classifier.
// Held-out prompts give each classifier's balanced accuracy and AUC, stored in its config.json
// ("evaluation") beside the recipe ("training"). Writes OUT/disco, OUT/specdecpp, OUT/c2t and
// OUT/train_summary.json. Trains in seconds to minutes, so it does not resume: a rerun starts over.
// Knobs and recorded choices: methods/ltd/README.md.
// Checked by: tests/methods/ltd_classifier_test.cpp (a small run writes loadable classifiers with
// balanced data, learns better than chance on held-out rows, and every method using them stays
// token-identical to AR at T = 0) and tests/cli/ltd_cli_test.cpp (the CLI's errors).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "methods/ltd/ltd_setup_config.h"

namespace specbed {

// The data-collection tree is LTD's dynamic-depth setting: W = top_k 10, up to max_depth 12
// rounds, V = nodes 60.
struct LtdBaselineTrainConfig : LtdSetupConfig {
  int64_t nodes = 60;
  int64_t disco_hidden = 128, specdec_hidden = 1024, c2t_hidden = 64;  // spec §5
  int64_t disco_epochs = 50, specdec_epochs = 5, c2t_epochs = 50;      // spec §5
  int64_t batch = 64;
  double lr = 1e-4;  // spec: AdamW, lr 1e-4
  double weight_decay = 0.01;
  uint64_t seed = 0;
  int threads = 1;
};

struct LtdBaselineTrainResult {
  nlohmann::ordered_json summary;  // per classifier: rows, positives, held-out figures
};

// Errors (bad flags, too few prompts, no positive or negative example) name the flag or input.
LtdBaselineTrainResult TrainLtdBaselines(const LtdBaselineTrainConfig& config,
                                         const std::string& out_dir, bool verbose = true);

}  // namespace specbed
