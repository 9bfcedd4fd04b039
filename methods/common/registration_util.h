// The declarative pieces method registrations share: a MethodInfo from its name, description,
// paper, traits and knobs (DescribeMethod); traits from a verifier and flags (SpeculativeTraits,
// SampleFollowTraits); the knobs several methods offer with one meaning (the draft LM, the two
// sides' thread budgets, the `scope` of drafters that learn across requests); loading the draft LM
// with its vocabulary check; and the SpeculativeDecoder of drafters verified by `sample_follow`.
// Checked by: tests/engine/speculative_test.cpp (MethodRegistry.*: every registration's traits
// and knobs), the methods' tests (tests/methods/*_test.cpp, RegisteredWithTraitsAndKnobs).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/engine/speculative_decoder.h"
#include "methods/method_registry.h"

namespace specbed {

// Flags of SpeculativeTraits, combined with |.
enum MethodTraitFlag : uint32_t {
  kTraitTree = 1u << 0,                  // drafts trees (vs. chains)
  kTraitDraftProbs = 1u << 1,            // its T > 0 verifier needs the draft distributions
  kTraitTargetHidden = 1u << 2,          // the drafter reads target hidden states
  kTraitTrainsOnline = 1u << 3,          // an Adapter updates the drafter while decoding
  kTraitOverlapsVerification = 1u << 4,  // drafting overlaps verification (its own Decoder)
};

// A speculative, lossless method verified at T > 0 by `verifier` (a VerifyRule name, or the
// method's own rule); a non-empty `drafter_knob` names the knob of its draft model or head and
// sets needs_drafter.
MethodTraits SpeculativeTraits(const std::string& verifier, uint32_t flags,
                               const std::string& drafter_knob = "");

// A speculative, lossless method whose drafts are deterministic given the verified past, so
// `sample_follow` keeps it lossless at T > 0; `tree`: drafts trees rather than chains.
inline MethodTraits SampleFollowTraits(bool tree) {
  return SpeculativeTraits("sample_follow", tree ? kTraitTree : 0u);
}

// A MethodInfo with everything but the factory and the optional validate.
MethodInfo DescribeMethod(std::string name, std::string description, std::string paper,
                          MethodTraits traits, std::vector<MethodKnob> knobs);

// The `drafter` knob of a method with a separate draft LM (sps, sps+osd, pearl, specbranch).
MethodKnob DraftLmKnob();
// `draft_threads` and `target_threads` of a decoder that drafts on a second thread.
std::vector<MethodKnob> SideThreadKnobs();
// The draft LM named by knob `drafter`, loaded through the context; it must share the target's
// vocabulary (else an error naming `method`, the draft and the target).
LoadedTarget& LoadDraftLm(MethodContext& context, const nlohmann::json& knobs,
                          const std::string& method);

// The `scope` knob (methods/common/persist_scope.h): `what` says what persists across requests;
// `with_run`: the drafter also offers the run scope.
MethodKnob PersistScopeKnob(const std::string& what, bool with_run = false);

// The default loop over the case's target with `drafter`, per-step `budget` and `sample_follow`
// verification at T > 0 (greedy at T = 0).
std::unique_ptr<Decoder> SampleFollowDecoder(MethodContext& context,
                                             std::unique_ptr<Drafter> drafter, DraftBudget budget);

}  // namespace specbed
