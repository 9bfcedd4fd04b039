// Shared helpers of the libFuzzer targets in tests/fuzz: the input written to a per-process
// scratch file (SpecBed's parsers read files), and the one rule every target checks: bad input
// may only fail as specbed::Error; any other exception (an nlohmann exception, std::bad_alloc,
// std::out_of_range) escaping a parser is a bug and aborts, which libFuzzer reports as a crash.
// Checked by: scripts/fuzz (every target runs over its committed corpus, then fuzzes).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string>

#include "base/error.h"

namespace specbed::fuzz {

// Writes `size` bytes to a scratch file named after `name` (one per process, reused) and returns
// its path. $SPECBED_FUZZ_TMP or /tmp holds it.
inline std::string WriteInput(const uint8_t* data, size_t size, const std::string& name) {
  const char* dir = std::getenv("SPECBED_FUZZ_TMP");
  const std::string path = std::string(dir != nullptr ? dir : "/tmp") + "/specbed_fuzz_" +
                           std::to_string(getpid()) + "_" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

// Runs `fn`; specbed::Error is the expected outcome of bad input, anything else aborts.
template <typename F>
void ExpectOnlySpecbedErrors(F&& fn) {
  try {
    fn();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: a non-specbed exception escaped: %s\n", e.what());
    std::abort();
  }
}

}  // namespace specbed::fuzz
