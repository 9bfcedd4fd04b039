// The docs match the program: README.md's CLI commands name real subcommands and flags (every
// flag of a `build/specbed` line appears in that subcommand's --help; the run/sweep lines run with
// --dry-run), the flag table's flags exist, no user-facing text (--help of every subcommand,
// `list`) names internal notes (specs/*.md, "seed 00N", "issue N", "(spec: ..."), and every
// config file is described in its folder's README.
// Checked by: itself (ctest docs_test); a README line with a flag the program lacks fails here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/cli_test_util.h"

namespace specbed::cli_test {
namespace {

namespace fs = std::filesystem;

std::string Source(const std::string& relative) {
  return ReadAll(std::string(SPECBED_SOURCE_DIR) + "/" + relative);
}

// Words of a shell line up to its comment, quotes removed ("a b" stays one word).
std::vector<std::string> ShellWords(const std::string& line) {
  std::vector<std::string> words;
  std::string word;
  bool quoted = false, any = false;
  char quote = 0;
  for (char c : line) {
    if (quoted) {
      if (c == quote) {
        quoted = false;
      } else {
        word += c;
      }
    } else if (c == '"' || c == '\'') {
      quoted = true, quote = c, any = true;
    } else if (c == '#') {
      break;
    } else if (c == ' ' || c == '\t') {
      if (any || !word.empty()) words.push_back(word);
      word.clear();
      any = false;
    } else {
      word += c;
    }
  }
  if (any || !word.empty()) words.push_back(word);
  return words;
}

// README.md's `build/specbed ...` command lines (fenced code blocks), split into words without
// the leading "build/specbed" and anything from a shell redirection on.
std::vector<std::vector<std::string>> ReadmeCommands() {
  std::istringstream in(Source("README.md"));
  std::vector<std::vector<std::string>> commands;
  bool code = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("```", 0) == 0) {
      code = !code;
      continue;
    }
    if (!code || line.rfind("build/specbed ", 0) != 0) continue;
    std::vector<std::string> words = ShellWords(line.substr(std::string("build/specbed ").size()));
    for (size_t i = 0; i < words.size(); ++i) {
      if (words[i] == ">" || words[i] == "|") words.resize(i);
    }
    if (!words.empty() && words[0] != "<command>") commands.push_back(words);
  }
  return commands;
}

// The subcommand path of a command line ("train eagle3", "blockpilot label", "summary") and the
// flags it passes ("--limit", "-o", ...; "--x=v" -> "--x").
struct CommandLine {
  std::vector<std::string> path;
  std::vector<std::string> flags;
};

CommandLine Parse(const std::vector<std::string>& words) {
  static const std::set<std::string> kGroups = {"train", "blockpilot"};
  CommandLine c;
  c.path.push_back(words[0]);
  size_t i = 1;
  if (kGroups.count(words[0]) && words.size() > 1) c.path.push_back(words[i++]);
  for (; i < words.size(); ++i) {
    if (words[i].size() > 1 && words[i][0] == '-' && !std::isdigit(words[i][1])) {
      c.flags.push_back(words[i].substr(0, words[i].find('=')));
    }
  }
  return c;
}

TEST(Docs, EveryReadmeCommandUsesRealSubcommandsAndFlags) {
  const std::string dir = TestDir();
  const auto commands = ReadmeCommands();
  ASSERT_GT(commands.size(), 20u) << "README.md's CLI block was not found";
  std::map<std::string, std::string> help_of;
  for (const auto& words : commands) {
    const CommandLine c = Parse(words);
    std::vector<std::string> args = c.path;
    const std::string name = [&] {
      std::string n;
      for (const auto& p : c.path) n += (n.empty() ? "" : " ") + p;
      return n;
    }();
    if (!help_of.count(name)) {
      args.push_back("--help");
      const ProcResult r = RunSpecbed(args, dir);
      ASSERT_EQ(r.exit_code, 0) << "specbed " << name << " --help\n" << Describe(r);
      help_of[name] = r.out;
    }
    for (const std::string& flag : c.flags) {
      EXPECT_TRUE(help_of[name].find(flag) != std::string::npos)
          << "README.md: `specbed " << name << "` is given " << flag
          << ", which its --help does not list";
    }
  }
}

TEST(Docs, ReadmeRunAndSweepCommandsExpandWithDryRun) {
  const std::string dir = TestDir();
  int ran = 0;
  for (auto words : ReadmeCommands()) {
    if (words[0] != "run" && words[0] != "sweep") continue;
    // Only the config expansion: no output written (-o / --output dropped), no case run.
    std::vector<std::string> args;
    for (size_t i = 0; i < words.size(); ++i) {
      if (words[i] == "-o" || words[i] == "--output") {
        ++i;
        continue;
      }
      args.push_back(words[i]);
    }
    args.push_back("--dry-run");
    const ProcResult r = RunSpecbed(args, dir);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_FALSE(r.out.empty()) << "no case listed";
    ++ran;
  }
  EXPECT_GE(ran, 2);
}

TEST(Docs, FlagTableFlagsExistInHelp) {
  const std::string dir = TestDir();
  const std::string all_help = [&] {
    std::string h;
    for (const char* cmd : {"run", "sweep", "generate", "bench", "summary", "report", "export",
                            "slurm", "regen", "twin"}) {
      h += RunSpecbed({cmd, "--help"}, dir).out;
    }
    h += RunSpecbed({"train", "eagle3", "--help"}, dir).out;
    return h;
  }();
  for (const char* flag : {"-o", "--output", "-t", "--target", "-q", "--quiet", "-n",
                           "--max-new-tokens", "--heads", "--kv-heads"}) {
    EXPECT_TRUE(all_help.find(flag) != std::string::npos) << flag;
  }
}

// Defaults and value lists the docs state equal what --help prints: the gate's thresholds and the
// resamples (reports/README.md), the summary's column keys (reports/README.md lists them).
TEST(Docs, DocumentedDefaultsEqualHelp) {
  const std::string dir = TestDir();
  const std::string compare = RunSpecbed({"compare", "--help"}, dir).out;
  const std::string reports = Source("reports/README.md");
  EXPECT_TRUE(Contains(compare, "--tau-tolerance FLOAT=0 "));
  EXPECT_TRUE(Contains(reports, "`--tau-tolerance` (default 0)"));
  EXPECT_TRUE(Contains(compare, "--speedup-threshold FLOAT=0.1\n"));
  EXPECT_TRUE(Contains(reports, "`1 - --speedup-threshold` (default 0.10;"));
  EXPECT_TRUE(Contains(compare, "--resamples INT=2000 "));
  EXPECT_TRUE(Contains(reports, "2000 resamples"));
  // The column keys: --help's comma list, README's space list.
  const std::string summary = RunSpecbed({"summary", "--help"}, dir).out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(summary, m, std::regex("in order: ([a-z_A-Z,]+)")));
  std::string keys = m[1].str();
  std::replace(keys.begin(), keys.end(), ',', ' ');
  EXPECT_TRUE(Contains(reports, "(keys: `" + keys + "`)")) << keys;
}

// User-facing text never names SpecBed's internal notes, which users do not have.
TEST(Docs, NoInternalNotesInUserFacingText) {
  const std::string dir = TestDir();
  std::string text = RunSpecbed({"--help"}, dir).out + RunSpecbed({"list"}, dir).out;
  for (const char* cmd : {"generate", "run", "tokenize", "list", "bench", "report", "summary",
                          "compare", "export", "sweep", "merge", "slurm", "regen", "twin"}) {
    text += RunSpecbed({cmd, "--help"}, dir).out;
  }
  ASSERT_GT(text.size(), 5000u);
  const std::regex internal(R"(specs/[a-z_]+\.md|seed 00[0-9]|\bissue [0-9]+|\(spec:|spec G[0-9])");
  std::smatch m;
  EXPECT_FALSE(std::regex_search(text, m, internal)) << "found '" << m.str() << "'";
  // The top-level help's main job is the README's.
  EXPECT_TRUE(Contains(text, "scripts/quickstart"));
  EXPECT_TRUE(Contains(Source("README.md"), "scripts/quickstart"));
}

// Every config file is described in its folder's README; README's layout row points there.
TEST(Docs, EveryConfigIsDescribed) {
  for (const auto& [folder, readme] : std::vector<std::pair<std::string, std::string>>{
           {"configs", "configs/README.md"}, {"configs/papers", "configs/papers/README.md"}}) {
    const std::string text = Source(readme);
    for (const auto& e : fs::directory_iterator(std::string(SPECBED_SOURCE_DIR) + "/" + folder)) {
      const std::string name = e.path().filename().string();
      if (e.path().extension() != ".json" && e.path().extension() != ".jsonl") continue;
      EXPECT_TRUE(text.find(name) != std::string::npos) << readme << " does not describe " << name;
    }
  }
  EXPECT_TRUE(Contains(Source("README.md"), "every one described in `configs/README.md`"));
}

}  // namespace
}  // namespace specbed::cli_test
