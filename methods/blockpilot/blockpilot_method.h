// BlockPilot on the DFlash chain (`dflash+blockpilot`): once per prompt, right after prefill, a
// small MLP over the target's last-position distribution picks the block size b̂ among
// {B − k, …, B + k}; the DFlash drafter then forwards b̂ rows per step and drafts chains of
// b̂ − 1 tokens for the whole generation of that prompt. Verification is the `dflash` method's
// (greedy at T = 0, chain rejection sampling at T > 0), so the method is lossless.
// Also the pieces the labeller reuses: the `dflash` chain decoder with a controller slot, and a
// controller that applies one fixed block size and keeps a copy of the prefill logits.
// Knobs, defaults and recorded choices: methods/blockpilot/README.md.
// Checked by: tests/methods/blockpilot_test.cpp (the controller applies the predicted block size;
// exact match with AR at T = 0 in fp32; the radius / block size / vocabulary mismatch errors).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/engine/speculative_decoder.h"
#include "methods/blockpilot/blockpilot_predictor.h"
#include "methods/dflash/dflash_drafter.h"
#include "methods/method_registry.h"

namespace specbed {

// Sets the drafter's block size (rows per step) to `block_size` and the chain budget to
// block_size − 1 drafted tokens (depth and nodes).
void ApplyBlockSize(DflashDrafter& drafter, int64_t block_size, DraftBudget& budget);

// Predicts the block size per sequence from DraftBegin::last_logits.
class BlockPilotController : public Controller {
 public:
  // `drafter` is owned by the decoder this controller is installed in.
  BlockPilotController(std::shared_ptr<BlockPilotPredictor> predictor, DflashDrafter* drafter);
  void BeginSequence(const DraftBegin& begin, DraftBudget& budget) override;
  // The largest candidate block size minus one (the cache is sized for it).
  int64_t MaxNodes(const DraftBudget& base) const override {
    return std::max(base.nodes, predictor_->config().candidates.back() - 1);
  }
  int64_t last_block_size() const { return last_block_size_; }  // 0 before the first sequence
  const BlockPilotPredictor& predictor() const { return *predictor_; }

 private:
  std::shared_ptr<BlockPilotPredictor> predictor_;
  DflashDrafter* drafter_;
  int64_t last_block_size_ = 0;
};

// Applies one block size to every sequence (labelling: one run per candidate) and optionally
// copies the prefill logits (DraftBegin::last_logits) of the last sequence.
class FixedBlockController : public Controller {
 public:
  FixedBlockController(DflashDrafter* drafter, int64_t block_size);
  void BeginSequence(const DraftBegin& begin, DraftBudget& budget) override;
  int64_t MaxNodes(const DraftBudget& base) const override {
    return std::max(base.nodes, block_size_ - 1);
  }
  void set_block_size(int64_t block_size) { block_size_ = block_size; }
  void set_capture_logits(bool capture) { capture_ = capture; }
  // float32 [V] values of the last captured sequence (empty before one).
  const std::vector<float>& last_logits() const { return last_logits_; }

 private:
  DflashDrafter* drafter_;
  int64_t block_size_;
  bool capture_ = false;
  std::vector<float> last_logits_;
};

// The `dflash` method's chain decoder (MakeDflashFamilyDecoder, head's block size) over
// `context.target` for the DFlash checkpoint `drafter_dir`, with access to its drafter so a
// controller can be installed. Errors name `method`.
struct DflashChainDecoder {
  std::unique_ptr<SpeculativeDecoder> decoder;
  DflashDrafter* drafter = nullptr;  // owned by `decoder`
  int64_t trained_block_size = 0;    // the head's block_size
};
DflashChainDecoder MakeDflashChainDecoder(MethodContext& context, const std::string& drafter_dir,
                                          const std::string& method);

// The `dflash+blockpilot` decoder: the chain decoder plus a BlockPilotController with the
// predictor in `predictor_dir`. Throws specbed::Error when the predictor's radius differs from
// `radius`, its trained block size from the drafter's, or its vocabulary from the target's.
std::unique_ptr<Decoder> MakeBlockPilotDecoder(MethodContext& context,
                                               const std::string& drafter_dir,
                                               const std::string& predictor_dir, int64_t radius);

}  // namespace specbed
