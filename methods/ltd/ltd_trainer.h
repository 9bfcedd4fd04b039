// `specbed train ltd`: trains LTD's policies with the C++ PPO of ltd_ppo.h on the real target and
// EAGLE-3 head (spec §4). One RL episode = one draft-and-verify cycle of an ordinary
// SpeculativeDecoder generation (the generation persists across episodes, spec §4.1): a training
// Controller acts through the draft hooks and, after the verdict, pays the reward
//   R = L_A / (100 * T_cycle + 1e-6),  L_A = accepted drafts + 1,  T_cycle in seconds (§4.2),
// T_cycle measured from the step's start to after KV compaction, minus the learner's own
// sampling time (the frozen partner's inference is included); or, in the simulated mode, read from
// the T_draft(D) / T_verify(V) tables measured first (deterministic: used by the tests); or, in
// the "tau" reward ablation, R = L_A. Schedule (§4.6, scaled): size policy against a heuristic
// depth partner (uniform D per cycle), depth policy against a fixed V, then `iterations` rounds
// alternating size / depth with the other frozen. Checkpoint selection on held-out prompts
// (validation throughput = sum L_A / sum T_cycle with greedy policies). Progress bar, per-update
// curves in OUT/train_log.db (train_log: PPO loss, lr, grad norm; train_eval: value loss, mean
// reward, entropy, KL, validation figures), resume at stage and update granularity. Measured
// rewards make runs non-bitwise-reproducible; the simulated mode is bitwise reproducible.
// Knobs and defaults: methods/ltd/README.md.
// Checked by: tests/methods/ltd_trainer_test.cpp (simulated mode: bitwise reproducible, writes
// loadable policies that `ltd` runs token-identically to AR, learns the small verification size
// the tables favour) and tests/cli/ltd_cli_test.cpp (the CLI: stop after a stage, resume, errors).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/engine/speculative_decoder.h"
#include "methods/ltd/ltd_ppo.h"
#include "methods/ltd/ltd_setup_config.h"
#include "methods/method_registry.h"
#include "models/model_registry.h"

namespace specbed {

// T_draft(D) for D = 1..Dmax and T_verify(V) at measured V (seconds, medians per step).
struct LtdCostTables {
  std::vector<double> draft_s;    // [Dmax + 1], index D (index 0 unused)
  std::vector<int64_t> verify_v;  // ascending
  std::vector<double> verify_s;   // at verify_v
  double Draft(int64_t rounds) const;
  double Verify(int64_t nodes) const;  // linear interpolation, clamped at the ends
  nlohmann::ordered_json ToJson() const;
  static LtdCostTables FromJson(const nlohmann::json& j, const std::string& source);
};

struct LtdTrainConfig : LtdSetupConfig {
  int64_t depth_every = 1;
  int64_t size_step = 1;
  int64_t n_actions = 16;
  std::vector<int64_t> depth_hidden = {256};
  std::vector<int64_t> size_hidden = {256, 64};
  std::vector<int64_t> critic_hidden = {256, 64};
  std::string activation = "tanh";
  int64_t partner_rounds_max = 12;    // size stage: heuristic depth ~ U{1..this}
  int64_t partner_nodes = 4;          // depth stage: fixed V
  std::string reward = "throughput";  // throughput | tau
  std::string timing = "measured";    // measured | simulated
  std::string tables;                 // simulated: a tables.json to use (else measured first)
  int64_t size_steps = 3000, depth_steps = 6000, iter_steps = 2000;
  int64_t iterations = 2;  // co-adaptation rounds after the two initial stages
  PpoConfig ppo;           // n_steps, minibatch, epochs, lr, ent_coef, seed (gamma per policy)
  double gamma_size = 0.9, gamma_depth = 0.999;
  int64_t eval_every = 4;  // updates between validations (and at each stage's end)
  int threads = 1;
};
LtdTrainConfig DefaultLtdTrainConfig();

struct LtdTrainResult {
  bool finished = false;
  int64_t stages_done = 0;
  nlohmann::ordered_json summary;
};

// What both LTD trainers (`train ltd`, `train ltd-baselines`) start from: the target, a method
// context over it, the EAGLE-3 head's name ("auto" resolved), the prompt split (training: index
// >= train_from; validation: [val_from, val_from + val_count)) and the stop rules. Not movable
// (the context points at the target).
struct LtdTrainSetup {
  LoadedTarget target;
  MethodContext context;
  std::string head;
  std::vector<std::vector<int32_t>> train_prompts, val_prompts;
  StopConfig stop;
};
// Errors start with `who` and name the flags (too few prompts, unknown target or dataset).
std::unique_ptr<LtdTrainSetup> PrepareLtdTraining(const LtdSetupConfig& c, const std::string& who);
// One generation of `decoder` over `prompt` (a fresh KV cache sized for the decoder's tree).
DecodeResult RunLtdGeneration(LtdTrainSetup& setup, SpeculativeDecoder& decoder,
                              const std::vector<int32_t>& prompt, int64_t max_new_tokens);

// Trains into out_dir: depth/ and size/ (policies), tables.json, train_log.db,
// train_summary.json, work/ (resume state). `stop_after_stages` > 0 stops early (tests).
LtdTrainResult TrainLtd(const LtdTrainConfig& config, const std::string& out_dir,
                        bool verbose = true, int64_t stop_after_stages = 0);

}  // namespace specbed
