// Tests of methods/common/train: the autograd Llama forward against the inference engine, the
// draft-LM distillation trainer (loss goes down, interrupt + resume == uninterrupted, settings
// mismatch errors, checkpoints load through the model registry) and the committed default draft
// models/stories260K/draft. Every run is seeded; nothing here is flaky by chance (false-failure
// rate 0: all inputs are fixed and single-threaded LibTorch CPU ops are deterministic).
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/mapped_file.h"
#include "harness/engine/ar_generate.h"
#include "methods/common/train/draft_lm_trainer.h"
#include "methods/common/train/trainable_llama.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/model_registry.h"
#include "results/store.h"
#include "tests/common/cuda_test_util.h"
#include "tests/common/test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using testing_util::TestName;

// A fresh, empty scratch folder for the current test.
std::string Scratch() {
  return testing::ScratchDir("train_" + TestName(), /*create=*/true);
}

at::Tensor RandomTokens(int64_t batch, int64_t t, int64_t vocab, uint64_t seed) {
  at::Tensor ids = at::empty({batch, t}, at::kLong);
  uint64_t x = seed;
  for (int64_t i = 0; i < batch * t; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    ids.data_ptr<int64_t>()[i] = static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(vocab));
  }
  return ids;
}

// Max |autograd logits - engine logits| over a [2, 23] batch, engine run on `weights`.
double MaxDiffVsEngine(const TrainableLlama& model, LlamaModel& engine) {
  const at::Tensor tokens = RandomTokens(2, 23, model.config().vocab_size, 17);
  const at::Tensor mine = model.Forward(tokens).detach();
  KvCache cache = engine.NewCache(2, 23);
  ForwardOptions fo;
  fo.logits = LogitsMode::kAll;
  const at::Tensor theirs = engine.Forward(tokens, cache, fo).logits;
  EXPECT_EQ(mine.sizes(), theirs.sizes());
  return (mine - theirs).abs().max().item<double>();
}

TEST(TrainableLlamaTest, MatchesEngineThroughHfCheckpoint) {
  at::set_num_threads(1);
  for (const LlamaConfig& config :
       {testing_util::SmallLlama3Config(), testing_util::SmallQwen2Config(),
        testing_util::SmallQwen3Config()}) {
    SCOPED_TRACE(config.architecture);
    const TrainableLlama model(config, RandomHfTensors(config, 5));
    const std::string dir = Scratch() + "/ckpt";
    WriteHfCheckpoint(dir, config, model.HfTensors());
    LoadedModel loaded = LoadHfCheckpoint(dir);
    LlamaModel engine(loaded.config, std::move(loaded.weights));
    EXPECT_LT(MaxDiffVsEngine(model, engine), 1e-4);
  }
}

TEST(TrainableLlamaTest, MatchesEngineWithInterleavedRopeAndFreshInit) {
  at::set_num_threads(1);
  // llama2.c pairing (not expressible in config.json): engine weights straight from the tensors.
  const LlamaConfig l2c = testing_util::SmallLlama2cConfig();
  const TrainableLlama a(l2c, RandomHfTensors(l2c, 9));
  LlamaModel engine_a(l2c, WeightsFromHfTensors(l2c, a.HfTensors(), "test"));
  EXPECT_LT(MaxDiffVsEngine(a, engine_a), 1e-4);

  // A fresh draft (norms 1, scaled residual projections) of stories260K's shape family.
  DraftLmTrainConfig dc;
  LlamaConfig target = testing_util::SmallLlama2cConfig();
  target.vocab_size = 512;
  const LlamaConfig config = DraftLlamaConfig(dc, target);
  const TrainableLlama b(config, 3);
  for (const auto& [name, p] : b.named_parameters()) {
    if (name.find("norm.weight") != std::string::npos) {
      EXPECT_EQ(p.min().item<float>(), 1.0f) << name;
    }
  }
  const std::string dir = Scratch();
  WriteHfCheckpoint(dir, config, b.HfTensors());
  LoadedTarget loaded = LoadModel(dir, at::kFloat);
  EXPECT_LT(MaxDiffVsEngine(b, *loaded.model), 1e-4);
}

TEST(TrainableLlamaTest, GradientsReachEveryParameter) {
  at::set_num_threads(1);
  const LlamaConfig config = testing_util::SmallLlama3Config();  // untied head, GQA
  const TrainableLlama model(config, RandomHfTensors(config, 2));
  model.Forward(RandomTokens(2, 9, config.vocab_size, 4)).logsumexp(-1).sum().backward();
  for (const auto& [name, p] : model.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    EXPECT_TRUE(at::isfinite(p.grad()).all().item<bool>()) << name;
    EXPECT_GT(p.grad().abs().sum().item<double>(), 0.0) << name;
  }
}

TEST(TrainableLlamaTest, ToPlacesParametersAsLeavesAndKeepsCpuTensors) {
  at::set_num_threads(1);
  const LlamaConfig config = testing_util::SmallLlama3Config();
  TrainableLlama model(config, 7);
  const TrainableLlama same(config, 7);
  std::vector<at::Tensor> before;
  for (const auto& [name, p] : model.named_parameters()) before.push_back(p);
  model.To(at::kCPU);  // already there: the very same tensors, nothing copied
  ASSERT_EQ(model.named_parameters().size(), before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    EXPECT_TRUE(model.named_parameters()[i].second.is_same(before[i]));
  }
  const at::Tensor tokens = RandomTokens(2, 9, config.vocab_size, 4);
  EXPECT_TRUE(at::equal(model.Forward(tokens), same.Forward(tokens)));
  // A real move (the meta device exists in every LibTorch build): new leaves with requires_grad
  // and the same shapes; the forward then refuses host tokens, naming both devices.
  model.To(at::Device(at::kMeta));
  EXPECT_EQ(model.device(), at::Device(at::kMeta));
  for (size_t i = 0; i < before.size(); ++i) {
    const at::Tensor& p = model.named_parameters()[i].second;
    EXPECT_TRUE(p.is_meta() && p.is_leaf() && p.requires_grad()) << i;
    EXPECT_EQ(p.sizes(), before[i].sizes());
    EXPECT_EQ(p.scalar_type(), at::kFloat);
  }
  EXPECT_THROW(model.Forward(tokens), Error);
}

TEST(TrainableLlamaTest, RejectsWrongTensors) {
  const LlamaConfig config = testing_util::SmallLlama2cConfig();
  auto tensors = RandomHfTensors(config, 1);
  tensors.erase("model.norm.weight");
  EXPECT_THROW(
      {
        try {
          TrainableLlama m(config, tensors);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("missing tensor 'model.norm.weight'"),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

// A small, fast setting on the real stories260K target (a few seconds).
DraftLmTrainConfig TinyConfig() {
  DraftLmTrainConfig c;
  c.target = "stories260K";
  c.dim = 16;
  c.n_heads = 2;
  c.n_sequences = 12;
  c.n_eval_sequences = 2;
  c.seq_len = 48;
  c.optim.steps = 20;
  c.optim.batch = 4;
  c.optim.lr = 1e-2;
  c.optim.min_lr = 1e-3;
  c.optim.warmup = 3;
  c.optim.checkpoint_every = 10;
  c.optim.log_every = 5;
  c.optim.seed = 7;
  return c;
}

DraftLmTrainOptions Quiet() {
  DraftLmTrainOptions o;
  o.verbose = false;
  return o;
}

TEST(DraftLmTrainerTest, TinyRunLowersLossAndWritesOutputs) {
  const std::string out = Scratch();
  DraftLmTrainConfig c = TinyConfig();
  c.optim.steps = 40;
  const DraftLmTrainResult r = TrainDraftLm(c, out, Quiet());
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.step, 40);
  EXPECT_LT(r.final_loss, 0.8 * r.first_loss) << "first " << r.first_loss;
  EXPECT_GT(r.top1_agreement, 0.0);
  EXPECT_LE(r.top1_agreement, 1.0);
  EXPECT_GT(r.expected_acceptance, 0.0);
  EXPECT_LE(r.expected_acceptance, 1.0 + 1e-6);
  EXPECT_GT(r.data_seconds, 0.0);  // sampled in this run
  for (const char* f : {"config.json", "model.safetensors", "train_log.db", "train_summary.json",
                        "work/data.bin", "work/train_state.safetensors", "work/.gitignore"}) {
    EXPECT_TRUE(std::filesystem::exists(out + "/" + f)) << f;
  }
  {
    auto store = ResultsStore::Open(out + "/train_log.db");
    const auto runs = store->ListTrainRuns();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].record.task, "draft-lm");
    const auto log = store->LoadTrainLog(runs[0].train_id);
    ASSERT_EQ(log.size(), 8u);  // every 5 steps
    EXPECT_EQ(log.back().step, 40);
    EXPECT_GT(log.back().lr, 0);
    EXPECT_GT(log.back().elapsed_s, 0);
    const auto evals = store->LoadTrainEval(runs[0].train_id);
    ASSERT_EQ(evals.size(), 1u);
    EXPECT_EQ(evals[0].acceptance_proxy, r.expected_acceptance);
  }

  // The checkpoint is an HF Llama directory with the target's vocabulary, BOS and EOS.
  LoadedTarget draft = LoadModel(out, at::kFloat);
  EXPECT_EQ(draft.spec.format, "hf");
  EXPECT_EQ(draft.model->config().vocab_size, 512);
  EXPECT_EQ(draft.model->config().bos_token_id, 1);
  EXPECT_EQ(draft.model->config().eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(draft.model->config().n_layers, 2);
  EXPECT_EQ(draft.model->config().dim, 16);
  // The recipe is recorded next to the weights.
  const nlohmann::json config = nlohmann::json::parse(ReadFileToString(out + "/config.json"));
  EXPECT_EQ(config["specbed_recipe"]["steps"], 40);
  EXPECT_EQ(config["specbed_recipe"]["trainer"], "specbed train draft-lm");

  // Rerunning a finished run trains nothing, reuses the cached data and reports the same figures.
  const DraftLmTrainResult again = TrainDraftLm(c, out, Quiet());
  EXPECT_EQ(again.data_seconds, 0.0);
  EXPECT_EQ(again.final_loss, r.final_loss);
  EXPECT_EQ(again.top1_agreement, r.top1_agreement);
}

// Every tensor of two HF checkpoint directories, compared bitwise.
void ExpectSameWeights(const std::string& a, const std::string& b) {
  const HfModel ma = ReadHfCheckpoint(a), mb = ReadHfCheckpoint(b);
  ASSERT_EQ(ma.tensors.size(), mb.tensors.size());
  for (const auto& [name, t] : ma.tensors) {
    ASSERT_TRUE(mb.tensors.count(name)) << name;
    EXPECT_TRUE(at::equal(t, mb.tensors.at(name))) << name;
  }
}

std::vector<double> LoggedLosses(const std::string& out_dir) {
  auto store = ResultsStore::Open(out_dir + "/train_log.db");
  std::vector<double> out;
  for (const TrainLogRow& r : store->LoadTrainLog(store->ListTrainRuns().at(0).train_id)) {
    out.push_back(r.loss);
  }
  return out;
}

TEST(DraftLmTrainerTest, InterruptedAndResumedEqualsUninterrupted) {
  const std::string root = Scratch();
  const DraftLmTrainConfig c = TinyConfig();
  const DraftLmTrainResult full = TrainDraftLm(c, root + "/full", Quiet());
  ASSERT_TRUE(full.finished);

  // Interrupted at a checkpoint (10), then resumed automatically by rerunning.
  DraftLmTrainOptions stop = Quiet();
  stop.stop_after = 10;
  const DraftLmTrainResult part = TrainDraftLm(c, root + "/a", stop);
  EXPECT_FALSE(part.finished);
  EXPECT_EQ(part.step, 10);
  const DraftLmTrainResult resumed = TrainDraftLm(c, root + "/a", Quiet());
  EXPECT_TRUE(resumed.finished);
  EXPECT_EQ(resumed.data_seconds, 0.0);  // the cached data was reused
  ExpectSameWeights(root + "/full", root + "/a");
  EXPECT_EQ(resumed.final_loss, full.final_loss);
  EXPECT_EQ(resumed.top1_agreement, full.top1_agreement);
  EXPECT_EQ(LoggedLosses(root + "/a"), LoggedLosses(root + "/full"));

  // Interrupted between checkpoints (13; the stop writes one), resumed with --resume, and a log
  // holding rows past the checkpoint (as after a crash) is cut back.
  stop.stop_after = 13;
  TrainDraftLm(c, root + "/b", stop);
  {
    auto store = ResultsStore::Open(root + "/b/train_log.db");
    store->AppendTrainLog(store->ListTrainRuns().at(0).train_id, {{15, 9.0, 0.0, 0.0, 0.0}});
  }
  DraftLmTrainOptions resume = Quiet();
  resume.resume = true;
  EXPECT_TRUE(TrainDraftLm(c, root + "/b", resume).finished);
  ExpectSameWeights(root + "/full", root + "/b");
  EXPECT_EQ(LoggedLosses(root + "/b"), LoggedLosses(root + "/full"));
}

// Max |a - b| over every tensor of two HF checkpoint directories.
double MaxWeightDiff(const std::string& a, const std::string& b) {
  const HfModel ma = ReadHfCheckpoint(a), mb = ReadHfCheckpoint(b);
  double worst = 0;
  for (const auto& [name, t] : ma.tensors) {
    worst = std::max(worst, (t - mb.tensors.at(name)).abs().max().item<double>());
  }
  return worst;
}

// A few draft-lm steps on cuda against the same run on the CPU, both from the same sampled data
// (the CPU run's work/data.*, reused because the data settings match; the device is not part of
// them). float32 with other kernels: losses and held-out figures within 1e-3 relative, weights
// within 1e-3 absolute. Then a cuda checkpoint resumes on the CPU.
TEST(TrainLoopCuda, DraftLmOnCudaMatchesCpu) {
  SPECBED_SKIP_WITHOUT_CUDA();
  at::set_num_threads(1);
  const std::string root = Scratch();
  const DraftLmTrainConfig c = TinyConfig();
  const DraftLmTrainResult cpu = TrainDraftLm(c, root + "/cpu", Quiet());
  ASSERT_TRUE(cpu.finished);
  DraftLmTrainConfig g = c;
  g.optim.device = "cuda";
  for (const char* dir : {"/cuda/work", "/g2c/work"}) {
    std::filesystem::create_directories(root + dir);
    for (const char* f : {"data.bin", "data.json"}) {
      std::filesystem::copy_file(root + "/cpu/work/" + f, root + dir + "/" + f);
    }
  }
  const DraftLmTrainResult cuda = TrainDraftLm(g, root + "/cuda", Quiet());
  ASSERT_TRUE(cuda.finished);
  EXPECT_EQ(cuda.data_seconds, 0.0);  // the CPU's data
  EXPECT_NEAR(cuda.first_loss, cpu.first_loss, 1e-3 * cpu.first_loss);
  EXPECT_NEAR(cuda.final_loss, cpu.final_loss, 1e-3 * cpu.final_loss);
  EXPECT_NEAR(cuda.eval_kl, cpu.eval_kl, 1e-3 * cpu.eval_kl);
  EXPECT_LT(MaxWeightDiff(root + "/cpu", root + "/cuda"), 1e-3);
  const nlohmann::json summary =
      nlohmann::json::parse(ReadFileToString(root + "/cuda/train_summary.json"));
  EXPECT_EQ(summary["device"], "cuda");

  DraftLmTrainOptions stop = Quiet();
  stop.stop_after = 10;
  EXPECT_FALSE(TrainDraftLm(g, root + "/g2c", stop).finished);
  DraftLmTrainOptions resume = Quiet();
  resume.resume = true;
  const DraftLmTrainResult resumed = TrainDraftLm(c, root + "/g2c", resume);  // on the CPU
  ASSERT_TRUE(resumed.finished);
  EXPECT_NEAR(resumed.eval_kl, cpu.eval_kl, 1e-3 * cpu.eval_kl);
  EXPECT_LT(MaxWeightDiff(root + "/cpu", root + "/g2c"), 1e-3);
}

// Runs the trainer and returns the specbed::Error message ("" if none).
std::string TrainError(const DraftLmTrainConfig& c, const std::string& out,
                       const DraftLmTrainOptions& o) {
  try {
    TrainDraftLm(c, out, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(DraftLmTrainerTest, DifferentSettingsInOutDirFailNamingTheSetting) {
  const std::string out = Scratch();
  DraftLmTrainConfig c = TinyConfig();
  DraftLmTrainOptions stop = Quiet();
  stop.stop_after = 2;
  TrainDraftLm(c, out, stop);

  // The error of training `c` edited by `edit` into `out` with `options` ("" if none).
  auto error_with = [&](const std::function<void(DraftLmTrainConfig&)>& edit,
                        const DraftLmTrainOptions& options = Quiet()) {
    DraftLmTrainConfig other = c;
    edit(other);
    return TrainError(other, out, options);
  };
  auto wider = [](DraftLmTrainConfig& o) {
    o.dim = 24;
    o.n_heads = 2;
  };
  std::string msg = error_with(wider);
  EXPECT_NE(msg.find("'dim' (--dim) is 16 there but 24 now"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--restart"), std::string::npos) << msg;
  msg = error_with([](DraftLmTrainConfig& o) { o.optim.steps = 30; });
  EXPECT_NE(msg.find("'steps' (--steps)"), std::string::npos) << msg;
  msg = error_with([](DraftLmTrainConfig& o) { o.temperature = 0.5; });
  EXPECT_NE(msg.find("'temperature'"), std::string::npos) << msg;

  // Bookkeeping knobs are not part of the run identity.
  stop.stop_after = 4;
  EXPECT_EQ(error_with(
                [](DraftLmTrainConfig& o) {
                  o.optim.checkpoint_every = 3;
                  o.optim.log_every = 1;
                },
                stop),
            "");

  // --restart discards the old run.
  DraftLmTrainOptions restart = stop;
  restart.restart = true;
  EXPECT_EQ(error_with(wider, restart), "");

  // --resume needs a run; impossible knobs are rejected before any work.
  DraftLmTrainOptions resume = Quiet();
  resume.resume = true;
  msg = TrainError(c, Scratch() + "/empty", resume);
  EXPECT_NE(msg.find("holds no train state"), std::string::npos) << msg;
  msg = error_with([](DraftLmTrainConfig& o) { o.optim.batch = 100; });
  EXPECT_NE(msg.find("--batch"), std::string::npos) << msg;
  msg = error_with([](DraftLmTrainConfig& o) { o.seq_len = 1000; });
  EXPECT_NE(msg.find("max_seq_len 512"), std::string::npos) << msg;
}

TEST(CommittedDraftTest, Stories260KDraftLoadsWithTheTargetsVocab) {
  at::set_num_threads(1);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  LoadedTarget draft = LoadModel("stories260K-draft", at::kFloat);
  const LlamaConfig& dc = draft.model->config();
  const LlamaConfig& tc = target.model->config();
  EXPECT_EQ(draft.spec.format, "hf");
  EXPECT_EQ(dc.vocab_size, tc.vocab_size);
  EXPECT_EQ(dc.bos_token_id, tc.bos_token_id);
  EXPECT_EQ(dc.eos_token_ids, tc.eos_token_ids);
  EXPECT_EQ(dc.n_layers, 2);
  EXPECT_LT(dc.ParameterCount() * 2, tc.ParameterCount());
  ASSERT_NE(draft.tokenizer, nullptr);
  EXPECT_EQ(draft.tokenizer->vocab_size(), target.tokenizer->vocab_size());

  // It speaks TinyStories: greedy from "Once upon a time" agrees with the target's first token.
  const std::vector<int32_t> prompt =
      target.tokenizer->Encode("Once upon a time", EncodeOptions{/*add_bos=*/true});
  GenerationConfig gen;
  gen.stop.max_new_tokens = 1;
  KvCache tcache = target.model->NewCache(1, 64), dcache = draft.model->NewCache(1, 64);
  EXPECT_EQ(GenerateAr(*draft.model, nullptr, prompt, gen, dcache).tokens,
            GenerateAr(*target.model, nullptr, prompt, gen, tcache).tokens);
}

}  // namespace
}  // namespace specbed
