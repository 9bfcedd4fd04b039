// Name tables for small enums: one table of {value, name} rows gives an enum both its name
// (XName) and its parse (ParseX), so the two cannot disagree and no file writes the switch again.
// Checked by: tests/engine/verifier_test.cpp, tests/methods/osd_test.cpp,
// tests/methods/blockpilot_test.cpp, tests/methods/ltd_classifier_test.cpp.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "base/names.h"

namespace specbed {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `value` in `table`; `fallback` when no row holds it (a value cast from a number).
template <typename E, size_t N>
const char* EnumNameOf(const EnumName<E> (&table)[N], E value, const char* fallback = "?") {
  for (const EnumName<E>& row : table) {
    if (row.value == value) return row.name;
  }
  return fallback;
}

// The value that `table` names `name`, or nullopt.
template <typename E, size_t N>
std::optional<E> EnumValueOf(const EnumName<E> (&table)[N], const std::string& name) {
  for (const EnumName<E>& row : table) {
    if (name == row.name) return row.value;
  }
  return std::nullopt;
}

// The names of `table`, in its order (for "known names" errors).
template <typename E, size_t N>
std::vector<std::string> EnumNames(const EnumName<E> (&table)[N]) {
  std::vector<std::string> names;
  for (const EnumName<E>& row : table) names.emplace_back(row.name);
  return names;
}

// The value that `table` names `name`; an unknown name fails as FailUnknownName(kind, name, the
// table's names, context).
template <typename E, size_t N>
E ParseEnumName(const EnumName<E> (&table)[N], const std::string& name, const std::string& kind,
                const std::string& context = "") {
  if (const std::optional<E> value = EnumValueOf(table, name)) return *value;
  FailUnknownName(kind, name, EnumNames(table), context);
}

// Defines the name function and the parser of enum E from its rows ({E::kA, "a"}, ...):
//   const char* NameFn(E value);                                    // "?" off the table
//   E ParseFn(const std::string& name, const std::string& context); // unknown: FailUnknownName
// The parser's error names `kind` ("verification rule") and lists the known names.
#define SPECBED_ENUM_NAMES(E, kind, NameFn, ParseFn, ...)          \
  const char* NameFn(E value) {                                    \
    static constexpr EnumName<E> kTable[] = {__VA_ARGS__};         \
    return EnumNameOf(kTable, value);                              \
  }                                                                \
  E ParseFn(const std::string& name, const std::string& context) { \
    static constexpr EnumName<E> kTable[] = {__VA_ARGS__};         \
    return ParseEnumName(kTable, name, kind, context);             \
  }

}  // namespace specbed
