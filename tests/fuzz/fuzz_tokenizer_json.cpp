// libFuzzer target: HF tokenizer.json loading (models/tokenizer/tokenizer.h) plus encode/decode of
// a few texts: a file either loads into a tokenizer whose ids stay inside its vocabulary and
// whose every token decodes, or fails as specbed::Error.
// Checked by: scripts/fuzz (corpus tests/fuzz/corpus/fuzz_tokenizer_json).
#include <cstdlib>

#include "models/tokenizer/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specbed;
  const std::string path = fuzz::WriteInput(data, size, "tokenizer.json");
  fuzz::ExpectOnlySpecbedErrors([&] {
    auto tok = LoadHfTokenizer(path);
    const int32_t vocab = tok->vocab_size();
    if (vocab <= 0) std::abort();
    EncodeOptions special;
    special.parse_special = true;
    special.add_bos = true;
    for (const char* text : {"Hello, world! 123", "caf\xC3\xA9 cafe\xCC\x81", "\xff\xfe bytes",
                             "<|endoftext|>x<|im_start|>", "  spaces\n\ttabs "}) {
      for (const EncodeOptions& o : {EncodeOptions(), special}) {
        const std::vector<int32_t> ids = tok->Encode(text, o);
        for (int32_t id : ids) {
          if (id < 0 || id >= vocab) std::abort();
        }
        (void)tok->Decode(ids);
      }
    }
    for (int32_t id = 0; id < vocab && id < 4096; ++id) {
      if (tok->TokenToId(tok->TokenText(id)).has_value()) (void)tok->DecodeNext(-1, id);
    }
  });
  return 0;
}
