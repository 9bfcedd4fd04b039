// The declarative registration pieces (see registration_util.h).
#include "methods/common/registration_util.h"

#include <utility>

#include "base/error.h"

namespace specbed {

MethodTraits SpeculativeTraits(const std::string& verifier, uint32_t flags,
                               const std::string& drafter_knob) {
  MethodTraits t;
  t.speculative = true;
  t.lossless = true;
  t.tree = (flags & kTraitTree) != 0;
  t.needs_drafter = !drafter_knob.empty();
  t.needs_draft_probs = (flags & kTraitDraftProbs) != 0;
  t.needs_target_hidden = (flags & kTraitTargetHidden) != 0;
  t.trains_online = (flags & kTraitTrainsOnline) != 0;
  t.overlaps_verification = (flags & kTraitOverlapsVerification) != 0;
  // Every method on SpeculativeDecoder runs in a batch (its stepper); one that overlaps drafting
  // with verification runs its own loop (PEARL, SpecBranch: batch 1 only).
  t.supports_batch = !t.overlaps_verification;
  t.sampling_verifier = verifier;
  t.drafter_knob = drafter_knob;
  return t;
}

MethodInfo DescribeMethod(std::string name, std::string description, std::string paper,
                          MethodTraits traits, std::vector<MethodKnob> knobs) {
  MethodInfo info;
  info.name = std::move(name);
  info.description = std::move(description);
  info.paper = std::move(paper);
  info.traits = std::move(traits);
  info.knobs = std::move(knobs);
  return info;
}

MethodKnob DraftLmKnob() {
  return {"drafter",
          "auto",
          "draft model: registry name or path, must share the target's vocabulary; auto = the "
          "target's shipped draft (stories260K-draft, stories260K-twin-draft)",
          1,
          0,
          {},
          "draft"};
}

std::vector<MethodKnob> SideThreadKnobs() {
  return {
      {"draft_threads", 1, "intra-op threads of the draft side (its own thread)", 1, 256, {}},
      {"target_threads",
       0,
       "intra-op threads of the target side; 0 = the case's threads minus draft_threads (>= 1)",
       0,
       256,
       {}},
  };
}

LoadedTarget& LoadDraftLm(MethodContext& context, const nlohmann::json& knobs,
                          const std::string& method) {
  const std::string name = knobs.at("drafter").get<std::string>();
  LoadedTarget& draft = context.load_model(name);
  const int64_t draft_vocab = draft.model->config().vocab_size;
  const int64_t target_vocab = context.target->model->config().vocab_size;
  SPECBED_CHECK(draft_vocab == target_vocab, method, ": draft model '", name,
                "' has vocabulary size ", draft_vocab, " but the target '",
                context.target->spec.name, "' has ", target_vocab,
                "; the draft must share the target's tokenizer");
  return draft;
}

MethodKnob PersistScopeKnob(const std::string& what, bool with_run) {
  MethodKnob knob{"scope",
                  "dataset",
                  what +
                      " between requests: dataset = what the case decoded before (a request "
                      "never drafts from its own earlier run), none = the current request only",
                  1,
                  0,
                  {"dataset", "none"}};
  if (with_run) {
    knob.description += ", run = also what earlier cases of this run decoded (same target)";
    knob.choices.push_back("run");
  }
  return knob;
}

std::unique_ptr<Decoder> SampleFollowDecoder(MethodContext& context,
                                             std::unique_ptr<Drafter> drafter, DraftBudget budget) {
  SpeculativeOptions options;
  options.budget = budget;
  options.sampling_rule = VerifyRule::kSampleFollow;
  return std::make_unique<SpeculativeDecoder>(
      *context.target->model, context.target->tokenizer.get(), std::move(drafter), options);
}

}  // namespace specbed
