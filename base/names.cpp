// Name lookup helpers: edit distance, nearest match, the standard "unknown name" error.
#include "base/names.h"

#include <algorithm>
#include <cctype>

#include "base/error.h"

namespace specbed {

int EditDistance(const std::string& a, const std::string& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                        std::tolower(static_cast<unsigned char>(b[j - 1]));
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string NearestName(const std::string& name, const std::vector<std::string>& known) {
  std::string best;
  int best_distance = 1 << 30;
  for (const auto& candidate : known) {
    const int d = EditDistance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  // Only suggest when the edit is small relative to the name's length.
  const int limit = std::max<int>(2, static_cast<int>(name.size()) / 2);
  return best_distance <= limit ? best : "";
}

void FailUnknownName(const std::string& kind, const std::string& name,
                     const std::vector<std::string>& known, const std::string& context) {
  const std::string nearest = NearestName(name, known);
  Fail(context.empty() ? "" : context + ": ", "unknown ", kind, " '", name, "'",
       nearest.empty() ? "" : " (did you mean '" + nearest + "'?)", "; known ", kind,
       "s: ", known.empty() ? "(none)" : Join(known, ", "));
}

std::string Join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

}  // namespace specbed
