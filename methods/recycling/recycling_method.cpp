// Registration of `recycling`: Token Recycling (RecyclingDrafter) on the default
// SpeculativeDecoder; `sample_follow` at T > 0 (deterministic tree drafts, so it is lossless).
// Checked by: tests/methods/recycling_test.cpp.
#include "methods/common/registration_util.h"
#include "methods/method_registry.h"
#include "methods/recycling/recycling_drafter.h"

namespace specbed {

void RegisterRecyclingMethods(MethodRegistry& registry) {
  MethodInfo info = DescribeMethod(
      "recycling",
      "Token Recycling: an adjacency matrix of every token's top-k successors, refreshed from "
      "every verified slot's logits, drafts a static template tree; no drafter model",
      "Luo et al., Turning Trash into Treasure: Token Recycling (ACL 2025)",
      SampleFollowTraits(/*tree=*/true),
      {
          {"tree_nodes",
           80,
           "nodes of the static template tree (paper: its first tree_nodes, at most 80)",
           1,
           256,
           {}},
          {"template",
           "paper",
           "the static tree: paper (the published 80-node tree, 6 deep; needs top_k >= 8) or "
           "geometric (the tree_nodes most likely rank paths under a 2^-(rank+1) prior)",
           1,
           0,
           {"paper", "geometric"}},
          {"top_k", 8, "successors kept per token in the matrix (the paper's k: 8)", 1, 32, {}},
          PersistScopeKnob("the adjacency matrix: what it keeps"),
      });
  info.factory = [](MethodContext& context, const nlohmann::json& knobs) {
    RecyclingOptions recycling;
    recycling.tree_nodes = knobs.at("tree_nodes").get<int64_t>();
    recycling.top_k = knobs.at("top_k").get<int64_t>();
    recycling.tree_template =
        ParseRecyclingTemplate(knobs.at("template").get<std::string>(), "recycling knob template");
    recycling.scope =
        ParsePersistScope(knobs.at("scope").get<std::string>(), "recycling knob scope");
    const int64_t nodes = recycling.tree_nodes;  // the template is never deeper than its size
    return SampleFollowDecoder(context, std::make_unique<RecyclingDrafter>(recycling),
                               {nodes, nodes});
  };
  registry.Register(std::move(info));
}

}  // namespace specbed
