// Registration of `specblock`, `specblock+osd` and `specblock+bandit` (see README.md).
// Checked by: tests/methods/specblock_test.cpp, tests/engine/paper_configs_test.cpp.
#include "methods/specblock/specblock_method.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "base/error.h"
#include "base/mapped_file.h"
#include "harness/engine/speculative_decoder.h"
#include "methods/common/registration_util.h"
#include "methods/drafter_catalog.h"
#include "methods/method_registry.h"
#include "methods/osd/osd_adapter.h"
#include "methods/specblock/specblock_bandit.h"
#include "methods/specblock/specblock_drafter.h"
#include "methods/specblock/specblock_loss.h"

namespace specbed {
namespace {

class SpecBlockOsdStudent : public OsdStudent {
 public:
  // The student trains on the target's device in float32 (from the served weights).
  SpecBlockOsdStudent(LlamaModel& target, SpecBlockDrafter& drafter)
      : drafter_(drafter),
        model_(drafter.model().config(), drafter.model().Tensors(), target.weights().tok_embeddings,
               true, TargetHeadPlacement(target)) {}
  std::vector<std::pair<std::string, at::Tensor>> Parameters() const override {
    return model_.named_parameters();
  }
  // Divergence at the corrected positions between the target (as served) and every block-1
  // slot that drafts them (SpecBlockSlotsDrafting; restricted to the draft vocabulary). Each
  // request is whole unless adapt_tokens caps it (OsdOptions::max_tokens), as for the bandit.
  at::Tensor Loss(const OsdBatch& batch, Divergence divergence) override {
    SPECBED_CHECK(batch.features.defined(), "specblock+osd: the served hidden states are missing");
    // The slot rows are found on the host; only the gathered indices go up (one host-to-device
    // copy, in SpecBlockSlotLogits).
    const SpecBlockSlotRows rows =
        SpecBlockSlotsDrafting(batch.host_loss_mask, model_.config().block_size);
    const at::Tensor& seq = rows.seq;  // host: TeacherRowsAtFlat checks it there
    const at::Tensor student =
        SpecBlockSlotLogits(model_, batch.features, batch.tokens, rows, false);
    const at::Tensor teacher = TeacherRowsAtFlat(batch, seq).index_select(-1, model_.draft_ids());
    return DivergenceLoss(teacher, student, divergence);
  }
  // float32 on the device -> the served drafter's dtype, on the device.
  void Publish() override { drafter_.model().CopyFrom(model_); }

 private:
  SpecBlockDrafter& drafter_;
  SpecBlockModel model_;
};

// An online update trains on each buffered request whole (0), or on its last adapt_tokens
// tokens: a cost cap that drops the context before the cut (SpecBlockSlotLogits runs the
// context once without gradients, so the whole request costs its supervised span plus one
// no-grad pass).
MethodKnob AdaptTokensKnob() {
  return {"adapt_tokens",
          0,
          "an online update trains on the last adapt_tokens tokens of each buffered request (0 = "
          "the whole request, the context it was served with; a cap saves update time and drops "
          "the context before it)",
          0,
          1 << 20,
          {}};
}

// The specblock family's MethodInfo: `flags` added to the shared traits (SpeculativeTraits).
MethodInfo SpecBlockInfo(std::string name, std::string description, uint32_t flags) {
  MethodInfo info = DescribeMethod(
      std::move(name), std::move(description),
      "Shi et al., SpecBlock: Block-Iterative Speculative Decoding with Dynamic Tree Drafting",
      SpeculativeTraits("sample_follow", kTraitTree | kTraitTargetHidden | flags, "drafter"),
      SpecBlockKnobs());
  info.validate = [](const nlohmann::json& knobs) {
    ResolveSpecBlockDrafter(knobs.at("drafter").get<std::string>());
    ParseBranching(knobs.at("branching").get<std::string>(), "specblock knob 'branching'");
    if (knobs.contains("adapt_tokens")) {
      const int64_t cap = knobs.at("adapt_tokens").get<int64_t>();
      SPECBED_CHECK(cap == 0 || cap >= 8,
                    "specblock knob 'adapt_tokens' must be 0 (the whole "
                    "request) or >= 8, got ",
                    cap);
    }
  };
  return info;
}

// The knobs specblock+bandit adds to the family's.
std::vector<MethodKnob> BanditKnobs() {
  return {
      {"bandit",
       "on",
       "on = the cost-aware bandit; off = the paper's '- cost-aware bandit' "
       "ablation (every saturated buffer fires, never skips)",
       1,
       0,
       {"on", "off"}},
      {"warmup", 10, "queries that only measure (paper: 10)", 0, 100000, {}},

      {"cold_start", 8, "events with forced exploration (paper: 8)", 0, 1000, {}},
      {"explore",
       0.10,
       "after the cold start, probability that a query probes head/full "
       "(exploration never dies; 0 = the paper: argmax only)",
       0,
       1,
       {}},
      {"reward",
       "category",
       "a query's reward: category = tokens/s over the mean of earlier queries "
       "of its prompt category (a change of prompt mix is no gain or loss); "
       "tps = raw tokens/s (the spec's [R])",
       1,
       0,
       {"category", "tps"}},
      {"buffer", 8, "queries per buffer before it fires", 1, 10000, {}},

      {"interval", 8, "queries per measurement interval / window", 1, 10000, {}},

      {"s_min", 5.0, "smallest trigger signal that updates a value", 0, 1e9, {}},
      {"lr", 1e-4, "AdamW learning rate of an update", 1e-9, 1.0, {}},
      {"steps", 1, "AdamW steps per training event", 1, 1000, {}},
      {"kl_lambda", 0.01, "weight of KL(p_train || p_theta0)", 0, 100, {}},
      {"objective",
       "bandit",
       "an event's loss: bandit = forward KL + rank-head CE + kl_lambda KL "
       "anchor, clipped at 0.5 (spec 5.4); osd = forward KL only, unclipped "
       "(specblock+osd's update, so the two differ only in when they train)",
       1,
       0,
       {"bandit", "osd"}},
      {"log",
       "",
       "one JSON line per window to this file (truncated when the case starts)",
       1,
       0,
       {}},
      AdaptTokensKnob(),
  };
}

}  // namespace

std::string ResolveSpecBlockDrafter(const std::string& name_or_path) {
  return ResolveDrafterOrDir(name_or_path, "specblock", "specblock: drafter");
}

std::vector<MethodKnob> SpecBlockKnobs() {
  return {
      {"drafter",
       "auto",
       "SpecBlock drafter: a known name (stories260K-specblock, stories260K-twin-specblock), a "
       "checkpoint directory, or auto = the target's shipped drafter",
       1,
       0,
       {},
       "specblock"},
      {"block_size", 4, "K: slots per block (must equal the drafter's trained K)", 1, 32, {}},
      {"blocks", 2, "M: blocks (= drafter calls) per iteration", 1, 16, {}},
      {"budget", 60, "drafted nodes per tree, root excluded", 1, 1024, {}},
      {"branching",
       "2,4,10,0",
       "width per rank bucket b0..b3 (top-b tokens attached; 0 ends the block's spine)",
       1,
       0,
       {}},
      {"starts", 4, "most next-block starts per later block", 1, 64, {}},
  };
}

std::unique_ptr<Decoder> MakeSpecBlockDecoder(MethodContext& context, const nlohmann::json& knobs,
                                              SpecBlockDrafter** drafter_out,
                                              VerifyRule sampling_rule) {
  const std::string name = knobs.at("drafter").get<std::string>();
  const SpecBlockCheckpoint ckpt = LoadSpecBlockCheckpoint(ResolveSpecBlockDrafter(name));
  const LlamaConfig& t = context.target->model->config();
  const SpecBlockConfig& c = ckpt.config;
  SPECBED_CHECK(
      c.vocab_size == t.vocab_size && c.target_hidden_size == t.dim && c.hidden_size == t.dim,
      "specblock: drafter '", name, "' (vocab ", c.vocab_size, ", target width ",
      c.target_hidden_size, ", width ", c.hidden_size, ") does not fit target '",
      context.target->spec.name, "' (vocab ", t.vocab_size, ", width ", t.dim, ")");
  for (int64_t l : c.aux_layer_ids) {
    SPECBED_CHECK(l >= 0 && l <= t.FeatureDepth(), "specblock: drafter '", name,
                  "' reads target layer ", l, " but the target has ", t.FeatureDepth(),
                  " feature layers");
  }
  SPECBED_CHECK(knobs.at("block_size").get<int64_t>() == c.block_size, "specblock: knob ",
                "'block_size' is ", knobs.at("block_size").get<int64_t>(), " but drafter '", name,
                "' was trained with K = ", c.block_size, " (K is fixed at training)");
  SpecBlockDraftOptions o;
  o.blocks = knobs.at("blocks").get<int64_t>();
  o.budget = knobs.at("budget").get<int64_t>();
  o.branching = ParseBranching(knobs.at("branching").get<std::string>(), "specblock");
  o.max_starts = knobs.at("starts").get<int64_t>();
  auto model = std::make_unique<SpecBlockModel>(
      c, ckpt.tensors, context.target->model->weights().tok_embeddings, /*trainable=*/false,
      TargetHeadPlacement(*context.target->model));
  auto drafter = std::make_unique<SpecBlockDrafter>(std::move(model), o);
  if (drafter_out != nullptr) *drafter_out = drafter.get();
  SpeculativeOptions options;
  options.budget.nodes = o.budget;
  options.budget.depth = o.blocks * c.block_size;
  options.sampling_rule = sampling_rule;
  return std::make_unique<SpeculativeDecoder>(
      *context.target->model, context.target->tokenizer.get(), std::move(drafter), options);
}

namespace {

// specblock+bandit: the SpecBlock decoder with the cost-aware bandit adapter.
std::unique_ptr<Decoder> MakeBanditDecoder(MethodContext& context, const nlohmann::json& knobs) {
  SpecBlockDrafter* drafter = nullptr;
  std::unique_ptr<Decoder> decoder = MakeSpecBlockDecoder(context, knobs, &drafter);
  BanditOptions o;
  o.gating = knobs.at("bandit").get<std::string>() == "on";
  o.warmup = knobs.at("warmup").get<int64_t>();
  o.cold_start = knobs.at("cold_start").get<int64_t>();
  o.explore = knobs.at("explore").get<double>();
  o.per_category_reward = knobs.at("reward").get<std::string>() == "category";
  o.buffer = knobs.at("buffer").get<int64_t>();
  o.interval = knobs.at("interval").get<int64_t>();
  o.s_min = knobs.at("s_min").get<double>();
  o.lr = knobs.at("lr").get<double>();
  o.steps = knobs.at("steps").get<int64_t>();
  o.max_tokens = knobs.at("adapt_tokens").get<int64_t>();
  o.kl_lambda = knobs.at("kl_lambda").get<double>();
  o.osd_objective = knobs.at("objective").get<std::string>() == "osd";
  static_cast<SpeculativeDecoder*>(decoder.get())
      ->SetAdapter(std::make_unique<SpecBlockBanditAdapter>(
          *context.target->model, *drafter, o, knobs.at("log").get<std::string>(), context.clock));
  return decoder;
}

// Cost-twin padding of a SpecBlock drafter's own tensors: W_cond over fused target features,
// W_fuse over [c ; e ; q] and W_shift over [x_k ; x_{k-1}] (blocks of hidden_size), the K
// position queries, the three input norms, and the rank head over [h ; psi(p)].
std::vector<TwinPadRule> SpecBlockTwinPadRules() {
  using A = TwinAxis;
  const std::pair<const char*, std::vector<A>> by_suffix[] = {
      {"cond.weight", {A::kHidden, A::kTargetHidden}},
      {"fuse.weight", {A::kHidden, A::kHidden}},
      {"queries", {A::kKeep, A::kHidden}},
      {"rank_head.fc1.weight", {A::kKeep, A::kHiddenThenRest}},
      {"rank_head.fc1.bias", {A::kKeep}},
      {"rank_head.fc2.weight", {A::kKeep, A::kKeep}},
      {"rank_head.fc2.bias", {A::kKeep}},
  };
  std::vector<TwinPadRule> rules;
  for (const auto& [suffix, axes] : by_suffix) rules.push_back({TwinSuffixPattern(suffix), axes});
  for (const char* norm : {"norm_c.weight", "norm_e.weight", "norm_q.weight"}) {
    rules.push_back({TwinSuffixPattern(norm), {A::kHidden}, true});
  }
  rules.push_back({"shift\\..*\\.weight", {A::kHidden, A::kHidden}});
  return rules;
}

}  // namespace

void RegisterSpecBlockMethods(MethodRegistry& registry) {
  registry.AddShippedDrafter("specblock", "SpecBlock block drafter trained on stories260K");
  registry.AddTwinPadRules(SpecBlockTwinPadRules());
  {
    MethodInfo info = SpecBlockInfo(
        "specblock",
        "SpecBlock: a block drafter (K dependent slots per call, layer-wise shift) grows a "
        "rank-head-shaped tree in M batched calls",
        0u);
    info.factory = [](MethodContext& context,
                      const nlohmann::json& knobs) -> std::unique_ptr<Decoder> {
      return MakeSpecBlockDecoder(context, knobs, nullptr);
    };
    registry.Register(std::move(info));
  }
  {
    MethodInfo info = SpecBlockInfo(
        "specblock+osd",
        "SpecBlock with always-update OSD: forward KL at the corrected positions every "
        "osd_interval requests",
        kTraitTrainsOnline);
    info.knobs.push_back(
        {"osd_interval", 8, "requests between online updates (paper: 8)", 1, 100000, {}});
    info.knobs.push_back({"osd_steps", 1, "AdamW steps per update", 1, 1000, {}});
    info.knobs.push_back({"osd_lr", 1e-4, "constant AdamW learning rate", 1e-9, 1.0, {}});
    info.knobs.push_back(AdaptTokensKnob());
    info.factory = [](MethodContext& context,
                      const nlohmann::json& knobs) -> std::unique_ptr<Decoder> {
      SpecBlockDrafter* drafter = nullptr;
      std::unique_ptr<Decoder> decoder = MakeSpecBlockDecoder(context, knobs, &drafter);
      OsdOptions o;
      o.interval = knobs.at("osd_interval").get<int64_t>();
      o.steps = knobs.at("osd_steps").get<int64_t>();
      o.lr = knobs.at("osd_lr").get<double>();
      o.divergence = Divergence::kForwardKl;
      o.max_tokens = knobs.at("adapt_tokens").get<int64_t>();
      auto student = std::make_unique<SpecBlockOsdStudent>(*context.target->model, *drafter);
      static_cast<SpeculativeDecoder*>(decoder.get())
          ->SetAdapter(std::make_unique<OsdAdapter>(std::move(student), o));
      return decoder;
    };
    registry.Register(std::move(info));
  }
  {
    MethodInfo info = SpecBlockInfo(
        "specblock+bandit",
        "SpecBlock with the cost-aware bandit: per query skip / head-only / full update chosen "
        "from measured throughput gains (KL anchor, rollback)",
        kTraitTrainsOnline);
    for (MethodKnob& k : BanditKnobs()) info.knobs.push_back(std::move(k));
    info.factory = MakeBanditDecoder;
    registry.Register(std::move(info));
  }
}

}  // namespace specbed
