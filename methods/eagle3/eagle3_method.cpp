// Registration of `eagle3`: the EAGLE-3 head drafts an EAGLE-2 dynamic tree from three fused
// target hidden states; greedy verification at T = 0, sample-then-follow at T > 0. Knobs use
// EAGLE's own names and meanings (depth = expansions after the first layer, total_tokens = tree
// size including the root).
// Checked by: tests/engine/speculative_test.cpp (MethodRegistry.*),
// tests/methods/eagle3_drafter_test.cpp.
#include "methods/eagle3/eagle3_method.h"

#include "base/error.h"
#include "base/paths.h"
#include "harness/engine/speculative_decoder.h"
#include "methods/common/registration_util.h"
#include "methods/drafter_catalog.h"
#include "methods/eagle3/eagle3_checkpoint.h"
#include "methods/eagle3/eagle3_drafter.h"
#include "methods/method_registry.h"

namespace specbed {

std::string ResolveEagle3Head(const std::string& name_or_path) {
  return ResolveDrafterOrDir(name_or_path, "eagle3", "eagle3: head");
}

Eagle3Checkpoint LoadEagle3HeadFor(const std::string& name_or_path, const LoadedTarget& target) {
  Eagle3Checkpoint ckpt = LoadEagle3Checkpoint(ResolveEagle3Head(name_or_path));
  const LlamaConfig& t = target.model->config();
  Eagle3Config& c = ckpt.config;
  SPECBED_CHECK(c.vocab_size == t.vocab_size, "eagle3: head '", name_or_path, "' has vocab_size ",
                c.vocab_size, " but the target '", target.spec.name, "' has ", t.vocab_size);
  SPECBED_CHECK(c.target_hidden_size == t.dim, "eagle3: head '", name_or_path,
                "' expects target hidden size ", c.target_hidden_size, " but the target '",
                target.spec.name, "' has ", t.dim);
  SPECBED_CHECK(ckpt.tensors.count(kEagle3Embed) || c.hidden_size == t.dim, "eagle3: head '",
                name_or_path, "' has hidden size ", c.hidden_size,
                " and no embed_tokens.weight, "
                "but the target's embedding has width ",
                t.dim);
  // A cost twin's appended identity layers are never feature layers: rules and checks use the
  // original depth (LlamaConfig::FeatureDepth).
  if (c.aux_layer_ids.empty()) c.aux_layer_ids = DefaultEagle3AuxLayers(t.FeatureDepth());
  for (int64_t l : c.aux_layer_ids) {
    SPECBED_CHECK(l >= 0 && l <= t.FeatureDepth(), "eagle3: head '", name_or_path,
                  "' reads target layer ", l, " but the target has ", t.FeatureDepth(),
                  " feature layers");
  }
  return ckpt;
}

void RegisterEagle3Methods(MethodRegistry& registry) {
  registry.AddShippedDrafter("eagle3", "EAGLE-3 head trained on stories260K");
  MethodInfo info = DescribeMethod(
      "eagle3",
      "EAGLE-3: a one-layer head on fused low/mid/high target features drafts a dynamic top-k "
      "tree, reranked to total_tokens",
      "Li et al. 2025, EAGLE-3 (arXiv:2503.01840)",
      SpeculativeTraits("sample_follow", kTraitTree | kTraitTargetHidden, "head"), Eagle3Knobs());
  info.validate = [](const nlohmann::json& knobs) {
    ResolveEagle3Head(knobs.at("head").get<std::string>());
  };
  info.factory = [](MethodContext& context,
                    const nlohmann::json& knobs) -> std::unique_ptr<Decoder> {
    return MakeEagle3Decoder(context, knobs, nullptr);
  };
  registry.Register(std::move(info));
}

std::vector<MethodKnob> Eagle3Knobs() {
  return {
      {"depth",
       7,
       "EAGLE depth: expansions after the first tree layer (tree depth = depth + 1)",
       0,
       31,
       {}},
      {"top_k", 10, "children per expanded node and beam width per layer", 1, 64, {}},
      {"total_tokens",
       60,
       "tree size including the root (drafted nodes = total_tokens - 1)",
       1,
       1024,
       {}},
      {"head",
       "auto",
       "EAGLE-3 head: a known name (stories260K-eagle3, stories260K-twin-eagle3), a checkpoint "
       "directory, or auto = the target's shipped head",
       1,
       0,
       {},
       "eagle3"},
  };
}

std::shared_ptr<const Eagle3Weights> SharedEagle3Weights(MethodContext& context,
                                                         const std::string& name_or_path) {
  const LlamaModel& target = *context.target->model;
  return context.shared->GetOrBuild<const Eagle3Weights>(
      "eagle3 head " + ResolveEagle3Head(name_or_path) + " on " +
          std::to_string(reinterpret_cast<uintptr_t>(&target)),
      [&] {
        const Eagle3Checkpoint ckpt = LoadEagle3HeadFor(name_or_path, *context.target);
        return std::make_shared<const Eagle3Weights>(ckpt.config, ckpt.tensors,
                                                     target.weights().tok_embeddings,
                                                     TargetHeadPlacement(target));
      });
}

std::unique_ptr<Decoder> MakeEagle3Decoder(MethodContext& context, const nlohmann::json& knobs,
                                           Eagle3Drafter** drafter_out) {
  const auto weights = SharedEagle3Weights(context, knobs.at("head").get<std::string>());
  Eagle3DraftOptions o;
  o.depth = knobs.at("depth").get<int64_t>() + 1;
  o.top_k = knobs.at("top_k").get<int64_t>();
  o.nodes = knobs.at("total_tokens").get<int64_t>() - 1;
  SPECBED_CHECK(o.top_k <= weights->config.draft_vocab_size, "eagle3: knob 'top_k' ", o.top_k,
                " exceeds the head's draft vocabulary (", weights->config.draft_vocab_size, ")");
  auto drafter = std::make_unique<Eagle3Drafter>(std::make_unique<Eagle3Head>(weights), o);
  if (drafter_out != nullptr) *drafter_out = drafter.get();
  SpeculativeOptions options;
  options.budget.nodes = o.nodes;
  options.budget.depth = o.depth;
  options.sampling_rule = VerifyRule::kSampleFollow;
  return std::make_unique<SpeculativeDecoder>(
      *context.target->model, context.target->tokenizer.get(), std::move(drafter), options);
}

}  // namespace specbed
