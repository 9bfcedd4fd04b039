// End-to-end tests of the `specbed` command-line tool (harness/cli): runs the real binary as a
// child process (fork/exec, stdout/stderr captured, exit status, timeout) on the shipped
// stories260K model and checks what a user relies on: generate/tokenize/list output (generate with
// every registered method), `run` writing
// complete cases to the results database and resuming without duplicates (also after SIGKILL),
// clear errors for bad input, and `bench` rows. Databases are read through results/store.h.
#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "gtest/gtest.h"
#include "results/store.h"
#include "tests/cli/cli_store_util.h"
#include "tests/cli/cli_test_util.h"

extern char** environ;

namespace specbed {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// Child, RunSpecbed, Contains, OpenReadOnly, WriteJson, ...: the child process and store helpers of
// tests/cli/cli_test_util.h and tests/cli/cli_store_util.h.
using namespace cli_test;

Json ParseJsonOrFail(const ProcResult& r) {
  try {
    return Json::parse(r.out);
  } catch (const Json::parse_error& e) {
    ADD_FAILURE() << "stdout is not JSON (" << e.what() << ")\n" << Describe(r);
    return Json();
  }
}

Json SmallConfig(const std::string& db) {
  return {{"name", "cli-test"},
          {"output", db},
          {"targets", {"stories260K"}},
          {"methods", {"ar"}},
          {"datasets", {{{"name", "stories"}, {"limit", 3}}}},
          {"temperatures", {0, 1}},
          {"seeds", {0}},
          {"max_new_tokens", 16}};
}

// ---------------------------------------------------------------------------------------------
// generate

// One flag vocabulary: -o/--output, -t/--target (generate's old -t TEMPERATURE still works with a
// note), -q/--quiet, -n/--max-new-tokens, --heads, --kv-heads. The old spellings stay for
// one release as hidden aliases (harness/cli/old_spellings.cpp): they work and print a note naming
// the new spelling, and no --help shows them.

// Every old spelling of every subcommand: {subcommand words, old name, a value ("" = a flag)}.
struct OldSpelling {
  std::string command, old_name, value;
};
const std::vector<OldSpelling>& AllOldSpellings() {
  static const std::vector<OldSpelling> table = [] {
    std::vector<OldSpelling> t = {{"generate", "-m", "stories260K"},
                                  {"generate", "--model", "stories260K"},
                                  {"generate", "--tokens", "4"},
                                  {"tokenize", "-m", "stories260K"},
                                  {"tokenize", "--model", "stories260K"},
                                  {"bench", "-m", "stories260K"},
                                  {"bench", "--model", "stories260K"},
                                  {"bench", "--tokens", "4"},
                                  {"bench", "--no-progress", ""},
                                  {"run", "--no-progress", ""},
                                  {"sweep", "--no-progress", ""},
                                  {"slurm", "--output-dir", "shards"},
                                  {"regen", "--out", "x.safetensors"},
                                  {"regen", "--model", "stories260K"},
                                  {"regen", "--no-progress", ""},
                                  {"twin", "--out", "twin"},
                                  {"train ltd", "--out", "ltd"},
                                  {"blockpilot label", "--out", "x.safetensors"},
                                  {"blockpilot label", "--model", "stories260K"},
                                  {"blockpilot label", "--no-progress", ""},
                                  {"blockpilot train", "--out", "bp"},
                                  {"blockpilot train", "--no-progress", ""},
                                  {"train draft-lm", "--n-kv-heads", "1"}};
    for (const char* trainer : {"draft-lm", "eagle3", "specblock", "dflash", "jetspec", "hrad"}) {
      const std::string command = std::string("train ") + trainer;
      t.push_back({command, "--out", "out"});
      t.push_back({command, "--model", "stories260K"});
      t.push_back({command, "--no-progress", ""});
    }
    for (const char* trainer : {"draft-lm", "dflash", "jetspec"}) {
      t.push_back({std::string("train ") + trainer, "--n-heads", "2"});
    }
    return t;
  }();
  return table;
}

std::vector<std::string> Words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// The names listed under "Subcommands:" in a --help text.
std::vector<std::string> SubcommandsIn(const std::string& help) {
  std::vector<std::string> out;
  const size_t at = help.find("Subcommands:\n");
  if (at == std::string::npos) return out;
  std::istringstream lines(help.substr(at + 13));
  for (std::string line; std::getline(lines, line);) {
    if (line.size() > 2 && line[0] == ' ' && line[1] == ' ' && std::islower(line[2])) {
      out.push_back(Words(line)[0]);
    }
  }
  return out;
}

// Each old spelling is still accepted by its subcommand: parsed (and announced with a note naming
// the new spelling) before --help ends the run.
TEST(CliFlags, EveryOldSpellingIsStillAccepted) {
  const std::string dir = TestDir();
  for (const OldSpelling& o : AllOldSpellings()) {
    std::vector<std::string> args = Words(o.command);
    args.push_back(o.old_name);
    if (!o.value.empty()) args.push_back(o.value);
    args.push_back("--help");
    const ProcResult r = RunSpecbed(args, dir);
    EXPECT_EQ(r.exit_code, 0) << o.command << " " << o.old_name << Describe(r);
    EXPECT_TRUE(Contains(r.err, "'" + o.old_name + "' is an old spelling of '"))
        << o.command << " " << o.old_name << Describe(r);
  }
  // A name that was never a spelling of a subcommand is still an error there.
  const ProcResult r = RunSpecbed({"summary", "x.db", "--out", "x"}, dir);
  EXPECT_GE(r.exit_code, 100) << Describe(r);
}

// The old spellings do what the new ones do, end to end.
TEST(CliFlags, OldSpellingsGiveTheSameResults) {
  const std::string dir = TestDir();
  ProcResult r =
      RunSpecbed({"generate", "--target", "stories260K", "-p", "Once upon a time", "-n", "4"}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_FALSE(Contains(r.err, "old spelling")) << Describe(r);
  for (const std::vector<std::string>& old :
       {std::vector<std::string>{"-m", "stories260K", "--tokens", "4"},
        std::vector<std::string>{"--model", "stories260K", "--max-new-tokens", "4"}}) {
    std::vector<std::string> args = {"generate", "-p", "Once upon a time"};
    args.insert(args.end(), old.begin(), old.end());
    const ProcResult m = RunSpecbed(args, dir);
    ASSERT_EQ(m.exit_code, 0) << Describe(m);
    EXPECT_EQ(r.out, m.out);  // the same generation under either spelling
    EXPECT_TRUE(Contains(m.err, "old spelling of '-t/--target'")) << Describe(m);
  }
  for (const char* quiet : {"--quiet", "-q", "--no-progress"}) {
    r = RunSpecbed({"sweep", "configs/quickstart.json", "--dry-run", quiet}, dir);
    EXPECT_EQ(r.exit_code, 0) << quiet << Describe(r);
  }
  r = RunSpecbed({"bench", "--target", "stories260K", "--max-new-tokens", "4", "-r", "1", "-c", "0",
                  "--bandwidth-mib", "0", "-o", ""},
                 dir);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "| stories260K |")) << Describe(r);
  // bench shows its progress on stderr (one unit per measured row), not with -q / --no-progress.
  EXPECT_TRUE(Contains(r.err, "bench: 2/2 row")) << Describe(r);  // pp64 and tg4
  r = RunSpecbed({"bench", "-t", "stories260K", "-n", "4", "-r", "1", "-c", "0", "--bandwidth-mib",
                  "0", "-o", "", "-q"},
                 dir);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_FALSE(Contains(r.err, "bench: 2/2 row")) << Describe(r);
  r = RunSpecbed({"bench", "--model", "stories260K", "--tokens", "3", "-r", "1", "-c", "0",
                  "--bandwidth-mib", "0", "-o", "", "--no-progress"},
                 dir);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "| stories260K | float32 | 1 | 1 | tg3 | 0 | 3 |")) << Describe(r);
  EXPECT_FALSE(Contains(r.err, "bench: 2/2 row")) << Describe(r);
  // slurm --output-dir: the folder is created and the tasks write there.
  r = RunSpecbed(
      {"slurm", "configs/quickstart.json", "--shards", "2", "--output-dir", dir + "/old_shards"},
      dir);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(fs::is_directory(dir + "/old_shards")) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "--output " + dir + "/old_shards/")) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "--quiet\n")) << "the tasks use the new spelling" << Describe(r);
}

// No subcommand's --help (nested ones included) shows an old spelling; they show the new ones.
TEST(CliFlags, HelpShowsOnlyTheNewSpellings) {
  const std::string dir = TestDir();
  std::set<std::string> old_names;
  for (const OldSpelling& o : AllOldSpellings()) old_names.insert(o.old_name);
  std::vector<std::string> commands;
  const ProcResult top = RunSpecbed({"--help"}, dir);
  for (const std::string& sub : SubcommandsIn(top.out)) {
    commands.push_back(sub);
    const ProcResult h = RunSpecbed({sub, "--help"}, dir);
    for (const std::string& nested : SubcommandsIn(h.out)) commands.push_back(sub + " " + nested);
  }
  ASSERT_GE(commands.size(), 25u) << top.out;  // 16 commands, 10 nested (train 7, blockpilot 3)
  std::set<std::string> seen;
  for (const std::string& command : commands) {
    std::vector<std::string> args = Words(command);
    args.push_back("--help");
    const ProcResult r = RunSpecbed(args, dir);
    ASSERT_EQ(r.exit_code, 0) << command << Describe(r);
    std::string text = r.out;
    for (char& c : text) {
      if (c == ',' || c == '=' || c == '/' || c == '(' || c == ')' || c == '`') c = ' ';
    }
    for (const std::string& word : Words(text)) {
      EXPECT_EQ(old_names.count(word), 0u) << command << " --help shows '" << word << "'\n"
                                           << r.out;
      seen.insert(word);
    }
    EXPECT_FALSE(Contains(r.out, "old spelling")) << command << "\n" << r.out;
  }
  for (const char* name : {"-o", "--output", "-t", "--target", "-q", "--quiet", "-n",
                           "--max-new-tokens", "--heads", "--kv-heads"}) {
    EXPECT_EQ(seen.count(name), 1u) << name;
  }
}

// A mistyped option names the nearest option of its subcommand and exits with a usage code.
TEST(CliFlags, UnknownOptionSuggestsTheNearest) {
  const std::string dir = TestDir();
  ProcResult r = RunSpecbed({"generate", "--modle", "stories260K", "-p", "x"}, dir);
  EXPECT_GE(r.exit_code, 100) << Describe(r);
  // The nearest name is an old spelling (--model): the hint names the new one.
  EXPECT_TRUE(Contains(r.err, "unknown option '--modle'; did you mean '-t/--target'?"))
      << Describe(r);
  // Nested subcommands: the innermost one's options.
  r = RunSpecbed({"train", "eagle3", "-o", dir + "/x", "--data", "x", "--stepz", "3"}, dir);
  EXPECT_GE(r.exit_code, 100) << Describe(r);
  EXPECT_TRUE(Contains(r.err,
                       "specbed train eagle3: error: unknown option '--stepz'; did you mean "
                       "'--steps'?"))
      << Describe(r);
  r = RunSpecbed({"summary", "x.db", "--jsn"}, dir);
  EXPECT_GE(r.exit_code, 100) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "did you mean '--json'?")) << Describe(r);
  // Nothing near: the unknown option is still named.
  r = RunSpecbed({"summary", "x.db", "--zzzzzzzzzz"}, dir);
  EXPECT_GE(r.exit_code, 100) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "unknown option '--zzzzzzzzzz'")) << Describe(r);
}

TEST(CliGenerate, GreedyStoryIsTheModelsKnownContinuation) {
  const std::string dir = TestDir();
  const ProcResult r =
      RunSpecbed({"generate", "-p", "Once upon a time", "--max-new-tokens", "24"}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.out.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u)
      << Describe(r);
  EXPECT_TRUE(Contains(r.err, "stories260K"));

  // --json: the same generation, machine-readable.
  const ProcResult j =
      RunSpecbed({"generate", "-p", "Once upon a time", "-n", "24", "--json"}, dir);
  ASSERT_EQ(j.exit_code, 0) << Describe(j);
  const Json doc = ParseJsonOrFail(j);
  ASSERT_TRUE(doc.is_object());
  ASSERT_TRUE(doc["prompt_ids"].is_array() && !doc["prompt_ids"].empty());
  EXPECT_EQ(doc["prompt_ids"][0], 1) << "prompt must start with BOS";
  EXPECT_GT(doc["prompt_ids"].size(), 1u);
  const std::string stop = doc.value("stop_reason", "");
  if (stop == "eos") {
    EXPECT_LE(doc["generated_ids"].size(), 24u);
  } else {
    EXPECT_EQ(stop, "max_new_tokens");
    EXPECT_EQ(doc["generated_ids"].size(), 24u);
  }
  const std::string text = doc.value("text", "");
  EXPECT_EQ(("Once upon a time" + text)
                .rfind("Once upon a time, there was a little girl named "
                       "Lily.",
                       0),
            0u)
      << text;
  // The plain output is the prompt followed by exactly the same text.
  EXPECT_EQ(r.out, "Once upon a time" + text + "\n");
  EXPECT_GT(doc["timings"]["decode_tokens_per_s"].get<double>(), 0.0);
}

// The registered methods as `specbed list methods` prints them: name -> lossless trait.
std::map<std::string, bool> ListedMethods(const std::string& dir) {
  const ProcResult r = RunSpecbed({"list", "methods"}, dir);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  std::map<std::string, bool> methods;
  std::istringstream lines(r.out);
  std::string line, name;
  while (std::getline(lines, line)) {
    if (line.size() > 3 && line.compare(0, 2, "  ") == 0 && line[2] != ' ') {
      name = line.substr(2, line.find(' ', 2) - 2);
      methods[name] = false;
    } else if (!name.empty() && Contains(line, "traits: lossless=yes")) {
      methods[name] = true;
    }
  }
  return methods;
}

// One method on one prompt: every registered method runs through `generate --method` with its
// default knobs on stories260K (T = 0, 12 tokens, --json); a lossless one gives AR's tokens, a
// speculative one reports its verify steps whose emitted tokens add up to the generation, and τ /
// acceptance consistent with them; --knob sets a knob (EAGLE-3's depth bounds every step's
// accepted count); unknown methods, knobs and malformed pairs are errors naming them.
TEST(CliGenerate, EveryRegisteredMethodOnOnePrompt) {
  const std::string dir = TestDir();
  const std::map<std::string, bool> methods = ListedMethods(dir);
  ASSERT_GE(methods.size(), 15u);
  auto generate = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"generate", "-p", "Once upon a time", "-n", "12", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunSpecbed(args, dir);
  };
  const ProcResult ar = generate({});
  ASSERT_EQ(ar.exit_code, 0) << Describe(ar);
  const Json ar_json = Json::parse(ar.out);
  EXPECT_FALSE(ar_json.contains("speculation"));
  for (const auto& [method, lossless] : methods) {
    const ProcResult r = generate({"--method", method});
    ASSERT_EQ(r.exit_code, 0) << method << Describe(r);
    const Json j = Json::parse(r.out);
    EXPECT_EQ(j.at("method"), method);
    if (lossless) {
      EXPECT_EQ(j.at("generated_ids"), ar_json.at("generated_ids")) << method;
    }
    if (method == "ar") continue;
    ASSERT_TRUE(j.contains("speculation")) << method << "\n" << r.out;
    const Json& spec = j.at("speculation");
    int64_t emitted = 0, accepted = 0;
    for (const Json& step : spec.at("per_step")) {
      emitted += step.at("emitted").get<int64_t>();
      accepted += step.at("accepted").get<int64_t>();
    }
    EXPECT_EQ(emitted + 1, static_cast<int64_t>(j.at("generated_ids").size())) << method;
    EXPECT_EQ(spec.at("verify_steps"), spec.at("per_step").size()) << method;
    EXPECT_EQ(spec.at("accepted"), accepted) << method;
    EXPECT_NEAR(spec.at("tau").get<double>(),
                static_cast<double>(emitted) / spec.at("verify_steps").get<double>(), 1e-9)
        << method;
  }
  const ProcResult shallow =
      generate({"--method", "eagle3", "--knob", "depth=1", "--knob", "top_k=2"});
  ASSERT_EQ(shallow.exit_code, 0) << Describe(shallow);
  const Json knobs = Json::parse(shallow.out).at("knobs");
  EXPECT_EQ(knobs.at("depth"), 1);
  EXPECT_EQ(knobs.at("top_k"), 2);
  for (const Json& step : Json::parse(shallow.out).at("speculation").at("per_step")) {
    EXPECT_LE(step.at("accepted").get<int64_t>(), 2);  // a tree of depth + 1 = 2 layers
  }
  for (const auto& [flags, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--method", "nosuch"}, "nosuch"},
           {{"--method", "eagle3", "--knob", "nosuch=1"}, "nosuch"},
           {{"--method", "eagle3", "--knob", "depth"}, "--knob expects KEY=VALUE"}}) {
    const ProcResult r = generate(flags);
    EXPECT_EQ(r.exit_code, 1) << Describe(r);
    EXPECT_TRUE(Contains(r.err, message)) << message << Describe(r);
  }
}

TEST(CliGenerate, EmptyPromptGeneratesFromBos) {
  const std::string dir = TestDir();
  const ProcResult r = RunSpecbed({"generate", "-n", "16", "--json"}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json doc = ParseJsonOrFail(r);
  EXPECT_EQ(doc["prompt_ids"], Json::array({1}));
  EXPECT_FALSE(doc["generated_ids"].empty());
  EXPECT_FALSE(doc.value("text", "").empty());
}

// generate's -t is the target, as on every command; the old `-t TEMPERATURE` (a number naming no
// file) still samples at that temperature, with a note naming -T/--temperature.
TEST(CliGenerate, DashTIsTheTargetAndTheOldTemperatureSpellingStillWorks) {
  const std::string dir = TestDir();
  const auto ids = [&](const std::vector<std::string>& flags) {
    std::vector<std::string> args = {"generate", "-p",    "Once upon a time", "-n", "12", "-s",
                                     "3",        "--json"};
    args.insert(args.end(), flags.begin(), flags.end());
    const ProcResult r = RunSpecbed(args, dir);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    return std::make_pair(ParseJsonOrFail(r)["generated_ids"], r.err);
  };
  const auto [target_ids, target_err] = ids({"-t", "stories260K", "-T", "2"});
  const auto [new_ids, new_err] = ids({"--temperature", "2"});
  const auto [old_ids, old_err] = ids({"-t", "2"});
  const auto [greedy_ids, greedy_err] = ids({"-T", "0"});
  EXPECT_EQ(target_ids, new_ids);
  EXPECT_EQ(old_ids, new_ids) << "-t 2 did not sample at T = 2";
  EXPECT_NE(greedy_ids, new_ids) << "the temperature changed nothing: the test cannot tell";
  EXPECT_TRUE(Contains(old_err, "-t 2 as the temperature is deprecated")) << old_err;
  EXPECT_TRUE(Contains(old_err, "-T/--temperature")) << old_err;
  EXPECT_FALSE(Contains(target_err + new_err, "deprecated"));
  const ProcResult r = RunSpecbed({"generate", "-t", "no-such-model", "-n", "2"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "no-such-model")) << r.err;
}

TEST(CliGenerate, SamplingIsReproducibleBySeed) {
  const std::string dir = TestDir();
  auto sample = [&](const std::string& seed) {
    const ProcResult r = RunSpecbed(
        {"generate", "-p", "Once upon a time", "-n", "24", "-T", "1", "-s", seed, "--json"}, dir);
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    return ParseJsonOrFail(r)["generated_ids"];
  };
  const Json a = sample("7");
  const Json b = sample("7");
  const Json c = sample("8");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a, b) << "same seed must give the same tokens";
  EXPECT_NE(a, c) << "seeds 7 and 8 gave identical samples";
}

// ---------------------------------------------------------------------------------------------
// tokenize

TEST(CliTokenize, EncodesWithAndWithoutBos) {
  const std::string dir = TestDir();
  const ProcResult r = RunSpecbed({"tokenize", "Once upon a time", "--json"}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json doc = ParseJsonOrFail(r);
  const std::vector<int> ids = doc["ids"].get<std::vector<int>>();
  // tok512's pieces " Once", " upon", " a", " time" (llama2.c's encoder gives the same).
  EXPECT_EQ(ids, (std::vector<int>{403, 407, 261, 378}));
  EXPECT_EQ(doc["n_tokens"], ids.size());
  EXPECT_EQ(doc["tokens"], Json::array({" Once", " upon", " a", " time"}));

  const ProcResult b = RunSpecbed({"tokenize", "Once upon a time", "--bos", "--json"}, dir);
  ASSERT_EQ(b.exit_code, 0) << Describe(b);
  std::vector<int> with_bos = {1};
  with_bos.insert(with_bos.end(), ids.begin(), ids.end());
  EXPECT_EQ(ParseJsonOrFail(b)["ids"].get<std::vector<int>>(), with_bos);

  // Plain output: the ids on the first line, the token count on the last.
  const ProcResult p = RunSpecbed({"tokenize", "Once upon a time"}, dir);
  ASSERT_EQ(p.exit_code, 0) << Describe(p);
  EXPECT_EQ(p.out.substr(0, p.out.find('\n')), "403 407 261 378");
  EXPECT_TRUE(Contains(p.out, "\n4 tokens\n"));

  // Out-of-vocabulary or non-numeric ids are a clear error, not a crash.
  const ProcResult bad = RunSpecbed({"tokenize", "--decode", "5,99999"}, dir);
  EXPECT_EQ(bad.exit_code, 1) << Describe(bad);
  EXPECT_TRUE(Contains(bad.err, "99999"));
  const ProcResult nan = RunSpecbed({"tokenize", "--decode", "5,x7"}, dir);
  EXPECT_EQ(nan.exit_code, 1) << Describe(nan);
  EXPECT_TRUE(Contains(nan.err, "'x7' is not an integer token id"));
}

// What a user checks with `tokenize`: the text comes back unchanged from its ids.
TEST(CliTokenize, DecodedTextEqualsInput) {
  const std::string dir = TestDir();
  for (const bool bos : {false, true}) {
    SCOPED_TRACE(bos ? "--bos" : "no BOS");
    std::vector<std::string> args = {"tokenize", "Once upon a time", "--json"};
    if (bos) args.push_back("--bos");
    const ProcResult r = RunSpecbed(args, dir);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    const Json doc = ParseJsonOrFail(r);
    EXPECT_EQ(doc["decoded"], "Once upon a time");
    std::string csv;
    for (const auto& id : doc["ids"]) csv += (csv.empty() ? "" : ",") + id.dump();
    const ProcResult d = RunSpecbed({"tokenize", "--decode", csv}, dir);
    ASSERT_EQ(d.exit_code, 0) << Describe(d);
    EXPECT_EQ(d.out, "Once upon a time\n");
  }
}

TEST(CliTokenize, Gpt2TokenizerDirAndSpecialTokens) {
  const std::string dir = TestDir();
  const ProcResult r = RunSpecbed(
      {"tokenize", "--tokenizer", "models/tokenizer/gpt2", "Hello world", "--json"}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(ParseJsonOrFail(r)["ids"], Json::array({15496, 995}));

  const ProcResult s = RunSpecbed(
      {"tokenize", "--tokenizer", "models/tokenizer/gpt2", "<|endoftext|>", "--json"}, dir);
  ASSERT_EQ(s.exit_code, 0) << Describe(s);
  EXPECT_EQ(ParseJsonOrFail(s)["ids"], Json::array({50256}));

  const ProcResult n = RunSpecbed({"tokenize", "--tokenizer", "models/tokenizer/gpt2",
                                   "<|endoftext|>", "--no-special", "--json"},
                                  dir);
  ASSERT_EQ(n.exit_code, 0) << Describe(n);
  const Json plain = ParseJsonOrFail(n);
  EXPECT_GT(plain["ids"].size(), 1u);
  for (const auto& id : plain["ids"]) EXPECT_NE(id, 50256);
  EXPECT_EQ(plain["decoded"], "<|endoftext|>");
}

// ---------------------------------------------------------------------------------------------
// list

TEST(CliList, ListsModelsMethodsDatasetsTemplates) {
  const std::string dir = TestDir();
  const ProcResult r = RunSpecbed({"list"}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(ContainsAll(r.out, {"models", "  stories260K ", "methods:", "  ar ", "datasets"}));
  for (const char* name :
       {"  stories ", "  spec_bench ", "  mt_bench ", "  humaneval ", "  gsm8k "}) {
    EXPECT_TRUE(Contains(r.out, name));
  }
  EXPECT_TRUE(Contains(r.out, "chat templates:"));
  EXPECT_TRUE(Contains(r.out, "llama3"));
  // Each drafter knob names what "auto" picks per target (not just drafter = "auto").
  EXPECT_TRUE(Contains(r.out,
                       "auto = stories260K: stories260K-draft, stories260K-twin: "
                       "stories260K-twin-draft\n"))
      << r.out;
  EXPECT_TRUE(Contains(r.out,
                       "auto = stories260K: stories260K-dflash, stories260K-twin: "
                       "stories260K-twin-dflash\n"))
      << r.out;
  EXPECT_FALSE(Contains(r.out, "drafter = \"\"")) << r.out;
  EXPECT_TRUE(Contains(r.out, "chatml"));
  // Knob ranges read as written in a config: integers in full, no exponent notation.
  EXPECT_TRUE(Contains(r.out, "adapt_tokens = 0 [0, 1048576]"));
  EXPECT_FALSE(Contains(r.out, "e+0")) << "a knob range printed in exponent notation";

  const ProcResult m = RunSpecbed({"list", "models"}, dir);
  ASSERT_EQ(m.exit_code, 0) << Describe(m);
  EXPECT_TRUE(Contains(m.out, "stories260K"));
  EXPECT_EQ(m.out.find("methods:"), std::string::npos) << m.out;

  const ProcResult bad = RunSpecbed({"list", "modles"}, dir);
  EXPECT_NE(bad.exit_code, 0) << Describe(bad);
  EXPECT_NE(bad.exit_code, 1) << "a usage error uses CLI11's exit codes";
}

// ---------------------------------------------------------------------------------------------
// run

void ExpectSaneSamples(ResultsStore& store, const ResultsStore::CaseRow& c, int64_t n,
                       int64_t max_new_tokens) {
  EXPECT_EQ(c.n_samples, n);
  const std::vector<SampleRecord> samples = store.LoadSamples(c.case_id);
  ASSERT_EQ(static_cast<int64_t>(samples.size()), n);
  std::set<std::string> prompt_ids;
  for (const auto& s : samples) {
    prompt_ids.insert(s.prompt_id);
    EXPECT_GE(s.n_output_tokens, 1);
    EXPECT_LE(s.n_output_tokens, max_new_tokens);
    EXPECT_GT(s.n_prompt_tokens, 1);
    EXPECT_GT(s.decode_ms, 0.0) << s.prompt_id;
    EXPECT_GT(s.prefill_ms, 0.0) << s.prompt_id;
    EXPECT_FALSE(s.output_hash.empty());
    EXPECT_FALSE(s.output_text.empty());
    EXPECT_TRUE(s.stop_reason == "eos" || s.stop_reason == "max_new_tokens") << s.stop_reason;
    if (s.stop_reason == "max_new_tokens") {
      EXPECT_EQ(s.n_output_tokens, max_new_tokens);
    }
    EXPECT_EQ(static_cast<int64_t>(Json::parse(s.output_ids_json).size()), s.n_output_tokens);
  }
  EXPECT_EQ(static_cast<int64_t>(prompt_ids.size()), n) << "duplicate prompt ids in a case";
}

// `specbed run CONFIG --quiet` in `dir` exits 0 and says `said` on stderr.
void ExpectQuietRunSays(const std::string& dir, const std::string& config,
                        const std::string& said) {
  const ProcResult r = RunSpecbed({"run", config, "--quiet"}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.err, said)) << Describe(r);
}

TEST(CliRun, WritesCasesAndResumesWithoutDuplicates) {
  const std::string dir = TestDir();
  const std::string db = dir + "/run.db";
  const std::string config = WriteJson(dir, "small.json", SmallConfig(db));
  ASSERT_NO_FATAL_FAILURE(ExpectQuietRunSays(dir, config, "2 cases (2 run, 0 already complete)"));
  {
    auto store = OpenReadOnly(db);
    const auto cases = store->ListCases();
    ASSERT_EQ(cases.size(), 2u);
    std::set<double> temperatures;
    for (const auto& c : cases) {
      EXPECT_EQ(c.record.target, "stories260K");
      EXPECT_EQ(c.record.method, "ar");
      EXPECT_EQ(c.record.dataset, "stories");
      EXPECT_EQ(c.record.max_new_tokens, 16);
      EXPECT_EQ(c.record.prompt_limit, 3);
      temperatures.insert(c.record.temperature);
      ExpectSaneSamples(*store, c, 3, 16);
    }
    EXPECT_EQ(temperatures, (std::set<double>{0.0, 1.0}));
    EXPECT_EQ(store->CountRows("samples"), 6);
    EXPECT_EQ(store->CountRows("runs"), 1);
  }

  // The same command again: everything is complete, nothing new is written.
  ASSERT_NO_FATAL_FAILURE(ExpectQuietRunSays(dir, config, "2 cases (0 run, 2 already complete)"));
  auto store = OpenReadOnly(db);
  EXPECT_EQ(store->CountRows("cases"), 2);
  EXPECT_EQ(store->CountRows("samples"), 6);
  EXPECT_EQ(store->CountRows("runs"), 1);
}

TEST(CliRun, SigkillMidRunLeavesOnlyCompleteCasesAndResumes) {
  const std::string dir = TestDir();
  const std::string db = dir + "/kill.db";
  Json cfg = SmallConfig(db);
  cfg["temperatures"] = {0, 0.5, 1.0, 1.5};
  cfg["datasets"] = {{{"name", "stories"}, {"limit", 4}}};
  cfg["max_new_tokens"] = 64;
  cfg["warmup"] = 0;
  const std::string config = WriteJson(dir, "kill.json", cfg);

  ASSERT_NO_FATAL_FAILURE(RunKilledMidway({"run", config}, dir, db, 4));
  {
    auto store = OpenReadOnly(db);
    const auto cases = store->ListCases();
    ASSERT_GE(cases.size(), 1u);
    ASSERT_LT(cases.size(), 4u);
    for (const auto& c : cases) ExpectSaneSamples(*store, c, 4, 64);
    EXPECT_EQ(store->CountRows("samples"), 4 * static_cast<int64_t>(cases.size()))
        << "samples of an unfinished case were stored";
  }

  ASSERT_NO_FATAL_FAILURE(ExpectQuietRunSays(dir, config, "already complete"));
  auto store = OpenReadOnly(db);
  const auto cases = store->ListCases();
  ASSERT_EQ(cases.size(), 4u);
  std::set<std::string> keys;
  std::set<double> temperatures;
  for (const auto& c : cases) {
    keys.insert(c.record.case_key);
    temperatures.insert(c.record.temperature);
    ExpectSaneSamples(*store, c, 4, 64);
  }
  EXPECT_EQ(keys.size(), 4u);
  EXPECT_EQ(temperatures, (std::set<double>{0.0, 0.5, 1.0, 1.5}));
  EXPECT_EQ(store->CountRows("samples"), 16);
}

// ---------------------------------------------------------------------------------------------
// Bad input: exit code 1 and a message naming the input and what was expected.

// Runs `specbed run CONFIG` and expects failure with exit code 1 and each of `needles` in stderr;
// also that nothing was run (no run rows in the database, if it was created).
void ExpectRunFails(const std::string& dir, const std::string& config, const std::string& db,
                    const std::vector<std::string>& needles) {
  const ProcResult r = RunSpecbed({"run", config, "--quiet"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_EQ(r.err.rfind("specbed: error: ", 0), 0u) << Describe(r);
  for (const auto& n : needles) EXPECT_TRUE(Contains(r.err, n)) << config;
  if (!db.empty() && fs::exists(db)) {
    auto store = OpenReadOnly(db);
    EXPECT_EQ(store->CountRows("runs"), 0);
    EXPECT_EQ(store->CountRows("cases"), 0);
  }
}

// SmallConfig with `key` set to `value`, run in `dir`, fails as ExpectRunFails says.
void ExpectSmallConfigFails(const std::string& dir, const std::string& key, const Json& value,
                            const std::vector<std::string>& needles) {
  const std::string db = dir + "/bad.db";
  Json cfg = SmallConfig(db);
  cfg[key] = value;
  ExpectRunFails(dir, WriteJson(dir, "bad.json", cfg), db, needles);
}

TEST(CliErrors, UnknownModelSuggestsNearest) {
  const std::string dir = TestDir();
  const ProcResult r = RunSpecbed({"generate", "--target", "stories260k", "-n", "4"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(ContainsAll(
      r.err, {"unknown model 'stories260k'", "did you mean 'stories260K'?", "known models: "}));

  ExpectSmallConfigFails(dir, "targets", {"storie260K"},
                         {"unknown model 'storie260K'", "did you mean 'stories260K'?"});
}

// A device that is not there (cuda:7: no CUDA in CPU CI, one GPU on the GPU machines) fails
// naming it, exit 1, before any case runs; the same for generate and bench.
TEST(CliErrors, UnavailableDeviceIsNamedBeforeAnythingRuns) {
  const std::string dir = TestDir();
  ExpectSmallConfigFails(dir, "device", "cuda:7", {"device 'cuda:7' is not available"});
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"generate", "--device", "cuda:7", "-n", "4"},
        {"bench", "--device", "cuda:7", "-n", "4", "-o", ""},
        {"regen", "--device", "cuda:7", "-n", "4", "--n-sequences", "1", "-o", "r.safetensors"}}) {
    const ProcResult r = RunSpecbed(args, dir);
    EXPECT_EQ(r.exit_code, 1) << Describe(r);
    EXPECT_TRUE(Contains(r.err, "device 'cuda:7' is not available")) << Describe(r);
  }
  ExpectSmallConfigFails(dir, "device", "gpu",
                         {"device must be \"cpu\", \"cuda\" or \"cuda:N\", got \"gpu\""});
}

// Every trainer with --device checks it first: with a target and data that do not exist either,
// the error is the device's (exit 1, naming it), so nothing loaded before the check.
TEST(CliErrors, TrainersCheckTheDeviceBeforeLoadingAnything) {
  const std::string dir = TestDir();
  const std::vector<std::string> missing = {"-t", "no-such-target", "-o", "out"};
  std::vector<std::vector<std::string>> commands = {
      {"train", "draft-lm"}, {"train", "hrad"}, {"blockpilot", "train", "--labels", "none.db"}};
  for (const char* trainer : {"eagle3", "medusa", "specblock", "dflash", "jetspec"}) {
    commands.push_back({"train", trainer, "--data", "none.regen.safetensors"});
  }
  for (std::vector<std::string> args : commands) {
    if (args[0] == "train") args.insert(args.end(), missing.begin(), missing.end());
    if (args[0] == "blockpilot") args.insert(args.end(), {"-o", "out"});
    args.insert(args.end(), {"--device", "cuda:7"});
    const ProcResult r = RunSpecbed(args, dir);
    EXPECT_EQ(r.exit_code, 1) << Describe(r);
    EXPECT_TRUE(ContainsAll(r.err, {"--device", "device 'cuda:7' is not available"}))
        << Describe(r);
  }
  // Plain `cuda`: named when this build or machine has none; where it has one, the device passes
  // and the missing target is what fails.
  for (const char* trainer : {"draft-lm", "eagle3"}) {
    std::vector<std::string> args = {"train", trainer, "--device", "cuda"};
    args.insert(args.end(), missing.begin(), missing.end());
    if (std::string(trainer) == "eagle3") args.insert(args.end(), {"--data", "none"});
    const ProcResult r = RunSpecbed(args, dir);
    EXPECT_EQ(r.exit_code, 1) << Describe(r);
    EXPECT_TRUE(Contains(r.err, "device 'cuda' is not available") ||
                Contains(r.err, "no-such-target"))
        << Describe(r);
  }
}

TEST(CliErrors, UnknownSubcommandIsNamed) {
  const std::string dir = TestDir();
  const ProcResult r = RunSpecbed({"frobnicate"}, dir);
  EXPECT_GE(r.exit_code, 100) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "frobnicate"));
  EXPECT_TRUE(Contains(r.err, "generate"));
}

TEST(CliErrors, UnknownDatasetListsKnownOnes) {
  ExpectSmallConfigFails(
      TestDir(), "datasets", {"storys"},
      {"unknown dataset 'storys'", "did you mean 'stories'?", "mt_bench", "spec_bench"});
}

TEST(CliErrors, UnknownMethodListsAr) {
  ExpectSmallConfigFails(TestDir(), "methods", {"medusa9"},
                         {"unknown method 'medusa9'", "known methods: ", "ar"});
}

TEST(CliErrors, UnknownConfigKeyNamesFileAndKey) {
  const std::string dir = TestDir();
  const std::string db = dir + "/k.db";
  Json cfg = SmallConfig(db);
  cfg.erase("temperatures");
  cfg["temperature"] = {0};
  const std::string config = WriteJson(dir, "k.json", cfg);
  ExpectRunFails(dir, config, db, {config, "'temperature'", "did you mean 'temperatures'?"});
  EXPECT_FALSE(fs::exists(db)) << "the config is checked before the database is created";
}

// The list of valid keys must read as such (not repeat the file path with an "s" appended).
TEST(CliErrors, UnknownConfigKeyMessageListsKeys) {
  const std::string dir = TestDir();
  const std::string db = dir + "/k.db";
  Json cfg = SmallConfig(db);
  cfg["limits"] = 3;
  const std::string config = WriteJson(dir, "k.json", cfg);
  const ProcResult r = RunSpecbed({"run", config}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "known keys: name, output, targets"));
  EXPECT_FALSE(Contains(r.err, ".jsons"));
  EXPECT_EQ(r.err.find(config), r.err.rfind(config)) << "the path should appear once";
}

TEST(CliErrors, MalformedJsonConfigNamesFile) {
  const std::string dir = TestDir();
  const std::string config = dir + "/broken.json";
  WriteFile(config, "{\"targets\": [\"stories260K\",\n");
  ExpectRunFails(dir, config, "", {config, "not valid JSON"});

  const ProcResult missing = RunSpecbed({"run", dir + "/missing.json"}, dir);
  EXPECT_EQ(missing.exit_code, 1) << Describe(missing);
  EXPECT_TRUE(Contains(missing.err, dir + "/missing.json"));
}

TEST(CliErrors, ImpossibleKnobValues) {
  const std::string dir = TestDir();
  const std::string db = dir + "/v.db";
  struct BadValue {
    const char* key;
    Json value;
    const char* message;
  };
  const std::vector<BadValue> bad = {
      {"temperatures", Json::array({-1}), "temperatures must be in [0, 100]"},
      {"max_new_tokens", 0, "max_new_tokens must be in [1, 1048576]"},
      {"top_p", 1.5, "top_p must be in (0, 1]"},
      {"top_k", -3, "top_k must be >= 0"},
      {"seeds", Json::array({-1}), "seeds must be non-negative"},
      {"dtype", "float8", "dtype must be"},
      {"max_new_tokens", "many", "'max_new_tokens' must be an integer"},
  };
  for (const auto& b : bad) {
    SCOPED_TRACE(b.key);
    Json cfg = SmallConfig(db);
    cfg[b.key] = b.value;
    const std::string config = WriteJson(dir, std::string(b.key) + ".json", cfg);
    ExpectRunFails(dir, config, db, {config, b.message});
  }
  EXPECT_FALSE(fs::exists(db));

  // The same checks on the generate command line are usage errors (CLI11 exit codes, >= 100).
  const std::vector<std::pair<std::vector<std::string>, std::string>> usage_errors = {
      {{"generate", "--top-p", "1.5"}, "--top-p"},
      {{"generate", "-n", "0"}, "--max-new-tokens"},
      {{"generate", "-T", "-1"}, "--temperature"}};
  for (const auto& [args, option] : usage_errors) {
    const ProcResult r = RunSpecbed(args, dir);
    EXPECT_GE(r.exit_code, 100) << Describe(r);
    EXPECT_TRUE(Contains(r.err, option)) << Describe(r);
  }
}

TEST(CliErrors, MalformedUserDatasetLineNamesFileAndLine) {
  const std::string dir = TestDir();
  const std::string prompts = dir + "/prompts.jsonl";
  WriteFile(prompts,
            "{\"prompt\": \"Once upon a time\"}\n"
            "{\"prompt\": \"Tom had a red ball.\"}\n"
            "{\"prompt\": \"The cat\", oops}\n");
  const std::string db = dir + "/u.db";
  Json cfg = SmallConfig(db);
  cfg["datasets"] = {prompts};
  ExpectRunFails(dir, WriteJson(dir, "u.json", cfg), db, {prompts + ":3"});

  // The same file without the bad line runs.
  WriteFile(prompts,
            "{\"prompt\": \"Once upon a time\"}\n"
            "{\"prompt\": \"Tom had a red ball.\"}\n");
  cfg["temperatures"] = {0};
  const ProcResult ok = RunSpecbed({"run", WriteJson(dir, "u2.json", cfg), "--quiet"}, dir);
  ASSERT_EQ(ok.exit_code, 0) << Describe(ok);
  auto store = OpenReadOnly(db);
  const auto cases = store->ListCases();
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_EQ(cases[0].n_samples, 2);
}

TEST(CliErrors, UnwritableResultsPathIsNamed) {
  const std::string dir = TestDir();
  const std::string blocker = dir + "/not_a_dir";
  WriteFile(blocker, "a regular file\n");
  const std::string db = blocker + "/run.db";
  ExpectRunFails(dir, WriteJson(dir, "w.json", SmallConfig(db)), "",
                 {"results database '" + db + "'"});
  // -o overrides the config's output and is checked the same way.
  const ProcResult r =
      RunSpecbed({"run", WriteJson(dir, "w2.json", SmallConfig(dir + "/fine.db")), "-o", db}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, db));
  EXPECT_FALSE(fs::exists(dir + "/fine.db"));
}

// Another process holds the write lock for longer than the store's busy timeout (10 s by
// default): the run must fail with the lock message, store nothing, and succeed once released.
// This test waits the full timeout once (~10 s).
TEST(CliErrors, LockedDatabaseFailsCleanlyThenSucceeds) {
  const std::string dir = TestDir();
  const std::string db = dir + "/locked.db";
  { ResultsStore::Open(db); }  // create the schema
  Json cfg = SmallConfig(db);
  cfg["temperatures"] = {0};
  cfg["datasets"] = {{{"name", "stories"}, {"limit", 2}}};
  const std::string config = WriteJson(dir, "lock.json", cfg);

  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(holder);
  const ProcResult r = RunSpecbed({"run", config, "--quiet"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "results database '" + db + "' is locked by another process"));
  EXPECT_GE(r.wall_s, 9.0) << "it should wait for the busy timeout before giving up";
  {
    auto store = OpenReadOnly(db);
    EXPECT_EQ(store->CountRows("cases"), 0);
    EXPECT_EQ(store->CountRows("samples"), 0);
  }
  ASSERT_EQ(sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(holder);

  const ProcResult ok = RunSpecbed({"run", config, "--quiet"}, dir);
  ASSERT_EQ(ok.exit_code, 0) << Describe(ok);
  auto store = OpenReadOnly(db);
  EXPECT_EQ(store->CountRows("cases"), 1);
  EXPECT_EQ(store->CountRows("samples"), 2);
}

// ---------------------------------------------------------------------------------------------
// bench

// The default bench: a build line, a prompt-processing row (pp64) and a decode row (tg32), each
// printed as Markdown and stored.
TEST(CliBench, PrintsMarkdownRowsAndStoresThem) {
  const std::string dir = TestDir();
  const std::string db = dir + "/bench.db";
  const ProcResult r = RunSpecbed({"bench", "-n", "32", "-r", "1", "-o", db}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "build: specbed ")) << r.out;
  EXPECT_TRUE(
      Contains(r.out, "| model | dtype | threads | batch | test | context | tokens | tok/s |"));
  EXPECT_TRUE(Contains(r.out, "| stories260K | float32 | 1 | 1 | pp64 | 0 | 64 | ")) << r.out;
  EXPECT_TRUE(Contains(r.out, "| stories260K | float32 | 1 | 1 | tg32 | 0 | 32 | ")) << r.out;
  auto store = OpenReadOnly(db);
  const std::vector<BenchRecord> rows = store->LoadBench();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].test, "pp");
  EXPECT_EQ(rows[0].n_tokens, 64);
  EXPECT_EQ(rows[0].context_len, 0);
  EXPECT_EQ(rows[1].test, "tg");
  EXPECT_EQ(rows[1].n_tokens, 32);
  for (const BenchRecord& row : rows) {
    EXPECT_EQ(row.model, "stories260K");
    EXPECT_EQ(row.dtype, "float32");
    EXPECT_EQ(row.reps, 1);
    EXPECT_GT(row.tokens_per_s, 0.0);
    EXPECT_GT(row.ms_per_step, 0.0);
    EXPECT_GT(row.n_params, 0);
  }
  // No speed comparison between the rows: one repetition on a 2-core runner next to another test
  // is noise (CI saw tg32 faster than pp64); the bench's figures are read in results/, not here.
  EXPECT_EQ(store->CountRows("runs"), 1);
}

// --prompt-tokens sets the pp rows (0 = none, too long for the model = an error before anything
// is measured); --format csv / json print the stored fields (the notes on stderr), md is the
// default; an unknown format is a usage error.
TEST(CliBench, PromptRowsFormatsAndBuildLine) {
  const std::string dir = TestDir();
  const std::vector<std::string> bench = {"bench",           "-q", "-n", "4", "-r", "1",
                                          "--bandwidth-mib", "0",  "-o", ""};
  const auto run = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = bench;
    args.insert(args.end(), flags.begin(), flags.end());
    return RunSpecbed(args, dir);
  };
  ProcResult r = run({"-p", "8,16", "--format", "csv"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  std::vector<std::string> lines;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 4u) << r.out;  // header, pp8, pp16, tg4
  EXPECT_EQ(lines[0].rfind("model,dtype,threads,batch_size,context_len,n_tokens,", 0), 0u)
      << lines[0];
  EXPECT_TRUE(Contains(lines[0], ",test")) << lines[0];
  EXPECT_TRUE(Contains(lines[1], ",pp") && Contains(lines[3], ",tg")) << r.out;
  EXPECT_FALSE(Contains(r.out, "BLAS:")) << "notes belong on stderr";
  EXPECT_TRUE(Contains(r.err, "build: specbed ") && Contains(r.err, "BLAS:")) << r.err;
  r = run({"-p", "0", "--format", "json"});
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const Json doc = ParseJsonOrFail(r);
  EXPECT_EQ(doc["build"].get<std::string>().rfind("specbed ", 0), 0u);
  ASSERT_EQ(doc["rows"].size(), 1u);  // -p 0: no pp row
  EXPECT_EQ(doc["rows"][0]["test"], "tg");
  EXPECT_GT(doc["rows"][0]["tokens_per_s"].get<double>(), 0.0);
  r = run({"-p", "100000"});
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "--prompt-tokens 100000")) << r.err;
  EXPECT_FALSE(Contains(r.out, "| stories260K |")) << r.out;
  r = run({"--format", "xml"});
  EXPECT_GE(r.exit_code, 100) << Describe(r);
}

TEST(CliBench, SigkillKeepsTheRowsMeasuredBeforeIt) {
  const std::string dir = TestDir();
  const std::string db = dir + "/bench.db";
  // 8 contexts x 3 reps of 256 tokens: seconds of work, each row stored as soon as measured.
  Child child({"bench", "-c", "0,8,16,24,32,40,48,56", "-n", "256", "-r", "3", "--bandwidth-mib",
               "0", "-p", "0", "-o", db},
              dir);
  const int64_t at_kill = KillOnceStored(
      child, [&] { return CountRowsOrMinusOne(db, "bench"); }, std::numeric_limits<int64_t>::max(),
      std::chrono::milliseconds(5));
  const ProcResult r = child.Wait(60);
  ASSERT_GE(at_kill, 1) << "no bench row was stored before the bench ended\n" << Describe(r);
  ASSERT_LT(at_kill, 8) << "the bench finished before it could be killed; make it slower";
  EXPECT_EQ(r.term_signal, SIGKILL) << Describe(r);
  auto store = OpenReadOnly(db);
  const std::vector<BenchRecord> rows = store->LoadBench();
  EXPECT_GE(static_cast<int64_t>(rows.size()), at_kill);
  EXPECT_LT(rows.size(), 8u);
  for (const BenchRecord& row : rows) EXPECT_GT(row.tokens_per_s, 0.0);
  EXPECT_EQ(store->CountRows("runs"), 1);
}

TEST(CliBench, VerifyWidthsBandwidthAndRooflineArePrintedAndStored) {
  const std::string dir = TestDir();
  const std::string db = dir + "/bench.db";
  const ProcResult r = RunSpecbed({"bench", "-n", "8", "-r", "2", "-c", "4", "--verify-widths",
                                   "2,4", "--bandwidth-mib", "16", "-p", "0", "-o", db},
                                  dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(ContainsAll(
      r.out, {"BLAS: ", "BLAS_INFO and CPU capability", "| STREAM (best of 5) | 1 | 16 | ",
              "| weight MB | roofline |", "| verify | stories260K | float32 | 1 | 4 | 1 | ",
              "| verify | stories260K | float32 | 1 | 4 | 4 | "}));
  auto store = OpenReadOnly(db);
  const std::vector<BenchRecord> rows = store->LoadBench();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_GT(rows[0].weight_bytes, 0);
  EXPECT_GT(rows[0].bandwidth_gb_s, 0.0);
  EXPECT_TRUE(std::isfinite(rows[0].roofline_fraction));
  EXPECT_GT(rows[0].roofline_fraction, 0.0);
  EXPECT_FALSE(rows[0].blas_core.empty());
  const std::vector<BenchVerifyRecord> verify = store->LoadBenchVerify();
  ASSERT_EQ(verify.size(), 3u);  // n = 1 added for the ratio
  EXPECT_EQ(verify[0].n_query, 1);
  EXPECT_EQ(verify[1].n_query, 2);
  EXPECT_EQ(verify[2].n_query, 4);
  EXPECT_DOUBLE_EQ(verify[0].ratio_to_one, 1.0);
  for (const auto& v : verify) {
    EXPECT_EQ(v.model, "stories260K");
    EXPECT_EQ(v.context_len, 4);
    EXPECT_EQ(v.reps, 2);
    EXPECT_GT(v.forward_ms, 0.0);
    EXPECT_NEAR(v.ratio_to_one, v.forward_ms / verify[0].forward_ms, 1e-9);
  }
  const std::vector<BenchBandwidthRecord> bw = store->LoadBenchBandwidth();
  ASSERT_EQ(bw.size(), 1u);
  EXPECT_EQ(bw[0].threads, 1);
  EXPECT_EQ(bw[0].array_bytes, int64_t{16} << 20);
  EXPECT_GT(bw[0].copy_gb_s, 0.0);
  EXPECT_GT(bw[0].triad_gb_s, 0.0);
  EXPECT_DOUBLE_EQ(rows[0].bandwidth_gb_s, bw[0].triad_gb_s);
}

// --gemv-isa measures each kernel cap in turn and records which kernel ran; an unknown cap, on the
// command line or in SPECBED_GEMV_ISA, fails naming it before anything is measured.
TEST(CliBench, GemvIsaRowsRecordTheKernelAndBadNamesFail) {
  const std::string dir = TestDir();
  const std::string db = dir + "/bench.db";
  ProcResult r = RunSpecbed({"bench", "-n", "4", "-r", "1", "--bandwidth-mib", "0", "--gemv-isa",
                             "generic,auto", "--huge-pages", "off", "-p", "0", "-o", db},
                            dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(ContainsAll(r.out, {"GEMV: fp32 ", "| GEMV | huge-page MB |", " | generic | - |"}));
  auto store = OpenReadOnly(db);
  const std::vector<BenchRecord> rows = store->LoadBench();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].gemv_kernel, "generic");
  EXPECT_FALSE(rows[1].gemv_kernel.empty());
  EXPECT_EQ(rows[0].huge_page_bytes, -1);  // --huge-pages off: not packed
  r = RunSpecbed({"bench", "-n", "4", "--gemv-isa", "avx9000", "-o", ""}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "bench --gemv-isa: unknown GEMV instruction set 'avx9000'"))
      << Describe(r);
  setenv("SPECBED_GEMV_ISA", "avx9000", 1);
  r = RunSpecbed({"bench", "-n", "4", "-r", "1", "--bandwidth-mib", "0", "-o", ""}, dir);
  unsetenv("SPECBED_GEMV_ISA");
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(
      Contains(r.err, "environment variable SPECBED_GEMV_ISA: unknown GEMV instruction set"))
      << Describe(r);
}

// Every combination is validated before the first measurement: a context that cannot fit fails
// at once, naming it, and nothing is measured (no bench rows, no measurement lines).
// --graphs off,on measures the decode rows and the verify-width curve of each setting in one run
// (the "[graphs]" rows replay captured steps); the row kernels capture nothing, so --graphs needs
// --forward aten on the CPU and says so.
TEST(CliBench, GraphsOffAndOnInOneRun) {
  const std::string dir = TestDir();
  const std::string db = dir + "/bench.db";
  ProcResult r =
      RunSpecbed({"bench", "-q", "-n", "4", "-r", "1", "--bandwidth-mib", "0", "--forward", "aten",
                  "--graphs", "off,on", "--verify-widths", "1,3", "-p", "0", "-o", db},
                 dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(
      ContainsAll(r.out, {"| stories260K [aten] |", "| stories260K [aten] [graphs] |",
                          "| verify | stories260K [aten] [graphs] | float32 | 1 | 0 | 3 |"}))
      << r.out;
  auto store = OpenReadOnly(db);
  const std::vector<BenchRecord> rows = store->LoadBench();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].model, "stories260K [aten] [graphs]");
  r = RunSpecbed({"bench", "-q", "-n", "4", "--graphs", "on", "-o", ""}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "bench --graphs: captured steps run on the ATen forward path"))
      << Describe(r);
}

TEST(CliBench, ImpossibleContextFailsBeforeMeasuringAnything) {
  const std::string dir = TestDir();
  const std::string db = dir + "/bench.db";
  const ProcResult r = RunSpecbed({"bench", "-n", "8", "-r", "1", "-c", "0,100000", "-o", db}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "1 combination(s) cannot run (nothing was measured)"));
  EXPECT_TRUE(Contains(r.err, "stories260K context 100000"));
  EXPECT_FALSE(Contains(r.out, "| stories260K |")) << Describe(r);  // no row measured
}

// --lookup-contexts: a row per lookup drafter and context length, nothing stored; a context of 0
// fails naming the flag.
TEST(CliBench, LookupCostTable) {
  const std::string dir = TestDir();
  ProcResult r = RunSpecbed({"bench", "--lookup-contexts", "16,64", "--lookup-steps", "8"}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  for (const std::string text : {"sampled", "repeated"}) {
    for (const std::string drafter : {"ngram (defaults)", "suffix (scope none)"}) {
      for (const std::string context : {"16", "64"}) {
        const std::string row = "| " + drafter + " | " + text + " | " + context + " |";
        EXPECT_TRUE(Contains(r.out, row)) << row << "\n" << r.out;
      }
    }
  }
  r = RunSpecbed({"bench", "--lookup-contexts", "0"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "--lookup-contexts: context lengths must be >= 1, got 0"));
}

// bench --count-ops: one row per step (decode, then a verify per width >= 2) with the launching
// ops per layer of the fused ATen path, no allocation, and the trace comparison at the second
// context; the decode step's ops by name.
TEST(CliBench, CountOpsTable) {
  const std::string dir = TestDir();
  const ProcResult r = RunSpecbed(
      {"bench", "--count-ops", "-t", "stories260K", "-c", "16", "--verify-widths", "1,8"}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  for (const std::string row : {"| ops | stories260K | float32 | decode | 1 | 16 | 52 | 9.0 | 7 | ",
                                "| ops | stories260K | float32 | verify | 8 | 16 | ",
                                "| yes (53) |", "specbed::rope_kv_write x5;"}) {
    EXPECT_TRUE(Contains(r.out, row)) << row << "\n" << r.out;
  }
  EXPECT_FALSE(Contains(r.out, "| verify | 1 |")) << r.out;  // width 1 is the decode row
}

TEST(CliBench, BadVerifyWidthsAndBandwidthFailClearly) {
  const std::string dir = TestDir();
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--verify-widths", "0"},
                                               std::vector<std::string>{"--verify-widths=2,-1"}}) {
    std::vector<std::string> argv = {"bench", "-n", "4", "-r", "1", "-o", ""};
    argv.insert(argv.end(), args.begin(), args.end());
    const ProcResult r = RunSpecbed(argv, dir);
    EXPECT_EQ(r.exit_code, 1) << Describe(r);
    EXPECT_TRUE(Contains(r.err, "--verify-widths must all be >= 1"));
  }
  const ProcResult r =
      RunSpecbed({"bench", "-n", "4", "-r", "1", "-o", "", "--bandwidth-mib=-5"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "--bandwidth-mib must be >= 0"));
}

}  // namespace
}  // namespace specbed

namespace specbed {
namespace {

// Text that is not valid UTF-8 (the prompt given as raw bytes, or generated bytes) used to make
// --json fail with the JSON library's message although the ids were fine. Now each invalid byte
// is printed as U+FFFD and the ids stay exact.
TEST(CliJson, InvalidUtf8TextIsEscapedAndIdsAreExact) {
  const std::string dir = TestDir();
  const std::string bad = "Once \xff\xfe upon";
  const ProcResult tok = RunSpecbed({"tokenize", "--json", bad}, dir);
  ASSERT_EQ(tok.exit_code, 0) << Describe(tok);
  const Json j = ParseJsonOrFail(tok);
  EXPECT_TRUE(Contains(j["text"].get<std::string>(), "Once \xEF\xBF\xBD\xEF\xBF\xBD upon"));
  const ProcResult plain = RunSpecbed({"tokenize", bad}, dir);
  ASSERT_EQ(plain.exit_code, 0) << Describe(plain);
  std::string ids_line;
  for (size_t i = 0; i < j["ids"].size(); ++i) {
    ids_line += (i ? " " : "") + std::to_string(j["ids"][i].get<int>());
  }
  EXPECT_EQ(plain.out.substr(0, plain.out.find('\n')), ids_line);

  const ProcResult gen = RunSpecbed({"generate", "--json", "-p", bad, "-n", "8"}, dir);
  ASSERT_EQ(gen.exit_code, 0) << Describe(gen);
  const Json g = ParseJsonOrFail(gen);
  EXPECT_TRUE(Contains(g["prompt"].get<std::string>(), "\xEF\xBF\xBD"));
  EXPECT_EQ(g["generated_ids"].size(), 8u);
}

// A prompt longer than the model's context names its file and line (it used to name neither).
TEST(CliErrors, OverLongPromptNamesFileAndLine) {
  const std::string dir = TestDir();
  const std::string prompts = dir + "/long.jsonl";
  std::string long_text;
  for (int i = 0; i < 600; ++i) long_text += "Once upon a time ";
  WriteFile(prompts,
            "{\"prompt\": \"Tom had a red ball.\"}\n\n{\"prompt\": \"" + long_text + "\"}\n");
  const std::string db = dir + "/long.db";
  Json cfg = SmallConfig(db);
  cfg["datasets"] = {prompts};
  cfg["temperatures"] = {0};
  const ProcResult r = RunSpecbed({"run", WriteJson(dir, "long.json", cfg), "--quiet"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, prompts + ":3: prompt '3'"));
  EXPECT_TRUE(Contains(r.err, "prompt of "));
}

// ---------------------------------------------------------------------------------------------
// The last hostile inputs: special files, directories and link loops where files are expected,
// out-of-range numbers, contradicting flags, read-only media, concurrent starts. Each fails with
// a message naming the input (exit 1) and writes nothing, or works as documented.

// A FIFO in place of a checkpoint, a config or a dataset fails at once (the file type is checked
// before opening, so nothing blocks waiting for a writer): each command runs under a 20 s limit.
TEST(CliHostile, FifoInPlaceOfAFileFailsAtOnce) {
  const std::string dir = TestDir();
  const std::string fifo_bin = dir + "/model.bin", fifo_json = dir + "/config.json",
                    fifo_jsonl = dir + "/prompts.jsonl";
  for (const std::string& f : {fifo_bin, fifo_json, fifo_jsonl}) {
    ASSERT_EQ(mkfifo(f.c_str(), 0644), 0) << f;
  }
  ProcResult r = RunSpecbed({"generate", "--target", fifo_bin, "-n", "4"}, dir, 20);
  EXPECT_FALSE(r.timed_out) << "blocked on a FIFO checkpoint";
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(
      Contains(r.err, "'" + fifo_bin + "' is a FIFO (named pipe), expected a regular file"));
  r = RunSpecbed({"run", fifo_json}, dir, 20);
  EXPECT_FALSE(r.timed_out) << "blocked on a FIFO config";
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "is a FIFO (named pipe)"));
  const std::string db = dir + "/fifo.db";
  Json cfg = SmallConfig(db);
  cfg["datasets"] = {fifo_jsonl};
  r = RunSpecbed({"run", WriteJson(dir, "ds.json", cfg), "--quiet"}, dir, 20);
  EXPECT_FALSE(r.timed_out) << "blocked on a FIFO dataset";
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "is a FIFO (named pipe)"));
  EXPECT_FALSE(fs::exists(db)) << "a database was created before the inputs were validated";
}

// A directory where a file is expected (a run config, a dataset, an HF checkpoint's config.json)
// says so instead of "bad JSON" or "empty file".
TEST(CliHostile, DirectoryWhereAFileIsExpected) {
  const std::string dir = TestDir();
  fs::create_directories(dir + "/config.json");
  ProcResult r = RunSpecbed({"run", dir + "/config.json"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "'" + dir + "/config.json' is a directory, expected a file"));
  fs::create_directories(dir + "/prompts.jsonl");
  const std::string db = dir + "/d.db";
  Json cfg = SmallConfig(db);
  cfg["datasets"] = {dir + "/prompts.jsonl"};
  r = RunSpecbed({"run", WriteJson(dir, "ds.json", cfg), "--quiet"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "is a directory, expected a file"));
  EXPECT_FALSE(fs::exists(db));
  fs::create_directories(dir + "/hf/config.json");
  r = RunSpecbed({"generate", "--target", dir + "/hf", "-n", "4"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "'" + dir + "/hf/config.json' is a directory, expected a file"));
}

// A symbolic link loop and a missing checkpoint folder are named as such, not "unknown model";
// a run with either (or an unknown dataset) leaves no database behind.
TEST(CliHostile, LinkLoopAndMissingCheckpointAreNamed) {
  const std::string dir = TestDir();
  fs::create_symlink(dir + "/loop", dir + "/loop");
  ProcResult r = RunSpecbed({"generate", "--target", dir + "/loop", "-n", "4"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "target checkpoint '" + dir + "/loop': a symbolic link loop"));
  r = RunSpecbed({"generate", "--target", dir + "/no/such/model", "-n", "4"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "target checkpoint '" + dir + "/no/such/model': no such directory"));
  for (const auto& [name, target, dataset] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"missing", dir + "/no/such/model", "stories"},
           {"loop", dir + "/loop", "stories"},
           {"dataset", "stories260K", "no_such_dataset"}}) {
    const std::string db = dir + "/" + name + ".db";
    Json cfg = SmallConfig(db);
    cfg["targets"] = {target};
    cfg["datasets"] = {dataset};
    r = RunSpecbed({"run", WriteJson(dir, name + ".json", cfg), "--quiet"}, dir);
    EXPECT_EQ(r.exit_code, 1) << Describe(r);
    EXPECT_FALSE(fs::exists(db)) << name << ": a database was left behind";
  }
}

// An HF folder whose tokenizer is vocab.json + merges.txt (GPT-2 style) is used by every command;
// a folder with no tokenizer says where it looked.
TEST(CliHostile, Gpt2StyleTokenizerFolderAndNoTokenizer) {
  const std::string dir = TestDir();
  const std::string gpt2 = std::string(SPECBED_SOURCE_DIR) + "/models/tokenizer/gpt2";
  ProcResult r = RunSpecbed({"tokenize", "-t", gpt2, "Hello world", "--json"}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(ParseJsonOrFail(r)["ids"], Json::parse("[15496, 995]"));
  fs::create_directories(dir + "/empty_model");
  r = RunSpecbed({"tokenize", "-t", dir + "/empty_model", "Hello"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "has no tokenizer (looked in '" + dir +
                                  "/empty_model' for tokenizer.json, vocab.json + merges.txt, "
                                  "tokenizer.bin)"));
}

// Out-of-range numbers: -n beyond the target's context fails before any run row is written,
// naming the context; a config temperature outside [0, 100] (as generate's); a negative seed;
// --decode with a text to encode.
TEST(CliHostile, OutOfRangeNumbersAndContradictingFlags) {
  const std::string dir = TestDir();
  const std::string db = dir + "/n.db";
  ProcResult r = RunSpecbed(
      {"run", WriteJson(dir, "n.json", SmallConfig(db)), "-n", "100000", "--quiet"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "max_new_tokens (-n or the config's \"max_new_tokens\") is 100000"));
  EXPECT_TRUE(Contains(r.err, "has a context of 512 tokens"));
  EXPECT_FALSE(Contains(r.err, ":1:")) << "blamed on a dataset line";
  EXPECT_FALSE(fs::exists(db));
  Json cfg = SmallConfig(db);
  cfg["temperatures"] = {1e308};
  ExpectRunFails(dir, WriteJson(dir, "t.json", cfg), db,
                 {"temperatures must be in [0, 100], got 1e+308"});
  r = RunSpecbed({"generate", "-t", "1e308", "-n", "2"}, dir);
  EXPECT_NE(r.exit_code, 0) << Describe(r);
  r = RunSpecbed({"generate", "--seed=-1", "-n", "2"}, dir);
  EXPECT_NE(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "--seed")) << r.err;
  r = RunSpecbed({"tokenize", "--decode", "1,2", "Once upon"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "the text 'Once upon' would be ignored"));
}

// A database on a read-only medium opens read-only: SQLite cannot create the -shm file a WAL
// database needs (simulated by a directory of that name, which works as root too); summary and
// report read it immutable instead of failing with "unable to open database file".
TEST(CliHostile, ReadOnlyMediumStillSummarizes) {
  const std::string dir = TestDir();
  const std::string db = dir + "/ro.db";
  Json cfg = SmallConfig(db);
  cfg["temperatures"] = {0};
  ProcResult r =
      RunSpecbed({"run", WriteJson(dir, "ro.json", cfg), "--quiet", "--no-summary"}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  ASSERT_FALSE(fs::exists(db + "-shm"));
  fs::create_directories(db + "-shm");
  r = RunSpecbed({"summary", db}, dir);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "1 case"));
}

// Two runs started together on a new database both succeed: the switch to WAL mode waits for the
// busy timeout instead of failing at once with "locked (waited 0 ms)". Repeated 3 times.
TEST(CliHostile, TwoRunsStartedTogetherOnANewDatabase) {
  const std::string dir = TestDir();
  for (int round = 0; round < 3; ++round) {
    const std::string db = dir + "/both" + std::to_string(round) + ".db";
    Json cfg = SmallConfig(db);
    cfg["temperatures"] = {0};
    cfg["datasets"] = {{{"name", "stories"}, {"limit", 1}}};
    const std::string config = WriteJson(dir, "both.json", cfg);
    Child a({"run", config, "--quiet", "--no-summary"}, dir);
    Child b({"run", config, "--quiet", "--no-summary"}, dir);
    const ProcResult ra = a.Wait(120), rb = b.Wait(120);
    EXPECT_EQ(ra.exit_code, 0) << Describe(ra);
    EXPECT_EQ(rb.exit_code, 0) << Describe(rb);
    EXPECT_FALSE(Contains(ra.err + rb.err, "waited 0 ms"));
  }
}

}  // namespace
}  // namespace specbed
