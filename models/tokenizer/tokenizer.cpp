// Tokenizer::Decode and LoadTokenizer's dispatch on what a path is (tokenizer.json, a directory,
// or a llama2.c tokenizer.bin). Checked by: tests/tokenizer/hf_tokenizer_test.cpp (dispatch) and
// the per-format tests in tests/tokenizer/.
#include "models/tokenizer/tokenizer.h"

#include <sys/stat.h>

#include <fstream>

#include "base/error.h"
#include "base/mapped_file.h"

namespace specbed {

std::string Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special) const {
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    out += DecodeNext(prev, id, skip_special);
    prev = id;
  }
  return out;
}

namespace {

bool IsDirectory(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// True when the file's first non-whitespace byte is '{' (a JSON object).
bool LooksLikeJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char c;
  while (in.get(c)) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    return c == '{';
  }
  return false;
}

}  // namespace

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path, int32_t llama2c_vocab_size) {
  SPECBED_CHECK(PathExists(path), "tokenizer path '", path, "' does not exist");
  if (IsDirectory(path)) {
    const std::string json_path = path + "/tokenizer.json";
    if (PathExists(json_path)) return LoadHfTokenizer(json_path);
    const std::string vocab = path + "/vocab.json", merges = path + "/merges.txt";
    if (PathExists(vocab) && PathExists(merges)) return LoadGpt2Tokenizer(vocab, merges);
    const std::string bin = path + "/tokenizer.bin";
    if (PathExists(bin)) return LoadTokenizer(bin, llama2c_vocab_size);
    Fail("tokenizer directory '", path,
         "' holds none of: tokenizer.json, vocab.json + merges.txt, tokenizer.bin");
  }
  if (EndsWith(path, ".json") || LooksLikeJson(path)) return LoadHfTokenizer(path);
  SPECBED_CHECK(llama2c_vocab_size > 0, path,
                ": treated as a llama2.c tokenizer.bin, which needs the model's vocab size "
                "(none given)");
  return LoadLlama2cTokenizer(path, llama2c_vocab_size);
}

}  // namespace specbed
