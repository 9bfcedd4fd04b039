// BuildRankTemplate and ParseRankChoices (see rank_template.h).
#include "methods/common/rank_template.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <queue>
#include <tuple>

#include <nlohmann/json.hpp>

#include "base/error.h"

namespace specbed {

std::vector<TemplateNode> BuildRankTemplate(int64_t nodes, int64_t top_k, int64_t max_depth) {
  SPECBED_CHECK(nodes >= 1 && top_k >= 1 && max_depth >= 0, "rank template: nodes (", nodes,
                ") and top_k (", top_k, ") must be >= 1, max_depth (", max_depth, ") >= 0");
  // Candidates (cost = sum of rank + 1, depth, discovery order, parent, rank): a popped node
  // offers its first child and its next sibling, so every rank path is found in cost order.
  using Candidate = std::tuple<int64_t, int32_t, int64_t, int32_t, int32_t>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> frontier;
  int64_t found = 0;
  frontier.emplace(1, 1, found++, -1, 0);
  std::vector<TemplateNode> out;
  while (static_cast<int64_t>(out.size()) < nodes && !frontier.empty()) {
    const auto [cost, depth, order, parent, rank] = frontier.top();
    frontier.pop();
    const int32_t self = static_cast<int32_t>(out.size());
    out.push_back({parent, rank, depth});
    if (max_depth == 0 || depth < max_depth)
      frontier.emplace(cost + 1, depth + 1, found++, self, 0);
    if (rank + 1 < top_k) frontier.emplace(cost + 1, depth, found++, parent, rank + 1);
  }
  return out;
}

std::vector<TemplateNode> BuildCalibratedRankTemplate(
    int64_t nodes, const std::vector<std::vector<double>>& accuracy) {
  SPECBED_CHECK(nodes >= 1 && !accuracy.empty(), "calibrated rank template: nodes (", nodes,
                ") must be >= 1 and the accuracy table non-empty");
  // Per depth, the ranks by accuracy (descending, stable): a popped node offers its first child
  // and its next sibling in that order, so every path is found in order of decreasing weight.
  std::vector<std::vector<int32_t>> order(accuracy.size());
  for (size_t d = 0; d < accuracy.size(); ++d) {
    SPECBED_CHECK(!accuracy[d].empty(), "calibrated rank template: depth ", d + 1, " has no rank");
    for (size_t r = 0; r < accuracy[d].size(); ++r) order[d].push_back(static_cast<int32_t>(r));
    std::stable_sort(order[d].begin(), order[d].end(),
                     [&](int32_t a, int32_t b) { return accuracy[d][a] > accuracy[d][b]; });
  }
  // (weight, -depth, -discovery order, parent, position in its depth's order): max-heap.
  using Candidate = std::tuple<double, int32_t, int64_t, int32_t, int32_t>;
  std::priority_queue<Candidate> frontier;
  int64_t found = 0;
  auto offer = [&](double parent_weight, int32_t depth, int32_t parent, int32_t position) {
    const double w = parent_weight * accuracy[depth - 1][order[depth - 1][position]];
    frontier.emplace(w, -depth, -(found++), parent, position);
  };
  offer(1.0, 1, -1, 0);
  std::vector<TemplateNode> out;
  std::vector<double> weight;
  while (static_cast<int64_t>(out.size()) < nodes && !frontier.empty()) {
    const auto [w, neg_depth, neg_order, parent, position] = frontier.top();
    frontier.pop();
    const int32_t depth = -neg_depth, self = static_cast<int32_t>(out.size());
    out.push_back({parent, order[depth - 1][position], depth});
    weight.push_back(w);
    if (depth < static_cast<int32_t>(accuracy.size())) offer(w, depth + 1, self, 0);
    if (position + 1 < static_cast<int32_t>(order[depth - 1].size())) {
      offer(parent < 0 ? 1.0 : weight[parent], depth, parent, position + 1);
    }
  }
  return out;
}

std::vector<TemplateNode> TokenRecyclingPaperTemplate(int64_t nodes) {
  SPECBED_CHECK(nodes >= 1, "Token Recycling template: nodes (", nodes, ") must be >= 1");
  // The published tree as child counts: one entry per node in breadth-first order (the root
  // first); a node's children are its parent's candidates of rank 0 .. count - 1.
  static constexpr int32_t kChildren[] = {
      8,                                                                          // root
      8, 4, 3, 2, 1, 1, 1, 1,                                                     // depth 1
      8, 3, 2, 1, 1, 1, 1, 1, 2, 1, 0, 0, 1, 0, 0, 1, 0, 1, 1, 0, 0,              // depth 2
      5, 2, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0,  // depth 3
      3, 1, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0,                                // depth 4
      2, 0, 0, 1, 0, 0, 0, 0,                                                     // depth 5
  };
  std::vector<TemplateNode> out;
  std::vector<int32_t> depth_of = {0};  // per breadth-first node, the root included
  for (size_t node = 0; node < std::size(kChildren); ++node) {
    for (int32_t rank = 0; rank < kChildren[node]; ++rank) {
      out.push_back({static_cast<int32_t>(node) - 1, rank, depth_of[node] + 1});
      depth_of.push_back(depth_of[node] + 1);
    }
  }
  if (static_cast<int64_t>(out.size()) > nodes) out.resize(static_cast<size_t>(nodes));
  return out;
}

std::vector<TemplateNode> ParseRankChoices(const std::string& json, int64_t top_k,
                                           int64_t max_depth, const std::string& context) {
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(context + ": not JSON (" + e.what() + "); expected a list of rank paths such as " +
                "[[0], [0, 0], [1]]");
  }
  SPECBED_CHECK(parsed.is_array() && !parsed.empty(), context,
                ": expected a non-empty list of rank paths such as [[0], [0, 0], [1]]");
  std::vector<std::vector<int32_t>> paths;
  for (const auto& p : parsed) {
    SPECBED_CHECK(p.is_array() && !p.empty(), context, ": path ", p.dump(),
                  " is not a non-empty list of ranks");
    std::vector<int32_t> path;
    for (const auto& r : p) {
      SPECBED_CHECK(r.is_number_integer() && r.get<int64_t>() >= 0 && r.get<int64_t>() < top_k,
                    context, ": path ", p.dump(), " has rank ", r.dump(), " outside [0, ", top_k,
                    ") (top_k)");
      path.push_back(r.get<int32_t>());
    }
    SPECBED_CHECK(static_cast<int64_t>(path.size()) <= max_depth, context, ": path ", p.dump(),
                  " is deeper than ", max_depth, " (the heads)");
    paths.push_back(std::move(path));
  }
  std::sort(paths.begin(), paths.end(), [](const auto& a, const auto& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;
  });
  std::map<std::vector<int32_t>, int32_t> index;
  std::vector<TemplateNode> out;
  for (const auto& path : paths) {
    const std::vector<int32_t> prefix(path.begin(), path.end() - 1);
    SPECBED_CHECK(index.count(path) == 0, context, ": path ", nlohmann::json(path).dump(),
                  " is listed twice");
    int32_t parent = -1;
    if (!prefix.empty()) {
      const auto it = index.find(prefix);
      SPECBED_CHECK(it != index.end(), context, ": path ", nlohmann::json(path).dump(),
                    " has no parent ", nlohmann::json(prefix).dump(), " in the list");
      parent = it->second;
    }
    index[path] = static_cast<int32_t>(out.size());
    out.push_back({parent, path.back(), static_cast<int32_t>(path.size())});
  }
  return out;
}

}  // namespace specbed
