// Tests of the paper-table sweeps in configs/papers/: every sweep parses with LoadSweepConfig and
// expands with ExpandSweep against the builtin method registry (methods not registered yet must
// be on the README's "Planned methods" line, and expanding the full sweep must fail naming them);
// every reference file loads with LoadPaperReference, has only the allowed fields, and its rows'
// method, dataset, temperature, target and knobs occur in the sweep's axes. Also: the quickstart
// job (configs/quickstart.json) runs every registered method but the LTD family, and its docs
// (README.md, scripts/quickstart) name exactly those. No model is loaded.
// Checked by: this file (it is the check for configs/papers/).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_read.h"
#include "base/mapped_file.h"
#include "datasets/dataset.h"
#include "harness/runner/sweep.h"
#include "methods/method_registry.h"
#include "reports/paper_reference.h"
#include "tests/engine/builtin_methods.h"

namespace specbed {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;
using testing::BuiltinMethods;

const std::string kPapersDir = std::string(SPECBED_SOURCE_DIR) + "/configs/papers";

std::vector<std::string> SweepFiles() {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(kPapersDir)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json")
      files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The backticked names on the README line starting with "Planned methods:".
std::set<std::string> PlannedMethods(bool* found = nullptr) {
  std::ifstream in(kPapersDir + "/README.md");
  EXPECT_TRUE(in.good()) << "configs/papers/README.md is missing";
  std::string line;
  std::set<std::string> names;
  if (found != nullptr) *found = false;
  while (std::getline(in, line)) {
    if (line.rfind("Planned methods:", 0) != 0) continue;
    if (found != nullptr) *found = true;
    const std::regex name_re("`([^`]+)`");
    for (std::sregex_iterator it(line.begin(), line.end(), name_re), end; it != end; ++it)
      names.insert((*it)[1].str());
  }
  return names;
}

// Names in a matcher's "method" field (a string or a list of strings); empty when absent.
std::vector<std::string> MatcherMethodNames(const Json& matcher) {
  if (!matcher.contains("method")) return {};
  const Json& m = matcher["method"];
  if (m.is_string()) return {m.get<std::string>()};
  return m.get<std::vector<std::string>>();
}

// The sweep JSON with the unregistered methods removed: their method entries go, and matchers
// naming them keep only the registered names (or go, when none is left).
Json WithRegisteredMethodsOnly(const Json& sweep) {
  Json out = sweep;
  Json methods = Json::array();
  for (const Json& m : sweep["methods"]) {
    const std::string name = m.is_string() ? m.get<std::string>() : m["name"].get<std::string>();
    if (BuiltinMethods().Has(name)) methods.push_back(m);
  }
  out["methods"] = methods;
  for (const char* key : {"exclude", "only"}) {
    if (!sweep.contains(key)) continue;
    Json kept = Json::array();
    for (const Json& matcher : sweep[key]) {
      if (!matcher.contains("method")) {
        kept.push_back(matcher);
        continue;
      }
      std::vector<std::string> registered;
      for (const std::string& name : MatcherMethodNames(matcher))
        if (BuiltinMethods().Has(name)) registered.push_back(name);
      if (registered.empty()) continue;
      Json m = matcher;
      m["method"] = registered;
      kept.push_back(m);
    }
    out[key] = kept;
  }
  return out;
}

// Every value a knob can take in a method entry: a list's elements, a range string's values, or
// the single value.
std::vector<Json> KnobValues(const Json& value, const std::string& where) {
  if (value.is_array()) return value.get<std::vector<Json>>();
  if (value.is_string() && LooksLikeKnobRange(value.get<std::string>()))
    return ParseKnobRange(value.get<std::string>(), where);
  return {value};
}

bool SameValue(const Json& a, const Json& b) {
  if (a.is_number() && b.is_number()) return a.get<double>() == b.get<double>();
  return a == b;
}

TEST(PaperConfigs, EverySweepParsesAndExpands) {
  const std::vector<std::string> files = SweepFiles();
  // specblock, jetspec, blockpilot, ltd, specbranch, eagle3, dflash, ddtree.
  ASSERT_GE(files.size(), 8u);
  bool has_line = false;
  const std::set<std::string> planned = PlannedMethods(&has_line);  // may be empty ("none")
  ASSERT_TRUE(has_line) << "configs/papers/README.md has no 'Planned methods:' line";
  for (const std::string& file : files) {
    SCOPED_TRACE(file);
    const SweepConfig sweep = LoadSweepConfig(file);

    // The paper object names an existing reference file and a table.
    ASSERT_TRUE(sweep.paper.is_object());
    ASSERT_TRUE(sweep.paper.contains("reference") && sweep.paper["reference"].is_string());
    ASSERT_TRUE(sweep.paper.contains("table") && sweep.paper["table"].is_string());
    EXPECT_FALSE(sweep.paper["table"].get<std::string>().empty());
    // Relative to the sweep's folder or the SpecBed home: resolved on load (stored absolute).
    EXPECT_TRUE(fs::exists(sweep.paper["reference"].get<std::string>()));

    // The papers' models run on a GPU: the sweep says so (`--device` overrides it).
    EXPECT_EQ(sweep.base.device, "cuda");

    // Every dataset is a SpecBed dataset, so the sweep runs from a plain checkout.
    for (const DatasetSpec& d : sweep.base.datasets)
      EXPECT_TRUE(DatasetRegistry::Builtin().Has(d.name)) << "unknown dataset " << d.name;

    // Every method is registered or planned.
    std::set<std::string> missing;
    for (const Json& entry : sweep.method_entries) {
      const std::string name = entry["name"].get<std::string>();
      if (BuiltinMethods().Has(name)) continue;
      EXPECT_TRUE(planned.count(name) == 1)
          << "method '" << name << "' is neither registered nor on the README's planned line";
      missing.insert(name);
    }

    // The registered part expands (no checkpoint is opened: the paths do not exist here).
    Json raw = ReadJsonFile(file);
    ResolveConfigPaths(raw, file);  // as LoadSweepConfig does
    const SweepConfig registered = ParseSweepConfig(WithRegisteredMethodsOnly(raw), file);
    const SweepExpansion expansion = ExpandSweep(registered, BuiltinMethods());
    EXPECT_FALSE(expansion.cases.empty());
    const std::set<std::string> targets(sweep.base.targets.begin(), sweep.base.targets.end());
    for (const CaseConfig& c : expansion.cases) {
      EXPECT_TRUE(targets.count(c.target) == 1) << c.Label();
      EXPECT_EQ(c.paper, sweep.paper) << c.Label();
    }

    // The full sweep expands when every method is registered, and otherwise fails naming one of
    // the missing methods.
    if (missing.empty()) {
      EXPECT_EQ(ExpandSweep(sweep, BuiltinMethods()).cases.size(), expansion.cases.size());
    } else {
      try {
        ExpandSweep(sweep, BuiltinMethods());
        ADD_FAILURE() << "expanding with unregistered methods did not fail";
      } catch (const Error& e) {
        const std::string message = e.what();
        const bool names_one = std::any_of(missing.begin(), missing.end(), [&](const auto& m) {
          return message.find("'" + m + "'") != std::string::npos ||
                 message.find("\"" + m + "\"") != std::string::npos ||
                 message.find(" " + m) != std::string::npos;
        });
        EXPECT_TRUE(names_one) << "error does not name a missing method: " << message;
      }
    }
  }
}

TEST(PaperConfigs, PairedDrafterSweepsGiveEachTargetOneDrafter) {
  // The sweeps pair drafters with targets through `exclude`: after expansion, every
  // (target, method) pair of the registered methods uses a single value of its drafter knob.
  for (const std::string& file : SweepFiles()) {
    SCOPED_TRACE(file);
    Json raw = ReadJsonFile(file);
    ResolveConfigPaths(raw, file);  // as LoadSweepConfig does
    const SweepConfig registered = ParseSweepConfig(WithRegisteredMethodsOnly(raw), file);
    std::map<std::string, std::set<std::string>> drafters;
    for (const CaseConfig& c : ExpandSweep(registered, BuiltinMethods()).cases) {
      for (const char* knob : {"head", "drafter"}) {
        if (c.method.knobs.contains(knob))
          drafters[c.target + " " + c.method.name].insert(c.method.knobs[knob].dump());
      }
    }
    for (const auto& [pair, values] : drafters)
      EXPECT_EQ(values.size(), 1u) << pair << " runs with " << values.size() << " drafters";
  }
}

TEST(PaperConfigs, ReferenceRowsAreCoveredBySweeps) {
  const std::set<std::string> top_fields = {"paper", "table", "hardware", "notes", "rows"};
  const std::set<std::string> row_fields = {"method",      "knobs",   "target", "dataset",
                                            "temperature", "speedup", "tau"};
  std::set<std::string> used_references;
  for (const std::string& file : SweepFiles()) {
    SCOPED_TRACE(file);
    const SweepConfig sweep = LoadSweepConfig(file);
    const std::string ref_path = sweep.paper["reference"].get<std::string>();  // resolved on load
    used_references.insert(fs::path(ref_path).filename().string());

    // The report's own loader accepts it.
    const PaperReference loaded = LoadPaperReference(ref_path);
    const Json ref = ReadJsonFile(ref_path);
    for (auto it = ref.begin(); it != ref.end(); ++it)
      EXPECT_TRUE(top_fields.count(it.key()) == 1) << "unknown field " << it.key();
    for (const char* key : {"paper", "table", "hardware", "notes"}) {
      ASSERT_TRUE(ref.contains(key) && ref[key].is_string()) << key;
      EXPECT_FALSE(ref[key].get<std::string>().empty()) << key;
    }
    EXPECT_EQ(ref["table"], sweep.paper["table"]);
    ASSERT_TRUE(ref["rows"].is_array());
    ASSERT_EQ(loaded.rows.size(), ref["rows"].size());
    // A file without rows must say why in its notes (BlockPilot quotes only averages).
    if (ref["rows"].empty()) {
      EXPECT_GT(ref["notes"].get<std::string>().size(), 40u);
    }

    // The sweep's axes.
    std::set<std::string> datasets, targets;
    for (const DatasetSpec& d : sweep.base.datasets) datasets.insert(d.name);
    targets.insert(sweep.base.targets.begin(), sweep.base.targets.end());
    std::set<std::string> seen_rows;
    for (size_t i = 0; i < ref["rows"].size(); ++i) {
      const Json& row = ref["rows"][i];
      SCOPED_TRACE("row " + std::to_string(i) + ": " + row.dump());
      for (auto it = row.begin(); it != row.end(); ++it)
        EXPECT_TRUE(row_fields.count(it.key()) == 1) << "unknown field " << it.key();
      ASSERT_TRUE(row.contains("method") && row["method"].is_string());
      ASSERT_TRUE(row.contains("dataset") && row["dataset"].is_string());
      ASSERT_TRUE(row.contains("temperature") && row["temperature"].is_number());
      ASSERT_TRUE(row.contains("speedup") || row.contains("tau"));
      // Speedups in these tables are in (0, 20] and acceptance lengths in [1, 64] (SpecBranch's
      // chunked drafts reach M = 22.5).
      for (const char* key : {"speedup", "tau"}) {
        if (!row.contains(key)) continue;
        ASSERT_TRUE(row[key].is_number()) << key;
        EXPECT_GT(row[key].get<double>(), 0.0) << key;
        EXPECT_LE(row[key].get<double>(), key == std::string("tau") ? 64.0 : 20.0) << key;
      }
      if (row.contains("tau")) {
        EXPECT_GE(row["tau"].get<double>(), 1.0);
      }
      EXPECT_TRUE(datasets.count(row["dataset"].get<std::string>()) == 1);
      const double t = row["temperature"].get<double>();
      EXPECT_TRUE(std::any_of(sweep.base.temperatures.begin(), sweep.base.temperatures.end(),
                              [&](double x) { return x == t; }));
      if (row.contains("target")) {
        EXPECT_TRUE(targets.count(row["target"].get<std::string>()) == 1);
      }
      // The method has an entry, and every knob of the row is one of that entry's values.
      const std::string method = row["method"].get<std::string>();
      bool covered = false;
      for (const Json& entry : sweep.method_entries) {
        if (entry["name"] != method) continue;
        bool all = true;
        if (row.contains("knobs")) {
          for (auto k = row["knobs"].begin(); k != row["knobs"].end() && all; ++k) {
            if (!entry["knobs"].contains(k.key())) {
              all = false;
              break;
            }
            const auto values = KnobValues(entry["knobs"][k.key()], file);
            all = std::any_of(values.begin(), values.end(),
                              [&](const Json& v) { return SameValue(v, k.value()); });
          }
        }
        covered = covered || all;
      }
      EXPECT_TRUE(covered) << "no method entry of the sweep produces this row";
      // No two rows describe the same cell.
      Json key = row;
      key.erase("speedup");
      key.erase("tau");
      EXPECT_TRUE(seen_rows.insert(key.dump()).second) << "duplicate row";
    }
  }
  // Every reference file belongs to a sweep.
  for (const auto& entry : fs::directory_iterator(kPapersDir + "/reference")) {
    EXPECT_TRUE(used_references.count(entry.path().filename().string()) == 1)
        << entry.path() << " is not named by any sweep";
  }
}

// The quickstart runs every registered method except the LTD family (its own job,
// configs/ltd_twin.json), and README.md / scripts/quickstart name each method it runs and each
// one it leaves out; scripts/quickstart builds only the CLI.
TEST(QuickstartConfig, RunsEveryMethodButTheLtdFamilyAsDocumented) {
  const std::string src = SPECBED_SOURCE_DIR;
  const SweepConfig quick = LoadSweepConfig(src + "/configs/quickstart.json");
  const SweepConfig ltd = LoadSweepConfig(src + "/configs/ltd_twin.json");
  std::set<std::string> runs, ltd_runs;
  for (const MethodSpec& m : quick.base.methods) runs.insert(m.name);
  for (const MethodSpec& m : ltd.base.methods) ltd_runs.insert(m.name);
  const std::set<std::string> ltd_family = {
      "ltd",          "eagle3+ddd",       "eagle3+svip", "eagle3+gammatune",
      "eagle3+disco", "eagle3+specdecpp", "eagle3+c2t"};
  const std::string readme = ReadFileToString(src + "/README.md");
  const std::string script = ReadFileToString(src + "/scripts/quickstart");
  for (const std::string& name : BuiltinMethods().Names()) {
    if (ltd_family.count(name)) {
      EXPECT_EQ(runs.count(name), 0u) << name;
      EXPECT_EQ(ltd_runs.count(name), 1u) << name << " is in neither job";
      EXPECT_NE(readme.find(name), std::string::npos) << "README.md does not name " << name;
    } else {
      EXPECT_EQ(runs.count(name), 1u) << name << " is registered but not in the quickstart";
    }
  }
  // Each method the quickstart runs is named (by its display spelling) in README and the script.
  const std::map<std::string, std::string> shown = {{"ar", "AR"},
                                                    {"sps", "SpS"},
                                                    {"sps+osd", "SpS+OSD"},
                                                    {"eagle3", "EAGLE-3"},
                                                    {"eagle3+osd", "EAGLE-3+OSD"},
                                                    {"dflash", "DFlash"},
                                                    {"ddtree", "DDTree"},
                                                    {"jetspec", "JetSpec"},
                                                    {"dflash+blockpilot", "DFlash+BlockPilot"},
                                                    {"pearl", "PEARL"},
                                                    {"specbranch", "SpecBranch"},
                                                    {"specblock", "SpecBlock"},
                                                    {"specblock+osd", "SpecBlock+OSD"},
                                                    {"specblock+bandit", "SpecBlock+bandit"},
                                                    {"ngram", "n-gram"},
                                                    {"suffix", "suffix decoding"},
                                                    {"lookahead", "lookahead decoding"},
                                                    {"recycling", "Token Recycling"},
                                                    {"medusa", "Medusa"}};
  for (const std::string& name : runs) {
    ASSERT_EQ(shown.count(name), 1u) << name << ": add its display name here and to the docs";
    EXPECT_NE(readme.find(shown.at(name)), std::string::npos) << shown.at(name);
    EXPECT_NE(script.find(shown.at(name)), std::string::npos) << shown.at(name);
  }
  EXPECT_NE(script.find("scripts/build.sh specbed\n"), std::string::npos)
      << "scripts/quickstart must build only the specbed binary";
}

}  // namespace
}  // namespace specbed
