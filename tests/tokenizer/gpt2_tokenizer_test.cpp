// Tests for byte-level BPE on the shipped GPT-2 files (models/tokenizer/gpt2/vocab.json +
// merges.txt): hand-checked encodings, round trips of tricky UTF-8, <|endoftext|> handling.
// Expected ids were looked up in vocab.json (noted per case) and cross-checked against a Python
// implementation of OpenAI's GPT-2 encoder.py on 330 strings while developing.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/tokenizer/tokenizer.h"
#include "tests/common/test_util.h"

namespace specbed {
namespace {

const std::string kGpt2Dir = std::string(SPECBED_SOURCE_DIR) + "/models/tokenizer/gpt2";

class Gpt2TokenizerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tok_ = LoadGpt2Tokenizer(kGpt2Dir + "/vocab.json", kGpt2Dir + "/merges.txt").release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  static Tokenizer* tok_;
};
Tokenizer* Gpt2TokenizerTest::tok_ = nullptr;

TEST_F(Gpt2TokenizerTest, Metadata) {
  EXPECT_EQ(tok_->kind(), "bpe");
  EXPECT_EQ(tok_->vocab_size(), 50257);
  EXPECT_EQ(tok_->bos_id(), 50256);
  EXPECT_EQ(tok_->eos_ids(), std::vector<int32_t>{50256});
  EXPECT_TRUE(tok_->IsSpecial(50256));
  EXPECT_FALSE(tok_->IsSpecial(262));
  EXPECT_EQ(tok_->TokenText(262), "Ġthe");
  EXPECT_EQ(tok_->TokenToId("Ġthe"), std::optional<int32_t>(262));
  EXPECT_EQ(tok_->TokenToId("<|endoftext|>"), std::optional<int32_t>(50256));
  EXPECT_EQ(tok_->TokenToId("no such token"), std::nullopt);
}

TEST_F(Gpt2TokenizerTest, KnownEncodings) {
  // "Hello" 15496, "Ġworld" 995.
  EXPECT_EQ(tok_->Encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  // "Ġthe" 262.
  EXPECT_EQ(tok_->Encode(" the"), std::vector<int32_t>{262});
  // "don" 9099, "'t" 470, "ĠI" 314, "'ll" 1183, "Ġwe" 356, "'ve" 1053.
  EXPECT_EQ(tok_->Encode("don't I'll we've"),
            (std::vector<int32_t>{9099, 470, 314, 1183, 356, 1053}));
  // Pre-tokens "12345", " 3", ".", "14": "123" 10163, "45" 2231, "Ġ3" 513, "." 13, "14" 1415.
  EXPECT_EQ(tok_->Encode("12345 3.14"), (std::vector<int32_t>{10163, 2231, 513, 13, 1415}));
  // "def" 4299, "Ġf" 277, "(" 7, "x" 87, "):" 2599, "Ċ" 198, "Ġ" 220 x3 (the "\n   " pre-token:
  // \s+(?!\S) leaves the last space for " return"), "Ġreturn" 1441, "Ġx" 2124, "**" 1174,
  // "2" 17, "Ġ" 220, "Ġ#" 1303, "Ġsq" 19862.
  EXPECT_EQ(tok_->Encode("def f(x):\n    return x**2  # sq"),
            (std::vector<int32_t>{4299, 277, 7, 87, 2599, 198, 220, 220, 220, 1441, 2124, 1174, 17,
                                  220, 1303, 19862}));
  // Leading/trailing spaces: "Ġ" 220, "Ġleading" 3756, "Ġand" 290, "Ġtrailing" 25462, 220, 220.
  EXPECT_EQ(tok_->Encode("  leading and trailing  "),
            (std::vector<int32_t>{220, 3756, 290, 25462, 220, 220}));
  // "ĊĊ" 628.
  EXPECT_EQ(tok_->Encode("\n\n"), std::vector<int32_t>{628});
  // "你" = E4 BD A0 -> "ä½" 19526 + "ł" 254; "好" = E5 A5 BD -> "å¥" 25001 + "½" 121.
  EXPECT_EQ(tok_->Encode("你好"), (std::vector<int32_t>{19526, 254, 25001, 121}));
  EXPECT_EQ(tok_->Encode(""), std::vector<int32_t>{});
}

TEST_F(Gpt2TokenizerTest, SpecialTokenParsing) {
  // Parsed: "Hello" 15496, <|endoftext|> 50256, "world" 6894.
  EXPECT_EQ(tok_->Encode("Hello<|endoftext|>world"), (std::vector<int32_t>{15496, 50256, 6894}));
  // Not parsed: "<" 27, "|" 91, "end" 437, "of" 1659, "text" 5239, "|" 91, ">" 29.
  EncodeOptions plain;
  plain.parse_special = false;
  const std::vector<int32_t> ids = tok_->Encode("Hello<|endoftext|>world", plain);
  EXPECT_EQ(ids, (std::vector<int32_t>{15496, 27, 91, 437, 1659, 5239, 91, 29, 6894}));
  EXPECT_EQ(tok_->Decode(ids), "Hello<|endoftext|>world");
  EXPECT_EQ(tok_->Decode({15496, 50256, 6894}), "Hello<|endoftext|>world");
  EXPECT_EQ(tok_->Decode({15496, 50256, 6894}, /*skip_special=*/true), "Helloworld");
  EncodeOptions bos;
  bos.add_bos = true;
  EXPECT_EQ(tok_->Encode("Hello world", bos), (std::vector<int32_t>{50256, 15496, 995}));
}

TEST_F(Gpt2TokenizerTest, RoundTripsTrickyText) {
  const std::vector<std::string> texts = {
      " leading",
      "trailing ",
      "multiple     spaces   here ",
      "a\tb\n\nc\r\n  d\n",
      "12345 3.14 1,000,000 0x1F",
      "don't I'll we've SHE'S It’s",
      "def f(x):\n    return x**2  # sq",
      "你好，世界",
      "👍🏽🎉",
      "mixed 中文 and English 123 👍 émigré naïve Привет مرحبا नमस्ते",
      "\xC2\xA0nbsp\xE2\x80\x83"
      "em",
      std::string("nul\0byte", 8),
      "\xFF\xFE invalid \xC3 utf8 \xED\xA0\x80",
      "<|endoftext|>",
      "",
  };
  for (const auto& text : texts) {
    const std::vector<int32_t> ids = tok_->Encode(text);
    EXPECT_EQ(tok_->Decode(ids), text) << "text: " << text;
  }
}

TEST_F(Gpt2TokenizerTest, RoundTripsRandomUtf8) {
  // Random code points from ASCII, Latin-1, Cyrillic, CJK, emoji and whitespace (fixed seed).
  std::mt19937 rng(1234);
  const std::vector<std::pair<uint32_t, uint32_t>> ranges = {{0x20, 0x7E},     {0x09, 0x0D},
                                                             {0xA0, 0xFF},     {0x400, 0x4FF},
                                                             {0x4E00, 0x4FFF}, {0x1F300, 0x1F64F}};
  auto utf8 = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xE0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      s += static_cast<char>(0xF0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    return s;
  };
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const int length = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < length; ++i) {
      const auto& [lo, hi] = ranges[rng() % ranges.size()];
      text += utf8(lo + rng() % (hi - lo + 1));
    }
    const std::vector<int32_t> ids = tok_->Encode(text);
    ASSERT_EQ(tok_->Decode(ids), text) << "trial " << trial;
    for (int32_t id : ids) ASSERT_FALSE(tok_->IsSpecial(id));
  }
}

TEST_F(Gpt2TokenizerTest, LongInputs) {
  // One 20000-letter pre-token and a 20000-space run: exact and not quadratic.
  const std::string letters(20000, 'a');
  const std::vector<int32_t> ids = tok_->Encode(letters);
  EXPECT_EQ(tok_->Decode(ids), letters);
  // merges.txt line 6997 "a a" and line 24539 "aa aa" (no "aaaa aaaa"): 5000 x "aaaa" (24794).
  EXPECT_EQ(ids, std::vector<int32_t>(5000, 24794));
  const std::string spaces = "x" + std::string(20000, ' ') + "y";
  EXPECT_EQ(tok_->Decode(tok_->Encode(spaces)), spaces);
}

TEST(Gpt2TokenizerLoadTest, LoadTokenizerOnDirectory) {
  auto tok = LoadTokenizer(kGpt2Dir);
  EXPECT_EQ(tok->kind(), "bpe");
  EXPECT_EQ(tok->Encode("Hello world"), (std::vector<int32_t>{15496, 995}));
}

TEST(Gpt2TokenizerLoadTest, MergesFileVersionLineAndErrors) {
  const std::string dir = SPECBED_TEST_TMPDIR;
  // Only two merges: "Ġ t" (-> "Ġt" 256) and "h e" (-> "he" 258); the "#version" line is skipped.
  const std::string merges = dir + "/gpt2_two_merges.txt";
  std::ofstream(merges) << "#version: 0.2\nĠ t\nh e\n";
  auto tok = LoadGpt2Tokenizer(kGpt2Dir + "/vocab.json", merges);
  EXPECT_EQ(tok->Encode(" the"), (std::vector<int32_t>{256, 258}));
  const std::string bad = dir + "/gpt2_bad_merges.txt";
  std::ofstream(bad) << "#version: 0.2\nĠ t\nnot one pair\n";
  testing::ExpectError([&] { LoadGpt2Tokenizer(kGpt2Dir + "/vocab.json", bad); }, {bad + ":3:"});
  const std::string unknown = dir + "/gpt2_unknown_merges.txt";
  std::ofstream(unknown) << "Ġ t\nĠ zzzz\n";
  testing::ExpectError([&] { LoadGpt2Tokenizer(kGpt2Dir + "/vocab.json", unknown); },
                       {unknown + ":2: merge 'Ġ zzzz' references unknown token"});
}

}  // namespace
}  // namespace specbed
