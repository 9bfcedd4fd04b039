// `specbed train eagle3`: trains an EAGLE-3 head on a target's own outputs (a `specbed regen`
// file) with training-time test (TTT), through the shared training loop (train_loop.h).
// The head takes the target's shape (hidden size, heads, head_dim, SwiGLU width, RoPE, RMSNorm
// eps), the target's frozen token embedding, and a draft vocabulary of the draft_vocab most
// frequent response tokens of the training data (d2t / t2d). Target features come from the
// online or the disk source (target_features.h). The last n_eval sequences of the data are held
// out. Knobs, defaults and recorded choices: methods/eagle3/README.md.
// Checked by: tests/methods/eagle3_train_test.cpp (loss goes down, resume, the written checkpoint
// loads and drafts), tests/cli (the command).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods/common/train/regen.h"
#include "methods/common/train/regen_head_trainer.h"
#include "methods/common/train/train_loop.h"
#include "methods/eagle3/eagle3_checkpoint.h"

namespace specbed {

struct Eagle3TrainConfig : RegenHeadTrainConfig {
  // Target layers fused by the head (HF hidden_states numbering); empty = the EAGLE-3 default
  // {2, L/2, L-3}.
  std::vector<int64_t> aux_layers;
  int64_t draft_vocab = 32000;  // clipped to the target's vocabulary size
  int64_t ttt_steps = 7;        // unrolled TTT steps (EAGLE-3: 7)
  double ttt_decay = 0.8;       // per-step loss weight decay^k (EAGLE-3: 0.8)
  // Per-step loss normalisation (trainable_eagle3.h): "counted" (default; the shipped heads) or
  // "all" (the EAGLE-3 reference).
  std::string ttt_loss_norm = "counted";
};

// EAGLE-3's recipe scaled to small targets: AdamW beta (0.9, 0.95), no weight decay, grad clip
// 0.5, warmup + cosine; lr 3e-3, batch 16, 800 steps.
OptimConfig DefaultEagle3Optim();

struct Eagle3TrainResult : RegenHeadTrainResult {
  std::vector<int64_t> aux_layers;
  double draft_vocab_coverage = 0;  // share of training response tokens inside the draft vocab
};

// The draft vocabulary of a reduced-vocabulary head trained on `data`: the `draft_vocab` (clipped
// to `vocab_size`) most frequent supervised (response) tokens of rows [0, n_train), each row
// cropped to `max_len` tokens (BuildDraftVocabMap). *coverage = the share of those supervised
// tokens inside it (1 when there are none). Shared by the EAGLE-3 and SpecBlock trainers.
DraftVocabMap DraftVocabOfRegenRows(const RegenData& data, int64_t n_train, int64_t max_len,
                                    int64_t vocab_size, int64_t draft_vocab, double* coverage);

// Trains (or resumes) into out_dir: config.json + model.safetensors (the published EAGLE-3
// layout, float32, with the recipe under "specbed_recipe"), train_log.db, train_summary.json and
// work/ (train state; the disk feature cache under work/features). Errors name the knob.
Eagle3TrainResult TrainEagle3(const Eagle3TrainConfig& config, const std::string& out_dir,
                              const TrainLoopOptions& options = {});

}  // namespace specbed
