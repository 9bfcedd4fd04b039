// SpecBed's error type and check helpers. Every user-facing failure (bad checkpoint, config,
// dataset line, unknown name, impossible knob, database trouble) is thrown as specbed::Error with
// a message that names the input and what was expected; the CLI prints it and exits non-zero.
// Checked by: every bad-input test in tests/ asserts on these messages.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace specbed {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Concatenates any streamable values into one string: StrCat("layer ", 3, " of ", n).
template <typename... Args>
std::string StrCat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

// Throws specbed::Error with the concatenated message.
template <typename... Args>
[[noreturn]] void Fail(Args&&... args) {
  throw Error(StrCat(std::forward<Args>(args)...));
}

}  // namespace specbed

// Checks a condition that depends on user input; on failure throws specbed::Error.
#define SPECBED_CHECK(cond, ...)               \
  do {                                         \
    if (!(cond)) ::specbed::Fail(__VA_ARGS__); \
  } while (0)
