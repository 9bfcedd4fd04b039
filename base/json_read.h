// The one JSON reader for every file SpecBed reads (configs, tokenizer files, checkpoint headers,
// prompt files, database JSON columns). It turns every nlohmann exception into specbed::Error
// naming the source, the line and column (parse errors; JSONL callers pass the line's number)
// and the field as a JSON pointer (duplicate keys, overflowing numbers, type errors inside
// WithJsonContext). Parsing is bounded: nesting deeper than kMaxJsonDepth is refused.
// Checked by: tests/base/json_read_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace specbed {

// Deeper nesting than any SpecBed file needs (tokenizer.json nests ~6 levels); refused so a
// hostile file cannot exhaust the stack of code that walks the tree recursively.
constexpr int kMaxJsonDepth = 256;

struct JsonParseOptions {
  // A key repeated in one object is an error naming it (nlohmann alone keeps the last one).
  bool reject_duplicate_keys = true;
  // Line number of the text's first line in its file (JSONL lines, embedded JSON).
  int64_t first_line = 1;
  // What the text should be, appended to parse errors ("a JSON object per line").
  std::string expected;
};

// Parses `text` (strict JSON, nothing after the value). Errors read
// "<source>:<line>: not valid JSON (column <c>): <reason>[; expected <expected>]" (number
// overflow such as 1e400 and duplicate keys included: "duplicate key "k" at /a/b/k").
nlohmann::json ParseJsonText(std::string_view text, const std::string& source,
                             const JsonParseOptions& options = {});

// ParseJsonText's checks and errors, keeping the objects' key order (nlohmann::ordered_json) for
// settings and recipes that are compared and written back in order (train states).
nlohmann::ordered_json ParseOrderedJsonText(std::string_view text, const std::string& source,
                                            const JsonParseOptions& options = {});

// Reads and parses a whole file with ParseJsonText (source = path).
nlohmann::json ReadJsonFile(const std::string& path, const JsonParseOptions& options = {});

// "/a/0/b" style JSON pointer for a key below `parent` (escaping '~' and '/').
std::string JsonPointerChild(const std::string& parent, std::string_view key);

// Serializes `j` for printing (indent < 0: one line). Strings that are not valid UTF-8 (a prompt
// given as raw bytes, a generation cut inside a multi-byte character) have each invalid byte
// replaced by U+FFFD instead of failing; token ids elsewhere in `j` stay exact.
std::string DumpJsonForOutput(const nlohmann::json& j, int indent = 2);

// Rewrites an nlohmann exception as a specbed::Error naming `source` (and `field`, a JSON pointer,
// when known). The message keeps nlohmann's reason without its "[json.exception...]" prefix.
[[noreturn]] void FailJsonException(const nlohmann::json::exception& e, const std::string& source,
                                    const std::string& field = "");

// Runs `fn`; an nlohmann exception escaping it (a type or range error while reading fields)
// becomes specbed::Error naming `source`. Use around code that reads a parsed file's fields.
template <typename F>
decltype(auto) WithJsonContext(const std::string& source, F&& fn) {
  try {
    return std::forward<F>(fn)();
  } catch (const nlohmann::json::exception& e) {
    FailJsonException(e, source);
  }
}

}  // namespace specbed
