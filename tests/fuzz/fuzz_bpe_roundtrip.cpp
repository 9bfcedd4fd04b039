// libFuzzer target: encode/decode round trip of the shipped GPT-2 tokenizer
// (models/tokenizer/gpt2) on arbitrary text: byte-level BPE without a normalizer is lossless, so
// Decode(Encode(text)) == text for every byte string (special-token text parsed as plain text).
// Checked by: scripts/fuzz (corpus tests/fuzz/corpus/fuzz_bpe_roundtrip).
#include <cstdlib>
#include <memory>

#include "models/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace {
const specbed::Tokenizer& Gpt2() {
  static std::unique_ptr<specbed::Tokenizer> tok = specbed::LoadGpt2Tokenizer(
      std::string(SPECBED_SOURCE_DIR) + "/models/tokenizer/gpt2/vocab.json",
      std::string(SPECBED_SOURCE_DIR) + "/models/tokenizer/gpt2/merges.txt");
  return *tok;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specbed;
  const std::string text(reinterpret_cast<const char*>(data), size);
  EncodeOptions plain;
  plain.parse_special = false;
  const std::vector<int32_t> ids = Gpt2().Encode(text, plain);
  if (Gpt2().Decode(ids) != text) {
    std::fprintf(stderr, "fuzz: GPT-2 round trip changed the text\n");
    std::abort();
  }
  return 0;
}
