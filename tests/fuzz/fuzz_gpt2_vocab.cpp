// libFuzzer target: GPT-2 vocab.json + merges.txt loading (models/tokenizer/tokenizer.h). The input
// is split at its first NUL byte: vocab.json before it, merges.txt after it. Either the pair loads
// and encodes text to ids inside the vocabulary, or it fails as specbed::Error.
// Checked by: scripts/fuzz (corpus tests/fuzz/corpus/fuzz_gpt2_vocab).
#include <cstdlib>
#include <cstring>

#include "models/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specbed;
  const uint8_t* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t split = nul != nullptr ? static_cast<size_t>(nul - data) : size;
  const std::string vocab = fuzz::WriteInput(data, split, "vocab.json");
  const std::string merges = fuzz::WriteInput(nul != nullptr ? nul + 1 : data + size,
                                              nul != nullptr ? size - split - 1 : 0, "merges.txt");
  fuzz::ExpectOnlySpecbedErrors([&] {
    auto tok = LoadGpt2Tokenizer(vocab, merges);
    for (int32_t id : tok->Encode("Hello world, it's 2024!\n")) {
      if (id < 0 || id >= tok->vocab_size()) std::abort();
    }
  });
  return 0;
}
