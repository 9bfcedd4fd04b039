// Registration of `sps`: classic speculative sampling with a separate draft LM (SpsDrafter) on the
// default SpeculativeDecoder with chain rejection sampling.
// Checked by: tests/engine/speculative_test.cpp (MethodRegistry.*),
// tests/engine/speculative_test.cpp.
#include "harness/base/error.h"
#include "harness/engine/speculative_decoder.h"
#include "methods/method_registry.h"
#include "methods/sps/sps_drafter.h"

namespace specbed {

void RegisterSpsMethod(MethodRegistry& registry) {
  MethodInfo info;
  info.name = "sps";
  info.description =
      "classic speculative sampling: a small draft LM proposes gamma tokens, chain rejection "
      "sampling verifies them";
  info.paper = "Leviathan et al. 2023 (arXiv:2211.17192); Chen et al. 2023 (arXiv:2302.01318)";
  info.traits.speculative = true;
  info.traits.lossless = true;
  info.traits.needs_drafter = true;
  info.traits.needs_draft_probs = true;
  info.traits.sampling_verifier = "chain_rs";
  info.traits.drafter_knob = "drafter";
  info.knobs = {
      {"gamma", 4, "draft length per step (drafted tokens, root excluded)", 1, 64, {}},
      {"drafter",
       "auto",
       "draft model: registry name or path, must share the target's vocabulary; auto = the "
       "target's shipped draft (stories260K-draft, stories260K-twin-draft)",
       1,
       0,
       {},
       "draft"},
  };
  info.factory = [](MethodContext& context,
                    const nlohmann::json& knobs) -> std::unique_ptr<Decoder> {
    const std::string drafter_name = knobs.at("drafter").get<std::string>();
    LoadedTarget& draft = context.load_model(drafter_name);
    const LlamaConfig& t = context.target->model->config();
    const LlamaConfig& d = draft.model->config();
    SPECBED_CHECK(d.vocab_size == t.vocab_size, "sps: draft model '", drafter_name,
                  "' has vocabulary size ", d.vocab_size, " but the target '",
                  context.target->spec.name, "' has ", t.vocab_size,
                  "; the draft must share the target's tokenizer");
    SpeculativeOptions options;
    options.budget.nodes = knobs.at("gamma").get<int64_t>();
    options.budget.depth = options.budget.nodes;
    options.sampling_rule = VerifyRule::kChainRs;
    return std::make_unique<SpeculativeDecoder>(*context.target->model,
                                                context.target->tokenizer.get(),
                                                std::make_unique<SpsDrafter>(draft.model), options);
  };
  registry.Register(std::move(info));
}

}  // namespace specbed
