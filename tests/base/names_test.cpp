// Tests for base: name suggestions, unknown-name errors, hashing.
#include <gtest/gtest.h>

#include "base/error.h"
#include "base/hash.h"
#include "base/names.h"

namespace specbed {
namespace {

TEST(Names, EditDistanceIsCaseInsensitiveLevenshtein) {
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3);
  EXPECT_EQ(EditDistance("MT-Bench", "mt-bench"), 0);
  EXPECT_EQ(EditDistance("", "abc"), 3);
}

TEST(Names, NearestNameSuggestsOnlyCloseMatches) {
  const std::vector<std::string> known = {"mt_bench", "spec_bench", "gsm8k"};
  EXPECT_EQ(NearestName("mt_bnch", known), "mt_bench");
  EXPECT_EQ(NearestName("zzzzzzzzzzzz", known), "");
}

TEST(Names, UnknownNameErrorListsKnownNamesAndSuggestion) {
  try {
    FailUnknownName("dataset", "gsm8", {"gsm8k", "math500"});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("unknown dataset 'gsm8'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("did you mean 'gsm8k'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gsm8k, math500"), std::string::npos) << msg;
  }
}

TEST(Hash, Fnv1aKnownVectors) {
  // Published FNV-1a 64-bit test vectors.
  EXPECT_EQ(HashString(""), "cbf29ce484222325");
  EXPECT_EQ(HashString("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(HashString("foobar"), "85944171f73967e8");
}

}  // namespace
}  // namespace specbed
