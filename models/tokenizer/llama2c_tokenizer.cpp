// llama2.c tokenizer.bin reader and its encode/decode (same algorithm as llama2.c's run.c: dummy
// prefix " ", UTF-8 code point lookup with byte fallback, then repeatedly merge the best-scoring
// adjacent pair, leftmost on ties; a heap makes it O(n log n) instead of run.c's O(n^2)).
// Checked by: tests/tokenizer/llama2c_tokenizer_test.cpp (shipped models/stories260K/tok512.bin).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_map>

#include "base/error.h"
#include "base/mapped_file.h"
#include "models/tokenizer/pair_merge.h"
#include "models/tokenizer/tokenizer.h"

namespace specbed {
namespace {

constexpr int32_t kBosId = 1;
constexpr int32_t kEosId = 2;
constexpr int32_t kMaxTokenLength = 1 << 16;  // sanity bound on max_token_length

class Llama2cTokenizer : public TokenTableTokenizer {
 public:
  Llama2cTokenizer(const std::string& path, int32_t vocab_size);

  std::vector<int32_t> Encode(const std::string& text, const EncodeOptions& options) const override;
  std::string DecodeNext(int32_t prev_id, int32_t id, bool skip_special) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(texts_.size()); }
  int32_t bos_id() const override { return kBosId; }
  std::vector<int32_t> eos_ids() const override { return {kEosId}; }
  bool IsSpecial(int32_t id) const override { return id >= 0 && id <= kEosId && id < vocab_size(); }
  std::string kind() const override { return "llama2c"; }

 private:
  void CheckId(int32_t id) const override {
    SPECBED_CHECK(id >= 0 && id < vocab_size(), path_, ": token id ", id,
                  " out of range (vocab size ", vocab_size(), ")");
  }
  int32_t Lookup(const std::string& piece) const {
    auto it = text_to_id_.find(piece);
    return it == text_to_id_.end() ? -1 : it->second;
  }

  std::string path_;
  std::vector<float> scores_;
  int32_t byte_ids_[256];
  std::vector<int> decoded_byte_;  // by id: the byte of a <0xXX> piece, else -1
};

Llama2cTokenizer::Llama2cTokenizer(const std::string& path, int32_t vocab_size) : path_(path) {
  SPECBED_CHECK(vocab_size > 0, path, ": llama2.c tokenizer needs a positive vocab size (from the ",
                "model checkpoint), got ", vocab_size);
  auto file = MappedFile::Open(path);
  const uint8_t* data = file->data();
  const size_t size = file->size();
  size_t offset = 0;
  auto read_i32 = [&](const char* what, int32_t token) {
    SPECBED_CHECK(offset + 4 <= size, path, ": truncated llama2.c tokenizer file (", size,
                  " bytes): cannot read ", what, token >= 0 ? StrCat(" of token ", token) : "",
                  " at byte ", offset, "; expected ", vocab_size, " tokens");
    int32_t v;
    std::memcpy(&v, data + offset, 4);
    offset += 4;
    return v;
  };
  const int32_t max_token_length = read_i32("max_token_length", -1);
  SPECBED_CHECK(max_token_length > 0 && max_token_length <= kMaxTokenLength, path,
                ": max_token_length ", max_token_length, " is not in [1, ", kMaxTokenLength,
                "]; not a llama2.c tokenizer.bin?");
  // Each token takes at least 8 bytes: do not trust vocab_size for the reservation.
  const size_t plausible = std::min<size_t>(vocab_size, size / 8);
  texts_.reserve(plausible);
  scores_.reserve(plausible);
  for (int32_t i = 0; i < vocab_size; ++i) {
    const int32_t score_bits = read_i32("score", i);
    float score;
    std::memcpy(&score, &score_bits, 4);
    const int32_t len = read_i32("length", i);
    SPECBED_CHECK(len >= 0 && len <= max_token_length, path, ": token ", i, " has length ", len,
                  " at byte ", offset - 4, "; expected 0..max_token_length (", max_token_length,
                  ")");
    SPECBED_CHECK(offset + static_cast<size_t>(len) <= size, path,
                  ": truncated llama2.c tokenizer file (", size, " bytes): token ", i, " needs ",
                  len, " bytes at byte ", offset, "; expected ", vocab_size, " tokens");
    texts_.emplace_back(reinterpret_cast<const char*>(data + offset), len);
    scores_.push_back(score);
    offset += len;
    text_to_id_.emplace(texts_.back(), i);
  }
  SPECBED_CHECK(offset == size, path, ": ", size - offset, " bytes left after ", vocab_size,
                " tokens; the file holds more tokens than the model's vocab size ", vocab_size,
                " (vocab size mismatch)");
  SPECBED_CHECK(vocab_size > kEosId, path, ": vocab size ", vocab_size,
                " leaves no room for <unk>, BOS and EOS (ids 0..2)");
  decoded_byte_.assign(vocab_size, -1);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const int32_t id = Lookup(name);
    SPECBED_CHECK(id >= 0, path, ": byte-fallback token ", name,
                  " is missing (llama2.c tokenizers have <0x00>..<0xFF>)");
    byte_ids_[b] = id;
    decoded_byte_[id] = b;
  }
}

std::vector<int32_t> Llama2cTokenizer::Encode(const std::string& text,
                                              const EncodeOptions& options) const {
  // Symbols as ids; the dummy prefix " " comes first when the text is non-empty.
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 1);
  if (!text.empty()) {
    const int32_t space = Lookup(" ");
    ids.push_back(space >= 0 ? space : byte_ids_[static_cast<unsigned char>(' ')]);
  }
  // UTF-8: group a lead byte with up to 3 continuation bytes (run.c's rule, no validation).
  size_t i = 0;
  while (i < text.size()) {
    size_t n = 1;
    while (n < 4 && i + n < text.size() &&
           (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80) {
      ++n;
    }
    const int32_t id = Lookup(text.substr(i, n));
    if (id >= 0) {
      ids.push_back(id);
    } else {
      for (size_t k = 0; k < n; ++k)
        ids.push_back(byte_ids_[static_cast<unsigned char>(text[i + k])]);
    }
    i += n;
  }

  // Merge the best-scoring adjacent pair whose concatenation is a vocab piece until none is left
  // (highest score first: priority -score).
  const std::vector<int32_t> merged =
      MergeAdjacentPairs(std::move(ids), [&](int32_t left, int32_t right) {
        const int32_t id = Lookup(texts_[left] + texts_[right]);
        // run.c starts its best-score search at -1e10, so lower-scored pieces never merge.
        if (id < 0 || !(scores_[id] > -1e10f)) return std::optional<PairMerge>();
        return std::optional<PairMerge>(PairMerge{-static_cast<double>(scores_[id]), id});
      });
  std::vector<int32_t> out;
  out.reserve(merged.size() + 1);
  if (options.add_bos) out.push_back(kBosId);
  out.insert(out.end(), merged.begin(), merged.end());
  return out;
}

std::string Llama2cTokenizer::DecodeNext(int32_t prev_id, int32_t id, bool skip_special) const {
  CheckId(id);
  if (IsSpecial(id)) return skip_special ? "" : texts_[id];
  if (decoded_byte_[id] >= 0) return std::string(1, static_cast<char>(decoded_byte_[id]));
  const std::string& piece = texts_[id];
  if (prev_id == kBosId && !piece.empty() && piece[0] == ' ') return piece.substr(1);
  return piece;
}

}  // namespace

std::unique_ptr<Tokenizer> LoadLlama2cTokenizer(const std::string& path, int32_t vocab_size) {
  return std::make_unique<Llama2cTokenizer>(path, vocab_size);
}

}  // namespace specbed
