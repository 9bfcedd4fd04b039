// The counted substring trie of the `suffix` method (suffix decoding, Oliaro et al. 2025): every
// substring of up to `max_depth` tokens of the sequences added, with its number of occurrences.
// A node's children are the tokens that followed it and their counts, which is what suffix
// decoding reads to grow a speculation tree. Two ways in: Append extends the running sequence
// by one token (the per-request trie, O(max_depth) per token), AddSequence adds or removes every
// substring of a whole sequence (the global trie over earlier outputs). No LibTorch.
// Checked by: tests/methods/suffix_test.cpp (SuffixTrie.* against brute-force counts).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

namespace specbed {

class SuffixTrie {
 public:
  static constexpr int32_t kRoot = 0;
  static constexpr int32_t kNone = -1;

  explicit SuffixTrie(int64_t max_depth);

  void Clear();
  // Appends a token to the running sequence: counts the substrings that end with it.
  void Append(int32_t token);
  // Adds (delta = +1) or removes (delta = -1, after the same sequence was added) every substring
  // of `tokens` up to max_depth long. Independent of the running sequence.
  void AddSequence(const std::vector<int32_t>& tokens, int64_t delta);

  // The node of tokens[0, n), or kNone when that substring never occurred (n <= max_depth).
  int32_t Find(const int32_t* tokens, int64_t n) const;
  int64_t count(int32_t node) const { return nodes_[node].count; }
  int32_t token(int32_t node) const { return nodes_[node].token; }
  // Children ever added (some may have count 0 after a removal).
  const std::vector<int32_t>& children(int32_t node) const { return nodes_[node].children; }
  // Sum of the children's counts: how often the node's substring was followed by a token.
  int64_t continuations(int32_t node) const;
  int64_t max_depth() const { return max_depth_; }

 private:
  struct Node {
    int64_t count = 0;
    int32_t token = -1;
    std::vector<int32_t> children;
  };
  int32_t Child(int32_t node, int32_t token) const;
  int32_t ChildOrAdd(int32_t node, int32_t token);

  int64_t max_depth_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> edges_;  // (parent << 32 | token) -> child
  // Nodes of the running sequence's suffixes, shortest first (lengths 1..max_depth).
  std::vector<int32_t> active_, next_active_;
};

}  // namespace specbed
