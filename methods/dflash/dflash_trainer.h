// `specbed train dflash` / `specbed train jetspec`: trains a block draft head on a target's own
// outputs (a `specbed regen` file) through the shared training loop (train_loop.h).
//   dflash:  bidirectional block, hard-label cross-entropy, per-position weight exp(-(k-1)/gamma)
//            with gamma = 7 (the DFlash paper's value for B = 16);
//   jetspec: causal block (config "specbed_causal"), forward-KL distillation on the target's
//            logits, uniform weights (JetSpec's main runs); reverse KL and hard-label SFT are the
//            ablation options (--loss).
// Both: random anchors per sequence every step (up to --anchors, from the positions whose next
// token is a response token), all blocks of a sequence in one forward (trainable_dflash.h). The
// head takes the target's width, heads, head_dim, SwiGLU width, RoPE and eps; --layers draft
// layers; target layers by DFlash's rule unless given; the mask token is a target vocabulary row
// (default 0, stories260K's <unk>). The last n_eval sequences are held out. Knobs, defaults and
// recorded choices: methods/dflash/README.md ("Training").
// Checked by: tests/methods/dflash_train_test.cpp (loss goes down, bitwise resume, the written
// checkpoint loads and drafts), tests/cli (the command).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "methods/common/train/regen_head_trainer.h"
#include "methods/common/train/train_loop.h"
#include "methods/dflash/trainable_dflash.h"

namespace specbed {

struct DflashTrainConfig : RegenHeadTrainConfig {
  std::string variant = "dflash";  // "dflash" | "jetspec": names the task and the defaults
  bool causal = false;
  int64_t block_size = 16;  // B
  int64_t layers = 2;       // draft decoder layers
  // Draft attention shape and SwiGLU width; 0 = the target's.
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate = 0;
  // 0-based target decoder layers whose outputs are fused; empty = DefaultDflashTargetLayers.
  std::vector<int64_t> target_layers;
  int64_t mask_token = 0;  // target vocabulary row used as MASK
  int64_t anchors = 16;    // random anchors (blocks) per sequence per step
  DflashLossOptions loss;  // kind, gamma, temperature
};

// The defaults of a variant: "dflash" (bidirectional, ce, gamma 7) or "jetspec" (causal,
// forward_kl, uniform weights). Unknown names fail.
DflashTrainConfig DefaultDflashTrainConfig(const std::string& variant);
// AdamW (0.9, 0.95), no weight decay, clip 1.0, warmup + cosine; lr 3e-3 -> 3e-4, batch 16,
// 1000 steps (SpecForge's DFlash recipe scaled to a ~100K-parameter head).
OptimConfig DefaultDflashOptim();

struct DflashTrainResult : RegenHeadTrainResult {
  std::vector<int64_t> target_layers;
};

// Trains (or resumes) into out_dir: config.json + model.safetensors (published DFlash layout,
// float32, recipe under "specbed_recipe"), train_log.db, train_summary.json, work/. Errors name
// the flag.
DflashTrainResult TrainDflash(const DflashTrainConfig& config, const std::string& out_dir,
                              const TrainLoopOptions& options = {});

}  // namespace specbed
