// libFuzzer target: the llama2.c checkpoint header (models/checkpoint/llama2c_header.h): any bytes
// either give a config within SpecBed's caps or fail as specbed::Error.
// Checked by: scripts/fuzz (corpus tests/fuzz/corpus/fuzz_llama2c_header).
#include <cstdlib>

#include "models/checkpoint/llama2c_header.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specbed;
  fuzz::ExpectOnlySpecbedErrors([&] {
    const LlamaConfig c = ParseLlama2cHeader(data, size, "model.bin");
    c.Validate("model.bin");
    if (c.head_dim <= 0 || c.n_heads % c.n_kv_heads != 0) std::abort();
  });
  return 0;
}
