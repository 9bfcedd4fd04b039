// Registration of `ltd`, `eagle3+ddd`, `eagle3+svip`, `eagle3+gammatune`, `eagle3+disco`,
// `eagle3+specdecpp`, `eagle3+c2t` (see ltd_method.h).
// Checked by: tests/methods/ltd_test.cpp, tests/engine/speculative_test.cpp.
#include "methods/ltd/ltd_method.h"

#include <cmath>
#include <functional>
#include <sstream>

#include "base/error.h"
#include "base/paths.h"
#include "methods/common/registration_util.h"
#include "methods/drafter_catalog.h"
#include "methods/eagle3/eagle3_method.h"
#include "methods/ltd/ltd_classifiers.h"
#include "methods/ltd/ltd_controllers.h"
#include "methods/ltd/ltd_policy.h"

namespace specbed {

std::unique_ptr<SpeculativeDecoder> MakeLtdEagle3Decoder(MethodContext& context,
                                                         const std::string& head, int64_t top_k,
                                                         int64_t max_rounds, int64_t max_nodes,
                                                         std::unique_ptr<Controller> controller,
                                                         Eagle3Drafter** drafter_out) {
  const auto weights = SharedEagle3Weights(context, head);
  Eagle3DraftOptions o;
  o.depth = max_rounds + 1;
  o.top_k = top_k;
  o.nodes = max_nodes;
  o.report_generated = true;
  SPECBED_CHECK(o.top_k <= weights->config.draft_vocab_size, "knob 'top_k' ", o.top_k,
                " exceeds the head's draft vocabulary (", weights->config.draft_vocab_size, ")");
  auto drafter = std::make_unique<Eagle3Drafter>(std::make_unique<Eagle3Head>(weights), o);
  if (drafter_out != nullptr) *drafter_out = drafter.get();
  SpeculativeOptions options;
  options.budget.nodes = max_nodes;
  options.budget.depth = max_rounds + 1;
  options.sampling_rule = VerifyRule::kSampleFollow;
  return std::make_unique<SpeculativeDecoder>(*context.target->model,
                                              context.target->tokenizer.get(), std::move(drafter),
                                              options, std::move(controller));
}

std::string ResolveLtdPolicyDir(const std::string& name_or_path) {
  return ResolveDrafterOrDir(name_or_path, "ltd", "ltd: policy");
}

namespace {

MethodTraits Eagle3LikeTraits() {
  return SpeculativeTraits("sample_follow", kTraitTree | kTraitTargetHidden, "head");
}

// MakeLtdEagle3Decoder with the knobs `head` and `top_k`.
std::unique_ptr<SpeculativeDecoder> DecoderFromKnobs(MethodContext& context,
                                                     const nlohmann::json& knobs, int64_t rounds,
                                                     int64_t nodes,
                                                     std::unique_ptr<Controller> controller) {
  return MakeLtdEagle3Decoder(context, knobs.at("head").get<std::string>(),
                              knobs.at("top_k").get<int64_t>(), rounds, nodes,
                              std::move(controller));
}

MethodKnob HeadKnob() {
  return {"head",
          "auto",
          "EAGLE-3 head: a known name (stories260K-eagle3, stories260K-twin-eagle3), a checkpoint "
          "directory, or auto = the target's shipped head",
          1,
          0,
          {},
          "eagle3"};
}

std::vector<int64_t> ParseRounds(const std::string& text, const std::string& knob) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      SPECBED_CHECK(used == item.size() && v >= 1, "");
      out.push_back(v);
    } catch (...) {
      Fail("knob '", knob,
           "': expected a comma-separated list of rounds >= 1 (e.g. \"5,7,9\"), "
           "got \"",
           text, "\"");
    }
  }
  SPECBED_CHECK(!out.empty(), "knob '", knob, "' names no round");
  return out;
}

std::shared_ptr<LtdPolicy> LoadPolicyPart(const std::string& dir, const char* part,
                                          LtdPolicyKind kind, int64_t top_k, int64_t max_depth) {
  const std::string path = dir + "/" + part;
  SPECBED_CHECK(PathExists(path + "/config.json"), "ltd: policy directory '", dir, "' has no ",
                part, "/config.json (the knob 'policies' asks for the ", part, " policy)");
  LtdPolicyCheckpoint ckpt = LoadLtdPolicy(path);
  SPECBED_CHECK(ckpt.config.kind == kind, "ltd: '", path, "/config.json' holds a ",
                LtdPolicyKindName(ckpt.config.kind), " policy, expected ", part);
  SPECBED_CHECK(ckpt.config.top_k == top_k && ckpt.config.max_depth == max_depth, "ltd: '", path,
                "' was trained for top_k ", ckpt.config.top_k, " and max_depth ",
                ckpt.config.max_depth, ", but the knobs say top_k ", top_k, " and max_depth ",
                max_depth);
  return std::make_shared<LtdPolicy>(std::move(ckpt));
}

void RegisterLtd(MethodRegistry& registry) {
  MethodInfo info = DescribeMethod(
      "ltd",
      "LTD: learned depth (pi_D) and verification-size (pi_V) policies, trained with PPO on "
      "measured throughput, steer the EAGLE-3 tree drafter",
      "Zhang et al. 2026, Learning to Draft (ICLR 2026)", Eagle3LikeTraits(),
      {
          HeadKnob(),
          {"policy",
           "auto",
           "policy pair: a known name (stories260K-twin-ltd), a directory with depth/ and size/, "
           "or "
           "auto = the target's shipped pair",
           1,
           0,
           {},
           "ltd"},
          {"policies",
           "both",
           "which learned policies drive the tree",
           1,
           0,
           {"both", "size", "depth"}},
          {"top_k", 10, "beam width W (children per expanded node); must match the policies", 1,
           64},
          {"max_depth", 12, "most expansion rounds D (the depth policy's ceiling)", 1, 31},
          {"depth", 8, "static expansion rounds when the depth policy is off (policies=size)", 1,
           31},
          {"total_tokens", 61,
           "static tree size incl. the root when the size policy is off (policies=depth): V = "
           "total_tokens - 1 (LTD's depth environment verifies 60 drafts)",
           2, 1025},
          {"depth_every", 0, "ask pi_D after every n-th round; 0 = the policy's own setting", 0,
           31},
      });
  info.validate = [](const nlohmann::json& knobs) {
    ResolveEagle3Head(knobs.at("head").get<std::string>());
    ResolveLtdPolicyDir(knobs.at("policy").get<std::string>());
  };
  info.factory = [](MethodContext& context,
                    const nlohmann::json& knobs) -> std::unique_ptr<Decoder> {
    return MakeLtdDecoder(context, knobs, nullptr);
  };
  registry.Register(std::move(info));
}

std::vector<MethodKnob> DynamicDepthKnobs() {
  return {
      HeadKnob(),
      {"top_k", 10, "beam width W (children per expanded node)", 1, 64},
      {"max_depth", 12, "most expansion rounds D", 1, 31},
      {"total_tokens", 61, "tree size incl. the root (LTD: V = 60 drafts verified)", 2, 1025},
  };
}

// A dynamic-depth baseline on the EAGLE-3 drafter, declared: its name and paper, the knobs it
// adds to DynamicDepthKnobs, an optional extra knob check, and its controller built from the
// knobs with rounds = max_depth and nodes = total_tokens - 1.
struct DepthBaseline {
  std::string name, description, paper;
  std::vector<MethodKnob> knobs;
  std::function<void(const nlohmann::json&)> validate;  // after the head check; may be empty
  std::function<std::unique_ptr<Controller>(const nlohmann::json& knobs, int64_t rounds,
                                            int64_t nodes)>
      controller;
};

void RegisterDepthBaseline(MethodRegistry& registry, DepthBaseline b) {
  MethodInfo info =
      DescribeMethod(b.name, b.description, b.paper, Eagle3LikeTraits(), DynamicDepthKnobs());
  for (MethodKnob& k : b.knobs) info.knobs.push_back(std::move(k));
  info.validate = [extra = b.validate](const nlohmann::json& knobs) {
    ResolveEagle3Head(knobs.at("head").get<std::string>());
    if (extra) extra(knobs);
  };
  info.factory = [make = b.controller](MethodContext& context,
                                       const nlohmann::json& knobs) -> std::unique_ptr<Decoder> {
    const int64_t rounds = knobs.at("max_depth").get<int64_t>();
    const int64_t nodes = knobs.at("total_tokens").get<int64_t>() - 1;
    return DecoderFromKnobs(context, knobs, rounds, nodes, make(knobs, rounds, nodes));
  };
  registry.Register(std::move(info));
}

void RegisterDdd(MethodRegistry& registry) {
  RegisterDepthBaseline(
      registry,
      {"eagle3+ddd",
       "EAGLE-3 with DDD dynamic depth: stop at checkpoint rounds when the beam's summed path "
       "probability falls below a threshold",
       "Brown et al. 2024, Dynamic Depth Decoding (as configured by LTD, App. A.1)",
       {{"check_rounds", "5,7,9", "rounds after which DDD checks", 1, 0},
        {"threshold", -0.3, "stop when log sum_beam exp(score) < threshold", -100, 0}},
       [](const nlohmann::json& knobs) {
         ParseRounds(knobs.at("check_rounds").get<std::string>(), "check_rounds");
       },
       [](const nlohmann::json& knobs, int64_t rounds, int64_t nodes) {
         return std::make_unique<DddController>(
             rounds, nodes,
             ParseRounds(knobs.at("check_rounds").get<std::string>(), "check_rounds"),
             knobs.at("threshold").get<double>());
       }});
}

void RegisterSvip(MethodRegistry& registry) {
  RegisterDepthBaseline(
      registry,
      {"eagle3+svip",
       "EAGLE-3 with SVIP dynamic depth: stop when the draft entropy implies a low acceptance "
       "bound",
       "Zhang et al. 2024c, SVIP (as configured by LTD, App. A.1)",
       {{"entropy_factor", 0.15, "c in the bound 1 - sqrt(c * H)", 0, 10},
        {"min_entropy", 0.3, "entropy floor h_min (nats)", 0, 100}},
       nullptr,
       [](const nlohmann::json& knobs, int64_t rounds, int64_t nodes) {
         return std::make_unique<SvipController>(rounds, nodes,
                                                 knobs.at("entropy_factor").get<double>(),
                                                 knobs.at("min_entropy").get<double>());
       }});
}

void RegisterGammatune(MethodRegistry& registry) {
  MethodInfo info = DescribeMethod(
      "eagle3+gammatune",
      "EAGLE-3 with Gammatune: the depth deepens after a fully accepted tree and otherwise "
      "follows a smoothed count of accepted drafts",
      "Gautam et al. 2025, Gammatune (settings of LTD, App. A.1)", Eagle3LikeTraits(),
      {
          HeadKnob(),
          {"top_k", 10, "beam width W (children per expanded node)", 1, 64},
          {"depth", 8,
           "expansion rounds gamma starts at (the other baselines' D); gamma in [depth / 2, "
           "1.5 depth]",
           2, 20},
          {"eta", 0.2, "adaptation rate of the smoothed accepted count", 0.001, 1},
          {"grow", 2,
           "rounds added after a fully accepted tree (the switching rule's growth branch); 0 = "
           "smoothing alone",
           0, 8},
          {"total_tokens", 61, "tree size incl. the root (LTD: V = 60 drafts verified)", 2, 1025},
      });
  info.validate = [](const nlohmann::json& knobs) {
    ResolveEagle3Head(knobs.at("head").get<std::string>());
  };
  info.factory = [](MethodContext& context,
                    const nlohmann::json& knobs) -> std::unique_ptr<Decoder> {
    // gamma in rounds, as D of the other baselines: 8 by default, bounds 4 and 12 as the LTD
    // paper sets them (1/2 and 3/2 of the default depth).
    const int64_t d = knobs.at("depth").get<int64_t>();
    const int64_t nodes = knobs.at("total_tokens").get<int64_t>() - 1;
    auto c = std::make_unique<GammatuneController>(nodes, d, std::max<int64_t>(1, d / 2), d * 3 / 2,
                                                   knobs.at("eta").get<double>(),
                                                   knobs.at("grow").get<int64_t>());
    const int64_t rounds = c->max_rounds();
    return DecoderFromKnobs(context, knobs, rounds, nodes, std::move(c));
  };
  registry.Register(std::move(info));
}

MethodKnob ClassifierKnob() {
  return {"classifier",
          "auto",
          "trained classifiers: a known name (stories260K-ltd-baselines, "
          "stories260K-twin-ltd-baselines), a directory with "
          "disco/, specdecpp/ and c2t/ (what `specbed train ltd-baselines` writes), or auto = the "
          "target's shipped set",
          1,
          0,
          {},
          "ltd-baselines"};
}

std::shared_ptr<LtdClassifier> LoadClassifierFor(const nlohmann::json& knobs,
                                                 LtdClassifierKind kind) {
  const std::string dir = ResolveLtdClassifierDir(knobs.at("classifier").get<std::string>()) + "/" +
                          LtdClassifierKindName(kind);
  LtdClassifierCheckpoint ckpt = LoadLtdClassifier(dir);
  SPECBED_CHECK(ckpt.config.kind == kind, "'", dir, "' holds a ",
                LtdClassifierKindName(ckpt.config.kind), " classifier, expected ",
                LtdClassifierKindName(kind));
  SPECBED_CHECK(ckpt.config.top_k == knobs.at("top_k").get<int64_t>(), "'", dir,
                "' was trained for top_k ", ckpt.config.top_k, ", but the knob says top_k ",
                knobs.at("top_k").get<int64_t>());
  return std::make_shared<LtdClassifier>(std::move(ckpt));
}

void RegisterClassifierDepth(MethodRegistry& registry, LtdClassifierKind kind) {
  const bool disco = kind == LtdClassifierKind::kDisco;
  RegisterDepthBaseline(
      registry,
      {std::string("eagle3+") + LtdClassifierKindName(kind),
       disco ? "EAGLE-3 with Disco dynamic depth: an FFN on the beam's probabilities, the entropy "
               "and the round predicts acceptance; stop below a threshold"
             : "EAGLE-3 with SpecDec++ dynamic depth: a residual FFN on the drafter's hidden "
               "state predicts acceptance; stop below a threshold",
       disco ? "Mamou et al. 2024, Disco (as configured by LTD, App. A.1)"
             : "Huang et al. 2025a, SpecDec++ (as configured by LTD, App. A.1)",
       {ClassifierKnob(),
        {"threshold", 0.5,
         "continue drafting while the predicted acceptance >= this (papers: not reported)", 0, 1}},
       nullptr,
       [kind](const nlohmann::json& knobs, int64_t rounds, int64_t nodes) {
         return std::make_unique<ClassifierDepthController>(
             LoadClassifierFor(knobs, kind), rounds, nodes, knobs.at("threshold").get<double>());
       }});
}

void RegisterC2t(MethodRegistry& registry) {
  MethodInfo info = DescribeMethod(
      "eagle3+c2t",
      "EAGLE-3 with C2T dynamic size: an FFN on each candidate's (score, depth) decides how many "
      "candidates the target verifies",
      "Huo et al. 2025, C2T (as configured by LTD, App. A.1)", Eagle3LikeTraits(),
      {
          HeadKnob(),
          ClassifierKnob(),
          {"top_k", 10, "beam width W (children per expanded node)", 1, 64},
          {"depth", 8, "expansion rounds D (LTD: dynamic-size methods run D = 8)", 1, 31},
          {"total_tokens", 61, "most verified tokens incl. the root (cap on V + 1)", 2, 1025},
          {"threshold", 0.5,
           "keep a candidate when its predicted acceptance >= this (C2T code: 0.5)", 0, 1},
      });
  info.validate = [](const nlohmann::json& knobs) {
    ResolveEagle3Head(knobs.at("head").get<std::string>());
  };
  info.factory = [](MethodContext& context,
                    const nlohmann::json& knobs) -> std::unique_ptr<Decoder> {
    const int64_t rounds = knobs.at("depth").get<int64_t>();
    const int64_t nodes = knobs.at("total_tokens").get<int64_t>() - 1;
    auto c = std::make_unique<C2tController>(LoadClassifierFor(knobs, LtdClassifierKind::kC2t),
                                             rounds, nodes, knobs.at("threshold").get<double>());
    return DecoderFromKnobs(context, knobs, rounds, nodes, std::move(c));
  };
  registry.Register(std::move(info));
}

// The policy pair is trained on the twin's measured costs and reads draft scores only, so
// stories260K runs the twin's pair too (untuned for its costs); the classifiers of the paper's
// table read the head's hidden states (SpecDec++), so each target has its own set.
void DeclareLtdDrafters(MethodRegistry& registry) {
  for (const char* target : {"stories260K-twin", "stories260K"}) {
    const bool twin = std::string(target) == "stories260K-twin";
    registry.AddDrafter({"stories260K-twin-ltd",
                         "ltd",
                         target,
                         twin ? "LTD depth + size policies for stories260K-twin + "
                                "stories260K-twin-eagle3"
                              : "the twin's LTD policies (trained on the twin's costs; "
                                "stories260K's observations are the twin's, so they run there "
                                "too, untuned for its costs)",
                         "models/stories260K/ltd-twin",
                         {}});
  }
  registry.AddDrafter({"stories260K-ltd-baselines",
                       "ltd-baselines",
                       "stories260K",
                       "Disco, SpecDec++ and C2T classifiers for stories260K + stories260K-eagle3",
                       "models/stories260K/ltd-baselines",
                       {}});
  registry.AddDrafter(
      {"stories260K-twin-ltd-baselines",
       "ltd-baselines",
       "stories260K-twin",
       "Disco, SpecDec++ and C2T classifiers for stories260K-twin + stories260K-twin-eagle3",
       "models/stories260K/ltd-baselines-twin",
       {}});
  // `specbed twin` of one classifier, or of a set (disco/, specdecpp/, c2t/): zero input columns
  // at the width factor of what they read (SpecDec++: the EAGLE-3 head, the target's width).
  registry.AddTwinWriter([](const std::string& source, const std::string& output, int64_t f) {
    if (CheckpointFormatOf(source) == "specbed-ltd-classifier") {
      WriteLtdClassifier(output, LtdClassifierTwin(LoadLtdClassifier(source), f));
      return true;
    }
    if (!CheckpointFormatOf(source).empty() ||
        CheckpointFormatOf(source + "/specdecpp") != "specbed-ltd-classifier") {
      return false;
    }
    for (const char* kind : {"disco", "specdecpp", "c2t"}) {
      const std::string dir = source + "/" + kind;
      if (!PathExists(dir)) continue;
      WriteLtdClassifier(output + "/" + kind, LtdClassifierTwin(LoadLtdClassifier(dir), f));
    }
    return true;
  });
}

}  // namespace

std::unique_ptr<SpeculativeDecoder> MakeLtdDecoder(MethodContext& context,
                                                   const nlohmann::json& knobs,
                                                   LtdController** controller_out) {
  const std::string dir = ResolveLtdPolicyDir(knobs.at("policy").get<std::string>());
  const std::string which = knobs.at("policies").get<std::string>();
  const int64_t top_k = knobs.at("top_k").get<int64_t>();
  const int64_t max_depth = knobs.at("max_depth").get<int64_t>();
  std::shared_ptr<LtdPolicy> depth, size;
  if (which != "size")
    depth = LoadPolicyPart(dir, "depth", LtdPolicyKind::kDepth, top_k, max_depth);
  if (which != "depth") size = LoadPolicyPart(dir, "size", LtdPolicyKind::kSize, top_k, max_depth);
  auto controller = std::make_unique<LtdController>(
      depth, size, max_depth, knobs.at("depth").get<int64_t>(),
      knobs.at("total_tokens").get<int64_t>() - 1, knobs.at("depth_every").get<int64_t>());
  if (controller_out != nullptr) *controller_out = controller.get();
  const int64_t rounds = controller->max_rounds();
  const int64_t nodes = controller->max_nodes();
  return MakeLtdEagle3Decoder(context, knobs.at("head").get<std::string>(), top_k, rounds, nodes,
                              std::move(controller));
}

std::string ResolveLtdClassifierDir(const std::string& name_or_path) {
  return ResolveDrafterOrDir(name_or_path, "ltd-baselines", "knob 'classifier':");
}

void RegisterLtdMethods(MethodRegistry& registry) {
  DeclareLtdDrafters(registry);
  RegisterLtd(registry);
  RegisterDdd(registry);
  RegisterSvip(registry);
  RegisterGammatune(registry);
  RegisterClassifierDepth(registry, LtdClassifierKind::kDisco);
  RegisterClassifierDepth(registry, LtdClassifierKind::kSpecDec);
  RegisterC2t(registry);
}

}  // namespace specbed
