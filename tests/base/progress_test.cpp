// Tests for the progress display in plain (non-TTY) mode, which is what CI logs see, and the
// cut of long lines to the terminal width.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "base/progress.h"
#include "base/timer.h"

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

// Lines fit the width: a long status (a case label with JSON knobs, ~250 characters) is cut to
// width - 1 columns ending in "…"; short lines and width 0 are unchanged.
TEST(Progress, LinesAreCutToTheTerminalWidth) {
  EXPECT_EQ(FitToWidth("short", 80), "short");
  EXPECT_EQ(FitToWidth("abcdef", 0), "abcdef");
  EXPECT_EQ(FitToWidth("abcdef", 4), "abc…");
  EXPECT_EQ(FitToWidth("ττττττ", 4), "τττ…");  // code points, not bytes
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  const std::string note = "case 7/20 ddtree " + std::string(240, 'k');
  {
    ProgressBar bar("sweep", 4, "turn", f);
    bar.set_interactive(false);
    bar.set_plain_interval_s(0.0);
    bar.set_width(60);
    for (int i = 0; i < 4; ++i) bar.Advance(1, note);
  }
  const std::string out = ReadAll(f);
  std::fclose(f);
  size_t start = 0, lines = 0;
  while (start < out.size()) {
    const size_t end = out.find('\n', start);
    const std::string line = out.substr(start, end - start);
    size_t columns = 0;
    for (unsigned char c : line) columns += (c & 0xC0) != 0x80;
    EXPECT_LE(columns, 59u) << line;
    EXPECT_EQ(line.substr(line.size() - 3), "…") << line;
    ++lines;
    start = end + 1;
  }
  EXPECT_GE(lines, 4u);
}

// The ETA follows the caller's cost model when given one (a deadline on the NowMicros clock):
// 10 minutes ahead reads ~10m, a passed deadline 0m00s, a negative one the rate again.
TEST(Progress, EtaFollowsTheCallersDeadline) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ProgressBar bar("run", 100, "turn", f);
    bar.set_interactive(false);
    bar.set_plain_interval_s(0.0);
    bar.set_eta_deadline_us(NowMicros() + 600LL * 1000000);
    bar.Advance(1, "a");
    bar.set_eta_deadline_us(NowMicros() - 1000000);
    bar.Advance(1, "b");
  }
  const std::string out = ReadAll(f);
  std::fclose(f);
  const size_t a = out.find("  a"), b = out.find("  b");
  ASSERT_NE(a, std::string::npos) << out;
  ASSERT_NE(b, std::string::npos) << out;
  const std::string line_a = out.substr(0, a), line_b = out.substr(a, b - a);
  EXPECT_TRUE(line_a.find("eta 9m5") != std::string::npos ||
              line_a.find("eta 10m00s") != std::string::npos)
      << line_a;
  EXPECT_NE(line_b.find("eta 0m00s"), std::string::npos) << line_b;
}

}  // namespace
}  // namespace specbed
