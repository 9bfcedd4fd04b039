// libFuzzer target: sweep files (harness/runner/sweep_config.h) through the JSON reader, the
// config-relative input-path resolution (with "drafter" and "head" as every method's path knobs,
// standing in for the method registry) and ParseSweepConfig, called bare so an nlohmann exception
// escaping them counts as a crash. A sweep that parses must hold repeats >= 1, batch sizes >= 1,
// at least one method; its ToJson (what runs.config_json stores) must parse back to the same
// sweep; and its matchers must evaluate on its (run-config) cases.
// Checked by: scripts/fuzz (corpus tests/fuzz/corpus/fuzz_sweep_config).
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "base/json_read.h"
#include "harness/runner/sweep_config.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::vector<std::string> PathKnobs(const std::string&) {
  return {"drafter", "head"};
}

[[noreturn]] void Broken(const char* what) {
  std::fprintf(stderr, "fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specbed;
  fuzz::ExpectOnlySpecbedErrors([&] {
    nlohmann::json j =
        ParseJsonText(std::string_view(reinterpret_cast<const char*>(data), size), "sweep.json");
    ResolveConfigPaths(j, "sweep.json", PathKnobs);
    const SweepConfig c = ParseSweepConfig(j, "sweep.json");
    if (c.repeats < 1 || c.batch_sizes.empty() || c.base.methods.empty() ||
        c.method_entries.empty() || c.base.max_new_tokens < 1) {
      Broken("a parsed sweep broke an invariant");
    }
    for (int64_t b : c.batch_sizes) {
      if (b < 1) Broken("a batch size < 1 was accepted");
    }
    const nlohmann::json written = c.ToJson();
    try {
      if (ParseSweepConfig(written, "written.json").ToJson() != written)
        Broken("ToJson of a parsed sweep read back to a different sweep");
    } catch (const Error& e) {
      std::fprintf(stderr, "fuzz: ToJson of a parsed sweep does not parse: %s\n", e.what());
      std::abort();
    }
    size_t n = 1;
    for (size_t k : {c.base.targets.size(), c.base.methods.size(), c.base.datasets.size(),
                     c.base.temperatures.size(), c.base.seeds.size()}) {
      n *= k;
    }
    if (n <= 1024) {
      for (const CaseConfig& cc : ExpandCases(c.base)) {
        for (const auto& m : c.exclude) (void)MatchesCase(m, cc);
        for (const auto& m : c.only) (void)MatchesCase(m, cc);
      }
    }
  });
  return 0;
}
