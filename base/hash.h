// Stable 64-bit FNV-1a hashing, used for output hashes and case keys stored in SQLite, and the
// splitmix64 mixer for seeded counter-based streams.
// Checked by: tests/base/names_test.cpp (known FNV-1a vectors).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specbed {

uint64_t Fnv1a64(const void* data, size_t size, uint64_t seed = 0xcbf29ce484222325ULL);
// 16 lowercase hex digits.
std::string Hex64(uint64_t value);
// Hash of a token id sequence (little-endian int32 bytes) as 16 hex digits.
std::string HashTokens(const std::vector<int32_t>& tokens);
// Hash of a string as 16 hex digits.
std::string HashString(const std::string& text);

// The splitmix64 finalizer: a bijective 64-bit mix, for counter-based random streams.
inline uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace specbed
