// Thin RAII wrapper over PCRE2 (UTF + UCP + JIT) used by the byte-level BPE pre-tokenizers
// (GPT-2, Llama-3 and Qwen2 split patterns with \p{L}, \p{N}, (?i:...) and lookahead).
// Checked by: tests/tokenizer/gpt2_tokenizer_test.cpp and tests/tokenizer/hf_tokenizer_test.cpp.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace specbed {

class PcreRegex {
 public:
  // Compiles `pattern` (a regex, or a literal string when `literal`). `where` names the input the
  // pattern came from; a compile error throws specbed::Error naming it.
  PcreRegex(const std::string& pattern, bool literal, const std::string& where);
  ~PcreRegex();
  PcreRegex(const PcreRegex&) = delete;
  PcreRegex& operator=(const PcreRegex&) = delete;

  // Appends the [begin, end) byte ranges of all successive non-overlapping, non-empty matches in
  // `subject`, which must be valid UTF-8. Thread-safe.
  void FindAll(std::string_view subject, std::vector<std::pair<size_t, size_t>>* matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::string where_;
  void* code_ = nullptr;  // pcre2_code*
};

// The GPT-2 pre-tokenizer pattern (also HF ByteLevel's with use_regex = true).
extern const char kGpt2SplitPattern[];

// Length of the longest prefix of [data, data + size) that is valid UTF-8 (RFC 3629: no
// surrogates, no overlong forms, at most U+10FFFF).
size_t ValidUtf8Prefix(const char* data, size_t size);

}  // namespace specbed
