// `specbed blockpilot oracle DB`: BlockPilot against fixed block sizes and the per-prompt oracle,
// measured on the evaluation prompts of a results database (the same run's cases, side by side).
// For every workload (target, dataset, temperature, seed, max_new_tokens, dtype) and drafter
// directory, it pairs the `dflash` cases of that drafter at explicit block sizes b (knob
// `block_size` > 0) with the `dflash+blockpilot` case(s) of the same drafter, over the prompts
// (prompt_id, turn) that all of them answered: per prompt τ = (output tokens − 1) / verify
// steps (the first token comes from prefill), decode tok/s = Σ tokens / Σ decode time. Reported:
// mean τ and tok/s of every fixed b, the best fixed b by τ and by tok/s, the per-prompt oracle by
// τ (max over b per prompt) and by time (fastest b per prompt), and BlockPilot.
// Checked by: tests/methods/blockpilot_test.cpp (BlockPilotOracle.* on a hand-made database).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace specbed {

// One entry per workload and drafter with at least one fixed block size:
// {"target", "dataset", "temperature", "seed", "max_new_tokens", "drafter", "prompts",
//  "fixed": [{"block_size", "mean_tau", "tokens_per_s"}...], "best_fixed_tau": {...},
//  "best_fixed_throughput": {...}, "oracle_tau": {"mean_tau", "tokens_per_s"},
//  "oracle_throughput": {...}, "blockpilot": {"mean_tau", "tokens_per_s", "knobs"} (when run)}.
// `block_sizes`: only these fixed block sizes count (e.g. the predictor's candidates
// {B − k, …, B + k}); empty = every explicit block size found.
// Throws specbed::Error naming the database when it cannot be read.
nlohmann::ordered_json BlockPilotOracleFigures(const std::string& db_path,
                                               const std::vector<int64_t>& block_sizes = {});

}  // namespace specbed
