// libFuzzer target: the results store's reader (results/store.h) on arbitrary database files,
// opened read-only: every listing and load either works or fails as specbed::Error.
// Checked by: scripts/fuzz (corpus tests/fuzz/corpus/fuzz_results_store).
#include <cstdlib>

#include "results/store.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specbed;
  const std::string path = fuzz::WriteInput(data, size, "results.db");
  fuzz::ExpectOnlySpecbedErrors([&] {
    StoreOptions options;
    options.read_only = true;
    options.busy_timeout_ms = 0;
    auto store = ResultsStore::Open(path, options);
    for (const auto& run : store->ListRuns()) (void)run;
    int loaded = 0;
    for (const auto& c : store->ListCases()) {
      if (++loaded > 8) break;
      (void)store->LoadSamples(c.case_id);
      (void)store->LoadSteps(c.case_id);
    }
    (void)store->LoadBench();
    (void)store->LoadBenchVerify();
    (void)store->LoadBenchBandwidth();
    for (const auto& t : store->ListTrainRuns()) {
      (void)store->LoadTrainLog(t.train_id);
      (void)store->LoadTrainEval(t.train_id);
    }
  });
  return 0;
}
