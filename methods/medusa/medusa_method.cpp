// Registration of `medusa`: Medusa-1 heads draft a sparse tree from the target's last hidden
// state (MedusaDrafter) on the default SpeculativeDecoder; `sample_follow` at T > 0 (lossless;
// Medusa's typical acceptance, which is lossy, is not built).
// Checked by: tests/methods/medusa_test.cpp.
#include <algorithm>

#include "base/error.h"
#include "base/mapped_file.h"
#include "methods/common/registration_util.h"
#include "methods/drafter_catalog.h"
#include "methods/medusa/medusa_drafter.h"
#include "methods/method_registry.h"

namespace specbed {
namespace {

std::string ResolveMedusaHead(const std::string& name_or_path) {
  return ResolveDrafterOrDir(name_or_path, "medusa", "medusa: head");
}

MedusaOptions OptionsOf(const nlohmann::json& knobs) {
  MedusaOptions o;
  o.tree_nodes = knobs.at("tree_nodes").get<int64_t>();
  o.top_k = knobs.at("top_k").get<int64_t>();
  o.tree = ParseMedusaTree(knobs.at("tree").get<std::string>(), "medusa knob tree");
  o.choices = knobs.at("choices").get<std::string>();
  return o;
}

}  // namespace

void RegisterMedusaMethods(MethodRegistry& registry) {
  registry.AddShippedDrafter("medusa", "Medusa-1 heads (4) trained on stories260K",
                             {"medusa", kStoriesTwinWidthFactor, "medusa_lm_head.safetensors"});
  // The published Medusa layout: residual blocks "{k}.{j}.linear.weight/bias" over the hidden
  // width, lm_heads "{k}.{L}.weight" [vocab, hidden].
  registry.AddTwinPadRules({{".*\\.linear\\.weight", {TwinAxis::kHidden, TwinAxis::kHidden}},
                            {".*\\.linear\\.bias", {TwinAxis::kHidden}},
                            {"[0-9]+\\.[0-9]+\\.weight", {TwinAxis::kKeep, TwinAxis::kHidden}}});
  MethodInfo info = DescribeMethod(
      "medusa",
      "Medusa-1: K residual heads on the target's last hidden state predict tokens t+2..t+K+1; "
      "their top-k candidates fill a static sparse tree verified in one forward",
      "Cai et al., Medusa (ICML 2024, arXiv:2401.10774)",
      SpeculativeTraits("sample_follow", kTraitTree | kTraitTargetHidden, "head"),
      {
          {"tree_nodes",
           16,
           "nodes of the sparse tree (the most likely rank paths; ignored when choices is set)",
           1,
           256,
           {}},
          {"tree",
           "auto",
           "calibrated = Medusa's: paths ranked by the heads' measured per-rank accuracies "
           "(config.json's specbed_calibration); prior = a geometric prior over ranks; auto = "
           "calibrated when the heads carry a calibration, else prior",
           1,
           0,
           {"auto", "calibrated", "prior"}},
          {"top_k", 10, "candidates read from each head (Medusa: 10)", 1, 64, {}},
          {"choices",
           "",
           "a sparse tree in Medusa's choices format, e.g. [[0], [0, 0], [1]] (JSON rank paths; "
           "paste a published one such as the 63-node mc_sim_7b_63); empty = the prior tree",
           1,
           0,
           {}},
          {"head",
           "auto",
           "Medusa heads: a known name (stories260K-medusa, stories260K-twin-medusa), a checkpoint "
           "directory in the published layout, or auto = the target's shipped heads",
           1,
           0,
           {},
           "medusa"},
      });
  info.validate = [](const nlohmann::json& knobs) {
    ResolveMedusaHead(knobs.at("head").get<std::string>());
    const MedusaOptions o = OptionsOf(knobs);
    if (!o.choices.empty()) {
      MedusaConfig any_heads;
      any_heads.num_heads = 64;
      MedusaTemplate(o, any_heads, "medusa knob choices");
    }
  };
  info.factory = [](MethodContext& context, const nlohmann::json& knobs) {
    LlamaModel& target = *context.target->model;
    const std::string dir = ResolveMedusaHead(knobs.at("head").get<std::string>());
    // One copy of the heads for every slot's drafter (read once, one DraftBatchKey).
    std::shared_ptr<const MedusaHead> head = context.shared->GetOrBuild<const MedusaHead>(
        "medusa heads " + dir + " on " + std::to_string(reinterpret_cast<uintptr_t>(&target)), [&] {
          return MedusaHeadOn(
              ReadMedusaCheckpoint(dir, target.config().dim, target.config().vocab_size), target);
        });
    const MedusaOptions o = OptionsOf(knobs);
    auto drafter = std::make_unique<MedusaDrafter>(target, std::move(head), o);
    DraftBudget budget{static_cast<int64_t>(drafter->tree_template().size()), 0};
    for (const TemplateNode& n : drafter->tree_template()) {
      budget.depth = std::max<int64_t>(budget.depth, n.depth);
    }
    return SampleFollowDecoder(context, std::move(drafter), budget);
  };
  registry.Register(std::move(info));
}

}  // namespace specbed
