// Tests for HF tokenizer.json loading (models/tokenizer/bpe_loaders.cpp + bpe_tokenizer.cpp) on
// small files written here: a Llama-3-style file (Split regex + ByteLevel, ignore_merges, special
// added tokens, TemplateProcessing BOS) with ids computed by hand, Qwen2-style and GPT-2-style
// variants, LoadTokenizer dispatch, and clear errors for malformed files.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>

#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/tokenizer/tokenizer.h"
#include "tests/common/test_util.h"

namespace specbed {
namespace {

using nlohmann::json;
using testing::ExpectError;

const char kLlama3Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char kQwen2Pattern[] =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// GPT-2's byte -> unicode table, written independently of the library: printable bytes
// ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) map to themselves, the rest to 256, 257, ... in byte order.
std::string ByteSymbol(int b) {
  auto direct = [](int x) {
    return (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
  };
  uint32_t cp = b;
  if (!direct(b)) {
    cp = 256;
    for (int x = 0; x < b; ++x) cp += direct(x) ? 0 : 1;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Vocab: byte b -> id b (so 'h' = 104, 'e' = 101, ' ' = 32 as "Ġ"), then
//   256 "Ġt" (Ġ t), 257 "he" (h e), 258 "Ġthe" (Ġt he), 259 "ll" (l l), 260 "llo" (ll o),
//   261 "Ġhello" (no merge path: only reachable through ignore_merges), 262 "12" (1 2),
//   263 "123" (12 3); merges in that order (ranks 0..6).
// Added: 264 <|begin_of_text|>, 265 <|end_of_text|>, 266 <|eot_id|> (special), 267 <think>
//   (not special), 268 <x>, 269 <x><x> (special; longest match).
json Llama3StyleJson(bool merges_as_pairs, bool ignore_merges) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteSymbol(b)] = b;
  const std::vector<std::string> extra = {"Ġt", "he", "Ġthe", "ll", "llo", "Ġhello", "12", "123"};
  for (size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + static_cast<int>(i);
  const std::vector<std::pair<std::string, std::string>> merge_list = {
      {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"l", "l"}, {"ll", "o"}, {"1", "2"}, {"12", "3"}};
  json merges = json::array();
  for (const auto& [a, b] : merge_list) {
    if (merges_as_pairs) {
      merges.push_back(json::array({a, b}));
    } else {
      merges.push_back(a + " " + b);
    }
  }
  auto added = [](int id, const std::string& content, bool special) {
    return json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", special}};
  };
  json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] =
      json::array({added(264, "<|begin_of_text|>", true), added(265, "<|end_of_text|>", true),
                   added(266, "<|eot_id|>", true), added(267, "<think>", false),
                   added(268, "<x>", true), added(269, "<x><x>", true)});
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", json::array({{{"type", "Split"},
                                                        {"pattern", {{"Regex", kLlama3Pattern}}},
                                                        {"behavior", "Isolated"},
                                                        {"invert", false}},
                                                       {{"type", "ByteLevel"},
                                                        {"add_prefix_space", false},
                                                        {"trim_offsets", true},
                                                        {"use_regex", false}}})}};
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       json::array({{{"type", "ByteLevel"},
                     {"add_prefix_space", true},
                     {"trim_offsets", false},
                     {"use_regex", true}},
                    {{"type", "TemplateProcessing"},
                     {"single", json::array({{{"SpecialToken",
                                               {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                                             {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                     {"pair", json::array()},
                     {"special_tokens",
                      {{"<|begin_of_text|>",
                        {{"id", "<|begin_of_text|>"},
                         {"ids", json::array({264})},
                         {"tokens", json::array({"<|begin_of_text|>"})}}}}}}})}};
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", ignore_merges},
                {"vocab", vocab},
                {"merges", merges}};
  return j;
}

std::string TestDir() {
  const std::string dir = std::string(SPECBED_TEST_TMPDIR) + "/hf_tokenizer_" +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name();
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::string WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return path;
}

std::unique_ptr<Tokenizer> LoadJson(const json& j, const std::string& name = "tokenizer.json") {
  return LoadHfTokenizer(WriteFile(TestDir() + "/" + name, j.dump(1)));
}

// "the hello 12345<|eot_id|>hello!\n" pre-tokenizes (Llama-3 regex) as
//   "the" | " hello" | " " | "123" | "45" | <|eot_id|> | "hello" | "!\n"
// "the": t h e -> (h e) -> [t=116, he=257]; " hello" is the vocab entry "Ġhello" = 261 under
// ignore_merges; " " -> 32; "123": (1 2) then (12 3) -> 263; "45" -> [52, 53];
// "hello": (h e), (l l), (ll o) -> [he=257, llo=260]; "!\n" -> [33, 10].
const char kText[] = "the hello 12345<|eot_id|>hello!\n";
const std::vector<int32_t> kExpected = {116, 257, 261, 32, 263, 52, 53, 266, 257, 260, 33, 10};

TEST(HfTokenizerTest, Llama3StyleEncodesByHand) {
  for (bool pairs : {false, true}) {
    auto tok = LoadJson(Llama3StyleJson(pairs, /*ignore_merges=*/true));
    EXPECT_EQ(tok->kind(), "bpe");
    EXPECT_EQ(tok->Encode(kText), kExpected) << "merges as pairs: " << pairs;
  }
  auto tok = LoadJson(Llama3StyleJson(false, true));
  EXPECT_EQ(tok->vocab_size(), 270);
  EXPECT_EQ(tok->bos_id(), 264);  // from TemplateProcessing
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{265, 266}));
  EXPECT_TRUE(tok->IsSpecial(266));
  EXPECT_FALSE(tok->IsSpecial(267));
  EXPECT_FALSE(tok->IsSpecial(261));
  EXPECT_EQ(tok->TokenText(261), "Ġhello");
  EXPECT_EQ(tok->TokenText(266), "<|eot_id|>");
  EXPECT_EQ(tok->TokenToId("<|eot_id|>"), std::optional<int32_t>(266));
  EXPECT_EQ(tok->TokenToId("Ġt"), std::optional<int32_t>(256));

  EncodeOptions bos;
  bos.add_bos = true;
  std::vector<int32_t> with_bos = {264};
  with_bos.insert(with_bos.end(), kExpected.begin(), kExpected.end());
  EXPECT_EQ(tok->Encode(kText, bos), with_bos);

  EXPECT_EQ(tok->Decode(kExpected), kText);
  EXPECT_EQ(tok->Decode(kExpected, /*skip_special=*/true), "the hello 12345hello!\n");
  EXPECT_EQ(tok->DecodeNext(-1, 261), " hello");
  EXPECT_EQ(tok->DecodeNext(-1, 266, true), "");
}

TEST(HfTokenizerTest, WithoutIgnoreMergesUsesMergePath) {
  auto tok = LoadJson(Llama3StyleJson(false, /*ignore_merges=*/false));
  // " hello": Ġ h e l l o -> (h e) r1, (l l) r3, (ll o) r4 -> [Ġ=32, he=257, llo=260].
  std::vector<int32_t> expected = kExpected;
  expected.erase(expected.begin() + 2);
  expected.insert(expected.begin() + 2, {32, 257, 260});
  EXPECT_EQ(tok->Encode(kText), expected);
  // " the": Ġ t h e -> (Ġ t) r0, (h e) r1, (Ġt he) r2 -> 258.
  EXPECT_EQ(tok->Encode(" the"), std::vector<int32_t>{258});
}

TEST(HfTokenizerTest, ParseSpecialOff) {
  auto tok = LoadJson(Llama3StyleJson(false, true));
  EncodeOptions plain;
  plain.parse_special = false;
  // "45<|eot_id|>hello" now pre-tokenizes as "45" | "<|" | "eot" | "_id" | "|>" | "hello":
  // "<|" -> [60, 124], "eot" -> [101, 111, 116], "_id" -> [95, 105, 100], "|>" -> [124, 62].
  const std::vector<int32_t> expected = {116, 257, 261, 32,  263, 52, 53,  60,  124, 101, 111,
                                         116, 95,  105, 100, 124, 62, 257, 260, 33,  10};
  const std::vector<int32_t> ids = tok->Encode(kText, plain);
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(tok->Decode(ids), kText);
  // Non-special added tokens are matched either way (as HF tokenizers does).
  EXPECT_EQ(tok->Encode("a<think>b", plain), (std::vector<int32_t>{97, 267, 98}));
  EXPECT_EQ(tok->Encode("a<think>b"), (std::vector<int32_t>{97, 267, 98}));
}

TEST(HfTokenizerTest, AddedTokensLongestMatch) {
  auto tok = LoadJson(Llama3StyleJson(false, true));
  EXPECT_EQ(tok->Encode("<x><x><x>"), (std::vector<int32_t>{269, 268}));
  EXPECT_EQ(tok->Encode("<|begin_of_text|><|eot_id|>"), (std::vector<int32_t>{264, 266}));
}

TEST(HfTokenizerTest, RoundTripsTrickyText) {
  auto tok = LoadJson(Llama3StyleJson(false, true));
  for (const std::string text :
       {"  leading and trailing  ", "a\tb\n\nc\r\n  d", "12345 3.14", "don't I'll WE'VE",
        "def f(x):\n    return x**2  # sq", "你好，世界", "👍🏽🎉", "<|eot_id|> <think> <x",
        "\xFF\xFE bad utf8 \xC3"}) {
    EXPECT_EQ(tok->Decode(tok->Encode(text)), text) << text;
  }
  // Llama-3 digits split in groups of three, without a leading space: " 1234567" ->
  // " " | "123" | "456" | "7".
  EXPECT_EQ(tok->Encode(" 1234567"), (std::vector<int32_t>{32, 263, 52, 53, 54, 55}));
}

TEST(HfTokenizerTest, Qwen2StyleNfcAndSingleDigits) {
  json j = Llama3StyleJson(false, false);
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = kQwen2Pattern;
  j["post_processor"] = {{"type", "ByteLevel"},
                         {"add_prefix_space", false},
                         {"trim_offsets", false},
                         {"use_regex", false}};
  // Qwen-like specials instead of Llama-3's.
  j["added_tokens"][0]["content"] = "<|endoftext|>";
  j["added_tokens"][1]["content"] = "<|im_start|>";
  j["added_tokens"][2]["content"] = "<|im_end|>";
  auto tok = LoadJson(j);
  EXPECT_EQ(tok->bos_id(), -1);  // no TemplateProcessing, several specials: no BOS
  EXPECT_EQ(tok->eos_ids(), (std::vector<int32_t>{264, 266}));
  // \p{N} alone: every digit is its own pre-token, so the "1 2" merge never applies.
  EXPECT_EQ(tok->Encode("123"), (std::vector<int32_t>{49, 50, 51}));
  EncodeOptions bos;
  bos.add_bos = true;  // no-op without a BOS
  EXPECT_EQ(tok->Encode("123", bos), (std::vector<int32_t>{49, 50, 51}));
  EXPECT_EQ(tok->Encode("<|im_start|>he<|im_end|>"), (std::vector<int32_t>{265, 257, 266}));
}

TEST(HfTokenizerTest, Gpt2StyleByteLevelRegex) {
  json j = Llama3StyleJson(false, false);
  j["pre_tokenizer"] = {{"type", "ByteLevel"},
                        {"add_prefix_space", false},
                        {"trim_offsets", true},
                        {"use_regex", true}};
  j["post_processor"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = json::array({{{"id", 264}, {"content", "<|endoftext|>"}, {"special", true}}});
  auto tok = LoadJson(j);
  EXPECT_EQ(tok->vocab_size(), 265);
  EXPECT_EQ(tok->bos_id(), 264);  // the only special token, GPT-2 convention
  EXPECT_EQ(tok->eos_ids(), std::vector<int32_t>{264});
  // GPT-2 regex keeps the space with the digits: " 12345" -> Ġ 1 2 3 4 5 -> [32, 263, 52, 53].
  EXPECT_EQ(tok->Encode(" 12345"), (std::vector<int32_t>{32, 263, 52, 53}));

  j["pre_tokenizer"]["add_prefix_space"] = true;
  auto prefixed = LoadJson(j, "prefixed.json");
  // "the" becomes " the" -> 258.
  EXPECT_EQ(prefixed->Encode("the"), std::vector<int32_t>{258});
}

TEST(HfTokenizerTest, LoadTokenizerDispatch) {
  const std::string dir = TestDir();
  WriteFile(dir + "/tokenizer.json", Llama3StyleJson(false, true).dump());
  EXPECT_EQ(LoadTokenizer(dir)->Encode(kText), kExpected);
  EXPECT_EQ(LoadTokenizer(dir + "/tokenizer.json")->Encode(kText), kExpected);
  // A JSON file with another name is recognized by content.
  WriteFile(dir + "/tok.data", Llama3StyleJson(false, true).dump());
  EXPECT_EQ(LoadTokenizer(dir + "/tok.data")->bos_id(), 264);
  const std::string empty_dir = dir + "/empty";
  mkdir(empty_dir.c_str(), 0755);
  ExpectError([&] { LoadTokenizer(empty_dir); }, {empty_dir, "tokenizer.json", "merges.txt"});
  ExpectError([&] { LoadTokenizer(dir + "/missing"); }, {dir + "/missing", "does not exist"});
}

TEST(HfTokenizerTest, MalformedFilesNameTheFile) {
  const std::string dir = TestDir();
  const std::string bad_json = WriteFile(dir + "/bad.json", "{\"model\": {\"type\": \"BPE\",");
  ExpectError([&] { LoadHfTokenizer(bad_json); }, {bad_json, "not valid JSON"});

  json unknown_merge = Llama3StyleJson(false, true);
  unknown_merge["model"]["merges"].push_back("q zz");
  ExpectError([&] { LoadJson(unknown_merge, "unknown_merge.json"); },
              {"unknown_merge.json", "merge #7", "unknown token 'zz'"});

  json bad_merge_string = Llama3StyleJson(false, true);
  bad_merge_string["model"]["merges"].push_back("nospace");
  ExpectError([&] { LoadJson(bad_merge_string, "bad_merge.json"); },
              {"bad_merge.json", "merge #7", "two tokens"});

  json unigram = Llama3StyleJson(false, true);
  unigram["model"] = {{"type", "Unigram"}, {"vocab", json::array()}};
  ExpectError([&] { LoadJson(unigram, "unigram.json"); },
              {"unigram.json", "unsupported model type 'Unigram'"});

  json no_byte_level = Llama3StyleJson(false, true);
  no_byte_level["pre_tokenizer"] = nullptr;
  ExpectError([&] { LoadJson(no_byte_level, "no_byte_level.json"); },
              {"no_byte_level.json", "ByteLevel"});

  json nfkc = Llama3StyleJson(false, true);
  nfkc["normalizer"] = {{"type", "NFKC"}};
  ExpectError([&] { LoadJson(nfkc, "nfkc.json"); }, {"nfkc.json", "normalizer type 'NFKC'"});

  json missing_byte = Llama3StyleJson(false, true);
  missing_byte["model"]["vocab"].erase("a");
  missing_byte["model"]["merges"] = json::array();
  ExpectError([&] { LoadJson(missing_byte, "missing_byte.json"); }, {"missing_byte.json", "0x61"});

  json bad_regex = Llama3StyleJson(false, true);
  bad_regex["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  ExpectError([&] { LoadJson(bad_regex, "bad_regex.json"); }, {"bad_regex.json", "(unclosed"});

  json wrong_type = Llama3StyleJson(false, true);
  wrong_type["added_tokens"][0]["id"] = "not a number";
  ExpectError([&] { LoadJson(wrong_type, "wrong_type.json"); },
              {"wrong_type.json", "added_tokens[0]", "integer 'id'"});
}

}  // namespace
}  // namespace specbed

namespace specbed {
namespace {

// The NFC normalizer is applied (libutf8proc): "café" written with a combining acute accent
// (NFD: e + U+0301) tokenizes as the precomposed é (U+00E9), as the reference Qwen3 tokenizer
// does; without a normalizer the two stay different.
TEST(HfTokenizerTest, NfcNormalizerComposesCombiningAccents) {
  const std::string precomposed = "caf\xC3\xA9";  // U+00E9
  const std::string decomposed = "cafe\xCC\x81";  // e + U+0301
  json j = Llama3StyleJson(false, false);
  const auto plain = LoadJson(j, "plain.json");
  EXPECT_NE(plain->Encode(decomposed), plain->Encode(precomposed));
  j["normalizer"] = {{"type", "NFC"}};
  const auto nfc = LoadJson(j, "nfc.json");
  EXPECT_EQ(nfc->Encode(decomposed), nfc->Encode(precomposed));
  EXPECT_EQ(nfc->Encode(precomposed), (std::vector<int32_t>{99, 97, 102, 0xC3, 0xA9}));
  // Inside a Sequence, and around added tokens (which are matched before normalization).
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", json::array({{{"type", "NFC"}}})}};
  const auto seq = LoadJson(j, "seq.json");
  EXPECT_EQ(seq->Encode(decomposed + "<|eot_id|>" + decomposed),
            seq->Encode(precomposed + "<|eot_id|>" + precomposed));
  j["normalizer"] = {{"type", "NFKC"}};
  ExpectError([&] { LoadJson(j, "nfkc.json"); },
              {"nfkc.json", "unsupported normalizer type 'NFKC'"});
}

// Token ids that would silently collide are refused, naming the tokens.
TEST(HfTokenizerTest, IdCollisionsAndOutOfRangeIdsAreRefused) {
  json reused = Llama3StyleJson(false, true);
  reused["added_tokens"].push_back(
      {{"id", 97}, {"content", "<y>"}, {"special", true}});  // 97 is the vocab's "a"
  ExpectError([&] { LoadJson(reused, "reused.json"); },
              {"reused.json", "added token '<y>' reuses id 97 of vocab token 'a'"});

  json huge = Llama3StyleJson(false, true);
  huge["model"]["vocab"]["zz"] = (int64_t{1} << 32) + 5;  // wrapped to 5 before
  ExpectError([&] { LoadJson(huge, "huge.json"); },
              {"huge.json", "model.vocab entry 'zz'", "4294967301", "outside [0, 2147483647]"});

  json negative = Llama3StyleJson(false, true);
  negative["added_tokens"][0]["id"] = -3;
  ExpectError([&] { LoadJson(negative, "negative.json"); },
              {"negative.json", "added_tokens[0]", "outside [0, 2147483647]"});

  json repeated = Llama3StyleJson(false, true);
  repeated["model"]["vocab"]["zz"] = 256;  // also "Ġt"
  ExpectError([&] { LoadJson(repeated, "repeated.json"); }, {"repeated.json", "share id 256"});
  // The cases that loaded silently before the fix (checked by disabling it): a repeated id of a
  // token no merge needs (the first entry was kept, "zz" dropped), and an id >= 2^32 that wrapped
  // to an id no other token has (the vocabulary grew a token at 1000).
  json repeated_silent = Llama3StyleJson(false, true);
  repeated_silent["model"]["vocab"]["zz"] = 97;  // also "a"
  ExpectError([&] { LoadJson(repeated_silent, "repeated_silent.json"); },
              {"repeated_silent.json", "vocab tokens 'a' and 'zz' share id 97"});
  json huge_silent = Llama3StyleJson(false, true);
  huge_silent["model"]["vocab"]["zz"] = (int64_t{1} << 32) + 1000;  // wrapped to 1000 before
  ExpectError(
      [&] { LoadJson(huge_silent, "huge_silent.json"); },
      {"huge_silent.json", "model.vocab entry 'zz'", "4294968296", "outside [0, 2147483647]"});

  json two_added = Llama3StyleJson(false, true);
  two_added["added_tokens"][3]["id"] = 266;  // <think> onto <|eot_id|>
  ExpectError(
      [&] { LoadJson(two_added, "two_added.json"); },
      {"two_added.json", "added token '<think>' reuses id 266 of added token '<|eot_id|>'"});

  // Restating a vocab token with its own id stays allowed (GPT-2's <|endoftext|>).
  json restated = Llama3StyleJson(false, true);
  restated["added_tokens"].push_back({{"id", 263}, {"content", "123"}, {"special", false}});
  EXPECT_NO_THROW(LoadJson(restated, "restated.json"));
}

// A duplicate key in tokenizer.json is an error naming its JSON pointer (nlohmann keeps the last).
TEST(HfTokenizerTest, DuplicateKeyInTokenizerJsonIsRefused) {
  const std::string text = Llama3StyleJson(false, true).dump();
  const std::string dup = "{\"normalizer\": null, " + text.substr(1);
  const std::string path = WriteFile(TestDir() + "/dup.json", dup);
  ExpectError([&] { LoadHfTokenizer(path); },
              {path, "duplicate key \"normalizer\" at /normalizer"});
}

}  // namespace
}  // namespace specbed
