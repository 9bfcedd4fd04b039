// Prompt lookup's index (the `ngram` method): over a growing context (prompt + generated tokens),
// for every n in [min_n, max_n], every earlier occurrence of each n-gram that has at least one
// token after it (the starts of their continuations, oldest first). Push appends a token with one
// hash update per n (O(max_n^2) token reads, independent of the context length); Lookup finds the
// longest suffix n-gram with a usable earlier occurrence — the earliest (the reference code's
// rule) or the most recent — and returns what followed it, also independent of the context
// length (one binary search at most). No LibTorch.
// Checked by: tests/methods/ngram_test.cpp (NgramIndex.* against a brute-force search).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace specbed {

// Which earlier occurrence of the matched n-gram drafts.
enum class NgramOccurrence {
  // The earliest whose continuation starts before the context's final n-gram (Saxena's
  // prompt-lookup code and Spec-Bench's PLD scan the matches oldest first).
  kEarliest,
  // The most recent one with a token after it (SpecBed before 2026-12-03; llama.cpp's
  // ngram-simple).
  kLatest,
};
const char* NgramOccurrenceName(NgramOccurrence occurrence);
NgramOccurrence ParseNgramOccurrence(const std::string& name, const std::string& context);

struct NgramLookupRule {
  NgramOccurrence occurrence = NgramOccurrence::kEarliest;
  // true: only an occurrence followed by all max_tokens tokens counts (the reference's
  // `end_idx <= input_length`); false: a shorter continuation drafts what there is (Hugging Face).
  bool full_continuation = true;
};

class NgramIndex {
 public:
  // 1 <= min_n <= max_n.
  NgramIndex(int64_t min_n, int64_t max_n);

  void Clear();
  // Appends one context token.
  void Push(int32_t token);
  const std::vector<int32_t>& tokens() const { return tokens_; }

  // For n = max_n down to min_n: if the context's last n tokens occurred earlier with a
  // continuation `rule` accepts, appends to `out` up to `max_tokens` tokens that followed the
  // occurrence `rule` picks and returns n. Returns 0 (nothing appended) when no suffix matches.
  int64_t Lookup(int64_t max_tokens, std::vector<int32_t>& out,
                 const NgramLookupRule& rule = {}) const;

 private:
  // Hash of tokens_[end - n, end).
  uint64_t Key(int64_t end, int64_t n) const;
  bool SameNgram(int64_t end_a, int64_t end_b, int64_t n) const;
  // The continuation start `rule` picks among `starts` (ascending) for a suffix n-gram of the
  // context, or -1.
  int64_t PickStart(const std::vector<int64_t>& starts, int64_t n, int64_t max_tokens,
                    const NgramLookupRule& rule) const;

  int64_t min_n_, max_n_;
  std::vector<int32_t> tokens_;
  // by_n_[n - min_n]: n-gram hash -> starts of its continuations, oldest first.
  std::vector<std::unordered_map<uint64_t, std::vector<int64_t>>> by_n_;
};

}  // namespace specbed
