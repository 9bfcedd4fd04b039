// What both LTD trainers (`train ltd`, `train ltd-baselines`) start from, set by the flags they
// share: the target and its EAGLE-3 head, the prompt split, the generation length and the tree's
// beam width and depth ceiling. LtdTrainConfig and LtdBaselineTrainConfig extend it;
// PrepareLtdTraining (ltd_trainer.h) turns it into an LtdTrainSetup.
// Checked by: tests/methods/ltd_trainer_test.cpp, tests/methods/ltd_classifier_test.cpp.
#pragma once

#include <cstdint>
#include <string>

namespace specbed {

struct LtdSetupConfig {
  std::string target = "stories260K-twin";
  std::string head = "auto";
  std::string dtype = "float32";
  // Where the target and the EAGLE-3 head run: "cpu", "cuda" or "cuda:N" (checked before anything
  // loads). The PPO policies and the classifiers stay small float32 host MLPs.
  std::string device = "cpu";
  std::string prompts = "stories";
  int64_t train_from = 16;  // training prompts: index >= train_from
  int64_t val_from = 12;    // validation (held-out) prompts: [val_from, val_from + val_count)
  int64_t val_count = 4;
  int64_t max_new_tokens = 64;
  int64_t top_k = 10;      // W: beam width (children per expanded node)
  int64_t max_depth = 12;  // most expansion rounds
};

}  // namespace specbed
