// `specbed train medusa`: the Medusa-1 head trainer (medusa_trainer.h) behind its flags.
// Checked by: tests/methods/medusa_test.cpp, tests/train/train_cli_test.cpp.
#include "methods/common/train/train_flags.h"
#include "methods/medusa/medusa_trainer.h"

namespace specbed::cli {

void AddMedusaTrainCommands(CLI::App* train) {
  auto [cmd, o] = AddTrainerCommand<MedusaTrainConfig>(
      train, "medusa",
      ChainTauRun<MedusaTrainConfig>(TrainMedusa, "train medusa", "loss", "head-0"),
      "Train Medusa-1 heads (target frozen) on a `specbed regen` file -> OUT/config.json + "
      "medusa_lm_head.safetensors (published Medusa layout); resumable");
  MedusaTrainConfig& c = o->config;
  c.optim = DefaultMedusaOptim();
  cmd->add_option("-o,--output", o->out, "Output directory (checkpoint, train_log.db, work/)")
      ->required();
  cmd->add_option("--data", c.data, "Training data: a `specbed regen` file")->required();
  AddShownFlags(cmd, {{"-t,--target", c.target, "Target model (name or path; float32)"},
                      {"--heads", c.num_heads, "Medusa heads K (head k predicts token t+k+2)"},
                      {"--layers", c.num_layers, "Residual blocks per head"},
                      {"--decay", c.decay, "Loss weight decay^k of head k"}});
  AddRegenDataAndOptimFlags(cmd, *o);
}

}  // namespace specbed::cli
