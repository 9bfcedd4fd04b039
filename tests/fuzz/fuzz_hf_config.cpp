// libFuzzer target: Hugging Face config.json parsing (models/llama_config.h) through the JSON
// reader: a config either parses to one that passes Validate (every size within SpecBed's caps,
// so nothing sized by it can exhaust memory) or fails as specbed::Error.
// Checked by: scripts/fuzz (corpus tests/fuzz/corpus/fuzz_hf_config).
#include <cstdlib>
#include <string_view>

#include "base/json_read.h"
#include "models/llama_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specbed;
  fuzz::ExpectOnlySpecbedErrors([&] {
    const nlohmann::json j =
        ParseJsonText(std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
    // Not wrapped in WithJsonContext: an nlohmann exception escaping ParseHfConfig would escape
    // the checkpoint loaders too, so it counts as a crash.
    const LlamaConfig c = ParseHfConfig(j, "config.json");
    if (c.n_layers > kMaxConfigLayers || c.dim > kMaxConfigDim || c.vocab_size > kMaxConfigVocab)
      std::abort();
    (void)c.ToHfJson().dump();
    (void)RopeInverseFrequencies(c);
  });
  return 0;
}
