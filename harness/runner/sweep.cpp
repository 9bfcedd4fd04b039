// Sweep files: loading with the method registry's path knobs, expansion into resolved cases and
// sharding (see sweep.h; the parsing itself is in sweep_config.cpp, free of LibTorch).
// Checked by: tests/engine/sweep_test.cpp and tests/cli/sweep_cli_test.cpp.
#include "harness/runner/sweep.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include "base/error.h"
#include "base/hash.h"
#include "base/json_read.h"
#include "base/names.h"

namespace specbed {
namespace {

using Json = nlohmann::json;

std::vector<std::string> MatcherMethods(const Json& matcher) {
  std::vector<std::string> out;
  if (!matcher.contains("method")) return out;
  const Json& m = matcher["method"];
  if (m.is_string()) return {m.get<std::string>()};
  for (const auto& e : m) out.push_back(e.get<std::string>());
  return out;
}

// Drops the matchers that name a target (they were written for the file's own targets).
void DropTargetMatchers(Json& config, const char* key) {
  if (!config.contains(key) || !config[key].is_array()) return;
  Json kept = Json::array();
  for (const Json& m : config[key]) {
    if (!m.is_object() || !m.contains("target")) kept.push_back(m);
  }
  config[key] = kept;
}

// Sets knob `key` in every method entry (a name or {"name", "knobs"}) whose method has it.
void SetKnob(Json& config, const std::string& key, const Json& value, const std::string& path,
             const MethodRegistry& registry) {
  std::vector<std::string> names;
  bool set = false;
  if (!config.contains("methods")) config["methods"] = Json::array({"ar"});  // the default
  SPECBED_CHECK(config["methods"].is_array(), path, ": \"methods\" must be a list");
  for (Json& entry : config["methods"]) {
    if (entry.is_string()) entry = Json{{"name", entry}, {"knobs", Json::object()}};
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string()) continue;
    const std::string name = entry["name"].get<std::string>();
    names.push_back(name);
    if (!registry.Has(name)) continue;
    const auto& knobs = registry.Info(name).knobs;
    if (std::none_of(knobs.begin(), knobs.end(),
                     [&](const MethodKnob& k) { return k.name == key; }))
      continue;
    entry["knobs"][key] = value;
    set = true;
  }
  SPECBED_CHECK(set, "--knob ", key, ": no method of ", path, " has a knob '", key,
                "' (its methods: ", Join(names, ", "), "; specbed list methods shows each one's)");
}

}  // namespace

InputPathKnobs BuiltinInputPathKnobs() {
  auto registry = std::make_shared<MethodRegistry>();
  RegisterBuiltinMethods(*registry);
  return [registry](const std::string& method) {
    std::set<std::string> knobs;
    const std::vector<std::string> methods =
        method.empty() ? registry->Names() : std::vector<std::string>{method};
    for (const std::string& m : methods) {
      if (!registry->Has(m)) continue;
      for (const MethodKnob& k : registry->Info(m).knobs) {
        if (!k.drafter_family.empty()) knobs.insert(k.name);
      }
    }
    return std::vector<std::string>(knobs.begin(), knobs.end());
  };
}

void ResolveConfigPaths(Json& config, const std::string& config_path) {
  ResolveConfigPaths(config, config_path, BuiltinInputPathKnobs());
}

SweepConfig LoadSweepConfig(const std::string& path) {
  return LoadSweepConfig(path, BuiltinInputPathKnobs());
}

SweepConfig LoadSweepConfig(const std::string& path, const SweepOverrides& overrides) {
  if (overrides.empty()) return LoadSweepConfig(path);
  JsonParseOptions options;
  options.expected = "a sweep config object";
  Json json = ReadJsonFile(path, options);
  ResolveConfigPaths(json, path);
  if (!overrides.targets.empty()) {
    json["targets"] = overrides.targets;
    DropTargetMatchers(json, "exclude");
    DropTargetMatchers(json, "only");
  }
  if (!overrides.knobs.empty()) {
    MethodRegistry registry;
    RegisterBuiltinMethods(registry);
    for (const auto& [key, value] : overrides.knobs) SetKnob(json, key, value, path, registry);
  }
  return WithJsonContext(path, [&] { return ParseSweepConfig(json, path); });
}

namespace {

// Matchers naming unknown methods or knobs would silently match nothing: fail instead.
void CheckMatchers(const std::vector<Json>& matchers, const char* key, const std::string& prefix,
                   const MethodRegistry& methods) {
  for (size_t i = 0; i < matchers.size(); ++i) {
    const std::string where = StrCat(prefix, key, "[", i, "]");
    for (const std::string& name : MatcherMethods(matchers[i])) {
      if (!methods.Has(name)) FailUnknownName("method", name, methods.Names(), where);
      if (!matchers[i].contains("knobs")) continue;
      std::vector<std::string> knob_names;
      for (const MethodKnob& k : methods.Info(name).knobs) knob_names.push_back(k.name);
      for (auto it = matchers[i]["knobs"].begin(); it != matchers[i]["knobs"].end(); ++it) {
        if (std::find(knob_names.begin(), knob_names.end(), it.key()) == knob_names.end())
          FailUnknownName("knob", it.key(), knob_names, where + ": method '" + name + "'");
      }
    }
  }
}

// Every method of the sweep with its defaults filled and ranges checked (errors name the file).
std::vector<MethodSpec> ResolveMethods(const SweepConfig& config, const MethodRegistry& methods,
                                       const std::string& prefix) {
  std::vector<MethodSpec> resolved;
  for (const MethodSpec& m : config.base.methods) {
    MethodSpec r = m;
    try {
      r.knobs = methods.ResolveKnobs(m.name, m.knobs);
    } catch (const Error& e) {
      Fail(prefix, e.what());
    }
    resolved.push_back(std::move(r));
  }
  return resolved;
}

// One point of the sweep's grid (the loop variables of ExpandSweep).
struct GridPoint {
  std::string target;
  DatasetSpec dataset;
  double temperature = 0;
  uint64_t seed = 0;
  int64_t batch = 1;
  int64_t repeat = 0;
};

// The case of `method` at grid point `p`, with the run-wide settings of config.base; "auto"
// drafters become the target's shipped drafter (its name, in the key).
CaseConfig MakeCase(const SweepConfig& config, const GridPoint& p, const MethodSpec& method,
                    const MethodRegistry& methods, const std::string& prefix) {
  const RunConfig& b = config.base;
  CaseConfig c;
  static_cast<DecodeSettings&>(c) = b;
  c.target = p.target;
  c.method = method;
  try {
    c.method.knobs = methods.ResolveKnobsFor(method.name, method.knobs, p.target);
  } catch (const Error& e) {
    Fail(prefix, e.what());
  }
  // Synthetic acceptance concerns verification: AR (the baseline) stays real.
  if (!methods.Info(method.name).traits.speculative) c.synthetic_acceptance.clear();
  c.dataset = p.dataset;
  c.temperature = p.temperature;
  c.seed = p.seed;
  c.repeat = p.repeat;
  c.batch_size = p.batch;
  c.paper = config.paper;
  return c;
}

struct Candidate {
  CaseConfig c;
  bool speculative;
  bool pending_baseline;  // an AR-like case kept only if a kept case needs it
};

// The sweep's filters (duplicates, `exclude`, `only`) with what each dropped, for the notes.
class CaseFilter {
 public:
  explicit CaseFilter(const SweepConfig& config)
      : config_(config),
        exclude_hits_(config.exclude.size(), 0),
        only_hits_(config.only.size(), 0) {}

  // Appends `c` to `out` unless a filter drops it.
  void Offer(CaseConfig c, bool speculative, std::vector<Candidate>& out) {
    if (!keys_.insert(c.Key()).second) {
      ++duplicates_;
      return;
    }
    bool drop = false;
    for (size_t i = 0; i < config_.exclude.size(); ++i) {
      if (MatchesCase(config_.exclude[i], c)) {
        ++exclude_hits_[i];
        drop = true;
      }
    }
    if (drop) {
      ++excluded_;
      return;
    }
    bool pending = false;
    if (!config_.only.empty()) {
      bool any = false;
      for (size_t i = 0; i < config_.only.size(); ++i) {
        if (MatchesCase(config_.only[i], c)) {
          ++only_hits_[i];
          any = true;
        }
      }
      if (!any && speculative) {
        ++only_dropped_;
        return;
      }
      pending = !any;
    }
    out.push_back({std::move(c), speculative, pending});
  }

  // `only`: a baseline (non-speculative) case stays when a kept speculative case of its workload
  // (WorkloadKey, as paired timing and sharding match them) needs it.
  std::vector<CaseConfig> KeepNeeded(std::vector<Candidate>& candidates) {
    std::set<std::string> needed;
    for (const Candidate& k : candidates) {
      if (k.speculative) needed.insert(WorkloadKey(k.c));
    }
    std::vector<CaseConfig> cases;
    for (Candidate& k : candidates) {
      if (k.pending_baseline && needed.count(WorkloadKey(k.c)) == 0) {
        ++only_dropped_;
        continue;
      }
      cases.push_back(std::move(k.c));
    }
    return cases;
  }

  void AppendNotes(std::vector<std::string>& notes) const {
    if (duplicates_ > 0) {
      notes.push_back(StrCat("dropped ", duplicates_,
                             " duplicate cases (same resolved config as an earlier case)"));
    }
    if (excluded_ > 0) notes.push_back(StrCat("exclude: dropped ", excluded_, " cases"));
    if (only_dropped_ > 0) {
      notes.push_back(StrCat("only: dropped ", only_dropped_, " cases matching no entry"));
    }
    for (size_t i = 0; i < exclude_hits_.size(); ++i) {
      if (exclude_hits_[i] == 0)
        notes.push_back(StrCat("exclude[", i, "] ", config_.exclude[i].dump(), " matched no case"));
    }
    for (size_t i = 0; i < only_hits_.size(); ++i) {
      if (only_hits_[i] == 0)
        notes.push_back(StrCat("only[", i, "] ", config_.only[i].dump(), " matched no case"));
    }
  }

 private:
  const SweepConfig& config_;
  std::set<std::string> keys_;
  int64_t duplicates_ = 0, excluded_ = 0, only_dropped_ = 0;
  std::vector<int64_t> exclude_hits_, only_hits_;
};

// Every grid point of the sweep, in expansion order (repeat, target, dataset, temperature, seed,
// batch).
std::vector<GridPoint> GridPoints(const SweepConfig& config) {
  std::vector<GridPoint> points;
  const RunConfig& b = config.base;
  for (int64_t repeat = 0; repeat < config.repeats; ++repeat) {
    for (const auto& target : b.targets) {
      for (const auto& dataset : b.datasets) {
        for (double temperature : b.temperatures) {
          for (uint64_t seed : b.seeds) {
            for (int64_t batch : config.batch_sizes) {
              points.push_back({target, dataset, temperature, seed, batch, repeat});
            }
          }
        }
      }
    }
  }
  return points;
}

}  // namespace

SweepExpansion ExpandSweep(const SweepConfig& config, const MethodRegistry& methods) {
  // Errors name the sweep file when there is one.
  const std::string prefix = config.source.empty() ? "" : config.source + ": ";
  CheckMatchers(config.exclude, "exclude", prefix, methods);
  CheckMatchers(config.only, "only", prefix, methods);
  const std::vector<MethodSpec> resolved = ResolveMethods(config, methods, prefix);

  std::vector<Candidate> candidates;
  std::map<std::string, int64_t> batch_skipped;  // method -> cases
  CaseFilter filter(config);
  for (const GridPoint& p : GridPoints(config)) {
    for (const MethodSpec& method : resolved) {
      const MethodTraits& traits = methods.Info(method.name).traits;
      if (p.repeat > 0 && !traits.speculative) continue;  // baselines run once
      // `run` and `sweep` decode one request at a time (the runner refuses batch_size > 1):
      // batched serving is `specbed serve` (harness/runner/serve.h), for every method.
      if (p.batch > 1) {
        ++batch_skipped[method.name];
        continue;
      }
      filter.Offer(MakeCase(config, p, method, methods, prefix), traits.speculative, candidates);
    }
  }
  SweepExpansion out;
  out.cases = filter.KeepNeeded(candidates);
  // Before sharding, so every shard pairs the same cases.
  ResolveTimingModes(out.cases, config.base.timing, [&](const std::string& name) {
    return methods.Info(name).traits.speculative;
  });
  for (const auto& [name, n] : batch_skipped) {
    out.notes.push_back(
        StrCat("skipped: method ", name, " at batch > 1 (", n,
               " cases): run and sweep decode one request at a time; batches are specbed serve"));
  }
  filter.AppendNotes(out.notes);
  return out;
}

std::vector<CaseConfig> ShardCases(const std::vector<CaseConfig>& cases, int64_t index,
                                   int64_t count) {
  SPECBED_CHECK(count >= 1, "shard count must be >= 1, got ", count);
  SPECBED_CHECK(index >= 0 && index < count, "shard index must be in [0, ", count - 1, "], got ",
                index);
  if (count == 1) return cases;
  // Each method case's shard, and the workloads whose method cases land in this shard or anywhere.
  std::vector<int64_t> shard_of(cases.size(), -1);
  std::set<std::string> here, anywhere;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string key = cases[i].Key();
    shard_of[i] =
        static_cast<int64_t>(Fnv1a64(key.data(), key.size()) % static_cast<uint64_t>(count));
    if (cases[i].IsArBaseline()) continue;
    const std::string w = WorkloadKey(cases[i]);
    anywhere.insert(w);
    if (shard_of[i] == index) here.insert(w);
  }
  const std::string tag = StrCat(index, "/", count);
  std::vector<CaseConfig> out;
  for (size_t i = 0; i < cases.size(); ++i) {
    const CaseConfig& c = cases[i];
    if (!c.IsArBaseline()) {
      if (shard_of[i] == index) out.push_back(c);
      continue;
    }
    // An AR case runs in every shard that holds a method case of its workload (its speedups and
    // exact matches then come from the same machine and run), else in its own hash's shard. The
    // shard tag is part of its key, so each shard's copy survives `specbed merge`.
    const std::string w = WorkloadKey(c);
    if (here.count(w) > 0 || (anywhere.count(w) == 0 && shard_of[i] == index)) {
      out.push_back(c);
      out.back().shard = tag;
    }
  }
  return out;
}

}  // namespace specbed
