// Sweep files (`specbed sweep FILE`, also accepted by `specbed run`) as parsed, before expansion:
// a run config (every key keeps its meaning) whose method knobs may be lists or range strings
// ("16-256*2", "1-7+2") crossed within each method entry, plus `repeats`, `batch_sizes`,
// `exclude` / `only` matchers and a pass-through `paper` object. Parsing needs no method registry
// (hence no LibTorch: this is part of the fuzzed specbed_run_config library); expanding into
// resolved cases does (harness/runner/sweep.h).
// Checked by: tests/runner/sweep_config_test.cpp and tests/engine/sweep_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/runner/run_config.h"

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
// A plain run config seen as a sweep (no lists, repeats 1, batch [1]).
SweepConfig SweepFromRunConfig(const RunConfig& config);

// The knobs of method `method` whose values name input files (the method registry's
// MethodKnob::drafter_family knobs: drafter, head, predictor, policy); empty for an unknown
// method; "" = those of every method.
using InputPathKnobs = std::function<std::vector<std::string>(const std::string& method)>;
// Resolves the relative *input* paths of a run/sweep config object in place: each is tried in the
// folder of `config_path`, then in the SpecBed home, and kept as written when neither holds it (a
// registry name) or when the working directory already names the same file (configs/README.md).
// Inputs: `targets` (a model's tokenizer is found beside its checkpoint, so it follows), dataset
// names, the methods' `path_knobs`, `paper.reference` (stored absolute when found: the report
// reads it later), and the same fields in `exclude`/`only` matchers so they still match. Outputs
// (`output`, knobs such as specblock+bandit's `log`) stay relative to the working directory.
void ResolveConfigPaths(nlohmann::json& config, const std::string& config_path,
                        const InputPathKnobs& path_knobs);
// Reads, path-resolves and parses a sweep file (harness/runner/sweep.h has the overload that takes
// the path knobs from the builtin methods).
SweepConfig LoadSweepConfig(const std::string& path, const InputPathKnobs& path_knobs);

// Expands one knob range string: "A-B*F" = A, A*F, A*F^2, ... <= B (A > 0, F > 1);
// "A-B+S" = A, A+S, ... <= B (S > 0); "A-B" = "A-B+1". Integers give integers, otherwise numbers.
// A bad string fails naming `where` and the expected syntax.
std::vector<nlohmann::json> ParseKnobRange(const std::string& text, const std::string& where);
// True for strings that are meant as ranges (start with a digit and contain a '-'); other
// strings (model names, paths) are plain values.
bool LooksLikeKnobRange(const std::string& text);

// True when every field given in `matcher` matches `c` (knobs: subset of c.method.knobs; a list
// value matches any of its elements).
bool MatchesCase(const nlohmann::json& matcher, const CaseConfig& c);

}  // namespace specbed
