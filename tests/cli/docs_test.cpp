// The docs match the program: every README's CLI commands name real subcommands and flags (every
// flag of a `build/specbed` / `specbed` line of any README.md's code blocks appears in that
// subcommand's --help; `scripts/...` lines name executable scripts that read their flags; the
// run/sweep lines of shipped configs run with --dry-run), the flag table's flags exist, no
// user-facing text (--help of every subcommand, `list`) names internal notes (specs/*.md, "seed
// 00N", "issue N", "(spec: ..."), and every config file is described in its folder's README.
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

// Every README.md of the source tree (build trees, .venv and other dot folders skipped), relative
// to the source root, sorted.
std::vector<std::string> Readmes() {
  std::vector<std::string> readmes;
  const fs::path root(SPECBED_SOURCE_DIR);
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
       ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory() && (name[0] == '.' || name.rfind("build", 0) == 0)) {
      it.disable_recursion_pending();
    } else if (name == "README.md") {
      readmes.push_back(fs::relative(it->path(), root).string());
    }
  }
  std::sort(readmes.begin(), readmes.end());
  return readmes;
}

// A shell command line of a README's fenced code blocks: continuation lines (a trailing backslash)
// joined, split into words up to a shell redirection or pipe.
struct DocCommand {
  std::string readme;
  std::vector<std::string> words;  // "scripts/x ..." or the specbed words after the binary
  bool specbed = false;
};

// Every `build/specbed ...` / `specbed ...` (a command, not an output line such as
// "specbed summary: ...") and `scripts/...` line of every README's code blocks.
std::vector<DocCommand> DocCommands() {
  std::vector<DocCommand> commands;
  for (const std::string& readme : Readmes()) {
    std::istringstream in(Source(readme));
    bool code = false;
    std::string joined;
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("```", 0) == 0) {
        code = !code;
        continue;
      }
      if (!code) continue;
      if (!line.empty() && line.back() == '\\') {
        joined += line.substr(0, line.size() - 1) + " ";
        continue;
      }
      line = joined + line;
      joined.clear();
      std::vector<std::string> words = ShellWords(line);
      for (size_t i = 0; i < words.size(); ++i) {
        if (words[i] == ">" || words[i] == "|" || words[i] == "&&") words.resize(i);
      }
      while (!words.empty() && std::regex_match(words[0], std::regex("[A-Z_]+=.*"))) {
        words.erase(words.begin());  // an environment prefix (SPECBED_CUDA=ON scripts/build.sh)
      }
      if (words.empty()) continue;
      DocCommand c{readme, words, false};
      if (words[0] == "build/specbed" || words[0] == "specbed") {
        if (words.size() < 2 || words[1] == "<command>" || words[1].back() == ':') continue;
        c.words.erase(c.words.begin());
        c.specbed = true;
      } else if (words[0].rfind("scripts/", 0) != 0) {
        continue;
      }
      commands.push_back(c);
    }
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

// `flag` appears in `help` as a whole option name (not inside a longer one: "-n" is not found in
// "--n-heads").
bool HelpListsFlag(const std::string& help, const std::string& flag) {
  const auto name_char = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
  };
  for (size_t at = help.find(flag); at != std::string::npos; at = help.find(flag, at + 1)) {
    const bool starts = at == 0 || !name_char(help[at - 1]);
    const bool ends = at + flag.size() == help.size() || !name_char(help[at + flag.size()]);
    if (starts && ends) return true;
  }
  return false;
}

std::string PathName(const CommandLine& c) {
  std::string n;
  for (const auto& p : c.path) n += (n.empty() ? "" : " ") + p;
  return n;
}

TEST(Docs, EveryReadmeCommandUsesRealSubcommandsAndFlags) {
  const std::string dir = TestDir();
  const auto commands = DocCommands();
  std::set<std::string> readmes;
  for (const auto& c : commands) readmes.insert(c.readme);
  ASSERT_GT(commands.size(), 60u) << "the READMEs' command blocks were not found";
  EXPECT_GE(readmes.size(), 8u);
  std::map<std::string, std::string> help_of;
  for (const DocCommand& doc : commands) {
    if (!doc.specbed) continue;
    const CommandLine c = Parse(doc.words);
    const std::string name = PathName(c);
    if (!help_of.count(name)) {
      std::vector<std::string> args = c.path;
      args.push_back("--help");
      const ProcResult r = RunSpecbed(args, dir);
      ASSERT_EQ(r.exit_code, 0) << doc.readme << ": specbed " << name << " --help\n" << Describe(r);
      help_of[name] = r.out;
    }
    for (const std::string& flag : c.flags) {
      EXPECT_TRUE(HelpListsFlag(help_of[name], flag))
          << doc.readme << ": `specbed " << name << "` is given " << flag
          << ", which its --help does not list";
    }
  }
}

// A README's `scripts/NAME --flag` lines name an executable script of the tree that reads the flag.
TEST(Docs, EveryReadmeScriptLineNamesARealScriptAndFlags) {
  int checked = 0;
  for (const DocCommand& doc : DocCommands()) {
    if (doc.specbed) continue;
    const fs::path script = fs::path(SPECBED_SOURCE_DIR) / doc.words[0];
    ASSERT_TRUE(fs::is_regular_file(script))
        << doc.readme << ": " << doc.words[0] << " is not a file";
    EXPECT_NE(fs::status(script).permissions() & fs::perms::owner_exec, fs::perms::none)
        << doc.readme << ": " << doc.words[0] << " is not executable";
    const std::string text = Source(doc.words[0]);
    for (size_t i = 1; i < doc.words.size(); ++i) {
      const std::string& w = doc.words[i];
      if (w.size() < 3 || w.rfind("--", 0) != 0) continue;
      EXPECT_TRUE(Contains(text, w.substr(0, w.find('='))))
          << doc.readme << ": " << doc.words[0] << " is given " << w << ", which it never reads";
    }
    ++checked;
  }
  EXPECT_GE(checked, 10);
}

// Every README's run / sweep line whose config ships with the tree expands with --dry-run.
TEST(Docs, ReadmeRunAndSweepCommandsExpandWithDryRun) {
  const std::string dir = TestDir();
  int ran = 0;
  for (const DocCommand& doc : DocCommands()) {
    const auto& words = doc.words;
    if (!doc.specbed || (words[0] != "run" && words[0] != "sweep") || words.size() < 2) continue;
    if (!fs::exists(fs::path(SPECBED_SOURCE_DIR) / words[1])) continue;  // an example's own file
    // Only the config expansion: no output written (-o / --output dropped), no case run. The
    // shell variables of README's "Your own checkpoint on a GPU" get stand-in values.
    const std::map<std::string, std::string> variables = {
        {"$TARGET", "stories260K"}, {"$HEAD", "my/head"}, {"$DEVICE", "cpu"}};
    std::vector<std::string> args;
    for (size_t i = 0; i < words.size(); ++i) {
      if (words[i] == "-o" || words[i] == "--output") {
        ++i;
        continue;
      }
      std::string word = words[i];
      for (const auto& [name, value] : variables) {
        const size_t at = word.find(name);
        if (at != std::string::npos) word.replace(at, name.size(), value);
      }
      args.push_back(word);
    }
    args.push_back("--dry-run");
    const ProcResult r = RunSpecbed(args, dir);
    EXPECT_EQ(r.exit_code, 0) << doc.readme << "\n" << Describe(r);
    EXPECT_FALSE(r.out.empty()) << doc.readme << ": no case listed";
    ++ran;
  }
  EXPECT_GE(ran, 4);
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
