// The `specbed` subcommands. Each Add*Command registers its options on the app and a callback
// that does the work; errors are thrown as specbed::Error and reported by main().
#pragma once

#include <CLI/CLI.hpp>

namespace specbed::cli {

// argc/argv of the process, for the reproduce command stored with every run.
void SetCommandLine(int argc, char** argv);
std::string CommandLine();

void AddGenerateCommand(CLI::App& app);
void AddRunCommand(CLI::App& app);
void AddTokenizeCommand(CLI::App& app);
void AddListCommand(CLI::App& app);
void AddBenchCommand(CLI::App& app);
void AddReportCommand(CLI::App& app);
void AddSummaryCommand(CLI::App& app);
void AddTrainCommand(CLI::App& app);
void AddRegenCommand(CLI::App& app);

}  // namespace specbed::cli
