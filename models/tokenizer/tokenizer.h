// Tokenizer interface shared by every model in SpecBed, and the loaders for the supported formats:
// llama2.c tokenizer.bin (SentencePiece-derived, score-ordered merges with byte fallback) and
// byte-level BPE (GPT-2 / Llama-3 / Qwen2 style) from a HF tokenizer.json or GPT-2's
// vocab.json + merges.txt. See models/tokenizer/README.md for the conventions chosen (BOS/EOS,
// special tokens, normalizers).
// Checked by: tests/tokenizer/llama2c_tokenizer_test.cpp, tests/tokenizer/gpt2_tokenizer_test.cpp,
// tests/tokenizer/hf_tokenizer_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace specbed {

struct EncodeOptions {
  // Prepend bos_id(). A no-op when the tokenizer has no BOS (bos_id() == -1).
  bool add_bos = false;
  // Byte-level BPE: special added tokens (e.g. "<|eot_id|>") written in the text map to their ids.
  // When false, special-token text is encoded as plain text. Non-special added tokens are always
  // matched (as HF tokenizers does). llama2.c tokenizers never parse special tokens (as run.c).
  bool parse_special = true;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Token ids for `text` (arbitrary bytes; byte-level BPE encodes invalid UTF-8 bytes one by one).
  virtual std::vector<int32_t> Encode(const std::string& text,
                                      const EncodeOptions& options = {}) const = 0;

  // Bytes token `id` contributes to decoded text when it follows `prev_id` (-1 = first token).
  // Handles llama2.c's rule (a piece after BOS loses its leading space) and byte tokens <0xXX>.
  // Special tokens return their text unless skip_special (then ""). The bytes of one token may be
  // an incomplete UTF-8 sequence; the concatenation over a sequence is the decoded text.
  // Throws specbed::Error when `id` is outside [0, vocab_size()) or names no token.
  virtual std::string DecodeNext(int32_t prev_id, int32_t id, bool skip_special = false) const = 0;

  // Concatenation of DecodeNext over `ids` (prev_id = -1 for the first).
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special = false) const;

  // One past the largest token id (model vocab and added tokens).
  virtual int32_t vocab_size() const = 0;
  virtual int32_t bos_id() const = 0;                // -1 if none
  virtual std::vector<int32_t> eos_ids() const = 0;  // may be empty; primary EOS first
  virtual bool IsSpecial(int32_t id) const = 0;
  // The vocab entry as stored (for display): e.g. "Ġthe" for byte-level BPE, "<0x0A>" for llama2.c.
  virtual std::string TokenText(int32_t id) const = 0;
  // Inverse of TokenText (also finds added tokens by content).
  virtual std::optional<int32_t> TokenToId(const std::string& token_text) const = 0;
  virtual std::string kind() const = 0;  // "llama2c" or "bpe"
};

// A tokenizer whose vocabulary is a table of token texts by id (llama2.c's pieces; byte-level
// BPE's stored vocab texts and added-token contents): TokenText and TokenToId over that table.
class TokenTableTokenizer : public Tokenizer {
 public:
  std::string TokenText(int32_t id) const override {
    CheckId(id);
    return texts_[id];
  }
  std::optional<int32_t> TokenToId(const std::string& token_text) const override {
    auto it = text_to_id_.find(token_text);
    if (it == text_to_id_.end()) return std::nullopt;
    return it->second;
  }

 protected:
  // Throws specbed::Error naming the tokenizer's file unless `id` names a token.
  virtual void CheckId(int32_t id) const = 0;

  std::vector<std::string> texts_;                       // by id
  std::unordered_map<std::string, int32_t> text_to_id_;  // text -> id
};

// llama2.c tokenizer.bin holding exactly `vocab_size` tokens (the model checkpoint's vocab size).
// BOS = 1, EOS = 2, ids 0..2 are special; byte tokens <0x00>..<0xFF> must be present.
std::unique_ptr<Tokenizer> LoadLlama2cTokenizer(const std::string& path, int32_t vocab_size);

// HF tokenizer.json with a byte-level BPE model (GPT-2, Llama-3, Qwen2/3 style).
std::unique_ptr<Tokenizer> LoadHfTokenizer(const std::string& tokenizer_json_path);

// GPT-2 vocab.json (token -> id) + merges.txt ("a b" per line, optional "#version" first line).
// <|endoftext|> (50256 in GPT-2) is BOS, EOS and special.
std::unique_ptr<Tokenizer> LoadGpt2Tokenizer(const std::string& vocab_json,
                                             const std::string& merges_txt);

// Dispatch on what `path` is: a tokenizer.json file (any *.json, or a file starting with '{'); a
// directory holding tokenizer.json, or vocab.json + merges.txt; or a llama2.c .bin (then
// llama2c_vocab_size must be given (> 0), else specbed::Error).
std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& path, int32_t llama2c_vocab_size = -1);

}  // namespace specbed
