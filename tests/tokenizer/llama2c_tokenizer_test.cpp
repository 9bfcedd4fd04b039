// Tests for the llama2.c tokenizer (models/tokenizer/llama2c_tokenizer.cpp) on the shipped
// models/stories260K/tok512.bin: exact encodings, BOS/leading-space rule, byte fallback round
// trips, and clear errors for malformed files.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/tokenizer/tokenizer.h"
#include "tests/common/test_util.h"

namespace specbed {
namespace {

using testing::ExpectError;

const std::string kTok512 = std::string(SPECBED_SOURCE_DIR) + "/models/stories260K/tok512.bin";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string WriteTmp(const std::string& name, const std::string& bytes) {
  const std::string path = std::string(SPECBED_TEST_TMPDIR) + "/llama2c_" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::string Int32Bytes(int32_t v) {
  return std::string(reinterpret_cast<const char*>(&v), 4);
}

class Llama2cTokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override { tok_ = LoadLlama2cTokenizer(kTok512, 512); }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(Llama2cTokenizerTest, Metadata) {
  EXPECT_EQ(tok_->kind(), "llama2c");
  EXPECT_EQ(tok_->vocab_size(), 512);
  EXPECT_EQ(tok_->bos_id(), 1);
  EXPECT_EQ(tok_->eos_ids(), std::vector<int32_t>{2});
  EXPECT_TRUE(tok_->IsSpecial(0));
  EXPECT_TRUE(tok_->IsSpecial(1));
  EXPECT_TRUE(tok_->IsSpecial(2));
  EXPECT_FALSE(tok_->IsSpecial(3));
  EXPECT_FALSE(tok_->IsSpecial(403));
  EXPECT_EQ(tok_->TokenText(1), "\n<s>\n");
  EXPECT_EQ(tok_->TokenText(403), " Once");
  EXPECT_EQ(tok_->TokenText(13), "<0x0A>");
  EXPECT_EQ(tok_->TokenToId(" upon"), std::optional<int32_t>(407));
  EXPECT_EQ(tok_->TokenToId("not a piece"), std::nullopt);
}

TEST_F(Llama2cTokenizerTest, EncodesOnceUponATime) {
  // tok512.bin pieces: 403 " Once", 407 " upon", 261 " a", 378 " time" (the dummy-prefix space
  // merges into the first word).
  const std::vector<int32_t> expected{403, 407, 261, 378};
  EXPECT_EQ(tok_->Encode("Once upon a time"), expected);
  EncodeOptions with_bos;
  with_bos.add_bos = true;
  const std::vector<int32_t> ids = tok_->Encode("Once upon a time", with_bos);
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  // After BOS the first piece loses its leading space: exact round trip.
  EXPECT_EQ(tok_->Decode(ids, /*skip_special=*/true), "Once upon a time");
  EXPECT_EQ(tok_->Decode(ids), "\n<s>\nOnce upon a time");
  // Without BOS the dummy-prefix space stays (llama2.c's rule only strips after BOS).
  EXPECT_EQ(tok_->Decode(expected), " Once upon a time");
}

TEST_F(Llama2cTokenizerTest, BosAndEmptyText) {
  EncodeOptions with_bos;
  with_bos.add_bos = true;
  EXPECT_EQ(tok_->Encode(""), std::vector<int32_t>{});
  EXPECT_EQ(tok_->Encode("", with_bos), std::vector<int32_t>{1});
  EXPECT_EQ(tok_->DecodeNext(1, 403), "Once");
  EXPECT_EQ(tok_->DecodeNext(-1, 403), " Once");
  EXPECT_EQ(tok_->DecodeNext(407, 403), " Once");
  EXPECT_EQ(tok_->DecodeNext(-1, 2), "\n</s>\n");
  EXPECT_EQ(tok_->DecodeNext(-1, 2, /*skip_special=*/true), "");
  // Special-token text in the input is plain text for llama2.c (no special parsing).
  const std::vector<int32_t> ids = tok_->Encode("</s>");
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 0);
}

TEST_F(Llama2cTokenizerTest, ByteFallbackRoundTrips) {
  EncodeOptions with_bos;
  with_bos.add_bos = true;
  // "é" is a vocab piece (485); "ü" (C3 BC) is not, so it falls back to byte tokens
  // 0xC3 + 3 = 198 and 0xBC + 3 = 191; "\n" becomes <0x0A> = 13.
  EXPECT_EQ(tok_->Encode("é"), (std::vector<int32_t>{410, 485}));  // 410 is " "
  EXPECT_EQ(tok_->Encode("ü"), (std::vector<int32_t>{410, 198, 191}));
  EXPECT_EQ(tok_->Encode("\n"), (std::vector<int32_t>{410, 13}));
  EXPECT_EQ(tok_->DecodeNext(410, 13), "\n");
  EXPECT_EQ(tok_->DecodeNext(-1, 198), "\xC3");
  for (const std::string text : {"é", "ü", "naïve café über", "👍🏽🎉", "你好，世界",
                                 "Tim said: \"Hi!\"\n\tLine two\n",
                                 "a\x01\x7f"
                                 "b",
                                 "  two  spaces  "}) {
    const std::vector<int32_t> ids = tok_->Encode(text, with_bos);
    EXPECT_EQ(tok_->Decode(ids, /*skip_special=*/true), text);
  }
}

TEST_F(Llama2cTokenizerTest, MergesPickHighestScoreLikeRunC) {
  // " little" (376) beats the split " l" + "ittle": whole-word pieces with high scores win.
  EXPECT_EQ(tok_->Encode("little"), std::vector<int32_t>{376});
  EXPECT_EQ(tok_->Encode("Lily"), std::vector<int32_t>{317});
  // Long input stays fast and exact (heap-based merging).
  std::string long_text;
  for (int i = 0; i < 2000; ++i) long_text += "Once upon a time, Lily saw a big dog. ";
  EncodeOptions with_bos;
  with_bos.add_bos = true;
  const std::vector<int32_t> ids = tok_->Encode(long_text, with_bos);
  EXPECT_EQ(tok_->Decode(ids, true), long_text);
  EXPECT_EQ(ids[1], 403);
}

TEST_F(Llama2cTokenizerTest, RejectsOutOfRangeIds) {
  EXPECT_THROW(tok_->DecodeNext(-1, 512), Error);
  EXPECT_THROW(tok_->DecodeNext(-1, -1), Error);
  EXPECT_THROW(tok_->TokenText(9999), Error);
}

TEST(Llama2cTokenizerFileTest, TruncatedFileNamesPath) {
  const std::string bytes = ReadAll(kTok512);
  ASSERT_GT(bytes.size(), 100u);
  const std::string path = WriteTmp("truncated.bin", bytes.substr(0, bytes.size() / 2));
  ExpectError([&] { LoadLlama2cTokenizer(path, 512); }, {path, "truncated"});
  const std::string tiny = WriteTmp("tiny.bin", bytes.substr(0, 2));
  ExpectError([&] { LoadLlama2cTokenizer(tiny, 512); }, {tiny, "max_token_length"});
}

TEST(Llama2cTokenizerFileTest, VocabSizeMismatch) {
  ExpectError([&] { LoadLlama2cTokenizer(kTok512, 511); }, {kTok512, "vocab size mismatch"});
  ExpectError([&] { LoadLlama2cTokenizer(kTok512, 513); }, {kTok512, "truncated", "token 512"});
  ExpectError([&] { LoadLlama2cTokenizer(kTok512, 0); }, {kTok512, "vocab size"});
}

TEST(Llama2cTokenizerFileTest, BadLengths) {
  // max_token_length 7, then one token with length -5 / 1<<30.
  const std::string negative =
      WriteTmp("negative.bin", Int32Bytes(7) + Int32Bytes(0) + Int32Bytes(-5) + std::string("abc"));
  ExpectError([&] { LoadLlama2cTokenizer(negative, 1); }, {negative, "token 0 has length -5"});
  const std::string huge = WriteTmp(
      "huge.bin", Int32Bytes(7) + Int32Bytes(0) + Int32Bytes(1 << 30) + std::string("abc"));
  ExpectError([&] { LoadLlama2cTokenizer(huge, 1); }, {huge, "has length 1073741824"});
  const std::string bad_max = WriteTmp("bad_max.bin", Int32Bytes(-1) + std::string(16, '\0'));
  ExpectError([&] { LoadLlama2cTokenizer(bad_max, 1); }, {bad_max, "max_token_length -1"});
  ExpectError([&] { LoadLlama2cTokenizer("/nonexistent/tok.bin", 512); }, {"/nonexistent/tok.bin"});
}

TEST(Llama2cTokenizerFileTest, MissingByteTokens) {
  // A well-formed file with 3 tokens but no <0xXX> pieces.
  std::string bytes = Int32Bytes(5);
  for (const std::string piece : {"<unk>", "<s>", "</s>"}) {
    bytes += Int32Bytes(0) + Int32Bytes(static_cast<int32_t>(piece.size())) + piece;
  }
  const std::string path = WriteTmp("nobytes.bin", bytes);
  ExpectError([&] { LoadLlama2cTokenizer(path, 3); }, {path, "<0x00>"});
}

TEST(Llama2cTokenizerFileTest, LoadTokenizerDispatch) {
  auto tok = LoadTokenizer(kTok512, 512);
  EXPECT_EQ(tok->kind(), "llama2c");
  ExpectError([&] { LoadTokenizer(kTok512); }, {kTok512, "vocab size"});
}

}  // namespace
}  // namespace specbed
