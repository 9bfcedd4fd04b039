// FNV-1a 64-bit hashing helpers.
#include "base/hash.h"

#include <cstdio>

namespace specbed {

uint64_t Fnv1a64(const void* data, size_t size, uint64_t seed) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < size; ++i) {
    h ^= bytes[i];
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string Hex64(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

std::string HashTokens(const std::vector<int32_t>& tokens) {
  return Hex64(Fnv1a64(tokens.data(), tokens.size() * sizeof(int32_t)));
}

std::string HashString(const std::string& text) {
  return Hex64(Fnv1a64(text.data(), text.size()));
}

}  // namespace specbed
