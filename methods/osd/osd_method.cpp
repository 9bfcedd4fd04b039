// Registration of `sps+osd` and `eagle3+osd`: the `sps` / `eagle3` decoders with an OsdAdapter
// whose student is a trainable twin of the served drafter (TrainableLlama for the SpS draft LM,
// TrainableEagle3 for the EAGLE-3 head). Each case starts from the drafter's stored weights; the
// stream of a case is its prompts in dataset order (no shuffling), and updates persist across the
// case's prompts (never across cases).
// Checked by: tests/methods/osd_test.cpp, tests/engine/speculative_test.cpp (MethodRegistry.*).
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "base/error.h"
#include "harness/engine/speculative_decoder.h"
#include "methods/common/registration_util.h"
#include "methods/common/train/trainable_llama.h"
#include "methods/eagle3/eagle3_drafter.h"
#include "methods/eagle3/eagle3_method.h"
#include "methods/eagle3/trainable_eagle3.h"
#include "methods/method_registry.h"
#include "methods/osd/osd_adapter.h"
#include "methods/sps/sps_drafter.h"
#include "methods/sps/sps_method.h"
#include "models/checkpoint/hf_checkpoint.h"

namespace specbed {
namespace {

// A served draft LM from HF tensors, on `like`'s device and in its dtype (the target's).
std::shared_ptr<LlamaModel> ServedDraft(const LlamaConfig& config,
                                        std::map<std::string, at::Tensor> tensors,
                                        const LlamaModel& like, const std::string& source) {
  for (auto& [name, t] : tensors) t = t.to(like.device(), like.dtype());
  return std::make_shared<LlamaModel>(config, WeightsFromHfTensors(config, tensors, source));
}

// Rows of `x` ([B, T, V] on any device) where `host_mask` (float [B, T] on the CPU) is set:
// [N, V] on x's device. The indices are found on the host and go up in one host-to-device copy
// (none on the CPU): no device-to-host copy.
at::Tensor MaskedRows(const at::Tensor& x, const at::Tensor& host_mask) {
  const at::Tensor idx = host_mask.reshape(-1).nonzero().reshape(-1).to(x.device());
  return x.reshape({-1, x.size(-1)}).index_select(0, idx);
}

class SpsOsdStudent : public OsdStudent {
 public:
  // The student trains on the served draft LM's device (the target's), in float32.
  SpsOsdStudent(SpsDrafter& drafter, const HfModel& draft)
      : drafter_(drafter), model_(draft.config, draft.tensors) {
    model_.To(drafter_.model().device());
  }

  std::vector<std::pair<std::string, at::Tensor>> Parameters() const override {
    return model_.named_parameters();
  }
  at::Tensor Loss(const OsdBatch& batch, Divergence divergence) override {
    const at::Tensor student = model_.Forward(batch.tokens);
    return DivergenceLoss(batch.teacher_rows, MaskedRows(student, batch.host_loss_mask),
                          divergence);
  }
  void Publish() override {
    // The served draft LM keeps its device and dtype (the target's): a copy on the device.
    drafter_.ReplaceModel(
        ServedDraft(model_.config(), model_.HfTensors(), drafter_.model(), "sps+osd student"));
  }

 private:
  SpsDrafter& drafter_;
  TrainableLlama model_;
};

class Eagle3OsdStudent : public OsdStudent {
 public:
  Eagle3OsdStudent(LlamaModel& target, Eagle3Drafter& drafter, const Eagle3Checkpoint& ckpt,
                   int64_t ttt_steps)
      : target_(target),
        drafter_(drafter),
        model_(ckpt.config, ckpt.tensors, target.weights().tok_embeddings),
        ttt_steps_(ttt_steps) {
    // The vocabulary maps stay on the host for Publish (Eagle3Head reads d2t there).
    for (const char* name : {kEagle3D2t, kEagle3T2d}) {
      if (ckpt.tensors.count(name)) host_maps_[name] = ckpt.tensors.at(name);
    }
    model_.To(target.device());  // trains on the target's device, in float32
  }

  std::vector<std::pair<std::string, at::Tensor>> Parameters() const override {
    return model_.named_parameters();
  }
  // The TTT objective restricted to the recorded positions: unrolled step k row t is supervised
  // by the target at position t + 1 + k when that position is masked.
  at::Tensor Loss(const OsdBatch& batch, Divergence divergence) override {
    SPECBED_CHECK(batch.features.defined(), "eagle3+osd: the served hidden states are missing");
    const auto logits = model_.Forward(batch.features, batch.tokens, ttt_steps_);
    const int64_t t = batch.tokens.size(1);
    at::Tensor total;
    double weight = 1.0;
    for (int64_t k = 0; k < ttt_steps_ && k + 1 < t; ++k) {
      const int64_t shift = k + 1;
      const at::Tensor mask = batch.host_loss_mask.narrow(1, shift, t - shift);
      // The masked positions from `shift` on, in the batch's layout (row-major, as MaskedRows).
      at::Tensor full_mask = batch.host_loss_mask.clone();
      full_mask.narrow(1, 0, shift).zero_();
      const at::Tensor teacher_rows =
          TeacherRowsAt(batch, full_mask).index_select(-1, model_.draft_ids());
      const at::Tensor student_rows = MaskedRows(logits[k].narrow(1, 0, t - shift), mask);
      const at::Tensor term = DivergenceLoss(teacher_rows, student_rows, divergence) * weight;
      total = total.defined() ? total + term : term;
      weight *= 0.8;
    }
    return total;
  }
  void Publish() override {
    // Weights device to device, cast to the served head's placement; d2t / t2d from the host.
    std::map<std::string, at::Tensor> tensors = model_.Tensors();
    for (const auto& [name, t] : host_maps_) tensors[name] = t;
    drafter_.ReplaceHead(std::make_unique<Eagle3Head>(
        model_.config(), tensors, target_.weights().tok_embeddings, drafter_.head().placement()));
  }

 private:
  LlamaModel& target_;
  Eagle3Drafter& drafter_;
  TrainableEagle3 model_;
  int64_t ttt_steps_;
  std::map<std::string, at::Tensor> host_maps_;  // d2t, t2d of the checkpoint (CPU, constant)
};

std::vector<MethodKnob> OsdKnobs() {
  return {
      {"osd_interval", 8, "requests between online updates (OSD: 8)", 1, 100000, {}},
      {"osd_steps", 1, "AdamW steps per update", 1, 1000, {}},
      {"osd_lr", 3e-4, "constant AdamW learning rate of the updates", 1e-9, 1.0, {}},
      {"osd_divergence",
       "forward_kl",
       "divergence at the corrected positions",
       1,
       0,
       {"forward_kl", "reverse_kl", "jsd"}},
      {"osd_max_tokens",
       0,
       "a buffered request keeps its last osd_max_tokens tokens (0 = the whole request, the "
       "context it was served with; a cap saves update time and drops the context before it)",
       0,
       65536,
       {}},
      {"osd_supervise",
       "rejected",
       "supervised tokens: rejected (bonus where every drafted child was rejected) or round_end "
       "(every step's last token, as the OSD reference code)",
       1,
       0,
       {"rejected", "round_end"}},
  };
}

OsdOptions OsdOptionsFrom(const nlohmann::json& knobs) {
  OsdOptions o;
  o.interval = knobs.at("osd_interval").get<int64_t>();
  o.steps = knobs.at("osd_steps").get<int64_t>();
  o.lr = knobs.at("osd_lr").get<double>();
  o.divergence = ParseDivergence(knobs.at("osd_divergence").get<std::string>(), "osd");
  o.max_tokens = knobs.at("osd_max_tokens").get<int64_t>();
  o.supervise_round_end = knobs.at("osd_supervise").get<std::string>() == "round_end";
  return o;
}

void FillOsdTraits(MethodTraits& t) {
  t.trains_online = true;
  t.lossless = true;  // updates change the drafts, never the verification
}

}  // namespace

void RegisterOsdMethods(MethodRegistry& registry) {
  {
    MethodInfo info = registry.Info("sps");
    info.name = "sps+osd";
    info.description =
        "SpS whose draft LM is distilled online (OSD): forward KL at the corrected positions "
        "every osd_interval requests";
    info.paper = "Liu et al. 2024, Online Speculative Decoding (arXiv:2310.07177)";
    FillOsdTraits(info.traits);
    for (const MethodKnob& k : OsdKnobs()) info.knobs.push_back(k);
    info.factory = [](MethodContext& context,
                      const nlohmann::json& knobs) -> std::unique_ptr<Decoder> {
      LoadedTarget& draft = LoadDraftLm(context, knobs, "sps+osd");
      SPECBED_CHECK(draft.spec.format == "hf", "sps+osd: draft '", draft.spec.name, "' is a ",
                    draft.spec.format, " checkpoint; online training needs a Hugging Face ",
                    "directory (config.json + safetensors)");
      const HfModel stored = ReadHfCheckpoint(draft.spec.path, at::kFloat);
      // The served draft starts as a private copy on the shared model's device and dtype:
      // updates never touch the shared model.
      auto drafter = std::make_unique<SpsDrafter>(
          ServedDraft(stored.config, stored.tensors, *draft.model, draft.spec.path));
      auto student = std::make_unique<SpsOsdStudent>(*drafter, stored);
      return std::make_unique<SpeculativeDecoder>(
          *context.target->model, context.target->tokenizer.get(), std::move(drafter),
          SpsOptions(knobs.at("gamma").get<int64_t>()), nullptr,
          std::make_unique<OsdAdapter>(std::move(student), OsdOptionsFrom(knobs)));
    };
    registry.Register(std::move(info));
  }
  {
    MethodInfo info = registry.Info("eagle3");
    info.name = "eagle3+osd";
    info.description =
        "EAGLE-3 whose head is trained online (OSD): the TTT loss at the corrected positions "
        "every osd_interval requests";
    info.paper =
        "Li et al. 2025, EAGLE-3 (arXiv:2503.01840) + Liu et al. 2024, OSD (arXiv:2310.07177)";
    FillOsdTraits(info.traits);
    for (const MethodKnob& k : OsdKnobs()) info.knobs.push_back(k);
    info.knobs.push_back({"osd_ttt_steps", 3, "unrolled TTT steps of the online loss", 1, 16, {}});
    info.factory = [](MethodContext& context,
                      const nlohmann::json& knobs) -> std::unique_ptr<Decoder> {
      Eagle3Drafter* drafter = nullptr;
      nlohmann::json base = knobs;
      std::unique_ptr<Decoder> decoder = MakeEagle3Decoder(context, base, &drafter);
      const Eagle3Checkpoint ckpt =
          LoadEagle3HeadFor(knobs.at("head").get<std::string>(), *context.target);
      auto student = std::make_unique<Eagle3OsdStudent>(*context.target->model, *drafter, ckpt,
                                                        knobs.at("osd_ttt_steps").get<int64_t>());
      auto* spec = static_cast<SpeculativeDecoder*>(decoder.get());
      spec->SetAdapter(std::make_unique<OsdAdapter>(std::move(student), OsdOptionsFrom(knobs)));
      return decoder;
    };
    registry.Register(std::move(info));
  }
}

}  // namespace specbed
