// Distillation of a small llama2.c-shape draft LM from a target model, for classic speculative
// sampling (SpS). Data: sequences sampled from the target with GenerateAr (from BOS, seeded per
// sequence), cached in the output directory. Loss: forward KL(target || draft) of the next-token
// distributions, teacher logits from LlamaModel::Forward over the batch, averaged over positions.
// AdamW with linear warmup + cosine decay, global-norm gradient clipping. Checkpoints (weights,
// optimizer moments, data order RNG, step) every checkpoint_every steps; an interrupted run
// resumes to bitwise the same final weights. Knobs, files and formats: methods/common/train/
// README.md.
// Checked by: tests/train/train_test.cpp (loss goes down, resume == uninterrupted, settings
// mismatch errors, the written checkpoint loads through the model registry).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "methods/common/train/train_loop.h"
#include "models/llama_config.h"

namespace specbed {

// The optimiser settings of the committed models/stories260K/draft: 1200 steps of 16 sequences,
// AdamW lr 1e-2 -> 1e-3 (cosine) after 30 warmup steps, weight decay 0.01, betas (0.9, 0.95),
// grad clip 1.0, seed 0, checkpoint every 100 and log every 10 steps, 1 thread.
OptimConfig DefaultDraftLmOptim();

// Defaults: the settings of the committed models/stories260K/draft (see its PROVENANCE.md).
struct DraftLmTrainConfig {
  // Teacher: a model registry name or path, run as `dtype` ("float32" or "bfloat16").
  std::string target = "stories260K";
  std::string dtype = "float32";
  // Draft shape (llama2.c style: tied embeddings, no biases; HF rotate_half RoPE with the target's
  // theta and scaling, the target's RMSNorm eps, vocabulary, BOS and EOS).
  int64_t layers = 2;
  int64_t dim = 48;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 0;   // 0 = n_heads (plain multi-head attention)
  int64_t hidden_dim = 0;   // 0 = 8/3 * dim rounded up to a multiple of 16 (SwiGLU width)
  int64_t max_seq_len = 0;  // 0 = the target's
  // Data: n_sequences training + n_eval_sequences held-out sequences of seq_len tokens (BOS +
  // seq_len - 1 sampled at `temperature`; EOS does not stop the sampling).
  int64_t n_sequences = 1536;
  int64_t n_eval_sequences = 32;
  int64_t seq_len = 256;
  double temperature = 1.0;
  // Optimisation and bookkeeping (the shared training loop, train_loop.h): DefaultDraftLmOptim().
  OptimConfig optim = DefaultDraftLmOptim();
};

// resume / restart / stop_after / verbose, as for every trainer (train_loop.h).
using DraftLmTrainOptions = TrainLoopOptions;

struct DraftLmTrainResult {
  int64_t step = 0;           // steps done
  bool finished = false;      // step == steps (then the evaluation below is filled)
  double first_loss = 0;      // training KL of the first step of this process (nats per position)
  double final_loss = 0;      // mean training KL over the last (up to) 20 steps of this process
  double eval_kl = 0;         // held-out KL(target || draft), nats per position
  double top1_agreement = 0;  // held-out: argmax draft == argmax target, teacher-forced
  double expected_acceptance = 0;  // held-out: mean sum_v min(p, q) (SpS acceptance at T = 1)
  double data_seconds = 0;         // sampling the data (0 when it came from the cache)
  double teacher_seconds = 0;      // precomputing the teacher cache in this process
  double train_seconds = 0;        // training steps, summed over resumed runs
  LlamaConfig draft_config;
  nlohmann::ordered_json settings;  // the run identity stored with the train state
};

// The draft's architecture for `config` and a target of config `target`.
LlamaConfig DraftLlamaConfig(const DraftLmTrainConfig& config, const LlamaConfig& target);

// Trains (or resumes) into `out_dir`: out_dir/config.json + model.safetensors (HF Llama,
// float32; rewritten at every checkpoint), out_dir/train_log.jsonl, out_dir/train_summary.json
// (when finished) and out_dir/work/ (self-git-ignored: data.bin, data.json,
// train_state.safetensors). Throws specbed::Error for impossible settings, an output directory
// holding a run with other settings (naming the first differing setting), or --resume without a
// run.
DraftLmTrainResult TrainDraftLm(const DraftLmTrainConfig& config, const std::string& out_dir,
                                const DraftLmTrainOptions& options = {});

}  // namespace specbed
