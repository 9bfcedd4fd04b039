// The `medusa` method (Medusa-1 heads, methods/medusa/): the published layout (a file written here
// with Medusa's own tensor names loads and computes the published forward; a wrong shape, a
// missing head or an extra tensor is refused naming the tensor; round trip), sparse trees from
// Medusa's choices format and calibrated from per-rank accuracies (the heads' config.json
// calibration round trip, `tree` auto / calibrated / prior, refusals), `specbed train medusa`
// (loss goes down, resume is exact, the written heads load, carry their calibration and draft),
// token identity with AR at T = 0 on every story prompt and on Spec-Bench
// prompts with the shipped heads (drafts accepted), and the T = 1 chi-square test with a negative
// control; the row-kernel forward of the heads (batch-invariant) against MedusaLogits.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "harness/engine/speculative_decoder.h"
#include "methods/common/rank_template.h"
#include "methods/common/train/regen.h"
#include "methods/medusa/medusa_drafter.h"
#include "methods/medusa/medusa_head.h"
#include "methods/medusa/medusa_trainer.h"
#include "methods/method_registry.h"
#include "models/checkpoint/safetensors.h"
#include "tests/methods/lookup_test_util.h"
#include "tests/methods/train_smoke_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

// Writes a Medusa directory the way the published repositories do: config.json with only the
// Medusa fields and medusa_lm_head.safetensors under the published names.
void WritePublished(const std::string& dir, int64_t heads, int64_t declared_heads,
                    const std::map<std::string, at::Tensor>& tensors) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json")
      << "{\"medusa_num_heads\": " << declared_heads
      << ", \"medusa_num_layers\": 1, \"base_model_name_or_path\": \"lmsys/vicuna-7b-v1.3\"}\n";
  std::vector<SafetensorsTensorView> views;
  for (const auto& [name, t] : tensors) {
    views.push_back({name, SafetensorsDtype::kF32, t.sizes().vec(), t.data_ptr(),
                     static_cast<size_t>(t.numel()) * sizeof(float)});
  }
  WriteSafetensors(dir + "/medusa_lm_head.safetensors", views, {{"format", "pt"}});
  (void)heads;
}

std::map<std::string, at::Tensor> PublishedTensors(int64_t heads, int64_t d, int64_t v) {
  at::manual_seed(1);
  std::map<std::string, at::Tensor> t;
  for (int64_t k = 0; k < heads; ++k) {
    const std::string p = std::to_string(k);
    t[p + ".0.linear.weight"] = at::randn({d, d}) * 0.1;
    t[p + ".0.linear.bias"] = at::randn({d}) * 0.1;
    t[p + ".1.weight"] = at::randn({v, d});
  }
  return t;
}

TEST(MedusaHead, PublishedLayoutLoadsAndComputesThePublishedForward) {
  const std::string dir = testing_util::ScratchDir("medusa_published");
  const auto tensors = PublishedTensors(2, 8, 11);
  WritePublished(dir, 2, 2, tensors);
  const MedusaHead head = ReadMedusaCheckpoint(dir, 8, 11);
  EXPECT_EQ(head.config.num_heads, 2);
  EXPECT_EQ(head.config.num_layers, 1);
  EXPECT_EQ(head.config.hidden_size, 8);
  EXPECT_EQ(head.config.vocab_size, 11);
  EXPECT_EQ(head.config.base_model, "lmsys/vicuna-7b-v1.3");
  const at::Tensor h = at::randn({3, 8});
  const at::Tensor logits = MedusaLogits(head, h);
  ASSERT_EQ(logits.sizes().vec(), (std::vector<int64_t>{2, 3, 11}));
  for (int64_t k = 0; k < 2; ++k) {  // ResBlock: x + SiLU(W x + b), then the head's lm_head
    const std::string p = std::to_string(k);
    const at::Tensor x = h + at::silu(at::matmul(h, tensors.at(p + ".0.linear.weight").t()) +
                                      tensors.at(p + ".0.linear.bias"));
    EXPECT_TRUE(
        at::allclose(logits[k], at::matmul(x, tensors.at(p + ".1.weight").t()), 1e-5, 1e-5));
  }
  // Round trip through SpecBed's writer.
  const std::string copy = dir + "_copy";
  WriteMedusaCheckpoint(copy, head);
  EXPECT_TRUE(fs::exists(copy + "/medusa_lm_head.safetensors"));
  const MedusaHead back = ReadMedusaCheckpoint(copy);
  for (const auto& [name, t] : head.tensors) EXPECT_TRUE(at::equal(back.tensors.at(name), t));
}

// Medusa-1's initialisation: every block's W zero, its bias nn.Linear's default (uniform in
// +-1/sqrt(dim), not all zero; seeded: the same seed gives the same values, another seed others),
// every lm_head the target's.
TEST(MedusaHead, InitZeroesTheBlockWeightOnly) {
  const at::Tensor lm_head = at::randn({32, 16});
  MedusaConfig mc;
  mc.num_heads = 2;
  const MedusaHead a = InitMedusaHead(mc, lm_head, 7), b = InitMedusaHead(mc, lm_head, 7),
                   c = InitMedusaHead(mc, lm_head, 8);
  for (int64_t k = 0; k < 2; ++k) {
    EXPECT_EQ(a.tensors.at(MedusaBlockWeightName(k, 0)).abs().max().item<float>(), 0.f);
    const at::Tensor bias = a.tensors.at(MedusaBlockBiasName(k, 0));
    EXPECT_GT(bias.abs().max().item<float>(), 0.f);
    EXPECT_LE(bias.abs().max().item<float>(), 0.25f);  // 1 / sqrt(16)
    EXPECT_TRUE(at::equal(bias, b.tensors.at(MedusaBlockBiasName(k, 0))));
    EXPECT_FALSE(at::equal(bias, c.tensors.at(MedusaBlockBiasName(k, 0))));
    EXPECT_TRUE(at::equal(a.tensors.at(MedusaLmHeadName(k, 1)), lm_head));
  }
}

// Heads cast to a bf16 target's dtype compute the float32 heads' logits within bf16 rounding, as
// float32, and refuse a hidden state of another dtype naming it.
TEST(MedusaHead, HeadsInTheTargetDtypeGiveFloat32Logits) {
  const std::string dir = testing_util::ScratchDir("medusa_bf16");
  WritePublished(dir, 2, 2, PublishedTensors(2, 8, 11));
  const MedusaHead head = ReadMedusaCheckpoint(dir, 8, 11);
  MedusaHead low = head;
  for (auto& [name, t] : low.tensors) t = t.to(at::kBFloat16);
  at::manual_seed(4);
  const at::Tensor h = at::randn({3, 8});
  const at::Tensor want = MedusaLogits(head, h);
  const at::Tensor got = MedusaLogits(low, h.to(at::kBFloat16));
  EXPECT_EQ(got.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose(got, want, 0.05, 0.05)) << (got - want).abs().max();
  EXPECT_NE(ErrorOf([&] { MedusaLogits(low, h); }).find("hidden must be BFloat16"),
            std::string::npos);
}

TEST(MedusaHead, WrongShapeMissingHeadOrExtraTensorIsRefusedNamingIt) {
  const std::string dir = testing_util::ScratchDir("medusa_refusals");
  auto tensors = PublishedTensors(2, 8, 11);
  tensors["1.0.linear.weight"] = at::zeros({8, 9});
  WritePublished(dir, 2, 2, tensors);
  std::string e = ErrorOf([&] { ReadMedusaCheckpoint(dir); });
  EXPECT_NE(e.find("'1.0.linear.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("expected [8, 8]"), std::string::npos) << e;

  WritePublished(dir, 2, 3, PublishedTensors(2, 8, 11));  // config says 3 heads
  e = ErrorOf([&] { ReadMedusaCheckpoint(dir); });
  EXPECT_NE(e.find("'2.0.linear.weight' is missing"), std::string::npos) << e;

  auto extra = PublishedTensors(2, 8, 11);
  extra["2.1.weight"] = at::zeros({11, 8});
  WritePublished(dir, 2, 2, extra);
  e = ErrorOf([&] { ReadMedusaCheckpoint(dir); });
  EXPECT_NE(e.find("unexpected tensor"), std::string::npos) << e;
  EXPECT_NE(e.find("'2.1.weight'"), std::string::npos) << e;

  WritePublished(dir, 2, 2, PublishedTensors(2, 8, 11));
  e = ErrorOf([&] { ReadMedusaCheckpoint(dir, 8, 12); });
  EXPECT_NE(e.find("does not match the target's 12"), std::string::npos) << e;
}

TEST(RankChoices, MedusaFormatParsesSortsAndRefusesBadTrees) {
  const auto t = ParseRankChoices("[[1], [0, 1], [0], [0, 0]]", 10, 4, "test");
  ASSERT_EQ(t.size(), 4u);  // sorted: [0] [1] [0,0] [0,1]
  EXPECT_EQ(t[0].parent, -1);
  EXPECT_EQ(t[1].rank, 1);
  EXPECT_EQ(t[2].parent, 0);
  EXPECT_EQ(t[3].parent, 0);
  EXPECT_EQ(t[3].rank, 1);
  EXPECT_EQ(t[3].depth, 2);
  auto err = [](const std::string& json, int64_t depth = 4) {
    return ErrorOf([&] { ParseRankChoices(json, 10, depth, "medusa knob choices"); });
  };
  EXPECT_NE(err("[[0, 1]]").find("has no parent [0]"), std::string::npos);
  EXPECT_NE(err("[[0], [10]]").find("rank 10 outside [0, 10)"), std::string::npos);
  EXPECT_NE(err("[[0], [0, 0]]", 1).find("deeper than 1"), std::string::npos);
  EXPECT_NE(err("[[0], [0]]").find("listed twice"), std::string::npos);
  EXPECT_NE(err("[[0]").find("not JSON"), std::string::npos);
  EXPECT_NE(err("[[]]").find("not a non-empty list"), std::string::npos);
}

// Medusa's calibrated tree: paths by the product of per-depth rank accuracies. A hand example
// (ties: the shallower path first), ranks reordered where a lower rank is more accurate, and the
// geometric prior's accuracies give exactly BuildRankTemplate's tree.
TEST(RankChoices, CalibratedTreeTakesTheMostLikelyPaths) {
  const auto t = BuildCalibratedRankTemplate(4, {{0.6, 0.3}, {0.5, 0.1}});
  ASSERT_EQ(t.size(), 4u);  // [0] 0.6, [1] 0.3, [0, 0] 0.3 (deeper: after [1]), [1, 0] 0.15
  EXPECT_EQ(t[0].parent, -1);
  EXPECT_EQ(t[0].rank, 0);
  EXPECT_EQ(t[1].parent, -1);
  EXPECT_EQ(t[1].rank, 1);
  EXPECT_EQ(t[2].parent, 0);
  EXPECT_EQ(t[2].depth, 2);
  EXPECT_EQ(t[3].parent, 1);
  EXPECT_EQ(t[3].rank, 0);
  const auto swapped = BuildCalibratedRankTemplate(2, {{0.1, 0.4, 0.2}});
  EXPECT_EQ(swapped[0].rank, 1);
  EXPECT_EQ(swapped[1].rank, 2);
  std::vector<double> geometric;
  for (int r = 0; r < 6; ++r) geometric.push_back(std::ldexp(1.0, -(r + 1)));
  const auto calibrated = BuildCalibratedRankTemplate(40, {geometric, geometric, geometric});
  const auto prior = BuildRankTemplate(40, 6, 3);
  ASSERT_EQ(calibrated.size(), prior.size());
  for (size_t i = 0; i < prior.size(); ++i) {
    EXPECT_EQ(calibrated[i].parent, prior[i].parent) << i;
    EXPECT_EQ(calibrated[i].rank, prior[i].rank) << i;
    EXPECT_EQ(calibrated[i].depth, prior[i].depth) << i;
  }
}

// The heads' calibration: written with them and read back; `tree` auto takes it (calibrated) and
// falls back to the prior without one; calibrated without one, and a malformed calibration, are
// refused naming what is wrong.
TEST(MedusaHead, CalibrationRoundTripsAndChoosesTheTree) {
  const std::string dir = testing_util::ScratchDir("medusa_calibration");
  WritePublished(dir, 2, 2, PublishedTensors(2, 8, 11));
  MedusaHead head = ReadMedusaCheckpoint(dir);
  EXPECT_TRUE(head.config.rank_accuracy.empty());
  MedusaOptions o;
  o.tree_nodes = 3;
  o.top_k = 2;
  const auto prior = MedusaTemplate(o, head.config, "test");
  o.tree = MedusaTree::kCalibrated;
  EXPECT_NE(ErrorOf([&] { MedusaTemplate(o, head.config, "test"); }).find("specbed_calibration"),
            std::string::npos);
  // Heads whose first candidates are nearly always right: the chain of top-1s comes first.
  head.config.rank_accuracy = {{0.9, 0.05, 0.01}, {0.9, 0.05, 0.0}};
  WriteMedusaCheckpoint(dir + "_cal", head);
  const MedusaHead back = ReadMedusaCheckpoint(dir + "_cal");
  EXPECT_EQ(back.config.rank_accuracy, head.config.rank_accuracy);
  o.tree = MedusaTree::kAuto;
  const auto calibrated = MedusaTemplate(o, back.config, "test");
  ASSERT_EQ(calibrated.size(), 3u);  // [0] 0.9, [0, 0] 0.81, [1] 0.05 (above [0, 1] 0.045)
  EXPECT_EQ(calibrated[1].depth, 2);
  EXPECT_EQ(calibrated[2].rank, 1);
  EXPECT_EQ(calibrated[2].depth, 1);
  EXPECT_EQ(prior[1].depth, 1);  // the prior: [0] 1/2, then [1] 1/4 before [0, 0] 1/4
  o.tree = MedusaTree::kPrior;
  EXPECT_EQ(MedusaTemplate(o, back.config, "test")[1].depth, 1);

  auto refusal = [&](const std::string& calibration) {
    std::ofstream(dir + "/config.json")
        << "{\"medusa_num_heads\": 2, \"medusa_num_layers\": 1, \"specbed_calibration\": "
        << calibration << "}\n";
    return ErrorOf([&] { ReadMedusaCheckpoint(dir); });
  };
  EXPECT_NE(refusal("{\"head_rank_accuracy\": [[0.5]]}").find("medusa_num_heads (2) rows"),
            std::string::npos);
  EXPECT_NE(refusal("{\"head_rank_accuracy\": [[0.8, 0.3], [0.1, 0.1]]}").find("sums to 1.1"),
            std::string::npos);
  EXPECT_NE(refusal("{\"head_rank_accuracy\": [[0.5], [0.1, 0.1]]}").find("same length"),
            std::string::npos);
  EXPECT_NE(refusal("{\"head_rank_accuracy\": [[-0.5], [0.1]]}").find("in [0, 1]"),
            std::string::npos);
}

TEST(MedusaTrainer, LossGoesDownResumesExactlyAndTheHeadsDraft) {
  at::set_num_threads(1);
  const std::string dir = testing_util::ScratchDir("medusa_trainer");
  MedusaTrainConfig c;
  c.num_heads = 3;
  c.optim = DefaultMedusaOptim();
  MedusaTrainResult full;
  ASSERT_NO_FATAL_FAILURE(testing_util::ExpectSmokeTrainsAndResumes(
      TrainMedusa, testing_util::WriteSmokeRegenData(dir), c, dir + "/", "medusa", &full));
  EXPECT_TRUE(fs::exists(dir + "/full/medusa_lm_head.safetensors"));
  // The written heads carry their calibration: rank 0 of head k is its held-out top-1.
  const MedusaHead trained = ReadMedusaCheckpoint(dir + "/full");
  ASSERT_EQ(trained.config.rank_accuracy.size(), 3u);
  const nlohmann::json top1 = full.loop.eval.extra["head_top1"];
  for (int64_t k = 0; k < 3; ++k) {
    ASSERT_EQ(trained.config.rank_accuracy[k].size(), static_cast<size_t>(kMedusaCalibrationTopK));
    EXPECT_NEAR(trained.config.rank_accuracy[k][0], top1[k].get<double>(), 1e-9) << k;
  }
  const TrainLoopOptions quiet = testing_util::QuietLoop();
  EXPECT_THROW(
      {
        MedusaTrainConfig bad = c;
        bad.num_heads = 0;
        TrainMedusa(bad, dir + "/bad", quiet);
      },
      Error);

  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  MethodContext context;
  context.target = &target;
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  auto decoder = registry.Build("medusa", context, {{"head", dir + "/full"}, {"tree_nodes", 8}});
  const auto stories = testing_util::StoryIds(target);
  EXPECT_GT(testing_util::ExpectArTokens(*decoder, target, {stories[0], stories[1]}, 32), 0);
}

TEST(Medusa, MatchesArOnEveryStoryPromptAndOnSpecBench) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  const MethodInfo& info = registry.Info("medusa");
  EXPECT_TRUE(info.traits.tree && info.traits.needs_drafter && info.traits.needs_target_hidden);
  const nlohmann::json orphan = registry.ResolveKnobs("medusa", {{"choices", "[[0, 0]]"}});
  EXPECT_THROW(info.validate(orphan), Error);  // refused before any case runs
  // The shipped heads with their calibrated tree (tree auto), the prior tree, and a tree in
  // Medusa's choices format.
  testing_util::ExpectMatchesArOnStoriesAndSpecBench(
      "medusa", {nlohmann::json::object(),
                 {{"tree", "prior"}},
                 {{"choices", "[[0], [0, 0], [1], [0, 1], [0, 0, 0], [2]]"}}});
}

// The row-kernel forward (drafting beside a row-kernel target) computes MedusaLogits, float32 and
// bfloat16 heads, and gives each row the same bits at any row count: a sequence's tree does not
// depend on its batch-mates. A hidden state on the wrong dtype is refused naming it.
TEST(MedusaHead, RowKernelLogitsEqualTheForwardAndDoNotDependOnTheRowCount) {
  const std::string dir = testing_util::ScratchDir("medusa_rows");
  WritePublished(dir, 3, 3, PublishedTensors(3, 40, 37));
  const MedusaHead head = ReadMedusaCheckpoint(dir, 40, 37);
  MedusaHead low = head;
  for (auto& [name, t] : low.tensors) t = t.to(at::kBFloat16).contiguous();
  at::manual_seed(9);
  const at::Tensor h = at::randn({11, 40});
  for (const MedusaHead* heads : std::vector<const MedusaHead*>{&head, &low}) {
    const at::ScalarType dtype = heads->tensors.begin()->second.scalar_type();
    SCOPED_TRACE(c10::toString(dtype));
    const at::Tensor x = h.to(dtype).contiguous();
    const at::Tensor rows = MedusaLogitsRows(*heads, x);
    ASSERT_EQ(rows.sizes().vec(), (std::vector<int64_t>{3, 11, 37}));
    EXPECT_EQ(rows.scalar_type(), at::kFloat);
    const at::Tensor want = MedusaLogits(*heads, x);
    const double tol = dtype == at::kFloat ? 1e-4 : 0.1;
    EXPECT_TRUE(at::allclose(rows, want, tol, tol)) << (rows - want).abs().max();
    for (int64_t i : {0, 5, 10}) {
      EXPECT_TRUE(
          at::equal(MedusaLogitsRows(*heads, x.narrow(0, i, 1)).select(1, 0), rows.select(1, i)))
          << "row " << i << " alone";
    }
    EXPECT_TRUE(at::equal(MedusaLogitsRows(*heads, x.narrow(0, 3, 4)), rows.narrow(1, 3, 4)));
  }
  EXPECT_NE(ErrorOf([&] { MedusaLogitsRows(low, h); }).find("hidden must be BFloat16"),
            std::string::npos);
}

// At T = 1 (sample_follow over deterministic trees) the output is the target's distribution;
// the greedy-acceptance negative control fails (testing_util::ExpectLosslessAtTemperatureOne).
// The heads are Medusa-1's initialisation on the tiny target (each head = the target's lm_head).
TEST(Medusa, LosslessAtTemperatureOne) {
  at::set_num_threads(1);
  std::shared_ptr<LlamaModel> target = testing_util::TinyRandomTarget(21, 60.0);
  MedusaConfig mc;
  mc.num_heads = 3;
  MedusaOptions o;
  o.tree_nodes = 6;
  o.top_k = 2;
  testing_util::ExpectLosslessAtTemperatureOne(
      std::make_unique<MedusaDrafter>(
          *target, MedusaHeadOn(InitMedusaHead(mc, target->weights().lm_head, 5), *target), o),
      6, target);
}

}  // namespace
}  // namespace specbed
