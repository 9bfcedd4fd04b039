// BlockPilot (methods/blockpilot/): the predictor forward against a plain-loop double reference
// (every input kind, 1-3 layers); candidates and the label rule (ties toward the trained block
// size, then the smaller b); predictor checkpoint round trip and malformed directories; the label
// file round trip and malformed files; labelling with a seeded random DFlash head over
// stories260K (τ, tokens and steps per candidate equal running the `dflash` method at that block
// size, the stored p(x) equals the target's prefill logits, an interrupted run resumes to the
// same rows); training on a synthetic separable label set reaches high held-out accuracy (fixed
// seed) and writes a predictor that predicts what the trained MLP predicts; the figures on a
// hand-made label set; the controller applies the predicted block size (also above the head's
// trained size) and `dflash+blockpilot` is token-identical to AR at T = 0 in fp32 on 8 story
// prompts; the radius / block-size / vocabulary mismatch errors. Seeds are fixed and nothing is
// sampled at test time, so the false-failure rate is 0.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <tuple>

#include "base/error.h"
#include "base/mapped_file.h"
#include "datasets/dataset.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/engine/verifier.h"
#include "harness/runner/runner.h"
#include "methods/blockpilot/blockpilot_labels.h"
#include "methods/blockpilot/blockpilot_method.h"
#include "methods/blockpilot/blockpilot_oracle.h"
#include "methods/blockpilot/blockpilot_predictor.h"
#include "methods/blockpilot/blockpilot_trainer.h"
#include "methods/common/head_aten.h"
#include "methods/dflash/dflash_checkpoint.h"
#include "methods/dflash/dflash_drafter.h"
#include "methods/dflash/dflash_head.h"
#include "methods/method_registry.h"
#include "models/checkpoint/safetensors.h"
#include "results/store.h"
#include "tests/common/cuda_test_util.h"
#include "tests/engine/engine_test_util.h"
#include "tests/methods/dflash_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;
using testing::HasSubstr;
using ojson = nlohmann::ordered_json;

// Expects `body` to throw specbed::Error whose message contains every one of `parts`.
template <typename F>
void ExpectError(F body, const std::vector<std::string>& parts) {
  try {
    body();
    ADD_FAILURE() << "no error; expected one containing '" << parts.front() << "'";
  } catch (const Error& e) {
    for (const auto& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
  }
}

BlockPilotConfig SmallConfig(BlockPilotInput input, int64_t layers) {
  BlockPilotConfig c;
  c.vocab_size = 37;
  c.trained_block_size = 4;
  c.radius = 2;
  c.candidates = BlockPilotCandidates(4, 2);
  c.input = input;
  c.hidden_size = 9;
  c.num_layers = layers;
  return c;
}

// Plain-loop double reference of the predictor's candidate logits.
std::vector<double> ReferenceScores(const BlockPilotConfig& c,
                                    const std::map<std::string, at::Tensor>& t,
                                    const std::vector<float>& z) {
  const int64_t v = c.vocab_size;
  std::vector<double> x(v);
  double max_z = -1e300, sum = 0;
  for (float f : z) max_z = std::max(max_z, static_cast<double>(f));
  for (float f : z) sum += std::exp(f - max_z);
  for (int64_t i = 0; i < v; ++i) {
    if (c.input == BlockPilotInput::kProbs) x[i] = std::exp(z[i] - max_z) / sum;
    if (c.input == BlockPilotInput::kLogProbs) x[i] = z[i] - max_z - std::log(sum);
    if (c.input == BlockPilotInput::kLogits) x[i] = z[i];
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const at::Tensor w = t.at(BlockPilotTensorName(l, false)).contiguous();
    const at::Tensor b = t.at(BlockPilotTensorName(l, true)).contiguous();
    std::vector<double> y(w.size(0));
    for (int64_t o = 0; o < w.size(0); ++o) {
      double acc = b.data_ptr<float>()[o];
      for (int64_t i = 0; i < w.size(1); ++i) acc += w.data_ptr<float>()[o * w.size(1) + i] * x[i];
      y[o] = (l + 1 < c.num_layers) ? std::max(acc, 0.0) : acc;
    }
    x = y;
  }
  return x;
}

TEST(BlockPilotPredictor, ForwardMatchesPlainLoopReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 3.f);
  for (BlockPilotInput input :
       {BlockPilotInput::kProbs, BlockPilotInput::kLogits, BlockPilotInput::kLogProbs}) {
    for (int64_t layers : {1, 2, 3}) {
      SCOPED_TRACE(std::string(BlockPilotInputName(input)) + " layers " + std::to_string(layers));
      const BlockPilotConfig c = SmallConfig(input, layers);
      auto tensors = RandomBlockPilotTensors(c, 11);
      for (auto& [name, t] : tensors) {  // biases away from 0, larger weights: ReLU matters
        if (t.dim() == 1) t.normal_(0, 0.5, at::make_generator<at::CPUGeneratorImpl>(7));
        if (t.dim() == 2) t.mul_(8.0);
      }
      BlockPilotPredictor predictor(c, tensors);
      for (int trial = 0; trial < 5; ++trial) {
        std::vector<float> z(c.vocab_size);
        for (float& f : z) f = normal(rng);
        const std::vector<double> ref = ReferenceScores(c, tensors, z);
        const int64_t b = predictor.Predict(z.data());
        const float* s = predictor.scores().data_ptr<float>();
        int64_t best = 0;
        for (int64_t k = 0; k < c.n_candidates(); ++k) {
          EXPECT_NEAR(s[k], ref[k], 1e-4 * std::max(1.0, std::abs(ref[k])));
          if (ref[k] > ref[best]) best = k;
        }
        EXPECT_EQ(b, c.candidates[best]);
      }
    }
  }
}

TEST(BlockPilotPredictor, CandidatesAndLabelRule) {
  EXPECT_EQ(BlockPilotCandidates(16, 2), (std::vector<int64_t>{14, 15, 16, 17, 18}));
  EXPECT_EQ(BlockPilotCandidates(3, 2), (std::vector<int64_t>{2, 3, 4, 5}));  // 1 dropped
  EXPECT_EQ(BlockPilotCandidates(2, 3), (std::vector<int64_t>{2, 3, 4, 5}));
  ExpectError([] { BlockPilotCandidates(1, 2); }, {"block size must be >= 2"});
  const std::vector<int64_t> cand{6, 7, 8, 9, 10};  // trained 8
  const double nan = std::nan("");
  struct Case {
    std::vector<double> values;
    int64_t want;  // block size
  } cases[] = {
      {{1, 2, 3, 2, 1}, 8},      // plain argmax
      {{1, 4, 3, 2, 4}, 7},      // tie without the trained size: the smaller b
      {{4, 2, 4, 2, 4}, 8},      // tie including the trained size: the trained size
      {{1, 1, 1, 1, 1}, 8},      // all equal
      {{2, 2, 1, 1, 3}, 10},     // strict max beats the trained size
      {{nan, 2, nan, 1, 2}, 7},  // NaN never wins
      {{nan, nan, nan, nan, nan}, 8},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(cand[ChooseBlockLabel(c.values.data(), cand, 8)], c.want) << ojson(c.values).dump();
  }
  EXPECT_EQ(ParseBlockPilotInput("log_probs", "x"), BlockPilotInput::kLogProbs);
  ExpectError([] { ParseBlockPilotInput("prob", "ctx"); }, {"ctx", "'prob'", "probs"});
}

TEST(BlockPilotPredictor, CheckpointRoundTripAndMalformed) {
  const std::string dir = testing_util::ScratchDir("blockpilot_ckpt");
  BlockPilotConfig c = SmallConfig(BlockPilotInput::kLogProbs, 2);
  c.training = {{"prompts", {{"source", "bos"}}}, {"criterion", "tau"}};
  c.evaluation = {{"heldout", {{"accuracy", 0.5}}}};
  const auto tensors = RandomBlockPilotTensors(c, 3);
  WriteBlockPilotCheckpoint(dir, c, tensors);
  const BlockPilotCheckpoint back = LoadBlockPilotCheckpoint(dir);
  EXPECT_EQ(back.config.candidates, c.candidates);
  EXPECT_EQ(back.config.input, BlockPilotInput::kLogProbs);
  EXPECT_EQ(back.config.hidden_size, 9);
  EXPECT_EQ(nlohmann::json(back.config.training), nlohmann::json(c.training));
  EXPECT_EQ(nlohmann::json(back.config.evaluation), nlohmann::json(c.evaluation));
  ASSERT_EQ(back.tensors.size(), tensors.size());
  for (const auto& [name, t] : tensors) EXPECT_TRUE(at::equal(back.tensors.at(name), t)) << name;

  // Malformed config.json fields.
  const std::string config_path = dir + "/config.json";
  const ojson good = ojson::parse(ReadFileToString(config_path));
  auto with = [&](const std::string& key, const ojson& value) {
    ojson j = good;
    if (value.is_null()) {
      j.erase(key);
    } else {
      j[key] = value;
    }
    WriteFileAtomically(config_path, j.dump());
  };
  with("candidates", ojson::array({2, 3, 4, 5}));
  ExpectError([&] { LoadBlockPilotCheckpoint(dir); },
              {config_path, "candidates [2,3,4,5]", "expected [2,3,4,5,6]"});
  with("input", "softmax");
  ExpectError([&] { LoadBlockPilotCheckpoint(dir); }, {config_path, "'softmax'"});
  with("format", "something-else");
  ExpectError([&] { LoadBlockPilotCheckpoint(dir); }, {config_path, "format"});
  with("hidden_size", nullptr);
  ExpectError([&] { LoadBlockPilotCheckpoint(dir); }, {config_path, "hidden_size"});
  with("num_layers", 3);  // the tensors are for 2 layers
  ExpectError([&] { LoadBlockPilotCheckpoint(dir); },
              {"model.safetensors", "mlp.1.bias", "shape [5], expected [9]", "num_layers 3"});
  WriteFileAtomically(config_path, good.dump());

  // Malformed tensors.
  auto write_tensors = [&](std::map<std::string, at::Tensor> t) {
    std::vector<SafetensorsTensorView> views;
    for (auto& [name, x] : t) {
      x = x.contiguous();
      views.push_back({name, SafetensorsDtype::kF32, x.sizes().vec(), x.data_ptr(),
                       static_cast<size_t>(x.numel() * 4)});
    }
    WriteSafetensors(dir + "/model.safetensors", views);
  };
  auto bad = tensors;
  bad.erase("mlp.1.bias");
  write_tensors(bad);
  ExpectError([&] { LoadBlockPilotCheckpoint(dir); }, {dir, "missing tensor 'mlp.1.bias'"});
  bad = tensors;
  bad["mlp.1.bais"] = bad["mlp.1.bias"];
  write_tensors(bad);
  ExpectError([&] { LoadBlockPilotCheckpoint(dir); }, {"'mlp.1.bais'", "did you mean"});
  bad = tensors;
  bad["mlp.0.weight"] = at::zeros({9, 36});
  write_tensors(bad);
  ExpectError([&] { LoadBlockPilotCheckpoint(dir); },
              {"mlp.0.weight", "shape [9, 36], expected [9, 37]"});
  fs::remove(dir + "/model.safetensors");
  ExpectError([&] { LoadBlockPilotCheckpoint(dir); }, {dir, "no model.safetensors"});
  ExpectError([&] { LoadBlockPilotCheckpoint(dir + "/nope"); }, {"not a directory"});
}

// A label set with `n` prompts over vocabulary `vocab`, candidates of (trained, radius) and the
// given per-cell τ (steps 10 each) and decode times.
BlockPilotLabels MakeLabels(int64_t n, int64_t vocab, int64_t trained, int64_t radius,
                            const std::vector<double>& tau, const std::vector<double>& ms) {
  BlockPilotLabels l;
  l.candidates = BlockPilotCandidates(trained, radius);
  l.trained_block_size = trained;
  l.vocab_size = vocab;
  const int64_t nc = l.n_candidates();
  l.logits.assign(n * vocab, 0.f);
  l.prompt_offsets = {0};
  l.provenance = {{"format", "specbed-blockpilot-labels"},
                  {"format_version", kBlockPilotLabelsVersion},
                  {"radius", radius},
                  {"prompts", {{"source", "synthetic"}}},
                  {"prompt_index", ojson::array()}};
  for (int64_t i = 0; i < n; ++i) {
    l.prompt_tokens.push_back(1);
    l.prompt_tokens.push_back(static_cast<int32_t>(i % vocab));
    l.prompt_offsets.push_back(2 * (i + 1));
    l.provenance["prompt_index"].push_back(i);
    for (int64_t c = 0; c < nc; ++c) {
      l.steps.push_back(10);
      l.decode_tokens.push_back(static_cast<int64_t>(std::llround(tau[i * nc + c] * 10)));
      l.tau.push_back(l.decode_tokens.back() / 10.0);
      l.decode_ms.push_back(ms[i * nc + c]);
    }
  }
  return l;
}

TEST(BlockPilotLabels, FileRoundTripAndMalformed) {
  const std::string dir = testing_util::ScratchDir("blockpilot_labels_file");
  const BlockPilotLabels l =
      MakeLabels(3, 5, 4, 1, {1, 2, 3, 2, 2, 2, 3, 2, 1}, {9, 8, 7, 1, 2, 3, 5, 5, 5});
  const std::string path = dir + "/l.safetensors";
  WriteBlockPilotLabels(path, l);
  const BlockPilotLabels back = LoadBlockPilotLabels(path);
  EXPECT_EQ(back.candidates, l.candidates);
  EXPECT_EQ(back.tau, l.tau);
  EXPECT_EQ(back.decode_ms, l.decode_ms);
  EXPECT_EQ(back.prompt_tokens, l.prompt_tokens);
  EXPECT_EQ(back.trained_block_size, 4);
  EXPECT_EQ(BlockPilotLabelIndices(back, "tau"), (std::vector<int64_t>{2, 1, 0}));
  // throughput = tokens / ms: row 0 {10/9, 20/8, 30/7}; row 1 {20, 10, 6.7}; row 2 {6, 4, 2}.
  EXPECT_EQ(BlockPilotLabelIndices(back, "throughput"), (std::vector<int64_t>{2, 0, 0}));
  ExpectError([&] { BlockPilotLabelIndices(back, "speed"); }, {"'speed'", "tau, throughput"});

  BlockPilotLabels bad = l;
  bad.tau[4] = 5.0;
  ExpectError([&] { WriteBlockPilotLabels(path, bad); }, {"row 1", "tau 5"});
  bad = l;
  bad.candidates = {2, 3, 4};
  ExpectError([&] { WriteBlockPilotLabels(path, bad); }, {"candidates [2,3,4]"});
  bad = l;
  bad.steps[0] = 0;
  ExpectError([&] { WriteBlockPilotLabels(path, bad); }, {"verify step"});
  // A safetensors file without the metadata key.
  const std::vector<int64_t> one{1};
  WriteSafetensors(dir + "/other.safetensors",
                   {{"candidates", SafetensorsDtype::kI64, {1}, one.data(), 8}});
  ExpectError([&] { LoadBlockPilotLabels(dir + "/other.safetensors"); },
              {"other.safetensors", "specbed_blockpilot_labels"});
  ExpectError([&] { LoadBlockPilotLabels(dir + "/missing.safetensors"); }, {"does not exist"});
}

TEST(BlockPilotTrainer, FiguresOnHandMadeLabels) {
  // 2 prompts, candidates {3, 4, 5} (trained 4).
  const BlockPilotLabels l =
      MakeLabels(2, 4, 4, 1, {1.0, 2.0, 3.0, 4.0, 2.0, 1.0}, {10, 10, 10, 10, 40, 40});
  const ojson j = BlockPilotFigures(l, {0, 1}, {1, 1}, "tau");
  // Oracle by τ: b=5 for prompt 0 (τ 3), b=3 for prompt 1 (τ 4): mean 3.5; tokens 30 + 40 in
  // 10 + 10 ms = 3500 tok/s.
  EXPECT_DOUBLE_EQ(j["oracle_tau"]["mean_tau"].get<double>(), 3.5);
  EXPECT_DOUBLE_EQ(j["oracle_tau"]["tokens_per_s"].get<double>(), 3500);
  // Fixed b: 3 -> τ 2.5, (10 + 40) / 20 ms; 4 -> τ 2, 40 / 50 ms; 5 -> τ 2, 40 / 50 ms.
  EXPECT_EQ(j["best_fixed_tau"]["block_size"].get<int64_t>(), 3);
  EXPECT_DOUBLE_EQ(j["best_fixed_tau"]["mean_tau"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(j["fixed"]["4"]["tokens_per_s"].get<double>(), 800);
  EXPECT_EQ(j["trained_block_size"]["block_size"].get<int64_t>(), 4);
  // The predictor chose b=4 everywhere: accuracy 0 against the τ labels (5, 3).
  EXPECT_DOUBLE_EQ(j["predictor"]["mean_tau"].get<double>(), 2.0);
  EXPECT_DOUBLE_EQ(j["predictor"]["accuracy"].get<double>(), 0.0);
  EXPECT_EQ(j["label_histogram"].dump(), R"({"3":1,"4":0,"5":1})");
  // Throughput oracle: prompt 0 all 10 ms -> b=5 (30 tokens); prompt 1 -> b=3 (10 ms).
  EXPECT_DOUBLE_EQ(j["oracle_throughput"]["tokens_per_s"].get<double>(), 3500);
}

// 200 separable synthetic prompts written to dir/labels.safetensors (their classes in *cls, the
// labels in *labels) and the training config on them.
BlockPilotTrainConfig SeparableLabelsConfig(const std::string& dir, std::vector<int64_t>* cls_out,
                                            BlockPilotLabels* labels_out) {
  // 200 prompts over a vocabulary of 24; the class k in {0, 1, 2} (b = 3, 4, 5) puts the peak of
  // p(x) on a token of group k (tokens 8k .. 8k + 7), so the label is a function of p(x).
  const int64_t n = 200, vocab = 24, nc = 3;
  std::mt19937 rng(17);
  std::vector<double> tau(n * nc), ms(n * nc, 10.0);
  std::vector<int64_t>& cls = *cls_out;
  cls.assign(n, 0);
  for (int64_t i = 0; i < n; ++i) {
    cls[i] = static_cast<int64_t>(rng() % 3);
    for (int64_t c = 0; c < nc; ++c) tau[i * nc + c] = c == cls[i] ? 3.0 : 1.5 + 0.1 * c;
  }
  BlockPilotLabels l = MakeLabels(n, vocab, 4, 1, tau, ms);
  std::normal_distribution<float> noise(0.f, 1.f);
  for (int64_t i = 0; i < n; ++i) {
    float* z = l.logits.data() + i * vocab;
    for (int64_t v = 0; v < vocab; ++v) z[v] = noise(rng);
    z[8 * cls[i] + static_cast<int64_t>(rng() % 8)] += 6.f;
  }
  const std::string path = dir + "/labels.safetensors";
  WriteBlockPilotLabels(path, l);

  BlockPilotTrainConfig c;
  c.labels = path;
  c.hidden = 32;
  c.layers = 2;
  c.optim = DefaultBlockPilotOptim();
  c.optim.steps = 150;
  c.optim.batch = 16;
  c.optim.lr = 1e-2;
  c.optim.min_lr = 1e-3;
  c.optim.seed = 2;
  *labels_out = l;
  return c;
}

TEST(BlockPilotTrainer, SeparableSyntheticLabelsReachHighAccuracy) {
  at::set_num_threads(1);
  const std::string dir = testing_util::ScratchDir("blockpilot_train");
  std::vector<int64_t> cls;
  BlockPilotLabels l;
  const BlockPilotTrainConfig c = SeparableLabelsConfig(dir, &cls, &l);
  const int64_t n = 200;
  TrainLoopOptions run;
  run.verbose = false;
  const BlockPilotTrainResult r = TrainBlockPilot(c, dir + "/out", run);
  ASSERT_TRUE(r.loop.finished);
  EXPECT_EQ(r.n_eval, 20);
  EXPECT_EQ(r.n_train, 180);
  const ojson& heldout = r.evaluation["heldout"];
  EXPECT_GE(heldout["predictor"]["accuracy"].get<double>(), 0.9) << heldout.dump(2);
  EXPECT_GE(r.evaluation["train_accuracy"].get<double>(), 0.95);
  EXPECT_LT(r.loop.final_loss, r.loop.first_loss);
  // The predictor reaches (nearly) the oracle τ and beats every fixed b on the held-out prompts.
  EXPECT_GT(heldout["predictor"]["mean_tau"].get<double>(),
            heldout["best_fixed_tau"]["mean_tau"].get<double>());

  // The written predictor loads, carries the figures and predicts what the training MLP predicts.
  const BlockPilotCheckpoint ckpt = LoadBlockPilotCheckpoint(dir + "/out");
  EXPECT_EQ(ckpt.config.evaluation["heldout"]["predictor"]["accuracy"],
            heldout["predictor"]["accuracy"]);
  EXPECT_EQ(ckpt.config.training["criterion"], "tau");
  EXPECT_EQ(ckpt.config.training["n_heldout_prompts"], 20);
  EXPECT_TRUE(fs::exists(dir + "/out/train_summary.json"));
  BlockPilotPredictor predictor(ckpt.config, ckpt.tensors);
  int64_t hits = 0;
  for (int64_t i = r.n_train; i < n; ++i) hits += predictor.Predict(l.logits_row(i)) == 3 + cls[i];
  EXPECT_DOUBLE_EQ(hits / 20.0, heldout["predictor"]["accuracy"].get<double>());
}

// The predictor trained on cuda against the CPU (the same synthetic labels): float32 with other
// kernels, so the held-out loss agrees to 1e-3 relative and the held-out accuracy to one prompt
// in 20; the summary names the device.
TEST(BlockPilotTrainerCuda, OnCudaMatchesCpu) {
  SPECBED_SKIP_WITHOUT_CUDA();
  at::set_num_threads(1);
  const std::string dir = testing_util::ScratchDir("blockpilot_train_cuda");
  std::vector<int64_t> cls;
  BlockPilotLabels l;
  const BlockPilotTrainConfig c = SeparableLabelsConfig(dir, &cls, &l);
  BlockPilotTrainConfig g = c;
  g.optim.device = "cuda";
  TrainLoopOptions run;
  run.verbose = false;
  const BlockPilotTrainResult cpu = TrainBlockPilot(c, dir + "/cpu", run);
  const BlockPilotTrainResult cuda = TrainBlockPilot(g, dir + "/cuda", run);
  ASSERT_TRUE(cpu.loop.finished && cuda.loop.finished);
  EXPECT_EQ(cuda.loop.device, "cuda");
  const double loss = cpu.evaluation["heldout_loss"].get<double>();
  EXPECT_NEAR(cuda.evaluation["heldout_loss"].get<double>(), loss, 1e-3 * loss);
  EXPECT_NEAR(cuda.evaluation["heldout"]["predictor"]["accuracy"].get<double>(),
              cpu.evaluation["heldout"]["predictor"]["accuracy"].get<double>(), 0.05 + 1e-9);
  const ojson summary = ojson::parse(ReadFileToString(dir + "/cuda/train_summary.json"));
  EXPECT_EQ(summary["device"], "cuda");
}

// --- stories260K with a seeded random DFlash head ---------------------------------------------

MethodContext ContextFor(LoadedTarget& target) {
  MethodContext c;
  c.target = &target;
  c.load_model = [](const std::string& name) -> LoadedTarget& {
    Fail("unexpected model load '", name, "'");
  };
  return c;
}

// A DFlash head for stories260K with block size 4: the shipped head nudged by seeded noise
// (0.3 x each matrix's RMS; dflash_test_util.h), so steps accept all, part or none of their
// drafts (a seeded random head accepts nothing on stories260K).
std::string WriteStoriesHead(const LlamaConfig& t, const std::string& name) {
  EXPECT_EQ(t.vocab_size, 512);  // stories260K
  return testing_util::WriteNudgedStoriesHead("stories260K-dflash", 4, 0.3, 3, name);
}

TEST(BlockPilotLabelling, TauPerCandidateMatchesDflashMethodAndResumes) {
  at::set_num_threads(1);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  const LlamaConfig& t = target.model->config();
  const std::string head = WriteStoriesHead(t, "blockpilot_label_head");
  const std::string dir = testing_util::ScratchDir("blockpilot_label");
  BlockPilotLabelConfig c;
  c.drafter = head;
  c.prompts = "bos";
  c.n_prompts = 4;
  c.prompt_tokens = 10;
  c.radius = 2;  // candidates {2, 3, 4, 5, 6}: two above the head's block size
  c.max_new_tokens = 40;
  c.seed = 9;
  BlockPilotLabelRunOptions quiet;
  quiet.verbose = false;
  const BlockPilotLabelResult r = LabelBlockPilot(c, dir + "/labels.safetensors", quiet);
  ASSERT_TRUE(r.finished);
  const BlockPilotLabels& l = r.labels;
  ASSERT_EQ(l.candidates, (std::vector<int64_t>{2, 3, 4, 5, 6}));
  ASSERT_EQ(l.size(), 4);
  EXPECT_EQ(l.provenance["output_mismatches"].get<int64_t>(), 0);
  EXPECT_EQ(l.provenance["drafter"]["block_size"].get<int64_t>(), 4);
  EXPECT_EQ(l.provenance["prompts"]["kind"], "bos");

  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = ContextFor(target);
  const int64_t nc = l.n_candidates();
  for (int64_t i = 0; i < l.size(); ++i) {
    const std::vector<int32_t> ids(l.prompt_tokens.begin() + l.prompt_offsets[i],
                                   l.prompt_tokens.begin() + l.prompt_offsets[i + 1]);
    EXPECT_EQ(ids.size(), 11u);
    // p(x): the target's logits at the last prompt position.
    KvCache pc = target.model->NewCache(1, static_cast<int64_t>(ids.size()));
    const at::Tensor z = target.model->Forward(testing_util::Ids(ids), pc).logits.reshape({-1});
    for (int64_t v = 0; v < t.vocab_size; ++v) {
      ASSERT_EQ(l.logits_row(i)[v], z.data_ptr<float>()[v]) << "prompt " << i << " token " << v;
    }
    for (int64_t ci = 0; ci < nc; ++ci) {
      auto decoder =
          registry.Build("dflash", context, {{"drafter", head}, {"block_size", l.candidates[ci]}});
      GenerationConfig g;
      g.stop = StopConfigFor(target, c.max_new_tokens, {});
      KvCache cache = target.model->NewCache(1, static_cast<int64_t>(ids.size()) + 41);
      DecodeResult d;
      decoder->Generate(ids, g, cache, d);
      int64_t emitted = 0;
      for (const StepStats& s : d.steps) emitted += s.n_emitted;
      const int64_t steps = static_cast<int64_t>(d.steps.size());
      ASSERT_GT(steps, 0);
      EXPECT_EQ(l.steps[i * nc + ci], steps) << "prompt " << i << " b " << l.candidates[ci];
      EXPECT_EQ(l.decode_tokens[i * nc + ci], emitted);
      EXPECT_DOUBLE_EQ(l.tau[i * nc + ci], static_cast<double>(emitted) / steps);
      EXPECT_GT(l.decode_ms[i * nc + ci], 0);
    }
  }
  // The file on disk is what was returned; a rerun keeps it.
  const BlockPilotLabels file = LoadBlockPilotLabels(dir + "/labels.safetensors");
  EXPECT_EQ(file.tau, l.tau);
  const BlockPilotLabelResult again = LabelBlockPilot(c, dir + "/labels.safetensors", quiet);
  EXPECT_TRUE(again.finished);
  EXPECT_EQ(again.resumed, 4);

  // Interrupted after 2 prompts, then resumed: the same rows (times aside).
  BlockPilotLabelRunOptions stop = quiet;
  stop.stop_after = 2;
  stop.partial_every_s = 0;
  const std::string path2 = dir + "/resumed.safetensors";
  const BlockPilotLabelResult first = LabelBlockPilot(c, path2, stop);
  EXPECT_FALSE(first.finished);
  EXPECT_FALSE(fs::exists(path2));
  EXPECT_TRUE(fs::exists(path2 + ".partial"));
  const BlockPilotLabelResult second = LabelBlockPilot(c, path2, quiet);
  ASSERT_TRUE(second.finished);
  EXPECT_EQ(second.resumed, 2);
  EXPECT_FALSE(fs::exists(path2 + ".partial"));
  EXPECT_EQ(second.labels.tau, l.tau);
  EXPECT_EQ(second.labels.steps, l.steps);
  EXPECT_EQ(second.labels.logits, l.logits);
  EXPECT_EQ(second.labels.prompt_tokens, l.prompt_tokens);

  // A progress file of other settings is discarded, not mixed in.
  fs::remove(path2);
  BlockPilotLabelConfig other = c;
  other.max_new_tokens = 20;
  EXPECT_FALSE(LabelBlockPilot(other, path2, stop).finished);
  ASSERT_TRUE(fs::exists(path2 + ".partial"));
  const BlockPilotLabelResult fresh = LabelBlockPilot(c, path2, quiet);
  ASSERT_TRUE(fresh.finished);
  EXPECT_EQ(fresh.resumed, 0);
  EXPECT_EQ(fresh.labels.tau, l.tau);
  ExpectError(
      [&] {
        BlockPilotLabelConfig bad = c;
        bad.radius = 0;
        LabelBlockPilot(bad, dir + "/x.safetensors", quiet);
      },
      {"--radius must be >= 1"});
}

// A predictor for stories260K with candidates {2..6} (trained block size 4, radius 2) whose
// output bias forces block size `forced` (0 = random weights: the choice varies with the prompt).
std::string WriteStoriesPredictor(int64_t vocab, int64_t forced, int64_t radius, int64_t trained,
                                  const std::string& name) {
  BlockPilotConfig c;
  c.vocab_size = vocab;
  c.trained_block_size = trained;
  c.radius = radius;
  c.candidates = BlockPilotCandidates(trained, radius);
  c.input = BlockPilotInput::kLogits;
  c.hidden_size = 16;
  c.num_layers = 2;
  auto tensors = RandomBlockPilotTensors(c, 21);
  if (forced > 0) {
    float* b = tensors.at(BlockPilotTensorName(1, true)).data_ptr<float>();
    for (int64_t k = 0; k < c.n_candidates(); ++k) b[k] = c.candidates[k] == forced ? 1e4f : 0.f;
  } else {
    tensors.at(BlockPilotTensorName(1, false)).mul_(20.0);
  }
  const std::string dir = testing_util::ScratchDir(name);
  WriteBlockPilotCheckpoint(dir, c, tensors);
  return dir;
}

TEST(BlockPilotMethod, ControllerAppliesPredictionAndMatchesAr) {
  at::set_num_threads(1);
  testing_util::StoriesMethods s(ContextFor);
  const LlamaConfig& t = s.target.model->config();
  const std::string head = WriteStoriesHead(t, "blockpilot_method_head");
  ASSERT_TRUE(s.registry.Has("dflash+blockpilot"));
  EXPECT_TRUE(s.registry.Info("dflash+blockpilot").traits.lossless);
  const auto prompts = LoadDataset("stories", {});
  const std::string random_pred =
      WriteStoriesPredictor(t.vocab_size, 0, 2, 4, "blockpilot_pred_random");
  const BlockPilotCheckpoint rp = LoadBlockPilotCheckpoint(random_pred);
  BlockPilotPredictor reference(rp.config, rp.tensors);
  std::set<int64_t> chosen;
  testing_util::AcceptanceCounts counts;
  for (int64_t forced : {6, 2, 0}) {
    const std::string pred =
        forced > 0 ? WriteStoriesPredictor(t.vocab_size, forced, 2, 4,
                                           "blockpilot_pred_" + std::to_string(forced))
                   : random_pred;
    DflashChainDecoder chain = MakeDflashChainDecoder(s.context, head, "test");
    const BlockPilotCheckpoint ck = LoadBlockPilotCheckpoint(pred);
    auto* controller = new BlockPilotController(
        std::make_shared<BlockPilotPredictor>(ck.config, ck.tensors), chain.drafter);
    chain.decoder->SetController(std::unique_ptr<Controller>(controller));
    auto method = s.registry.Build("dflash+blockpilot", s.context,
                                   {{"drafter", head}, {"predictor", pred}, {"radius", 2}});
    for (size_t i = 0; i < 8; ++i) {
      SCOPED_TRACE("forced " + std::to_string(forced) + " prompt " + std::to_string(i));
      const std::vector<int32_t> ids = BuildPromptIds(s.target, {{"user", prompts[i].turns[0]}});
      GenerationConfig g;
      g.stop = StopConfigFor(s.target, 48, {});
      KvCache cache = s.target.model->NewCache(1, static_cast<int64_t>(ids.size()) + 49);
      const GenerationResult ar =
          GenerateAr(*s.target.model, s.target.tokenizer.get(), ids, g, cache);
      // The predicted block size from the target's prefill logits, computed apart.
      KvCache pc = s.target.model->NewCache(1, static_cast<int64_t>(ids.size()));
      const at::Tensor z =
          s.target.model->Forward(testing_util::Ids(ids), pc).logits.reshape({-1}).clone();
      const int64_t want = forced > 0 ? forced : reference.Predict(z.data_ptr<float>());
      DecodeResult spec;
      chain.decoder->Generate(ids, g, cache, spec);
      ASSERT_EQ(spec.generation.tokens, ar.tokens);
      EXPECT_EQ(controller->last_block_size(), want);
      EXPECT_EQ(chain.drafter->block_size(), want);
      chosen.insert(want);
      int64_t deepest = 0;
      for (size_t s = 0; s < spec.steps.size(); ++s) {
        EXPECT_LE(spec.steps[s].n_drafted, want - 1);
        deepest = std::max(deepest, spec.steps[s].n_drafted);
      }
      EXPECT_EQ(deepest, want - 1);  // full chains of b̂ − 1 tokens (the context is not short)
      counts.Add(spec.steps);
      DecodeResult via_registry;
      method->Generate(ids, g, cache, via_registry);
      ASSERT_EQ(via_registry.generation.tokens, ar.tokens);
      ASSERT_EQ(via_registry.steps.size(), spec.steps.size());
      for (size_t s = 0; s < spec.steps.size(); ++s) {
        EXPECT_EQ(via_registry.steps[s].n_drafted, spec.steps[s].n_drafted);
        EXPECT_EQ(via_registry.steps[s].n_accepted, spec.steps[s].n_accepted);
      }
    }
  }
  EXPECT_GE(chosen.size(), 3u);  // 6, 2 and at least one more from the random predictor
  // The nudged head makes the test reach every verification outcome.
  EXPECT_GT(counts.accepted, 0);
  EXPECT_GT(counts.none_accepted, 0);
  EXPECT_GT(counts.partial, 0);
}

// BlockPilot at T = 0.7 on the tiny DFlash pair (vocabulary 4; head block size 6): a predictor
// forced to block size 4 (candidates 4..8) shrinks the chain to 3 drafted tokens, and the 4
// generated tokens (256 cells) over 20000 seeded generations follow the target's tempered
// distribution (chi-square, p > 1e-4: false-failure rate ~1e-4; seeds fixed). Negative controls
// failing the same check: the correction drawn from the target (VerifierFault), a stale q row and
// q without the temperature (DraftFault, the drafter's side).
TEST(BlockPilotMethod, LosslessAtTemperaturePoint7AtItsBlockSize) {
  at::set_num_threads(1);
  testing_util::TinyDflashTarget tiny =
      testing_util::MakeTinyDflashTarget(/*causal_head=*/false, "blockpilot_tiny_head");
  const BlockPilotCheckpoint pilot =
      LoadBlockPilotCheckpoint(WriteStoriesPredictor(4, 4, 2, 6, "blockpilot_tiny_pred"));
  const DflashCheckpoint head = LoadDflashCheckpoint(tiny.head_dir);
  const LlamaWeights& w = tiny.target->weights();
  DflashDraftOptions o;
  o.kind = DflashTreeKind::kChain;
  o.budget = 5;
  auto drafter = std::make_unique<DflashDrafter>(
      std::make_unique<DflashHead>(head.config, head.tensors, w.tok_embeddings, w.lm_head,
                                   TargetHeadPlacement(*tiny.target)),
      o);
  DflashDrafter* chain = drafter.get();
  SpeculativeOptions so;
  so.budget = {5, 5};
  so.sampling_rule = VerifyRule::kChainRs;
  SpeculativeDecoder decoder(*tiny.target, nullptr, std::move(drafter), so);
  auto* controller = new BlockPilotController(
      std::make_shared<BlockPilotPredictor>(pilot.config, pilot.tensors), chain);
  decoder.SetController(std::unique_ptr<Controller>(controller));
  constexpr double kT = 0.7;
  int64_t accepted = 0;
  EXPECT_GT(
      testing_util::TinyOutputPValue(*tiny.target, decoder, {1, 3}, 4, 20000, 555, &accepted, kT),
      1e-4);
  EXPECT_EQ(controller->last_block_size(), 4);
  EXPECT_EQ(chain->block_size(), 4);
  EXPECT_GT(accepted, 2000);  // drafts are taken often enough to matter
  {
    ScopedVerifierFault inject(VerifierFault::kTargetAsResidual);
    int64_t ignored = 0;
    EXPECT_LT(
        testing_util::TinyFaultPValue(*tiny.target, decoder, {1, 3}, 4, 20000, 555, &ignored, kT),
        1e-4);
  }
  testing_util::ExpectDraftFaultsFail(*tiny.target, decoder, {1, 3}, 4, 20000, 555, kT);
}

TEST(BlockPilotMethod, MismatchErrors) {
  at::set_num_threads(1);
  testing_util::StoriesMethods s(ContextFor);
  const LlamaConfig& t = s.target.model->config();
  const std::string head = WriteStoriesHead(t, "blockpilot_err_head");
  const std::string pred = WriteStoriesPredictor(t.vocab_size, 4, 2, 4, "blockpilot_err_pred");
  ExpectError(
      [&] {
        s.registry.Build("dflash+blockpilot", s.context,
                         {{"drafter", head}, {"predictor", pred}, {"radius", 3}});
      },
      {"knob 'radius' is 3", "trained with radius 2", "[2,3,4,5,6]"});
  const std::string pred8 = WriteStoriesPredictor(t.vocab_size, 8, 2, 8, "blockpilot_err_pred8");
  ExpectError(
      [&] {
        s.registry.Build("dflash+blockpilot", s.context, {{"drafter", head}, {"predictor", pred8}});
      },
      {"block size 8", "has block size 4"});
  const std::string pred_vocab = WriteStoriesPredictor(100, 4, 2, 4, "blockpilot_err_vocab");
  ExpectError(
      [&] {
        s.registry.Build("dflash+blockpilot", s.context,
                         {{"drafter", head}, {"predictor", pred_vocab}});
      },
      {"vocabulary of 100", "512"});
  const MethodInfo& info = s.registry.Info("dflash+blockpilot");
  ExpectError(
      [&] {
        info.validate(s.registry.ResolveKnobs(info.name, {{"drafter", head}}));
      },
      {"knob 'predictor'"});
  ExpectError(
      [&] {
        info.validate(
            s.registry.ResolveKnobs(info.name, {{"drafter", head}, {"predictor", "/nope"}}));
      },
      {"'/nope' does not exist"});
  // The runner's up-front check reads the predictor's config.json: the radius fails before a run.
  ExpectError(
      [&] {
        info.validate(s.registry.ResolveKnobs(
            info.name, {{"drafter", head}, {"predictor", pred}, {"radius", 1}}));
      },
      {"knob 'radius' is 1", "trained with radius 2"});
}

}  // namespace
}  // namespace specbed

namespace specbed {
namespace {

// BlockPilotOracleFigures on a hand-made database: two prompts, fixed b = 4 and 5, one
// dflash+blockpilot case; every figure is computed by hand below.
TEST(BlockPilotOracle, FiguresOnHandMadeDatabase) {
  const std::string dir = testing_util::ScratchDir("blockpilot_oracle");
  const std::string db = dir + "/r.db";
  {
    auto store = ResultsStore::Open(db);
    const int64_t run = store->BeginRun(RunInfo{});
    auto write = [&](const std::string& key, const std::string& method, const nlohmann::json& k,
                     std::vector<std::tuple<std::string, int64_t, int64_t, double>> rows) {
      CaseRecord c;
      c.case_key = key;
      c.target = "t";
      c.method = method;
      c.method_knobs_json = k.dump();
      c.dataset = "d";
      c.max_new_tokens = 16;
      c.dtype = "float32";
      c.device = "cpu";
      std::vector<SampleRecord> samples;
      for (const auto& [id, out, steps, ms] : rows) {
        SampleRecord s;
        s.prompt_id = id;
        s.n_output_tokens = out;
        s.n_steps = steps;
        s.decode_ms = ms;
        s.stop_reason = "max_new_tokens";
        samples.push_back(s);
      }
      store->WriteCase(run, c, samples, {});
    };
    // (prompt, output tokens, steps, decode ms): tau = (out - 1) / steps.
    write("a", "dflash", {{"drafter", "h"}, {"block_size", 4}},
          {{"p1", 9, 4, 10.0}, {"p2", 9, 2, 20.0}});  // tau 2, 4
    write("b", "dflash", {{"drafter", "h"}, {"block_size", 5}},
          {{"p1", 9, 2, 30.0}, {"p2", 9, 8, 5.0}});  // tau 4, 1
    write("c", "dflash+blockpilot", {{"drafter", "h"}, {"predictor", "p"}},
          {{"p1", 9, 2, 12.0}, {"p2", 9, 4, 8.0}});  // tau 4, 2
    write("d", "dflash", {{"drafter", "other"}, {"block_size", 0}}, {{"p1", 9, 1, 1.0}});
  }
  const nlohmann::ordered_json f = BlockPilotOracleFigures(db);
  ASSERT_EQ(f.size(), 1u);  // the block_size 0 case of another drafter is not a fixed size
  const auto& e = f[0];
  EXPECT_EQ(e["prompts"], 2);
  EXPECT_DOUBLE_EQ(e["fixed"][0]["mean_tau"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(e["fixed"][1]["mean_tau"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(e["fixed"][0]["tokens_per_s"].get<double>(), 16 / 30.0 * 1000);
  EXPECT_EQ(e["best_fixed_tau"]["block_size"], 4);
  EXPECT_EQ(e["best_fixed_throughput"]["block_size"], 4);            // 16 / 30 ms vs 16 / 35 ms
  EXPECT_DOUBLE_EQ(e["oracle_tau"]["mean_tau"].get<double>(), 4.0);  // b = 5 on p1, b = 4 on p2
  EXPECT_DOUBLE_EQ(e["oracle_throughput"]["tokens_per_s"].get<double>(), 16 / 15.0 * 1000);
  ASSERT_EQ(e["blockpilot"].size(), 1u);
  EXPECT_DOUBLE_EQ(e["blockpilot"][0]["mean_tau"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(e["blockpilot"][0]["tokens_per_s"].get<double>(), 16 / 20.0 * 1000);
  // Restricted to b = 5: everything is b = 5's.
  const nlohmann::ordered_json only5 = BlockPilotOracleFigures(db, {5});
  ASSERT_EQ(only5[0]["fixed"].size(), 1u);
  EXPECT_DOUBLE_EQ(only5[0]["oracle_tau"]["mean_tau"].get<double>(), 2.5);
  EXPECT_THROW(BlockPilotOracleFigures(dir + "/missing.db"), Error);
}

}  // namespace
}  // namespace specbed
