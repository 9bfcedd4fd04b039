// Registration of `lookahead`: lookahead decoding (LookaheadDrafter) on the default
// SpeculativeDecoder, both branches in one tree-masked verify forward; `sample_follow` at T > 0
// (deterministic drafts, so it is lossless).
// Checked by: tests/methods/lookahead_test.cpp.
#include "methods/common/registration_util.h"
#include "methods/lookahead/lookahead_drafter.h"
#include "methods/method_registry.h"

namespace specbed {

void RegisterLookaheadMethods(MethodRegistry& registry) {
  MethodInfo info = DescribeMethod(
      "lookahead",
      "lookahead decoding: a Jacobi window of W columns x N-1 levels generates n-grams into a "
      "pool; up to G pool n-grams starting at the last token are verified in the same forward; "
      "no drafter model",
      "Fu et al., Break the Sequential Dependency of LLM Inference Using Lookahead "
      "Decoding (ICML 2024)",
      SampleFollowTraits(/*tree=*/true),
      {
          {"window", 7, "W: Jacobi window columns (Spec-Bench: 7)", 1, 32, {}},
          {"level", 5, "N: n-gram size, the window keeps N-1 levels (Spec-Bench: 5)", 2, 16, {}},
          {"guess", 7, "G: most pool n-grams verified per step (Spec-Bench: 7)", 0, 32, {}},
          {"pool_from_prompt",
           false,
           "also put the prompt's N-grams and then every committed token's in the pool (the "
           "reference's POOL_FROM_PROMPT)",
           1,
           0,
           {}},
          {"layout",
           "reference",
           "where window columns hang: reference (column 0 below the root, column c below chain "
           "token c-1: n-grams keyed on the token before the column) or own_column (below the "
           "column's own level-1 token)",
           1,
           0,
           {"reference", "own_column"}},
      });
  info.factory = [](MethodContext& context, const nlohmann::json& knobs) {
    LookaheadOptions lookahead;
    lookahead.window = knobs.at("window").get<int64_t>();
    lookahead.level = knobs.at("level").get<int64_t>();
    lookahead.guess = knobs.at("guess").get<int64_t>();
    lookahead.pool_from_prompt = knobs.at("pool_from_prompt").get<bool>();
    lookahead.layout =
        ParseLookaheadLayout(knobs.at("layout").get<std::string>(), "lookahead knob layout");
    return SampleFollowDecoder(context, std::make_unique<LookaheadDrafter>(lookahead),
                               LookaheadBudget(lookahead));
  };
  registry.Register(std::move(info));
}

}  // namespace specbed
