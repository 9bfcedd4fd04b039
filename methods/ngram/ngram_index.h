// Prompt lookup's index (the `ngram` method): over a growing context (prompt + generated tokens),
// for every n in [min_n, max_n], the most recent earlier occurrence of each n-gram that has at
// least one token after it. Push appends a token with one hash update per n (O(max_n^2) token
// reads, independent of the context length); Lookup finds the longest suffix n-gram with an
// earlier occurrence and returns what followed it, also independent of the context length.
// No LibTorch.
// Checked by: tests/methods/ngram_test.cpp (NgramIndex.* against a brute-force search).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace specbed {

class NgramIndex {
 public:
  // 1 <= min_n <= max_n.
  NgramIndex(int64_t min_n, int64_t max_n);

  void Clear();
  // Appends one context token.
  void Push(int32_t token);
  const std::vector<int32_t>& tokens() const { return tokens_; }

  // For n = max_n down to min_n: if the context's last n tokens occurred earlier (followed by at
  // least one token), appends to `out` up to `max_tokens` tokens that followed their most recent
  // earlier occurrence and returns n. Returns 0 (nothing appended) when no suffix matches.
  int64_t Lookup(int64_t max_tokens, std::vector<int32_t>& out) const;

 private:
  // Hash of tokens_[end - n, end).
  uint64_t Key(int64_t end, int64_t n) const;
  bool SameNgram(int64_t end_a, int64_t end_b, int64_t n) const;

  int64_t min_n_, max_n_;
  std::vector<int32_t> tokens_;
  // by_n_[n - min_n]: n-gram hash -> start of its most recent continuation.
  std::vector<std::unordered_map<uint64_t, int64_t>> by_n_;
};

}  // namespace specbed
