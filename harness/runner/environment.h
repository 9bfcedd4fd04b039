// Build, host and library identity recorded with every run (commit, build flags, CPU, threads,
// library versions), and the command line that reproduces it.
#pragma once

#include <string>

#include "results/store.h"

namespace specbed {

// RunInfo with everything but config_json and repro_command filled in.
RunInfo CurrentEnvironment();
// `specbed --version`: "specbed 0.1.0 (commit 1a2b3c4d5e6f; build_type=Release cuda=OFF
// libtorch=2.11.0 GNU-12.2.0; LibTorch 2.11.0 loaded, CUDA available: no)".
std::string BuildInfoLine();
// Shell-quoted argv joined with spaces.
std::string ReproCommand(int argc, char** argv);

}  // namespace specbed
