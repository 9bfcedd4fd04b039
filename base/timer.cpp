// Wall-clock formatting.
#include "base/timer.h"

#include <ctime>

namespace specbed {

std::string NowRfc3339() {
  std::time_t now = std::time(nullptr);
  std::tm tm_utc{};
  gmtime_r(&now, &tm_utc);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm_utc);
  return buf;
}

}  // namespace specbed
