// specbed: the command-line entry point. Subcommands live in cmd_*.cpp.
// Exit codes: 0 success; 1 a specbed error (bad input, unknown name, database trouble; the
// message says which input and what was expected); CLI11's codes (>= 100) for usage errors. An
// unknown option is named with the nearest option of its (innermost) subcommand ("--modle": did
// you mean '--target'?; an old spelling is named by its new one). The process locale is pinned to
// "C" first (base/locale_pin.h), so no output depends on the user's locale. Checked by:
// tests/cli/cli_test.cpp (CliFlags.*), tests/reports/locale_test.cpp (the locale pin), and CI's
// empty-environment run of the CLI tests (.ci/run).
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "base/error.h"
#include "base/locale_pin.h"
#include "base/names.h"
#include "harness/cli/commands.h"
#include "harness/runner/environment.h"

int main(int argc, char** argv) {
  // Numbers read "1234.5" in every table, CSV, JSON and plot whatever a linked library did to the
  // locale; child tools get C.UTF-8 (base/locale_pin.h).
  specbed::PinProcessLocale();
  specbed::cli::SetCommandLine(argc, argv);
  CLI::App app{
      "SpecBed: a testbed for speculative decoding methods.\n"
      "Main job: scripts/quickstart (= specbed run configs/quickstart.json, then specbed report "
      "results/quickstart.db -o reports/out/quickstart; README.md)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", specbed::BuildInfoLine());
  specbed::cli::AddGenerateCommand(app);
  specbed::cli::AddRunCommand(app);
  specbed::cli::AddTokenizeCommand(app);
  specbed::cli::AddListCommand(app);
  specbed::cli::AddBenchCommand(app);
  specbed::cli::AddReportCommand(app);
  specbed::cli::AddSummaryCommand(app);
  specbed::cli::AddExportCommand(app);
  specbed::cli::AddTrainCommand(app);
  specbed::cli::AddRegenCommand(app);
  specbed::cli::AddSweepCommand(app);
  specbed::cli::AddMergeCommand(app);
  specbed::cli::AddSlurmCommand(app);
  specbed::cli::AddCompareCommand(app);
  specbed::cli::AddServeCommand(app);
  specbed::cli::AddBlockpilotCommand(app);
  specbed::cli::AddTwinCommand(app);
  specbed::cli::AddLtdCommand(app);
  // CLI11 reports an unknown first word only as "A subcommand is required": name it instead.
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      try {
        specbed::FailUnknownName("command", argv[1], names);
      } catch (const specbed::Error& e) {
        std::fprintf(stderr, "specbed: error: %s\nRun 'specbed --help' for usage.\n", e.what());
      }
      return static_cast<int>(CLI::ExitCodes::ExtrasError);
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ExtrasError& e) {
    // Unknown options: name the nearest option of the (innermost) subcommand ("--modle" ->
    // "--target"; an old spelling found nearest is named by its new spelling).
    const CLI::App* sub = nullptr;
    std::string sub_words;
    for (int i = 1; i < argc && argv[i][0] != '-'; ++i) {
      const CLI::App* next = nullptr;
      for (const CLI::App* s : (sub == nullptr ? &app : sub)->get_subcommands({})) {
        if (s->get_name() == argv[i]) next = s;
      }
      if (next == nullptr) break;
      sub = next;
      sub_words += (sub_words.empty() ? "" : " ") + std::string(argv[i]);
    }
    bool suggested = false;
    if (sub != nullptr) {
      std::vector<std::string> known;
      std::map<std::string, std::string> new_spelling;  // old long name -> its new spelling
      for (const CLI::Option* opt : sub->get_options()) {
        for (const std::string& n : opt->get_lnames()) {
          known.push_back("--" + n);
          const std::string spelling = specbed::cli::NewSpellingOf(opt);
          if (!spelling.empty()) new_spelling["--" + n] = spelling;
        }
      }
      for (int i = 2; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg.rfind("--", 0) != 0 || arg == "--") continue;
        arg = arg.substr(0, arg.find('='));
        if (std::find(known.begin(), known.end(), arg) != known.end()) continue;
        std::string near = specbed::NearestName(arg, known);
        if (new_spelling.count(near)) near = new_spelling[near];
        const std::string hint = near.empty() ? "" : "; did you mean '" + near + "'?";
        std::fprintf(stderr, "specbed %s: error: unknown option '%s'%s\n", sub_words.c_str(),
                     arg.c_str(), hint.c_str());
        suggested = true;
      }
    }
    if (suggested) {
      std::fprintf(stderr, "Run 'specbed %s --help' for its options.\n", sub_words.c_str());
      return static_cast<int>(CLI::ExitCodes::ExtrasError);
    }
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const specbed::Error& e) {
    std::fprintf(stderr, "specbed: error: %s\n", e.what());
    return 1;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "specbed: error: %s\n", e.what_without_backtrace());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "specbed: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
