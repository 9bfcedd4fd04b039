// Named drafters: the drafters SpecBed ships for stories260K and their cost twins for
// stories260K-twin, by family, and the default drafter of each family for a target. Each method
// declares its own with its registration (MethodRegistry::AddShippedDrafter / AddDrafter); this
// catalogue reads them from the built-in registry. A method's
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

#include "methods/method_registry.h"

namespace specbed {

// The knob value that asks for the target's default drafter.
inline constexpr const char* kAutoDrafter = "auto";

// Every named drafter the built-in methods declare (BuiltinMethodRegistry), in declaration order.
const std::vector<NamedDrafter>& NamedDrafters();

// True when `name` is a named drafter of `family` ("" = any family).
bool IsNamedDrafter(const std::string& name, const std::string& family = "");

// The checkpoint directory of a named drafter (building its cost twin on first use), or
// `name_or_path` unchanged when it is not a name (a path).
std::string ResolveDrafterDir(const std::string& name_or_path);

// ResolveDrafterDir for a drafter knob of `family`: a name of another family is a path.
std::string ResolveDrafterDir(const std::string& name_or_path, const std::string& family);

// ResolveDrafterDir(name_or_path, family) when it is a named drafter of `family`, else
// `name_or_path` when it is an existing directory; otherwise fails: "<what> '<x>' is neither a
// known <family> drafter (<names>) nor an existing directory" (what: "eagle3: head").
std::string ResolveDrafterOrDir(const std::string& name_or_path, const std::string& family,
                                const std::string& what);

// The "format" of `dir`/config.json (e.g. "specbed-hrad"), or "" when it has none (twin writers
// recognise their sources by it).
std::string CheckpointFormatOf(const std::string& dir);

// The default drafter name of `family` for registry target `target`; fails naming the method
// (`context`), the family and the target when there is none ("name one with the knob").
std::string DefaultDrafterName(const std::string& family, const std::string& target,
                               const std::string& context);

}  // namespace specbed
