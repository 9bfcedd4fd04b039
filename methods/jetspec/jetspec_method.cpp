// Registration of `jetspec` (JetSpec, hao-ai-lab: a causal block-draft head's single-pass
// per-depth marginals, per-depth top-`width` log-softmax, accum_logp group-expansion tree,
// sample-then-follow verification at T > 0). The decoder is the DFlash-family one
// (methods/dflash/dflash_method.h) with GroupExpandTreeBuilder; see methods/jetspec/README.md.
// Checked by: tests/methods/jetspec_test.cpp.
#include "harness/engine/speculative_decoder.h"
#include "methods/dflash/dflash_method.h"
#include "methods/method_registry.h"

namespace specbed {

void RegisterJetspecMethods(MethodRegistry& registry) {
  MethodInfo info;
  info.name = "jetspec";
  info.description =
      "JetSpec: one forward of a causal block-draft head gives per-depth marginals; best-first "
      "group expansion (K children per popped node) to a node budget; tree verification";
  info.paper =
      "JetSpec: Breaking the Scaling Ceiling of Speculative Decoding with Parallel Tree Drafting "
      "(hao-ai-lab)";
  info.traits.speculative = true;
  info.traits.lossless = true;
  info.traits.tree = true;
  info.traits.needs_drafter = true;
  info.traits.needs_target_hidden = true;
  info.traits.sampling_verifier = "sample_follow";
  info.traits.drafter_knob = "drafter";
  info.knobs = {
      {"drafter",
       "auto",
       "DFlash-layout checkpoint directory (a causal head from `specbed train jetspec`), a known "
       "name (stories260K-jetspec, stories260K-twin-jetspec) or auto = the target's shipped head",
       1,
       0,
       {},
       "jetspec"},
      {"budget",
       32,
       "tree node budget (verify tokens including the root, under the default convention)",
       1,
       4096,
       {}},
      {"width", 7, "K: top-K tokens per depth = children added per expanded node", 1, 256, {}},
      {"budget_convention",
       kBudgetConventionJetspec,
       "what budget counts: jetspec = verify tokens including the root (budget - 1 drafted "
       "nodes); ddtree = drafted nodes (root excluded)",
       1,
       0,
       {kBudgetConventionJetspec, kBudgetConventionDdtree}},
      {"block_size",
       0,
       "rows forwarded per step (0 = the head's; larger values add untrained mask rows); tree "
       "depth <= block_size - 1",
       0,
       1024,
       {}},
  };
  info.validate = [](const nlohmann::json& knobs) { CheckDflashDrafterKnob(knobs, "jetspec"); };
  info.factory = [](MethodContext& context, const nlohmann::json& knobs) {
    return MakeDflashFamilyDecoder(context, knobs, DflashTreeKind::kGroupExpand, "jetspec");
  };
  registry.Register(std::move(info));
}

}  // namespace specbed
