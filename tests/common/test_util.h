// Small helpers shared by the test suites (header only): the text of the specbed::Error a call
// throws (and the expectation that it throws one naming given parts), substring expectations, and
// fresh scratch files and folders under SPECBED_TEST_TMPDIR.
// Checked by: tests/results/store_test.cpp (and every suite that includes it).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"

// Expects `needle` in (or not in) `haystack`; a failure prints the haystack.
#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)
#define EXPECT_NOT_CONTAINS(haystack, needle) \
  EXPECT_EQ(std::string(haystack).find(needle), std::string::npos) << (haystack)

namespace specbed::testing {

// What ErrorOf returns when `fn` throws no specbed::Error.
inline constexpr char kNoSpecbedError[] = "<no specbed::Error thrown>";

// The message of the specbed::Error `fn` throws, or kNoSpecbedError when it throws none.
inline std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return kNoSpecbedError;
}

// Expects `fn` to throw a specbed::Error whose message contains every string in `parts`.
inline void ExpectError(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "expected specbed::Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
  }
}

// SPECBED_TEST_TMPDIR/<stem>.db with old files of that name (and its SQLite side files) removed.
inline std::string ScratchDb(const std::string& stem) {
  const std::string path = std::string(SPECBED_TEST_TMPDIR) + "/" + stem + ".db";
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::remove((path + suffix).c_str());
  return path;
}

// SPECBED_TEST_TMPDIR/<stem>, removed with its contents; created again (empty) when `create`.
inline std::string ScratchDir(const std::string& stem, bool create = false) {
  const std::string dir = std::string(SPECBED_TEST_TMPDIR) + "/" + stem;
  std::filesystem::remove_all(dir);
  if (create) std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace specbed::testing
