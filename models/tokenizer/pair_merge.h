// Greedy adjacent-pair merging, the core both BPE encoders share (llama2.c's score-based merge,
// byte-level BPE's rank-based merge): repeatedly merge the adjacent pair of lowest priority
// (leftmost on ties) into its merged token until no pair merges. The symbols sit in a doubly
// linked list and a min-heap holds the candidate merges keyed by (priority, position); entries a
// merge made stale are skipped when popped, so a piece of n symbols costs O(n log n).
// Checked by: tests/tokenizer/llama2c_tokenizer_test.cpp, tests/tokenizer/hf_tokenizer_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <vector>

namespace specbed {

// How one pair merges: into `merged_id`, ahead of every pair of higher priority.
struct PairMerge {
  double priority;
  int32_t merged_id;
};

// `ids` after every merge; merge_of(left_id, right_id) gives the pair's PairMerge, or nothing
// when that pair does not merge.
template <class MergeOf>
std::vector<int32_t> MergeAdjacentPairs(std::vector<int32_t> ids, MergeOf merge_of) {
  const int n = static_cast<int>(ids.size());
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    double priority;
    int left, right;
    int32_t left_id, right_id, merged_id;
    bool operator>(const Candidate& o) const {
      return priority != o.priority ? priority > o.priority : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push_pair = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    const int right = next[left];
    const std::optional<PairMerge> m = merge_of(ids[left], ids[right]);
    if (m) heap.push({m->priority, left, right, ids[left], ids[right], m->merged_id});
  };
  for (int i = 0; i + 1 < n; ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    if (ids[c.left] != c.left_id || next[c.left] != c.right || ids[c.right] != c.right_id) {
      continue;  // stale
    }
    ids[c.left] = c.merged_id;
    ids[c.right] = -1;
    next[c.left] = next[c.right];
    if (next[c.left] >= 0) prev[next[c.left]] = c.left;
    push_pair(prev[c.left]);
    push_pair(c.left);
  }
  std::vector<int32_t> out;
  for (int i = n > 0 ? 0 : -1; i >= 0; i = next[i]) out.push_back(ids[i]);
  return out;
}

}  // namespace specbed
