// The one draft-tree representation every method produces and the verifier consumes, plus the
// tree builders later methods share (chain; EAGLE-2/3-style top-k beam expansion reranked by
// cumulative log-probability; DDTree-style best-first expansion from per-depth top-K marginals).
//
// Conventions (used everywhere in SpecBed):
// - The *root* is the last committed token. It is not part of the tree and not yet in the
//   target's KV cache; the verify forward runs over [root, node 0, ..., node n-1].
// - Nodes are stored flat in topological order: parent[i] < i, parent[i] = -1 for a child of
//   the root. depth[i] = 1 for children of the root, depth[parent] + 1 otherwise.
// - "Slot" s of a verify forward: slot 0 = root, slot i + 1 = node i.
// - The *budget* of a tree is its number of drafted nodes, root excluded (size()).
// - A chain is a tree with parent[i] = i - 1.
// - Optional per-node draft log-probabilities (draft_logp[i] = log q(token[i] | parent path))
//   and optional per-slot draft distributions (draft_probs row s = the distribution over
//   vocabulary the children of slot s were sampled from), needed by the rejection verifiers:
//   on the host (draft_probs) or, from a drafter on the ATen path, left on the target's device
//   (draft_probs_device).
// Checked by: tests/methods/draft_tree_test.cpp.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

namespace at {
class Tensor;  // specbed_draft builds without LibTorch; draft_probs_device is read by ATen code
}  // namespace at

namespace specbed {

// Default `logp` of DraftTree::AddNode: "no log-probability for this node".
inline constexpr float kNoLogp = std::numeric_limits<float>::quiet_NaN();

struct DraftTree {
  std::vector<int32_t> token;     // [n]
  std::vector<int32_t> parent;    // [n], -1 = child of the root
  std::vector<int32_t> depth;     // [n], >= 1
  std::vector<float> draft_logp;  // [n] or empty
  // Row-major [n + 1, vocab] float32 probabilities (rows sum to 1), or empty. Row s is the
  // draft distribution at slot s (0 = root).
  std::vector<float> draft_probs;
  int64_t vocab = 0;  // row length of the draft distributions (0 when there are none)
  // The same distributions left on the device by a drafter on the ATen path (no host copy): the
  // drafter's own float32 [>= n + 1, vocab] buffer on the target's device, whose rows [0, n + 1)
  // are this tree's (row s as draft_probs), or nullptr. When set, draft_probs is empty. Owned by
  // the drafter and valid until its next Draft or Begin; read through LibTorch by the verifier
  // (DeviceVerifier::AcceptSampled, which checks its device, dtype and shape; AcceptTree copies it
  // to the host once).
  const at::Tensor* draft_probs_device = nullptr;

  int64_t size() const { return static_cast<int64_t>(token.size()); }
  bool empty() const { return token.empty(); }
  int32_t max_depth() const;
  bool has_draft_probs() const { return !draft_probs.empty() || draft_probs_device != nullptr; }
  // True when every node's parent is the previous node.
  bool IsChain() const;

  // Removes every node and the draft distributions (vocab = 0, draft_probs_device = nullptr);
  // keeps capacity (a drafter
  // reuses one tree per step without allocating).
  void Clear();
  // Appends a node below `parent_index` (-1 = root); returns its index. `logp` is stored only
  // when the tree carries draft_logp (pass it for every node or for none): the first node
  // decides (logp given, i.e. not kNoLogp = NaN, or not); a later node that differs throws.
  // draft_probs is left alone (size it with ResizeDraftProbs once the nodes are in, or
  // preallocate [n_max + 1, vocab] rows and fill them while adding nodes).
  // Throws specbed::Error if parent_index is not -1 or an existing node, or token_id < 0.
  int32_t AddNode(int32_t token_id, int32_t parent_index, float logp = kNoLogp);
  // Sizes draft_probs to [size() + 1, vocab_size] (all zeros) and sets vocab; DraftProbsRow(s)
  // then returns the row of slot s.
  void ResizeDraftProbs(int64_t vocab_size);
  float* DraftProbsRow(int64_t slot) { return draft_probs.data() + slot * vocab; }
  const float* DraftProbsRow(int64_t slot) const { return draft_probs.data() + slot * vocab; }

  // Throws specbed::Error unless the arrays are consistent (sizes, parent order, depths, token
  // ids in [0, vocab_size), draft_logp size and values <= 0, draft_probs shape [n + 1,
  // vocab_size] with non-negative entries and rows of slots that have children summing to 1
  // within 1e-2). O(n + n * vocab): a check for tests and debugging, not for the decode loop.
  void Validate(int64_t vocab_size) const;
  // The O(n) part of Validate (everything but the draft_probs values; of draft_probs_device only
  // that it comes alone, with vocab = vocab_size): cheap enough for the decode loop, which runs
  // it on every drafted tree. Validate reads no device values either.
  void ValidateStructure(int64_t vocab_size) const;
};

// Node indices from the root's child to `node`, inclusive (root excluded); empty for node = -1
// (the root). Throws specbed::Error unless -1 <= node < tree.size().
std::vector<int32_t> PathTo(const DraftTree& tree, int32_t node);

// RoPE position of every verify slot: positions[0] = base (the root), positions[i+1] =
// base + depth[i].
void TreePositions(const DraftTree& tree, int64_t base, std::vector<int64_t>& positions);

}  // namespace specbed
