// Registration of `ltd` (LTD: learned depth and verification-size policies on the EAGLE-3
// drafter) and of the baselines on the same drafter: dynamic depth `eagle3+ddd`, `eagle3+svip`,
// `eagle3+gammatune`, `eagle3+disco`, `eagle3+specdecpp`; dynamic size `eagle3+c2t`. Also the
// decoder builder the trainer reuses. Knobs and defaults: methods/ltd/README.md. Checked by:
// tests/methods/ltd_test.cpp (ltd with both / size / depth policies and each baseline
// token-identical to AR at T = 0; T = 1 distribution test; knob errors),
// tests/engine/speculative_test.cpp (MethodRegistry.*).
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/engine/speculative_decoder.h"
#include "methods/eagle3/eagle3_drafter.h"
#include "methods/method_registry.h"

namespace specbed {

// A SpeculativeDecoder around an Eagle3Drafter (head `head`, beam width `top_k`, up to
// max_rounds + 1 layers, report_generated on) with `controller` installed (may be nullptr;
// SetController later). *drafter_out (optional) receives the drafter.
std::unique_ptr<SpeculativeDecoder> MakeLtdEagle3Decoder(MethodContext& context,
                                                         const std::string& head, int64_t top_k,
                                                         int64_t max_rounds, int64_t max_nodes,
                                                         std::unique_ptr<Controller> controller,
                                                         Eagle3Drafter** drafter_out = nullptr);

class LtdController;

// The `ltd` method's decoder from its resolved knobs (head, policy, policies, top_k, max_depth,
// depth, total_tokens, depth_every); *controller_out (optional) receives its controller.
std::unique_ptr<SpeculativeDecoder> MakeLtdDecoder(MethodContext& context,
                                                   const nlohmann::json& knobs,
                                                   LtdController** controller_out);

// The `policy` knob: a known name (stories260K-twin-ltd) or a directory holding depth/ and/or
// size/ policy directories.
std::string ResolveLtdPolicyDir(const std::string& name_or_path);

// The `classifier` knob: a known name (stories260K-twin-ltd-baselines) or a directory holding
// disco/, specdecpp/ and/or c2t/ classifier directories.
std::string ResolveLtdClassifierDir(const std::string& name_or_path);

void RegisterLtdMethods(MethodRegistry& registry);

}  // namespace specbed
