// `specbed train draft-lm`: SpS's draft LM distilled from a target (methods/common/train/
// draft_lm_trainer.h) behind its flags. Checked by: tests/train/train_cli_test.cpp.
#include "methods/common/train/draft_lm_trainer.h"
#include "methods/common/train/train_flags.h"

namespace specbed::cli {
namespace {

void RunTrainDraftLm(const TrainerFlags<DraftLmTrainConfig>& o) {
  TrainDevice(o.config.optim, "train draft-lm");  // before the target or the data load
  KeepLargeBlocksInHeap();
  const DraftLmTrainResult r = TrainDraftLm(o.config, o.out, o.run);
  if (!r.finished) {
    PrintStoppedAtStep(r.step, o.config.optim.steps);
    return;
  }
  std::printf(
      "%s: %lld steps, final train KL %.4f; held-out KL %.4f, top-1 agreement %.4f, expected "
      "acceptance (T=1) %.4f; train %.1f s\n",
      o.out.c_str(), static_cast<long long>(r.step), r.final_loss, r.eval_kl, r.top1_agreement,
      r.expected_acceptance, r.train_seconds);
}

void AddTrainDraftLm(CLI::App* train) {
  auto [cmd, o] =
      AddSubcommand(train, "draft-lm", RunTrainDraftLm,
                    "Distil a small llama2.c-shape draft LM from a target (forward KL on sequences "
                    "sampled from the target) -> OUT/config.json + model.safetensors; resumable");
  DraftLmTrainConfig& c = o->config;
  AddOutputFlag(cmd, o->out, "Output directory (checkpoint, log, work/ cache)");
  AddTargetFlags(cmd, c.target, c.dtype);
  AddShownFlags(cmd,
                {{"--layers", c.layers, "Draft layers"}, {"--dim", c.dim, "Draft hidden size"}});
  OldSpellings(
      cmd, cmd->add_option("--heads", c.n_heads, "Draft attention heads")->capture_default_str(),
      {"--n-heads"});
  OldSpellings(cmd,
               cmd->add_option("--kv-heads", c.n_kv_heads, "Draft KV heads (0 = --heads)")
                   ->capture_default_str(),
               {"--n-kv-heads"});
  AddShownFlags(cmd,
                {{"--hidden-dim", c.hidden_dim, "Draft SwiGLU width (0 = 8/3 dim, rounded to 16)"},
                 {"--max-seq-len", c.max_seq_len, "Draft context length (0 = the target's)"}});
  AddSampledDataFlags(cmd, c, "Held-out sequences for the final agreement figures");
  AddOptimFlags(cmd, c.optim, o->run);
}

}  // namespace

void AddSpsTrainCommands(CLI::App* train) {
  AddTrainDraftLm(train);
}

}  // namespace specbed::cli
