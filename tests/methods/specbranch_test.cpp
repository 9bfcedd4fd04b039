// SpecBranch (methods/specbranch): token-identical to AR at T = 0 on every story prompt (full
// method with a pseudo-random H-RAD policy that visits every class, the shipped predictor when
// present, w/o branch, w/o H-RAD, serialised sides); lossless at T = 1 (exact chi-square over the
// top-3 sample space; the candidates are i.i.d. draws, repeats seen, as on the device walk), and
// the same test fails when branch selection accepts the first branch;
// the H-RAD MLP against a plain loop and its checkpoint round trip; registry entry. On the ATen
// path (forced on the CPU) at T = 1 every step is one device walk and no verify rows come to the
// host; the chi-square test runs again there as the ctest entry AtenPath.SpecBranchChiSquare
// (SPECBED_FORWARD=aten, tests/methods/CMakeLists.txt). The CUDA check of the copies per step is
// ParallelDecoderCuda.SampledStepsCopyOneVerdictPerStep in pearl_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdio>
#include <filesystem>

#include "methods/drafter_catalog.h"
#include "methods/method_registry.h"
#include "methods/specbranch/hrad_trainer.h"
#include "methods/specbranch/specbranch_decoder.h"
#include "tests/methods/method_test_util.h"
#include "tests/methods/parallel_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using parallel_test::Shared;

std::vector<int64_t> FeatureLayers() {
  HradConfig c;
  c.target_dim = Shared().target.model->config().dim;
  c.target_layers = Shared().target.model->config().n_layers;
  c.feature_layers = 4;
  return c.Layers();
}

std::unique_ptr<SpecBranchDecoder> Make(SpecBranchOptions options, uint64_t policy_seed = 3) {
  options.target_threads = 1;
  options.draft_threads = 1;
  return std::make_unique<SpecBranchDecoder>(
      *Shared().target.model, Shared().target.tokenizer.get(), Shared().draft.model,
      std::make_unique<RandomHradPolicy>(policy_seed), FeatureLayers(), options);
}

TEST(SpecBranch, MatchesArOnEveryStoryPrompt) {
  struct Variant {
    std::string name;
    SpecBranchOptions options;
  };
  std::vector<Variant> variants;
  variants.push_back({"full", {}});
  {
    SpecBranchOptions o;
    o.gamma_max = 6;
    o.k_max = 6;
    o.epsilon = 0.4;
    variants.push_back({"gamma 6, k 6, eps 0.4", o});
  }
  {
    SpecBranchOptions o;
    o.branch = false;
    variants.push_back({"w/o branch", o});
  }
  {
    SpecBranchOptions o;
    o.hrad = false;
    variants.push_back({"w/o H-RAD", o});
  }
  {
    SpecBranchOptions o;
    o.parallel = false;
    variants.push_back({"serialised", o});
  }
  for (const Variant& v : variants) {
    auto decoder = Make(v.options);
    double rollback = 0;
    parallel_test::ExpectSameAsAr(*decoder, 0.0, 96, "specbranch " + v.name, &rollback,
                                  &decoder->ledger());
    const SpecBranchCounters& c = decoder->counters();
    if (v.options.hrad) {
      for (int s = 0; s < 3; ++s) EXPECT_GT(c.class_count[s], 0) << v.name << " class " << s;
    }
    if (v.options.branch) {
      EXPECT_GT(c.branches, c.branch_points) << v.name << ": some branch points spawn > 1 branch";
    }
    EXPECT_GT(c.rollbacks, 0) << v.name;
  }
}

TEST(SpecBranch, ShippedPredictorMatchesAr) {
  const std::string dir = ResolveDrafterDir("stories260K-hrad");
  if (!std::filesystem::exists(dir + "/config.json")) GTEST_SKIP() << "no predictor at " << dir;
  HradCheckpoint ckpt = LoadHradCheckpoint(dir);
  SpecBranchOptions options;
  options.target_threads = 1;
  SpecBranchDecoder decoder(
      *Shared().target.model, Shared().target.tokenizer.get(), Shared().draft.model,
      std::make_unique<HradPredictor>(ckpt.config, ckpt.tensors), ckpt.config.Layers(), options);
  parallel_test::ExpectSameAsAr(decoder, 0.0, 96, "specbranch shipped H-RAD");
}

// gamma_max 0 = auto: ceil of the measured speed ratio c (methods/pearl/speed_ratio.h), built
// through the registry with the shipped predictor; still token-identical to AR.
TEST(SpecBranch, AutoChunkFromTheSpeedRatioMatchesAr) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context;
  context.target = &Shared().target;
  context.load_model = [](const std::string&) -> LoadedTarget& { return Shared().draft; };
  auto decoder =
      registry.Build("specbranch", context, {{"gamma_max", 0}, {"drafter", "stories260K-draft"}});
  EXPECT_GE(decoder->MaxDraftNodes(), 1);
  parallel_test::ExpectSameAsAr(*decoder, 0.0, 48, "specbranch gamma_max auto");
}

TEST(SpecBranch, LosslessAtTemperatureOneAndAcceptFirstBranchFails) {
  for (bool broken : {false, true}) {
    SpecBranchOptions options;
    options.gamma_max = 2;
    options.k_max = 6;
    options.test_accept_first_branch = broken;
    auto decoder = Make(options, 11);
    const double p = parallel_test::TopThreeChiSquareP(*decoder);
    EXPECT_GT(decoder->counters().branches, decoder->counters().branch_points);
    // The candidates are i.i.d. draws on the row path as on the device walk: repeats happen.
    EXPECT_GT(decoder->counters().repeated_candidates, 0);
    parallel_test::ExpectChiSquareVerdict("specbranch", p, broken,
                                          broken ? "accept first branch" : "multi-candidate rule",
                                          "accepting the first branch must fail the test");
  }
}

// The drafter's side at T = 1.5 (ExpectDraftSideChecks): row path only; the ATen path's draft
// distributions (DeviceDraftSampler) are checked by AtenPath.SpsChiSquare.
TEST(SpecBranch, LosslessAtTemperatureOnePointFiveAndDraftFaultsFail) {
  SpecBranchOptions options;
  options.gamma_max = 2;
  options.k_max = 6;
  parallel_test::ExpectDraftSideChecks(*Make(options, 11), "specbranch");
}

// T = 1 on the ATen path (forced on the CPU): every step's acceptance (R, then the branch
// point's i.i.d. candidates or the bonus) is one DeviceVerifier walk where the logits are; no
// [n + 1, V] verify rows come to the host; seeded; branches are spawned and kept.
TEST(SpecBranch, AtenPathAtTemperatureOneAcceptsOnTheDevice) {
  SetCpuForwardPathOverride(ForwardPath::kAten);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  LoadedTarget draft = LoadModel("stories260K-draft", at::kFloat);
  SetCpuForwardPathOverride(ForwardPath::kAuto);
  ASSERT_EQ(target.model->forward_path(), ForwardPath::kAten);
  SpecBranchOptions options;
  options.k_max = 6;
  options.target_threads = 1;
  // Two decoders with the same (stateful) pseudo-random policy: the same answers.
  SpecBranchDecoder decoder(*target.model, target.tokenizer.get(), draft.model,
                            std::make_unique<RandomHradPolicy>(5), FeatureLayers(), options);
  SpecBranchDecoder again(*target.model, target.tokenizer.get(), draft.model,
                          std::make_unique<RandomHradPolicy>(5), FeatureLayers(), options);
  int64_t accepted = 0, rollbacks = 0;
  parallel_test::ExpectOneDeviceWalkPerStep(decoder, again, target, "specbranch", accepted,
                                            rollbacks);
  EXPECT_GT(accepted, 0);
  EXPECT_GT(decoder.counters().branches, decoder.counters().branch_points);
  EXPECT_GT(decoder.counters().repeated_candidates, 0);  // i.i.d., as on the row path
  EXPECT_GT(decoder.counters().rollbacks, 0);
}

TEST(SpecBranch, HradMlpMatchesPlainLoopAndRoundTrips) {
  HradConfig c;
  c.target_dim = 8;
  c.target_layers = 5;
  c.feature_layers = 2;
  c.hidden = {6, 4};
  EXPECT_EQ(c.Layers(), (std::vector<int64_t>{4, 5}));
  const auto tensors = RandomHradTensors(c, 9);
  HradPredictor predictor(c, tensors);
  std::vector<float> z(static_cast<size_t>(c.input_dim()));
  for (size_t i = 0; i < z.size(); ++i) z[i] = std::sin(0.7 * i) * 3;
  const int cls = predictor.Classify(z);
  // Reference with ATen.
  at::Tensor x = at::tensor(z).view({1, -1});
  x = at::relu(at::addmm(tensors.at("mlp.0.bias"), x, tensors.at("mlp.0.weight").t()));
  x = at::relu(at::addmm(tensors.at("mlp.1.bias"), x, tensors.at("mlp.1.weight").t()));
  x = at::addmm(tensors.at("mlp.2.bias"), x, tensors.at("mlp.2.weight").t());
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(predictor.logits()[k], x[0][k].item<float>(), 1e-4);
  EXPECT_EQ(cls, x.argmax(1).item<int64_t>());
  const std::string dir = testing_util::ScratchDir(testing_util::TestName()) + "/hrad";
  WriteHradCheckpoint(dir, c, tensors);
  HradCheckpoint back = LoadHradCheckpoint(dir);
  EXPECT_EQ(back.config.Layers(), c.Layers());
  HradPredictor again(back.config, back.tensors);
  EXPECT_EQ(again.Classify(z), cls);
  EXPECT_EQ(again.logits(), predictor.logits());
}

// `specbed train hrad` on a tiny budget: labels of all three classes, a predictor that loads,
// matches the target's shape, records its recipe and held-out figures, and decodes like AR.
TEST(HradTrain, WritesALoadablePredictorWithRecipeAndEvaluation) {
  const std::string dir = testing_util::ScratchDir(testing_util::TestName()) + "/hrad";
  HradTrainConfig c;
  c.target = "stories260K";
  c.n_sequences = 6;
  c.n_eval_sequences = 2;
  c.seq_len = 48;
  c.optim = DefaultHradOptim();
  c.optim.steps = 60;
  c.optim.checkpoint_every = 30;
  TrainLoopOptions options;
  options.verbose = false;
  options.restart = true;
  const HradTrainResult r = TrainHrad(c, dir, options);
  ASSERT_TRUE(r.loop.finished);
  EXPECT_EQ(r.n_train, 6 * 46);  // positions 1 .. seq_len - 2
  EXPECT_EQ(r.n_eval, 2 * 46);
  const auto counts = r.evaluation.at("train_class_counts");
  for (int k = 0; k < 3; ++k) EXPECT_GT(counts[k].get<int64_t>(), 0) << "class " << k;
  HradCheckpoint ckpt = LoadHradCheckpoint(dir);
  EXPECT_EQ(ckpt.config.target_dim, 64);
  EXPECT_EQ(ckpt.config.target_layers, 5);
  EXPECT_EQ(ckpt.config.Layers(), FeatureLayers());
  EXPECT_EQ(ckpt.config.training.at("trainer"), "specbed train hrad");
  EXPECT_TRUE(ckpt.config.evaluation.contains("balanced_accuracy"));
  SpecBranchOptions options_sb;
  options_sb.target_threads = 1;
  SpecBranchDecoder decoder(
      *Shared().target.model, Shared().target.tokenizer.get(), Shared().draft.model,
      std::make_unique<HradPredictor>(ckpt.config, ckpt.tensors), ckpt.config.Layers(), options_sb);
  const auto& prompt = Shared().prompts[0];
  LoadedTarget& target = Shared().target;
  const GenerationConfig g = parallel_test::Config(target, 0.0, 48);
  KvCache cache = parallel_test::CacheFor(*target.model, prompt, 48, decoder);
  const GenerationResult ar = GenerateAr(*target.model, target.tokenizer.get(), prompt, g, cache);
  DecodeResult out;
  decoder.Generate(prompt, g, cache, out);
  EXPECT_EQ(out.generation.tokens, ar.tokens);
}

// The stored sampling rule names both parts (it said chain_rs, which the branch point does not
// use).
TEST(SpecBranch, RegisteredWithTraitsAndKnobs) {
  testing_util::ExpectBuiltin("specbranch",
                              {{"overlaps_verification", true},
                               {"needs_target_hidden", true},
                               {"sampling_verifier", "chain_rs+branch_rrs"}},
                              "stories260K-twin",
                              {{"drafter", "stories260K-twin-draft"},
                               {"predictor", "stories260K-twin-hrad"},
                               {"epsilon", 0.2}});
}

}  // namespace
}  // namespace specbed
