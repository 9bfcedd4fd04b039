// Tests for the progress display in plain (non-TTY) mode, which is what CI logs see.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "harness/base/progress.h"

namespace specbed {
namespace {

std::string ReadAll(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  return out;
}

TEST(Progress, PlainModePrintsNoCarriageReturnsAndAFinalLine) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar("sweep", 4, "case", f);
    bar.set_interactive(false);
    bar.set_plain_interval_s(0.0);  // print on every advance
    for (int i = 0; i < 4; ++i) bar.Advance(1, "case " + std::to_string(i));
  }
  const std::string out = ReadAll(f);
  std::fclose(f);
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_NE(out.find("sweep: 4/4 case"), std::string::npos) << out;
  EXPECT_NE(out.find("eta"), std::string::npos);
}

TEST(Progress, PlainModeThrottlesLines) {
  FILE* f = std::tmpfile();
  {
    ProgressBar bar("x", 1000, "it", f);
    bar.set_interactive(false);
    bar.set_plain_interval_s(3600.0);
    for (int i = 0; i < 1000; ++i) bar.Advance();
  }
  const std::string out = ReadAll(f);
  std::fclose(f);
  int lines = 0;
  for (char c : out) lines += c == '\n';
  EXPECT_LE(lines, 2) << out;  // at most the first and the final line
}

}  // namespace
}  // namespace specbed
