// Registration of `recycling`: Token Recycling (RecyclingDrafter) on the default
// SpeculativeDecoder; `sample_follow` at T > 0 (deterministic tree drafts, so it is lossless).
// Checked by: tests/methods/recycling_test.cpp.
#include "harness/engine/speculative_decoder.h"
#include "methods/method_registry.h"
#include "methods/recycling/recycling_drafter.h"

namespace specbed {

void RegisterRecyclingMethod(MethodRegistry& registry) {
  MethodInfo info;
  info.name = "recycling";
  info.description =
      "Token Recycling: an adjacency matrix of every token's top-k successors, refreshed from "
      "every verified slot's logits, drafts a static template tree; no drafter model";
  info.paper = "Luo et al., Turning Trash into Treasure: Token Recycling (ACL 2025)";
  info.traits.speculative = true;
  info.traits.lossless = true;
  info.traits.tree = true;
  info.traits.sampling_verifier = "sample_follow";
  info.knobs = {
      {"tree_nodes", 80, "nodes of the static template tree (the paper's: about 80)", 1, 256, {}},
      {"top_k", 8, "successors kept per token in the matrix (the paper's k: 8)", 1, 32, {}},
      {"scope",
       "dataset",
       "what the matrix keeps between requests: dataset = everything the case decoded before "
       "(a request never drafts from its own earlier run), none = starts empty per request",
       1,
       0,
       {"dataset", "none"}},
  };
  info.factory = [](MethodContext& context, const nlohmann::json& knobs) {
    RecyclingOptions recycling;
    recycling.tree_nodes = knobs.at("tree_nodes").get<int64_t>();
    recycling.top_k = knobs.at("top_k").get<int64_t>();
    recycling.scope =
        ParsePersistScope(knobs.at("scope").get<std::string>(), "recycling knob scope");
    SpeculativeOptions options;
    options.budget.nodes = recycling.tree_nodes;
    options.budget.depth = recycling.tree_nodes;  // the template is never deeper than its size
    options.sampling_rule = VerifyRule::kSampleFollow;
    return std::make_unique<SpeculativeDecoder>(
        *context.target->model, context.target->tokenizer.get(),
        std::make_unique<RecyclingDrafter>(recycling), options);
  };
  registry.Register(std::move(info));
}

}  // namespace specbed
