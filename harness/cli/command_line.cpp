// The process command line, kept for the reproduce command stored with every run.
#include "harness/cli/commands.h"
#include "harness/runner/environment.h"

namespace specbed::cli {
namespace {
std::string g_command_line;
}  // namespace

void SetCommandLine(int argc, char** argv) {
  g_command_line = ReproCommand(argc, argv);
}
std::string CommandLine() {
  return g_command_line;
}

}  // namespace specbed::cli
