// Command-line pieces below the CLI (see cli_options.h).
#include "base/cli_options.h"

#include <cstdint>
#include <cstdio>
#include <map>

#include "base/names.h"

namespace specbed::cli {
namespace {

// Hidden alias option -> the new spelling it forwards to ("-o/--output").
std::map<const CLI::Option*, std::string>& AliasRegistry() {
  static std::map<const CLI::Option*, std::string> registry;
  return registry;
}

// "-o/--output": every name of `option`, short ones first.
std::string Spelling(const CLI::Option* option) {
  std::vector<std::string> names;
  for (const std::string& s : option->get_snames()) names.push_back("-" + s);
  for (const std::string& l : option->get_lnames()) names.push_back("--" + l);
  return Join(names, "/");
}

void PrintDeprecation(const std::string& old_name, const std::string& spelling) {
  std::fprintf(stderr,
               "specbed: note: '%s' is an old spelling of '%s'; it goes away in the next "
               "release\n",
               old_name.c_str(), spelling.c_str());
}

}  // namespace

CLI::Option* OldSpellings(CLI::App* cmd, CLI::Option* option,
                          const std::vector<std::string>& old_names) {
  const std::string spelling = Spelling(option);
  for (const std::string& old_name : old_names) {
    CLI::Option* alias = nullptr;
    if (option->get_items_expected_max() == 0) {
      // A flag: each use of the old name counts as one use of the new one.
      alias = cmd->add_flag_function(
          old_name,
          [option, old_name, spelling](std::int64_t count) {
            PrintDeprecation(old_name, spelling);
            for (std::int64_t i = 0; i < count; ++i) option->add_result(std::string("true"));
          },
          "old spelling of " + spelling);
    } else {
      // An option: the old name takes as many arguments as the new one and hands them over
      // unchanged (the new option's delimiter, checks, required/excludes/needs then apply).
      alias = cmd->add_option(
          old_name,
          [option, old_name, spelling](const CLI::results_t& results) {
            PrintDeprecation(old_name, spelling);
            for (const std::string& r : results) option->add_result(r);
            return true;
          },
          "old spelling of " + spelling);
      alias->type_size(option->get_type_size_min(), option->get_type_size_max());
      alias->expected(option->get_expected_min(), option->get_expected_max());
      alias->allow_extra_args(option->get_allow_extra_args());
      alias->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    }
    // Forward at parse time, before the new option's requirements and callback are processed.
    alias->trigger_on_parse();
    alias->group("");  // hidden from --help
    AliasRegistry()[alias] = spelling;
  }
  return option;
}

std::string NewSpellingOf(const CLI::Option* option) {
  const auto it = AliasRegistry().find(option);
  return it == AliasRegistry().end() ? "" : it->second;
}

void AddShownFlags(CLI::App* cmd, std::initializer_list<ShownFlag> flags) {
  for (const ShownFlag& f : flags) f.add(cmd)->capture_default_str();
}

void AddListFlags(CLI::App* cmd, std::initializer_list<ShownFlag> flags) {
  for (const ShownFlag& f : flags) f.add(cmd)->delimiter(',')->capture_default_str();
}

void AddOutputFlag(CLI::App* cmd, std::string& out, const std::string& help) {
  OldSpellings(cmd, cmd->add_option("-o,--output", out, help)->required(), {"--out"});
}

void AddTargetFlag(CLI::App* cmd, std::string& target) {
  OldSpellings(
      cmd,
      cmd->add_option("-t,--target", target, "Target model (name or path)")->capture_default_str(),
      {"--model"});
}

void AddTargetFlags(CLI::App* cmd, std::string& target, std::string& dtype) {
  AddTargetFlag(cmd, target);
  cmd->add_option("--dtype", dtype, "Target dtype: float32, bfloat16")->capture_default_str();
}

void AddThreadsFlag(CLI::App* cmd, int& threads) {
  cmd->add_option("--threads", threads, "CPU threads")->capture_default_str();
}

void AddQuietFlag(CLI::App* cmd, bool& verbose) {
  OldSpellings(cmd,
               cmd->add_flag_callback(
                   "-q,--quiet", [&verbose] { verbose = false; }, "No progress bar"),
               {"--no-progress"});
}

void AddPartialEveryFlag(CLI::App* cmd, double& seconds) {
  cmd->add_option("--partial-every", seconds,
                  "Seconds between progress writes to OUT.partial (resume point)")
      ->capture_default_str();
}

}  // namespace specbed::cli
