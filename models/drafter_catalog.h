// Named drafters: the drafters SpecBed ships for stories260K and their cost twins for
// stories260K-twin, by family, and the default drafter of each family for a target. A method's
// drafter knob set to "auto" (every method's default) resolves to DefaultDrafterName(family,
// target) when its case is expanded, so `{"name": "ddtree"}` or `{"name": "eagle3"}` runs on
// either target without naming a drafter, and the case key holds the resolved, machine-independent
// name.
//
// Families (MethodKnob::drafter_family): "draft" (SpS draft LM), "eagle3" (EAGLE-3 head),
// "dflash" (DFlash block head), "jetspec" (JetSpec causal block head), "specblock" (SpecBlock
// drafter), "medusa" (Medusa-1 heads), "blockpilot" (BlockPilot block-size predictor; it reads the
// target's logits, which the twin reproduces, so both targets share one), "hrad" (SpecBranch's
// H-RAD predictor; it reads target hidden states, so the twin has its own), "ltd" (LTD depth + size
// policy pair, trained on the twin's measured costs; it reads draft scores only, so stories260K
// uses the same pair), "ltd-baselines" (the Disco / SpecDec++ / C2T classifiers of the LTD paper's
// table; SpecDec++ reads the head's hidden states, so each target has its own set). Checked by:
// tests/methods/cost_twin_test.cpp (names, defaults, resolution, errors).
#pragma once

#include <string>
#include <vector>

namespace specbed {

// The knob value that asks for the target's default drafter.
inline constexpr const char* kAutoDrafter = "auto";

struct NamedDrafter {
  std::string name;         // e.g. "stories260K-twin-eagle3"
  std::string family;       // see above
  std::string target;       // the registry target it belongs to
  std::string description;  // one line
  // Its checkpoint directory (a shipped folder, or the cost-twin set built on first use).
  std::string (*dir)();
};

// Every named drafter, in listing order.
const std::vector<NamedDrafter>& NamedDrafters();

// True when `name` is a named drafter of `family` ("" = any family).
bool IsNamedDrafter(const std::string& name, const std::string& family = "");

// The checkpoint directory of a named drafter (building the cost-twin set on first use), or
// `name_or_path` unchanged when it is not a name (a path).
std::string ResolveDrafterDir(const std::string& name_or_path);

// The default drafter name of `family` for registry target `target`; fails naming the method
// (`context`), the family and the target when there is none ("name one with the knob").
std::string DefaultDrafterName(const std::string& family, const std::string& target,
                               const std::string& context);

}  // namespace specbed
