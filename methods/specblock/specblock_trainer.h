// `specbed train specblock` (spec §4): trains a SpecBlock drafter on a target's own outputs (a
// `specbed regen` file) through the shared training loop (train_loop.h).
// Layout (one sequence of T tokens): every position i in [0, T-2] is a block-1 start (condition =
// target features at i, token = x_{i+1}, slot k (1-based) predicts x_{i+1+k}, soft label = the
// target's distribution at i + k restricted to the draft vocabulary and renormalised; RoPE
// position i + k). Slot (i, k) attends to every slot of starts i' < i and to slots (i, <= k).
// Cross-block chaining: per start s ~ U{1..K}; block 2 starts from h^(L)_{i,s} (W_cond skipped)
// with token x_{i+1+s}, attends to the context of starts < i, block-1 slots (i, 1..s) and
// causally to itself; gradients flow through h^(L)_{i,s}; the valid-prefix mask carries over
// (block 2 starts at m_{i,s+1}).
// Valid-prefix mask: m_1 = 1, m_{k+1} = m_k · [argmax p_k == x]; loss of slot k weighted by m_k,
// normalised per slot by its own count (per block). Rank loss: CE of the rank head against the
// bucket of the label's rank in p_k over positions with m_k = 1, after `rank_warmup` steps.
// Checked by: tests/methods/specblock_test.cpp (loss goes down, the written drafter loads).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "methods/common/train/train_loop.h"
#include "methods/specblock/specblock_model.h"

namespace specbed {

struct SpecBlockLossOptions {
  int64_t blocks = 2;        // chained blocks (1 = no cross-block training)
  bool valid_prefix = true;  // false: the "- valid-prefix curriculum" ablation (mask = 1)
  bool rank = true;          // add the rank-head loss
  // Slot k's loss is divided by max(N_k, slot_norm_floor * N_1) (N_k = valid-prefix count of
  // slot k in its block, N_1 = that block's slot-1 count). 0 = the paper's per-slot
  // normalisation exactly; > 0 keeps a handful of surviving rows of a barely trained drafter
  // from dominating the gradient (and, through global-norm clipping, freezing slot 1).
  double slot_norm_floor = 0;
};

struct SpecBlockLossResult {
  at::Tensor loss;  // scalar, differentiable
  double draft_loss = 0, rank_loss = 0;
  std::vector<double> slot_hits, slot_counts;        // block-1 per slot: top-1 == label, counted
  std::array<std::array<double, 4>, 4> confusion{};  // [true bucket][predicted], m = 1 positions
};

// aux float32 [B, T, 3 Ht]; tokens int64 [B, T]; target_logits float32 [B, T, V]; loss_mask
// float32 [B, T] (SequenceBatch convention); `rng` draws the split points s.
SpecBlockLossResult SpecBlockLoss(const SpecBlockModel& model, const at::Tensor& aux,
                                  const at::Tensor& tokens, const at::Tensor& target_logits,
                                  const at::Tensor& loss_mask, const SpecBlockLossOptions& options,
                                  std::mt19937_64& rng);

// Block-1 slot-1 draft logits [B, T, Vd] of every position (row t: the drafter's distribution of
// token t + 1 given tokens <= t, from target features at t - 1; row 0 is zero). For online
// adaptation at single positions. `detach_trunk`: compute the trunk without gradients
// (head-only updates).
at::Tensor SpecBlockNextTokenLogits(const SpecBlockModel& model, const at::Tensor& aux,
                                    const at::Tensor& tokens, bool detach_trunk,
                                    at::Tensor* rank_logits = nullptr);

// Online adaptation (OSD student, bandit events) supervises a token on every block-1 slot that
// can draft it: the draft of token r + 1 (mask row r, the distribution after tokens [0, r]) comes
// from the root at r - k, slot k (0-based), for k < K and r - k >= 1 (the first committed token
// is the earliest root). At a rejection after a accepted tokens (a < K) the served tree drafted
// it at slot a of the root's first block, so that slot is always among them.
struct SpecBlockSlotRows {
  at::Tensor slot;  // int64 [N]: flat index into the [B, T - 1, K] block-1 slot layout
  at::Tensor seq;   // int64 [N]: flat index b * T + r of the supervised row (teacher logits row;
                    // the label is token r + 1)
};
// loss_mask: float32 [B, T] CPU, 1 at the supervised rows r (OsdBatch convention: r = p - 1 for
// a correction at token index p); rows with r < 1 or r > T - 2 are ignored.
SpecBlockSlotRows SpecBlockSlotsDrafting(const at::Tensor& loss_mask, int64_t block_size);

// Draft logits [N, Vd] float32 of `rows.slot` in the block-1 training layout over aux float32
// [B, T, 3 Ht] and tokens int64 [B, T] (differentiable unless `detach_trunk`: then the trunk runs
// without gradients and only the final norm, lm_head and rank head train). `rank_logits`
// (optional) receives the rank head's [N, 4] logits at the same slots.
at::Tensor SpecBlockSlotLogits(const SpecBlockModel& model, const at::Tensor& aux,
                               const at::Tensor& tokens, const SpecBlockSlotRows& rows,
                               bool detach_trunk, at::Tensor* rank_logits = nullptr);

struct SpecBlockTrainConfig {
  std::string target = "stories260K";
  std::string dtype = "float32";
  std::string data;
  std::vector<int64_t> aux_layers;  // empty = EAGLE-3 default {2, L/2, L-3}
  int64_t draft_vocab = 32000;
  int64_t block_size = 4;
  int64_t layers = 2;
  int64_t shifts = -1;  // -1 = layers (a shift before every layer)
  int64_t rank_hidden = 256;
  int64_t blocks = 2;
  // Steps before the rank-head loss is on; -1 = 3/8 of optim.steps (300 of the default 800, as
  // the shipped drafter). The paper's 2000 is for runs far longer than SpecBed's default.
  int64_t rank_warmup = -1;
  bool valid_prefix = true;
  double slot_norm_floor = 1.0;
  int64_t max_len = 128;
  int64_t n_eval = 32;
  std::string features = "online";
  std::string feature_dtype = "float32";
  OptimConfig optim;
};

OptimConfig DefaultSpecBlockOptim();

// The step the rank-head loss starts at: config.rank_warmup, or 3/8 of optim.steps for -1.
// Throws specbed::Error naming --rank-warmup unless it falls inside the run (0 <= w < steps), so
// the rank head is always trained.
int64_t SpecBlockRankWarmup(const SpecBlockTrainConfig& config);

struct SpecBlockTrainResult {
  TrainLoopResult loop;
  int64_t parameters = 0;
  double draft_vocab_coverage = 0;
};

SpecBlockTrainResult TrainSpecBlock(const SpecBlockTrainConfig& config, const std::string& out_dir,
                                    const TrainLoopOptions& options = {});

}  // namespace specbed
