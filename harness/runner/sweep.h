// Sweep files (`specbed sweep FILE`, also accepted by `specbed run`): a run config (every key keeps
// its meaning) whose method knobs may be lists or range strings ("16-256*2", "1-7+2") crossed
// within each method entry, plus `repeats`, `batch_sizes`, `exclude` / `only` matchers and a
// pass-through `paper` object. ExpandSweep turns it into resolved cases in a deterministic order
// (AR-like methods once per target x dataset x T x seed x batch, never per repeat; duplicates
// dropped); ShardCases splits them between machines by a stable hash of the case key.
// Checked by: tests/engine/sweep_test.cpp and tests/cli/sweep_cli_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/runner/run_config.h"
#include "methods/method_registry.h"

namespace specbed {

struct SweepConfig {
  // Every run-config key. base.methods holds the knob-expanded (not yet resolved) methods.
  RunConfig base;
  // The `methods` entries as written, normalised to {"name": ..., "knobs": {...}} with knob
  // values unexpanded (lists and range strings kept).
  std::vector<nlohmann::json> method_entries;
  int64_t repeats = 1;
  std::vector<int64_t> batch_sizes = {1};
  std::vector<nlohmann::json> exclude, only;  // matchers (see MatchesCase)
  nlohmann::json paper;                       // null when absent; copied into every case
  std::string source;                         // file the config came from (named in errors)

  // The sweep as written (methods unexpanded), for runs.config_json.
  nlohmann::json ToJson() const;
};

// Parses a sweep (or plain run) config; errors name `source` and the key.
SweepConfig ParseSweepConfig(const nlohmann::json& j, const std::string& source);
// Reads a run or sweep config file: ResolveConfigPaths, then ParseSweepConfig.
SweepConfig LoadSweepConfig(const std::string& path);
// Resolves the relative *input* paths of a run or sweep config read from `config_path`, in place:
// each is tried in the config file's folder, then in the SpecBed home, and kept as written when
// neither holds it (a registry name) or when the working directory already names the same file.
// Inputs: `targets` (a model's tokenizer is found beside its checkpoint, so it follows), dataset
// names, the method knobs the registry flags as paths (MethodKnob::drafter_family: drafter, head,
// predictor, policy), `paper.reference` (stored absolute when found: the report reads it later),
// and the same fields in `exclude`/`only` matchers so they still match. Outputs (`output`, knobs
// such as specblock+bandit's `log`) stay relative to the working directory.
void ResolveConfigPaths(nlohmann::json& config, const std::string& config_path);
// A plain run config seen as a sweep (no lists, repeats 1, batch [1]).
SweepConfig SweepFromRunConfig(const RunConfig& config);

// Expands one knob range string: "A-B*F" = A, A*F, A*F^2, ... <= B (A > 0, F > 1);
// "A-B+S" = A, A+S, ... <= B (S > 0); "A-B" = "A-B+1". Integers give integers, otherwise numbers.
// A bad string fails naming `where` and the expected syntax.
std::vector<nlohmann::json> ParseKnobRange(const std::string& text, const std::string& where);
// True for strings that are meant as ranges (start with a digit and contain a '-'); other
// strings (model names, paths) are plain values.
bool LooksLikeKnobRange(const std::string& text);

struct SweepExpansion {
  std::vector<CaseConfig> cases;   // deterministic order, knobs resolved, keys unique
  std::vector<std::string> notes;  // skipped / dropped combinations, one line each
};

// Expands `config` into cases: for repeat, target, dataset, temperature, seed, batch size, method
// entry, knob combination. Unknown methods, knobs or matcher fields fail.
SweepExpansion ExpandSweep(const SweepConfig& config, const MethodRegistry& methods);

// True when every field given in `matcher` matches `c` (knobs: subset of c.method.knobs; a list
// value matches any of its elements).
bool MatchesCase(const nlohmann::json& matcher, const CaseConfig& c);

// The cases of shard `index` of `count`: a case goes to shard Fnv1a64(Key()) % count, so every
// case lands in exactly one shard whatever the order or subset of cases. Order is kept.
std::vector<CaseConfig> ShardCases(const std::vector<CaseConfig>& cases, int64_t index,
                                   int64_t count);

}  // namespace specbed
