// Run configuration parsing and case expansion.
#include "harness/runner/run_config.h"

#include <cmath>
#include <set>
#include <sstream>

#include "base/error.h"
#include "base/hash.h"
#include "base/json_read.h"
#include "base/knob_ranges.h"
#include "base/mapped_file.h"
#include "base/names.h"
#include "harness/engine/stop_rules.h"

namespace specbed {
namespace {

using Json = nlohmann::json;

const std::vector<std::string> kRunConfigKeys = {
    "name",    "output", "targets",      "methods",        "datasets",      "temperatures",
    "seeds",   "top_p",  "top_k",        "max_new_tokens", "dtype",         "device",
    "threads", "warmup", "stop_strings", "chat_template",  "system_prompt", "synthetic_acceptance",
    "timing"};

[[noreturn]] void TypeError(const std::string& source, const std::string& key, const char* expected,
                            const Json& got) {
  std::string shown = got.dump();
  if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
  Fail(source, ": key '", key, "' must be ", expected, ", got ", shown);
}

std::string GetString(const Json& j, const std::string& source, const std::string& key) {
  if (!j.is_string()) TypeError(source, key, "a string", j);
  return j.get<std::string>();
}

double GetNumber(const Json& j, const std::string& source, const std::string& key) {
  if (!j.is_number()) TypeError(source, key, "a number", j);
  return j.get<double>();
}

int64_t GetInt(const Json& j, const std::string& source, const std::string& key) {
  if (!j.is_number_integer()) TypeError(source, key, "an integer", j);
  return j.get<int64_t>();
}

std::vector<std::string> GetStrings(const Json& j, const std::string& source,
                                    const std::string& key) {
  if (j.is_string()) return {j.get<std::string>()};
  if (!j.is_array()) TypeError(source, key, "a string or an array of strings", j);
  std::vector<std::string> out;
  for (const auto& e : j) out.push_back(GetString(e, source, key + "[]"));
  return out;
}

}  // namespace

bool IsDeviceName(const std::string& name) {
  if (name == "cpu" || name == "cuda") return true;
  const std::string prefix = "cuda:";
  if (name.size() <= prefix.size() || name.size() > prefix.size() + 3) return false;
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  return true;
}

Json RunConfig::ToJson() const {
  Json methods_json = Json::array();
  for (const auto& m : methods) methods_json.push_back({{"name", m.name}, {"knobs", m.knobs}});
  Json datasets_json = Json::array();
  for (const auto& d : datasets) {
    datasets_json.push_back({{"name", d.name}, {"limit", d.limit}, {"categories", d.categories}});
  }
  return {{"name", name},
          {"output", output},
          {"targets", targets},
          {"methods", methods_json},
          {"datasets", datasets_json},
          {"temperatures", temperatures},
          {"seeds", seeds},
          {"top_p", top_p},
          {"top_k", top_k},
          {"max_new_tokens", max_new_tokens},
          {"dtype", dtype},
          {"device", device},
          {"threads", threads},
          {"warmup", warmup},
          {"stop_strings", stop_strings},
          {"chat_template", chat_template},
          {"system_prompt", system_prompt},
          {"synthetic_acceptance", synthetic_acceptance},
          {"timing", timing}};
}

namespace {

MethodSpec ParseMethod(const Json& m, const std::string& source) {
  MethodSpec spec;
  if (m.is_string()) {
    spec.name = m.get<std::string>();
    return spec;
  }
  if (!m.is_object() || !m.contains("name")) {
    TypeError(source, "methods", "an array of method names or {name, knobs}", m);
  }
  spec.name = GetString(m["name"], source, "methods[].name");
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (it.key() == "knobs") {
      if (!it.value().is_object()) TypeError(source, "methods[].knobs", "an object", it.value());
      spec.knobs = it.value();
    } else if (it.key() != "name") {
      FailUnknownName("key", it.key(), {"name", "knobs"}, source + ": methods[]");
    }
  }
  return spec;
}

DatasetSpec ParseDataset(const Json& d, const std::string& source) {
  DatasetSpec spec;
  if (d.is_string()) {
    spec.name = d.get<std::string>();
  } else if (d.is_object() && d.contains("name")) {
    for (auto it = d.begin(); it != d.end(); ++it) {
      if (it.key() == "name") {
        spec.name = GetString(it.value(), source, "datasets[].name");
      } else if (it.key() == "limit") {
        spec.limit = GetInt(it.value(), source, "datasets[].limit");
      } else if (it.key() == "categories") {
        spec.categories = GetStrings(it.value(), source, "datasets[].categories");
      } else {
        FailUnknownName("key", it.key(), {"name", "limit", "categories"}, source + ": datasets[]");
      }
    }
  } else {
    TypeError(source, "datasets", "an array of dataset names or {name, limit, categories}", d);
  }
  SPECBED_CHECK(spec.limit == -1 || spec.limit >= 1, source,
                ": datasets[].limit must be >= 1 (or -1 = all), got ", spec.limit);
  return spec;
}

// Every element of the array `v` (key `key`) through `parse`; `what` describes the array.
template <typename T, typename Parse>
std::vector<T> ParseArray(const Json& v, const std::string& source, const std::string& key,
                          const char* what, Parse parse) {
  if (!v.is_array()) TypeError(source, key, what, v);
  std::vector<T> out;
  for (const auto& e : v) out.push_back(parse(e));
  return out;
}

// The keys whose value is an array; false when `key` is not one of them.
bool ParseArrayKey(RunConfig& c, const std::string& key, const Json& v, const std::string& source) {
  if (key == "targets") {
    c.targets = GetStrings(v, source, key);
  } else if (key == "stop_strings") {
    c.stop_strings = GetStrings(v, source, key);
  } else if (key == "methods") {
    c.methods = ParseArray<MethodSpec>(v, source, key, "an array of method names or {name, knobs}",
                                       [&](const Json& m) { return ParseMethod(m, source); });
  } else if (key == "datasets") {
    c.datasets = ParseArray<DatasetSpec>(v, source, key,
                                         "an array of dataset names or {name, limit, categories}",
                                         [&](const Json& d) { return ParseDataset(d, source); });
  } else if (key == "temperatures") {
    c.temperatures = ParseArray<double>(v, source, key, "an array of numbers", [&](const Json& t) {
      return GetNumber(t, source, key + "[]");
    });
  } else if (key == "seeds") {
    c.seeds = ParseArray<uint64_t>(
        v, source, key, "an array of non-negative integers", [&](const Json& e) {
          const int64_t seed = GetInt(e, source, key + "[]");
          SPECBED_CHECK(seed >= 0, source, ": seeds must be non-negative, got ", seed);
          return static_cast<uint64_t>(seed);
        });
  } else if (key == "synthetic_acceptance") {
    // [] is the default (off), as ToJson writes it: the stored config of a run reads back.
    c.synthetic_acceptance = ParseArray<double>(
        v, source, key, "an array of probabilities (one per draft position; [] = off)",
        [&](const Json& a) {
          const double p = GetNumber(a, source, key + "[]");
          SPECBED_CHECK(p >= 0 && p <= 1, source,
                        ": synthetic_acceptance entries must be in [0, 1], got ", p);
          return p;
        });
  } else {
    return false;
  }
  return true;
}

// The keys whose value is one string or number; false when `key` is not one of them.
bool ParseScalarKey(RunConfig& c, const std::string& key, const Json& v,
                    const std::string& source) {
  std::string* text = key == "name"            ? &c.name
                      : key == "output"        ? &c.output
                      : key == "dtype"         ? &c.dtype
                      : key == "device"        ? &c.device
                      : key == "chat_template" ? &c.chat_template
                      : key == "system_prompt" ? &c.system_prompt
                      : key == "timing"        ? &c.timing
                                               : nullptr;
  int64_t* count = key == "top_k"            ? &c.top_k
                   : key == "max_new_tokens" ? &c.max_new_tokens
                   : key == "threads"        ? &c.threads
                   : key == "warmup"         ? &c.warmup
                                             : nullptr;
  if (text != nullptr) {
    *text = GetString(v, source, key);
  } else if (count != nullptr) {
    *count = GetInt(v, source, key);
  } else if (key == "top_p") {
    c.top_p = GetNumber(v, source, key);
  } else {
    return false;
  }
  return true;
}

// The checks across keys and of ranges, after every key is read.
void CheckRunConfig(const RunConfig& c, const std::string& source) {
  SPECBED_CHECK(!c.targets.empty() && !c.methods.empty() && !c.datasets.empty() &&
                    !c.temperatures.empty() && !c.seeds.empty(),
                source, ": targets, methods, datasets, temperatures and seeds must be non-empty");
  for (double t : c.temperatures) {
    SPECBED_CHECK(t >= 0 && t <= kMaxTemperature, source, ": temperatures must be in [0, ",
                  kMaxTemperature, "], got ", t);
  }
  SPECBED_CHECK(c.top_p > 0 && c.top_p <= 1, source, ": top_p must be in (0, 1], got ", c.top_p);
  SPECBED_CHECK(c.top_k >= 0, source, ": top_k must be >= 0 (0 = off), got ", c.top_k);
  SPECBED_CHECK(c.max_new_tokens >= 1 && c.max_new_tokens <= kMaxNewTokensLimit, source,
                ": max_new_tokens must be in [1, ", kMaxNewTokensLimit, "], got ",
                c.max_new_tokens);
  SPECBED_CHECK(c.threads >= 1 && c.threads <= 256, source, ": threads must be in [1, 256], got ",
                c.threads);
  SPECBED_CHECK(c.warmup >= 0, source, ": warmup must be >= 0, got ", c.warmup);
  SPECBED_CHECK(c.dtype == "float32" || c.dtype == "bfloat16" || c.dtype == "float16", source,
                ": dtype must be \"float32\", \"bfloat16\" or \"float16\", got \"", c.dtype, "\"");
  SPECBED_CHECK(IsDeviceName(c.device), source,
                ": device must be \"cpu\", \"cuda\" or \"cuda:N\", got \"", c.device, "\"");
  SPECBED_CHECK(c.timing == kTimingAuto || c.timing == kTimingPaired || c.timing == kTimingPerCase,
                source, ": timing must be \"auto\", \"paired\" or \"per_case\", got \"", c.timing,
                "\"");
  SPECBED_CHECK(!c.output.empty(), source, ": output must name a database file");
}

}  // namespace

RunConfig ParseRunConfig(const Json& json, const std::string& source) {
  SPECBED_CHECK(json.is_object(), source, ": a run config must be a JSON object");
  RunConfig c;
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (!ParseScalarKey(c, it.key(), it.value(), source) &&
        !ParseArrayKey(c, it.key(), it.value(), source)) {
      FailUnknownName("key", it.key(), kRunConfigKeys, "run config " + source);
    }
  }
  CheckRunConfig(c, source);
  return c;
}

const std::vector<std::string>& RunConfigKeys() {
  return kRunConfigKeys;
}

RunConfig LoadRunConfig(const std::string& path) {
  JsonParseOptions options;
  options.expected = "a run config object";
  const Json json = ReadJsonFile(path, options);
  return WithJsonContext(path, [&] { return ParseRunConfig(json, path); });
}

Json CaseConfig::IdentityJson() const {
  Json j = {{"target", target},
            {"method", method.name},
            {"knobs", method.knobs},
            {"dataset", dataset.name},
            {"limit", dataset.limit},
            {"categories", dataset.categories},
            {"temperature", temperature},
            {"seed", seed},
            {"top_p", top_p},
            {"top_k", top_k},
            {"max_new_tokens", max_new_tokens},
            {"dtype", dtype},
            {"threads", threads},
            {"stop_strings", stop_strings},
            {"chat_template", chat_template},
            {"system_prompt", system_prompt}};
  if (repeat != 0) j["repeat"] = repeat;
  if (batch_size != 1) j["batch_size"] = batch_size;
  if (!synthetic_acceptance.empty()) j["synthetic_acceptance"] = synthetic_acceptance;
  if (timing == kTimingPaired) j["timing"] = timing;
  if (!shard.empty()) j["shard"] = shard;
  if (device != "cpu") j["device"] = device;
  return j;
}

Json CaseConfig::ToJson() const {
  Json j = IdentityJson();
  j["repeat"] = repeat;
  j["batch_size"] = batch_size;
  j["timing"] = timing;
  if (!paper.is_null()) j["paper"] = paper;
  return j;
}

std::string CaseConfig::Key() const {
  return HashString(IdentityJson().dump());
}

std::string CaseConfig::Label() const {
  std::ostringstream out;
  out << target << " " << method.name;
  if (!method.knobs.empty()) out << method.knobs.dump();
  out << " " << dataset.name << " T=" << temperature << " seed=" << seed;
  if (batch_size != 1) out << " batch=" << batch_size;
  if (repeat != 0) out << " repeat=" << repeat;
  if (!synthetic_acceptance.empty()) out << " SYNTHETIC";
  if (timing == kTimingPaired) out << " paired";
  if (!shard.empty()) out << " shard=" << shard;
  if (device != "cpu") out << " device=" << device;
  return out.str();
}

std::vector<CaseConfig> ExpandCases(const RunConfig& config) {
  std::vector<CaseConfig> cases;
  for (const auto& target : config.targets) {
    for (const auto& dataset : config.datasets) {
      for (double temperature : config.temperatures) {
        for (uint64_t seed : config.seeds) {
          for (const auto& method : config.methods) {
            CaseConfig c;
            static_cast<DecodeSettings&>(c) = config;
            c.target = target;
            c.method = method;
            c.dataset = dataset;
            c.temperature = temperature;
            c.seed = seed;
            cases.push_back(std::move(c));
          }
        }
      }
    }
  }
  ResolveTimingModes(cases, config.timing,
                     [](const std::string& method) { return method != "ar"; });
  return cases;
}

std::string WorkloadKey(const CaseConfig& c) {
  Json j = c.IdentityJson();
  for (const char* key : {"method", "knobs", "repeat", "synthetic_acceptance", "timing", "shard"}) {
    j.erase(key);
  }
  return j.dump();
}

void ResolveTimingModes(std::vector<CaseConfig>& cases, const std::string& mode,
                        const std::function<bool(const std::string&)>& is_speculative) {
  SPECBED_CHECK(mode == kTimingAuto || mode == kTimingPaired || mode == kTimingPerCase,
                "timing must be \"auto\", \"paired\" or \"per_case\", got \"", mode, "\"");
  std::set<std::string> with_ar;
  for (CaseConfig& c : cases) {
    c.timing = kTimingPerCase;
    if (c.IsArBaseline() && !is_speculative(c.method.name)) with_ar.insert(WorkloadKey(c));
  }
  for (CaseConfig& c : cases) {
    if (!is_speculative(c.method.name)) continue;
    const bool paired =
        mode == kTimingPaired || (mode == kTimingAuto && with_ar.count(WorkloadKey(c)) > 0);
    if (paired) c.timing = kTimingPaired;
  }
}

}  // namespace specbed
