// Byte-level BPE tokenizer (GPT-2 / Llama-3 / Qwen2 style), built from a BpeConfig that the
// tokenizer.json and vocab.json+merges.txt loaders fill. Internal to specbed_tokenizer.
// Checked by: tests/tokenizer/gpt2_tokenizer_test.cpp and tests/tokenizer/hf_tokenizer_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/tokenizer/pcre_regex.h"
#include "models/tokenizer/tokenizer.h"

namespace specbed {

// One pre-tokenizer stage, applied to every piece produced by the stages before it
// (HF's Split, and ByteLevel's prefix space / GPT-2 regex split).
struct BpeSplitStep {
  enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
  bool add_prefix_space = false;     // ByteLevel: prepend ' ' to a piece not starting with ' '
  std::shared_ptr<PcreRegex> regex;  // null: no splitting
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;  // split on the non-matching parts instead
};

struct BpeAddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
};

struct BpeConfig {
  std::string source;  // file name(s) used in error messages
  // Model vocab, tokens in GPT-2's byte-to-unicode form ("Ġthe").
  std::vector<std::pair<std::string, int32_t>> vocab;
  // Merges in rank order (rank = index); merge_lines[i] is the source line of merges[i] (1-based)
  // or 0 when unknown (then errors say "merge #i").
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<int> merge_lines;
  std::string merges_source;  // file named in merge errors; empty: `source`
  std::vector<BpeSplitStep> pre_tokenizer;
  bool ignore_merges = false;  // a pre-token that is itself in the vocab is emitted directly
  // Normalizer NFC (tokenizer.json "normalizer": {"type": "NFC"}): text between added tokens is
  // put in Unicode Normalization Form C (through libutf8proc) before pre-tokenization.
  bool nfc = false;
  std::vector<BpeAddedToken> added_tokens;
  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;
};

// Validates the config (all 256 byte symbols present, merges reference vocab tokens and produce
// vocab tokens) and builds the tokenizer. Errors name config.source.
std::unique_ptr<Tokenizer> MakeBpeTokenizer(BpeConfig config);

// GPT-2's reversible byte -> unicode code point table (printable bytes map to themselves).
const std::vector<uint32_t>& ByteToUnicodeTable();

// UTF-8 encoding of one code point.
std::string CodePointToUtf8(uint32_t cp);

}  // namespace specbed
