// The `eagle3` method's building blocks, shared with `eagle3+osd` (methods/osd): head lookup,
// pairing a head with a target, the knobs and the decoder factory.
// Checked by: tests/engine/speculative_test.cpp (MethodRegistry.*),
// tests/methods/eagle3_drafter_test.cpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/eagle3/eagle3_checkpoint.h"
#include "methods/eagle3/eagle3_head.h"
#include "methods/method_registry.h"

namespace specbed {

class Eagle3Drafter;

// A head name ("stories260K-eagle3" = models/stories260K/eagle3) or an existing directory.
std::string ResolveEagle3Head(const std::string& name_or_path);
// Loads a head and checks it against `target` (vocabulary, target hidden size, embedding width,
// aux layers within the target); fills the default aux layers when the checkpoint names none.
Eagle3Checkpoint LoadEagle3HeadFor(const std::string& name_or_path, const LoadedTarget& target);
// The head's weights for the context's target, loaded (LoadEagle3HeadFor) and placed once per
// context: every batch slot's drafter shares them (MethodContext::shared, one DraftBatchKey).
std::shared_ptr<const Eagle3Weights> SharedEagle3Weights(MethodContext& context,
                                                         const std::string& name_or_path);
// depth (7), top_k (10), total_tokens (60), head ("stories260K-eagle3").
std::vector<MethodKnob> Eagle3Knobs();
// A SpeculativeDecoder around an Eagle3Drafter for resolved `knobs`; *drafter_out (optional)
// receives the drafter (owned by the decoder).
std::unique_ptr<Decoder> MakeEagle3Decoder(MethodContext& context, const nlohmann::json& knobs,
                                           Eagle3Drafter** drafter_out);

}  // namespace specbed
