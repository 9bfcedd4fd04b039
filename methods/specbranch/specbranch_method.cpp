// Registration of `specbranch` (SpecBranchDecoder, specbranch_decoder.h) with its ablations as
// knobs: branch = false (w/o branch: H-RAD + sequential SD), hrad = false (w/o H-RAD).
// Checked by: tests/methods/specbranch_test.cpp.
#include "base/error.h"
#include "methods/common/registration_util.h"
#include "methods/drafter_catalog.h"
#include "methods/method_registry.h"
#include "methods/pearl/speed_ratio.h"
#include "methods/specbranch/hrad.h"
#include "methods/specbranch/specbranch_decoder.h"

namespace specbed {

namespace {

// `specbed twin` of an H-RAD predictor: its input columns padded at the target's width factor.
bool WriteHradTwin(const std::string& source, const std::string& output, int64_t width_factor) {
  if (CheckpointFormatOf(source) != "specbed-hrad") return false;
  const HradCheckpoint twin = HradTwin(LoadHradCheckpoint(source), width_factor);
  WriteHradCheckpoint(output, twin.config, twin.tensors);
  return true;
}

// The shipped H-RAD predictors (it reads target hidden states, so the twin has its own; `specbed
// twin` pads it).
void DeclareHradDrafters(MethodRegistry& registry) {
  registry.AddDrafter({"stories260K-hrad",
                       "hrad",
                       "stories260K",
                       "SpecBranch H-RAD predictor for stories260K + stories260K-draft",
                       "models/stories260K/hrad",
                       {}});
  registry.AddDrafter({"stories260K-twin-hrad",
                       "hrad",
                       "stories260K-twin",
                       "SpecBranch H-RAD predictor for stories260K-twin + stories260K-twin-draft",
                       "models/stories260K/hrad-twin",
                       {}});
  registry.AddTwinWriter(WriteHradTwin);
}

std::vector<MethodKnob> SpecBranchKnobs() {
  std::vector<MethodKnob> knobs = {
      {"gamma_max",
       4,
       "longest draft chunk and branch length (positions); 0 = auto: ceil(c), the measured speed "
       "ratio c = T_target / T_draft of one-token forwards (the paper's rule)",
       0,
       64,
       {}},
      {"k_max",
       4,
       "most branches at a branch point: k = max(1, floor(k_max (1 - conf)))",
       1,
       64,
       {}},
      {"epsilon", 0.2, "confidence threshold (temperature-1 draft probability)", 0, 1, {}},
      {"feature_layers", 4, "K: target layers H-RAD reads (must match the predictor)", 1, 64, {}},
      {"branch", 1, "1 = branch parallelism; 0 = w/o branch (H-RAD + sequential SD)", 0, 1, {}},
      {"hrad", 1, "1 = H-RAD; 0 = w/o H-RAD (fixed gamma_max chunks)", 0, 1, {}},
      DraftLmKnob(),
      {"predictor",
       "auto",
       "H-RAD predictor directory (`specbed train hrad`), a known name (stories260K-hrad, "
       "stories260K-twin-hrad) or auto = the target's shipped one; unused with hrad = 0",
       1,
       0,
       {},
       "hrad"},
  };
  for (MethodKnob& k : SideThreadKnobs()) knobs.push_back(std::move(k));
  return knobs;
}

// The predictor the knobs name, checked against the knob feature_layers.
HradCheckpoint LoadKnobPredictor(const nlohmann::json& knobs, std::string* dir_out = nullptr) {
  const std::string dir = ResolveDrafterDir(knobs.at("predictor").get<std::string>());
  HradCheckpoint ckpt = LoadHradCheckpoint(dir);
  SPECBED_CHECK(ckpt.config.feature_layers == knobs.at("feature_layers").get<int64_t>(),
                "specbranch: predictor '", dir, "' reads K = ", ckpt.config.feature_layers,
                " layers but the knob feature_layers is ", knobs.at("feature_layers"));
  if (dir_out != nullptr) *dir_out = dir;
  return ckpt;
}

std::unique_ptr<Decoder> MakeSpecBranch(MethodContext& context, const nlohmann::json& knobs) {
  LoadedTarget& draft = LoadDraftLm(context, knobs, "specbranch");
  const LlamaConfig& t = context.target->model->config();
  SpecBranchOptions options;
  options.draft_threads = knobs.at("draft_threads").get<int>();
  options.target_threads = knobs.at("target_threads").get<int>();
  options.gamma_max = ResolveChunkKnob(
      knobs.at("gamma_max").get<int64_t>(), "specbranch", "gamma_max", *context.target->model,
      *draft.model, ParallelDecoder::TargetThreads(options.target_threads, options.draft_threads),
      options.draft_threads, 64);
  options.k_max = knobs.at("k_max").get<int64_t>();
  options.epsilon = knobs.at("epsilon").get<double>();
  options.branch = knobs.at("branch").get<int>() != 0;
  options.hrad = knobs.at("hrad").get<int>() != 0;
  std::unique_ptr<HradPolicy> policy;
  std::vector<int64_t> layers;
  if (options.hrad) {
    std::string dir;
    HradCheckpoint ckpt = LoadKnobPredictor(knobs, &dir);
    // A cost twin's predictor (HradTwin) reads the original layers: the twin's feature depth.
    const int64_t trained = ckpt.config.target_layers;
    SPECBED_CHECK(
        ckpt.config.target_dim == t.dim && (trained == t.n_layers || trained == t.FeatureDepth()),
        "specbranch: predictor '", dir, "' was trained for a target of width ",
        ckpt.config.target_dim, " and ", trained, " layers, but the target '",
        context.target->spec.name, "' has ", t.dim, " and ", t.n_layers, " (feature depth ",
        t.FeatureDepth(), ")");
    layers = ckpt.config.Layers();
    policy = std::make_unique<HradPredictor>(ckpt.config, ckpt.tensors);
  }
  return std::make_unique<SpecBranchDecoder>(*context.target->model,
                                             context.target->tokenizer.get(), draft.model,
                                             std::move(policy), layers, options);
}

}  // namespace

void RegisterSpecBranchMethods(MethodRegistry& registry) {
  DeclareHradDrafters(registry);
  MethodInfo info = DescribeMethod(
      "specbranch",
      "SpecBranch: H-RAD (3-class MLP on target features + draft confidence) sets draft lengths "
      "and branch points; k branches are drafted at the branch point while the target verifies "
      "the prefix (two threads); multi-candidate rejection selects one",
      "SpecBranch: Speculative Decoding via Hybrid Drafting and Rollback-Aware Branch Parallelism "
      "(anonymous submission, under review)",
      // chain_rs over the chunk, then the branch rule (AcceptAtSlot)
      SpeculativeTraits("chain_rs+branch_rrs",
                        kTraitDraftProbs | kTraitTargetHidden | kTraitOverlapsVerification,
                        "drafter"),
      SpecBranchKnobs());
  info.validate = [](const nlohmann::json& knobs) {
    if (knobs.at("hrad").get<int>() != 0) LoadKnobPredictor(knobs);
  };
  info.factory = MakeSpecBranch;
  registry.Register(std::move(info));
}

}  // namespace specbed
