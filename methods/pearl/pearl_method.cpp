// Registration of `pearl`: PEARL's parallel draft/verify pipeline with the SpS draft LM
// (PearlDecoder, pearl_decoder.h).
// Checked by: tests/methods/pearl_test.cpp.
#include <ATen/Parallel.h>

#include <algorithm>

#include "harness/base/error.h"
#include "methods/method_registry.h"
#include "methods/pearl/pearl_decoder.h"
#include "methods/pearl/speed_ratio.h"

namespace specbed {

void RegisterPearlMethod(MethodRegistry& registry) {
  MethodInfo info;
  info.name = "pearl";
  info.description =
      "PEARL: the draft LM drafts the next chunk on a second thread while the target verifies "
      "the current one (post-/pre-verify), lockstep join, global invalidation on rejection";
  info.paper = "Liu et al. 2024, PEARL (arXiv:2408.11850); SpecBranch's parallel baseline";
  info.traits.speculative = true;
  info.traits.lossless = true;
  info.traits.needs_drafter = true;
  info.traits.needs_draft_probs = true;
  info.traits.overlaps_verification = true;
  info.traits.sampling_verifier = "chain_rs";
  info.traits.drafter_knob = "drafter";
  info.knobs = {
      {"gamma",
       4,
       "chunk length drafted per step (static, as in PEARL); 0 = auto: ceil(c), the measured "
       "speed ratio c = T_target / T_draft of one-token forwards (PEARL's rule)",
       0,
       64,
       {}},
      {"drafter",
       "auto",
       "draft model: registry name or path, must share the target's vocabulary; auto = the "
       "target's shipped draft (stories260K-draft, stories260K-twin-draft)",
       1,
       0,
       {},
       "draft"},
      {"draft_threads", 1, "intra-op threads of the draft side (its own thread)", 1, 256, {}},
      {"target_threads",
       0,
       "intra-op threads of the target side; 0 = the case's threads minus draft_threads (>= 1)",
       0,
       256,
       {}},
  };
  info.factory = [](MethodContext& context,
                    const nlohmann::json& knobs) -> std::unique_ptr<Decoder> {
    const std::string drafter_name = knobs.at("drafter").get<std::string>();
    LoadedTarget& draft = context.load_model(drafter_name);
    SPECBED_CHECK(draft.model->config().vocab_size == context.target->model->config().vocab_size,
                  "pearl: draft model '", drafter_name, "' has vocabulary size ",
                  draft.model->config().vocab_size, " but the target '", context.target->spec.name,
                  "' has ", context.target->model->config().vocab_size);
    PearlOptions options;
    options.draft_threads = knobs.at("draft_threads").get<int>();
    options.target_threads = knobs.at("target_threads").get<int>();
    const int target_threads = options.target_threads > 0
                                   ? options.target_threads
                                   : std::max(1, at::get_num_threads() - options.draft_threads);
    options.gamma =
        ResolveChunkKnob(knobs.at("gamma").get<int64_t>(), "pearl", "gamma", *context.target->model,
                         *draft.model, target_threads, options.draft_threads, 64);
    return std::make_unique<PearlDecoder>(*context.target->model, context.target->tokenizer.get(),
                                          draft.model, options);
  };
  registry.Register(std::move(info));
}

}  // namespace specbed
