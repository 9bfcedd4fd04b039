// Sweep files (`specbed sweep FILE`, also accepted by `specbed run`; the format and its parsing,
// which need no method registry, are in harness/runner/sweep_config.h). ExpandSweep turns a sweep
// into resolved cases in a deterministic order (AR-like methods once per target x dataset x T x
// seed x batch, never per repeat; duplicates dropped); ShardCases splits them between machines by
// a stable hash of the case key, each shard running the AR cases its method cases compare with.
// Checked by: tests/engine/sweep_test.cpp and tests/cli/sweep_cli_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/runner/run_config.h"
#include "harness/runner/sweep_config.h"
#include "methods/method_registry.h"

namespace specbed {

// The input-path knobs of the builtin methods (InputPathKnobs; "" = every method's).
InputPathKnobs BuiltinInputPathKnobs();
// ResolveConfigPaths with the builtin methods' path knobs (as LoadSweepConfig does).
void ResolveConfigPaths(nlohmann::json& config, const std::string& config_path);
// Reads, path-resolves (input-path knobs from the builtin methods) and parses a sweep file.
SweepConfig LoadSweepConfig(const std::string& path);

// Command-line overrides of a sweep file's methods and targets (run/sweep -t/--target and --knob),
// applied to its JSON after path resolution (their paths stay relative to the working directory).
struct SweepOverrides {
  // Replaces "targets"; the `exclude` / `only` entries that name a target (written for the file's
  // own targets) are dropped.
  std::vector<std::string> targets;
  // KEY -> VALUE set in every method entry whose method has knob KEY (a list value sweeps it);
  // a key no method of the file has is an error naming the file and its methods.
  std::vector<std::pair<std::string, nlohmann::json>> knobs;
  bool empty() const { return targets.empty() && knobs.empty(); }
};
SweepConfig LoadSweepConfig(const std::string& path, const SweepOverrides& overrides);

struct SweepExpansion {
  std::vector<CaseConfig> cases;   // deterministic order, knobs resolved, keys unique
  std::vector<std::string> notes;  // skipped / dropped combinations, one line each
};

// Expands `config` into cases: for repeat, target, dataset, temperature, seed, batch size, method
// entry, knob combination. Unknown methods, knobs or matcher fields fail.
SweepExpansion ExpandSweep(const SweepConfig& config, const MethodRegistry& methods);

// The cases of shard `index` of `count`, in sweep order. A method case goes to shard
// Fnv1a64(Key()) % count, so it lands in exactly one shard whatever the order or subset of cases.
// An AR case (CaseConfig::IsArBaseline) goes with its method cases: it runs in every shard that
// holds a method case of its workload (WorkloadKey), tagged CaseConfig::shard = "index/count" so
// each shard's copy has its own key and survives merge; an AR case without method cases goes to
// its own hash's shard. So every speedup and exact match of a sharded sweep compares with an AR
// run on the same machine in the same run. count == 1 returns `cases` unchanged.
std::vector<CaseConfig> ShardCases(const std::vector<CaseConfig>& cases, int64_t index,
                                   int64_t count);

}  // namespace specbed
