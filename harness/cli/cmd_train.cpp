// `specbed train <drafter>`: the drafter trainers behind one command each — draft-lm (a small
// draft LM distilled from a target for speculative sampling), eagle3, medusa, specblock, dflash,
// jetspec, hrad, ltd and ltd-baselines (methods/common/train/README.md and each method's README).
// Each trainer folder declares its own subcommands (Add<Folder>TrainCommands in its
// <name>_train_command.cpp; the folder list is methods/builtin_methods.h).
// Resumable: rerunning with the same settings continues an unfinished run in -o/--output.
// `--device` (every trainer but ltd / ltd-baselines) is checked first, before anything loads.
// Checked by: tests/train/train_cli_test.cpp (exit codes, resume, mismatch message),
// tests/train/train_test.cpp (the trainer it calls) and tests/cli/ltd_cli_test.cpp (`train ltd`).
#include "harness/cli/commands.h"
#include "methods/common/train/train_flags.h"

namespace specbed::cli {

void AddTrainCommand(CLI::App& app) {
  CLI::App* train = app.add_subcommand("train", "Train drafters (see methods/common/train)");
  train->require_subcommand(1);
#define SPECBED_ADD_TRAIN_COMMANDS(Folder) Add##Folder##TrainCommands(train);
  SPECBED_TRAINER_FOLDERS(SPECBED_ADD_TRAIN_COMMANDS)
#undef SPECBED_ADD_TRAIN_COMMANDS
}

}  // namespace specbed::cli
