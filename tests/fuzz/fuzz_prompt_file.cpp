// libFuzzer target: prompt files (datasets/dataset.h: JSONL and JSON formats). The first input
// byte picks the format, the rest is the file. Either it loads prompts with at least one
// non-empty turn and a file:line source each, or it fails as specbed::Error.
// Checked by: scripts/fuzz (corpus tests/fuzz/corpus/fuzz_prompt_file).
#include <cstdlib>

#include "datasets/dataset.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specbed;
  if (size == 0) return 0;
  static const std::vector<std::string> formats = PromptFileFormats();
  const std::string& format = formats[data[0] % formats.size()];
  const std::string path = fuzz::WriteInput(data + 1, size - 1, "prompts");
  fuzz::ExpectOnlySpecbedErrors([&] {
    for (const Prompt& p : LoadPromptFile(path, format)) {
      if (p.turns.empty() || p.turns[0].empty() || p.source.empty()) std::abort();
    }
  });
  return 0;
}
