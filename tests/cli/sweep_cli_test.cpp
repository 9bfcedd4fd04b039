// End-to-end tests of `specbed sweep`, `specbed merge` and `specbed slurm` (harness/cli) with the
// real binary on stories260K (2 prompts, 8 new tokens): shards 0/2 and 1/2 merged equal one
// unsharded run case for case; a sweep killed with SIGKILL mid-way resumes to every case exactly
// once; merging twice adds nothing; `run` accepts sweep files; dry runs, the slurm script (its
// #SBATCH quoting too) and the errors for bad shards, ranges, inputs and options; --device and
// --dtype overrides, -t/--target and --knob over a paper config, and the warning for a large
// target on the CPU. Databases are read through
// results/store.h.
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "results/store.h"
#include "tests/cli/cli_store_util.h"
#include "tests/cli/cli_test_util.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
// Child, RunSpecbed, Contains, OpenReadOnly, WriteJson, ...: the child process and store helpers of
// tests/cli/cli_test_util.h and tests/cli/cli_store_util.h.
using namespace cli_test;

// AR + SpS gamma 1 and 2 at T 0 and 1 on 2 stories prompts, 8 new tokens: 6 cases.
Json SmallSweep(const std::string& db) {
  return {{"name", "sweep-test"},
          {"output", db},
          {"methods", {"ar", {{"name", "sps"}, {"knobs", {{"gamma", {1, 2}}}}}}},
          {"datasets", {{{"name", "stories"}, {"limit", 2}}}},
          {"temperatures", {0, 1}},
          {"max_new_tokens", 8},
          {"warmup", 0},
          {"paper", {{"table", "Table 0"}}}};
}

// case_key -> number of cases with that key.
std::map<std::string, int> KeyCounts(const std::string& db) {
  std::map<std::string, int> out;
  for (const auto& c : OpenReadOnly(db)->ListCases()) ++out[c.record.case_key];
  return out;
}

std::set<std::string> Keys(const std::map<std::string, int>& counts) {
  std::set<std::string> out;
  for (const auto& [k, n] : counts) {
    EXPECT_EQ(n, 1) << "case " << k << " stored " << n << " times";
    out.insert(k);
  }
  return out;
}

// The keys listed by `specbed sweep FILE --dry-run [extra...]` (first word of each line).
std::set<std::string> DryRunKeys(const std::string& dir, const std::string& sweep,
                                 std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"sweep", sweep, "--dry-run"};
  args.insert(args.end(), extra.begin(), extra.end());
  const ProcResult r = RunSpecbed(args, dir);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  std::set<std::string> keys;
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    EXPECT_GT(line.size(), 18u) << line;
    keys.insert(line.substr(0, 16));
  }
  return keys;
}

TEST(CliSweep, ShardsMergeIntoTheUnshardedRun) {
  const std::string dir = TestDir();
  const std::string sweep = WriteJson(dir, "small.json", SmallSweep(dir + "/all.db"));

  const std::set<std::string> listed = DryRunKeys(dir, sweep);
  EXPECT_EQ(listed.size(), 6u);
  EXPECT_FALSE(fs::exists(dir + "/all.db")) << "--dry-run must not create the database";

  const ProcResult all = RunSpecbed({"sweep", sweep, "--quiet"}, dir);
  ASSERT_EQ(all.exit_code, 0) << Describe(all);
  EXPECT_TRUE(Contains(all.err, "specbed sweep: 6 cases\n"));
  EXPECT_TRUE(Contains(all.err, "6 cases (6 run, 0 already complete)"));
  const std::set<std::string> unsharded = Keys(KeyCounts(dir + "/all.db"));
  EXPECT_EQ(unsharded, listed);

  // Method cases split between the shards; each shard also runs the AR case of every workload
  // (here: each T) it holds a method case of, under a shard-tagged key.
  std::set<std::string> method_keys, shard_method_keys[2];
  for (const auto& c : OpenReadOnly(dir + "/all.db")->ListCases()) {
    if (c.record.method != "ar") method_keys.insert(c.record.case_key);
  }
  int64_t shard_cases = 0;
  for (int i = 0; i < 2; ++i) {
    const std::string db = dir + "/shard_" + std::to_string(i) + ".db";
    const std::string shard = std::to_string(i) + "/2";
    const ProcResult r =
        RunSpecbed({"sweep", sweep, "--shard", shard, "--output", db, "--quiet"}, dir);
    ASSERT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_TRUE(Contains(r.err, "in shard " + shard + " (6 in the sweep)")) << r.err;
    const std::set<std::string> keys = Keys(KeyCounts(db));
    EXPECT_EQ(keys, DryRunKeys(dir, sweep, {"--shard", shard}));
    std::set<double> method_temps, ar_temps;
    for (const auto& c : OpenReadOnly(db)->ListCases()) {
      ++shard_cases;
      if (c.record.method == "ar") {
        EXPECT_TRUE(ar_temps.insert(c.record.temperature).second);
        EXPECT_EQ(Json::parse(c.record.config_json)["shard"], shard);
        EXPECT_EQ(unsharded.count(c.record.case_key), 0u) << "AR key must carry the shard";
      } else {
        method_temps.insert(c.record.temperature);
        shard_method_keys[i].insert(c.record.case_key);
      }
    }
    EXPECT_EQ(ar_temps, method_temps) << "shard " << shard << " runs exactly the AR it needs";
  }
  for (const auto& k : shard_method_keys[0]) EXPECT_EQ(shard_method_keys[1].count(k), 0u);
  std::set<std::string> both = shard_method_keys[0];
  both.insert(shard_method_keys[1].begin(), shard_method_keys[1].end());
  EXPECT_EQ(both, method_keys);

  // merge keeps every shard's AR case, and every speedup compares with the AR of its own shard.
  const std::string merged = dir + "/merged.db";
  ProcResult m = RunSpecbed({"merge", merged, dir + "/shard_0.db", dir + "/shard_1.db"}, dir);
  ASSERT_EQ(m.exit_code, 0) << Describe(m);
  EXPECT_TRUE(Contains(m.err, std::to_string(shard_cases) + " cases copied, 0 skipped")) << m.err;
  const ProcResult summary = RunSpecbed({"summary", merged, "--json"}, dir);
  ASSERT_EQ(summary.exit_code, 0) << Describe(summary);
  int64_t compared = 0;
  const Json summary_json = Json::parse(summary.out);
  for (const Json& row : summary_json.at("cases")) {
    if (row["is_baseline"].get<bool>()) continue;
    ASSERT_TRUE(row.contains("baseline") && row["baseline"].is_object()) << row.dump();
    EXPECT_TRUE(row["baseline"]["same_run"].get<bool>()) << row.dump();
    ++compared;
  }
  EXPECT_EQ(compared, 4);
  const ProcResult table = RunSpecbed({"summary", merged}, dir);
  EXPECT_TRUE(Contains(table.out, "ar [shard 0/2]") && Contains(table.out, "ar [shard 1/2]"))
      << table.out;
  // Merging the shards again adds nothing; the unsharded run adds only its (untagged) AR cases.
  m = RunSpecbed({"merge", merged, dir + "/shard_1.db", dir + "/shard_0.db", dir + "/all.db"}, dir);
  ASSERT_EQ(m.exit_code, 0) << Describe(m);
  EXPECT_TRUE(Contains(m.err, "2 cases copied, " + std::to_string(shard_cases + 4) + " skipped"))
      << m.err;
  auto store = OpenReadOnly(merged);
  EXPECT_EQ(store->CountRows("cases"), shard_cases + 2);
  EXPECT_EQ(store->CountRows("runs"), 3);

  // Samples and steps came along; the case config carries repeat, batch and paper.
  auto single = OpenReadOnly(dir + "/all.db");
  std::map<std::string, ResultsStore::CaseRow> by_key;
  std::map<double, ResultsStore::CaseRow> ar_of_temperature;
  for (const auto& c : single->ListCases()) {
    by_key.emplace(c.record.case_key, c);
    if (c.record.method == "ar") ar_of_temperature.emplace(c.record.temperature, c);
  }
  for (const auto& c : store->ListCases()) {
    const auto& s = c.record.method == "ar" ? ar_of_temperature.at(c.record.temperature)
                                            : by_key.at(c.record.case_key);
    EXPECT_EQ(c.n_samples, 2);
    const auto samples = store->LoadSamples(c.case_id);
    const auto want = single->LoadSamples(s.case_id);
    ASSERT_EQ(samples.size(), want.size());
    if (c.record.temperature == 0) {
      for (size_t i = 0; i < samples.size(); ++i)
        EXPECT_EQ(samples[i].output_hash, want[i].output_hash) << "greedy output differs";
      EXPECT_EQ(store->LoadSteps(c.case_id).size(), single->LoadSteps(s.case_id).size());
    }
    if (c.record.method == "sps") {
      EXPECT_GT(store->LoadSteps(c.case_id).size(), 0u);
    }
    EXPECT_EQ(c.record.batch_size, 1);
    const Json config = Json::parse(c.record.config_json);
    EXPECT_EQ(config["repeat"], 0);
    EXPECT_EQ(config["batch_size"], 1);
    EXPECT_EQ(config["paper"]["table"], "Table 0");
  }
}

TEST(CliSweep, SigkillMidSweepResumesToEveryCaseOnce) {
  const std::string dir = TestDir();
  const std::string db = dir + "/kill.db";
  Json cfg = SmallSweep(db);
  cfg["repeats"] = 4;  // 2 AR + 2 x 2 x 4 SpS = 18 cases
  cfg["max_new_tokens"] = 32;
  const std::string sweep = WriteJson(dir, "kill.json", cfg);
  {
    ProcResult r;
    ASSERT_NO_FATAL_FAILURE(RunKilledMidway({"sweep", sweep}, dir, db, 18, &r));
    EXPECT_TRUE(Contains(r.err, "specbed sweep: 18 cases"));
  }
  const int64_t before = OpenReadOnly(db)->CountRows("cases");
  ASSERT_LT(before, 18);
  EXPECT_EQ(OpenReadOnly(db)->CountRows("samples"), 2 * before) << "a partial case was stored";

  const ProcResult again = RunSpecbed({"sweep", sweep, "--quiet"}, dir);
  ASSERT_EQ(again.exit_code, 0) << Describe(again);
  EXPECT_TRUE(Contains(again.err, std::to_string(before) + " of 18 cases already complete"));
  const std::map<std::string, int> counts = KeyCounts(db);
  EXPECT_EQ(Keys(counts), DryRunKeys(dir, sweep));
  EXPECT_EQ(counts.size(), 18u);
  EXPECT_EQ(OpenReadOnly(db)->CountRows("samples"), 36);
  std::map<int64_t, int> repeats;
  for (const auto& c : OpenReadOnly(db)->ListCases())
    ++repeats[Json::parse(c.record.config_json)["repeat"].get<int64_t>()];
  EXPECT_EQ(repeats, (std::map<int64_t, int>{{0, 6}, {1, 4}, {2, 4}, {3, 4}}));

  // Merging the resumed database twice into a fresh one never duplicates.
  const std::string merged = dir + "/merged.db";
  for (int i = 0; i < 2; ++i) {
    const ProcResult m = RunSpecbed({"merge", merged, db}, dir);
    ASSERT_EQ(m.exit_code, 0) << Describe(m);
  }
  EXPECT_EQ(KeyCounts(merged), counts);
  EXPECT_EQ(OpenReadOnly(merged)->CountRows("samples"), 36);
}

TEST(CliSweep, RunAcceptsSweepFilesAndReportsSkippedBatches) {
  const std::string dir = TestDir();
  Json cfg = SmallSweep(dir + "/run.db");
  cfg["temperatures"] = {0};
  cfg["batch_sizes"] = {1, 2};
  const std::string sweep = WriteJson(dir, "run.json", cfg);
  const ProcResult r = RunSpecbed({"run", sweep, "--quiet"}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(ContainsAll(r.err, {"skipped: method ar at batch > 1 (1 cases)",
                                  "skipped: method sps at batch > 1 (2 cases)",
                                  "3 cases (3 run, 0 already complete)"}));
  EXPECT_EQ(OpenReadOnly(dir + "/run.db")->CountRows("cases"), 3);
}

TEST(CliSweep, BadShardsRangesAndInputsFailClearly) {
  const std::string dir = TestDir();
  const std::string db = dir + "/bad.db";
  const std::string sweep = WriteJson(dir, "ok.json", SmallSweep(db));
  for (const char* shard : {"2/2", "1", "-1/2", "0/0", "a/b", "1/2x"}) {
    const ProcResult r = RunSpecbed({"sweep", sweep, "--shard", shard}, dir);
    EXPECT_EQ(r.exit_code, 1) << shard << Describe(r);
    EXPECT_TRUE(Contains(r.err, "--shard must be I/N with 0 <= I < N")) << shard;
  }
  Json cfg = SmallSweep(db);
  cfg["methods"][1]["knobs"]["gamma"] = "4-1+1";
  const std::string bad = WriteJson(dir, "bad_range.json", cfg);
  ProcResult r = RunSpecbed({"sweep", bad}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, bad + ": methods[1].knobs.gamma: bad range \"4-1+1\""));
  EXPECT_FALSE(fs::exists(db));

  // merge: a missing or non-SpecBed input fails naming it, before the output is created.
  cli_test::WriteFile(dir + "/junk.db", "this is not a database, only some text of a good length");
  for (const std::string& in : {dir + "/missing.db", dir + "/junk.db"}) {
    r = RunSpecbed({"merge", dir + "/out.db", in}, dir);
    EXPECT_EQ(r.exit_code, 1) << Describe(r);
    EXPECT_TRUE(Contains(r.err, in));
    EXPECT_FALSE(fs::exists(dir + "/out.db"));
  }
  r = RunSpecbed({"merge", dir + "/out.db"}, dir);
  EXPECT_GE(r.exit_code, 100) << "a missing input is a usage error\n" << Describe(r);
}

// --device and --dtype override the config's (both are part of a case's key, so the keys change;
// a bad device is an error naming the flag); a target of over 1 B parameters (an HF config.json of
// a 7 B Llama shape, no weights: read without loading) warns when about to run on the CPU (run,
// and generate before it loads), and not with --device cuda.
TEST(CliSweep, DeviceAndDtypeOverrideTheConfigAndLargeCpuTargetsWarn) {
  const std::string dir = TestDir();
  const std::string sweep = WriteJson(dir, "small.json", SmallSweep(dir + "/small.db"));
  const std::set<std::string> cpu = DryRunKeys(dir, sweep);
  ASSERT_EQ(cpu.size(), 6u);
  EXPECT_EQ(DryRunKeys(dir, sweep, {"--device", "cpu"}), cpu);
  for (const std::vector<std::string>& flags :
       std::vector<std::vector<std::string>>{{"--device", "cuda:1"}, {"--dtype", "bfloat16"}}) {
    const std::set<std::string> other = DryRunKeys(dir, sweep, flags);
    EXPECT_EQ(other.size(), 6u) << flags[0];
    for (const std::string& key : other) EXPECT_EQ(cpu.count(key), 0u) << flags[0];
  }
  ProcResult r = RunSpecbed({"run", sweep, "--device", "gpu", "--dry-run"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "--device must be cpu, cuda or cuda:N, got 'gpu'")) << r.err;
  r = RunSpecbed({"sweep", sweep, "--dtype", "float64", "--dry-run"}, dir);
  EXPECT_GE(r.exit_code, 100) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "--dtype")) << r.err;

  fs::create_directories(dir + "/big");
  WriteJson(dir + "/big", "config.json",
            {{"architectures", {"LlamaForCausalLM"}},
             {"model_type", "llama"},
             {"hidden_size", 4096},
             {"intermediate_size", 11008},
             {"num_attention_heads", 32},
             {"num_key_value_heads", 32},
             {"num_hidden_layers", 32},
             {"vocab_size", 32000},
             {"max_position_embeddings", 4096},
             {"rms_norm_eps", 1e-5},
             {"tie_word_embeddings", false}});
  Json cfg = SmallSweep(dir + "/big.db");
  cfg["targets"] = {dir + "/big"};
  cfg["methods"] = {"ar"};
  const std::string big = WriteJson(dir, "big.json", cfg);
  r = RunSpecbed({"run", big, "--dry-run"}, dir);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(Contains(
      r.err, "warning: target " + dir + "/big has 6.74 B parameters and would run on the CPU"))
      << r.err;
  r = RunSpecbed({"run", big, "--dry-run", "--device", "cuda"}, dir);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_FALSE(Contains(r.err, "would run on the CPU")) << r.err;
  // generate warns before it loads (here the load then fails: the checkpoint has no weights).
  r = RunSpecbed({"generate", "--target", dir + "/big", "-n", "1"}, dir);
  EXPECT_NE(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "specbed generate: warning: target " + dir + "/big has 6.74 B"))
      << r.err;
}

// A paper's sweep on the user's own pair: -t replaces the config's targets (and drops the exclude
// entries written for them), --knob sets a knob in every method that has it (a list sweeps it);
// a knob no method has, or a pair without "=", is an error naming it.
TEST(CliSweep, TargetAndKnobOverrideThePaperConfig) {
  const std::string dir = TestDir();
  const std::string paper = std::string(SPECBED_SOURCE_DIR) + "/configs/papers/eagle3.json";
  const auto lines = [](const std::string& out) {
    std::vector<std::string> v;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);) v.push_back(line);
    return v;
  };
  ProcResult r =
      RunSpecbed({"sweep", paper, "-t", "stories260K", "--knob", "head=my/head", "--dry-run"}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  std::vector<std::string> cases = lines(r.out);
  EXPECT_EQ(cases.size(), 20u) << r.out;  // (ar + eagle3) x 5 datasets x 2 temperatures
  int eagle3 = 0;
  for (const std::string& c : cases) {
    EXPECT_TRUE(Contains(c, "stories260K")) << c;
    EXPECT_FALSE(Contains(c, "checkpoints/")) << c;
    if (Contains(c, "eagle3")) {
      ++eagle3;
      EXPECT_TRUE(Contains(c, "my/head")) << c;
    }
  }
  EXPECT_EQ(eagle3, 10);
  EXPECT_FALSE(Contains(r.err, "matched no case")) << r.err;
  r = RunSpecbed({"run", paper, "--target", "stories260K", "--knob", "head=my/head", "--knob",
                  "depth=[3,5]", "--dry-run"},
                 dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(lines(r.out).size(), 30u) << r.out;  // depth swept: 10 AR + 2 x 10 EAGLE-3
  r = RunSpecbed({"sweep", paper, "--knob", "gamma=4", "--dry-run"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "--knob gamma: no method of")) << r.err;
  EXPECT_TRUE(Contains(r.err, "ar, eagle3")) << r.err;
  r = RunSpecbed({"sweep", paper, "--knob", "depth", "--dry-run"}, dir);
  EXPECT_EQ(r.exit_code, 1) << Describe(r);
  EXPECT_TRUE(Contains(r.err, "--knob expects KEY=VALUE")) << r.err;
}

// A config's relative input paths resolve against the config file's folder (the dataset, a target
// checkpoint with its tokenizer beside it, the paper reference), then the SpecBed home (the DFlash
// and JetSpec heads under models/), run from another working directory; exclude matchers naming a
// relative target or drafter path resolve the same way, so they still match; the report, run from
// a third directory, finds the paper reference; the default output (results/run.db, relative to
// the working directory) gets its folder created.
TEST(CliSweep, ConfigRelativeInputPathsFromAnotherDirectory) {
  const std::string dir = TestDir();
  const std::string src = SPECBED_SOURCE_DIR;
  for (const char* sub :
       {"/configs/data", "/configs/model", "/configs/ref", "/elsewhere", "/third"})
    fs::create_directories(dir + sub);
  fs::copy_file(src + "/datasets/data/stories/prompts.jsonl",
                dir + "/configs/data/my_prompts.jsonl");
  // A llama2.c checkpoint given by path: its tokenizer is the tokenizer.bin beside it.
  fs::copy_file(src + "/models/stories260K/stories260K.bin",
                dir + "/configs/model/stories260K.bin");
  fs::copy_file(src + "/models/stories260K/tok512.bin", dir + "/configs/model/tokenizer.bin");
  cli_test::WriteFile(
      dir + "/configs/ref/paper.json",
      Json(
          {{"paper", "PathsTestPaper"},
           {"table", "Table 9"},
           {"rows",
            {{{"method", "dflash"}, {"dataset", "my_prompts"}, {"temperature", 0}, {"tau", 2.0}}}}})
          .dump());
  const Json config = {
      {"name", "paths-test"},
      {"targets", {"stories260K", "model/stories260K.bin"}},
      {"methods",
       {"ar",
        {{"name", "dflash"},
         {"knobs", {{"drafter", {"models/stories260K/dflash", "models/stories260K/jetspec"}}}}}}},
      {"datasets", {{{"name", "data/my_prompts.jsonl"}, {"limit", 1}}}},
      {"temperatures", {0}},
      {"max_new_tokens", 4},
      {"warmup", 0},
      {"exclude",
       {{{"target", "model/stories260K.bin"}, {"method", "dflash"}},
        {{"method", "dflash"}, {"knobs", {{"drafter", "models/stories260K/jetspec"}}}}}},
      {"paper", {{"reference", "ref/paper.json"}, {"table", "Table 9"}}}};
  WriteJson(dir + "/configs", "paths.json", config);
  // None of the paths exists from the working directory: before, each failed ("does not exist").
  for (const char* p : {"data/my_prompts.jsonl", "model/stories260K.bin", "ref/paper.json",
                        "models/stories260K/dflash"}) {
    ASSERT_FALSE(fs::exists(dir + "/elsewhere/" + p)) << p;
  }
  // RunSpecbed starts specbed in the source tree; these must start elsewhere.
  auto run_in = [&](const std::string& cwd, const std::string& args, std::string* err) {
    const std::string err_file = dir + "/stderr.txt";
    const int status = std::system(("cd '" + cwd + "' && '" + std::string(SPECBED_BIN) + "' " +
                                    args + " > /dev/null 2> '" + err_file + "'")
                                       .c_str());
    *err = cli_test::ReadAll(err_file);
    return status;
  };
  std::string err;
  ASSERT_EQ(run_in(dir + "/elsewhere", "run ../configs/paths.json --quiet", &err), 0) << err;
  const std::string db = dir + "/elsewhere/results/run.db";
  ASSERT_TRUE(fs::exists(db)) << err;
  const auto cases = OpenReadOnly(db)->ListCases();
  // AR on both targets, DFlash (its own head) on stories260K only: the two exclude matchers,
  // written with the same relative paths, matched the resolved values.
  ASSERT_EQ(cases.size(), 3u) << err;
  int on_path_target = 0;
  for (const auto& c : cases) {
    EXPECT_NE(c.record.dataset.find("configs/data/my_prompts.jsonl"), std::string::npos)
        << c.record.dataset;
    EXPECT_EQ(c.n_samples, 1);
    if (c.record.target.find("configs/model/stories260K.bin") != std::string::npos) {
      ++on_path_target;
      EXPECT_EQ(c.record.method, "ar");
    }
    if (c.record.method == "dflash") {
      EXPECT_NE(c.record.method_knobs_json.find(src.substr(1) + "/models/stories260K/dflash"),
                std::string::npos)
          << c.record.method_knobs_json;
    }
    // The paper reference is stored absolute (the report reads it from anywhere).
    const Json stored = Json::parse(c.record.config_json);
    ASSERT_TRUE(stored.contains("paper")) << c.record.config_json;
    const std::string ref = stored["paper"]["reference"].get<std::string>();
    EXPECT_TRUE(fs::path(ref).is_absolute()) << ref;
    EXPECT_TRUE(fs::equivalent(ref, dir + "/configs/ref/paper.json")) << ref;
  }
  EXPECT_EQ(on_path_target, 1);
  // The report from a third directory loads the reference (no warning) and shows its table.
  ASSERT_EQ(run_in(dir + "/third", "report ../elsewhere/results/run.db -o rep", &err), 0) << err;
  EXPECT_FALSE(cli_test::Contains(err, "could not be loaded")) << err;
  EXPECT_TRUE(
      cli_test::Contains(cli_test::ReadAll(dir + "/third/rep/index.html"), "PathsTestPaper"));
  // A path that exists nowhere still fails naming it.
  Json bad = config;
  bad["datasets"] = {{{"name", "data/missing.jsonl"}, {"limit", 1}}};
  WriteJson(dir + "/configs", "bad.json", bad);
  EXPECT_NE(run_in(dir + "/elsewhere", "run ../configs/bad.json --quiet -o x.db", &err), 0);
  EXPECT_TRUE(cli_test::Contains(err, "data/missing.jsonl"));
}

TEST(CliSlurm, PrintsAJobArrayScriptAndTheMergeCommand) {
  const std::string dir = TestDir();
  const std::string sweep = WriteJson(dir, "s.json", SmallSweep("results/s.db"));
  const ProcResult r =
      RunSpecbed({"slurm", sweep, "--shards", "3", "--partition", "gpu", "--time", "02:30:00",
                  "--cpus", "8", "--gpus", "1", "--output", dir + "/shards"},
                 dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const std::string& s = r.out;
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u) << s;
  EXPECT_TRUE(Contains(s, "(6 cases) as a Slurm job array of 3 shards"));
  for (const char* line :
       {"#SBATCH --array=0-2\n", "#SBATCH --partition=gpu\n", "#SBATCH --time=02:30:00\n",
        "#SBATCH --cpus-per-task=8\n", "#SBATCH --gres=gpu:1\n"}) {
    EXPECT_TRUE(Contains(s, line));
  }
  EXPECT_TRUE(Contains(s, " sweep " + sweep + " --shard \"${SLURM_ARRAY_TASK_ID}/3\" --output " +
                              dir + "/shards/\"shard_${SLURM_ARRAY_TASK_ID}.db\""));
  EXPECT_TRUE(Contains(s, "#   "));
  EXPECT_TRUE(Contains(s, " merge results/s.db " + dir + "/shards/shard_*.db\n"));
  // The log folder exists before submission (Slurm opens the logs before a task runs; it failed
  // every task with JobLaunchFailure when the script created the folder) and the path is absolute.
  EXPECT_TRUE(fs::is_directory(dir + "/shards"));
  EXPECT_TRUE(Contains(
      s, "#SBATCH --output=" + fs::absolute(dir + "/shards").string() + "/slurm_%A_%a.log\n"))
      << s;
  // Every #SBATCH line comes before the first command (sbatch stops reading them there).
  EXPECT_LT(s.rfind("#SBATCH"), s.find("\nset -euo pipefail"));

  ProcResult bad = RunSpecbed({"slurm", sweep, "--shards", "2", "--time", "2h"}, dir);
  EXPECT_EQ(bad.exit_code, 1) << Describe(bad);
  EXPECT_TRUE(Contains(bad.err, "--time must be HH:MM:SS"));
  bad = RunSpecbed({"slurm", sweep, "--shards", "0"}, dir);
  EXPECT_GE(bad.exit_code, 100) << Describe(bad);
  Json cfg = SmallSweep("results/s.db");
  cfg["methods"] = {"arr"};
  bad = RunSpecbed({"slurm", WriteJson(dir, "bad.json", cfg), "--shards", "2"}, dir);
  EXPECT_EQ(bad.exit_code, 1) << Describe(bad);
  EXPECT_TRUE(Contains(bad.err, "unknown method 'arr'"));
}

// sbatch splits #SBATCH lines at whitespace, strips quotes and backslashes and ends them at an
// unquoted '#'; '%' starts a symbol in a log file pattern. A sweep name and a shard folder with
// those characters are quoted and escaped (scripts/slurm_e2e submits the same to a real Slurm).
TEST(CliSlurm, QuotesSbatchValuesAndEscapesPercentInTheLogPath) {
  const std::string dir = TestDir();
  Json cfg = SmallSweep("results/s.db");
  cfg["name"] = "a b #1 'q' \"d\"";
  const std::string sweep = WriteJson(dir, "s.json", cfg);
  const std::string shards = dir + "/shard logs #1 100%";
  const ProcResult r = RunSpecbed({"slurm", sweep, "--shards", "2", "-o", shards}, dir);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(Contains(r.out, "#SBATCH --job-name=\"specbed-a b #1 'q' \\\"d\\\"\"\n")) << r.out;
  EXPECT_TRUE(Contains(r.out, "#SBATCH --output=\"" + fs::absolute(dir).string() +
                                  "/shard logs #1 100%%/slurm_%A_%a.log\"\n"))
      << r.out;
  EXPECT_TRUE(fs::is_directory(shards));
  // The shell lines quote the folder for bash (single quotes), not for sbatch.
  EXPECT_TRUE(Contains(r.out, "mkdir -p '" + shards + "'\n")) << r.out;
  // A plain value stays bare.
  const ProcResult plain =
      RunSpecbed({"slurm", WriteJson(dir, "p.json", SmallSweep("results/s.db")), "--shards", "2",
                  "-o", dir + "/plain"},
                 dir);
  ASSERT_EQ(plain.exit_code, 0) << Describe(plain);
  EXPECT_TRUE(Contains(plain.out, "#SBATCH --job-name=specbed-sweep-test\n")) << plain.out;
  // A backslash would switch Slurm's %A/%a expansion off (every task one log): refused by name.
  const ProcResult bad = RunSpecbed({"slurm", sweep, "--shards", "2", "-o", dir + "/a\\b"}, dir);
  EXPECT_EQ(bad.exit_code, 1) << Describe(bad);
  EXPECT_TRUE(Contains(bad.err, "-o/--output must not contain a backslash")) << bad.err;
  EXPECT_FALSE(fs::exists(dir + "/a\\b"));
}

}  // namespace
}  // namespace specbed
