// The built-in prompt sets (files under datasets/data/, provenance in datasets/data/PROVENANCE.md)
// and DatasetRegistry: lookup, group expansion, and checked loading.
// Checked by: tests/datasets/dataset_test.cpp (each set's count and categories).
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/names.h"
#include "base/paths.h"
#include "datasets/dataset.h"
#include "datasets/dataset_internal.h"

namespace specbed {
namespace {

const std::vector<std::string> kMtBenchCategories = {
    "writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"};

DatasetInfo Set(std::string name, std::string description, std::string file, std::string format,
                int64_t count, std::vector<std::string> categories, bool multi_turn,
                std::string license) {
  DatasetInfo info;
  info.name = std::move(name);
  info.description = std::move(description);
  info.file = std::move(file);
  info.format = std::move(format);
  info.prompt_count = count;
  info.categories = std::move(categories);
  info.multi_turn = multi_turn;
  info.license = std::move(license);
  return info;
}

std::vector<DatasetInfo> BuiltinSets() {
  std::vector<DatasetInfo> sets;
  sets.push_back(Set("mt_bench", "MT-Bench: 80 two-turn chat questions in 8 categories",
                     "datasets/data/mt_bench/question.jsonl", "questions_jsonl", 80,
                     kMtBenchCategories, true, "Apache-2.0"));
  DatasetInfo spec =
      Set("spec_bench",
          "Spec-Bench: 480 prompts in 6 tasks (MT-Bench, WMT14 de-en translation, CNN/DM "
          "summarization, NQ qa, GSM8K math reasoning, DPR rag)",
          "datasets/data/spec_bench/question.jsonl", "questions_jsonl", 480,
          {"mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"}, true,
          "Apache-2.0 (parts: CNN/DM research use, NQ CC BY-SA 3.0, GSM8K MIT, DPR CC BY-NC 4.0)");
  // Spec-Bench's first 80 prompts are MT-Bench with MT-Bench's own categories; Spec-Bench reports
  // them as one task, "mt_bench". Prompt::source_category keeps the original.
  for (const auto& c : kMtBenchCategories) spec.category_groups.emplace_back(c, "mt_bench");
  sets.push_back(std::move(spec));
  sets.push_back(Set("humaneval", "OpenAI HumanEval: 164 Python function-completion prompts",
                     "datasets/data/humaneval/HumanEval.jsonl", "humaneval_jsonl", 164, {}, false,
                     "MIT"));
  sets.push_back(Set("gsm8k", "GSM8K test split: 1319 grade-school math word problems",
                     "datasets/data/gsm8k/test.jsonl", "gsm8k_jsonl", 1319, {}, false, "MIT"));
  sets.push_back(Set("math500", "MATH-500: 500 competition math problems (7 subjects)",
                     "datasets/data/math500/test.jsonl", "math500_jsonl", 500,
                     {"Precalculus", "Intermediate Algebra", "Algebra", "Number Theory",
                      "Prealgebra", "Geometry", "Counting & Probability"},
                     false, "MIT"));
  sets.push_back(Set("eagle_mt_bench", "EAGLE-3 evaluation: MT-Bench (80, two turns)",
                     "datasets/data/eagle_bench/mt_bench/question.jsonl", "questions_jsonl", 80,
                     kMtBenchCategories, true, "Apache-2.0"));
  sets.push_back(Set("eagle_humaneval", "EAGLE-3 evaluation: HumanEval (80 code prompts)",
                     "datasets/data/eagle_bench/humaneval/question.jsonl", "questions_jsonl", 80,
                     {"code"}, false, "Apache-2.0 (HumanEval MIT)"));
  sets.push_back(Set("eagle_gsm8k", "EAGLE-3 evaluation: GSM8K (80 math word problems)",
                     "datasets/data/eagle_bench/gsm8k/question.jsonl", "questions_jsonl", 80,
                     {"math"}, false, "Apache-2.0 (GSM8K MIT)"));
  sets.push_back(Set("eagle_alpaca", "EAGLE-3 evaluation: Alpaca (80 instructions)",
                     "datasets/data/eagle_bench/alpaca/question.jsonl", "questions_jsonl", 80, {},
                     false, "Apache-2.0 (Alpaca data CC BY-NC 4.0: non-commercial)"));
  sets.push_back(Set("eagle_cnndm", "EAGLE-3 evaluation: CNN/DailyMail summarization (80)",
                     "datasets/data/eagle_bench/sum/question.jsonl", "questions_jsonl", 80,
                     {"summarization"}, false, "Apache-2.0 (CNN/DM articles: research use)"));
  sets.push_back(Set("eagle_nq", "EAGLE-3 evaluation: Natural Questions (80 short questions)",
                     "datasets/data/eagle_bench/qa/question.jsonl", "questions_jsonl", 80, {"qa"},
                     false, "Apache-2.0 (NQ CC BY-SA 3.0)"));
  sets.push_back(
      Set("ultrachat", "UltraChat evaluation set: 385 single-turn prompts, 10 classes",
          "datasets/data/ultrachat_eval/ultra_eval.json", "ultrachat_json", 385,
          {"Vicuna", "Commonsense-Easy", "Commonsense-Moderate", "World Knowledge-Easy",
           "World Knowledge-Difficult", "Professional Knowledge-Physics",
           "Professional Knowledge-Biology", "Ability Math", "Ability Reasoning", "Writing"},
          false, "MIT"));
  sets.push_back(Set("stories", "32 TinyStories-style openings for the stories260K model",
                     "datasets/data/stories/prompts.jsonl", "questions_jsonl", 32,
                     {"story", "dialogue"}, false, "MIT (written for SpecBed)"));
  return sets;
}

std::vector<DatasetGroup> BuiltinGroups() {
  return {{"eagle_suite",
           "the six EAGLE-3 evaluation sets (MT-Bench, HumanEval, GSM8K, Alpaca, CNN/DM, NQ)",
           {"eagle_mt_bench", "eagle_humaneval", "eagle_gsm8k", "eagle_alpaca", "eagle_cnndm",
            "eagle_nq"}}};
}

bool Contains(const std::vector<std::string>& list, const std::string& value) {
  for (const auto& item : list) {
    if (item == value) return true;
  }
  return false;
}

}  // namespace

DatasetRegistry::DatasetRegistry(std::vector<DatasetInfo> sets, std::vector<DatasetGroup> groups)
    : sets_(std::move(sets)), groups_(std::move(groups)) {
  std::vector<std::string> names;
  for (const auto& s : sets_) {
    SPECBED_CHECK(!s.name.empty() && !Contains(names, s.name), "dataset registry: set name '",
                  s.name, "' is empty or used twice");
    SPECBED_CHECK(s.prompt_count > 0, "dataset registry: set '", s.name,
                  "' must expect at least one prompt");
    names.push_back(s.name);
  }
  for (const auto& g : groups_) {
    SPECBED_CHECK(!g.name.empty() && !Contains(names, g.name), "dataset registry: group name '",
                  g.name, "' is empty or used twice");
    SPECBED_CHECK(!g.sets.empty(), "dataset registry: group '", g.name, "' has no sets");
    for (const auto& s : g.sets) {
      SPECBED_CHECK(Has(s), "dataset registry: group '", g.name, "' names unknown set '", s, "'");
    }
    names.push_back(g.name);
  }
}

const DatasetRegistry& DatasetRegistry::Builtin() {
  static const DatasetRegistry* registry = new DatasetRegistry(BuiltinSets(), BuiltinGroups());
  return *registry;
}

std::vector<std::string> DatasetRegistry::Names() const {
  std::vector<std::string> names;
  for (const auto& s : sets_) names.push_back(s.name);
  return names;
}

std::vector<std::string> DatasetRegistry::GroupNames() const {
  std::vector<std::string> names;
  for (const auto& g : groups_) names.push_back(g.name);
  return names;
}

bool DatasetRegistry::Has(const std::string& name) const {
  for (const auto& s : sets_) {
    if (s.name == name) return true;
  }
  return false;
}

bool DatasetRegistry::HasGroup(const std::string& name) const {
  for (const auto& g : groups_) {
    if (g.name == name) return true;
  }
  return false;
}

const DatasetInfo& DatasetRegistry::Info(const std::string& name) const {
  for (const auto& s : sets_) {
    if (s.name == name) return s;
  }
  if (HasGroup(name)) {
    Fail("'", name, "' is a dataset group, not a set; its sets: ", Join(Group(name).sets, ", "));
  }
  FailUnknownName("dataset", name, Names());
}

const DatasetGroup& DatasetRegistry::Group(const std::string& name) const {
  for (const auto& g : groups_) {
    if (g.name == name) return g;
  }
  FailUnknownName("dataset group", name, GroupNames());
}

std::vector<std::string> DatasetRegistry::ExpandGroup(const std::string& name) const {
  if (Has(name)) return {name};
  if (HasGroup(name)) return Group(name).sets;
  std::vector<std::string> known = Names();
  for (const auto& g : GroupNames()) known.push_back(g);
  FailUnknownName("dataset", name, known);
}

std::vector<Prompt> DatasetRegistry::Load(const std::string& name,
                                          const DatasetFilter& filter) const {
  const DatasetInfo& info = Info(name);
  const std::string label = "dataset '" + name + "'";
  // Check the filter before reading the file, so a typo fails fast.
  internal::ApplyFilter({}, filter, info.categories, label);
  const std::string path =
      !info.file.empty() && info.file[0] == '/' ? info.file : HomePath(info.file);
  internal::ParsedFile parsed = internal::ParsePromptFile(path, info.format);
  SPECBED_CHECK(static_cast<int64_t>(parsed.prompts.size()) == info.prompt_count, path,
                ": expected ", info.prompt_count, " prompts for ", label, ", found ",
                parsed.prompts.size(), " (the file was edited or truncated)");
  std::vector<bool> seen(info.categories.size(), false);
  for (size_t i = 0; i < parsed.prompts.size(); ++i) {
    Prompt& prompt = parsed.prompts[i];
    for (const auto& group : info.category_groups) {
      if (prompt.category == group.first) {
        prompt.category = group.second;
        break;
      }
    }
    bool known = info.categories.empty() && prompt.category.empty();
    for (size_t c = 0; c < info.categories.size(); ++c) {
      if (info.categories[c] == prompt.category) {
        known = true;
        seen[c] = true;
      }
    }
    SPECBED_CHECK(known, path, ":", parsed.lines[i], ": category '", prompt.source_category,
                  "' is not one of ", label, "'s categories (",
                  info.categories.empty() ? "it has none" : Join(info.categories, ", "),
                  "); the file was edited");
  }
  for (size_t c = 0; c < info.categories.size(); ++c) {
    SPECBED_CHECK(seen[c], path, ": no prompt has category '", info.categories[c], "', which ",
                  label, " should have (the file was edited)");
  }
  return internal::ApplyFilter(std::move(parsed.prompts), filter, info.categories, label);
}

}  // namespace specbed
