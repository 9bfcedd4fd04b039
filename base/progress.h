// Progress display for long runs on stderr. When stderr is a TTY (and $CI is unset) it draws a
// bar redrawn in place with '\r' (throttled to ~10 Hz) with rate and ETA; otherwise it prints a
// plain line at most every `plain_interval_s` seconds, so logs of CI jobs stay readable. Lines are
// cut to the terminal width (the TTY's columns, else $COLUMNS when set; no cut otherwise), ending
// in "…", so a long status (a case label with its knobs) never wraps.
// Checked by: tests/base/progress_test.cpp (plain mode output).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace specbed {

class ProgressBar {
 public:
  // `total` units of work (0 = unknown); `label` prefixes every line; `unit` names the unit.
  ProgressBar(std::string label, int64_t total, std::string unit = "it", FILE* out = stderr);
  ~ProgressBar();

  // Advances by `n` units; `note` (optional) replaces the trailing status text.
  void Advance(int64_t n = 1, const std::string& note = "");
  // Forces the final line out (idempotent; also called by the destructor).
  void Finish();

  // Overrides TTY detection (tests).
  void set_interactive(bool interactive) { interactive_ = interactive; }
  void set_plain_interval_s(double seconds) { plain_interval_s_ = seconds; }
  // Overrides the detected line width in columns (tests); 0 = no cut.
  void set_width(int columns) { width_ = columns; }
  // The ETA from the caller's cost model instead of units/s: the work is expected to end at
  // `deadline_us` (NowMicros clock); the ETA shown counts down to it (0 once passed). A negative
  // value returns to the rate-based ETA.
  void set_eta_deadline_us(int64_t deadline_us) { eta_deadline_us_ = deadline_us; }

 private:
  void Draw(bool final_line);

  std::string label_;
  std::string unit_;
  std::string note_;
  FILE* out_;
  int64_t total_;
  int64_t done_ = 0;
  int64_t start_us_;
  int64_t last_draw_us_ = 0;
  bool interactive_;
  bool finished_ = false;
  double plain_interval_s_ = 10.0;
  int width_ = 0;                 // columns a line may take (0 = no cut)
  int64_t eta_deadline_us_ = -1;  // < 0: ETA from the rate
};

// `line` cut to at most `columns` display columns (UTF-8 code points), the last one "…" when cut;
// unchanged when it fits or `columns` <= 0.
std::string FitToWidth(const std::string& line, int columns);

}  // namespace specbed
