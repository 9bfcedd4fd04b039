// Small helpers shared by the test suites (header only): the text of the specbed::Error a call
// throws, substring expectations, and fresh scratch files and folders under SPECBED_TEST_TMPDIR.
// Checked by: tests/results/store_test.cpp (and every suite that includes it).
#pragma once

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>

#include "harness/base/error.h"

// Expects `needle` in (or not in) `haystack`; a failure prints the haystack.
#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)
#define EXPECT_NOT_CONTAINS(haystack, needle) \
  EXPECT_EQ(std::string(haystack).find(needle), std::string::npos) << (haystack)

namespace specbed::testing {

// The message of the specbed::Error `fn` throws, or a marker text when it throws none.
inline std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no specbed::Error thrown>";
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
