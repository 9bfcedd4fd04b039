// DraftTree: node bookkeeping, consistency checks, root paths and verify-slot positions.
// Checked by: tests/methods/draft_tree_test.cpp.
#include "methods/common/draft_tree.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"

namespace specbed {

int32_t DraftTree::max_depth() const {
  int32_t deepest = 0;
  for (int32_t d : depth) deepest = std::max(deepest, d);
  return deepest;
}

bool DraftTree::IsChain() const {
  for (size_t i = 0; i < parent.size(); ++i) {
    if (parent[i] != static_cast<int32_t>(i) - 1) return false;
  }
  return true;
}

void DraftTree::Clear() {
  token.clear();
  parent.clear();
  depth.clear();
  draft_logp.clear();
  draft_probs.clear();
  draft_probs_device = nullptr;
  vocab = 0;
}

int32_t DraftTree::AddNode(int32_t token_id, int32_t parent_index, float logp) {
  const int64_t n = size();
  SPECBED_CHECK(parent_index >= -1 && parent_index < n, "DraftTree::AddNode: parent index ",
                parent_index, " is not -1 (the root) or an existing node (tree has ", n, " nodes)");
  SPECBED_CHECK(token_id >= 0, "DraftTree::AddNode: token id ", token_id, " is negative");
  SPECBED_CHECK(n < std::numeric_limits<int32_t>::max(), "DraftTree::AddNode: tree is full");
  const bool given = !std::isnan(logp);
  const bool carries = n == 0 ? given : static_cast<int64_t>(draft_logp.size()) == n;
  SPECBED_CHECK(given == carries, "DraftTree::AddNode: node ", n,
                given ? " has a log-prob but the earlier nodes have none"
                      : " has no log-prob but the earlier nodes have one",
                " (pass logp for every node or for none)");
  if (n == 0) draft_logp.clear();
  token.push_back(token_id);
  parent.push_back(parent_index);
  depth.push_back(parent_index < 0 ? 1 : depth[parent_index] + 1);
  if (given) draft_logp.push_back(logp);
  return static_cast<int32_t>(n);
}

void DraftTree::ResizeDraftProbs(int64_t vocab_size) {
  SPECBED_CHECK(vocab_size > 0,
                "DraftTree::ResizeDraftProbs: vocabulary size must be positive, got ", vocab_size);
  vocab = vocab_size;
  draft_probs.assign(static_cast<size_t>((size() + 1) * vocab_size), 0.f);
}

void DraftTree::ValidateStructure(int64_t vocab_size) const {
  const int64_t n = size();
  SPECBED_CHECK(vocab_size > 0, "draft tree: vocabulary size must be positive, got ", vocab_size);
  SPECBED_CHECK(static_cast<int64_t>(parent.size()) == n, "draft tree: parent has ", parent.size(),
                " entries, expected ", n, " (one per token)");
  SPECBED_CHECK(static_cast<int64_t>(depth.size()) == n, "draft tree: depth has ", depth.size(),
                " entries, expected ", n, " (one per token)");
  SPECBED_CHECK(draft_logp.empty() || static_cast<int64_t>(draft_logp.size()) == n,
                "draft tree: draft_logp has ", draft_logp.size(), " entries, expected 0 or ", n,
                " (one per token)");
  for (int64_t i = 0; i < n; ++i) {
    const int32_t p = parent[i];
    SPECBED_CHECK(p >= -1 && p < i, "draft tree: parent[", i, "] = ", p,
                  " must be -1 (the root) or an earlier node index (< ", i,
                  "): nodes must be in topological order");
    const int32_t expected_depth = p < 0 ? 1 : depth[p] + 1;
    SPECBED_CHECK(depth[i] == expected_depth, "draft tree: depth[", i, "] = ", depth[i],
                  ", expected ", expected_depth,
                  p < 0 ? " (child of the root)" : " (depth of its parent + 1)");
    SPECBED_CHECK(token[i] >= 0 && token[i] < vocab_size, "draft tree: token[", i, "] = ", token[i],
                  " is outside the vocabulary [0, ", vocab_size, ")");
    if (!draft_logp.empty()) {
      SPECBED_CHECK(draft_logp[i] <= 0.f, "draft tree: draft_logp[", i, "] = ", draft_logp[i],
                    " is not a log-probability (expected <= 0)");
    }
  }
  if (draft_probs_device != nullptr) {
    SPECBED_CHECK(draft_probs.empty(),
                  "draft tree: both draft_probs (host) and "
                  "draft_probs_device are set, expected one form of the draft distributions");
    SPECBED_CHECK(vocab == vocab_size, "draft tree: draft_probs_device rows have ", vocab,
                  " entries (vocab), expected the vocabulary size ", vocab_size);
    return;
  }
  if (draft_probs.empty()) {
    SPECBED_CHECK(vocab == 0, "draft tree: vocab = ", vocab,
                  " but draft_probs is empty (expected vocab = 0)");
    return;
  }
  SPECBED_CHECK(vocab == vocab_size, "draft tree: draft_probs rows have ", vocab,
                " entries (vocab), expected the vocabulary size ", vocab_size);
  SPECBED_CHECK(static_cast<int64_t>(draft_probs.size()) == (n + 1) * vocab_size,
                "draft tree: draft_probs has ", draft_probs.size(),
                " floats, expected [n + 1, vocab] = ", n + 1, " x ", vocab_size, " = ",
                (n + 1) * vocab_size);
}

void DraftTree::Validate(int64_t vocab_size) const {
  ValidateStructure(vocab_size);
  const int64_t n = size();
  if (draft_probs.empty()) return;
  // Slots with at least one child must carry the distribution their children were drafted from.
  std::vector<char> has_child(static_cast<size_t>(n + 1), 0);
  for (int64_t i = 0; i < n; ++i) has_child[parent[i] + 1] = 1;
  for (int64_t s = 0; s <= n; ++s) {
    const float* row = DraftProbsRow(s);
    double sum = 0.0;
    for (int64_t v = 0; v < vocab_size; ++v) {
      SPECBED_CHECK(row[v] >= 0.f && std::isfinite(row[v]), "draft tree: draft_probs[slot ", s,
                    ", token ", v, "] = ", row[v], " is not a probability");
      sum += row[v];
    }
    if (has_child[s]) {
      SPECBED_CHECK(std::abs(sum - 1.0) <= 1e-2, "draft tree: draft_probs row of slot ", s,
                    " sums to ", sum, ", expected 1 (the slot has children)");
    }
  }
}

std::vector<int32_t> PathTo(const DraftTree& tree, int32_t node) {
  SPECBED_CHECK(node >= -1 && node < tree.size(), "PathTo: node ", node,
                " is not -1 (the root) or a node of the tree (", tree.size(), " nodes)");
  std::vector<int32_t> path;
  if (node < 0) return path;
  path.reserve(static_cast<size_t>(tree.depth[node]));
  for (int32_t i = node; i >= 0; i = tree.parent[i]) path.push_back(i);
  std::reverse(path.begin(), path.end());
  return path;
}

void TreePositions(const DraftTree& tree, int64_t base, std::vector<int64_t>& positions) {
  const int64_t n = tree.size();
  positions.resize(static_cast<size_t>(n + 1));
  positions[0] = base;
  for (int64_t i = 0; i < n; ++i) positions[i + 1] = base + tree.depth[i];
}

}  // namespace specbed
