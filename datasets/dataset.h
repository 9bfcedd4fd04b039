// Benchmark prompt sets: the registry of shipped sets (datasets/data/, see datasets/README.md),
// their file-format loaders, and loading of user prompt files (`--dataset path/to/file.jsonl`).
// Checked by: tests/datasets/dataset_test.cpp (every shipped set's count and categories, filters,
// and the error messages for malformed, truncated and unknown inputs).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace specbed {

// One benchmark prompt.
struct Prompt {
  std::string id;        // stable id within the dataset (question_id, task_id, or line number)
  std::string category;  // "" when the set has none
  std::vector<std::string> turns;  // user turns; multi-turn sets (MT-Bench) have 2
  std::string reference;  // reference answer when the file has one, else "" (all turns' references
                          // joined by a blank line; see `references` for them one by one)
  // Per-turn reference answers (same length as the file's "reference" array, "" where a turn has
  // none; alternatives of one turn, as in Spec-Bench's rag set, are joined by "\n"). Empty when
  // the file has no reference for this prompt.
  std::vector<std::string> references;
  // The category exactly as written in the file (trimmed). Equals `category` except where the
  // registry regroups categories: Spec-Bench's MT-Bench part has category "mt_bench" and
  // source_category "writing", "roleplay", ...
  std::string source_category;
  // Where the prompt was read: "<file>:<line>" (errors about the prompt, e.g. one too long for
  // the model's context, name it).
  std::string source;
};

struct DatasetInfo {
  std::string name;         // registry key, e.g. "mt_bench", "spec_bench", "gsm8k", "stories"
  std::string description;  // one line
  std::string file;    // path relative to the repo root (resolved with HomePath); absolute paths
                       // are used as they are
  std::string format;  // "questions_jsonl" | "humaneval_jsonl" | "gsm8k_jsonl" | "math500_jsonl" |
                       // "ultrachat_json" (| "questions_json" for user files)
  int64_t prompt_count = 0;             // expected number of prompts in the file; loading checks it
  std::vector<std::string> categories;  // known categories in file order of first appearance
  bool multi_turn = false;              // true when some prompt has more than one turn
  std::string license;
  // Regrouping of file categories: (file category, reported category). A file category not
  // listed here is reported as it is.
  std::vector<std::pair<std::string, std::string>> category_groups;
};

// Which prompts of a set to use: first the category filter (a prompt is kept when its category is
// one of `categories`; empty = all), then the first `limit` of those (-1 = all).
struct DatasetFilter {
  int64_t limit = -1;
  std::vector<std::string> categories;
};

// A named list of sets run together, e.g. "eagle_suite" (the six EAGLE-3 evaluation sets).
struct DatasetGroup {
  std::string name;
  std::string description;
  std::vector<std::string> sets;
};

class DatasetRegistry {
 public:
  DatasetRegistry(std::vector<DatasetInfo> sets, std::vector<DatasetGroup> groups);

  // The shipped sets: mt_bench, spec_bench, humaneval, gsm8k, math500, eagle_mt_bench,
  // eagle_humaneval, eagle_gsm8k, eagle_alpaca, eagle_cnndm, eagle_nq, ultrachat, stories; and the
  // group eagle_suite.
  static const DatasetRegistry& Builtin();

  // Set names in registry order (groups not included).
  std::vector<std::string> Names() const;
  std::vector<std::string> GroupNames() const;
  bool Has(const std::string& name) const;  // a set (not a group)
  bool HasGroup(const std::string& name) const;
  // Unknown → specbed::Error listing the known sets and suggesting the nearest.
  const DatasetInfo& Info(const std::string& name) const;
  const DatasetGroup& Group(const std::string& name) const;
  // A group's sets; a set name expands to itself. Unknown → error listing sets and groups.
  std::vector<std::string> ExpandGroup(const std::string& name) const;

  // Loads a set: checks every line, the prompt count and the categories against the registry
  // entry, then applies `filter` (an unknown category is an error listing the set's categories).
  std::vector<Prompt> Load(const std::string& name, const DatasetFilter& filter = {}) const;

 private:
  std::vector<DatasetInfo> sets_;
  std::vector<DatasetGroup> groups_;
};

// Loads a prompt file of the given format. Also used for user files (`--dataset file.jsonl`,
// format "questions_jsonl"): each non-empty line is a JSON object with the prompt as "turns"
// (non-empty array of non-empty strings), "prompt" or "text" (non-empty string); optional
// "question_id"/"id"/"task_id" (string or integer; default: the 1-based line number), "category"
// (string) and "reference" (string or array). "questions_json" is a JSON array of such objects
// (UltraChat's {"class", "data"} objects are accepted too). Errors name the file and the 1-based
// line and what was expected. Ids must be unique. The filter's categories must occur in the file.
std::vector<Prompt> LoadPromptFile(const std::string& path, const std::string& format,
                                   const DatasetFilter& filter = {});

// Resolves a --dataset argument: a built-in set name, or a path to a .jsonl (questions_jsonl) or
// .json (questions_json) file. A group name is an error (expand it with ExpandGroup first).
std::vector<Prompt> LoadDataset(const std::string& name_or_path, const DatasetFilter& filter = {});

// The formats LoadPromptFile understands.
std::vector<std::string> PromptFileFormats();

}  // namespace specbed
