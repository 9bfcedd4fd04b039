// Registration of `dflash` (block-diffusion chain drafts, chain rejection sampling at T > 0) and
// `ddtree` (best-first tree over the same head's per-depth marginals, sample-then-follow at
// T > 0), and the DFlash-family decoder factory (dflash_method.h) that `jetspec` shares. All take
// a DFlash checkpoint directory in the published layout (knob `drafter`); the head shares the
// target's embedding and LM head.
// Checked by: tests/methods/dflash_drafter_test.cpp, tests/methods/jetspec_test.cpp.
#include "methods/dflash/dflash_method.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "base/error.h"
#include "base/names.h"
#include "base/paths.h"
#include "harness/engine/speculative_decoder.h"
#include "methods/common/registration_util.h"
#include "methods/dflash/dflash_checkpoint.h"
#include "methods/dflash/dflash_drafter.h"
#include "methods/drafter_catalog.h"
#include "methods/method_registry.h"

namespace specbed {

int64_t DraftedNodesForBudget(int64_t budget, const std::string& convention,
                              const std::string& method) {
  SPECBED_CHECK(budget >= 1, method, ": budget must be >= 1, got ", budget);
  if (convention == kBudgetConventionDdtree) return budget;
  if (convention == kBudgetConventionJetspec) return budget - 1;
  FailUnknownName("budget_convention", convention,
                  {kBudgetConventionDdtree, kBudgetConventionJetspec}, "method '" + method + "'");
}

std::string DflashDrafterDir(const nlohmann::json& knobs) {
  return ResolveDrafterDir(knobs.at("drafter").get<std::string>());
}

void CheckDflashDrafterKnob(const nlohmann::json& knobs, const std::string& method) {
  const std::string dir = DflashDrafterDir(knobs);
  SPECBED_CHECK(!dir.empty() && dir != kAutoDrafter, method,
                ": knob 'drafter' must name a DFlash checkpoint directory (config.json + "
                "model.safetensors in the published layout) or a known head; 'auto' resolves only "
                "for a target with a shipped head (stories260K, stories260K-twin)");
  SPECBED_CHECK(PathExists(dir), method, ": drafter '", dir, "' does not exist");
}

namespace {

// Throws unless the head `config` (from `dir`) drafts for `target` (named `target_name`).
void CheckDflashHeadFits(const DflashConfig& c, const LlamaModel& target, const std::string& dir,
                         const std::string& target_name, const std::string& method) {
  const LlamaConfig& t = target.config();
  SPECBED_CHECK(c.vocab_size == t.vocab_size && c.hidden_size == t.dim, method, ": drafter '", dir,
                "' (vocab ", c.vocab_size, ", hidden ", c.hidden_size,
                ") does not match the target '", target_name, "' (vocab ", t.vocab_size,
                ", hidden ", t.dim, "): the head shares the target's embedding");
  for (int64_t id : c.TargetLayerIds()) {
    SPECBED_CHECK(id >= 0 && id < t.FeatureDepth(), method, ": drafter '", dir,
                  "' reads target layer ", id, " but the target has ", t.FeatureDepth(),
                  " feature layers");
  }
}

}  // namespace

std::unique_ptr<Decoder> MakeDflashFamilyDecoder(MethodContext& context,
                                                 const nlohmann::json& knobs, DflashTreeKind kind,
                                                 const std::string& method) {
  CheckDflashDrafterKnob(knobs, method);
  const std::string dir = DflashDrafterDir(knobs);
  const LlamaModel& target = *context.target->model;
  // One copy of the head's weights for every slot's drafter (read once, one DraftBatchKey).
  const std::shared_ptr<const DflashWeights> weights =
      context.shared->GetOrBuild<const DflashWeights>(
          "dflash head " + dir + " on " + std::to_string(reinterpret_cast<uintptr_t>(&target)),
          [&] {
            const DflashCheckpoint ckpt = LoadDflashCheckpoint(dir);
            CheckDflashHeadFits(ckpt.config, target, dir, context.target->spec.name, method);
            const LlamaWeights& w = target.weights();
            return std::make_shared<const DflashWeights>(ckpt.config, ckpt.tensors,
                                                         w.tok_embeddings, w.lm_head,
                                                         TargetHeadPlacement(target));
          });
  const DflashConfig& c = weights->config;
  auto head = std::make_unique<DflashHead>(weights);
  const bool tree = kind != DflashTreeKind::kChain;
  DflashDraftOptions o;
  o.kind = kind;
  o.block_size = knobs.at("block_size").get<int64_t>();
  if (tree) {
    o.top_k = knobs.at(kind == DflashTreeKind::kGroupExpand ? "width" : "top_k").get<int64_t>();
    o.budget = DraftedNodesForBudget(knobs.at("budget").get<int64_t>(),
                                     knobs.at("budget_convention").get<std::string>(), method);
    // DDTree's top_k 0 = min(budget, V): no width cap (the reference's K).
    if (o.top_k == 0) o.top_k = std::max<int64_t>(1, std::min(o.budget, c.vocab_size));
  }
  o.argmax_drafts = knobs.value("draft_sampling", std::string("sample")) == "argmax";
  auto drafter = std::make_unique<DflashDrafter>(std::move(head), o);
  SpeculativeOptions options;
  const int64_t block = drafter->block_size();
  options.budget.depth = block - 1;
  options.budget.nodes = tree ? o.budget : block - 1;
  // Deterministic drafts (trees, or argmax chains) need no draft distributions.
  options.sampling_rule =
      tree || o.argmax_drafts ? VerifyRule::kSampleFollow : VerifyRule::kChainRs;
  return std::make_unique<SpeculativeDecoder>(
      *context.target->model, context.target->tokenizer.get(), std::move(drafter), options);
}

void RegisterDflashFamilyMethod(MethodRegistry& registry, MethodInfo info, DflashTreeKind kind) {
  const std::string name = info.name;
  info.validate = [name](const nlohmann::json& knobs) { CheckDflashDrafterKnob(knobs, name); };
  info.factory = [name, kind](MethodContext& context, const nlohmann::json& knobs) {
    return MakeDflashFamilyDecoder(context, knobs, kind, name);
  };
  registry.Register(std::move(info));
}

MethodKnob BudgetConventionKnob(const std::string& first) {
  const std::string ddtree = "ddtree = drafted nodes (root excluded)";
  const std::string jetspec =
      "jetspec = verify tokens including the root (budget - 1 drafted nodes)";
  const bool ddtree_first = first == kBudgetConventionDdtree;
  const std::string second = ddtree_first ? kBudgetConventionJetspec : kBudgetConventionDdtree;
  return {
      "budget_convention",
      first,
      "what budget counts: " + (ddtree_first ? ddtree + "; " + jetspec : jetspec + "; " + ddtree),
      1,
      0,
      {first, second}};
}

MethodKnob TreeBlockSizeKnob() {
  return {"block_size",
          0,
          "rows forwarded per step (0 = the head's; larger values add untrained mask rows); tree "
          "depth <= block_size - 1",
          0,
          1024,
          {}};
}

void RegisterDflashMethods(MethodRegistry& registry) {
  registry.AddShippedDrafter("dflash", "DFlash block head trained on stories260K");
  const MethodKnob drafter{
      "drafter",
      "auto",
      "DFlash checkpoint: a directory (published layout), a known name (stories260K-dflash, "
      "stories260K-twin-dflash) or auto = the target's shipped head",
      1,
      0,
      {},
      "dflash"};
  RegisterDflashFamilyMethod(
      registry,
      DescribeMethod(
          "dflash",
          "DFlash: a block-diffusion head drafts block_size - 1 tokens in one non-causal forward "
          "from injected target features; chain verification",
          "Chen et al. 2026, DFlash: Block Diffusion for Flash Speculative Decoding",
          SpeculativeTraits("chain_rs", kTraitDraftProbs | kTraitTargetHidden, "drafter"),
          {drafter,
           {"block_size",
            0,
            "rows forwarded per step, drafting block_size - 1 tokens (0 = the head's block size; "
            "larger values add untrained mask rows)",
            0,
            1024,
            {}},
           {"draft_sampling",
            "sample",
            "drafts at T > 0: sample (each row sampled from its distribution, chain rejection "
            "sampling) or argmax (the DFlash reference: greedy rows, sample-then-follow)",
            1,
            0,
            {"sample", "argmax"}}}),
      DflashTreeKind::kChain);
  RegisterDflashFamilyMethod(
      registry,
      DescribeMethod(
          "ddtree",
          "DDTree: a best-first draft tree to a node budget over a DFlash head's per-depth "
          "marginals; tree verification",
          "DDTree (Diffusion Draft Tree) over DFlash drafters",
          SpeculativeTraits("sample_follow", kTraitTree | kTraitTargetHidden, "drafter"),
          {drafter,
           {"budget",
            32,
            "tree node budget (drafted nodes, root excluded, under the default convention)",
            1,
            4096,
            {}},
           BudgetConventionKnob(kBudgetConventionDdtree),
           {"top_k",
            0,
            "candidates per depth (the tree's branching limit); 0 = min(budget, vocab): no cap, "
            "as in the DDTree reference",
            0,
            4096,
            {}},
           TreeBlockSizeKnob()}),
      DflashTreeKind::kBestFirst);
}

}  // namespace specbed
