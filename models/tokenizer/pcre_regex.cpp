// PCRE2 wrapper for the BPE pre-tokenizers: compile with UTF|UCP, JIT when available, and iterate
// non-overlapping matches. Checked by: tests/tokenizer/gpt2_tokenizer_test.cpp (GPT-2 regex) and
// tests/tokenizer/hf_tokenizer_test.cpp (Llama-3 split pattern).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "models/tokenizer/pcre_regex.h"

#include <pcre2.h>

#include "base/error.h"

namespace specbed {

const char kGpt2SplitPattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

namespace {

std::string PcreErrorText(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

struct MatchResources {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ~MatchResources() {
    if (data) pcre2_match_data_free(data);
    if (context) pcre2_match_context_free(context);
    if (jit_stack) pcre2_jit_stack_free(jit_stack);
  }
};

}  // namespace

PcreRegex::PcreRegex(const std::string& pattern, bool literal, const std::string& where)
    : pattern_(pattern), where_(where) {
  uint32_t options = PCRE2_UTF | PCRE2_UCP;
  if (literal) options |= PCRE2_LITERAL;
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error_code, &error_offset, nullptr);
  SPECBED_CHECK(code != nullptr, where, ": cannot compile split pattern '", pattern, "' at offset ",
                error_offset, ": ", PcreErrorText(error_code));
  // JIT is an optimization only; on failure the interpreter is used.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

PcreRegex::~PcreRegex() {
  pcre2_code_free(static_cast<pcre2_code*>(code_));
}

void PcreRegex::FindAll(std::string_view subject,
                        std::vector<std::pair<size_t, size_t>>* matches) const {
  auto* code = static_cast<pcre2_code*>(code_);
  MatchResources res;
  res.data = pcre2_match_data_create_from_pattern(code, nullptr);
  SPECBED_CHECK(res.data != nullptr, "out of memory creating PCRE2 match data");
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t offset = 0;
  while (offset < subject.size()) {
    int rc =
        pcre2_match(code, text, subject.size(), offset, PCRE2_NO_UTF_CHECK, res.data, res.context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && res.jit_stack == nullptr) {
      // Very long runs can exhaust the default 32 KiB JIT stack; retry with a large one.
      res.jit_stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
      res.context = pcre2_match_context_create(nullptr);
      SPECBED_CHECK(res.jit_stack && res.context, "out of memory creating a PCRE2 JIT stack");
      pcre2_jit_stack_assign(res.context, nullptr, res.jit_stack);
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    SPECBED_CHECK(rc >= 0, where_, ": matching split pattern '", pattern_,
                  "' failed: ", PcreErrorText(rc));
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(res.data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end > begin) {
      matches->emplace_back(begin, end);
      offset = end;
    } else {
      // Empty match: skip one UTF-8 character.
      offset = begin + 1;
      while (offset < subject.size() &&
             (static_cast<unsigned char>(subject[offset]) & 0xC0) == 0x80) {
        ++offset;
      }
    }
  }
}

size_t ValidUtf8Prefix(const char* data, size_t size) {
  const auto* s = reinterpret_cast<const unsigned char*>(data);
  size_t i = 0;
  while (i < size) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
      cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      cp = c & 0x07;
    } else {
      return i;
    }
    if (i + n > size) return i;
    for (size_t k = 1; k < n; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF)) {
      return i;
    }
    i += n;
  }
  return size;
}

}  // namespace specbed
