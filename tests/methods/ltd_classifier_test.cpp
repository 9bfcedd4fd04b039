// The LTD paper's supervised baselines (methods/ltd/ltd_classifiers.h, ltd_classifier_trainer.h):
// - features: Disco's beam probabilities / entropy / round, C2T's (score, depth / 10), the depth
//   of a beam candidate from its index;
// - the inference forward (LtdClassifier::Logit) agrees with the training forward for each kind;
// - checkpoint round trip and malformed files (format, kind, input_dim, tensor names and shapes);
// - controller decisions on hand-made classifiers (Disco continues while the best path is likely;
//   SpecDec++ refuses a hidden state of another size; C2T verifies the kept count, at least 1);
// - T = 0: eagle3+disco / +specdecpp / +c2t with classifiers whose decisions vary are token-
//   identical to AR on story prompts, and really vary the depth / the verified size;
// - `train ltd-baselines` on stories260K: balanced rows, loadable classifiers that rank held-out
//   rows better than chance (AUC), and the methods built from them stay exact.
// Deterministic (fixed seeds, one thread): false-failure rate 0.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/runner/runner.h"
#include "methods/ltd/ltd_classifier_trainer.h"
#include "methods/ltd/ltd_classifiers.h"
#include "methods/ltd/ltd_controllers.h"
#include "methods/method_registry.h"
#include "models/checkpoint/head_checkpoint.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "tests/methods/method_test_util.h"
#include "tests/methods/story_test_util.h"

namespace specbed {
namespace {

using testing::HasSubstr;

std::map<std::string, at::Tensor> RandomTensors(const LtdClassifierConfig& c, uint64_t seed,
                                                double out_gain) {
  std::map<std::string, at::Tensor> t;
  for (const auto& [name, shape] : ExpectedLtdClassifierShapes(c)) {
    at::Tensor x = at::empty(shape, at::kFloat);
    FillSeededNormal(x.data_ptr<float>(), x.numel(), TensorNameSeed(seed, name), 0.0,
                     (name == "out.weight" ? out_gain : 1.0) / std::sqrt(double(shape.back())));
    t[name] = x;
  }
  return t;
}

TEST(LtdClassifier, FeaturesAndCandidateDepth) {
  float f[12];
  const float beam[3] = {-0.1f, -1.f, -2.f};
  EncodeDiscoFeatures(10, beam, 3, 0.7, 4, f);
  EXPECT_FLOAT_EQ(f[0], std::exp(-0.1f));
  EXPECT_FLOAT_EQ(f[2], std::exp(-2.f));
  EXPECT_FLOAT_EQ(f[3], 0.f);  // the beam is shorter than W
  EXPECT_FLOAT_EQ(f[9], 0.f);
  EXPECT_FLOAT_EQ(f[10], 0.7f);
  EXPECT_FLOAT_EQ(f[11], 0.4f);
  EncodeC2tFeatures(-1.5f, 3, f);
  EXPECT_FLOAT_EQ(f[0], -1.5f);
  EXPECT_FLOAT_EQ(f[1], 0.3f);
  EXPECT_EQ(BeamCandidateDepth(0, 10), 1);
  EXPECT_EQ(BeamCandidateDepth(9, 10), 1);
  EXPECT_EQ(BeamCandidateDepth(10, 10), 2);
  EXPECT_EQ(BeamCandidateDepth(109, 10), 2);
  EXPECT_EQ(BeamCandidateDepth(110, 10), 3);
}

TEST(LtdClassifier, InferenceMatchesTheTrainingForward) {
  for (LtdClassifierKind kind :
       {LtdClassifierKind::kDisco, LtdClassifierKind::kSpecDec, LtdClassifierKind::kC2t}) {
    LtdClassifierConfig c = DefaultLtdClassifierConfig(kind, 10, 24);
    c.hidden = 37;  // not a multiple of the dot product's 8 lanes
    const auto t = RandomTensors(c, 7, 1.0);
    LtdClassifier inference({c, t});
    const at::Tensor x = at::randn({5, c.input_dim}, at::kFloat);
    const at::Tensor want = LtdClassifierLogits(c, t, x);
    for (int64_t r = 0; r < 5; ++r) {
      EXPECT_NEAR(inference.Logit(x[r].data_ptr<float>()), want[r].item<float>(), 1e-4)
          << LtdClassifierKindName(kind) << " row " << r;
    }
  }
}

TEST(LtdClassifier, CheckpointRoundTripAndErrors) {
  const std::string dir = ::testing::TempDir() + "/ltd_classifier_rt";
  LtdClassifierConfig c = DefaultLtdClassifierConfig(LtdClassifierKind::kSpecDec, 10, 24);
  c.hidden = 16;
  c.evaluation = {{"auc", 0.8}};
  const auto t = RandomTensors(c, 3, 1.0);
  WriteLtdClassifier(dir, {c, t});
  const LtdClassifierCheckpoint back = LoadLtdClassifier(dir);
  EXPECT_EQ(back.config.kind, LtdClassifierKind::kSpecDec);
  EXPECT_EQ(back.config.input_dim, 24);
  EXPECT_EQ(back.config.evaluation["auc"], 0.8);
  EXPECT_TRUE(at::equal(back.tensors.at("skip.weight"), t.at("skip.weight")));

  auto expect_error = [](const nlohmann::json& j, const char* what) {
    try {
      ParseLtdClassifierConfig(j, "cfg.json");
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(what));
      EXPECT_THAT(e.what(), HasSubstr("cfg.json"));
    }
  };
  const nlohmann::json j = nlohmann::json::parse(LtdClassifierConfigToJson(c).dump());
  auto with = [&j](const nlohmann::json& patch) {
    nlohmann::json x = j;
    x.merge_patch(patch);
    return x;
  };
  expect_error(with({{"format", "x"}}), "specbed-ltd-classifier");
  expect_error(with({{"kind", "medusa"}}), "specdecpp");
  expect_error(with({{"kind", "c2t"}}), "input_dim 24");
  expect_error(with({{"hidden", "wide"}}), "hidden");

  auto missing = t;
  missing.erase("skip.bias");
  try {
    WriteLtdClassifier(dir + "_bad", {c, missing});
    ADD_FAILURE() << "missing tensor accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("skip.bias"));
  }
  auto wrong = t;
  wrong["fc.weight"] = at::zeros({16, 23});
  try {
    LtdClassifier bad({c, wrong});
    ADD_FAILURE() << "wrong shape accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("fc.weight"));
  }
}

// One hidden unit: logit = relu(a * x[i] + b) - 0.01.
std::shared_ptr<LtdClassifier> Threshold(LtdClassifierKind kind, int64_t input, float a, float b) {
  LtdClassifierConfig c = DefaultLtdClassifierConfig(kind, 2, 4);
  c.hidden = 1;
  std::map<std::string, at::Tensor> t;
  for (const auto& [name, shape] : ExpectedLtdClassifierShapes(c)) t[name] = at::zeros(shape);
  t["fc.weight"][0][input] = a;
  t["fc.bias"][0] = b;
  t["out.weight"][0][0] = 1.f;
  t["out.bias"][0] = -0.01f;
  return std::make_shared<LtdClassifier>(LtdClassifierCheckpoint{c, t});
}

TEST(LtdClassifierControllers, Decisions) {
  // Disco (W = 2): continue iff 10 * p_best - 5 > 0.01, i.e. the best path's probability > ~1/2.
  ClassifierDepthController disco(Threshold(LtdClassifierKind::kDisco, 0, 10, -5), 12, 60, 0.5);
  EXPECT_FALSE(disco.WantsDraftHidden());
  DraftRoundInfo round;
  round.rounds = 2;
  round.top_k = 2;
  const float likely[2] = {-0.1f, -2.f}, unlikely[2] = {-1.f, -2.f};
  round.beam_scores = likely;
  round.n_beam = 2;
  EXPECT_TRUE(disco.ContinueDrafting(round));
  round.beam_scores = unlikely;
  EXPECT_FALSE(disco.ContinueDrafting(round));
  EXPECT_EQ(disco.stats().depth_calls, 2);
  round.top_k = 3;
  EXPECT_THROW(disco.ContinueDrafting(round), Error);  // trained for W = 2

  // SpecDec++ reads the hidden state; one of another size is refused by name.
  ClassifierDepthController spec(Threshold(LtdClassifierKind::kSpecDec, 1, 1, 0), 12, 60, 0.5);
  EXPECT_TRUE(spec.WantsDraftHidden());
  const float hidden[4] = {0, 3, 0, 0};
  round.best_hidden = hidden;
  round.hidden_size = 4;
  EXPECT_TRUE(spec.ContinueDrafting(round));
  round.hidden_size = 3;
  try {
    spec.ContinueDrafting(round);
    ADD_FAILURE() << "hidden size mismatch accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("hidden state of size 4"));
  }

  // C2T keeps a candidate iff 10 * score + 10 > 0.01 (score > ~-1): V = that count in [1, budget].
  C2tController c2t(Threshold(LtdClassifierKind::kC2t, 0, 10, 10), 8, 60, 0.5);
  const float scores[6] = {-0.1f, -0.5f, -2.f, -0.2f, -3.f, -0.9f};
  DraftTreeInfo tree;
  tree.top_k = 2;
  tree.scores = scores;
  tree.n_scores = 6;
  tree.budget_nodes = 60;
  EXPECT_EQ(c2t.VerifySize(tree), 4);
  tree.budget_nodes = 3;
  EXPECT_EQ(c2t.VerifySize(tree), 3);
  tree.n_scores = 0;
  EXPECT_EQ(c2t.VerifySize(tree), 1);
  EXPECT_THROW(C2tController(Threshold(LtdClassifierKind::kDisco, 0, 1, 0), 8, 60, 0.5), Error);
}

// A classifier set for the stories260K head (hidden 64) whose decisions vary with the features:
// Disco continues while the best path's probability exceeds ~1/2, C2T keeps candidates with score
// above ~-2, SpecDec++ is random with a large output gain.
std::string WriteVariedSet() {
  const std::string dir = ::testing::TempDir() + "/ltd_classifier_varied";
  for (LtdClassifierKind kind :
       {LtdClassifierKind::kDisco, LtdClassifierKind::kSpecDec, LtdClassifierKind::kC2t}) {
    LtdClassifierConfig c = DefaultLtdClassifierConfig(kind, 10, 64);
    c.hidden = 16;
    auto t = RandomTensors(c, 11, 3.0);
    if (kind != LtdClassifierKind::kSpecDec) {  // one unit: relu(a * x[0] + b) - 0.01
      for (const char* name : {"fc.weight", "fc.bias", "out.weight"}) t[name].zero_();
      t["fc.weight"][0][0] = kind == LtdClassifierKind::kDisco ? 10.f : 1.f;
      t["fc.bias"][0] = kind == LtdClassifierKind::kDisco ? -5.f : 2.f;
      t["out.weight"][0][0] = 1.f;
      t["out.bias"][0] = -0.01f;
    }
    WriteLtdClassifier(dir + "/" + LtdClassifierKindName(kind), {c, t});
  }
  return dir;
}

struct ExactRun {
  std::set<int64_t> generated, drafted;
};

// Runs `method` on the first `n_prompts` story prompts; every answer must equal AR's.
ExactRun ExpectExact(MethodRegistry& registry, MethodContext& context, const std::string& method,
                     const nlohmann::json& knobs, size_t n_prompts) {
  LoadedTarget& target = *context.target;
  std::unique_ptr<Decoder> decoder = registry.Build(method, context, knobs);
  const auto prompts = LoadDataset("stories", {});
  ExactRun out;
  for (size_t i = 0; i < n_prompts; ++i) {
    const testing_util::StoryRun run =
        testing_util::RunStoryPrompt(target, *decoder, prompts[i], {48, /*extra_cache=*/-1, 0});
    const DecodeResult& spec = run.spec;
    EXPECT_EQ(spec.generation.tokens, run.ar.tokens) << method << " prompt " << i;
    int64_t done = 1;  // tokens generated before the step (the prefill's first token)
    for (const StepStats& s : spec.steps) {
      // Steps where the tokens still allowed did not cap the depth (at most 13 layers).
      if (48 - done > 13) out.generated.insert(s.n_draft_generated);
      out.drafted.insert(s.n_drafted);
      done += s.n_emitted;
    }
  }
  return out;
}

TEST(LtdClassifierMethods, MatchArAtTemperatureZeroAndVaryTheShape) {
  at::set_num_threads(1);
  testing_util::StoriesMethods s;
  const std::string set = WriteVariedSet();
  const nlohmann::json knobs = {{"classifier", set}, {"total_tokens", 17}};
  for (const char* m : {"eagle3+disco", "eagle3+specdecpp"}) {
    const ExactRun r = ExpectExact(s.registry, s.context, m, knobs, 4);
    EXPECT_GE(r.generated.size(), 2u) << m << ": the classifier never changed the depth";
  }
  const ExactRun c2t = ExpectExact(s.registry, s.context, "eagle3+c2t", knobs, 4);
  EXPECT_GE(c2t.drafted.size(), 2u) << "C2T never changed the verified size";
  EXPECT_EQ(c2t.generated, std::set<int64_t>({810})) << "C2T runs the static depth 8";
  // A missing classifier set; a top_k the classifiers were not trained for.
  testing_util::ExpectBuildError(s, "eagle3+c2t", {{"classifier", "/nonexistent/set"}},
                                 "/nonexistent/set");
  testing_util::ExpectBuildError(s, "eagle3+disco", {{"classifier", set}, {"top_k", 8}},
                                 "top_k 10");
}

TEST(LtdBaselineTrainer, SmallRunWritesBalancedClassifiersThatRankHeldOutRows) {
  LtdBaselineTrainConfig c;
  c.target = "stories260K";
  c.train_from = 24;  // 8 training prompts
  c.val_from = 20;
  c.val_count = 2;
  c.max_new_tokens = 32;
  c.specdec_hidden = 64;
  c.disco_epochs = 30;
  c.specdec_epochs = 5;
  c.c2t_epochs = 10;
  c.lr = 3e-3;
  const std::string out = ::testing::TempDir() + "/ltd_baselines_train";
  const LtdBaselineTrainResult r = TrainLtdBaselines(c, out, false);
  for (const char* kind : {"disco", "specdecpp", "c2t"}) {
    const nlohmann::ordered_json& e = r.summary.at(kind);
    const int64_t balanced = e.at("train_rows_balanced").get<int64_t>();
    EXPECT_EQ(balanced % 2, 0) << kind << ": equal positives and negatives";
    EXPECT_LE(balanced, e.at("train_rows").get<int64_t>());
    EXPECT_GT(e.at("rows").get<int64_t>(), 0) << kind << ": no held-out rows";
    const LtdClassifierCheckpoint ck = LoadLtdClassifier(out + "/" + kind);
    EXPECT_EQ(ck.config.training.at("trainer"), "specbed train ltd-baselines");
    EXPECT_EQ(ck.config.evaluation.at("auc"), e.at("auc"));
  }
  // Disco's inputs (the best paths' probabilities) predict acceptance well on the story head.
  EXPECT_GT(r.summary.at("disco").at("auc").get<double>(), 0.7);
  EXPECT_GT(r.summary.at("c2t").at("auc").get<double>(), 0.7);

  at::set_num_threads(1);
  testing_util::StoriesMethods s;
  for (const char* m : {"eagle3+disco", "eagle3+specdecpp", "eagle3+c2t"}) {
    ExpectExact(s.registry, s.context, m, {{"classifier", out}, {"total_tokens", 17}}, 2);
  }
}

}  // namespace
}  // namespace specbed
