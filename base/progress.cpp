// Progress display (TTY bar or periodic plain lines).
#include "base/progress.h"

#include <algorithm>

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>

#include "base/timer.h"

namespace specbed {
namespace {

std::string FormatSeconds(double s) {
  char buf[32];
  if (s < 0 || s > 1e7) return "?";
  const int total = static_cast<int>(s + 0.5);
  if (total >= 3600) {
    std::snprintf(buf, sizeof(buf), "%dh%02dm", total / 3600, (total / 60) % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%dm%02ds", total / 60, total % 60);
  }
  return buf;
}

// Columns of the terminal behind `out` (TIOCGWINSZ), else $COLUMNS, else 0 (unknown: no cut).
int DetectWidth(FILE* out) {
  winsize ws{};
  if (isatty(fileno(out)) && ioctl(fileno(out), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
    return ws.ws_col;
  }
  const char* env = std::getenv("COLUMNS");
  if (env != nullptr && *env != '\0') {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return 0;
}

}  // namespace

std::string FitToWidth(const std::string& line, int columns) {
  if (columns <= 0) return line;
  size_t n = 0;
  for (unsigned char c : line) n += (c & 0xC0) != 0x80;
  if (n <= static_cast<size_t>(columns)) return line;
  // Keep columns - 1 code points, then "…".
  size_t kept = 0, at = 0;
  for (; at < line.size(); ++at) {
    if ((static_cast<unsigned char>(line[at]) & 0xC0) != 0x80) {
      if (kept == static_cast<size_t>(columns - 1)) break;
      ++kept;
    }
  }
  return line.substr(0, at) + "…";
}

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit, FILE* out)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      out_(out),
      total_(total),
      start_us_(NowMicros()) {
  const char* ci = std::getenv("CI");
  interactive_ = isatty(fileno(out_)) && (ci == nullptr || *ci == '\0');
  width_ = DetectWidth(out_);
}

ProgressBar::~ProgressBar() {
  Finish();
}

void ProgressBar::Advance(int64_t n, const std::string& note) {
  done_ += n;
  if (!note.empty()) note_ = note;
  const int64_t now = NowMicros();
  const double since = (now - last_draw_us_) * 1e-6;
  if ((interactive_ && since >= 0.1) || (!interactive_ && since >= plain_interval_s_)) {
    last_draw_us_ = now;
    Draw(false);
  }
}

void ProgressBar::Finish() {
  if (finished_) return;
  finished_ = true;
  Draw(true);
}

void ProgressBar::Draw(bool final_line) {
  const double elapsed = (NowMicros() - start_us_) * 1e-6;
  const double rate = elapsed > 0 ? done_ / elapsed : 0.0;
  double eta = (total_ > 0 && rate > 0) ? (total_ - done_) / rate : -1.0;
  if (eta_deadline_us_ >= 0) eta = std::max(0.0, (eta_deadline_us_ - NowMicros()) * 1e-6);
  char counts[64];
  if (total_ > 0) {
    std::snprintf(counts, sizeof(counts), "%lld/%lld", static_cast<long long>(done_),
                  static_cast<long long>(total_));
  } else {
    std::snprintf(counts, sizeof(counts), "%lld", static_cast<long long>(done_));
  }
  std::string bar;
  if (interactive_ && total_ > 0) {
    const int width = 24;
    const int filled = static_cast<int>(width * static_cast<double>(done_) / total_);
    bar = "[" + std::string(filled, '#') + std::string(width - filled, '.') + "] ";
  }
  char head[512];
  std::snprintf(head, sizeof(head), "%s: %s%s %s, %.1f %s/s, elapsed %s, eta %s", label_.c_str(),
                bar.c_str(), counts, unit_.c_str(), rate, unit_.c_str(),
                FormatSeconds(elapsed).c_str(), final_line ? "0m00s" : FormatSeconds(eta).c_str());
  std::string line = head;
  if (!note_.empty()) line += "  " + note_;
  // One column less than the terminal: a line exactly as wide as the terminal wraps on some.
  line = FitToWidth(line, width_ > 1 ? width_ - 1 : width_);
  std::fprintf(out_, "%s%s", interactive_ ? "\r" : "", line.c_str());
  if (interactive_) {
    std::fputs(final_line ? "\n" : "\033[K", out_);
  } else {
    std::fputc('\n', out_);
  }
  std::fflush(out_);
}

}  // namespace specbed
