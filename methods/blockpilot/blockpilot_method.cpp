// BlockPilot controllers, the DFlash chain decoder with a controller slot, and the registration
// of `dflash+blockpilot` (see blockpilot_method.h).
// Checked by: tests/methods/blockpilot_test.cpp.
#include "methods/blockpilot/blockpilot_method.h"

#include <ATen/ATen.h>

#include <utility>

#include "base/error.h"
#include "base/mapped_file.h"
#include "methods/common/registration_util.h"
#include "methods/dflash/dflash_method.h"
#include "methods/drafter_catalog.h"
#include "models/checkpoint/head_checkpoint.h"

namespace specbed {

void ApplyBlockSize(DflashDrafter& drafter, int64_t block_size, DraftBudget& budget) {
  drafter.set_block_size(block_size);
  budget.depth = block_size - 1;
  budget.nodes = block_size - 1;
}

BlockPilotController::BlockPilotController(std::shared_ptr<BlockPilotPredictor> predictor,
                                           DflashDrafter* drafter)
    : predictor_(std::move(predictor)), drafter_(drafter) {
  SPECBED_CHECK(predictor_ != nullptr && drafter_ != nullptr,
                "BlockPilot controller needs a predictor and a DFlash drafter");
}

void BlockPilotController::BeginSequence(const DraftBegin& begin, DraftBudget& budget) {
  const at::Tensor& z = begin.last_logits;
  const int64_t vocab = predictor_->config().vocab_size;
  SPECBED_CHECK(
      z.defined() && z.scalar_type() == at::kFloat && z.numel() == vocab && z.is_contiguous(),
      "BlockPilot: the decoder gave no float32 [", vocab,
      "] last-position target logits (DraftBegin::last_logits)");
  last_block_size_ = predictor_->Predict(z.data_ptr<float>());
  ApplyBlockSize(*drafter_, last_block_size_, budget);
}

FixedBlockController::FixedBlockController(DflashDrafter* drafter, int64_t block_size)
    : drafter_(drafter), block_size_(block_size) {
  SPECBED_CHECK(drafter_ != nullptr, "fixed block controller needs a DFlash drafter");
}

void FixedBlockController::BeginSequence(const DraftBegin& begin, DraftBudget& budget) {
  ApplyBlockSize(*drafter_, block_size_, budget);
  if (capture_) {
    const at::Tensor z = begin.last_logits.contiguous();
    SPECBED_CHECK(z.defined() && z.scalar_type() == at::kFloat,
                  "BlockPilot: the decoder gave no float32 last-position target logits");
    last_logits_.assign(z.data_ptr<float>(), z.data_ptr<float>() + z.numel());
  }
}

DflashChainDecoder MakeDflashChainDecoder(MethodContext& context, const std::string& drafter_dir,
                                          const std::string& method) {
  const nlohmann::json knobs = {{"drafter", drafter_dir}, {"block_size", 0}};
  std::unique_ptr<Decoder> decoder =
      MakeDflashFamilyDecoder(context, knobs, DflashTreeKind::kChain, method);
  DflashChainDecoder out;
  out.decoder.reset(dynamic_cast<SpeculativeDecoder*>(decoder.get()));
  SPECBED_CHECK(out.decoder != nullptr, method, ": the DFlash factory did not build a ",
                "SpeculativeDecoder");
  decoder.release();
  out.drafter = dynamic_cast<DflashDrafter*>(&out.decoder->drafter());
  SPECBED_CHECK(out.drafter != nullptr, method, ": the DFlash decoder has no DflashDrafter");
  out.trained_block_size = out.drafter->head().config().block_size;
  return out;
}

namespace {

const char* const kMethod = "dflash+blockpilot";

void CheckPredictorRadius(const BlockPilotConfig& pc, int64_t radius, const std::string& dir) {
  SPECBED_CHECK(pc.radius == radius, kMethod, ": knob 'radius' is ", radius, " but predictor '",
                dir, "' was trained with radius ", pc.radius, " (candidate block sizes ",
                nlohmann::json(pc.candidates).dump(), "); set radius ", pc.radius,
                " or train a predictor with --radius ", radius);
}

}  // namespace

std::unique_ptr<Decoder> MakeBlockPilotDecoder(MethodContext& context,
                                               const std::string& drafter_dir,
                                               const std::string& predictor_dir, int64_t radius) {
  const std::string method = kMethod;
  BlockPilotCheckpoint ckpt = LoadBlockPilotCheckpoint(predictor_dir);
  const BlockPilotConfig& pc = ckpt.config;
  CheckPredictorRadius(pc, radius, predictor_dir);
  DflashChainDecoder chain = MakeDflashChainDecoder(context, drafter_dir, method);
  SPECBED_CHECK(pc.trained_block_size == chain.trained_block_size, method, ": predictor '",
                predictor_dir, "' was labelled with a drafter of block size ",
                pc.trained_block_size, " but drafter '", drafter_dir, "' has block size ",
                chain.trained_block_size);
  const int64_t vocab = context.target->model->config().vocab_size;
  SPECBED_CHECK(pc.vocab_size == vocab, method, ": predictor '", predictor_dir,
                "' reads a vocabulary of ", pc.vocab_size, " but the target '",
                context.target->spec.name, "' has ", vocab);
  auto predictor = std::make_shared<BlockPilotPredictor>(ckpt.config, ckpt.tensors);
  chain.decoder->SetController(
      std::make_unique<BlockPilotController>(std::move(predictor), chain.drafter));
  return std::move(chain.decoder);
}

namespace {

// Up-front checks (before any case runs): the directories exist and the predictor's config.json
// parses and has the knob's radius (the tensors are read by the factory).
void CheckKnobs(const nlohmann::json& knobs) {
  CheckDflashDrafterKnob(knobs, kMethod);
  const std::string dir = ResolveDrafterDir(knobs.at("predictor").get<std::string>());
  SPECBED_CHECK(!dir.empty() && dir != kAutoDrafter, kMethod,
                ": knob 'predictor' must name a BlockPilot predictor directory (config.json + "
                "model.safetensors from `specbed blockpilot train`) or a known one; 'auto' "
                "resolves only for a target with a shipped predictor (stories260K, "
                "stories260K-twin)");
  SPECBED_CHECK(PathExists(dir), kMethod, ": predictor '", dir, "' does not exist");
  const HeadConfigFile file =
      ReadHeadConfig(dir, std::string("BlockPilot predictor '") + dir + "'");
  CheckPredictorRadius(ParseBlockPilotConfig(file.config, file.path),
                       knobs.at("radius").get<int64_t>(), dir);
}

}  // namespace

void RegisterBlockpilotMethods(MethodRegistry& registry) {
  // The predictor reads the target's logits, which the twin reproduces: both targets share it.
  for (const char* target : {"stories260K", "stories260K-twin"}) {
    registry.AddDrafter({"stories260K-blockpilot",
                         "blockpilot",
                         target,
                         "BlockPilot block-size predictor for stories260K-dflash (the twin's "
                         "logits are stories260K's)",
                         "models/stories260K/blockpilot",
                         {}});
  }
  MethodInfo info = DescribeMethod(
      kMethod,
      "BlockPilot: an MLP over the target's last-prompt-position distribution picks the DFlash "
      "block size once per prompt among {B - radius .. B + radius}; DFlash chain drafting and "
      "verification",
      "Zhang et al., BlockPilot: Instance-Adaptive Policy Learning for Diffusion-based "
      "Speculative Decoding (AMAP, Alibaba)",
      SpeculativeTraits("chain_rs", kTraitDraftProbs | kTraitTargetHidden, "drafter"),
      {
          {"drafter",
           "auto",
           "DFlash checkpoint directory (published layout), a known name, or auto = the target's "
           "shipped head",
           1,
           0,
           {},
           "dflash"},
          {"predictor",
           "auto",
           "BlockPilot predictor directory (`specbed blockpilot train`), a known name "
           "(stories260K-blockpilot) or auto = the target's shipped predictor",
           1,
           0,
           {},
           "blockpilot"},
          {"radius",
           2,
           "candidate block sizes B - radius .. B + radius (must match the predictor's)",
           1,
           64,
           {}},
      });
  info.validate = CheckKnobs;
  info.factory = [](MethodContext& context, const nlohmann::json& knobs) {
    return MakeBlockPilotDecoder(context, knobs.at("drafter").get<std::string>(),
                                 ResolveDrafterDir(knobs.at("predictor").get<std::string>()),
                                 knobs.at("radius").get<int64_t>());
  };
  registry.Register(std::move(info));
}

}  // namespace specbed
