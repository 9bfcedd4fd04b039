// `specbed train dflash` and `specbed train jetspec`: the block-head trainer (dflash_trainer.h)
// behind its flags; the variant sets the defaults. Checked by: tests/train/train_cli_test.cpp.
#include "methods/common/train/train_flags.h"
#include "methods/dflash/dflash_trainer.h"

namespace specbed::cli {
namespace {

struct TrainDflashOptions : TrainerFlags<DflashTrainConfig> {
  std::string loss;
};

void RunTrainDflash(const TrainDflashOptions& o) {
  TrainDflashOptions parsed = o;
  parsed.config.loss.kind = ParseDflashLossKind(o.loss);
  RunChainTauTrainer(parsed, TrainDflash, "train " + o.config.variant, "loss", "block-row-1");
}

const char* DflashHelp(const std::string& variant) {
  return variant == "jetspec"
             ? "Train a JetSpec causal block head (forward-KL distillation on the target's "
               "logits, random anchors) on a `specbed regen` file -> OUT/config.json + "
               "model.safetensors (DFlash layout, specbed_causal); resumable"
             : "Train a DFlash block-diffusion head (random anchors, cross-entropy weighted "
               "exp(-(k-1)/gamma)) on a `specbed regen` file -> OUT/config.json + "
               "model.safetensors (published DFlash layout); resumable";
}

// `train dflash` and `train jetspec`: one trainer, the variant sets the defaults.
void AddTrainDflash(CLI::App* train, const std::string& variant) {
  auto [cmd, o] = AddSubcommand(train, variant, RunTrainDflash, DflashHelp(variant));
  DflashTrainConfig& c = o->config;
  c = DefaultDflashTrainConfig(variant);
  o->loss = DflashLossKindName(c.loss.kind);
  AddRegenTrainerFlags(cmd, o->out, c.data, c.target, c.dtype);
  AddShownFlags(cmd, {{"--block-size", c.block_size, "Block size B (bonus token + B-1 masks)"},
                      {"--layers", c.layers, "Draft decoder layers"}});
  OldSpellings(cmd,
               cmd->add_option("--heads", c.heads, "Draft attention heads (0 = the target's)")
                   ->capture_default_str(),
               {"--n-heads"});
  AddShownFlags(cmd, {{"--kv-heads", c.kv_heads,
                       "Draft KV heads (0 = --heads when given, else the target's)"},
                      {"--head-dim", c.head_dim, "Draft head dimension (0 = the target's)"},
                      {"--intermediate", c.intermediate, "Draft SwiGLU width (0 = the target's)"}});
  cmd->add_option("--target-layers", c.target_layers,
                  "0-based target decoder layers whose outputs are fused; default: DFlash's rule "
                  "(evenly spaced from 1 to L-3)");
  cmd->add_option("--mask-token", c.mask_token, "Target vocabulary id used as MASK")
      ->capture_default_str();
  cmd->add_flag("--causal,!--bidirectional", c.causal,
                "Causal attention inside the block (JetSpec) instead of bidirectional (DFlash)")
      ->capture_default_str();
  cmd->add_option("--anchors", c.anchors, "Random anchors (blocks) per sequence per step")
      ->capture_default_str();
  cmd->add_option("--loss", o->loss, "Objective: ce (hard labels), forward_kl, reverse_kl")
      ->check(CLI::IsMember({"ce", "forward_kl", "reverse_kl"}))
      ->capture_default_str();
  AddShownFlags(
      cmd,
      {{"--gamma", c.loss.gamma, "Per-position loss weight exp(-(k-1)/gamma); 0 = uniform"},
       {"--distill-temperature", c.loss.temperature, "Distillation temperature of the KL losses"}});
  AddRegenDataAndOptimFlags(cmd, *o);
}

}  // namespace

void AddDflashTrainCommands(CLI::App* train) {
  AddTrainDflash(train, "dflash");
  AddTrainDflash(train, "jetspec");
}

}  // namespace specbed::cli
