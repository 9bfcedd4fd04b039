// Build, host and library identity recorded with every run (commit, build flags, CPU, threads,
// library versions), and the command line that reproduces it.
#pragma once

#include <string>

#include "results/store.h"

namespace specbed {

// RunInfo with everything but config_json and repro_command filled in.
RunInfo CurrentEnvironment();
// Shell-quoted argv joined with spaces.
std::string ReproCommand(int argc, char** argv);

}  // namespace specbed
