// MedusaDrafter (see medusa_drafter.h).
#include "methods/medusa/medusa_drafter.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <atomic>

#include "base/enum_names.h"
#include "base/error.h"
#include "methods/common/logits_rows.h"

namespace specbed {

SPECBED_ENUM_NAMES(MedusaTree, "medusa tree", MedusaTreeName, ParseMedusaTree,
                   {MedusaTree::kAuto, "auto"}, {MedusaTree::kCalibrated, "calibrated"},
                   {MedusaTree::kPrior, "prior"})

std::vector<TemplateNode> MedusaTemplate(const MedusaOptions& options, const MedusaConfig& heads,
                                         const std::string& context) {
  if (!options.choices.empty()) {
    return ParseRankChoices(options.choices, options.top_k, heads.num_heads, context);
  }
  const bool calibrated = !heads.rank_accuracy.empty();
  SPECBED_CHECK(options.tree != MedusaTree::kCalibrated || calibrated,
                "medusa: tree 'calibrated' needs heads whose config.json holds "
                "specbed_calibration (written by `specbed train medusa`); these heads have none "
                "(use tree 'prior', or paste a published tree into choices)");
  if (options.tree == MedusaTree::kPrior || !calibrated) {
    return BuildRankTemplate(options.tree_nodes, options.top_k, heads.num_heads);
  }
  std::vector<std::vector<double>> accuracy = heads.rank_accuracy;  // ranks below top_k only
  for (auto& row : accuracy) row.resize(std::min<size_t>(row.size(), options.top_k));
  return BuildCalibratedRankTemplate(options.tree_nodes, accuracy);
}

namespace {

void CheckHeadsFit(const MedusaConfig& heads, const LlamaModel& target) {
  const LlamaConfig& c = target.config();
  SPECBED_CHECK(heads.hidden_size == c.dim && heads.vocab_size == c.vocab_size,
                "medusa: the heads (hidden ", heads.hidden_size, ", vocab ", heads.vocab_size,
                ") do not fit the target (hidden ", c.dim, ", vocab ", c.vocab_size, ")");
}

}  // namespace

std::shared_ptr<const MedusaHead> MedusaHeadOn(MedusaHead head, const LlamaModel& target) {
  CheckHeadsFit(head.config, target);
  const at::Device device = target.weights().final_norm.device();
  for (auto& [name, t] : head.tensors) t = t.to(device, target.dtype()).contiguous();
  return std::make_shared<const MedusaHead>(std::move(head));
}

namespace {
std::atomic<int64_t> g_head_passes{0};
}  // namespace

int64_t MedusaHeadPasses() {
  return g_head_passes.load(std::memory_order_relaxed);
}

MedusaDrafter::MedusaDrafter(LlamaModel& target, std::shared_ptr<const MedusaHead> head,
                             const MedusaOptions& options)
    : target_(target),
      head_(std::move(head)),
      options_(options),
      template_(MedusaTemplate(options, head_->config, "medusa knob choices")) {
  const LlamaConfig& c = target.config();
  CheckHeadsFit(head_->config, target);
  SPECBED_CHECK(options.top_k >= 1 && options.top_k <= c.vocab_size, "medusa: top_k ",
                options.top_k, " outside [1, ", c.vocab_size, "]");
  norm_weight_ = target.weights().final_norm.to(at::kFloat);
  for (int64_t k = 0; k < head_->config.num_heads; ++k) head_rows_.push_back(k);
}

std::vector<int64_t> MedusaDrafter::TargetHiddenLayers() const {
  return {target_.config().n_layers};
}

void MedusaDrafter::KeepLastHidden(const at::Tensor& hidden) {
  SPECBED_CHECK(hidden.defined() && hidden.dim() == 3 && hidden.size(2) == target_.config().dim,
                "medusa drafter: expected the target's last hidden states [1, S, dim]");
  const at::Tensor x = hidden.select(1, hidden.size(1) - 1).to(at::kFloat);  // [1, dim]
  const at::Tensor rms = at::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + target_.config().norm_eps);
  normed_ = (x * rms * norm_weight_).to(target_.dtype());  // float32 math, the heads' dtype
}

void MedusaDrafter::Begin(const DraftBegin& begin) {
  SPECBED_CHECK(begin.hidden.size() == 1, "medusa drafter: needs the target's last hidden layer");
  KeepLastHidden(begin.hidden[0]);
}

at::Tensor MedusaDrafter::HeadLogits(const at::Tensor& normed) const {
  g_head_passes.fetch_add(1, std::memory_order_relaxed);
  if (target_.forward_path() == ForwardPath::kRowKernels) return MedusaLogitsRows(*head_, normed);
  return MedusaLogits(*head_, normed);
}

void MedusaDrafter::FillTree(const at::Tensor& logits, const std::vector<int64_t>& head_rows,
                             const DraftStep& step, DraftTree& tree) {
  TopkRows(logits, head_rows, options_.top_k, candidates_);
  node_of_.assign(template_.size(), -1);
  for (size_t i = 0; i < template_.size() && tree.size() < step.budget.nodes; ++i) {
    const TemplateNode& t = template_[i];
    if (t.depth > step.budget.depth) continue;
    const int32_t parent = t.parent < 0 ? -1 : node_of_[t.parent];
    if (t.parent >= 0 && parent < 0) continue;  // the parent did not fit
    const int32_t token = candidates_[(t.depth - 1) * options_.top_k + t.rank];
    node_of_[i] = tree.AddNode(token, parent);
  }
}

void MedusaDrafter::Draft(const DraftStep& step, DraftTree& tree) {
  at::NoGradGuard no_grad;
  const at::Tensor logits = HeadLogits(normed_).view({head_->config.num_heads, -1});
  FillTree(logits, head_rows_, step, tree);
}

const void* MedusaDrafter::DraftBatchKey() const {
  return target_.forward_path() == ForwardPath::kRowKernels ? head_.get() : nullptr;
}

void MedusaDrafter::DraftBatch(const std::vector<DraftJob>& jobs) {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> rows;
  for (const DraftJob& job : jobs) {
    const auto* drafter = dynamic_cast<const MedusaDrafter*>(job.drafter);
    SPECBED_CHECK(drafter != nullptr && drafter->DraftBatchKey() == DraftBatchKey(),
                  "medusa drafter: DraftBatch got a job of another drafter");
    rows.push_back(drafter->normed_);
  }
  const int64_t n = static_cast<int64_t>(rows.size()), k_heads = head_->config.num_heads;
  const at::Tensor logits = HeadLogits(at::cat(rows)).view({k_heads * n, -1});  // [K, N] rows
  std::vector<int64_t> head_rows(k_heads);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t k = 0; k < k_heads; ++k) head_rows[k] = k * n + i;
    auto* drafter = static_cast<MedusaDrafter*>(jobs[i].drafter);
    drafter->FillTree(logits, head_rows, jobs[i].step, *jobs[i].tree);
  }
}

void MedusaDrafter::Accept(const DraftTree& tree, const Verdict& verdict) {
  SPECBED_CHECK(verdict.hidden.size() == 1,
                "medusa drafter: the verdict carries no target hidden states");
  KeepLastHidden(verdict.hidden[0]);
}

}  // namespace specbed
