// `specbed regen`: drafter training data: the target's own responses to a prompt set (or to BOS)
// in one safetensors file with provenance (methods/common/train/README.md, "Training data:
// specbed regen"). Resumable: an interrupted run continues from OUT.partial when rerun.
// Checked by: tests/train/regen_test.cpp (RegenCliTest: success summary, unknown dataset and
// bad knob exit codes).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "harness/cli/cli_flags.h"
#include "harness/cli/commands.h"
#include "methods/common/train/regen.h"

namespace specbed::cli {
namespace {

struct RegenOptions {
  RegenConfig config;
  std::string out;
  double partial_every_s = 30;
  bool no_stop_at_eos = false;
  bool verbose = true;
};

void RunRegen(const RegenOptions& o) {
  RegenRunOptions run;
  run.verbose = o.verbose;
  run.partial_every_s = o.partial_every_s;
  const RegenRunResult r = RegenerateToFile(o.config, o.out, run);
  const RegenData& d = r.data;
  const auto& p = d.provenance;
  std::printf(
      "regen: %lld sequences, %lld tokens (%lld response), mean response %.1f tokens, %.1f s, "
      "%.0f tokens/s%s -> %s\n",
      static_cast<long long>(d.size()), static_cast<long long>(d.total_tokens()),
      static_cast<long long>(p.value("response_tokens", int64_t{0})),
      p.value("mean_response_length", 0.0), r.seconds,
      r.seconds > 0 ? r.new_tokens / r.seconds : 0.0,
      r.resumed > 0 ? (" (" + std::to_string(r.resumed) + " resumed)").c_str() : "", o.out.c_str());
}

}  // namespace

void AddRegenCommand(CLI::App& app) {
  auto o = std::make_shared<RegenOptions>();
  o->config.n_sequences = 512;  // the CLI default for --prompts bos
  RegenConfig& c = o->config;
  CLI::App* cmd = app.add_subcommand(
      "regen",
      "Drafter training data: sample the target's responses to a prompt set (or to BOS) -> one "
      "safetensors file (tokens, offsets, prompt_lengths + provenance); resumable");
  AddOutputFlag(cmd, o->out, "Output file, e.g. data/regen/stories.regen.safetensors");
  AddTargetFlags(cmd, c.target, c.dtype);
  AddShownFlags(cmd, {{"--device", c.device, "Target device: cpu, cuda or cuda:N"},
                      {"--prompts", c.prompts,
                       "'bos' (unconditional), a dataset name (specbed list datasets) or a "
                       ".jsonl/.json prompt file"}});
  AddDatasetFilterFlags(cmd, c.categories, c.limit);
  AddShownFlags(cmd,
                {{"--n-per-prompt", c.n_per_prompt, "Samples per dataset prompt"},
                 {"--n-sequences", c.n_sequences,
                  "Sequences to generate with --prompts bos (an error with dataset prompts)"},
                 {"-n,--max-new-tokens", c.max_new_tokens, "Response length cap"},
                 {"--temperature", c.sampling.temperature, "Sampling temperature (0 = greedy)"},
                 {"--top-k", c.sampling.top_k, "Top-k (0 = off)"},
                 {"--top-p", c.sampling.top_p, "Top-p / nucleus mass (1 = off)"},
                 {"--seed", c.seed, "Seed (each sequence's own seed derives from it)"}});
  cmd->add_flag("--no-stop-at-eos", o->no_stop_at_eos,
                "Always generate --max-new-tokens tokens (default: stop at EOS, kept in the data)");
  AddThreadsFlag(cmd, c.threads);
  AddPartialEveryFlag(cmd, o->partial_every_s);
  AddQuietFlag(cmd, o->verbose);
  cmd->callback([o, cmd] {
    // --n-sequences defaults to 512 for bos prompts only; with a dataset it must stay unset.
    if (o->config.prompts != "bos" && cmd->count("--n-sequences") == 0) o->config.n_sequences = 0;
    o->config.stop_at_eos = !o->no_stop_at_eos;
    RunRegen(*o);
  });
}

}  // namespace specbed::cli
