// The run configuration (`specbed run CONFIG.json`) and its expansion into cases:
// targets x methods x datasets x temperatures x seeds. Every key is checked: unknown keys, wrong
// types and impossible values fail naming the file and the key.
// Checked by: tests/engine/run_config_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace specbed {

struct MethodSpec {
  std::string name;
  nlohmann::json knobs = nlohmann::json::object();  // resolved (defaults filled) by the runner
};

struct DatasetSpec {
  std::string name;  // registry name or a path to a prompt file
  int64_t limit = -1;
  std::vector<std::string> categories;
};

// The decode settings a run config gives all its cases, and each case carries (CaseConfig::ToJson
// says which are part of a case's key).
struct DecodeSettings {
  double top_p = 1.0;
  int64_t top_k = 0;
  int64_t max_new_tokens = 128;
  std::string dtype = "float32";
  // "cpu" | "cuda" | "cuda:N": where the target and the drafters run (models/device.h). Part of a
  // case's key and of its ToJson() only when not "cpu", so cases of configs written before
  // devices keep their keys and `compare` matches them.
  std::string device = "cpu";
  int64_t threads = 1;
  std::vector<std::string> stop_strings;
  std::string chat_template;  // "" = the model's default
  std::string system_prompt;  // "" = none
  // Synthetic-acceptance mode (measuring system overhead apart from draft quality; NOT a real
  // measurement): forced per-position acceptance probabilities for every speculative case
  // (TreeVerifier::SetSyntheticAcceptance). Empty = off. Flagged in results and reports; part of
  // a case's key when set.
  std::vector<double> synthetic_acceptance;
};

struct RunConfig : DecodeSettings {
  std::string name = "run";
  std::string output = "results/run.db";
  std::vector<std::string> targets = {"stories260K"};
  std::vector<MethodSpec> methods = {{"ar", nlohmann::json::object()}};
  std::vector<DatasetSpec> datasets = {{"stories", -1, {}}};
  std::vector<double> temperatures = {0.0};
  std::vector<uint64_t> seeds = {0};
  int64_t warmup = 1;  // discarded generations of the first prompt before each case
  // How speculative cases are timed against AR: "paired" (AR runs on the same prompt right before
  // or after each answer, alternating the order; speedups use those pairs), "per_case" (the AR
  // case's own timings, measured in its own case), or "auto" = paired when the config has an AR
  // case for the same workload, else per_case (resolved by ResolveTimingModes).
  std::string timing = "auto";

  nlohmann::json ToJson() const;
};

// Parses a config object; `source` (file path) is named in errors.
RunConfig ParseRunConfig(const nlohmann::json& json, const std::string& source);
// Reads a run config file as written: no path resolution (this library has no method registry).
// `specbed run`/`sweep` read configs with LoadSweepConfig (sweep.h), which resolves relative
// input paths against the config's folder and the SpecBed home first (ResolveConfigPaths).
RunConfig LoadRunConfig(const std::string& path);
// "cpu" | "cuda" | "cuda:N" (N: 1 to 3 digits): the device names a config may give (syntax only;
// availability is checked when the case runs, models/device.h).
bool IsDeviceName(const std::string& name);
// The keys ParseRunConfig accepts (sweep files add theirs, harness/runner/sweep.h).
const std::vector<std::string>& RunConfigKeys();

// One unit of work whose results are written in one transaction.
struct CaseConfig : DecodeSettings {
  std::string target;
  MethodSpec method;
  DatasetSpec dataset;
  double temperature = 0.0;
  uint64_t seed = 0;
  // "paired" | "per_case" (resolved; AR cases are always per_case). Part of the key when paired.
  std::string timing = "per_case";
  // Sweeps (harness/runner/sweep.h): repetition index and batch size of the case, and the
  // sweep's pass-through `paper` object (null when none; not part of the key).
  int64_t repeat = 0;
  int64_t batch_size = 1;
  nlohmann::json paper;
  // "I/N" on an AR case that ShardCases placed in shard I of N as the baseline of that shard's
  // method cases (part of the key, so every shard's AR survives `specbed merge`); "" otherwise.
  std::string shard;

  // The AR baseline case (method "ar"): what speedups and exact matches compare against.
  bool IsArBaseline() const { return method.name == "ar"; }

  // The full resolved case config (stored as cases.config_json).
  nlohmann::json ToJson() const;
  // The fields that identify the case: ToJson() without `paper`, and without `repeat` /
  // `batch_size` while they are 0 / 1, so cases of configs written before sweeps keep their keys.
  nlohmann::json IdentityJson() const;
  // Stable hash of IdentityJson(): equal configs resume into the same case.
  std::string Key() const;
  // Short human label: "stories260K ar stories T=0 seed=0" (+ " batch=B", " repeat=R",
  // " shard=I/N").
  std::string Label() const;
};

std::vector<CaseConfig> ExpandCases(const RunConfig& config);

// What an AR case must share with a method case to be its baseline: IdentityJson() without
// method, knobs, repeat, synthetic acceptance, timing and shard (a dumped JSON string).
std::string WorkloadKey(const CaseConfig& c);

// The timing modes RunConfig::timing accepts.
inline constexpr const char* kTimingAuto = "auto";
inline constexpr const char* kTimingPaired = "paired";
inline constexpr const char* kTimingPerCase = "per_case";
// Sets CaseConfig::timing of every case from the config's `mode`: non-speculative cases (per
// `is_speculative(method name)`) are per_case; speculative ones are paired for "paired",
// per_case for "per_case", and for "auto" paired exactly when `cases` hold a non-speculative
// "ar" case of the same workload (everything but method, knobs, repeat, synthetic acceptance).
void ResolveTimingModes(std::vector<CaseConfig>& cases, const std::string& mode,
                        const std::function<bool(const std::string&)>& is_speculative);

}  // namespace specbed
