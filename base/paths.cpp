// Run-time location of SpecBed's shipped files.
#include "base/paths.h"

#include <cstdlib>

#ifndef SPECBED_SOURCE_DIR
#define SPECBED_SOURCE_DIR "."
#endif

namespace specbed {

std::string SpecBedHome() {
  const char* env = std::getenv("SPECBED_HOME");
  std::string home = (env != nullptr && *env != '\0') ? env : SPECBED_SOURCE_DIR;
  while (home.size() > 1 && home.back() == '/') home.pop_back();
  return home;
}

std::string HomePath(const std::string& relative) {
  return SpecBedHome() + "/" + relative;
}

}  // namespace specbed
