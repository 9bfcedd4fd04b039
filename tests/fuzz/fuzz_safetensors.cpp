// libFuzzer target: the safetensors reader (models/checkpoint/safetensors.h) on arbitrary files:
// a file either opens with every tensor's bytes inside the file, or fails as specbed::Error.
// Checked by: scripts/fuzz (corpus tests/fuzz/corpus/fuzz_safetensors).
#include <cstdlib>

#include "models/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specbed;
  const std::string path = fuzz::WriteInput(data, size, "model.safetensors");
  fuzz::ExpectOnlySpecbedErrors([&] {
    auto file = SafetensorsFile::Open(path);
    const uint8_t* begin = file->mapping()->data();
    const uint8_t* end = begin + file->mapping()->size();
    uint64_t sum = 0;
    for (const SafetensorsEntry& e : file->entries()) {
      if (e.nbytes > 0 && (e.data < begin || e.data + e.nbytes > end)) std::abort();
      for (size_t i = 0; i < e.nbytes; i += 61) sum += e.data[i];  // ASan checks the reads
      if (file->Find(e.name) != &e) std::abort();
    }
    (void)sum;
  });
  return 0;
}
