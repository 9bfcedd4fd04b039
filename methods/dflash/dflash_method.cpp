// Registration of `dflash` (block-diffusion chain drafts, chain rejection sampling at T > 0) and
// `ddtree` (best-first tree over the same head's per-depth marginals, sample-then-follow at
// T > 0). Both take a DFlash checkpoint directory in the published layout (knob `drafter`); the
// head shares the target's embedding and LM head.
// Checked by: tests/methods/dflash_drafter_test.cpp.
#include <ATen/ATen.h>

#include "harness/base/error.h"
#include "harness/base/paths.h"
#include "harness/engine/speculative_decoder.h"
#include "methods/dflash/dflash_checkpoint.h"
#include "methods/dflash/dflash_drafter.h"
#include "methods/method_registry.h"

namespace specbed {
namespace {

void CheckDrafterKnob(const nlohmann::json& knobs, const std::string& method) {
  const std::string dir = knobs.at("drafter").get<std::string>();
  SPECBED_CHECK(!dir.empty(), method, ": knob 'drafter' must name a DFlash checkpoint directory ",
                "(config.json + model.safetensors in the published layout)");
  SPECBED_CHECK(PathExists(dir), method, ": drafter '", dir, "' does not exist");
}

std::unique_ptr<Decoder> MakeDflashDecoder(MethodContext& context, const nlohmann::json& knobs,
                                           bool tree, const std::string& method) {
  CheckDrafterKnob(knobs, method);
  const std::string dir = knobs.at("drafter").get<std::string>();
  const DflashCheckpoint ckpt = LoadDflashCheckpoint(dir);
  const LlamaModel& target = *context.target->model;
  const LlamaConfig& t = target.config();
  const DflashConfig& c = ckpt.config;
  SPECBED_CHECK(c.vocab_size == t.vocab_size && c.hidden_size == t.dim, method, ": drafter '", dir,
                "' (vocab ", c.vocab_size, ", hidden ", c.hidden_size,
                ") does not match the target '", context.target->spec.name, "' (vocab ",
                t.vocab_size, ", hidden ", t.dim, "): the head shares the target's embedding");
  for (int64_t id : c.TargetLayerIds()) {
    SPECBED_CHECK(id >= 0 && id < t.n_layers, method, ": drafter '", dir, "' reads target layer ",
                  id, " but the target has ", t.n_layers, " layers");
  }
  const LlamaWeights& w = target.weights();
  auto head = std::make_unique<DflashHead>(c, ckpt.tensors, w.tok_embeddings, w.lm_head);
  DflashDraftOptions o;
  o.tree = tree;
  o.block_size = knobs.at("block_size").get<int64_t>();
  if (tree) {
    o.top_k = knobs.at("top_k").get<int64_t>();
    o.budget = knobs.at("budget").get<int64_t>();
  }
  auto drafter = std::make_unique<DflashDrafter>(std::move(head), o);
  SpeculativeOptions options;
  const int64_t block = o.block_size > 0 ? o.block_size : c.block_size;
  options.budget.depth = block - 1;
  options.budget.nodes = tree ? o.budget : block - 1;
  options.sampling_rule = tree ? VerifyRule::kSampleFollow : VerifyRule::kChainRs;
  return std::make_unique<SpeculativeDecoder>(
      *context.target->model, context.target->tokenizer.get(), std::move(drafter), options);
}

}  // namespace

void RegisterDflashMethods(MethodRegistry& registry) {
  {
    MethodInfo info;
    info.name = "dflash";
    info.description =
        "DFlash: a block-diffusion head drafts block_size - 1 tokens in one non-causal forward "
        "from injected target features; chain verification";
    info.paper = "Chen et al. 2026, DFlash: Block Diffusion for Flash Speculative Decoding";
    info.traits.speculative = true;
    info.traits.lossless = true;
    info.traits.needs_drafter = true;
    info.traits.needs_draft_probs = true;
    info.traits.needs_target_hidden = true;
    info.traits.sampling_verifier = "chain_rs";
    info.traits.drafter_knob = "drafter";
    info.knobs = {
        {"drafter", "", "DFlash checkpoint directory (published layout)", 1, 0, {}},
        {"block_size", 0, "block size used (0 = the head's; at most the head's)", 0, 1024, {}},
    };
    info.validate = [](const nlohmann::json& knobs) { CheckDrafterKnob(knobs, "dflash"); };
    info.factory = [](MethodContext& context, const nlohmann::json& knobs) {
      return MakeDflashDecoder(context, knobs, /*tree=*/false, "dflash");
    };
    registry.Register(std::move(info));
  }
  {
    MethodInfo info;
    info.name = "ddtree";
    info.description =
        "DDTree: a best-first draft tree to a node budget over a DFlash head's per-depth "
        "marginals; tree verification";
    info.paper = "DDTree (Diffusion Draft Tree) over DFlash drafters";
    info.traits.speculative = true;
    info.traits.lossless = true;
    info.traits.tree = true;
    info.traits.needs_drafter = true;
    info.traits.needs_target_hidden = true;
    info.traits.sampling_verifier = "sample_follow";
    info.traits.drafter_knob = "drafter";
    info.knobs = {
        {"drafter", "", "DFlash checkpoint directory (published layout)", 1, 0, {}},
        {"budget", 32, "drafted tree nodes (root excluded)", 1, 4096, {}},
        {"top_k", 8, "candidates per depth (the tree's branching limit)", 1, 256, {}},
        {"block_size",
         0,
         "block size used (0 = the head's); tree depth <= block_size - 1",
         0,
         1024,
         {}},
    };
    info.validate = [](const nlohmann::json& knobs) { CheckDrafterKnob(knobs, "ddtree"); };
    info.factory = [](MethodContext& context, const nlohmann::json& knobs) {
      return MakeDflashDecoder(context, knobs, /*tree=*/true, "ddtree");
    };
    registry.Register(std::move(info));
  }
}

}  // namespace specbed
