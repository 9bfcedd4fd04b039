// Internals shared by datasets/dataset.cpp (file parsing, filtering) and datasets/registry.cpp
// (built-in sets). Not part of the public API.
// Checked by: tests/datasets/dataset_test.cpp (through LoadPromptFile and DatasetRegistry::Load).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "datasets/dataset.h"

namespace specbed {
namespace internal {

// Every prompt of a file with the 1-based line it starts on (same length as `prompts`).
struct ParsedFile {
  std::vector<Prompt> prompts;
  std::vector<int64_t> lines;
};

// Reads and checks a whole prompt file (every record, unique ids, at least one prompt).
ParsedFile ParsePromptFile(const std::string& path, const std::string& format);

// Non-empty categories of `prompts` in order of first appearance.
std::vector<std::string> CategoriesInOrder(const std::vector<Prompt>& prompts);

// Checks the filter against `known_categories` (errors name `label`, e.g. "dataset 'gsm8k'") and
// returns the selected prompts.
std::vector<Prompt> ApplyFilter(std::vector<Prompt> prompts, const DatasetFilter& filter,
                                const std::vector<std::string>& known_categories,
                                const std::string& label);

}  // namespace internal
}  // namespace specbed
