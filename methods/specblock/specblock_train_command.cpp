// `specbed train specblock`: the SpecBlock drafter trainer (specblock_trainer.h) behind its flags.
// Checked by: tests/train/train_cli_test.cpp.
#include "methods/common/train/train_flags.h"
#include "methods/specblock/specblock_trainer.h"

namespace specbed::cli {
namespace {

void RunTrainSpecBlock(const TrainerFlags<SpecBlockTrainConfig>& o) {
  TrainDevice(o.config.optim, "train specblock");  // before the target or the data load
  KeepLargeBlocksInHeap();
  const auto r = TrainUnlessStopped(o, TrainSpecBlock);
  if (!r) return;
  std::printf(
      "%s: %lld steps, %lld parameters, final train loss %.4f; held-out loss %.4f, "
      "slot-1 top-1 %.4f, block chain tau estimate %.3f; train %.1f s\n",
      o.out.c_str(), static_cast<long long>(r->loop.step), static_cast<long long>(r->parameters),
      r->loop.final_loss, r->loop.eval.loss, r->loop.eval.acceptance_proxy,
      r->loop.eval.extra["block_chain_tau_estimate"].get<double>(), r->loop.train_seconds);
}

}  // namespace

void AddSpecBlockTrainCommands(CLI::App* train) {
  auto [cmd, o] = AddRegenHeadCommand<SpecBlockTrainConfig>(
      train, "specblock", RunTrainSpecBlock,
      "Train a SpecBlock drafter (valid-prefix loss, cross-block chaining, rank head after "
      "--rank-warmup steps) on a `specbed regen` file -> OUT/config.json + model.safetensors; "
      "resumable",
      DefaultSpecBlockOptim());
  SpecBlockTrainConfig& c = o->config;
  AddAuxLayersFlag(cmd, c.aux_layers, "(low, mid, top)");
  AddShownFlags(cmd,
                {{"--draft-vocab", c.draft_vocab, "Draft vocabulary size"},
                 {"--block-size", c.block_size, "K: slots per block"},
                 {"--layers", c.layers, "L: drafter decoder layers"},
                 {"--shifts", c.shifts, "W_shift count: L or L-1 (-1 = L)"},
                 {"--rank-hidden", c.rank_hidden, "Rank-head MLP width"},
                 {"--blocks", c.blocks, "Chained blocks in training (1 or 2)"},
                 {"--rank-warmup", c.rank_warmup,
                  "Steps before the rank-head loss is on (-1 = 3/8 of --steps; must be < --steps)"},
                 {"--valid-prefix", c.valid_prefix, "Valid-prefix mask (false: the ablation)"},
                 {"--slot-norm-floor", c.slot_norm_floor,
                  "Slot k's loss is divided by max(N_k, floor * N_1); 0 = the paper's per-slot "
                  "normalisation"}});
  AddRegenDataAndOptimFlags(cmd, *o);
}

}  // namespace specbed::cli
