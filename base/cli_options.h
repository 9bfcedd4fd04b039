// Command-line pieces every `specbed` subcommand may use, below the CLI so that the methods'
// own subcommands (`specbed train <name>`, declared in each method's folder) use them too: old
// flag spellings kept as hidden aliases for one release (issue 18), a subcommand with its parsed
// options, and the output / target / threads / quiet / --partial-every flags.
// Checked by: tests/cli/old_spellings_test.cpp and tests/cli/cli_test.cpp (CliFlags.*).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace specbed::cli {

// Old flag spellings kept for one release (issue 18): every name in `old_names` ("--out", "-m")
// becomes a hidden option (group "", so not in --help) of `cmd` that hands its arguments to
// `option` as it is parsed, so `option`'s variable, delimiter, checks, required/excludes/needs all
// apply unchanged; each use prints one note to stderr naming the new spelling. Call it once
// `option` has its final arity. Returns `option`.
CLI::Option* OldSpellings(CLI::App* cmd, CLI::Option* option,
                          const std::vector<std::string>& old_names);
// The new spelling ("-o/--output") when `option` is an old spelling made by OldSpellings, else "".
std::string NewSpellingOf(const CLI::Option* option);

// Adds subcommand `name` (described by `help`) to `parent` with a fresh `Options` that its flags
// fill and a callback that calls run(options) once they are parsed; returns both. Presets go on
// the options before the flags that show their default are added.
template <class Options>
std::pair<CLI::App*, Options*> AddSubcommand(CLI::App* parent, const std::string& name,
                                             std::function<void(const Options&)> run,
                                             const std::string& help) {
  auto options = std::make_shared<Options>();
  CLI::App* cmd = parent->add_subcommand(name, help);
  cmd->callback([options, run] { run(*options); });
  return {cmd, options.get()};
}
template <class Options>
std::pair<CLI::App*, Options*> AddSubcommand(CLI::App* parent, const std::string& name,
                                             void (*run)(const Options&), const std::string& help) {
  return AddSubcommand(parent, name, std::function<void(const Options&)>(run), help);
}

// One option whose default --help shows: its names ("-n,--max-new-tokens"), the variable it sets
// (any type CLI11 parses) and its help. AddShownFlags adds a list of them, so a command's plain
// options read as a table.
struct ShownFlag {
  template <class T>
  ShownFlag(const char* names, T& value, std::string help)
      : add([names, &value, help = std::move(help)](CLI::App* cmd) {
          return cmd->add_option(names, value, help);
        }) {}
  std::function<CLI::Option*(CLI::App*)> add;
};
void AddShownFlags(CLI::App* cmd, std::initializer_list<ShownFlag> flags);
// AddShownFlags for list options: comma-separated or repeated ("-b 1,2 -b 4").
void AddListFlags(CLI::App* cmd, std::initializer_list<ShownFlag> flags);

// -o/--output (required, described by `help`; old spelling --out).
void AddOutputFlag(CLI::App* cmd, std::string& out, const std::string& help);
// -t/--target, "Target model (name or path)", default shown (old spelling --model).
void AddTargetFlag(CLI::App* cmd, std::string& target);
// AddTargetFlag and --dtype ("Target dtype: float32, bfloat16", default shown).
void AddTargetFlags(CLI::App* cmd, std::string& target, std::string& dtype);
// --threads, "CPU threads", default shown.
void AddThreadsFlag(CLI::App* cmd, int& threads);
// -q/--quiet, "No progress bar" (old spelling --no-progress): sets `verbose` to false.
void AddQuietFlag(CLI::App* cmd, bool& verbose);
// --partial-every: seconds between progress writes to OUT.partial (default shown).
void AddPartialEveryFlag(CLI::App* cmd, double& seconds);

}  // namespace specbed::cli
