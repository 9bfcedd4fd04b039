// libFuzzer target: run configs (harness/runner/run_config.h) through the JSON reader: either the
// config parses, passes its checks and expands into cases, or it fails as specbed::Error.
// Checked by: scripts/fuzz (corpus tests/fuzz/corpus/fuzz_run_config).
#include <cstdlib>

#include "harness/runner/run_config.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specbed;
  const std::string path = fuzz::WriteInput(data, size, "run.json");
  fuzz::ExpectOnlySpecbedErrors([&] {
    const RunConfig c = LoadRunConfig(path);
    if (c.max_new_tokens < 1) std::abort();
    size_t n = 1;
    for (size_t k : {c.targets.size(), c.methods.size(), c.datasets.size(), c.temperatures.size(),
                     c.seeds.size()}) {
      n *= k;
    }
    if (n <= 4096) {
      for (const CaseConfig& cc : ExpandCases(c)) (void)cc.Key();
    }
  });
  return 0;
}
