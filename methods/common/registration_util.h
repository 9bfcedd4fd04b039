// Pieces the registrations of drafters on the default loop share (ngram, suffix, lookahead,
// recycling, medusa): the traits of a deterministic drafter verified by `sample_follow`, the
// `scope` knob of drafters that learn across requests, and the SpeculativeDecoder a factory
// returns. Checked by: the methods' tests
// (tests/methods/{ngram,suffix,lookahead,recycling,medusa}_test.cpp).
#pragma once

#include <memory>
#include <string>

#include "harness/engine/speculative_decoder.h"
#include "methods/method_registry.h"

namespace specbed {

// A speculative, lossless method whose drafts are deterministic given the verified past, so
// `sample_follow` keeps it lossless at T > 0; `tree`: drafts trees rather than chains.
inline MethodTraits SampleFollowTraits(bool tree) {
  MethodTraits t;
  t.speculative = true;
  t.lossless = true;
  t.tree = tree;
  t.sampling_verifier = "sample_follow";
  return t;
}

// The `scope` knob (methods/common/persist_scope.h): `what` says what persists across requests;
// `with_run`: the drafter also offers the run scope.
inline MethodKnob PersistScopeKnob(const std::string& what, bool with_run = false) {
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

// The default loop over the case's target with `drafter`, per-step `budget` and `sample_follow`
// verification at T > 0 (greedy at T = 0).
inline std::unique_ptr<Decoder> SampleFollowDecoder(MethodContext& context,
                                                    std::unique_ptr<Drafter> drafter,
                                                    DraftBudget budget) {
  SpeculativeOptions options;
  options.budget = budget;
  options.sampling_rule = VerifyRule::kSampleFollow;
  return std::make_unique<SpeculativeDecoder>(
      *context.target->model, context.target->tokenizer.get(), std::move(drafter), options);
}

}  // namespace specbed
