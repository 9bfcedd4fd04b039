// Cost twins (models/twin/cost_twin.h, models/twin/stories_twin.h, methods/drafter_catalog.h):
// - the padding rules on small random checkpoints of each family (width factors 4 and 3, identity
//   layers): logits equal the original's, original hidden states are kept and padding stays zero;
// - refusals: a tensor with no rule, a depth below the original, padding a twin again;
// - stories260K-twin vs stories260K on all 32 story prompts: prefill logits within 1e-4, greedy ids
//   identical;
// - every drafter twin drafts what its original drafts (per-step drafted / accepted counts and
//   outputs equal), and every registered method with default ("auto") drafters is token-identical
//   to AR on the twin at T = 0;
// - the drafter catalogue: defaults per target, "auto" resolution, errors; FeatureDepth rules.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/runner/runner.h"
#include "methods/drafter_catalog.h"
#include "methods/eagle3/eagle3_config.h"
#include "methods/method_registry.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/llama_model.h"
#include "models/twin/cost_twin.h"
#include "models/twin/stories_twin.h"
#include "tests/methods/method_test_util.h"
#include "tests/methods/story_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using ::testing::HasSubstr;

std::string Scratch(const std::string& name) {
  return testing_util::ScratchDir("cost_twin_" + name);
}

LlamaConfig SmallConfig(bool qwen2) {
  LlamaConfig c = testing_util::SmallConfigOf(qwen2 ? "Qwen2ForCausalLM" : "LlamaForCausalLM",
                                              {32, 4, 2, 8, 48, 64, 64}, 1e-5,
                                              /*tie_embeddings=*/qwen2, 1, {2});
  c.qkv_bias = qwen2;
  return c;
}

HfCheckpointFiles SmallCheckpoint(bool qwen2) {
  const LlamaConfig c = SmallConfig(qwen2);
  HfCheckpointFiles f;
  f.config = nlohmann::ordered_json(c.ToHfJson());
  f.tensors = RandomHfTensors(c, 7);
  return f;
}

// Loads padded files through the same path as a real checkpoint (write, read, fuse).
std::unique_ptr<LlamaModel> ModelFrom(const HfCheckpointFiles& files, const std::string& name) {
  const std::string dir = Scratch(name);
  WriteCheckpointFiles(dir, files);
  LoadedModel loaded = LoadHfCheckpoint(dir, at::kFloat);
  return std::make_unique<LlamaModel>(loaded.config, std::move(loaded.weights));
}

struct PaddingCase {
  bool qwen2;
  int64_t factor;
  int64_t depth;
  double tolerance;
};

TEST(CostTwinPadding, SameLogitsAndFeaturesAsTheOriginal) {
  at::set_num_threads(1);
  for (const PaddingCase& pc : {PaddingCase{false, 4, 0, 1e-5}, PaddingCase{false, 4, 5, 1e-5},
                                PaddingCase{true, 4, 3, 1e-5}, PaddingCase{false, 3, 2, 1e-4}}) {
    SCOPED_TRACE(StrCat("qwen2 ", pc.qwen2, " factor ", pc.factor, " depth ", pc.depth));
    const HfCheckpointFiles original = SmallCheckpoint(pc.qwen2);
    TwinShape shape;
    shape.width_factor = pc.factor;
    shape.depth = pc.depth;
    const HfCheckpointFiles twin = PadToCostTwin(original, shape, "small", "test");
    auto a = ModelFrom(original, "orig");
    auto b = ModelFrom(twin, "twin");
    EXPECT_EQ(b->config().dim, 32 * pc.factor);
    EXPECT_EQ(b->config().n_layers, pc.depth > 0 ? pc.depth : 2);
    EXPECT_EQ(b->config().FeatureDepth(), 2);
    EXPECT_THAT(b->config().twin_label, HasSubstr("cost twin of small"));
    at::Tensor tokens = at::randint(3, 64, {1, 9}, at::kLong);
    ForwardOptions o;
    o.logits = LogitsMode::kAll;
    o.hidden_layers = {0, 1, 2};
    KvCache ca = a->NewCache(1, 32), cb = b->NewCache(1, 32);
    ForwardOutput oa = a->Forward(tokens, ca, o);
    at::Tensor la = oa.logits.clone();
    ForwardOutput ob = b->Forward(tokens, cb, o);
    EXPECT_LT((la - ob.logits).abs().max().item<double>(), pc.tolerance);
    for (size_t i = 0; i < 3; ++i) {
      at::Tensor hb = ob.hidden[i];
      EXPECT_LT((hb.narrow(2, 0, 32) - oa.hidden[i]).abs().max().item<double>(), pc.tolerance);
      EXPECT_EQ(hb.narrow(2, 32, hb.size(2) - 32).abs().max().item<double>(), 0.0);
    }
    // A decode step after the prompt (cache reuse) agrees too.
    at::Tensor next = at::full({1, 1}, 5, at::kLong);
    ForwardOutput sa = a->Forward(next, ca);
    at::Tensor step_a = sa.logits.clone();
    EXPECT_LT((step_a - b->Forward(next, cb).logits).abs().max().item<double>(), pc.tolerance);
  }
}

TEST(CostTwinPadding, PowerOfFourNormsAreBitExact) {
  const HfCheckpointFiles original = SmallCheckpoint(false);
  TwinShape shape;
  shape.width_factor = 16;
  const HfCheckpointFiles twin = PadToCostTwin(original, shape, "small", "test");
  const at::Tensor& w = original.tensors.at("model.norm.weight");
  const at::Tensor& w2 = twin.tensors.at("model.norm.weight");
  EXPECT_TRUE(at::equal(w2.narrow(0, 0, 32), w * 0.25));
  EXPECT_DOUBLE_EQ(twin.config["rms_norm_eps"].get<double>(), 1e-5 / 16);
  EXPECT_EQ(twin.config["specbed_twin"]["original"]["hidden_size"], 32);
}

TEST(CostTwinPadding, RefusesWhatItCannotPad) {
  HfCheckpointFiles f = SmallCheckpoint(false);
  f.tensors["model.mystery.weight"] = at::zeros({32, 32});
  TwinShape shape;
  shape.width_factor = 4;
  try {
    PadToCostTwin(f, shape, "small", "ckpt-dir");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.mystery.weight"));
    EXPECT_THAT(e.what(), HasSubstr("ckpt-dir"));
  }
  shape.depth = 1;
  EXPECT_THROW(PadToCostTwin(SmallCheckpoint(false), shape, "small", "x"), Error);
  shape.depth = 0;
  const HfCheckpointFiles twin = PadToCostTwin(SmallCheckpoint(false), shape, "small", "x");
  try {
    PadToCostTwin(twin, shape, "small", "x");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("already a cost twin"));
  }
  HfCheckpointFiles bad = SmallCheckpoint(false);
  bad.tensors["model.layers.0.mlp.up_proj.weight"] = at::zeros({40, 32});
  EXPECT_THROW(PadToCostTwin(bad, shape, "small", "x"), Error);
}

TEST(StoriesTwin, SameLogitsAndGreedyIdsOnEveryStoryPrompt) {
  at::set_num_threads(1);
  LoadedTarget small = LoadModel("stories260K", at::kFloat);
  LoadedTarget twin = LoadModel("stories260K-twin", at::kFloat);
  const LlamaConfig& tc = twin.model->config();
  EXPECT_EQ(tc.dim, 64 * kStoriesTwinWidthFactor);
  EXPECT_EQ(tc.n_layers, kStoriesTwinDepth);
  EXPECT_EQ(tc.FeatureDepth(), 5);
  EXPECT_THAT(tc.twin_label, HasSubstr("cost twin of stories260K"));
  const auto prompts = LoadDataset("stories", {});
  ASSERT_EQ(prompts.size(), 32u);
  double worst = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const std::vector<int32_t> ids = BuildPromptIds(small, {{"user", prompts[i].turns[0]}});
    ASSERT_EQ(ids, BuildPromptIds(twin, {{"user", prompts[i].turns[0]}}));
    at::Tensor t = at::empty({1, static_cast<int64_t>(ids.size())}, at::kLong);
    for (size_t k = 0; k < ids.size(); ++k) t.data_ptr<int64_t>()[k] = ids[k];
    ForwardOptions o;
    o.logits = LogitsMode::kAll;
    KvCache ca = small.model->NewCache(1, 256), cb = twin.model->NewCache(1, 256);
    at::Tensor la = small.model->Forward(t, ca, o).logits.clone();
    worst = std::max(worst, (la - twin.model->Forward(t, cb, o).logits).abs().max().item<double>());
    GenerationConfig g;
    g.stop = StopConfigFor(small, 64, {});
    const GenerationResult a = GenerateAr(*small.model, small.tokenizer.get(), ids, g, ca);
    const GenerationResult b = GenerateAr(*twin.model, twin.tokenizer.get(), ids, g, cb);
    EXPECT_EQ(a.tokens, b.tokens) << "prompt " << i;
  }
  EXPECT_LT(worst, 1e-4);
}

// The Llama-3-8B-shaped recipe (explicit head_dim, heads, KV heads, FFN) at a small factor:
// stories260K (width 64, 8 heads of 8, 4 KV heads) at width x4 with head_dim 8 -> 32 (8 heads,
// RoPE pairs spread to equal frequencies, q scaled by 2) and with 16 heads of 16 regrouped over
// 4 KV heads (4 q heads per KV head instead of 2), an odd FFN width and identity layers: logits
// within 1e-4 and identical greedy ids on all 32 story prompts.
TEST(StoriesTwin, HeadDimRecipeIsExactAtASmallFactor) {
  at::set_num_threads(1);
  LoadedTarget small = LoadModel("stories260K", at::kFloat);
  const HfCheckpointFiles original =
      Llama2cAsHf(std::string(SPECBED_SOURCE_DIR) + "/models/stories260K/stories260K.bin");
  struct Recipe {
    int64_t head_dim, heads, kv_heads, ffn, depth;
  };
  const auto prompts = LoadDataset("stories", {});
  ASSERT_EQ(prompts.size(), 32u);
  for (const Recipe& r : {Recipe{32, 8, 4, 0, 0}, Recipe{16, 16, 4, 777, 7}}) {
    SCOPED_TRACE(StrCat("head_dim ", r.head_dim, " heads ", r.heads, " kv ", r.kv_heads));
    TwinShape shape;
    shape.width_factor = 4;
    shape.head_dim = r.head_dim;
    shape.heads = r.heads;
    shape.kv_heads = r.kv_heads;
    shape.ffn = r.ffn;
    shape.depth = r.depth;
    const HfCheckpointFiles files = PadToCostTwin(original, shape, "stories260K", "test");
    auto twin = ModelFrom(files, StrCat("headdim_", r.head_dim));
    EXPECT_EQ(twin->config().head_dim, r.head_dim);
    EXPECT_EQ(twin->config().n_heads, r.heads);
    EXPECT_EQ(twin->config().n_kv_heads, r.kv_heads);
    double worst = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::vector<int32_t> ids = BuildPromptIds(small, {{"user", prompts[i].turns[0]}});
      at::Tensor t = at::empty({1, static_cast<int64_t>(ids.size())}, at::kLong);
      for (size_t k = 0; k < ids.size(); ++k) t.data_ptr<int64_t>()[k] = ids[k];
      ForwardOptions o;
      o.logits = LogitsMode::kAll;
      KvCache ca = small.model->NewCache(1, 256), cb = twin->NewCache(1, 256);
      at::Tensor la = small.model->Forward(t, ca, o).logits.clone();
      worst = std::max(worst, (la - twin->Forward(t, cb, o).logits).abs().max().item<double>());
      GenerationConfig g;
      g.stop = StopConfigFor(small, 48, {});
      const GenerationResult a = GenerateAr(*small.model, small.tokenizer.get(), ids, g, ca);
      const GenerationResult b = GenerateAr(*twin, small.tokenizer.get(), ids, g, cb);
      EXPECT_EQ(a.tokens, b.tokens) << "prompt " << i;
    }
    EXPECT_LT(worst, 1e-4);
  }
  // Shapes the recipe cannot keep exact are refused.
  TwinShape bad;
  bad.width_factor = 4;
  bad.head_dim = 12;  // not a multiple of 8
  EXPECT_THROW(PadToCostTwin(original, bad, "s", "x"), Error);
  bad.head_dim = 32;
  bad.heads = 8;
  bad.kv_heads = 2;  // fewer KV heads than the original's 4
  EXPECT_THROW(PadToCostTwin(original, bad, "s", "x"), Error);
}

// Runs `method` at T = 0 over `n_prompts` story prompts; returns per-step (drafted, accepted,
// depth) and the outputs, checking each output against AR on the same target.
struct Trace {
  std::vector<std::array<int64_t, 3>> steps;
  std::vector<std::vector<int32_t>> outputs;
};
Trace RunMethod(LoadedTarget& target, const std::string& method, const nlohmann::json& knobs,
                size_t n_prompts, int64_t max_new, testing_util::ArAnswers* ar_answers = nullptr) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = testing_util::CachingContextFor(target);
  std::unique_ptr<Decoder> decoder = registry.Build(method, context, knobs);
  const auto prompts = LoadDataset("stories", {});
  Trace trace;
  for (size_t i = 0; i < n_prompts; ++i) {
    const testing_util::StoryRun run = testing_util::RunStoryPrompt(
        target, *decoder, prompts[i], {max_new, 0, i, /*cache_rows=*/512}, ar_answers);
    const DecodeResult& r = run.spec;
    EXPECT_EQ(r.generation.tokens, run.ar.tokens)
        << method << " on " << target.spec.name << " prompt " << i;
    for (const StepStats& s : r.steps)
      trace.steps.push_back({s.n_drafted, s.n_accepted, s.draft_depth});
    trace.outputs.push_back(r.generation.tokens);
  }
  return trace;
}

TEST(StoriesTwin, EveryMethodMatchesArAndEveryDrafterTwinDraftsLikeItsOriginal) {
  at::set_num_threads(1);
  LoadedTarget small = LoadModel("stories260K", at::kFloat);
  LoadedTarget twin = LoadModel("stories260K-twin", at::kFloat);
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  testing_util::ArAnswers ar_answers;  // AR on each target and prompt, computed once
  for (const std::string& name : registry.Names()) {
    if (!registry.Info(name).traits.speculative) continue;
    SCOPED_TRACE(name);
    // Default knobs: "auto" drafters pick stories260K-* on one target and stories260K-twin-* on
    // the other. Online-training methods (OSD) update the drafter at the end of a request, so
    // later requests still draft the same on both only up to float rounding of the update.
    const Trace a = RunMethod(small, name, nlohmann::json::object(), 3, 48, &ar_answers);
    const Trace b = RunMethod(twin, name, nlohmann::json::object(), 3, 48, &ar_answers);
    EXPECT_EQ(a.outputs, b.outputs);
    // SpecBranch's H-RAD predictor reads target hidden states, and the twin's (16 layers, width
    // 512) are not stories260K's: each target has its own predictor, so the steps differ. Likewise
    // SpecDec++'s classifier reads the head's hidden state (64 vs 512 wide): each target has its
    // own, trained on its own drafts.
    if (!registry.Info(name).traits.trains_online && name != "specbranch" &&
        name != "eagle3+specdecpp") {
      EXPECT_EQ(a.steps, b.steps);
    }
    int64_t accepted = 0;
    for (const auto& s : b.steps) accepted += s[1];
    EXPECT_GT(accepted, 0) << "the shipped drafter's twin never got a draft token accepted";
  }
}

TEST(DrafterCatalog, AutoResolvesPerTarget) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  const nlohmann::json none = nlohmann::json::object();
  EXPECT_EQ(registry.ResolveKnobsFor("ddtree", none, "stories260K")["drafter"],
            "stories260K-dflash");
  EXPECT_EQ(registry.ResolveKnobsFor("ddtree", none, "stories260K-twin")["drafter"],
            "stories260K-twin-dflash");
  EXPECT_EQ(registry.ResolveKnobsFor("eagle3", none, "stories260K-twin")["head"],
            "stories260K-twin-eagle3");
  EXPECT_EQ(registry.ResolveKnobsFor("sps", none, "stories260K-twin")["drafter"],
            "stories260K-twin-draft");
  EXPECT_EQ(registry.ResolveKnobsFor("jetspec", none, "stories260K")["drafter"],
            "stories260K-jetspec");
  EXPECT_EQ(registry.ResolveKnobsFor("medusa", none, "stories260K")["head"], "stories260K-medusa");
  EXPECT_EQ(registry.ResolveKnobsFor("medusa", none, "stories260K-twin")["head"],
            "stories260K-twin-medusa");
  const auto bp = registry.ResolveKnobsFor("dflash+blockpilot", none, "stories260K-twin");
  EXPECT_EQ(bp["drafter"], "stories260K-twin-dflash");
  EXPECT_EQ(bp["predictor"], "stories260K-blockpilot");
  // An explicit drafter stays as given.
  EXPECT_EQ(registry.ResolveKnobsFor("ddtree", {{"drafter", "/x/y"}}, "stories260K")["drafter"],
            "/x/y");
  try {
    registry.ResolveKnobsFor("eagle3", none, "random-35m");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("random-35m"));
    EXPECT_THAT(e.what(), HasSubstr("knob 'head'"));
  }
  EXPECT_TRUE(IsNamedDrafter("stories260K-twin-eagle3", "eagle3"));
  EXPECT_FALSE(IsNamedDrafter("stories260K-twin-eagle3", "dflash"));
  EXPECT_EQ(ResolveDrafterDir("some/dir"), "some/dir");
  EXPECT_TRUE(std::filesystem::exists(ResolveDrafterDir("stories260K-twin-jetspec") +
                                      "/model.safetensors"));
}

TEST(CostTwinFeatures, IdentityLayersAreNeverFeatureLayers) {
  // A deeper twin records the original depth as its feature depth.
  HfCheckpointFiles f = SmallCheckpoint(false);
  TwinShape shape;
  shape.width_factor = 4;
  shape.depth = 9;
  const HfCheckpointFiles twin = PadToCostTwin(f, shape, "small", "x");
  const LlamaConfig c =
      ParseHfConfig(nlohmann::json::parse(twin.config.dump()), "twin config.json");
  EXPECT_EQ(c.n_layers, 9);
  EXPECT_EQ(c.FeatureDepth(), 2);
  // The stories260K twin: 16 layers, of which 5 carry features; EAGLE-3's default low/mid/high
  // come from the 5.
  const LoadedTarget twin_target = LoadModel("stories260K-twin", at::kFloat);
  const LlamaConfig& tc = twin_target.model->config();
  EXPECT_EQ(tc.n_layers, kStoriesTwinDepth);
  EXPECT_EQ(tc.FeatureDepth(), 5);
  EXPECT_NE(DefaultEagle3AuxLayers(tc.FeatureDepth()), DefaultEagle3AuxLayers(tc.n_layers));
  nlohmann::json bad = nlohmann::json::parse(twin.config.dump());
  bad["specbed_twin"]["feature_depth"] = 12;
  EXPECT_THROW(ParseHfConfig(bad, "bad"), Error);
}

}  // namespace
}  // namespace specbed
