// Registration of `suffix`: suffix decoding (SuffixDrafter) on the default SpeculativeDecoder;
// `sample_follow` at T > 0 (deterministic tree drafts, so it is lossless).
// Checked by: tests/methods/suffix_test.cpp.
#include "methods/common/registration_util.h"
#include "methods/method_registry.h"
#include "methods/suffix/suffix_drafter.h"

namespace specbed {

void RegisterSuffixMethods(MethodRegistry& registry) {
  MethodInfo info = DescribeMethod(
      "suffix",
      "suffix decoding: counted substring tries over the request and over earlier outputs; "
      "drafts the best frequency-scored tree over every matched suffix length; no drafter model",
      "Oliaro et al., SuffixDecoding (NeurIPS 2025, arXiv:2411.04975)",
      SampleFollowTraits(/*tree=*/true),
      {
          {"max_spec_tokens", 16, "most tree nodes drafted per step (the budget)", 1, 64, {}},
          {"max_depth", 24, "longest suffix matched and deepest trie level (vLLM: 24)", 2, 64, {}},
          {"spec_factor",
           1.0,
           "tree nodes <= spec_factor x match length (the paper's alpha)",
           0.1,
           64,
           {}},
          {"min_token_prob",
           0.1,
           "no node whose path frequency is below this (vLLM: 0.1)",
           0,
           1,
           {}},
          {"match_lengths",
           "all",
           "all = a tree from every matched suffix length, the best kept (the reference); "
           "longest = from the longest match only (SpecBed before 2026-12-03)",
           1,
           0,
           {"all", "longest"}},
          PersistScopeKnob("the global trie: the outputs it holds", /*with_run=*/true),
      });
  info.factory = [](MethodContext& context, const nlohmann::json& knobs) {
    SuffixOptions suffix;
    suffix.max_depth = knobs.at("max_depth").get<int64_t>();
    suffix.spec_factor = knobs.at("spec_factor").get<double>();
    suffix.min_token_prob = knobs.at("min_token_prob").get<double>();
    suffix.longest_match_only = knobs.at("match_lengths").get<std::string>() == "longest";
    suffix.scope = ParsePersistScope(knobs.at("scope").get<std::string>(), "suffix knob scope");
    suffix.run_key = context.target->spec.name;
    // Scope dataset: one global trie for every decoder of the case (the batch engine's slots).
    auto store = context.shared->GetOrBuild<SuffixGlobalStore>(
        "suffix dataset trie " + std::to_string(suffix.max_depth),
        [&] { return std::make_shared<SuffixGlobalStore>(suffix.max_depth); });
    const int64_t nodes = knobs.at("max_spec_tokens").get<int64_t>();
    // A tree of n nodes is at most n deep.
    return SampleFollowDecoder(context, std::make_unique<SuffixDrafter>(suffix, std::move(store)),
                               {nodes, nodes});
  };
  registry.Register(std::move(info));
}

}  // namespace specbed
