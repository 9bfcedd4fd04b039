// `specbed sweep FILE [--shard i/N] [--output DB] [-t TARGET] [--knob K=V] [--device D] [--dtype T]
// [--dry-run] [--limit N]`
// expands a sweep file (harness/runner/sweep.h) into cases, prints the count and the notes on
// skipped combinations, and runs this shard's cases into SQLite like `specbed run` (resumable:
// completed case keys are skipped), with a progress line (cases done/total, ETA), and ends by
// printing the database's summary table (specbed summary). RunSweepFile and the flags are shared
// with `run`; -t/--target, --knob, --device and --dtype override the config's, and a target over
// 1 B parameters about to run on the CPU warns.
// Checked by: tests/cli/sweep_cli_test.cpp.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <set>

#include "base/error.h"
#include "base/json_read.h"
#include "base/names.h"
#include "harness/cli/cli_flags.h"
#include "harness/cli/commands.h"
#include "harness/runner/environment.h"
#include "harness/runner/runner.h"
#include "harness/runner/sweep.h"
#include "methods/method_registry.h"
#include "reports/summary.h"
#include "results/store.h"

namespace specbed::cli {
namespace {

// "i/N" -> (i, N) with 0 <= i < N.
void ParseShard(const std::string& text, int64_t* index, int64_t* count) {
  const size_t slash = text.find('/');
  bool ok = slash != std::string::npos && slash > 0 && slash + 1 < text.size();
  if (ok) {
    try {
      size_t used_i = 0, used_n = 0;
      *index = std::stoll(text.substr(0, slash), &used_i);
      *count = std::stoll(text.substr(slash + 1), &used_n);
      ok = used_i == slash && used_n == text.size() - slash - 1;
    } catch (const std::exception&) {
      ok = false;
    }
  }
  SPECBED_CHECK(ok && *count >= 1 && *index >= 0 && *index < *count,
                "--shard must be I/N with 0 <= I < N (e.g. 0/4), got '", text, "'");
}

// The large-target warning once per target of the CPU cases.
void WarnLargeTargetsOnCpu(const std::string& command, const std::vector<CaseConfig>& cases) {
  std::set<std::string> seen;
  for (const CaseConfig& c : cases) {
    if (seen.insert(c.target + "\n" + c.device).second) {
      WarnLargeTargetOnCpu(command, c.target, c.device);
    }
  }
}

}  // namespace

void RunSweepFile(const SweepFileOptions& o) {
  int64_t shard_index = 0, shard_count = 1;
  if (!o.shard.empty()) ParseShard(o.shard, &shard_index, &shard_count);
  SweepOverrides overrides;
  if (!o.target.empty()) overrides.targets = {o.target};
  overrides.knobs = KnobPairsFromFlags(o.knobs, "specbed " + o.command);
  SweepConfig config = LoadSweepConfig(o.config, overrides);
  if (o.target.empty() && !ReadJsonFile(o.config).contains("targets")) {
    std::fprintf(stderr,
                 "specbed %s: warning: %s names no \"targets\": running on the default target %s, "
                 "which is too small for speculation to pay (its speedups say nothing about the "
                 "methods); add \"targets\": [\"stories260K-twin\"] for the cost twin\n",
                 o.command.c_str(), o.config.c_str(), Join(config.base.targets, ", ").c_str());
  }
  if (!o.output.empty()) config.base.output = o.output;
  if (!o.device.empty()) {
    SPECBED_CHECK(IsDeviceName(o.device), "specbed ", o.command,
                  ": --device must be cpu, cuda or cuda:N, got '", o.device, "'");
    config.base.device = o.device;
  }
  if (!o.dtype.empty()) config.base.dtype = o.dtype;
  if (o.limit > 0) {
    for (auto& d : config.base.datasets) d.limit = o.limit;
  }
  if (o.max_new_tokens > 0) config.base.max_new_tokens = o.max_new_tokens;
  MethodRegistry methods;
  RegisterBuiltinMethods(methods);
  const SweepExpansion expansion = ExpandSweep(config, methods);
  std::vector<CaseConfig> cases = ShardCases(expansion.cases, shard_index, shard_count);
  if (shard_count > 1) {
    std::fprintf(stderr, "specbed %s: %zu cases in shard %lld/%lld (%zu in the sweep)\n",
                 o.command.c_str(), cases.size(), static_cast<long long>(shard_index),
                 static_cast<long long>(shard_count), expansion.cases.size());
  } else if (o.command == "sweep" || !expansion.notes.empty()) {
    std::fprintf(stderr, "specbed %s: %zu cases\n", o.command.c_str(), cases.size());
  }
  for (const std::string& note : expansion.notes) {
    std::fprintf(stderr, "specbed %s: %s\n", o.command.c_str(), note.c_str());
  }
  WarnLargeTargetsOnCpu(o.command, cases);
  if (o.dry_run) {
    for (const CaseConfig& c : cases) std::printf("%s  %s\n", c.Key().c_str(), c.Label().c_str());
    return;
  }
  ValidateRunCases(cases);  // before the database exists: bad input leaves no file behind
  // The default output (results/run.db: no -o, no "output" in the config) gets its folder
  // created; an explicit output's folder must exist (a typo is not silently created).
  if (o.output.empty() && config.base.output == RunConfig().output) {
    const std::filesystem::path parent = std::filesystem::path(config.base.output).parent_path();
    std::error_code ec;
    if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  }
  auto store = ResultsStore::Open(config.base.output);
  RunnerOptions options;
  options.show_progress = !o.no_progress;
  options.run_info = CurrentEnvironment();
  options.run_info.repro_command = CommandLine();
  Runner runner(*store, options);
  nlohmann::json config_json = config.ToJson();
  if (shard_count > 1) config_json["shard"] = {{"index", shard_index}, {"count", shard_count}};
  const RunnerSummary s =
      runner.RunCases(std::move(cases), config.base.name, config.base.warmup, config_json);
  std::fprintf(stderr, "specbed %s: %lld cases (%lld run, %lld already complete) in %.1f s -> %s\n",
               o.command.c_str(), static_cast<long long>(s.cases_total),
               static_cast<long long>(s.cases_run), static_cast<long long>(s.cases_skipped),
               s.wall_s, config.base.output.c_str());
  if (!o.no_summary) WriteToStdout(FormatSummaryTable(BuildSummary(config.base.output)));
}

void AddSweepFileFlags(CLI::App* cmd, SweepFileOptions* o) {
  cmd->add_option("config", o->config, "Run or sweep config file (JSON; see configs/README.md)")
      ->required();
  cmd->add_option("-o,--output", o->output, "Results database (overrides the config's \"output\")");
  cmd->add_option(
      "-t,--target", o->target,
      "Run every case on this target (a name or a checkpoint directory) instead of "
      "the config's \"targets\" (its exclude/only entries naming a target are dropped)");
  cmd->add_option("--knob", o->knobs,
                  "KEY=VALUE set in every method of the config that has knob KEY (repeatable; "
                  "e.g. --knob head=DIR); VALUE is JSON when it parses (a list sweeps it)");
  cmd->add_option("--device", o->device,
                  "Where every case runs: cpu, cuda or cuda:N (overrides the config's \"device\")");
  cmd->add_option("--dtype", o->dtype,
                  "Weights/activations dtype: float32, bfloat16 or float16 (overrides the "
                  "config's \"dtype\")")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  cmd->add_option("--limit", o->limit, "Use only the first N prompts of every dataset")
      ->check(CLI::PositiveNumber);
  cmd->add_option("-n,--max-new-tokens", o->max_new_tokens, "Override max_new_tokens")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--dry-run", o->dry_run, "List the cases (key and label) and exit");
  cmd->add_flag("--no-summary", o->no_summary,
                "Do not print the summary table (specbed summary DB) at the end");
  OldSpellings(cmd, cmd->add_flag("-q,--quiet", o->no_progress, "Do not show progress on stderr"),
               {"--no-progress"});
}

void AddSweepCommand(CLI::App& app) {
  auto [cmd, o] =
      AddSubcommand(&app, "sweep", RunSweepFile,
                    "Run a sweep file (a run config with knob lists/ranges, repeats, batch_sizes, "
                    "exclude/only), optionally one shard of it, into SQLite (resumable)");
  o->command = "sweep";
  cmd->add_option("--shard", o->shard,
                  "Run only shard I of N (I/N, 0-based; a case goes to hash(case key) % N)");
  AddSweepFileFlags(cmd, o);
}

}  // namespace specbed::cli
