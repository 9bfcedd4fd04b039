// SpecBlock's training loss and its slot layout (spec §4; implemented in specblock_loss.cpp),
// shared by the offline trainer (specblock_trainer.h) and the online adaptation that serves (the
// OSD student, the bandit's events: specblock_method.cpp, specblock_bandit.cpp), so serving code
// never includes the trainer. The layout is described at the top of specblock_trainer.h.
// Checked by: tests/methods/specblock_test.cpp (loss goes down, slot rows, online updates).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <random>
#include <vector>

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
  at::Tensor slot;  // int64 [N] on the CPU: flat index into the [B, T - 1, K] block-1 slot layout,
                    // ascending in b (SpecBlockSlotsDrafting's order)
  at::Tensor seq;   // int64 [N]: flat index b * T + r of the supervised row (teacher logits row;
                    // the label is token r + 1)
};
// loss_mask: float32 [B, T] CPU, 1 at the supervised rows r (OsdBatch convention: r = p - 1 for
// a correction at token index p); rows with r < 1 or r > T - 2 are ignored.
SpecBlockSlotRows SpecBlockSlotsDrafting(const at::Tensor& loss_mask, int64_t block_size);

// Draft logits [N, Vd] float32 of `rows.slot` in the block-1 training layout over aux float32
// [B, T, 3 Ht] and tokens int64 [B, T] (differentiable unless `detach_trunk`: then the trunk runs
// without gradients and only the final norm, lm_head and rank head train). `rank_logits`
// (optional) receives the rank head's [N, 4] logits at the same slots. Each request sees its whole
// served context at the cost of its supervised span: the starts before the first one its slots
// need run once without gradients and serve as cached keys and values (the drafter's served
// cache layout, so the logits equal a forward over every start), the starts from there to the
// last one needed carry the gradients (truncated at the context: it trains the span, not the
// context's keys). rows.slot on the CPU (the split is planned on the host; one host-to-device
// copy of the gathered indices).
at::Tensor SpecBlockSlotLogits(const SpecBlockModel& model, const at::Tensor& aux,
                               const at::Tensor& tokens, const SpecBlockSlotRows& rows,
                               bool detach_trunk, at::Tensor* rank_logits = nullptr);

}  // namespace specbed
