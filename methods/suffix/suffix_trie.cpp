// SuffixTrie (see suffix_trie.h).
#include "methods/suffix/suffix_trie.h"

#include "base/error.h"

namespace specbed {
namespace {

uint64_t EdgeKey(int32_t parent, int32_t token) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(parent)) << 32) |
         static_cast<uint32_t>(token);
}

}  // namespace

SuffixTrie::SuffixTrie(int64_t max_depth) : max_depth_(max_depth) {
  SPECBED_CHECK(max_depth >= 1, "suffix trie: max_depth must be >= 1, got ", max_depth);
  Clear();
}

void SuffixTrie::Clear() {
  nodes_.assign(1, Node());
  edges_.clear();
  active_.clear();
}

int32_t SuffixTrie::Child(int32_t node, int32_t token) const {
  const auto it = edges_.find(EdgeKey(node, token));
  return it == edges_.end() ? kNone : it->second;
}

int32_t SuffixTrie::ChildOrAdd(int32_t node, int32_t token) {
  const auto [it, added] =
      edges_.emplace(EdgeKey(node, token), static_cast<int32_t>(nodes_.size()));
  if (added) {
    Node child;
    child.token = token;
    nodes_.push_back(std::move(child));
    nodes_[node].children.push_back(it->second);
  }
  return it->second;
}

void SuffixTrie::Append(int32_t token) {
  next_active_.clear();
  const int32_t one = ChildOrAdd(kRoot, token);
  ++nodes_[one].count;
  next_active_.push_back(one);
  for (int32_t node : active_) {  // each suffix, one token longer
    if (static_cast<int64_t>(next_active_.size()) >= max_depth_) break;
    const int32_t longer = ChildOrAdd(node, token);
    ++nodes_[longer].count;
    next_active_.push_back(longer);
  }
  active_.swap(next_active_);
}

void SuffixTrie::AddSequence(const std::vector<int32_t>& tokens, int64_t delta) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (int64_t start = 0; start < n; ++start) {
    int32_t node = kRoot;
    for (int64_t i = start; i < n && i - start < max_depth_; ++i) {
      node = ChildOrAdd(node, tokens[i]);
      nodes_[node].count += delta;
      SPECBED_CHECK(nodes_[node].count >= 0, "suffix trie: removed a sequence never added");
    }
  }
}

int32_t SuffixTrie::Find(const int32_t* tokens, int64_t n) const {
  int32_t node = kRoot;
  for (int64_t i = 0; i < n && node != kNone; ++i) node = Child(node, tokens[i]);
  return node != kNone && nodes_[node].count > 0 ? node : kNone;
}

int64_t SuffixTrie::continuations(int32_t node) const {
  int64_t sum = 0;
  for (int32_t c : nodes_[node].children) sum += nodes_[c].count;
  return sum;
}

}  // namespace specbed
