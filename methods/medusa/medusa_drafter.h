// The `medusa` drafter: Medusa-1 heads (medusa_head.h) on the target's last hidden state draft a
// sparse tree. Each step the K heads run on the final-normed hidden state of the last committed
// slot (the one whose logits chose the root); head k's top-k candidates fill depth k + 1 of a
// static rank template (methods/common/rank_template.h): a node is "head (depth - 1)'s r-th
// candidate". The tree does not depend on its own nodes (that is Medusa: no drafting loop), so a
// step costs one small head forward whatever the tree size. The drafts are deterministic given
// the past, so `sample_follow` is lossless at T > 0.
// Beside a row-kernel target every batch slot's drafter drafts in one head pass (DraftBatch).
// Checked by: tests/methods/medusa_test.cpp, tests/methods/batch_engine_test.cpp
// (BatchEngine.MedusaDraftsTheWholeBatchInOneHeadPass).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "harness/engine/method.h"
#include "methods/common/rank_template.h"
#include "methods/medusa/medusa_head.h"
#include "models/llama_model.h"

namespace specbed {

enum class MedusaTree {
  kAuto,        // calibrated when the heads carry a calibration, else prior
  kCalibrated,  // Medusa's: the most likely paths under the heads' measured rank accuracies
  kPrior,       // the most likely paths under a geometric prior over ranks
};
const char* MedusaTreeName(MedusaTree t);
// "auto" | "calibrated" | "prior"; errors name `context`.
MedusaTree ParseMedusaTree(const std::string& name, const std::string& context);

struct MedusaOptions {
  int64_t tree_nodes = 16;  // nodes of the template (ignored when `choices` is given)
  int64_t top_k = 10;       // candidates read from each head (Medusa: 10)
  MedusaTree tree = MedusaTree::kAuto;
  std::string choices;  // "" = the `tree` template; else Medusa choices JSON ([[0], [0, 0], ...])
};

// The template `options` describe for heads of config `heads` (its num_heads and calibration;
// errors name `context`).
std::vector<TemplateNode> MedusaTemplate(const MedusaOptions& options, const MedusaConfig& heads,
                                         const std::string& context);

// `head` on `target`: its tensors on the target's device in the target's dtype (issue 45: with a
// real 128k vocabulary each head's lm_head is as large as the target's, and four float32 heads
// would read ~60% of a bf16 target's bytes). Checks that the heads fit the target.
std::shared_ptr<const MedusaHead> MedusaHeadOn(MedusaHead head, const LlamaModel& target);

// Head passes made by every Medusa drafter of the process (one per Draft, one per DraftBatch): a
// diagnostic, read by tests (one pass a batch step when the batch drafts together).
int64_t MedusaHeadPasses();

class MedusaDrafter final : public Drafter {
 public:
  // `head`: from MedusaHeadOn(target) (shared by every slot's drafter of a batch). top_k must not
  // exceed the vocabulary.
  MedusaDrafter(LlamaModel& target, std::shared_ptr<const MedusaHead> head,
                const MedusaOptions& options);

  // The target's last layer (before its final norm; the drafter applies it).
  std::vector<int64_t> TargetHiddenLayers() const override;
  void Begin(const DraftBegin& begin) override;
  void Draft(const DraftStep& step, DraftTree& tree) override;
  void Accept(const DraftTree& tree, const Verdict& verdict) override;
  // Beside a row-kernel target the drafters of one head draft together: one pass of the heads
  // over every sequence's hidden state (MedusaLogitsRows, each row's logits its batch-1 bits), so
  // the trees are those each would draw alone. On the ATen path: nullptr (each drafts alone).
  const void* DraftBatchKey() const override;
  void DraftBatch(const std::vector<DraftJob>& jobs) override;

  const std::vector<TemplateNode>& tree_template() const { return template_; }

 private:
  // hidden: the target's [1, S, dim] states (any float dtype, its device): keeps the last row,
  // final-normed, in the heads' dtype [1, dim].
  void KeepLastHidden(const at::Tensor& hidden);
  // float32 [K, N, vocab] logits of the heads on `normed` [N, dim] (the heads' dtype and device).
  at::Tensor HeadLogits(const at::Tensor& normed) const;
  // Fills `tree` from head k's logits in row head_rows[k] of `logits` (float32 [rows, vocab]).
  void FillTree(const at::Tensor& logits, const std::vector<int64_t>& head_rows,
                const DraftStep& step, DraftTree& tree);

  LlamaModel& target_;
  std::shared_ptr<const MedusaHead> head_;
  MedusaOptions options_;
  std::vector<TemplateNode> template_;
  at::Tensor norm_weight_;           // float32 [dim], the target's final norm, on its device
  at::Tensor normed_;                // [1, dim], the heads' dtype and device
  std::vector<int64_t> head_rows_;   // 0..K-1
  std::vector<int32_t> candidates_;  // [K, top_k]
  std::vector<int32_t> node_of_;
};

}  // namespace specbed
