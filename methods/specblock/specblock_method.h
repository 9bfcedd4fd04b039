// Registration of `specblock`, `specblock+osd` and `specblock+bandit` (README.md in this folder).
// Checked by: tests/methods/specblock_test.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/engine/method.h"
#include "methods/method_registry.h"

namespace specbed {

class SpecBlockDrafter;

// The drafter directory of a named drafter or an existing path; errors name the knob value.
std::string ResolveSpecBlockDrafter(const std::string& name_or_path);
std::vector<MethodKnob> SpecBlockKnobs();
// The `specblock` decoder for resolved knobs; `drafter_out` (optional) receives the drafter.
// `sampling_rule`: the T > 0 rule (sample_follow; tests swap it for negative controls).
std::unique_ptr<Decoder> MakeSpecBlockDecoder(MethodContext& context, const nlohmann::json& knobs,
                                              SpecBlockDrafter** drafter_out,
                                              VerifyRule sampling_rule = VerifyRule::kSampleFollow);

}  // namespace specbed
