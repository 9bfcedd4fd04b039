// Sweep-file parsing without the method registry (so without LibTorch, hence fuzzed by
// tests/fuzz/fuzz_sweep_config.cpp and sanitized): knob lists and range strings, repeats, batch
// sizes, exclude/only matchers, paper, config-relative input paths (see sweep_config.h).
// Checked by: tests/runner/sweep_config_test.cpp and tests/engine/sweep_test.cpp.
#include "harness/runner/sweep_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "base/error.h"
#include "base/json_read.h"
#include "base/names.h"
#include "base/paths.h"

namespace specbed {
namespace {

using Json = nlohmann::json;

const std::vector<std::string> kSweepKeys = {"repeats", "batch_sizes", "exclude", "only", "paper"};
const std::vector<std::string> kMatcherKeys = {"method", "knobs",      "temperature", "dataset",
                                               "target", "batch_size", "seed",        "repeat"};
// A range may not expand to more values than this (a typo like "1-1000000+1" fails early).
constexpr int64_t kMaxRangeValues = 10000;

std::string Shown(const Json& j) {
  std::string s = j.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// Parses an unsigned decimal number ("16", "0.5") at text[*pos]; false when there is none.
bool ParseNumberToken(const std::string& text, size_t* pos, double* value, bool* integral) {
  const size_t start = *pos;
  size_t p = start;
  bool digits = false, dot = false;
  while (p < text.size() && (std::isdigit(static_cast<unsigned char>(text[p])) || text[p] == '.')) {
    if (text[p] == '.') {
      if (dot) break;  // "1.2.3": the number ends at the second '.'
      dot = true;
    } else {
      digits = true;
    }
    ++p;
  }
  if (!digits) return false;
  *value = std::strtod(text.substr(start, p - start).c_str(), nullptr);
  *integral = !dot;
  *pos = p;
  return true;
}

// A double rounded to 12 significant digits, so 0.1 + 2 * 0.1 reads back as 0.3.
double Tidy(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.12g", v);
  return std::strtod(buf, nullptr);
}

// A knob value as written: a scalar, a range string or a list of those -> the values to cross.
std::vector<Json> ExpandKnobValue(const Json& v, const std::string& where) {
  auto scalar = [&](const Json& e, const std::string& at) -> std::vector<Json> {
    if (e.is_string() && LooksLikeKnobRange(e.get<std::string>()))
      return ParseKnobRange(e.get<std::string>(), at);
    SPECBED_CHECK(!e.is_array() && !e.is_object() && !e.is_null(), at,
                  ": a knob value must be a number, string or boolean (or a list / range of them), "
                  "got ",
                  Shown(e));
    return {e};
  };
  if (!v.is_array()) return scalar(v, where);
  SPECBED_CHECK(!v.empty(), where, ": a knob list must not be empty");
  std::vector<Json> out;
  for (size_t i = 0; i < v.size(); ++i) {
    for (Json& e : scalar(v[i], StrCat(where, "[", i, "]"))) out.push_back(std::move(e));
  }
  return out;
}

// Normalises one `methods` entry to {"name", "knobs"} (knob values as written).
Json NormaliseMethodEntry(const Json& m, const std::string& where) {
  if (m.is_string()) return {{"name", m.get<std::string>()}, {"knobs", Json::object()}};
  SPECBED_CHECK(m.is_object() && m.contains("name"), where,
                ": a method must be a name or {\"name\", \"knobs\"}, got ", Shown(m));
  Json out = {{"name", nullptr}, {"knobs", Json::object()}};
  for (auto it = m.begin(); it != m.end(); ++it) {
    if (it.key() == "name") {
      SPECBED_CHECK(it.value().is_string(), where, ".name must be a string, got ",
                    Shown(it.value()));
      out["name"] = it.value();
    } else if (it.key() == "knobs") {
      SPECBED_CHECK(it.value().is_object(), where, ".knobs must be an object, got ",
                    Shown(it.value()));
      out["knobs"] = it.value();
    } else {
      FailUnknownName("key", it.key(), {"name", "knobs"}, where);
    }
  }
  return out;
}

// Every knob combination of a normalised entry (cartesian, first knob outermost).
std::vector<MethodSpec> ExpandMethodEntry(const Json& entry, const std::string& where) {
  std::vector<MethodSpec> out = {{entry["name"].get<std::string>(), Json::object()}};
  const Json& knobs = entry["knobs"];
  for (auto it = knobs.begin(); it != knobs.end(); ++it) {
    const std::vector<Json> values =
        ExpandKnobValue(it.value(), StrCat(where, ".knobs.", it.key()));
    std::vector<MethodSpec> next;
    for (const MethodSpec& spec : out) {
      for (const Json& v : values) {
        MethodSpec s = spec;
        s.knobs[it.key()] = v;
        next.push_back(std::move(s));
      }
    }
    out = std::move(next);
  }
  return out;
}

// Checks one exclude/only matcher's fields and value types.
void CheckMatcher(const Json& m, const std::string& where) {
  SPECBED_CHECK(m.is_object(), where, " must be an object like {\"method\": \"sps\", \"knobs\": ",
                "{\"gamma\": 4}}, got ", Shown(m));
  SPECBED_CHECK(!m.empty(), where, " must name at least one field (one of ",
                Join(kMatcherKeys, ", "), ")");
  for (auto it = m.begin(); it != m.end(); ++it) {
    const std::string& k = it.key();
    if (std::find(kMatcherKeys.begin(), kMatcherKeys.end(), k) == kMatcherKeys.end())
      FailUnknownName("matcher field", k, kMatcherKeys, where);
    const std::string at = where + "." + k;
    const Json& v = it.value();
    auto each = [&](auto&& check) {
      if (v.is_array()) {
        SPECBED_CHECK(!v.empty(), at, ": a list of alternatives must not be empty");
        for (const auto& e : v) check(e);
      } else {
        check(v);
      }
    };
    if (k == "knobs") {
      SPECBED_CHECK(v.is_object(), at, " must be an object of knob values, got ", Shown(v));
    } else if (k == "method" || k == "dataset" || k == "target") {
      each([&](const Json& e) {
        SPECBED_CHECK(e.is_string(), at, " must be a string or a list of strings, got ", Shown(v));
      });
    } else if (k == "temperature") {
      each([&](const Json& e) {
        SPECBED_CHECK(e.is_number(), at, " must be a number or a list of numbers, got ", Shown(v));
      });
    } else {
      each([&](const Json& e) {
        SPECBED_CHECK(e.is_number_integer(), at, " must be an integer or a list of integers, got ",
                      Shown(v));
      });
    }
  }
}

// True when `have` equals `want` or one of its elements (numbers compared as numbers).
bool ValueMatches(const Json& want, const Json& have) {
  if (want.is_array()) {
    for (const auto& w : want)
      if (ValueMatches(w, have)) return true;
    return false;
  }
  if (want.is_number() && have.is_number())
    return std::fabs(want.get<double>() - have.get<double>()) <= 1e-9;
  return want == have;
}

// ---- Config-relative input paths ----------------------------------------------------------------

// A relative input path written in a config: tried in the config file's folder, then in the
// SpecBed home (SpecBedHome). Kept as written when neither holds it (a registry name such as
// "stories260K-draft", or a missing path that then fails with its own message), and when the
// found file is the one the text already names from the working directory (so the case keys of
// runs started from the SpecBed tree do not change). `absolute`: a path found in the config's
// folder or the home is returned absolute (for paths read later from another directory).
std::string ResolveInputPath(const std::string& value, const std::filesystem::path& config_dir,
                             bool absolute = false) {
  namespace fs = std::filesystem;
  if (value.empty() || value == "auto") return value;
  const fs::path given(value);
  if (given.is_absolute()) return value;
  std::error_code ec;
  for (const fs::path& base : {config_dir, fs::path(SpecBedHome())}) {
    const fs::path candidate = base / given;
    if (!fs::exists(candidate, ec)) continue;
    if (fs::exists(given, ec) && fs::equivalent(given, candidate, ec)) return value;
    const fs::path found = absolute ? fs::absolute(candidate, ec) : candidate;
    return found.lexically_normal().string();
  }
  return value;
}

void ResolveStrings(Json& v, const std::filesystem::path& dir) {
  if (v.is_string()) {
    v = ResolveInputPath(v.get<std::string>(), dir);
  } else if (v.is_array()) {
    for (Json& e : v) {
      if (e.is_string()) e = ResolveInputPath(e.get<std::string>(), dir);
    }
  }
}

}  // namespace

void ResolveConfigPaths(Json& config, const std::string& config_path,
                        const InputPathKnobs& path_knobs) {
  if (!config.is_object()) return;
  std::filesystem::path dir = std::filesystem::path(config_path).parent_path();
  if (dir.empty()) dir = ".";
  if (config.contains("targets")) ResolveStrings(config["targets"], dir);
  if (config.contains("datasets") && config["datasets"].is_array()) {
    for (Json& d : config["datasets"]) {
      if (d.is_string()) {
        ResolveStrings(d, dir);
      } else if (d.is_object() && d.contains("name")) {
        ResolveStrings(d["name"], dir);
      }
    }
  }
  // The paper reference file is read later by `specbed report`, maybe from another directory:
  // found in the config's folder or the home, it is stored absolute.
  if (config.contains("paper") && config["paper"].is_object() &&
      config["paper"].contains("reference") && config["paper"]["reference"].is_string()) {
    Json& ref = config["paper"]["reference"];
    ref = ResolveInputPath(ref.get<std::string>(), dir, /*absolute=*/true);
  }
  if (config.contains("methods") && config["methods"].is_array()) {
    for (Json& m : config["methods"]) {
      if (!m.is_object() || !m.contains("name") || !m["name"].is_string() || !m.contains("knobs") ||
          !m["knobs"].is_object()) {
        continue;
      }
      for (const std::string& k : path_knobs(m["name"].get<std::string>())) {
        if (m["knobs"].contains(k)) ResolveStrings(m["knobs"][k], dir);
      }
    }
  }
  // exclude/only matchers compare against the resolved values, so they resolve the same way:
  // target, dataset, and the path knobs of the methods they name (of every method if none:
  // path_knobs("")).
  for (const char* key : {"exclude", "only"}) {
    if (!config.contains(key) || !config[key].is_array()) continue;
    for (Json& matcher : config[key]) {
      if (!matcher.is_object()) continue;
      if (matcher.contains("target")) ResolveStrings(matcher["target"], dir);
      if (matcher.contains("dataset")) ResolveStrings(matcher["dataset"], dir);
      if (!matcher.contains("knobs") || !matcher["knobs"].is_object()) continue;
      std::vector<std::string> methods;
      if (matcher.contains("method") && matcher["method"].is_string()) {
        methods = {matcher["method"].get<std::string>()};
      } else if (matcher.contains("method") && matcher["method"].is_array()) {
        for (const Json& m : matcher["method"]) {
          if (m.is_string()) methods.push_back(m.get<std::string>());
        }
      } else {
        methods = {""};
      }
      std::set<std::string> knobs;
      for (const std::string& m : methods) {
        for (const std::string& k : path_knobs(m)) knobs.insert(k);
      }
      for (const std::string& k : knobs) {
        if (matcher["knobs"].contains(k)) ResolveStrings(matcher["knobs"][k], dir);
      }
    }
  }
}

bool LooksLikeKnobRange(const std::string& text) {
  return !text.empty() && std::isdigit(static_cast<unsigned char>(text[0])) &&
         text.find('-', 1) != std::string::npos;
}

std::vector<Json> ParseKnobRange(const std::string& text, const std::string& where) {
  auto bad = [&](const std::string& why) {
    Fail(where, ": bad range \"", text, "\": ", why,
         "; expected \"START-END*FACTOR\" (geometric, e.g. \"16-256*2\" = 16, 32, ..., 256) or "
         "\"START-END+STEP\" (arithmetic, e.g. \"1-7+2\" = 1, 3, 5, 7)");
  };
  size_t pos = 0;
  double start = 0, end = 0, step = 1;
  bool start_int = true, end_int = true, step_int = true;
  if (!ParseNumberToken(text, &pos, &start, &start_int)) bad("it must start with a number");
  if (pos >= text.size() || text[pos] != '-') bad("expected '-' after the start");
  ++pos;
  if (!ParseNumberToken(text, &pos, &end, &end_int)) bad("expected a number after '-'");
  char op = '+';
  if (pos < text.size()) {
    op = text[pos];
    if (op != '*' && op != '+') bad(StrCat("unexpected '", op, "' after the end"));
    ++pos;
    if (!ParseNumberToken(text, &pos, &step, &step_int))
      bad(StrCat("expected a number after '", op, "'"));
    if (pos != text.size())
      bad(StrCat("unexpected text after the ", op == '*' ? "factor" : "step"));
  }
  if (end < start) bad("the end is smaller than the start");
  if (op == '+' && step <= 0) bad("the step must be > 0");
  if (op == '*' && start <= 0) bad("a geometric range must start above 0");
  if (op == '*' && step <= 1) bad("the factor must be > 1");
  const bool integral = start_int && end_int && step_int;
  std::vector<Json> out;
  for (int64_t i = 0;; ++i) {
    if (i >= kMaxRangeValues) bad(StrCat("it has more than ", kMaxRangeValues, " values"));
    double v;
    if (op == '+') {
      v = start + static_cast<double>(i) * step;
      if (v > end + 1e-9 * step) break;
    } else {
      v = start * std::pow(step, static_cast<double>(i));
      if (v > end * (1 + 1e-12)) break;
    }
    if (integral) {
      out.push_back(static_cast<int64_t>(std::llround(v)));
    } else {
      out.push_back(Tidy(v));
    }
  }
  return out;
}

Json SweepConfig::ToJson() const {
  Json j = base.ToJson();
  j["methods"] = method_entries;
  j["repeats"] = repeats;
  j["batch_sizes"] = batch_sizes;
  j["exclude"] = exclude;
  j["only"] = only;
  if (!paper.is_null()) j["paper"] = paper;
  return j;
}

SweepConfig ParseSweepConfig(const Json& j, const std::string& source) {
  SPECBED_CHECK(j.is_object(), source, ": a run or sweep config must be a JSON object");
  SweepConfig c;
  c.source = source;
  Json run_part = Json::object();
  const Json* methods = nullptr;
  std::vector<std::string> known = RunConfigKeys();
  known.insert(known.end(), kSweepKeys.begin(), kSweepKeys.end());
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const Json& v = it.value();
    if (key == "methods") {
      methods = &v;
    } else if (key == "repeats") {
      SPECBED_CHECK(v.is_number_integer() && v.get<int64_t>() >= 1, source,
                    ": key 'repeats' must be an integer >= 1, got ", Shown(v));
      c.repeats = v.get<int64_t>();
    } else if (key == "batch_sizes") {
      SPECBED_CHECK(v.is_array() && !v.empty(), source,
                    ": key 'batch_sizes' must be a non-empty array of integers >= 1, got ",
                    Shown(v));
      c.batch_sizes.clear();
      for (const auto& b : v) {
        SPECBED_CHECK(b.is_number_integer() && b.get<int64_t>() >= 1, source,
                      ": key 'batch_sizes' must hold integers >= 1, got ", Shown(b));
        c.batch_sizes.push_back(b.get<int64_t>());
      }
    } else if (key == "exclude" || key == "only") {
      SPECBED_CHECK(v.is_array(), source, ": key '", key, "' must be an array of matchers, got ",
                    Shown(v));
      for (size_t i = 0; i < v.size(); ++i)
        CheckMatcher(v[i], StrCat(source, ": ", key, "[", i, "]"));
      (key == "exclude" ? c.exclude : c.only) = v.get<std::vector<Json>>();
    } else if (key == "paper") {
      SPECBED_CHECK(v.is_object(), source, ": key 'paper' must be an object, got ", Shown(v));
      c.paper = v;
    } else if (std::find(known.begin(), known.end(), key) != known.end()) {
      run_part[key] = v;
    } else {
      FailUnknownName("key", key, known, "config " + source);
    }
  }
  c.base = ParseRunConfig(run_part, source);
  if (methods != nullptr) {
    SPECBED_CHECK(methods->is_array() && !methods->empty(), source,
                  ": key 'methods' must be a non-empty array of method names or {name, knobs}, "
                  "got ",
                  Shown(*methods));
    c.base.methods.clear();
    for (size_t i = 0; i < methods->size(); ++i) {
      const std::string where = StrCat(source, ": methods[", i, "]");
      c.method_entries.push_back(NormaliseMethodEntry((*methods)[i], where));
      for (MethodSpec& spec : ExpandMethodEntry(c.method_entries.back(), where))
        c.base.methods.push_back(std::move(spec));
    }
  } else {
    for (const MethodSpec& m : c.base.methods)
      c.method_entries.push_back({{"name", m.name}, {"knobs", m.knobs}});
  }
  return c;
}

SweepConfig LoadSweepConfig(const std::string& path, const InputPathKnobs& path_knobs) {
  JsonParseOptions options;
  options.expected = "a sweep config object";
  Json json = ReadJsonFile(path, options);
  ResolveConfigPaths(json, path, path_knobs);
  return WithJsonContext(path, [&] { return ParseSweepConfig(json, path); });
}

SweepConfig SweepFromRunConfig(const RunConfig& config) {
  SweepConfig c;
  c.base = config;
  for (const MethodSpec& m : config.methods)
    c.method_entries.push_back({{"name", m.name}, {"knobs", m.knobs}});
  return c;
}

bool MatchesCase(const Json& matcher, const CaseConfig& c) {
  for (auto it = matcher.begin(); it != matcher.end(); ++it) {
    const std::string& k = it.key();
    const Json& want = it.value();
    if (k == "method") {
      if (!ValueMatches(want, c.method.name)) return false;
    } else if (k == "target") {
      if (!ValueMatches(want, c.target)) return false;
    } else if (k == "dataset") {
      if (!ValueMatches(want, c.dataset.name)) return false;
    } else if (k == "temperature") {
      if (!ValueMatches(want, c.temperature)) return false;
    } else if (k == "seed") {
      if (!ValueMatches(want, c.seed)) return false;
    } else if (k == "batch_size") {
      if (!ValueMatches(want, c.batch_size)) return false;
    } else if (k == "repeat") {
      if (!ValueMatches(want, c.repeat)) return false;
    } else if (k == "knobs") {
      for (auto kit = want.begin(); kit != want.end(); ++kit) {
        if (!c.method.knobs.contains(kit.key())) return false;
        if (!ValueMatches(kit.value(), c.method.knobs[kit.key()])) return false;
      }
    } else {
      FailUnknownName("matcher field", k, kMatcherKeys);
    }
  }
  return true;
}

}  // namespace specbed
