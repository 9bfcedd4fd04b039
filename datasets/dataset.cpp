// Prompt-file loaders (JSONL question files, HumanEval, GSM8K, MATH-500, JSON arrays), the
// category/limit filter, and --dataset resolution. The built-in table is in registry.cpp.
// Checked by: tests/datasets/dataset_test.cpp.
#include <cctype>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/error.h"
#include "base/json_read.h"
#include "base/mapped_file.h"
#include "base/names.h"
#include "datasets/dataset.h"
#include "datasets/dataset_internal.h"

namespace specbed {
namespace internal {
namespace {

using nlohmann::json;

std::string Trim(const std::string& s) {
  size_t begin = 0, end = s.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(s[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(s[end - 1]))) --end;
  return s.substr(begin, end - begin);
}

// "a string", "an array", ... for error messages.
std::string Described(const json& value) {
  const std::string type = value.type_name();
  const bool vowel = !type.empty() && std::string("aeiou").find(type[0]) != std::string::npos;
  return (vowel ? "an " : "a ") + type;
}

bool IsNonEmptyString(const json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && it->is_string() && !it->get_ref<const std::string&>().empty();
}

// Reads an optional id field ("question_id", "id", "task_id"); integers become decimal strings.
std::string ReadId(const json& object, const std::string& where, const std::string& fallback) {
  for (const char* key : {"question_id", "id", "task_id"}) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) continue;
    if (it->is_string()) {
      SPECBED_CHECK(!it->get_ref<const std::string&>().empty(), where, ": expected \"", key,
                    "\" to be a non-empty string or an integer, found an empty string");
      return it->get<std::string>();
    }
    if (it->is_number_integer()) return it->dump();
    Fail(where, ": expected \"", key, "\" to be a string or an integer, found ", Described(*it));
  }
  return fallback;
}

std::string ReadCategory(const json& object, const std::string& where) {
  for (const char* key : {"category", "class"}) {
    auto it = object.find(key);
    if (it == object.end() || it->is_null()) continue;
    SPECBED_CHECK(it->is_string(), where, ": expected \"", key, "\" to be a string, found ",
                  Described(*it));
    return Trim(it->get<std::string>());
  }
  return "";
}

// "reference": a string, or an array whose elements are strings, null, or arrays of strings
// (alternatives). Fills prompt.references and prompt.reference.
void ReadReference(const json& object, const std::string& where, Prompt& prompt) {
  auto it = object.find("reference");
  if (it == object.end() || it->is_null()) return;
  const std::string expected =
      StrCat(where,
             ": expected \"reference\" to be a string or an array of strings (or of arrays of "
             "strings), found ");
  if (it->is_string()) {
    prompt.references.push_back(it->get<std::string>());
  } else {
    SPECBED_CHECK(it->is_array(), expected, Described(*it));
    for (const json& part : *it) {
      if (part.is_null()) {
        prompt.references.emplace_back();
      } else if (part.is_string()) {
        prompt.references.push_back(part.get<std::string>());
      } else {
        SPECBED_CHECK(part.is_array(), expected, "an array containing ", Described(part));
        std::vector<std::string> alternatives;
        for (const json& alternative : part) {
          SPECBED_CHECK(alternative.is_string(), expected, "an array containing ",
                        Described(alternative));
          alternatives.push_back(alternative.get<std::string>());
        }
        prompt.references.push_back(Join(alternatives, "\n"));
      }
    }
  }
  std::vector<std::string> non_empty;
  for (const auto& r : prompt.references) {
    if (!r.empty()) non_empty.push_back(r);
  }
  prompt.reference = Join(non_empty, "\n\n");
}

const char kQuestionExpectation[] =
    "expected a JSON object with a non-empty \"turns\" array of strings (or a non-empty "
    "\"prompt\"/\"text\" string)";

// One record of a questions_jsonl line or questions_json/ultrachat_json array element.
Prompt ParseQuestionObject(const json& object, const std::string& where,
                           const std::string& default_id) {
  SPECBED_CHECK(object.is_object(), where, ": ", kQuestionExpectation, "; found ",
                Described(object));
  Prompt prompt;
  auto turns = object.find("turns");
  if (turns != object.end()) {
    SPECBED_CHECK(turns->is_array() && !turns->empty(), where, ": ", kQuestionExpectation,
                  "; \"turns\" is ",
                  turns->is_array() ? std::string("an empty array") : Described(*turns));
    for (size_t i = 0; i < turns->size(); ++i) {
      const json& turn = (*turns)[i];
      SPECBED_CHECK(turn.is_string(), where, ": ", kQuestionExpectation, "; turn ", i + 1, " is ",
                    Described(turn));
      SPECBED_CHECK(!turn.get_ref<const std::string&>().empty(), where, ": ", kQuestionExpectation,
                    "; turn ", i + 1, " is an empty string");
      prompt.turns.push_back(turn.get<std::string>());
    }
  } else {
    bool found = false;
    for (const char* key : {"prompt", "text", "data"}) {
      auto it = object.find(key);
      if (it == object.end()) continue;
      SPECBED_CHECK(IsNonEmptyString(object, key), where, ": ", kQuestionExpectation, "; \"", key,
                    "\" is ", it->is_string() ? std::string("an empty string") : Described(*it));
      prompt.turns.push_back(it->get<std::string>());
      found = true;
      break;
    }
    SPECBED_CHECK(found, where, ": ", kQuestionExpectation);
  }
  prompt.id = ReadId(object, where, default_id);
  prompt.category = ReadCategory(object, where);
  ReadReference(object, where, prompt);
  return prompt;
}

Prompt ParseHumanEval(const json& object, const std::string& where) {
  SPECBED_CHECK(object.is_object() && IsNonEmptyString(object, "task_id") &&
                    IsNonEmptyString(object, "prompt"),
                where,
                ": expected a HumanEval JSON object with non-empty strings \"task_id\" and "
                "\"prompt\"");
  Prompt prompt;
  prompt.id = object["task_id"].get<std::string>();
  prompt.turns.push_back(object["prompt"].get<std::string>());
  auto solution = object.find("canonical_solution");
  if (solution != object.end() && solution->is_string()) {
    prompt.reference = solution->get<std::string>();
    prompt.references.push_back(prompt.reference);
  }
  return prompt;
}

Prompt ParseGsm8k(const json& object, const std::string& where, int64_t line) {
  SPECBED_CHECK(object.is_object() && IsNonEmptyString(object, "question") &&
                    object.contains("answer") && object["answer"].is_string(),
                where,
                ": expected a GSM8K JSON object with a non-empty string \"question\" and a "
                "string \"answer\"");
  Prompt prompt;
  prompt.id = std::to_string(line);
  prompt.turns.push_back(object["question"].get<std::string>());
  prompt.reference = object["answer"].get<std::string>();
  prompt.references.push_back(prompt.reference);
  return prompt;
}

Prompt ParseMath500(const json& object, const std::string& where, int64_t line) {
  SPECBED_CHECK(object.is_object() && IsNonEmptyString(object, "problem"), where,
                ": expected a MATH JSON object with a non-empty string \"problem\" (and optional "
                "strings \"unique_id\", \"subject\", \"solution\", \"answer\")");
  for (const char* key : {"unique_id", "subject", "solution", "answer"}) {
    auto it = object.find(key);
    // "answer" is a number in some MATH mirrors; accept any scalar there.
    const bool ok = it == object.end() || it->is_null() || it->is_string() ||
                    (std::string(key) == "answer" && it->is_primitive());
    SPECBED_CHECK(ok, where, ": expected \"", key, "\" to be a string, found ", Described(*it));
  }
  Prompt prompt;
  prompt.id = IsNonEmptyString(object, "unique_id") ? object["unique_id"].get<std::string>()
                                                    : std::to_string(line);
  if (IsNonEmptyString(object, "subject"))
    prompt.category = Trim(object["subject"].get<std::string>());
  prompt.turns.push_back(object["problem"].get<std::string>());
  if (IsNonEmptyString(object, "solution")) {
    prompt.reference = object["solution"].get<std::string>();
  } else if (object.contains("answer") && !object["answer"].is_null()) {
    const json& answer = object["answer"];
    prompt.reference = answer.is_string() ? answer.get<std::string>() : answer.dump();
  }
  if (!prompt.reference.empty()) prompt.references.push_back(prompt.reference);
  return prompt;
}

// Byte offsets where each element of a (valid) top-level JSON array starts.
std::vector<size_t> ArrayElementOffsets(const std::string& text) {
  std::vector<size_t> offsets;
  int depth = 0;
  bool in_string = false, escaped = false, expect_value = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) continue;
    if (depth == 1 && expect_value && c != ']') {
      offsets.push_back(i);
      expect_value = false;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ++depth;
      if (depth == 1) expect_value = true;
    } else if (c == ']' || c == '}') {
      --depth;
    } else if (c == ',' && depth == 1) {
      expect_value = true;
    }
  }
  return offsets;
}

// 1-based line of each offset (offsets ascending).
std::vector<int64_t> LinesOfOffsets(const std::string& text, const std::vector<size_t>& offsets) {
  std::vector<int64_t> lines;
  lines.reserve(offsets.size());
  int64_t line = 1;
  size_t pos = 0;
  for (size_t offset : offsets) {
    for (; pos < offset && pos < text.size(); ++pos) {
      if (text[pos] == '\n') ++line;
    }
    lines.push_back(line);
  }
  return lines;
}

ParsedFile ParseJsonl(const std::string& path, const std::string& text, const std::string& format) {
  ParsedFile parsed;
  int64_t line_number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    ++line_number;
    size_t line_end = end;
    if (line_end > pos && text[line_end - 1] == '\r') --line_end;
    const char* begin_ptr = text.data() + pos;
    const char* end_ptr = text.data() + line_end;
    pos = end + 1;
    bool blank = true;
    for (const char* p = begin_ptr; p < end_ptr; ++p) {
      if (!std::isspace(static_cast<unsigned char>(*p))) {
        blank = false;
        break;
      }
    }
    if (blank) continue;
    const std::string where = StrCat(path, ":", line_number);
    JsonParseOptions options;
    options.first_line = line_number;
    options.expected = "one JSON object per line";
    const json object =
        ParseJsonText(std::string_view(begin_ptr, end_ptr - begin_ptr), path, options);
    Prompt prompt = WithJsonContext(where, [&] {
      if (format == "questions_jsonl") {
        return ParseQuestionObject(object, where, std::to_string(line_number));
      } else if (format == "humaneval_jsonl") {
        return ParseHumanEval(object, where);
      } else if (format == "gsm8k_jsonl") {
        return ParseGsm8k(object, where, line_number);
      }
      return ParseMath500(object, where, line_number);
    });
    prompt.source_category = prompt.category;
    prompt.source = where;
    parsed.prompts.push_back(std::move(prompt));
    parsed.lines.push_back(line_number);
  }
  return parsed;
}

ParsedFile ParseJsonArray(const std::string& path, const std::string& text) {
  JsonParseOptions options;
  options.expected = "a JSON array of prompt objects";
  const json root = ParseJsonText(text, path, options);
  SPECBED_CHECK(root.is_array(), path, ":1: expected a JSON array of prompt objects, found ",
                Described(root));
  const std::vector<int64_t> lines = LinesOfOffsets(text, ArrayElementOffsets(text));
  SPECBED_CHECK(lines.size() == root.size(), path, ": internal error locating array elements");
  ParsedFile parsed;
  for (size_t i = 0; i < root.size(); ++i) {
    const std::string where = StrCat(path, ":", lines[i], " (array element ", i + 1, ")");
    Prompt prompt = WithJsonContext(
        where, [&] { return ParseQuestionObject(root[i], where, std::to_string(i + 1)); });
    prompt.source_category = prompt.category;
    prompt.source = StrCat(path, ":", lines[i]);
    parsed.prompts.push_back(std::move(prompt));
    parsed.lines.push_back(lines[i]);
  }
  return parsed;
}

}  // namespace

ParsedFile ParsePromptFile(const std::string& path, const std::string& format) {
  const std::vector<std::string> formats = PromptFileFormats();
  bool known = false;
  for (const auto& f : formats) known = known || f == format;
  if (!known) FailUnknownName("prompt file format", format, formats);
  const std::string text = ReadFileToString(path);
  ParsedFile parsed = (format == "ultrachat_json" || format == "questions_json")
                          ? ParseJsonArray(path, text)
                          : ParseJsonl(path, text, format);
  SPECBED_CHECK(!parsed.prompts.empty(), path, ": expected at least one prompt, found none");
  std::unordered_map<std::string, int64_t> first_line;
  for (size_t i = 0; i < parsed.prompts.size(); ++i) {
    auto inserted = first_line.emplace(parsed.prompts[i].id, parsed.lines[i]);
    SPECBED_CHECK(inserted.second, path, ":", parsed.lines[i], ": duplicate prompt id '",
                  parsed.prompts[i].id, "' (first used on line ", inserted.first->second,
                  "); expected unique ids");
  }
  return parsed;
}

std::vector<std::string> CategoriesInOrder(const std::vector<Prompt>& prompts) {
  std::vector<std::string> categories;
  for (const auto& p : prompts) {
    if (p.category.empty()) continue;
    bool seen = false;
    for (const auto& c : categories) seen = seen || c == p.category;
    if (!seen) categories.push_back(p.category);
  }
  return categories;
}

std::vector<Prompt> ApplyFilter(std::vector<Prompt> prompts, const DatasetFilter& filter,
                                const std::vector<std::string>& known_categories,
                                const std::string& label) {
  SPECBED_CHECK(filter.limit >= -1, label, ": expected a prompt limit of -1 (all) or >= 0, got ",
                filter.limit);
  for (const auto& category : filter.categories) {
    bool known = false;
    for (const auto& c : known_categories) known = known || c == category;
    if (known) continue;
    SPECBED_CHECK(!known_categories.empty(), label, " has no categories; cannot filter by '",
                  category, "'");
    const std::string nearest = NearestName(category, known_categories);
    Fail("unknown category '", category, "' for ", label,
         nearest.empty() ? "" : " (did you mean '" + nearest + "'?)",
         "; its categories: ", Join(known_categories, ", "));
  }
  std::vector<Prompt> out;
  for (auto& prompt : prompts) {
    if (filter.limit >= 0 && static_cast<int64_t>(out.size()) >= filter.limit) break;
    bool keep = filter.categories.empty();
    for (const auto& c : filter.categories) keep = keep || c == prompt.category;
    if (keep) out.push_back(std::move(prompt));
  }
  return out;
}

}  // namespace internal

std::vector<std::string> PromptFileFormats() {
  return {"questions_jsonl", "humaneval_jsonl", "gsm8k_jsonl",
          "math500_jsonl",   "ultrachat_json",  "questions_json"};
}

std::vector<Prompt> LoadPromptFile(const std::string& path, const std::string& format,
                                   const DatasetFilter& filter) {
  internal::ParsedFile parsed = internal::ParsePromptFile(path, format);
  const std::vector<std::string> categories = internal::CategoriesInOrder(parsed.prompts);
  return internal::ApplyFilter(std::move(parsed.prompts), filter, categories,
                               "dataset file '" + path + "'");
}

namespace {}  // namespace

std::vector<Prompt> LoadDataset(const std::string& name_or_path, const DatasetFilter& filter) {
  const DatasetRegistry& registry = DatasetRegistry::Builtin();
  if (registry.Has(name_or_path)) return registry.Load(name_or_path, filter);
  if (registry.HasGroup(name_or_path)) {
    Fail("'", name_or_path, "' is a dataset group (",
         Join(registry.ExpandGroup(name_or_path), ", "),
         "), not a single set; load its sets one by one");
  }
  std::string format;
  if (EndsWith(name_or_path, ".jsonl")) format = "questions_jsonl";
  if (EndsWith(name_or_path, ".json")) format = "questions_json";
  if (!format.empty()) {
    SPECBED_CHECK(PathExists(name_or_path), "dataset file '", name_or_path,
                  "' does not exist (a --dataset value ending in .jsonl or .json is read as a "
                  "file path)");
    return LoadPromptFile(name_or_path, format, filter);
  }
  SPECBED_CHECK(!PathExists(name_or_path), "dataset file '", name_or_path,
                "': cannot tell its format from the name; expected a .jsonl file (one JSON "
                "object per line) or a .json file (a JSON array)");
  std::vector<std::string> known = registry.Names();
  for (const auto& g : registry.GroupNames()) known.push_back(g);
  try {
    FailUnknownName("dataset", name_or_path, known);
  } catch (const Error& e) {
    Fail(e.what(), "; or give a path to a .jsonl/.json prompt file");
  }
}

}  // namespace specbed
