// Registration of `pearl`: PEARL's parallel draft/verify pipeline with the SpS draft LM
// (PearlDecoder, pearl_decoder.h).
// Checked by: tests/methods/pearl_test.cpp.
#include "methods/common/registration_util.h"
#include "methods/method_registry.h"
#include "methods/pearl/pearl_decoder.h"
#include "methods/pearl/speed_ratio.h"

namespace specbed {

void RegisterPearlMethods(MethodRegistry& registry) {
  std::vector<MethodKnob> knobs = {
      {"gamma",
       4,
       "chunk length drafted per step (static, as in PEARL); 0 = auto: ceil(c), the measured "
       "speed ratio c = T_target / T_draft of one-token forwards (PEARL's rule)",
       0,
       64,
       {}},
      DraftLmKnob()};
  for (MethodKnob& k : SideThreadKnobs()) knobs.push_back(std::move(k));
  MethodInfo info = DescribeMethod(
      "pearl",
      "PEARL: the draft LM drafts the next chunk on a second thread while the target verifies "
      "the current one (post-/pre-verify), lockstep join, global invalidation on rejection",
      "Liu et al. 2024, PEARL (arXiv:2408.11850); SpecBranch's parallel baseline",
      SpeculativeTraits("chain_rs", kTraitDraftProbs | kTraitOverlapsVerification, "drafter"),
      std::move(knobs));
  info.factory = [](MethodContext& context,
                    const nlohmann::json& knobs) -> std::unique_ptr<Decoder> {
    LoadedTarget& draft = LoadDraftLm(context, knobs, "pearl");
    PearlOptions options;
    options.draft_threads = knobs.at("draft_threads").get<int>();
    options.target_threads = knobs.at("target_threads").get<int>();
    options.gamma = ResolveChunkKnob(
        knobs.at("gamma").get<int64_t>(), "pearl", "gamma", *context.target->model, *draft.model,
        ParallelDecoder::TargetThreads(options.target_threads, options.draft_threads),
        options.draft_threads, 64);
    return std::make_unique<PearlDecoder>(*context.target->model, context.target->tokenizer.get(),
                                          draft.model, options);
  };
  registry.Register(std::move(info));
}

}  // namespace specbed
