// Does an LTD policy pair adapt to what it observes? The probe runs `ltd` over a prompt set with
// the controller's decision log on (LtdController::set_decision_log) and summarises the log:
// - V per step (the size policy, or the static size): spread (distinct values, mean, standard
//   deviation, range) and Pearson correlation with the best candidate score and with L (the
//   context length), the features pi_V reads;
// - D per step (rounds the tree ran): the same;
// - the depth decisions: CONTINUE rate and its correlation with the latest round's best score.
// A policy that does not adapt makes one choice throughout (one V; always STOP or always
// CONTINUE): the README and the report then say so. D per step can still vary, because the end of
// an answer caps the tree's depth. `specbed ltd-adaptation` (harness/cli/cmd_ltd.cpp) writes the
// log (TSV), a Markdown table and a figure (V and D against the best score); its output for the
// shipped policies is in results/ltd_adaptation_twin_t0/adaptation.md (and _t1). Checked by:
// tests/methods/ltd_adaptation_probe_test.cpp (the summary on hand-made logs; the probe on the
// shipped policies logs one size decision per step, consistent with the steps' verified sizes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/ltd/ltd_controllers.h"

namespace specbed {

struct LtdSpread {
  int64_t n = 0, distinct = 0;
  double mean = 0, sd = 0;
  int64_t min = 0, max = 0;
  // Pearson correlation with the step's best score and with L; NaN when either side is constant.
  double corr_top_score = 0, corr_context = 0;
};

struct LtdAdaptationSummary {
  LtdSpread size;   // V per step
  LtdSpread depth;  // D per step
  int64_t depth_calls = 0;
  double continue_rate = 0;            // share of depth decisions that said CONTINUE
  double corr_continue_top_score = 0;  // correlation of CONTINUE (1/0) with the round's best score
  // Whether the policies' own choices vary: more than one V, or both CONTINUE and STOP. (D per
  // step also moves when the end of an answer caps the tree, which is not the policy's choice.)
  bool adapts() const { return size.distinct > 1 || (continue_rate > 0 && continue_rate < 1); }
  nlohmann::ordered_json ToJson() const;
};

LtdAdaptationSummary SummarizeLtdDecisions(const std::vector<LtdDecision>& log);

// Pearson correlation of x and y (same length); NaN when fewer than 2 points or a side is constant.
double PearsonCorrelation(const std::vector<double>& x, const std::vector<double>& y);

struct LtdProbeConfig {
  std::string target = "stories260K-twin";
  std::string policy = "auto";    // the `ltd` knob
  std::string policies = "both";  // both | size | depth
  std::string prompts = "stories";
  int64_t limit =
      12;  // first prompts of the set (the evaluation prompts of configs/ltd_twin_table.json)
  int64_t max_new_tokens = 64;
  double temperature = 0;
  uint64_t seed = 0;
  int threads = 1;
};

struct LtdProbeResult {
  std::vector<LtdDecision> log;
  int64_t steps = 0;                   // verify steps run
  std::vector<int64_t> step_verified;  // n_drafted of every step, in order
};

LtdProbeResult ProbeLtdDecisions(const LtdProbeConfig& config);

}  // namespace specbed
