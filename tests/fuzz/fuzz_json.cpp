// libFuzzer target: the one JSON reader (base/json_read.h) on arbitrary bytes: it either
// returns a document that re-serializes and re-parses to the same value, or fails as
// specbed::Error; output of any string is valid UTF-8 after DumpJsonForOutput.
// Checked by: scripts/fuzz (corpus tests/fuzz/corpus/fuzz_json).
#include <cstdlib>
#include <string_view>

#include "base/json_read.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specbed;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::ExpectOnlySpecbedErrors([&] {
    const nlohmann::json j = ParseJsonText(text, "input.json");
    const nlohmann::json again = ParseJsonText(j.dump(), "dumped.json");
    if (again != j && !j.is_discarded()) {
      // NaN never compares equal; everything else must round-trip.
      if (j.dump() != again.dump()) std::abort();
    }
    (void)DumpJsonForOutput(j, -1);
  });
  // Raw bytes as a string value: output never throws.
  (void)DumpJsonForOutput(nlohmann::json(std::string(text)), -1);
  return 0;
}
