// Environment identity for results rows.
#include "harness/runner/environment.h"

#include <ATen/Context.h>
#include <sqlite3.h>
#include <torch/version.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "base/timer.h"
#include "models/device.h"
#include "specbed_build_info.h"  // generated: SPECBED_GIT_COMMIT, SPECBED_VERSION, SPECBED_BUILD_FLAGS

namespace specbed {

RunInfo CurrentEnvironment() {
  RunInfo info;
  info.started_at = NowRfc3339();
  info.specbed_version = SPECBED_VERSION;
  info.git_commit = SPECBED_GIT_COMMIT;
  info.build_flags = SPECBED_BUILD_FLAGS;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  info.host = host;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  int cores = 0;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      ++cores;
      if (info.cpu.empty()) {
        const auto colon = line.find(':');
        info.cpu = colon == std::string::npos ? line : line.substr(colon + 2);
      }
    }
  }
  if (cores > 0) info.cpu += " (" + std::to_string(cores) + " logical cpus)";
  // Every visible CUDA device: name, compute capability, driver and CUDA runtime ("" = none or
  // a CPU-only LibTorch).
  info.gpu = DescribeCudaDevices();
  nlohmann::json libs = {{"torch", TORCH_VERSION},
                         {"torch_cuda", at::globalContext().hasCUDA()},
                         {"sqlite", sqlite3_libversion()},
                         {"nlohmann_json", std::to_string(NLOHMANN_JSON_VERSION_MAJOR) + "." +
                                               std::to_string(NLOHMANN_JSON_VERSION_MINOR) + "." +
                                               std::to_string(NLOHMANN_JSON_VERSION_PATCH)}};
  info.library_versions_json = libs.dump();
  return info;
}

std::string BuildInfoLine() {
  return std::string("specbed ") + SPECBED_VERSION + " (commit " + SPECBED_GIT_COMMIT + "; " +
         SPECBED_BUILD_FLAGS + "; LibTorch " + TORCH_VERSION +
         " loaded, CUDA available: " + (at::globalContext().hasCUDA() ? "yes" : "no") + ")";
}

std::string ReproCommand(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    const bool plain =
        !arg.empty() && arg.find_first_of(" \t\n'\"\\$`*?;&|<>()") == std::string::npos;
    if (i) out += ' ';
    if (plain) {
      out += arg;
    } else {
      out += '\'';
      for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}

}  // namespace specbed
