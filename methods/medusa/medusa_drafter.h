// The `medusa` drafter: Medusa-1 heads (medusa_head.h) on the target's last hidden state draft a
// sparse tree. Each step the K heads run on the final-normed hidden state of the last committed
// slot (the one whose logits chose the root); head k's top-k candidates fill depth k + 1 of a
// static rank template (methods/common/rank_template.h): a node is "head (depth - 1)'s r-th
// candidate". The tree does not depend on its own nodes (that is Medusa: no drafting loop), so a
// step costs one small head forward whatever the tree size. The drafts are deterministic given
// the past, so `sample_follow` is lossless at T > 0.
// Checked by: tests/methods/medusa_test.cpp.
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

class MedusaDrafter final : public Drafter {
 public:
  // `head` must match the target (hidden size, vocabulary); its tensors move to the target's
  // device. top_k must not exceed the vocabulary.
  MedusaDrafter(LlamaModel& target, MedusaHead head, const MedusaOptions& options);

  // The target's last layer (before its final norm; the drafter applies it).
  std::vector<int64_t> TargetHiddenLayers() const override;
  void Begin(const DraftBegin& begin) override;
  void Draft(const DraftStep& step, DraftTree& tree) override;
  void Accept(const DraftTree& tree, const Verdict& verdict) override;

  const std::vector<TemplateNode>& tree_template() const { return template_; }

 private:
  // hidden: the target's [1, S, dim] states (any float dtype, its device): keeps the last row,
  // final-normed, as float32 [1, dim].
  void KeepLastHidden(const at::Tensor& hidden);

  LlamaModel& target_;
  MedusaHead head_;
  MedusaOptions options_;
  std::vector<TemplateNode> template_;
  at::Tensor norm_weight_;           // float32 [dim], the target's final norm, on its device
  at::Tensor normed_;                // float32 [1, dim]
  std::vector<int64_t> head_rows_;   // 0..K-1
  std::vector<int32_t> candidates_;  // [K, top_k]
  std::vector<int32_t> node_of_;
};

}  // namespace specbed
