// `specbed blockpilot label|train`: BlockPilot's offline data and predictor training
// (methods/blockpilot/README.md). `label` decodes every prompt of a training prompt set once per
// candidate block size with a DFlash drafter and stores p(x), τ and throughput per candidate
// (resumable); `train` fits the block-size predictor on that file (resumable, shared training
// loop). Both print the oracle / fixed / trained-block figures at the end.
// Checked by: tests/cli/blockpilot_cli_test.cpp (label + train + run end to end, exit codes).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "harness/cli/cli_flags.h"
#include "harness/cli/commands.h"
#include "methods/blockpilot/blockpilot_labels.h"
#include "methods/blockpilot/blockpilot_oracle.h"
#include "methods/blockpilot/blockpilot_trainer.h"

namespace specbed::cli {
namespace {

using ojson = nlohmann::ordered_json;

struct LabelOptions {
  BlockPilotLabelConfig config;
  BlockPilotLabelRunOptions run;
  std::string out;
};

using TrainOptions = TrainerFlags<BlockPilotTrainConfig>;

// One line per choice: "  name  b=…  tau …  tok/s …".
void PrintChoice(const char* name, const ojson& f) {
  std::printf("  %-24s", name);
  if (f.contains("block_size")) {
    std::printf(" b=%-3lld", static_cast<long long>(f["block_size"].get<int64_t>()));
  } else {
    std::printf("      ");
  }
  std::printf("  mean tau %6.3f  decode %8.1f tok/s\n", f["mean_tau"].get<double>(),
              f["tokens_per_s"].get<double>());
}

void PrintFigures(const std::string& title, const ojson& j) {
  std::printf("%s (%lld prompts; labels: argmax %s):\n", title.c_str(),
              static_cast<long long>(j["prompts"].get<int64_t>()),
              j["criterion"].get<std::string>().c_str());
  std::printf("  label histogram %s\n", j["label_histogram"].dump().c_str());
  if (j.contains("predictor")) {
    const ojson& p = j["predictor"];
    std::printf("  predictor accuracy %.3f (tau labels %.3f, throughput labels %.3f)",
                p["accuracy"].get<double>(), p["accuracy_tau_labels"].get<double>(),
                p["accuracy_throughput_labels"].get<double>());
    if (j.contains("majority_accuracy")) {
      std::printf("; majority b=%lld %.3f",
                  static_cast<long long>(j["majority_block_size"].get<int64_t>()),
                  j["majority_accuracy"].get<double>());
    }
    std::printf("\n  predicted histogram %s\n", p["histogram"].dump().c_str());
    PrintChoice("predictor", p);
  }
  PrintChoice("oracle (best tau)", j["oracle_tau"]);
  PrintChoice("oracle (best tok/s)", j["oracle_throughput"]);
  PrintChoice("best fixed by tau", j["best_fixed_tau"]);
  PrintChoice("best fixed by tok/s", j["best_fixed_throughput"]);
  if (j.contains("trained_block_size")) PrintChoice("trained block size", j["trained_block_size"]);
}

void RunLabel(const LabelOptions& o) {
  const BlockPilotLabelResult r = LabelBlockPilot(o.config, o.out, o.run);
  const BlockPilotLabels& l = r.labels;
  if (!r.finished) {
    PrintStopped("after " + std::to_string(l.provenance.value("prompts_done", int64_t{0})) +
                 " prompts (" + std::to_string(l.size()) + " rows)");
    return;
  }
  const ojson& p = l.provenance;
  std::printf(
      "blockpilot label: %lld prompts labelled (%lld skipped: stopped at the first token), "
      "candidates %s around trained block size %lld, %lld output mismatches across block "
      "sizes, %.1f s -> %s\n",
      static_cast<long long>(l.size()),
      static_cast<long long>(p.value("skipped_prompts", int64_t{0})),
      ojson(l.candidates).dump().c_str(), static_cast<long long>(l.trained_block_size),
      static_cast<long long>(p.value("output_mismatches", int64_t{0})),
      p.value("wall_seconds", 0.0), o.out.c_str());
  std::vector<int64_t> rows(l.size());
  for (int64_t i = 0; i < l.size(); ++i) rows[i] = i;
  PrintFigures("all prompts", BlockPilotFigures(l, rows, {}, "tau"));
}

void RunTrain(const TrainOptions& o) {
  TrainDevice(o.config.optim, "blockpilot train");  // before the target or the labels load
  const BlockPilotTrainResult r = TrainBlockPilot(o.config, o.out, o.run);
  if (ReportIfStopped(r.loop, o.config.optim.steps)) return;
  std::printf(
      "%s: %lld steps, final train loss %.4f, held-out loss %.4f; train accuracy %.3f; %lld "
      "train / %lld held-out prompts; train %.1f s\n",
      o.out.c_str(), static_cast<long long>(r.loop.step), r.loop.final_loss,
      r.evaluation["heldout_loss"].get<double>(), r.evaluation["train_accuracy"].get<double>(),
      static_cast<long long>(r.n_train), static_cast<long long>(r.n_eval), r.loop.train_seconds);
  PrintFigures("held-out prompts", r.evaluation["heldout"]);
}

void AddLabel(CLI::App* parent) {
  auto [cmd, o] =
      AddSubcommand(parent, "label", RunLabel,
                    "Label a TRAINING prompt set: per prompt the target's last-position logits "
                    "and, per candidate block size B-radius..B+radius, tau and decode throughput "
                    "of a greedy DFlash decode -> one safetensors file; resumable");
  BlockPilotLabelConfig& c = o->config;
  AddOutputFlag(cmd, o->out, "Output label file (.safetensors); its directory is created");
  cmd->add_option("--drafter", c.drafter, "DFlash checkpoint directory")->required();
  AddTargetFlags(cmd, c.target, c.dtype);
  AddShownFlags(cmd, {{"--prompts", c.prompts,
                       "'bos' (prompts sampled from the target after BOS), a dataset name or a "
                       ".jsonl/.json prompt file; never the evaluation prompts"},
                      {"--n-prompts", c.n_prompts, "bos mode: number of prompts"},
                      {"--prompt-tokens", c.prompt_tokens,
                       "bos mode: tokens sampled after BOS per prompt (T = 1)"}});
  AddDatasetFilterFlags(cmd, c.categories, c.limit);
  AddShownFlags(cmd, {{"--radius", c.radius, "Candidates B-radius..B+radius (those < 2 dropped)"},
                      {"-n,--max-new-tokens", c.max_new_tokens, "Tokens per decode (greedy)"},
                      {"--timing-repeats", c.timing_repeats,
                       "Timed decodes per prompt and candidate (throughput: the fastest)"},
                      {"--seed", c.seed, "Seed of the bos prompts"}});
  AddThreadsFlag(cmd, c.threads);
  AddPartialEveryFlag(cmd, o->run.partial_every_s);
  cmd->add_option("--stop-after", o->run.stop_after,
                  "Stop after this many prompts (progress kept in OUT.partial; for tests)")
      ->capture_default_str();
  AddQuietFlag(cmd, o->run.verbose);
}

void AddTrain(CLI::App* parent) {
  auto [cmd, o] =
      AddSubcommand(parent, "train", RunTrain,
                    "Train the block-size predictor (MLP over p(x), cross-entropy on the labels) "
                    "on a label file -> OUT/config.json + model.safetensors; the last --holdout "
                    "share of prompts is held out; resumable");
  BlockPilotTrainConfig& c = o->config;
  c.optim = DefaultBlockPilotOptim();
  cmd->add_option("--labels", c.labels, "Label file from `specbed blockpilot label`")->required();
  AddOutputFlag(cmd, o->out, "Output directory (predictor, train_log.db, work/)");
  cmd->add_option("--criterion", c.criterion, "Label: argmax tau or argmax throughput")
      ->check(CLI::IsMember({"tau", "throughput"}))
      ->capture_default_str();
  cmd->add_option("--input", c.input, "Predictor input: probs, logits or log_probs")
      ->check(CLI::IsMember({"probs", "logits", "log_probs"}))
      ->capture_default_str();
  AddShownFlags(cmd, {{"--hidden", c.hidden, "Hidden width"},
                      {"--layers", c.layers, "Linear layers (1 = linear classifier)"},
                      {"--holdout", c.holdout, "Share of prompts held out (the last ones)"}});
  AddOptimFlags(cmd, c.optim, o->run);
}

struct OracleOptions {
  std::string db;
  std::vector<int64_t> block_sizes;
  bool json = false;
};

void RunOracle(const OracleOptions& o) {
  const ojson figures = BlockPilotOracleFigures(o.db, o.block_sizes);
  if (o.json) {
    std::printf("%s\n", figures.dump(2).c_str());
    return;
  }
  if (figures.empty()) {
    std::printf("%s: no dflash cases with an explicit block_size\n", o.db.c_str());
    return;
  }
  for (const ojson& e : figures) {
    std::printf("%s / %s, T=%g, seed %lld, %lld new tokens, drafter %s (%lld prompts):\n",
                e["target"].get<std::string>().c_str(), e["dataset"].get<std::string>().c_str(),
                e["temperature"].get<double>(), static_cast<long long>(e["seed"].get<uint64_t>()),
                static_cast<long long>(e["max_new_tokens"].get<int64_t>()),
                e["drafter"].get<std::string>().c_str(),
                static_cast<long long>(e["prompts"].get<int64_t>()));
    for (const ojson& f : e["fixed"]) PrintChoice("fixed", f);
    PrintChoice("best fixed by tau", e["best_fixed_tau"]);
    PrintChoice("best fixed by tok/s", e["best_fixed_throughput"]);
    PrintChoice("oracle (best tau)", e["oracle_tau"]);
    PrintChoice("oracle (fastest)", e["oracle_throughput"]);
    for (const ojson& bp : e["blockpilot"]) PrintChoice("dflash+blockpilot", bp);
  }
}

void AddOracle(CLI::App* parent) {
  auto [cmd, o] = AddSubcommand(
      parent, "oracle", RunOracle,
      "BlockPilot vs fixed block sizes vs the per-prompt oracle on a results database: the dflash "
      "cases at explicit block sizes and the dflash+blockpilot cases of the same drafter and "
      "workload, over the prompts all of them answered");
  cmd->add_option("db", o->db, "Results database (e.g. results/block_drafters_stories.db)")
      ->required();
  cmd->add_option("--block-sizes", o->block_sizes,
                  "Only these fixed block sizes (e.g. the predictor's candidates 14 15 16 17 18); "
                  "default: every explicit block_size in the database");
  cmd->add_flag("--json", o->json, "Print the figures as JSON");
}

}  // namespace

void AddBlockpilotCommand(CLI::App& app) {
  CLI::App* bp = app.add_subcommand(
      "blockpilot",
      "BlockPilot: label a training prompt set, train the block-size predictor, compare it with "
      "fixed block sizes and the per-prompt oracle on a results database");
  bp->require_subcommand(1);
  AddLabel(bp);
  AddTrain(bp);
  AddOracle(bp);
}

}  // namespace specbed::cli
