// `specbed train eagle3`: the EAGLE-3 head trainer (eagle3_trainer.h) behind its flags.
// Checked by: tests/train/train_cli_test.cpp.
#include "methods/common/train/train_flags.h"
#include "methods/eagle3/eagle3_trainer.h"

namespace specbed::cli {

void AddEagle3TrainCommands(CLI::App* train) {
  auto [cmd, o] = AddRegenHeadCommand<Eagle3TrainConfig>(
      train, "eagle3",
      ChainTauRun<Eagle3TrainConfig>(TrainEagle3, "train eagle3", "TTT loss", "step-0"),
      "Train an EAGLE-3 head with training-time test on a `specbed regen` file -> "
      "OUT/config.json + model.safetensors (published EAGLE-3 layout); resumable",
      DefaultEagle3Optim());
  Eagle3TrainConfig& c = o->config;
  AddAuxLayersFlag(cmd, c.aux_layers, "fused by the head");
  AddShownFlags(cmd,
                {{"--draft-vocab", c.draft_vocab,
                  "Draft vocabulary size (most frequent response tokens; clipped to the target's)"},
                 {"--ttt-steps", c.ttt_steps, "Unrolled training-time-test steps"},
                 {"--ttt-decay", c.ttt_decay, "Loss weight decay^k of TTT step k"}});
  cmd->add_option("--ttt-loss-norm", c.ttt_loss_norm,
                  "Per-step loss normalisation: counted (by the step's supervised positions) or "
                  "all (by every position of the batch, as the EAGLE-3 reference)")
      ->check(CLI::IsMember({"counted", "all"}))
      ->capture_default_str();
  AddRegenDataAndOptimFlags(cmd, *o);
}

}  // namespace specbed::cli
