// Registration of `jetspec` (JetSpec, hao-ai-lab: a causal block-draft head's single-pass
// per-depth marginals, per-depth top-`width` log-softmax, accum_logp group-expansion tree,
// sample-then-follow verification at T > 0). The decoder is the DFlash-family one
// (methods/dflash/dflash_method.h) with GroupExpandTreeBuilder; see methods/jetspec/README.md.
// Checked by: tests/methods/jetspec_test.cpp.
#include "methods/common/registration_util.h"
#include "methods/dflash/dflash_method.h"
#include "methods/method_registry.h"

namespace specbed {

void RegisterJetspecMethods(MethodRegistry& registry) {
  registry.AddShippedDrafter("jetspec", "JetSpec causal block head trained on stories260K");
  RegisterDflashFamilyMethod(
      registry,
      DescribeMethod(
          "jetspec",
          "JetSpec: one forward of a causal block-draft head gives per-depth marginals; "
          "best-first group expansion (K children per popped node) to a node budget; tree "
          "verification",
          "JetSpec: Breaking the Scaling Ceiling of Speculative Decoding with Parallel Tree "
          "Drafting (hao-ai-lab)",
          SpeculativeTraits("sample_follow", kTraitTree | kTraitTargetHidden, "drafter"),
          {{"drafter",
            "auto",
            "DFlash-layout checkpoint directory (a causal head from `specbed train jetspec`), a "
            "known name (stories260K-jetspec, stories260K-twin-jetspec) or auto = the target's "
            "shipped head",
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
           BudgetConventionKnob(kBudgetConventionJetspec),
           TreeBlockSizeKnob()}),
      DflashTreeKind::kGroupExpand);
}

}  // namespace specbed
