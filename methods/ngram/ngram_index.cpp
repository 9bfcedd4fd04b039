// NgramIndex (see ngram_index.h).
#include "methods/ngram/ngram_index.h"

#include <algorithm>

#include "base/enum_names.h"
#include "base/error.h"

namespace specbed {

SPECBED_ENUM_NAMES(NgramOccurrence, "n-gram occurrence", NgramOccurrenceName, ParseNgramOccurrence,
                   {NgramOccurrence::kEarliest, "earliest"}, {NgramOccurrence::kLatest, "latest"})

NgramIndex::NgramIndex(int64_t min_n, int64_t max_n) : min_n_(min_n), max_n_(max_n) {
  SPECBED_CHECK(min_n >= 1 && min_n <= max_n, "n-gram index: need 1 <= min_n <= max_n, got min_n ",
                min_n, " and max_n ", max_n);
  by_n_.resize(static_cast<size_t>(max_n - min_n + 1));
}

void NgramIndex::Clear() {
  tokens_.clear();
  for (auto& map : by_n_) map.clear();
}

uint64_t NgramIndex::Key(int64_t end, int64_t n) const {
  uint64_t h = 0xcbf29ce484222325ull ^ static_cast<uint64_t>(n);
  for (int64_t i = end - n; i < end; ++i) {
    h ^= static_cast<uint32_t>(tokens_[i]);
    h *= 0x100000001b3ull;
    h ^= h >> 31;
  }
  return h;
}

bool NgramIndex::SameNgram(int64_t end_a, int64_t end_b, int64_t n) const {
  return std::equal(tokens_.begin() + (end_a - n), tokens_.begin() + end_a,
                    tokens_.begin() + (end_b - n));
}

void NgramIndex::Push(int32_t token) {
  tokens_.push_back(token);
  // The n-grams ending just before the new token now have a continuation: the new token.
  const int64_t start = static_cast<int64_t>(tokens_.size()) - 1;
  for (int64_t n = min_n_; n <= max_n_ && n <= start; ++n) {
    by_n_[n - min_n_][Key(start, n)].push_back(start);
  }
}

int64_t NgramIndex::PickStart(const std::vector<int64_t>& starts, int64_t n, int64_t max_tokens,
                              const NgramLookupRule& rule) const {
  const int64_t len = static_cast<int64_t>(tokens_.size());
  // The latest start a usable occurrence may have: its continuation holds max_tokens tokens
  // (full) or one; the earliest rule also keeps it before the context's final n-gram.
  int64_t last = rule.full_continuation ? len - max_tokens : len - 1;
  if (rule.occurrence == NgramOccurrence::kEarliest) {
    last = std::min(last, len - n - 1);
    return !starts.empty() && starts.front() <= last ? starts.front() : -1;
  }
  const auto it = std::upper_bound(starts.begin(), starts.end(), last);
  return it == starts.begin() ? -1 : *(it - 1);
}

int64_t NgramIndex::Lookup(int64_t max_tokens, std::vector<int32_t>& out,
                           const NgramLookupRule& rule) const {
  const int64_t len = static_cast<int64_t>(tokens_.size());
  if (max_tokens <= 0) return 0;
  for (int64_t n = std::min(max_n_, len); n >= min_n_; --n) {
    const auto& map = by_n_[n - min_n_];
    const auto it = map.find(Key(len, n));
    if (it == map.end()) continue;
    const int64_t start = PickStart(it->second, n, max_tokens, rule);
    if (start < 0 || !SameNgram(start, len, n)) continue;  // none usable, or a hash collision
    const int64_t end = std::min(len, start + max_tokens);
    out.insert(out.end(), tokens_.begin() + start, tokens_.begin() + end);
    return n;
  }
  return 0;
}

}  // namespace specbed
