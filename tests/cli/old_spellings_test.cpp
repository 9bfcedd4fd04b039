// OldSpellings (harness/cli/old_spellings.cpp) in-process on a CLI11 app holding every kind of
// option the subcommands alias: a required string, a delimited vector, a bool flag, a flag with a
// callback, an option with `excludes`, and a checked number. The old name must set the same
// variable as the new one, satisfy `required`, keep the new option's checks and exclusions, print
// one note naming the new spelling, and stay out of --help.
#include <gtest/gtest.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "base/cli_options.h"

namespace specbed::cli {
namespace {

struct Parsed {
  std::string out = "none";
  std::vector<std::string> models;
  bool quiet = false;
  int verbose_off = 0;
  int n = 7;
  std::string alt;
};

// Parses `args` with a fresh app; returns CLI11's exit code (0 = parsed) and fills `p`.
int Parse(std::vector<std::string> args, Parsed* p, std::string* help = nullptr,
          std::string* err = nullptr) {
  CLI::App app{"test"};
  OldSpellings(&app, app.add_option("-o,--output", p->out, "Output")->required(), {"--out"});
  OldSpellings(&app, app.add_option("-t,--target", p->models, "Models")->delimiter(','),
               {"-m", "--model"});
  OldSpellings(&app, app.add_flag("-q,--quiet", p->quiet, "Quiet"), {"--no-progress"});
  OldSpellings(&app,
               app.add_flag_callback(
                   "--silent", [p] { ++p->verbose_off; }, "Silent"),
               {"--hush"});
  CLI::Option* n = app.add_option("-n,--max-new-tokens", p->n, "Tokens")->check(CLI::Range(1, 100));
  OldSpellings(&app, n, {"--tokens"});
  OldSpellings(&app, app.add_option("--alt", p->alt, "Alternative")->excludes(n), {"--old-alt"});
  std::reverse(args.begin(), args.end());
  testing::internal::CaptureStderr();
  int code = 0;
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    code = e.get_exit_code();
  }
  const std::string captured = testing::internal::GetCapturedStderr();
  if (err != nullptr) *err = captured;
  if (help != nullptr) *help = app.help();
  return code;
}

TEST(OldSpellings, OldNamesSetTheSameVariables) {
  Parsed p;
  std::string err;
  ASSERT_EQ(Parse({"--out", "a.db", "--model", "x,y", "-m", "z", "--no-progress", "--hush",
                   "--tokens", "12"},
                  &p, nullptr, &err),
            0);
  EXPECT_EQ(p.out, "a.db");
  EXPECT_EQ(p.models, (std::vector<std::string>{"x", "y", "z"}));  // delimiter of the new option
  EXPECT_TRUE(p.quiet);
  EXPECT_EQ(p.verbose_off, 1);
  EXPECT_EQ(p.n, 12);
  // One note per use, naming the new spelling.
  EXPECT_NE(err.find("'--out' is an old spelling of '-o/--output'"), std::string::npos) << err;
  EXPECT_NE(err.find("'-m' is an old spelling of '-t/--target'"), std::string::npos) << err;
  EXPECT_NE(err.find("'--no-progress' is an old spelling of '-q/--quiet'"), std::string::npos);
  EXPECT_NE(err.find("'--tokens' is an old spelling of '-n/--max-new-tokens'"), std::string::npos);

  // The new names give the same result and print nothing.
  Parsed q;
  ASSERT_EQ(Parse({"-o", "a.db", "--target", "x,y", "-t", "z", "-q", "--silent", "-n", "12"}, &q,
                  nullptr, &err),
            0);
  EXPECT_EQ(q.out, p.out);
  EXPECT_EQ(q.models, p.models);
  EXPECT_EQ(q.quiet, p.quiet);
  EXPECT_EQ(q.verbose_off, p.verbose_off);
  EXPECT_EQ(q.n, p.n);
  EXPECT_EQ(err, "");
  // --out=VALUE works too.
  Parsed r;
  ASSERT_EQ(Parse({"--out=b.db"}, &r), 0);
  EXPECT_EQ(r.out, "b.db");
}

TEST(OldSpellings, TheNewOptionsRulesStillApply) {
  Parsed p;
  // Required: neither spelling given.
  EXPECT_EQ(Parse({"-q"}, &p), static_cast<int>(CLI::ExitCodes::RequiredError));
  // The new option's check applies to a value given under the old name.
  EXPECT_EQ(Parse({"--out", "a", "--tokens", "1000"}, &p),
            static_cast<int>(CLI::ExitCodes::ValidationError));
  // excludes: --old-alt (for --alt) with --tokens (for -n) is refused like --alt with -n.
  EXPECT_EQ(Parse({"--out", "a", "--alt", "x", "-n", "3"}, &p),
            static_cast<int>(CLI::ExitCodes::ExcludesError));
  EXPECT_EQ(Parse({"--out", "a", "--old-alt", "x", "--tokens", "3"}, &p),
            static_cast<int>(CLI::ExitCodes::ExcludesError));
  // A missing value under the old name is an error, as under the new one.
  EXPECT_NE(Parse({"--out"}, &p), 0);
}

TEST(OldSpellings, HelpShowsOnlyTheNewNames) {
  Parsed p;
  std::string help;
  Parse({"--out", "a"}, &p, &help);
  for (const char* name :
       {"-o,--output", "-t,--target", "-q,--quiet", "--silent", "-n,--max-new-tokens", "--alt"}) {
    EXPECT_NE(help.find(name), std::string::npos) << name << "\n" << help;
  }
  for (const char* old : {"--out ", "--out,", "--model", "-m,", "--no-progress", "--hush",
                          "--tokens", "--old-alt", "old spelling"}) {
    EXPECT_EQ(help.find(old), std::string::npos) << old << "\n" << help;
  }
}

}  // namespace
}  // namespace specbed::cli
