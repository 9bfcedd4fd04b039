// Byte-level BPE encoding/decoding: added-token splitting, pre-tokenizer stages (PCRE2), GPT-2
// byte<->unicode mapping, rank-ordered merges with a heap (O(n log n) per pre-token) and a
// per-pre-token cache. Checked by: tests/tokenizer/gpt2_tokenizer_test.cpp (real GPT-2 vocab) and
// tests/tokenizer/hf_tokenizer_test.cpp (hand-computed ids for a Llama-3-style tokenizer.json).
#include "models/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include <utf8proc.h>

#include "base/error.h"
#include "models/tokenizer/pair_merge.h"

namespace specbed {

const std::vector<uint32_t>& ByteToUnicodeTable() {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(256, 0);
    std::vector<bool> direct(256, false);
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) t[b] = direct[b] ? static_cast<uint32_t>(b) : next++;
    return t;
  }();
  return table;
}

std::string CodePointToUtf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

namespace {

// Decodes a stored byte-level token ("Ġthe") to raw bytes (" the"). Code points outside the
// byte table (not produced by byte-level BPE) decode to their own UTF-8 bytes.
std::string ByteLevelToBytes(const std::string& text) {
  static const std::unordered_map<uint32_t, uint8_t> inverse = [] {
    std::unordered_map<uint32_t, uint8_t> m;
    const auto& table = ByteToUnicodeTable();
    for (int b = 0; b < 256; ++b) m[table[b]] = static_cast<uint8_t>(b);
    return m;
  }();
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const size_t valid = ValidUtf8Prefix(text.data() + i, text.size() - i);
    if (valid == 0) {  // not UTF-8: keep the byte
      out += text[i++];
      continue;
    }
    // Decode one code point.
    const auto* s = reinterpret_cast<const unsigned char*>(text.data() + i);
    uint32_t cp;
    size_t n;
    if (s[0] < 0x80) {
      cp = s[0], n = 1;
    } else if (s[0] < 0xE0) {
      cp = s[0] & 0x1F, n = 2;
    } else if (s[0] < 0xF0) {
      cp = s[0] & 0x0F, n = 3;
    } else {
      cp = s[0] & 0x07, n = 4;
    }
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (s[k] & 0x3F);
    auto it = inverse.find(cp);
    if (it != inverse.end()) {
      out += static_cast<char>(it->second);
    } else {
      out.append(text, i, n);
    }
    i += n;
  }
  return out;
}

constexpr int64_t kMaxVocabSize = int64_t{1} << 24;

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Unicode Normalization Form C of valid UTF-8 `text` (libutf8proc); ASCII is returned as is.
std::string NfcNormalize(std::string_view text) {
  bool ascii = true;
  for (char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return std::string(text);
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &mapped,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {  // cannot happen for valid UTF-8; keep the text rather than lose it
    std::free(mapped);
    return std::string(text);
  }
  std::string out(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  std::free(mapped);
  return out;
}

class BpeTokenizer : public TokenTableTokenizer {
 public:
  explicit BpeTokenizer(BpeConfig config);

  std::vector<int32_t> Encode(const std::string& text, const EncodeOptions& options) const override;
  std::string DecodeNext(int32_t prev_id, int32_t id, bool skip_special) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(kinds_.size()); }
  int32_t bos_id() const override { return bos_id_; }
  std::vector<int32_t> eos_ids() const override { return eos_ids_; }
  bool IsSpecial(int32_t id) const override {
    return id >= 0 && id < vocab_size() && kinds_[id] == Kind::kSpecial;
  }
  std::string kind() const override { return "bpe"; }

 private:
  enum class Kind : uint8_t { kNone, kVocab, kAdded, kSpecial };
  struct Merge {
    int32_t rank;
    int32_t merged_id;
  };

  void CheckId(int32_t id) const override {
    SPECBED_CHECK(id >= 0 && id < vocab_size() && kinds_[id] != Kind::kNone, source_, ": token id ",
                  id, " is not a token (vocab size ", vocab_size(), ")");
  }
  // Encodes text with no added tokens in it.
  void EncodeText(std::string_view text, std::vector<int32_t>* out) const;
  void EncodeValidUtf8(std::string_view text, std::vector<int32_t>* out) const;
  void EncodePreToken(std::string_view piece, std::vector<int32_t>* out) const;
  void ApplyMerges(std::string_view piece, std::vector<int32_t>* out) const;

  std::string source_;
  std::vector<Kind> kinds_;                         // by id
  std::vector<std::string> bytes_;                  // by id: decoded bytes
  std::unordered_map<std::string, int32_t> vocab_;  // model vocab, stored form
  std::unordered_map<uint64_t, Merge> merges_;
  int32_t byte_ids_[256];
  std::vector<std::string> byte_symbols_;  // byte -> its unicode symbol (UTF-8)
  std::vector<BpeSplitStep> pre_tokenizer_;
  bool ignore_merges_;
  bool nfc_;
  std::vector<BpeAddedToken> added_;
  std::vector<std::vector<int>> added_by_first_byte_;  // indexes into added_, longest first
  int32_t bos_id_;
  std::vector<int32_t> eos_ids_;

  static constexpr size_t kMaxCacheEntries = 1 << 16;
  static constexpr size_t kMaxCachedPieceBytes = 256;
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

BpeTokenizer::BpeTokenizer(BpeConfig config)
    : source_(std::move(config.source)),
      pre_tokenizer_(std::move(config.pre_tokenizer)),
      ignore_merges_(config.ignore_merges),
      nfc_(config.nfc),
      added_(std::move(config.added_tokens)),
      bos_id_(config.bos_id),
      eos_ids_(std::move(config.eos_ids)) {
  int64_t max_id = -1;
  for (const auto& [text, id] : config.vocab) {
    SPECBED_CHECK(id >= 0, source_, ": vocab entry '", text, "' has negative id ", id);
    max_id = std::max<int64_t>(max_id, id);
  }
  for (const auto& t : added_) {
    SPECBED_CHECK(t.id >= 0, source_, ": added token '", t.content, "' has negative id ", t.id);
    SPECBED_CHECK(!t.content.empty(), source_, ": added token ", t.id, " has empty content");
    max_id = std::max<int64_t>(max_id, t.id);
  }
  SPECBED_CHECK(max_id >= 0, source_, ": empty vocab");
  SPECBED_CHECK(max_id < kMaxVocabSize, source_, ": token id ", max_id,
                " is implausibly large (limit ", kMaxVocabSize, ")");
  kinds_.assign(max_id + 1, Kind::kNone);
  texts_.resize(max_id + 1);
  bytes_.resize(max_id + 1);
  for (const auto& [text, id] : config.vocab) {
    // Two tokens with one id would decode one of them wrongly: refuse, naming both.
    SPECBED_CHECK(kinds_[id] == Kind::kNone, source_, ": vocab tokens '", texts_[id], "' and '",
                  text, "' share id ", id, " (each id must name one token)");
    kinds_[id] = Kind::kVocab;
    texts_[id] = text;
    bytes_[id] = ByteLevelToBytes(text);
    vocab_.emplace(text, id);
    text_to_id_.emplace(text, id);
  }
  for (const auto& t : added_) {
    // An added token may restate a vocab token with its own id (GPT-2's <|endoftext|>), but not
    // take over an id that names other text.
    SPECBED_CHECK(kinds_[t.id] == Kind::kNone || texts_[t.id] == t.content, source_,
                  ": added token '", t.content, "' reuses id ", t.id, " of ",
                  kinds_[t.id] == Kind::kVocab ? "vocab" : "added", " token '", texts_[t.id],
                  "' (each id must name one token)");
    kinds_[t.id] = t.special ? Kind::kSpecial : Kind::kAdded;
    texts_[t.id] = t.content;
    bytes_[t.id] = t.content;
    text_to_id_[t.content] = t.id;
  }

  // Byte symbols: every byte must have its single-symbol token.
  const auto& table = ByteToUnicodeTable();
  byte_symbols_.resize(256);
  for (int b = 0; b < 256; ++b) {
    byte_symbols_[b] = CodePointToUtf8(table[b]);
    auto it = vocab_.find(byte_symbols_[b]);
    if (it == vocab_.end()) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", b);
      Fail(source_, ": byte-level BPE vocab lacks the symbol '", byte_symbols_[b], "' for byte ",
           hex, " (all 256 byte symbols are required)");
    }
    byte_ids_[b] = it->second;
  }

  // Merges.
  merges_.reserve(config.merges.size());
  for (size_t i = 0; i < config.merges.size(); ++i) {
    const auto& [a, b] = config.merges[i];
    const int line = i < config.merge_lines.size() ? config.merge_lines[i] : 0;
    const std::string& file = config.merges_source.empty() ? source_ : config.merges_source;
    const std::string where = line > 0 ? StrCat(file, ":", line, ": merge '", a, " ", b, "'")
                                       : StrCat(file, ": merge #", i, " '", a, " ", b, "'");
    auto ia = vocab_.find(a);
    SPECBED_CHECK(ia != vocab_.end(), where, " references unknown token '", a, "'");
    auto ib = vocab_.find(b);
    SPECBED_CHECK(ib != vocab_.end(), where, " references unknown token '", b, "'");
    auto im = vocab_.find(a + b);
    SPECBED_CHECK(im != vocab_.end(), where, " produces '", a + b, "', which is not in the vocab");
    // A repeated pair keeps its first (best) rank, as HF does.
    merges_.emplace(PairKey(ia->second, ib->second), Merge{static_cast<int32_t>(i), im->second});
  }

  // Added tokens by first byte, longest first (leftmost-longest matching).
  added_by_first_byte_.resize(256);
  for (size_t i = 0; i < added_.size(); ++i) {
    added_by_first_byte_[static_cast<unsigned char>(added_[i].content[0])].push_back(
        static_cast<int>(i));
  }
  for (auto& list : added_by_first_byte_) {
    std::stable_sort(list.begin(), list.end(), [&](int x, int y) {
      return added_[x].content.size() > added_[y].content.size();
    });
  }
  for (int32_t id : eos_ids_) CheckId(id);
  if (bos_id_ >= 0) CheckId(bos_id_);
}

std::vector<int32_t> BpeTokenizer::Encode(const std::string& text,
                                          const EncodeOptions& options) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (options.add_bos && bos_id_ >= 0) out.push_back(bos_id_);
  // Split on added tokens (leftmost, longest); special ones only with parse_special.
  size_t plain_begin = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& candidates = added_by_first_byte_[static_cast<unsigned char>(text[pos])];
    const BpeAddedToken* hit = nullptr;
    for (int index : candidates) {
      const BpeAddedToken& t = added_[index];
      if (t.special && !options.parse_special) continue;
      if (text.compare(pos, t.content.size(), t.content) == 0) {
        hit = &t;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    EncodeText(std::string_view(text).substr(plain_begin, pos - plain_begin), &out);
    out.push_back(hit->id);
    pos += hit->content.size();
    plain_begin = pos;
  }
  EncodeText(std::string_view(text).substr(plain_begin), &out);
  return out;
}

void BpeTokenizer::EncodeText(std::string_view text, std::vector<int32_t>* out) const {
  // Valid UTF-8 runs go through the pre-tokenizer; each invalid byte is its own byte token.
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t valid = ValidUtf8Prefix(text.data() + pos, text.size() - pos);
    if (valid > 0) EncodeValidUtf8(text.substr(pos, valid), out);
    pos += valid;
    if (pos < text.size()) out->push_back(byte_ids_[static_cast<unsigned char>(text[pos++])]);
  }
}

void BpeTokenizer::EncodeValidUtf8(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::vector<std::string> pieces{nfc_ ? NfcNormalize(text) : std::string(text)};
  std::vector<std::pair<size_t, size_t>> matches;
  struct Segment {
    size_t begin, end;
    bool is_match;
  };
  std::vector<Segment> segments;
  for (const BpeSplitStep& step : pre_tokenizer_) {
    std::vector<std::string> next;
    for (std::string& piece : pieces) {
      if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(0, " ");
      if (!step.regex) {
        next.push_back(std::move(piece));
        continue;
      }
      matches.clear();
      step.regex->FindAll(piece, &matches);
      segments.clear();
      size_t at = 0;
      for (const auto& [b, e] : matches) {
        if (b > at) segments.push_back({at, b, step.invert});
        segments.push_back({b, e, !step.invert});
        at = e;
      }
      if (at < piece.size()) segments.push_back({at, piece.size(), step.invert});
      // Merge segments per behavior (same rules as HF tokenizers' SplitDelimiterBehavior).
      std::vector<std::pair<size_t, size_t>> ranges;
      using B = BpeSplitStep::Behavior;
      switch (step.behavior) {
        case B::kIsolated:
          for (const auto& s : segments) ranges.emplace_back(s.begin, s.end);
          break;
        case B::kRemoved:
          for (const auto& s : segments) {
            if (!s.is_match) ranges.emplace_back(s.begin, s.end);
          }
          break;
        case B::kMergedWithPrevious: {
          bool previous_match = false;
          for (const auto& s : segments) {
            if (s.is_match && !previous_match && !ranges.empty()) {
              ranges.back().second = s.end;
            } else {
              ranges.emplace_back(s.begin, s.end);
            }
            previous_match = s.is_match;
          }
          break;
        }
        case B::kMergedWithNext: {
          bool next_match = false;
          for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
            if (it->is_match && !next_match && !ranges.empty()) {
              ranges.back().first = it->begin;
            } else {
              ranges.emplace_back(it->begin, it->end);
            }
            next_match = it->is_match;
          }
          std::reverse(ranges.begin(), ranges.end());
          break;
        }
        case B::kContiguous: {
          bool previous_match = false;
          for (const auto& s : segments) {
            if (s.is_match == previous_match && !ranges.empty()) {
              ranges.back().second = s.end;
            } else {
              ranges.emplace_back(s.begin, s.end);
            }
            previous_match = s.is_match;
          }
          break;
        }
      }
      for (const auto& [b, e] : ranges) {
        if (e > b) next.push_back(piece.substr(b, e - b));
      }
    }
    pieces = std::move(next);
  }
  for (const std::string& piece : pieces) EncodePreToken(piece, out);
}

void BpeTokenizer::EncodePreToken(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    out->push_back(byte_ids_[static_cast<unsigned char>(piece[0])]);
    return;
  }
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  std::string key;
  if (cacheable) {
    key.assign(piece);
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out->insert(out->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  bool done = false;
  if (ignore_merges_) {
    std::string mapped;
    for (char c : piece) mapped += byte_symbols_[static_cast<unsigned char>(c)];
    auto it = vocab_.find(mapped);
    if (it != vocab_.end()) {
      ids.push_back(it->second);
      done = true;
    }
  }
  if (!done) ApplyMerges(piece, &ids);
  out->insert(out->end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kMaxCacheEntries) cache_.clear();
    cache_.emplace(std::move(key), std::move(ids));
  }
}

void BpeTokenizer::ApplyMerges(std::string_view piece, std::vector<int32_t>* out) const {
  // Merging the lowest rank first, leftmost on ties, equals GPT-2's "merge all occurrences of the
  // best pair" for well-formed merge lists.
  std::vector<int32_t> ids(piece.size());
  for (size_t i = 0; i < piece.size(); ++i)
    ids[i] = byte_ids_[static_cast<unsigned char>(piece[i])];
  const std::vector<int32_t> merged =
      MergeAdjacentPairs(std::move(ids), [&](int32_t left, int32_t right) {
        auto it = merges_.find(PairKey(left, right));
        if (it == merges_.end()) return std::optional<PairMerge>();
        return std::optional<PairMerge>(
            PairMerge{static_cast<double>(it->second.rank), it->second.merged_id});
      });
  out->insert(out->end(), merged.begin(), merged.end());
}

std::string BpeTokenizer::DecodeNext(int32_t prev_id, int32_t id, bool skip_special) const {
  CheckId(id);
  if (skip_special && kinds_[id] == Kind::kSpecial) return "";
  return bytes_[id];
}

}  // namespace

std::unique_ptr<Tokenizer> MakeBpeTokenizer(BpeConfig config) {
  return std::make_unique<BpeTokenizer>(std::move(config));
}

}  // namespace specbed
