// Name lookup helpers shared by every registry (models, methods, datasets, chat templates):
// an unknown name fails with the list of known names and the nearest match; small string helpers.
// Checked by: tests/base/names_test.cpp.
#pragma once

#include <string>
#include <vector>

namespace specbed {

// Levenshtein edit distance between two ASCII strings (case-insensitive).
int EditDistance(const std::string& a, const std::string& b);

// The known name closest to `name`, or "" when none is reasonably close.
std::string NearestName(const std::string& name, const std::vector<std::string>& known);

// Throws specbed::Error: "[<context>: ]unknown <kind> 'name' (did you mean 'x'?); known <kind>s:
// a, b, c". `context` names where the name came from (e.g. a config file).
[[noreturn]] void FailUnknownName(const std::string& kind, const std::string& name,
                                  const std::vector<std::string>& known,
                                  const std::string& context = "");

// Joins strings with a separator.
std::string Join(const std::vector<std::string>& parts, const std::string& sep);

// Prefix / suffix tests.
inline bool StartsWith(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}
inline bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace specbed
