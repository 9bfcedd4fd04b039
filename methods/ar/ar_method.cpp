// Registration of `ar`, the autoregressive baseline (ArDecoder over GenerateAr).
// Checked by: tests/engine/speculative_test.cpp (MethodRegistry.*),
// tests/engine/run_config_test.cpp.
#include "methods/common/registration_util.h"
#include "methods/method_registry.h"

namespace specbed {

void RegisterArMethods(MethodRegistry& registry) {
  MethodTraits traits;           // not speculative, lossless
  traits.supports_batch = true;  // ArDecoder is a SequenceStepper (harness/engine/batch_engine.h)
  MethodInfo info = DescribeMethod(
      "ar", "autoregressive decoding with the target alone (the baseline of every speedup)", "",
      traits, {});
  info.factory = [](MethodContext& context, const nlohmann::json&) -> std::unique_ptr<Decoder> {
    return std::make_unique<ArDecoder>(*context.target->model, context.target->tokenizer.get());
  };
  registry.Register(std::move(info));
}

}  // namespace specbed
