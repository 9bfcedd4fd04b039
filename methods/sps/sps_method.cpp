// Registration of `sps`: classic speculative sampling with a separate draft LM (SpsDrafter) on the
// default SpeculativeDecoder with chain rejection sampling.
// Checked by: tests/engine/speculative_test.cpp (MethodRegistry.*),
// tests/engine/speculative_test.cpp.
#include "methods/sps/sps_method.h"

#include "methods/common/registration_util.h"
#include "methods/method_registry.h"
#include "methods/sps/sps_drafter.h"

namespace specbed {

SpeculativeOptions SpsOptions(int64_t gamma) {
  SpeculativeOptions options;
  options.budget.nodes = gamma;
  options.budget.depth = gamma;
  options.sampling_rule = VerifyRule::kChainRs;
  return options;
}

void RegisterSpsMethods(MethodRegistry& registry) {
  registry.AddShippedDrafter("draft",
                             "SpS draft LM distilled from stories260K (2 layers, width 48)",
                             StoriesTwinDraftLm());
  MethodInfo info = DescribeMethod(
      "sps",
      "classic speculative sampling: a small draft LM proposes gamma tokens, chain rejection "
      "sampling verifies them",
      "Leviathan et al. 2023 (arXiv:2211.17192); Chen et al. 2023 (arXiv:2302.01318)",
      SpeculativeTraits("chain_rs", kTraitDraftProbs, "drafter"),
      {{"gamma", 4, "draft length per step (drafted tokens, root excluded)", 1, 64, {}},
       DraftLmKnob()});
  info.factory = [](MethodContext& context,
                    const nlohmann::json& knobs) -> std::unique_ptr<Decoder> {
    LoadedTarget& draft = LoadDraftLm(context, knobs, "sps");
    return std::make_unique<SpeculativeDecoder>(
        *context.target->model, context.target->tokenizer.get(),
        std::make_unique<SpsDrafter>(draft.model), SpsOptions(knobs.at("gamma").get<int64_t>()));
  };
  registry.Register(std::move(info));
}

}  // namespace specbed
