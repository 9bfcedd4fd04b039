// Tests for base/json_read.h: the one JSON reader names the file, the line and the field
// for every failure (syntax, number overflow, duplicate keys, excessive nesting, type errors), and
// JSON output escapes invalid UTF-8 instead of throwing.
#include "base/json_read.h"

#include <gtest/gtest.h>

#include <string>

#include "base/error.h"

namespace specbed {
namespace {

template <typename F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("non-specbed exception: ") + e.what();
  }
  return "<no error>";
}

#define EXPECT_HAS(text, part)                               \
  EXPECT_NE(std::string(text).find(part), std::string::npos) \
      << "missing '" << (part) << "' in: " << (text)

TEST(JsonRead, ParsesValidJsonLikeNlohmann) {
  const nlohmann::json j =
      ParseJsonText(R"({"a": [1, 2.5, "x", null, true], "b": {"c": -3}})", "test.json");
  EXPECT_EQ(j, nlohmann::json::parse(R"({"a": [1, 2.5, "x", null, true], "b": {"c": -3}})"));
}

TEST(JsonRead, SyntaxErrorNamesFileLineAndColumn) {
  const std::string e = ErrorOf([] { ParseJsonText("{\n  \"a\": 1,\n  \"b\": ?\n}", "cfg.json"); });
  EXPECT_HAS(e, "cfg.json:3: not valid JSON (column 8)");
}

TEST(JsonRead, NumberOverflowIsAnErrorWithItsLine) {
  // nlohmann alone throws out_of_range with no position for 1e400.
  const std::string e =
      ErrorOf([] { ParseJsonText("{\"a\": 1,\n\"temperature\": 1e400}", "run.json"); });
  EXPECT_HAS(e, "run.json:2: not valid JSON");
  EXPECT_HAS(e, "1e400");
  EXPECT_EQ(e.find("non-specbed"), std::string::npos) << e;
}

TEST(JsonRead, JsonlLineNumbersStartAtFirstLine) {
  JsonParseOptions o;
  o.first_line = 17;
  o.expected = "one JSON object per line";
  const std::string e = ErrorOf([&] { ParseJsonText(R"({"turns": [1e999]})", "p.jsonl", o); });
  EXPECT_HAS(e, "p.jsonl:17: not valid JSON");
  EXPECT_HAS(e, "expected one JSON object per line");
}

TEST(JsonRead, DuplicateKeyIsAnErrorNamingItsPointer) {
  const std::string e =
      ErrorOf([] { ParseJsonText(R"({"methods": [{"name": "sps", "name": "ar"}]})", "run.json"); });
  EXPECT_HAS(e, "run.json");
  EXPECT_HAS(e, "duplicate key \"name\" at /methods/0/name");
  EXPECT_HAS(ErrorOf([] { ParseJsonText("{\n  \"a\": 1,\n  \"a\": 2\n}", "d.json"); }),
             "d.json:3: not valid JSON (column 5): duplicate key \"a\" at /a");
  // Allowed when asked (files whose format permits repeats).
  JsonParseOptions o;
  o.reject_duplicate_keys = false;
  EXPECT_EQ(ParseJsonText(R"({"a": 1, "a": 2})", "x", o)["a"], 2);
}

TEST(JsonRead, PointerEscapesSlashAndTilde) {
  EXPECT_EQ(JsonPointerChild("/a", "b/c~d"), "/a/b~1c~0d");
  const std::string e = ErrorOf([] { ParseJsonText(R"({"x/y": {"k": 1, "k": 2}})", "f"); });
  EXPECT_HAS(e, "/x~1y/k");
}

TEST(JsonRead, DeepNestingIsRefusedNotRecursed) {
  const std::string deep(100000, '[');
  const std::string e = ErrorOf([&] { ParseJsonText(deep, "deep.json"); });
  EXPECT_HAS(e, "deep.json");
  EXPECT_HAS(e, "nesting deeper than");
  std::string ok;
  for (int i = 0; i < kMaxJsonDepth; ++i) ok += '[';
  for (int i = 0; i < kMaxJsonDepth; ++i) ok += ']';
  EXPECT_NO_THROW(ParseJsonText(ok, "ok.json"));
}

TEST(JsonRead, TrailingGarbageAndInvalidUtf8AreSyntaxErrors) {
  EXPECT_HAS(ErrorOf([] { ParseJsonText("{} x", "t.json"); }), "t.json:1: not valid JSON");
  EXPECT_HAS(ErrorOf([] { ParseJsonText("\"\xff\"", "u.json"); }), "u.json:1: not valid JSON");
}

TEST(JsonRead, WithJsonContextTurnsTypeErrorsIntoErrorsNamingTheSource) {
  const nlohmann::json j = ParseJsonText(R"({"n": "seven"})", "c.json");
  const std::string e =
      ErrorOf([&] { WithJsonContext("c.json", [&] { return j["n"].get<int>(); }); });
  EXPECT_HAS(e, "c.json: field /n: type must be number");
  EXPECT_EQ(e.find("[json.exception"), std::string::npos) << e;
}

TEST(JsonRead, TypeErrorsNameTheNestedFieldAsAJsonPointer) {
  // JSON_DIAGNOSTICS (CMakeLists.txt) records each value's parent, so a type error deep inside a
  // parsed document names where it is, also after the document was copied or moved.
  const nlohmann::json parsed =
      ParseJsonText(R"({"methods": [{"name": "ar"}, {"knobs": {"gamma": "4"}}]})", "s.json");
  const nlohmann::json copy = parsed;
  for (const nlohmann::json* j : {&parsed, &copy}) {
    const std::string e = ErrorOf([&] {
      WithJsonContext("s.json", [&] { return (*j)["methods"][1]["knobs"]["gamma"].get<int>(); });
    });
    EXPECT_HAS(e, "s.json: field /methods/1/knobs/gamma: type must be number, but is string");
  }
  // A caller that names the field itself keeps its own name.
  const std::string named = ErrorOf([&] {
    try {
      (void)parsed["methods"][0]["name"].get<double>();
    } catch (const nlohmann::json::exception& ex) {
      FailJsonException(ex, "s.json", "/methods/0/name");
    }
  });
  EXPECT_HAS(named, "s.json: field /methods/0/name: type must be number");
}

TEST(JsonRead, ReadJsonFileNamesAMissingFile) {
  EXPECT_HAS(ErrorOf([] { ReadJsonFile("/nonexistent/x.json"); }), "/nonexistent/x.json");
}

TEST(JsonRead, OutputReplacesInvalidUtf8InsteadOfThrowing) {
  const nlohmann::json j = {{"ids", {1, 2}}, {"text", std::string("ok \xff\xfe end")}};
  EXPECT_THROW(j.dump(), nlohmann::json::exception);  // what the CLI used to print
  const std::string out = DumpJsonForOutput(j, -1);
  EXPECT_HAS(out, "\"ids\":[1,2]");
  EXPECT_HAS(out, "ok \xEF\xBF\xBD\xEF\xBF\xBD end");  // two U+FFFD
  EXPECT_EQ(nlohmann::json::parse(out)["ids"], nlohmann::json({1, 2}));
}

}  // namespace
}  // namespace specbed
