// Static draft-tree templates over ranks: a node is "the r-th best candidate below my parent",
// the shape Token Recycling (successors from an adjacency matrix) and Medusa (head k's top-r at
// depth k + 1) draft from. Built from a geometric prior or from measured per-rank accuracies
// (Medusa's calibrated tree), parsed from Medusa's published "medusa choices" format (a list of
// rank paths), or Token Recycling's published tree.
// Checked by: tests/methods/recycling_test.cpp (prior and published templates),
// tests/methods/medusa_test.cpp (choices parsing and refusals; the calibrated tree on a hand
// example, reordered ranks, and equal to the prior's tree under the prior's accuracies).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specbed {

// One template node: its token is the `rank`-th candidate (0 = best) below its parent (-1 = the
// root); depth 1 = a child of the root.
struct TemplateNode {
  int32_t parent = -1;
  int32_t rank = 0;
  int32_t depth = 1;
};

// The `nodes` most likely rank paths, most likely first, under a geometric prior (the r-th
// candidate is taken with weight 2^-(r + 1), so a path's weight is 2^-(sum of (rank + 1))), ranks
// below `top_k`, depth at most `max_depth` (0 = unbounded); ties go to the shallower path, then to
// the one found first. Parents precede their children. Fewer nodes when the depth bound leaves
// fewer paths. nodes >= 1, top_k >= 1, max_depth >= 0.
std::vector<TemplateNode> BuildRankTemplate(int64_t nodes, int64_t top_k, int64_t max_depth = 0);

// Medusa's calibrated sparse tree: the `nodes` rank paths of largest expected acceptance when
// depth d's r-th candidate is right with probability accuracy[d - 1][r], independently (a path's
// weight is the product along it; Medusa's greedy tree search adds nodes in this order). Depth at
// most accuracy.size(), ranks below accuracy[d].size(); ties go to the shallower path, then to
// the one found first. Parents precede their children. accuracy: non-empty rows, values in
// [0, 1].
std::vector<TemplateNode> BuildCalibratedRankTemplate(
    int64_t nodes, const std::vector<std::vector<double>>& accuracy);

// Token Recycling's static tree (Luo et al., ACL 2025, Figure 5): 80 nodes, 6 deep (8, 21, 25,
// 15, 8 and 3 nodes per depth), ranks below 8, the root's children its top 8. Breadth-first
// (parents precede children; a node's children are ranks 0, 1, ...); the first `nodes` of it
// when nodes < 80.
std::vector<TemplateNode> TokenRecyclingPaperTemplate(int64_t nodes = 80);

// A template from rank paths in Medusa's "medusa choices" format, e.g. "[[0], [0, 0], [1]]" (JSON):
// every path non-empty, ranks in [0, top_k), at most `max_depth` long, no path twice, every
// proper prefix present. Nodes come out sorted by depth, then by path (Medusa's order), so parents
// precede children. Throws specbed::Error naming `context` and the offending path.
std::vector<TemplateNode> ParseRankChoices(const std::string& json, int64_t top_k,
                                           int64_t max_depth, const std::string& context);

}  // namespace specbed
