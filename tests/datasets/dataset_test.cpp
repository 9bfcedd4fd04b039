// Tests for datasets/dataset.h: every shipped set loads with its expected prompt count, turns and
// categories; --limit and category filters; user prompt files; and the error messages for
// malformed, truncated and unknown inputs.
#include "datasets/dataset.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/paths.h"
#include "tests/common/test_util.h"

namespace specbed {
namespace {

using testing::ErrorOf;

// Writes `text` to a fresh file in the test scratch dir and returns its path.
std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = std::string(SPECBED_TEST_TMPDIR) + "/datasets_" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  EXPECT_TRUE(out.good()) << path;
  return path;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::string> CategoriesInOrder(const std::vector<Prompt>& prompts) {
  std::vector<std::string> out;
  for (const auto& p : prompts) {
    bool seen = false;
    for (const auto& c : out) seen = seen || c == p.category;
    if (!seen && !p.category.empty()) out.push_back(p.category);
  }
  return out;
}

std::map<std::string, int> CategoryCounts(const std::vector<Prompt>& prompts) {
  std::map<std::string, int> counts;
  for (const auto& p : prompts) ++counts[p.category];
  return counts;
}

const std::vector<std::string> kMtBenchCategories = {
    "writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"};

TEST(DatasetRegistry, ListsTheBuiltinSetsAndGroup) {
  const auto& registry = DatasetRegistry::Builtin();
  EXPECT_EQ(
      registry.Names(),
      (std::vector<std::string>{"mt_bench", "spec_bench", "humaneval", "gsm8k", "math500",
                                "eagle_mt_bench", "eagle_humaneval", "eagle_gsm8k", "eagle_alpaca",
                                "eagle_cnndm", "eagle_nq", "ultrachat", "stories"}));
  EXPECT_EQ(registry.GroupNames(), std::vector<std::string>{"eagle_suite"});
  EXPECT_TRUE(registry.Has("gsm8k"));
  EXPECT_FALSE(registry.Has("eagle_suite"));
  EXPECT_TRUE(registry.HasGroup("eagle_suite"));
  EXPECT_EQ(registry.Info("spec_bench").file, "datasets/data/spec_bench/question.jsonl");
}

struct Expected {
  std::string name;
  int64_t count;
  std::vector<std::string> categories;
  size_t turns;  // turns per prompt; 0 = mixed
};

TEST(DatasetRegistry, EveryBuiltinSetLoadsWithItsCountCategoriesAndTurns) {
  const std::vector<Expected> expected = {
      {"mt_bench", 80, kMtBenchCategories, 2},
      {"spec_bench",
       480,
       {"mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"},
       0},
      {"humaneval", 164, {}, 1},
      {"gsm8k", 1319, {}, 1},
      {"math500",
       500,
       {"Precalculus", "Intermediate Algebra", "Algebra", "Number Theory", "Prealgebra", "Geometry",
        "Counting & Probability"},
       1},
      {"eagle_mt_bench", 80, kMtBenchCategories, 2},
      {"eagle_humaneval", 80, {"code"}, 1},
      {"eagle_gsm8k", 80, {"math"}, 1},
      {"eagle_alpaca", 80, {}, 1},
      {"eagle_cnndm", 80, {"summarization"}, 1},
      {"eagle_nq", 80, {"qa"}, 1},
      {"ultrachat",
       385,
       {"Vicuna", "Commonsense-Easy", "Commonsense-Moderate", "World Knowledge-Easy",
        "World Knowledge-Difficult", "Professional Knowledge-Physics",
        "Professional Knowledge-Biology", "Ability Math", "Ability Reasoning", "Writing"},
       1},
      {"stories", 32, {"story", "dialogue"}, 1},
  };
  const auto& registry = DatasetRegistry::Builtin();
  ASSERT_EQ(expected.size(), registry.Names().size());
  for (const auto& e : expected) {
    SCOPED_TRACE(e.name);
    const DatasetInfo& info = registry.Info(e.name);
    const std::vector<Prompt> prompts = registry.Load(e.name);
    EXPECT_EQ(static_cast<int64_t>(prompts.size()), e.count);
    EXPECT_EQ(info.prompt_count, e.count);
    EXPECT_EQ(CategoriesInOrder(prompts), e.categories);
    EXPECT_EQ(info.categories, e.categories);
    EXPECT_FALSE(info.license.empty());
    bool any_multi = false;
    std::map<std::string, int> ids;
    for (const auto& p : prompts) {
      ASSERT_FALSE(p.turns.empty());
      if (e.turns != 0) {
        EXPECT_EQ(p.turns.size(), e.turns) << p.id;
      }
      any_multi = any_multi || p.turns.size() > 1;
      for (const auto& t : p.turns) EXPECT_FALSE(t.empty()) << p.id;
      EXPECT_FALSE(p.id.empty());
      EXPECT_EQ(++ids[p.id], 1) << "duplicate id " << p.id;
      if (e.categories.empty()) {
        EXPECT_EQ(p.category, "");
      }
    }
    EXPECT_EQ(info.multi_turn, any_multi);
  }
}

TEST(DatasetRegistry, SpecBenchHasSixTasksOf80AndKeepsMtBenchSubcategories) {
  const auto prompts = LoadDataset("spec_bench");
  ASSERT_EQ(prompts.size(), 480u);
  const auto counts = CategoryCounts(prompts);
  EXPECT_EQ(counts.size(), 6u);
  for (const auto& c : counts) EXPECT_EQ(c.second, 80) << c.first;
  EXPECT_EQ(prompts[0].id, "81");
  EXPECT_EQ(prompts[0].category, "mt_bench");
  EXPECT_EQ(prompts[0].source_category, "writing");
  EXPECT_EQ(prompts[0].turns.size(), 2u);
  EXPECT_EQ(prompts[80].category, "translation");
  EXPECT_EQ(prompts[80].source_category, "translation");
  EXPECT_EQ(prompts[80].turns[0].rfind("Translate German to English:", 0), 0u);
  EXPECT_EQ(prompts[80].reference, "Pawnbrokers shine in Singapore as middle class feel the pinch");
  // rag references are lists of acceptable answers: joined one per line.
  const Prompt& rag = prompts[400];
  EXPECT_EQ(rag.category, "rag");
  ASSERT_EQ(rag.references.size(), 1u);
  EXPECT_NE(rag.references[0].find('\n'), std::string::npos);
  EXPECT_EQ(prompts.back().id, "560");
}

TEST(DatasetRegistry, MtBenchHasTwoTurnsAndPerTurnReferences) {
  const auto prompts = LoadDataset("mt_bench");
  ASSERT_EQ(prompts.size(), 80u);
  for (const auto& c : CategoryCounts(prompts)) EXPECT_EQ(c.second, 10) << c.first;
  int with_reference = 0;
  for (const auto& p : prompts) {
    if (!p.references.empty()) {
      ++with_reference;
      EXPECT_EQ(p.references.size(), 2u) << p.id;
      EXPECT_FALSE(p.reference.empty()) << p.id;
    }
  }
  EXPECT_EQ(with_reference, 39);
  // Question 103: the second turn's reference is empty; `reference` holds the first only.
  const Prompt& q103 = prompts[22];
  ASSERT_EQ(q103.id, "103");
  ASSERT_EQ(q103.references.size(), 2u);
  EXPECT_EQ(q103.references[0], "Thomas may work at a hospital.");
  EXPECT_EQ(q103.references[1], "");
  EXPECT_EQ(q103.reference, "Thomas may work at a hospital.");
}

TEST(DatasetRegistry, HumanEvalGsm8kMathAndUltrachatFields) {
  const auto humaneval = LoadDataset("humaneval");
  EXPECT_EQ(humaneval[0].id, "HumanEval/0");
  EXPECT_EQ(humaneval[0].turns[0].rfind("from typing import List", 0), 0u);
  EXPECT_NE(humaneval[0].reference.find("return"), std::string::npos);
  EXPECT_EQ(humaneval.back().id, "HumanEval/163");

  const auto gsm8k = LoadDataset("gsm8k");
  EXPECT_EQ(gsm8k[0].id, "1");
  EXPECT_EQ(gsm8k.back().id, "1319");
  EXPECT_EQ(gsm8k[0].turns[0].rfind("Janet\xE2\x80\x99s ducks lay 16 eggs", 0), 0u);
  EXPECT_NE(gsm8k[0].reference.find("#### 18"), std::string::npos);

  const auto math = LoadDataset("math500");
  EXPECT_EQ(math[0].id, "test/precalculus/807.json");
  EXPECT_EQ(math[0].category, "Precalculus");
  EXPECT_NE(math[0].reference.find("\\boxed"), std::string::npos);

  const auto ultrachat = LoadDataset("ultrachat");
  EXPECT_EQ(ultrachat[0].id, "1");
  EXPECT_EQ(ultrachat[0].category, "Vicuna");  // " Vicuna " in the file
  EXPECT_EQ(ultrachat[0].turns[0].rfind("Compose an engaging travel blog post", 0), 0u);
}

TEST(DatasetRegistry, StoriesAreShortOpeningsInTwoCategories) {
  const auto prompts = LoadDataset("stories");
  ASSERT_EQ(prompts.size(), 32u);
  const auto counts = CategoryCounts(prompts);
  EXPECT_EQ(counts.at("story"), 24);
  EXPECT_EQ(counts.at("dialogue"), 8);
  EXPECT_EQ(prompts[0].id, "story-01");
  EXPECT_EQ(prompts[31].id, "story-32");
  for (const auto& p : prompts) {
    std::istringstream words(p.turns[0]);
    int n = 0;
    for (std::string w; words >> w;) n += w != "\"";
    EXPECT_GE(n, 5) << p.turns[0];
    EXPECT_LE(n, 15) << p.turns[0];
    if (p.category == "dialogue") {
      EXPECT_EQ(p.turns[0].back(), '"') << p.turns[0];
    }
  }
}

TEST(DatasetRegistry, EagleSuiteExpandsToTheSixEagleSets) {
  const auto& registry = DatasetRegistry::Builtin();
  EXPECT_EQ(registry.ExpandGroup("eagle_suite"),
            (std::vector<std::string>{"eagle_mt_bench", "eagle_humaneval", "eagle_gsm8k",
                                      "eagle_alpaca", "eagle_cnndm", "eagle_nq"}));
  EXPECT_EQ(registry.ExpandGroup("gsm8k"), std::vector<std::string>{"gsm8k"});
  const std::string error = ErrorOf([&] { registry.ExpandGroup("eagle_suit"); });
  EXPECT_NE(error.find("did you mean 'eagle_suite'"), std::string::npos) << error;
  EXPECT_NE(error.find("mt_bench"), std::string::npos) << error;
  EXPECT_NE(ErrorOf([&] { registry.Info("eagle_suite"); }).find("is a dataset group"),
            std::string::npos);
  EXPECT_NE(ErrorOf([] { LoadDataset("eagle_suite"); }).find("eagle_nq"), std::string::npos);
}

TEST(DatasetFilter, LimitTakesTheFirstN) {
  const auto all = LoadDataset("gsm8k");
  const auto five = LoadDataset("gsm8k", {5, {}});
  ASSERT_EQ(five.size(), 5u);
  for (size_t i = 0; i < five.size(); ++i) EXPECT_EQ(five[i].id, all[i].id);
  EXPECT_EQ(LoadDataset("stories", {100, {}}).size(), 32u);
  EXPECT_TRUE(LoadDataset("stories", {0, {}}).empty());
  const std::string error = ErrorOf([] { LoadDataset("stories", {-2, {}}); });
  EXPECT_NE(error.find("limit"), std::string::npos) << error;
}

TEST(DatasetFilter, CategoriesSelectThenLimitApplies) {
  const auto translation = LoadDataset("spec_bench", {-1, {"translation"}});
  ASSERT_EQ(translation.size(), 80u);
  for (const auto& p : translation) EXPECT_EQ(p.category, "translation");
  EXPECT_EQ(translation[0].id, "161");

  const auto two = LoadDataset("spec_bench", {-1, {"qa", "rag"}});
  EXPECT_EQ(two.size(), 160u);
  EXPECT_EQ(CategoryCounts(two), (std::map<std::string, int>{{"qa", 80}, {"rag", 80}}));

  const auto dialogue = LoadDataset("stories", {3, {"dialogue"}});
  ASSERT_EQ(dialogue.size(), 3u);
  EXPECT_EQ(dialogue[0].id, "story-04");
  EXPECT_EQ(dialogue[2].id, "story-12");
  for (const auto& p : dialogue) EXPECT_EQ(p.category, "dialogue");

  const auto algebra = LoadDataset("math500", {-1, {"Counting & Probability"}});
  EXPECT_EQ(algebra.size(), 38u);
}

TEST(DatasetFilter, UnknownCategoryListsTheSetsCategories) {
  std::string error = ErrorOf([] { LoadDataset("spec_bench", {-1, {"translaton"}}); });
  EXPECT_NE(error.find("unknown category 'translaton'"), std::string::npos) << error;
  EXPECT_NE(error.find("did you mean 'translation'"), std::string::npos) << error;
  EXPECT_NE(error.find("mt_bench, translation, summarization, qa, math_reasoning, rag"),
            std::string::npos)
      << error;
  error = ErrorOf([] { LoadDataset("gsm8k", {-1, {"math"}}); });
  EXPECT_NE(error.find("dataset 'gsm8k' has no categories"), std::string::npos) << error;
  // MT-Bench's own categories are regrouped under "mt_bench" in Spec-Bench.
  error = ErrorOf([] { LoadDataset("spec_bench", {-1, {"writing"}}); });
  EXPECT_NE(error.find("unknown category 'writing'"), std::string::npos) << error;
}

TEST(DatasetErrors, UnknownDatasetNameListsKnownNamesAndSuggests) {
  std::string error = ErrorOf([] { LoadDataset("gsm9k"); });
  EXPECT_NE(error.find("unknown dataset 'gsm9k'"), std::string::npos) << error;
  EXPECT_NE(error.find("did you mean 'gsm8k'"), std::string::npos) << error;
  EXPECT_NE(error.find("spec_bench"), std::string::npos) << error;
  EXPECT_NE(error.find(".jsonl"), std::string::npos) << error;
  error = ErrorOf([] { DatasetRegistry::Builtin().Info("mt_bnch"); });
  EXPECT_NE(error.find("did you mean 'mt_bench'"), std::string::npos) << error;
  EXPECT_NE(error.find("stories"), std::string::npos) << error;
  error = ErrorOf([] { LoadDataset("no/such/file.jsonl"); });
  EXPECT_NE(error.find("'no/such/file.jsonl' does not exist"), std::string::npos) << error;
}

TEST(DatasetErrors, MalformedLineNamesFileAndLine) {
  const std::string path = WriteTemp(
      "malformed.jsonl", "{\"turns\": [\"a\"]}\n\n{\"turns\": [\"b\"]}\n{\"turns\": [\"c\"\n");
  const std::string error = ErrorOf([&] { LoadPromptFile(path, "questions_jsonl"); });
  EXPECT_NE(error.find(path + ":4: not valid JSON"), std::string::npos) << error;
}

TEST(DatasetErrors, MissingOrWrongTypedFieldsNameFileLineAndExpectation) {
  struct Case {
    std::string line;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"{\"question_id\": 1}",
       "expected a JSON object with a non-empty \"turns\" array of strings"},
      {"[\"just\", \"strings\"]", "found an array"},
      {"{\"turns\": \"hello\"}", "\"turns\" is a string"},
      {"{\"turns\": []}", "\"turns\" is an empty array"},
      {"{\"turns\": [\"ok\", 7]}", "turn 2 is a number"},
      {"{\"turns\": [\"\"]}", "turn 1 is an empty string"},
      {"{\"prompt\": 3}", "\"prompt\" is a number"},
      {"{\"turns\": [\"x\"], \"category\": 5}", "expected \"category\" to be a string"},
      {"{\"turns\": [\"x\"], \"question_id\": [1]}",
       "expected \"question_id\" to be a string or an integer, found an array"},
      {"{\"turns\": [\"x\"], \"reference\": {\"a\": 1}}", "expected \"reference\" to be a string"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = WriteTemp("field" + std::to_string(i) + ".jsonl",
                                       "{\"text\": \"fine\"}\n" + cases[i].line + "\n");
    const std::string error = ErrorOf([&] { LoadPromptFile(path, "questions_jsonl"); });
    EXPECT_NE(error.find(path + ":2: "), std::string::npos) << error;
    EXPECT_NE(error.find(cases[i].expected), std::string::npos) << error;
  }
  // Format-specific loaders check their own fields.
  std::string path = WriteTemp("gsm_bad.jsonl",
                               "{\"question\": \"q\", \"answer\": \"a\"}\n"
                               "{\"question\": \"q\"}\n");
  std::string error = ErrorOf([&] { LoadPromptFile(path, "gsm8k_jsonl"); });
  EXPECT_NE(error.find(path + ":2: expected a GSM8K JSON object"), std::string::npos) << error;
  path = WriteTemp("he_bad.jsonl", "{\"task_id\": 0, \"prompt\": \"def f():\"}\n");
  error = ErrorOf([&] { LoadPromptFile(path, "humaneval_jsonl"); });
  EXPECT_NE(error.find(path + ":1: expected a HumanEval JSON object"), std::string::npos) << error;
  error = ErrorOf([&] { LoadPromptFile(path, "csv"); });
  EXPECT_NE(error.find("unknown prompt file format 'csv'"), std::string::npos) << error;
}

TEST(DatasetErrors, DuplicateIdsAndEmptyFilesAreRejected) {
  std::string path = WriteTemp("dup.jsonl",
                               "{\"id\": \"a\", \"text\": \"x\"}\n"
                               "{\"id\": \"b\", \"text\": \"y\"}\n"
                               "{\"id\": \"a\", \"text\": \"z\"}\n");
  std::string error = ErrorOf([&] { LoadPromptFile(path, "questions_jsonl"); });
  EXPECT_NE(error.find(path + ":3: duplicate prompt id 'a' (first used on line 1)"),
            std::string::npos)
      << error;
  path = WriteTemp("empty.jsonl", "\n  \n");
  error = ErrorOf([&] { LoadPromptFile(path, "questions_jsonl"); });
  EXPECT_NE(error.find("expected at least one prompt"), std::string::npos) << error;
}

TEST(DatasetErrors, TruncatedOrEditedShippedFileFailsTheRegistryCheck) {
  const std::string text = ReadAll(HomePath("datasets/data/gsm8k/test.jsonl"));
  size_t pos = 0;
  for (int i = 0; i < 100; ++i) pos = text.find('\n', pos) + 1;
  const std::string truncated = WriteTemp("gsm8k_truncated.jsonl", text.substr(0, pos));
  DatasetInfo info = DatasetRegistry::Builtin().Info("gsm8k");
  info.file = truncated;
  DatasetRegistry registry({info}, {});
  std::string error = ErrorOf([&] { registry.Load("gsm8k"); });
  EXPECT_NE(error.find(truncated + ": expected 1319 prompts for dataset 'gsm8k', found 100"),
            std::string::npos)
      << error;

  // A category that is not in the registry entry (file edited).
  std::string mt = ReadAll(HomePath("datasets/data/mt_bench/question.jsonl"));
  const size_t at = mt.find("\"category\": \"roleplay\"");
  ASSERT_NE(at, std::string::npos);
  mt.replace(at, std::string("\"category\": \"roleplay\"").size(), "\"category\": \"poetry\"");
  info = DatasetRegistry::Builtin().Info("mt_bench");
  info.file = WriteTemp("mt_bench_edited.jsonl", mt);
  DatasetRegistry edited({info}, {});
  error = ErrorOf([&] { edited.Load("mt_bench"); });
  EXPECT_NE(error.find(info.file + ":11: category 'poetry' is not one of dataset 'mt_bench'"),
            std::string::npos)
      << error;
}

TEST(UserFiles, JsonlAcceptsTurnsPromptAndTextWithOptionalIdsAndCategories) {
  const std::string path = WriteTemp(
      "user.jsonl",
      "{\"turns\": [\"Hello\", \"And then?\"], \"question_id\": 7, \"category\": \"chat\"}\r\n"
      "\n"
      "{\"prompt\": \"Write a poem.\", \"id\": \"p-1\", \"category\": \"writing\"}\n"
      "{\"text\": \"Once upon a time\"}\n"
      "{\"text\": \"Say hi\", \"category\": \"chat\", \"reference\": \"hi\"}");  // no final newline
  const auto prompts = LoadDataset(path);
  ASSERT_EQ(prompts.size(), 4u);
  EXPECT_EQ(prompts[0].id, "7");
  EXPECT_EQ(prompts[0].turns, (std::vector<std::string>{"Hello", "And then?"}));
  EXPECT_EQ(prompts[0].category, "chat");
  EXPECT_EQ(prompts[1].id, "p-1");
  EXPECT_EQ(prompts[1].turns, std::vector<std::string>{"Write a poem."});
  EXPECT_EQ(prompts[2].id, "4");  // 1-based line number
  EXPECT_EQ(prompts[2].category, "");
  EXPECT_EQ(prompts[3].reference, "hi");

  const auto chat = LoadDataset(path, {-1, {"chat"}});
  ASSERT_EQ(chat.size(), 2u);
  EXPECT_EQ(chat[1].id, "5");
  const std::string error = ErrorOf([&] { LoadDataset(path, {-1, {"chta"}}); });
  EXPECT_NE(error.find("did you mean 'chat'"), std::string::npos) << error;
  EXPECT_NE(error.find("chat, writing"), std::string::npos) << error;
}

TEST(UserFiles, JsonArrayFilesAndTheirErrorLines) {
  std::string path = WriteTemp("user.json",
                               "[\n  {\"class\": \" Poems \", \"data\": \"Write a haiku.\"},\n"
                               "  {\"turns\": [\"What is 2+2?\"], \"id\": 9}\n]\n");
  const auto prompts = LoadDataset(path);
  ASSERT_EQ(prompts.size(), 2u);
  EXPECT_EQ(prompts[0].id, "1");
  EXPECT_EQ(prompts[0].category, "Poems");
  EXPECT_EQ(prompts[0].turns[0], "Write a haiku.");
  EXPECT_EQ(prompts[1].id, "9");

  path = WriteTemp("bad_element.json",
                   "[\n  {\"data\": \"ok\"},\n  {\"data\": \"a [tricky, \\\"string\\\"]\"},\n"
                   "  {\"class\": \"x\"}\n]\n");
  std::string error = ErrorOf([&] { LoadDataset(path); });
  EXPECT_NE(error.find(path + ":4 (array element 3): expected a JSON object"), std::string::npos)
      << error;
  path = WriteTemp("bad_syntax.json", "[\n  {\"data\": \"ok\"},\n  {\"data\": }\n]\n");
  error = ErrorOf([&] { LoadDataset(path); });
  EXPECT_NE(error.find(path + ":3: not valid JSON"), std::string::npos) << error;
  path = WriteTemp("not_array.json", "{\"data\": \"ok\"}\n");
  error = ErrorOf([&] { LoadDataset(path); });
  EXPECT_NE(error.find("expected a JSON array of prompt objects, found an object"),
            std::string::npos)
      << error;
}

TEST(DatasetPerformance, LargestSetsLoadWellUnderASecond) {
  for (const std::string name : {"gsm8k", "spec_bench"}) {
    const auto start = std::chrono::steady_clock::now();
    const auto prompts = LoadDataset(name);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_FALSE(prompts.empty());
    EXPECT_LT(seconds, 0.5) << name;
  }
}

}  // namespace
}  // namespace specbed

namespace specbed {
namespace {

// A number that overflows a double (1e400) and a repeated key are errors naming the file and
// line (nlohmann alone throws out_of_range naming neither, and keeps the last key).
TEST(DatasetErrors, NumberOverflowAndDuplicateKeysNameFileAndLine) {
  const std::string overflow = WriteTemp(
      "overflow.jsonl", "{\"turns\": [\"a\"]}\n{\"turns\": [\"b\"], \"question_id\": 1e400}\n");
  std::string error = ErrorOf([&] { LoadPromptFile(overflow, "questions_jsonl"); });
  EXPECT_NE(error.find(overflow + ":2: not valid JSON"), std::string::npos) << error;
  EXPECT_NE(error.find("1e400"), std::string::npos) << error;

  const std::string dup =
      WriteTemp("dup.jsonl", "{\"turns\": [\"a\"]}\n\n{\"prompt\": \"b\", \"prompt\": \"c\"}\n");
  error = ErrorOf([&] { LoadPromptFile(dup, "questions_jsonl"); });
  EXPECT_NE(error.find(dup + ":3"), std::string::npos) << error;
  EXPECT_NE(error.find("duplicate key \"prompt\" at /prompt"), std::string::npos) << error;

  const std::string array = WriteTemp(
      "overflow.json", "[\n  {\"turns\": [\"a\"]},\n  {\"turns\": [\"b\"], \"id\": -1e999}\n]\n");
  error = ErrorOf([&] { LoadPromptFile(array, "questions_json"); });
  EXPECT_NE(error.find(array + ":3: not valid JSON"), std::string::npos) << error;
}

// Every prompt carries the file and line it came from, for errors about it later (a prompt too
// long for the model's context names them).
TEST(UserFiles, PromptsRememberTheirFileAndLine) {
  const std::string path =
      WriteTemp("sources.jsonl", "{\"turns\": [\"a\"]}\n\n{\"prompt\": \"b\"}\n");
  const std::vector<Prompt> prompts = LoadPromptFile(path, "questions_jsonl");
  ASSERT_EQ(prompts.size(), 2u);
  EXPECT_EQ(prompts[0].source, path + ":1");
  EXPECT_EQ(prompts[1].source, path + ":3");
}

}  // namespace
}  // namespace specbed
