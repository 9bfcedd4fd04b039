// Draft-tree builders (chain, EAGLE-2/3 beam tree, DDTree best-first tree, JetSpec
// group-expansion tree), ChildrenLists and
// RandomTree. Algorithms, tie-breaking and budget semantics are documented in tree_builders.h.
// Checked by: tests/methods/draft_tree_test.cpp.
#include "methods/common/tree_builders.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "base/error.h"

namespace specbed {

// ---------------------------------------------------------------------------------------------
// Chain.

void BuildChain(const int32_t* tokens, int64_t n, DraftTree& tree, const float* logp) {
  SPECBED_CHECK(n >= 0, "BuildChain: token count must be >= 0, got ", n);
  SPECBED_CHECK(n == 0 || tokens != nullptr, "BuildChain: tokens is null for ", n, " tokens");
  SPECBED_CHECK(n < std::numeric_limits<int32_t>::max(), "BuildChain: ", n, " tokens is too many");
  tree.Clear();
  tree.token.resize(static_cast<size_t>(n));
  tree.parent.resize(static_cast<size_t>(n));
  tree.depth.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    SPECBED_CHECK(tokens[i] >= 0, "BuildChain: tokens[", i, "] = ", tokens[i], " is negative");
    tree.token[i] = tokens[i];
    tree.parent[i] = static_cast<int32_t>(i - 1);
    tree.depth[i] = static_cast<int32_t>(i + 1);
  }
  if (logp != nullptr) tree.draft_logp.assign(logp, logp + n);
}

void BuildChain(const std::vector<int32_t>& tokens, DraftTree& tree,
                const std::vector<float>& logp) {
  SPECBED_CHECK(logp.empty() || logp.size() == tokens.size(), "BuildChain: logp has ", logp.size(),
                " entries, expected 0 or ", tokens.size(), " (one per token)");
  BuildChain(tokens.data(), static_cast<int64_t>(tokens.size()), tree,
             logp.empty() ? nullptr : logp.data());
}

// ---------------------------------------------------------------------------------------------
// EAGLE-2/3 dynamic tree.

namespace {

// The beam of the next layer: the (at most) k best candidates of [layer_begin, layer_end) by
// score desc, then index asc. order: scratch.
void SelectBeam(const std::vector<float>& scores, int64_t layer_begin, int64_t layer_end, int64_t k,
                std::vector<int32_t>& order, std::vector<int32_t>& frontier) {
  order.resize(static_cast<size_t>(layer_end - layer_begin));
  std::iota(order.begin(), order.end(), static_cast<int32_t>(layer_begin));
  const int64_t m = std::min<int64_t>(k, static_cast<int64_t>(order.size()));
  std::partial_sort(order.begin(), order.begin() + m, order.end(), [&](int32_t a, int32_t b) {
    const float sa = scores[a], sb = scores[b];
    return sa > sb || (sa == sb && a < b);
  });
  frontier.assign(order.begin(), order.begin() + m);
}

// Appends the expander's k children of every frontier node at depth d (tokens and log-probs,
// rank-major per node) to the candidates, with scores = parent score + log-prob; checks what
// the expander returned.
void AddExpansion(const std::vector<int32_t>& frontier, const std::vector<int32_t>& tokens,
                  const std::vector<float>& logp, int64_t k, int64_t d, DraftTree& candidates,
                  std::vector<float>& scores) {
  for (size_t f = 0; f < frontier.size(); ++f) {
    const int32_t parent = frontier[f];
    const float parent_score = parent < 0 ? 0.f : scores[parent];
    for (int64_t r = 0; r < k; ++r) {
      const size_t e = f * static_cast<size_t>(k) + static_cast<size_t>(r);
      const int32_t token = tokens[e];
      const float lp = logp[e];
      SPECBED_CHECK(token >= 0, "beam tree: the expander gave token ", token,
                    " (negative or unset) for child ", r, " of node ", parent, " at depth ", d);
      SPECBED_CHECK(lp <= 0.f, "beam tree: the expander gave log-prob ", lp,
                    " (expected <= 0, not NaN/unset) for child ", r, " of node ", parent,
                    " at depth ", d);
      SPECBED_CHECK(r == 0 || lp <= logp[e - 1], "beam tree: the expander's log-probs below node ",
                    parent, " at depth ", d, " are not sorted in non-increasing order (rank ",
                    r - 1, ": ", logp[e - 1], ", rank ", r, ": ", lp, ")");
      candidates.AddNode(token, parent, lp);
      scores.push_back(parent_score + lp);
    }
  }
}

// The layers a beam tree of `options` can grow (min(depth, budget)), after checking the options.
int64_t CheckedLayers(const BeamTreeOptions& options) {
  const int64_t k = options.top_k;
  SPECBED_CHECK(options.depth >= 1, "beam tree: depth must be >= 1, got ", options.depth);
  SPECBED_CHECK(k >= 1, "beam tree: top_k must be >= 1, got ", k);
  SPECBED_CHECK(options.budget >= 0, "beam tree: budget must be >= 0, got ", options.budget);
  const int64_t layers = std::min(options.depth, options.budget);
  const double max_candidates =
      static_cast<double>(k) + static_cast<double>(std::max<int64_t>(layers - 1, 0)) * k * k;
  SPECBED_CHECK(max_candidates < static_cast<double>(std::numeric_limits<int32_t>::max()),
                "beam tree: top_k = ", k, " and depth = ", layers, " give too many candidates");
  return layers;
}

}  // namespace

void BeamTreeBuilder::Build(TopKExpander& expander, const BeamTreeOptions& options,
                            DraftTree& tree) {
  const int64_t k = options.top_k;
  const int64_t layers = CheckedLayers(options);

  candidates_.Clear();
  candidate_scores_.clear();
  candidate_to_node_.clear();
  node_to_candidate_.clear();
  node_scores_.clear();
  tree.Clear();
  layers_built_ = 0;
  if (options.budget == 0) return;

  // Expansion: layer by layer, beam of width k over the latest layer.
  frontier_.assign(1, -1);
  int64_t layer_begin = 0;
  for (int64_t d = 1; d <= layers; ++d) {
    if (d > 1) {
      const int64_t layer_end = candidates_.size();
      SelectBeam(candidate_scores_, layer_begin, layer_end, k, order_, frontier_);
      layer_begin = layer_end;
    }
    const size_t count = frontier_.size() * static_cast<size_t>(k);
    expand_tokens_.assign(count, -1);
    expand_logp_.assign(count, std::numeric_limits<float>::quiet_NaN());
    expander.Expand(candidates_, frontier_, k, expand_tokens_, expand_logp_);
    SPECBED_CHECK(expand_tokens_.size() == count && expand_logp_.size() == count,
                  "beam tree: the expander returned ", expand_tokens_.size(), " tokens and ",
                  expand_logp_.size(), " log-probs at depth ", d, ", expected ", count, " (",
                  frontier_.size(), " frontier nodes x top_k ", k, ")");
    AddExpansion(frontier_, expand_tokens_, expand_logp_, k, d, candidates_, candidate_scores_);
    layers_built_ = d;
    if (d >= 2 && d < layers && !expander.ContinueGrowing(candidate_scores_, layer_begin, d)) break;
  }

  Keep(std::clamp<int64_t>(expander.KeepBudget(candidate_scores_, layers_built_, options.budget),
                           std::min<int64_t>(1, options.budget), options.budget),
       tree);
}

void BeamTreeBuilder::BuildFromCandidates(const int32_t* tokens, const int32_t* parents,
                                          const float* logp, const float* scores, int64_t n,
                                          int64_t layers, int64_t budget, DraftTree& tree) {
  SPECBED_CHECK(budget >= 0 && n >= 0 && layers >= 0,
                "beam tree: budget, candidates and layers "
                "must be >= 0 (got ",
                budget, ", ", n, ", ", layers, ")");
  candidates_.Clear();
  candidate_scores_.assign(scores, scores + n);
  candidate_to_node_.clear();
  node_to_candidate_.clear();
  node_scores_.clear();
  tree.Clear();
  layers_built_ = layers;
  for (int64_t c = 0; c < n; ++c) {
    SPECBED_CHECK(tokens[c] >= 0 && parents[c] >= -1 && parents[c] < c && logp[c] <= 0.f,
                  "beam tree: candidate ", c, " has token ", tokens[c], ", parent ", parents[c],
                  " and log-prob ", logp[c],
                  " (expected a token >= 0, an earlier parent or -1, "
                  "a log-prob <= 0)");
    candidates_.AddNode(tokens[c], parents[c], logp[c]);
  }
  if (budget > 0) Keep(budget, tree);
}

void BeamTreeBuilder::Keep(int64_t wanted, DraftTree& tree) {
  // Reranking: keep the `wanted` best candidates under (score desc, depth asc, index asc).
  const int64_t total = candidates_.size();
  const int64_t kept = std::min(wanted, total);
  if (kept <= 0) return;
  order_.resize(static_cast<size_t>(total));
  std::iota(order_.begin(), order_.end(), 0);
  std::nth_element(order_.begin(), order_.begin() + (kept - 1), order_.end(),
                   [this](int32_t a, int32_t b) {
                     const float sa = candidate_scores_[a], sb = candidate_scores_[b];
                     if (sa != sb) return sa > sb;
                     const int32_t da = candidates_.depth[a], db = candidates_.depth[b];
                     return da != db ? da < db : a < b;
                   });
  // Output order: BFS (depth asc), then score desc, then candidate index.
  std::sort(order_.begin(), order_.begin() + kept, [this](int32_t a, int32_t b) {
    const int32_t da = candidates_.depth[a], db = candidates_.depth[b];
    if (da != db) return da < db;
    const float sa = candidate_scores_[a], sb = candidate_scores_[b];
    return sa != sb ? sa > sb : a < b;
  });
  candidate_to_node_.assign(static_cast<size_t>(total), -1);
  for (int64_t j = 0; j < kept; ++j) {
    const int32_t c = order_[j];
    const int32_t parent_candidate = candidates_.parent[c];
    const int32_t parent_node = parent_candidate < 0 ? -1 : candidate_to_node_[parent_candidate];
    // Ancestor closure (proof in tree_builders.h); parents come first in BFS order.
    SPECBED_CHECK(parent_candidate < 0 || parent_node >= 0,
                  "beam tree: internal error: kept candidate ", c, " has pruned parent candidate ",
                  parent_candidate);
    candidate_to_node_[c] =
        tree.AddNode(candidates_.token[c], parent_node, candidates_.draft_logp[c]);
    node_to_candidate_.push_back(c);
    node_scores_.push_back(candidate_scores_[c]);
  }
}

void BuildBeamTree(TopKExpander& expander, const BeamTreeOptions& options, DraftTree& tree) {
  BeamTreeBuilder builder;
  builder.Build(expander, options, tree);
}

// ---------------------------------------------------------------------------------------------
// DDTree best-first tree.

namespace {

// Checks the [D, K] top-K inputs shared by the DDTree and JetSpec builders; `what` names the
// builder in the messages.
void CheckTopKMarginals(const char* what, const float* logp, const int32_t* tokens, int64_t D,
                        int64_t K, int64_t budget) {
  SPECBED_CHECK(D >= 1, what, ": depth D must be >= 1, got ", D);
  SPECBED_CHECK(K >= 1, what, ": top-K must be >= 1, got ", K);
  SPECBED_CHECK(budget >= 0, what, ": budget must be >= 0, got ", budget);
  SPECBED_CHECK(logp != nullptr && tokens != nullptr, what, ": logp or tokens is null");
  SPECBED_CHECK(D < std::numeric_limits<int32_t>::max() &&
                    K < std::numeric_limits<int32_t>::max() &&
                    budget < std::numeric_limits<int32_t>::max(),
                what, ": D = ", D, ", K = ", K, ", budget = ", budget, " is too large");
  for (int64_t d = 0; d < D; ++d) {
    const float* row = logp + d * K;
    for (int64_t r = 0; r < K; ++r) {
      SPECBED_CHECK(row[r] <= 0.f, what, ": logp[", d, ", ", r, "] = ", row[r],
                    " is not a log-probability (expected <= 0, not NaN)");
      SPECBED_CHECK(r == 0 || row[r] <= row[r - 1], what, ": logp row ", d,
                    " is not sorted in non-increasing order (rank ", r - 1, ": ", row[r - 1],
                    ", rank ", r, ": ", row[r], ")");
      SPECBED_CHECK(tokens[d * K + r] >= 0, what, ": tokens[", d, ", ", r,
                    "] = ", tokens[d * K + r], " is negative");
    }
  }
}

}  // namespace

void MarginalTreeBuilder::BeginBuild(const char* what, const float* logp, const int32_t* tokens,
                                     int64_t D, int64_t K, int64_t budget, DraftTree& tree) {
  CheckTopKMarginals(what, logp, tokens, D, K, budget);
  tree.Clear();
  node_scores_.clear();
  node_ranks_.clear();
}

void BestFirstTreeBuilder::Build(const float* logp, const int32_t* tokens, int64_t D, int64_t K,
                                 int64_t budget, DraftTree& tree) {
  BeginBuild("best-first tree", logp, tokens, D, K, budget, tree);
  heap_.clear();
  if (budget == 0) return;

  // "a ranks after b" (the max-heap's less-than): score desc, depth asc, parent asc, rank asc.
  const auto after = [](const Entry& a, const Entry& b) {
    if (a.score != b.score) return a.score < b.score;
    if (a.depth != b.depth) return a.depth > b.depth;
    if (a.parent != b.parent) return a.parent > b.parent;
    return a.rank > b.rank;
  };
  heap_.push_back(Entry{0.f + logp[0], 1, -1, 0});
  while (tree.size() < budget && !heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), after);
    const Entry e = heap_.back();
    heap_.pop_back();
    const int64_t row = static_cast<int64_t>(e.depth - 1) * K;
    const int32_t node = tree.AddNode(tokens[row + e.rank], e.parent, logp[row + e.rank]);
    node_scores_.push_back(e.score);
    node_ranks_.push_back(e.rank);
    if (e.rank + 1 < K) {  // next sibling
      const float parent_score = e.parent < 0 ? 0.f : node_scores_[e.parent];
      heap_.push_back(Entry{parent_score + logp[row + e.rank + 1], e.depth, e.parent, e.rank + 1});
      std::push_heap(heap_.begin(), heap_.end(), after);
    }
    if (e.depth < D) {  // first child
      heap_.push_back(Entry{e.score + logp[row + K], e.depth + 1, node, 0});
      std::push_heap(heap_.begin(), heap_.end(), after);
    }
  }
}

void BuildBestFirstTree(const float* logp, const int32_t* tokens, int64_t D, int64_t K,
                        int64_t budget, DraftTree& tree) {
  BestFirstTreeBuilder builder;
  builder.Build(logp, tokens, D, K, budget, tree);
}

// ---------------------------------------------------------------------------------------------
// JetSpec group-expansion tree.

void GroupExpandTreeBuilder::Build(const float* logp, const int32_t* tokens, int64_t D, int64_t K,
                                   int64_t budget, DraftTree& tree) {
  BeginBuild("group-expand tree", logp, tokens, D, K, budget, tree);
  heap_.clear();
  expanded_ = 0;
  if (budget == 0) return;

  // "a ranks after b" (the max-heap's less-than): score desc, creation index asc (root = -1).
  const auto after = [](const Entry& a, const Entry& b) {
    if (a.score != b.score) return a.score < b.score;
    return a.node > b.node;
  };
  heap_.push_back(Entry{0.f, -1});
  while (tree.size() < budget && !heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), after);
    const Entry e = heap_.back();
    heap_.pop_back();
    const int64_t depth = e.node < 0 ? 0 : tree.depth[e.node];  // children go to depth + 1 <= D
    ++expanded_;
    const int64_t row = depth * K;
    const int64_t group = std::min(K, budget - tree.size());
    for (int64_t r = 0; r < group; ++r) {
      const int32_t node = tree.AddNode(tokens[row + r], e.node, logp[row + r]);
      const float score = e.score + logp[row + r];
      node_scores_.push_back(score);
      node_ranks_.push_back(static_cast<int32_t>(r));
      if (depth + 1 < D) {  // a node at depth D is never expanded
        heap_.push_back(Entry{score, node});
        std::push_heap(heap_.begin(), heap_.end(), after);
      }
    }
  }
}

void BuildGroupExpandTree(const float* logp, const int32_t* tokens, int64_t D, int64_t K,
                          int64_t budget, DraftTree& tree) {
  GroupExpandTreeBuilder builder;
  builder.Build(logp, tokens, D, K, budget, tree);
}

// ---------------------------------------------------------------------------------------------
// Derived structures.

void ChildrenLists(const DraftTree& tree, std::vector<int32_t>& first_child,
                   std::vector<int32_t>& next_sibling) {
  const int64_t n = tree.size();
  first_child.assign(static_cast<size_t>(n + 1), -1);
  next_sibling.resize(static_cast<size_t>(n));
  for (int64_t i = n - 1; i >= 0; --i) {
    const int32_t slot = tree.parent[i] + 1;
    next_sibling[i] = first_child[slot];
    first_child[slot] = static_cast<int32_t>(i);
  }
}

// ---------------------------------------------------------------------------------------------
// Random trees.

namespace {

// Uniform integer in [0, n) (n >= 1) from 64 random bits (multiply-shift; bias < n / 2^64).
int64_t UniformInt(std::mt19937_64& rng, int64_t n) {
  return static_cast<int64_t>((static_cast<unsigned __int128>(rng()) * static_cast<uint64_t>(n)) >>
                              64);
}

// Uniform double in [0, 1) with 53 random bits.
double Uniform01(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// RandomTree's draft distributions: skewed random rows (some entries near 0) in which every
// drafted child token keeps at least 1 / (4 vocab) before normalization.
void AddRandomDraftProbs(const std::vector<std::vector<int32_t>>& children_tokens, int64_t vocab,
                         std::mt19937_64& rng, DraftTree& tree) {
  tree.ResizeDraftProbs(vocab);
  const float floor = 1.f / (4.f * static_cast<float>(vocab));
  for (int64_t s = 0; s <= tree.size(); ++s) {
    float* row = tree.DraftProbsRow(s);
    for (int64_t v = 0; v < vocab; ++v) {
      const double u = Uniform01(rng);
      row[v] = static_cast<float>(u * u * u);  // skewed, some near 0
    }
    for (int32_t t : children_tokens[s]) row[t] = std::max(row[t], floor);
    double sum = 0.0;
    for (int64_t v = 0; v < vocab; ++v) sum += row[v];
    for (int64_t v = 0; v < vocab; ++v) row[v] = static_cast<float>(row[v] / sum);
  }
}

}  // namespace

DraftTree RandomTree(int64_t n, int64_t vocab, uint64_t seed, const RandomTreeOptions& options) {
  SPECBED_CHECK(n >= 0 && n < std::numeric_limits<int32_t>::max(), "RandomTree: node count ", n,
                " is out of range");
  SPECBED_CHECK(vocab >= 1, "RandomTree: vocabulary size must be >= 1, got ", vocab);
  SPECBED_CHECK(options.max_depth >= 0, "RandomTree: max_depth must be >= 0, got ",
                options.max_depth);
  std::mt19937_64 rng(seed);
  DraftTree tree;
  // children_tokens[s]: tokens of the children of slot s so far.
  std::vector<std::vector<int32_t>> children_tokens(static_cast<size_t>(n + 1));
  std::vector<int32_t> eligible = {-1};  // possible parents: the root and nodes above max_depth
  std::vector<int32_t> open;
  std::vector<int32_t> unused;
  const bool limit_depth = !options.chain && options.max_depth > 0;
  for (int64_t i = 0; i < n; ++i) {
    int32_t parent = static_cast<int32_t>(i - 1);
    if (!options.chain) {
      parent = eligible[UniformInt(rng, static_cast<int64_t>(eligible.size()))];
      const bool distinct = options.duplicate_sibling_prob <= 0.0;
      if (distinct && static_cast<int64_t>(children_tokens[parent + 1].size()) >= vocab) {
        open.clear();
        for (int32_t p : eligible) {
          if (static_cast<int64_t>(children_tokens[p + 1].size()) < vocab) open.push_back(p);
        }
        SPECBED_CHECK(!open.empty(), "RandomTree: cannot place node ", i,
                      " with distinct sibling "
                      "tokens (vocab ",
                      vocab, ", max_depth ", options.max_depth, ")");
        parent = open[UniformInt(rng, static_cast<int64_t>(open.size()))];
      }
    }
    std::vector<int32_t>& siblings = children_tokens[parent + 1];
    int32_t token = -1;
    if (!siblings.empty() && options.duplicate_sibling_prob > 0.0 &&
        Uniform01(rng) < options.duplicate_sibling_prob) {
      token = siblings[UniformInt(rng, static_cast<int64_t>(siblings.size()))];
    } else if (options.duplicate_sibling_prob > 0.0 || options.chain) {
      token = static_cast<int32_t>(UniformInt(rng, vocab));
    } else {
      // Distinct from the siblings: rejection first, then an explicit draw from the unused ones.
      for (int attempt = 0; attempt < 64 && token < 0; ++attempt) {
        const int32_t t = static_cast<int32_t>(UniformInt(rng, vocab));
        if (std::find(siblings.begin(), siblings.end(), t) == siblings.end()) token = t;
      }
      if (token < 0) {
        unused.clear();
        for (int32_t t = 0; t < vocab; ++t) {
          if (std::find(siblings.begin(), siblings.end(), t) == siblings.end()) unused.push_back(t);
        }
        token = unused[UniformInt(rng, static_cast<int64_t>(unused.size()))];
      }
    }
    siblings.push_back(token);
    const int32_t node = tree.AddNode(token, parent);
    if (!limit_depth || tree.depth[node] < options.max_depth) eligible.push_back(node);
  }

  if (options.with_draft_probs) AddRandomDraftProbs(children_tokens, vocab, rng, tree);
  if (options.with_logp) {
    tree.draft_logp.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      tree.draft_logp[i] = options.with_draft_probs
                               ? std::log(tree.DraftProbsRow(tree.parent[i] + 1)[tree.token[i]])
                               : static_cast<float>(-6.0 * Uniform01(rng));
    }
  }
  return tree;
}

}  // namespace specbed
