// Tests of the shared drafter training loop (methods/common/train/train_loop.h) on a small
// least-squares task: the schedule, AdamW against a closed form, loss going down, interrupt +
// resume == uninterrupted (bitwise), the settings-mismatch error, and the loss curve in SQLite.
// All inputs are fixed and single-threaded CPU ops are deterministic: false-failure rate 0.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "methods/common/train/param_device.h"
#include "methods/common/train/train_driver.h"
#include "methods/common/train/train_loop.h"
#include "models/checkpoint/safetensors.h"
#include "results/store.h"
#include "tests/common/cuda_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using testing::HasSubstr;
using testing_util::TestName;

std::string Scratch() {
  const std::string dir = std::string(SPECBED_TEST_TMPDIR) + "/train_loop_" + TestName();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// y = x W* + noise; learn W (and a bias vector, which is not decayed). Drawn on the CPU, then
// placed on `device` the way every trainer places its model (MoveParamsTo; nothing moves on the
// CPU), so a run trains where --device says.
class LeastSquaresTask : public TrainTask {
 public:
  explicit LeastSquaresTask(uint64_t seed, at::Device device = at::kCPU) {
    at::manual_seed(static_cast<int64_t>(seed));
    x_ = at::randn({64, 6});
    const at::Tensor w_true = at::randn({6, 3});
    y_ = at::matmul(x_, w_true) + 0.01 * at::randn({64, 3});
    params_ = {{"w", (0.1 * at::randn({6, 3})).set_requires_grad(true)},
               {"b", at::zeros({3}).set_requires_grad(true)}};
    MoveParamsTo(params_, device);
    x_ = OnDevice(x_, device);
    y_ = OnDevice(y_, device);
    w_ = params_[0].second;
    b_ = params_[1].second;
  }
  std::string Name() const override { return "lsq"; }
  std::vector<std::pair<std::string, at::Tensor>> Parameters() const override { return params_; }
  int64_t TrainRows() const override { return 48; }
  at::Tensor Loss(const std::vector<int64_t>& rows) override {
    const at::Tensor idx = OnDevice(at::tensor(rows, at::kLong), x_.device());
    const at::Tensor pred = at::matmul(x_.index_select(0, idx), w_) + b_;
    return (pred - y_.index_select(0, idx)).pow(2).mean();
  }
  EvalMetrics Evaluate() override {
    at::NoGradGuard no_grad;
    ++evaluations;
    const at::Tensor x = x_.slice(0, 48), y = y_.slice(0, 48);
    EvalMetrics m;
    m.loss = (at::matmul(x, w_) + b_ - y).pow(2).mean().item<double>();
    m.acceptance_proxy = 1.0 / (1.0 + m.loss);
    m.extra["rows"] = 16;
    return m;
  }
  void WriteDrafter(const std::string& out_dir) const override {
    const at::Tensor w = ToHost(w_).contiguous();
    WriteSafetensors(out_dir + "/model.safetensors",
                     {{"w", SafetensorsDtype::kF32, {6, 3}, w.data_ptr<float>(), 18 * 4}});
  }
  at::Tensor w() const { return ToHost(w_).clone(); }  // float32 [6, 3] CPU
  int evaluations = 0;

 private:
  NamedParams params_;
  at::Tensor x_, y_, w_, b_;
};

StoreOptions ReadOnly() {
  StoreOptions o;
  o.read_only = true;
  return o;
}

OptimConfig SmallOptim() {
  OptimConfig c = CosineOptim(/*steps=*/60, /*batch=*/8, /*lr=*/0.05, /*min_lr=*/0.005,
                              /*warmup=*/5);
  c.weight_decay = 0.01;
  c.grad_clip = 1.0;
  c.checkpoint_every = 7;
  c.log_every = 3;
  c.eval_every = 20;
  return c;
}

TEST(TrainLoopTest, ScheduleWarmsUpThenDecaysToTheFloor) {
  OptimConfig c = SmallOptim();
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(c, 0), c.lr / 5);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(c, 4), c.lr);
  EXPECT_NEAR(ScheduledLearningRate(c, 5), c.lr, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(c, 5 + 55 / 2.0), 0.5 * (c.lr + c.min_lr), 1e-3);
  EXPECT_NEAR(ScheduledLearningRate(c, 59), c.min_lr, 1e-4);
}

TEST(TrainLoopTest, AdamWMatchesClosedFormAndClips) {
  // One parameter, constant gradient g: after t steps with lr, no decay, the bias-corrected
  // update is exactly -lr * sign(g) per step (m_hat = g, v_hat = g^2) up to eps.
  at::Tensor p = at::zeros({2}).set_requires_grad(true);
  AdamWOptimizer opt({{"p", p}}, {false}, 0.9, 0.95, 0.0);
  for (int t = 0; t < 3; ++t) {
    p.mutable_grad() = at::tensor({2.0f, -0.5f});
    const double norm = opt.Step(0.1, 0);
    EXPECT_NEAR(norm, std::sqrt(4.25), 1e-6);
  }
  EXPECT_NEAR(p[0].item<double>(), -0.3, 1e-6);
  EXPECT_NEAR(p[1].item<double>(), 0.3, 1e-6);
  EXPECT_FALSE(p.grad().defined());
  // Decoupled decay multiplies by (1 - lr * wd) before the Adam step.
  at::Tensor q = at::ones({1}).set_requires_grad(true);
  AdamWOptimizer decayed({{"q", q}}, {true}, 0.9, 0.95, 0.5);
  q.mutable_grad() = at::tensor({1.0f});
  decayed.Step(0.1, 0);
  EXPECT_NEAR(q.item<double>(), 1.0 * (1 - 0.05) - 0.1, 1e-6);
}

TEST(TrainLoopTest, TrainsLogsToSqliteAndEvaluates) {
  at::set_num_threads(1);
  const std::string out = Scratch();
  LeastSquaresTask task(3);
  TrainLoopOptions options;
  options.verbose = false;
  const TrainLoopResult r = RunTrainLoop(task, SmallOptim(), {{"task_knob", 1}}, out, options);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.step, 60);
  EXPECT_LT(r.final_loss, 0.2 * r.first_loss);
  EXPECT_LT(r.eval.loss, 0.2);
  EXPECT_TRUE(std::filesystem::exists(out + "/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(out + "/work/train_state.safetensors"));

  auto store = ResultsStore::Open(out + "/train_log.db", ReadOnly());
  const auto runs = store->ListTrainRuns();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].record.task, "lsq");
  EXPECT_THAT(runs[0].record.settings_json, HasSubstr("\"task_knob\":1"));
  EXPECT_THAT(runs[0].record.settings_json, HasSubstr("\"lr\":0.05"));
  const auto log = store->LoadTrainLog(runs[0].train_id);
  ASSERT_EQ(log.size(), 20u);  // steps 3, 6, ..., 60
  EXPECT_EQ(log.front().step, 3);
  EXPECT_EQ(log.back().step, 60);
  EXPECT_GT(log.front().loss, log.back().loss);
  EXPECT_GT(log.front().grad_norm, 0);
  const auto evals = store->LoadTrainEval(runs[0].train_id);
  ASSERT_EQ(evals.size(), 4u);  // before training, 20, 40, final 60
  EXPECT_EQ(evals.front().step, 0);
  EXPECT_EQ(evals.back().step, 60);
  EXPECT_GT(evals.front().val_loss, evals.back().val_loss);
  EXPECT_THAT(evals.back().metrics_json, HasSubstr("\"rows\":16"));
}

TEST(TrainLoopTest, InterruptAndResumeIsBitwiseUninterrupted) {
  at::set_num_threads(1);
  const std::string root = Scratch();
  TrainLoopOptions quiet;
  quiet.verbose = false;
  LeastSquaresTask full(5);
  const TrainLoopResult rf = RunTrainLoop(full, SmallOptim(), {}, root + "/full", quiet);

  TrainLoopOptions stop = quiet;
  stop.stop_after = 25;  // not a multiple of checkpoint_every: the stop writes its own checkpoint
  LeastSquaresTask first(5);
  const TrainLoopResult r1 = RunTrainLoop(first, SmallOptim(), {}, root + "/split", stop);
  EXPECT_FALSE(r1.finished);
  EXPECT_EQ(r1.step, 25);
  LeastSquaresTask second(5);  // a fresh process: parameters come from the train state
  TrainLoopOptions resume = quiet;
  resume.resume = true;
  const TrainLoopResult r2 = RunTrainLoop(second, SmallOptim(), {}, root + "/split", resume);
  EXPECT_TRUE(r2.finished);
  EXPECT_TRUE(at::equal(second.w(), full.w()));
  EXPECT_EQ(r2.eval.loss, rf.eval.loss);

  auto a = ResultsStore::Open(root + "/full/train_log.db", ReadOnly());
  auto b = ResultsStore::Open(root + "/split/train_log.db", ReadOnly());
  const auto la = a->LoadTrainLog(a->ListTrainRuns()[0].train_id);
  const auto lb = b->LoadTrainLog(b->ListTrainRuns()[0].train_id);
  ASSERT_EQ(la.size(), lb.size());
  for (size_t i = 0; i < la.size(); ++i) {
    EXPECT_EQ(la[i].step, lb[i].step);
    EXPECT_EQ(la[i].loss, lb[i].loss) << "step " << la[i].step;
  }
  // A finished run is not retrained: only the evaluation runs again.
  LeastSquaresTask third(5);
  const TrainLoopResult r3 = RunTrainLoop(third, SmallOptim(), {}, root + "/split", quiet);
  EXPECT_TRUE(r3.finished);
  EXPECT_EQ(third.evaluations, 1);
  EXPECT_TRUE(at::equal(third.w(), full.w()));
}

TEST(TrainLoopTest, OtherSettingsFailNamingTheSettingUnlessRestarted) {
  at::set_num_threads(1);
  const std::string out = Scratch();
  TrainLoopOptions quiet;
  quiet.verbose = false;
  quiet.stop_after = 10;
  LeastSquaresTask task(1);
  RunTrainLoop(task, SmallOptim(), {{"width", 4}}, out, quiet);
  OptimConfig other = SmallOptim();
  other.lr = 0.02;
  LeastSquaresTask again(1);
  try {
    RunTrainLoop(again, other, {{"width", 4}}, out, quiet);
    FAIL() << "expected a settings mismatch";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("'lr' (--lr) is 0.05 there but 0.02 now"));
  }
  EXPECT_THROW(RunTrainLoop(again, SmallOptim(), {{"width", 5}}, out, quiet), Error);
  TrainLoopOptions restart = quiet;
  restart.restart = true;
  EXPECT_NO_THROW(RunTrainLoop(again, other, {{"width", 4}}, out, restart));
  TrainLoopOptions resume = quiet;
  resume.resume = true;
  EXPECT_THROW(RunTrainLoop(again, SmallOptim(), {}, Scratch() + "/empty", resume), Error);
  OptimConfig bad = SmallOptim();
  bad.batch = 100;  // more than the 48 training rows
  EXPECT_THROW(RunTrainLoop(again, bad, {}, out + "/bad", quiet), Error);
}

// Rewrites one `__metadata__` entry of a safetensors file (the data offsets are relative to the
// end of the header, so the header may change length).
void SetSafetensorsMetadata(const std::string& path, const std::string& key,
                            const std::string& value) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  header["__metadata__"][key] = value;
  std::string text = header.dump();
  while (text.size() % 8 != 0) text += ' ';
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  out += text + bytes.substr(8 + n);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << out;
}

TEST(TrainLoopTest, MalformedStateMetadataNamesTheFileAndField) {
  at::set_num_threads(1);
  TrainLoopOptions quiet;
  quiet.verbose = false;
  quiet.stop_after = 10;
  TrainLoopOptions resume = quiet;
  resume.resume = true;
  resume.stop_after = 0;
  const struct {
    const char* key;
    const char* value;
    const char* expected;
  } cases[] = {
      {"settings", "{\"width\": 4,", "metadata 'settings':1: not valid JSON"},
      {"settings", "{\"width\": 4, \"width\": 5}", "duplicate key \"width\""},
      {"train_seconds", "\"soon\"", "metadata 'train_seconds': type must be number"},
      {"loss_window", "[1, \"x\"]", "metadata 'loss_window': field /1: type must be number"},
  };
  for (const auto& c : cases) {
    const std::string out = Scratch() + "/" + c.key + std::to_string(std::strlen(c.value));
    LeastSquaresTask task(1);
    RunTrainLoop(task, SmallOptim(), {{"width", 4}}, out, quiet);
    const std::string state = out + "/work/train_state.safetensors";
    SetSafetensorsMetadata(state, c.key, c.value);
    LeastSquaresTask again(1);
    try {
      RunTrainLoop(again, SmallOptim(), {{"width", 4}}, out, resume);
      ADD_FAILURE() << c.key << " = " << c.value << ": expected an error";
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(state)) << c.key;
      EXPECT_THAT(e.what(), HasSubstr(c.expected)) << c.key;
    }
  }
}

TEST(TrainLoopTest, StateHoldsHostF32TensorsAndTheSummaryNamesTheDevice) {
  at::set_num_threads(1);
  const std::string out = Scratch();
  TrainLoopOptions stop;
  stop.verbose = false;
  stop.stop_after = 10;
  LeastSquaresTask task(3);
  RunTrainLoop(task, SmallOptim(), {}, out, stop);
  // The state holds the parameters and both moments, float32, exactly as trained.
  const auto file = SafetensorsFile::Open(out + "/work/train_state.safetensors");
  for (const char* name : {"param/w", "exp_avg/w", "exp_avg_sq/w", "param/b"}) {
    const SafetensorsEntry* e = file->Find(name);
    ASSERT_NE(e, nullptr) << name;
    EXPECT_EQ(e->dtype, SafetensorsDtype::kF32) << name;
  }
  const SafetensorsEntry* w = file->Find("param/w");
  const at::Tensor trained = task.w();
  ASSERT_EQ(w->nbytes, static_cast<size_t>(trained.numel()) * sizeof(float));
  EXPECT_EQ(std::memcmp(w->data, trained.data_ptr<float>(), w->nbytes), 0);
  // Finishing writes where it trained into the summary; the device is not part of the identity.
  TrainLoopOptions resume;
  resume.verbose = false;
  resume.resume = true;
  LeastSquaresTask again(3);
  const TrainLoopResult r = RunTrainLoop(again, SmallOptim(), {}, out, resume);
  ASSERT_TRUE(r.finished);
  EXPECT_EQ(r.device, "cpu");
  WriteTrainSummary(out, nlohmann::ordered_json::object(), {}, r, "proxy", 1);
  std::ifstream in(out + "/train_summary.json");
  const auto summary = nlohmann::json::parse(in);
  EXPECT_EQ(summary["device"], "cpu");
  auto store = ResultsStore::Open(out + "/train_log.db", ReadOnly());
  EXPECT_THAT(store->ListTrainRuns()[0].record.settings_json, testing::Not(HasSubstr("device")));
}

TEST(ParamDeviceTest, MoveKeepsLeavesAndToHostCopiesNothingOnTheCpu) {
  at::manual_seed(1);
  const at::Tensor w = at::randn({3, 2}).set_requires_grad(true);
  const at::Tensor frozen = at::randn({2});
  NamedParams params = {{"w", w}, {"frozen", frozen}};
  MoveParamsTo(params, at::kCPU);  // already there: the same tensors
  EXPECT_TRUE(params[0].second.is_same(w) && params[1].second.is_same(frozen));
  EXPECT_TRUE(ToHost(w).is_alias_of(w));  // no copy on the CPU, but detached
  EXPECT_FALSE(ToHost(w).requires_grad());
  const auto host = ToHost(std::map<std::string, at::Tensor>{{"w", w}});
  EXPECT_TRUE(host.at("w").is_alias_of(w));
  MoveParamsTo(params, at::Device(at::kMeta));
  EXPECT_TRUE(params[0].second.is_meta() && params[0].second.is_leaf() &&
              params[0].second.requires_grad());
  EXPECT_TRUE(params[1].second.is_meta() && !params[1].second.requires_grad());
  EXPECT_TRUE(OnDevice(frozen, at::kCPU).is_same(frozen));
  EXPECT_FALSE(OnDevice(at::Tensor(), at::kCPU).defined());
}

TEST(TrainLoopTest, ParametersOffTheTrainingDeviceFailNamingBoth) {
  LeastSquaresTask task(3, at::Device(at::kMeta));  // placed, but not where --device says
  TrainLoopOptions quiet;
  quiet.verbose = false;
  try {
    RunTrainLoop(task, SmallOptim(), {}, Scratch(), quiet);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("parameter 'w' is on meta but --device is cpu"));
  }
}

TEST(TrainLoopTest, UnavailableDeviceFailsBeforeAnythingIsWritten) {
  OptimConfig optim = SmallOptim();
  optim.device = "cuda";
  if (at::hasCUDA()) GTEST_SKIP() << "CUDA is available here";
  const std::string out = Scratch() + "/never";
  LeastSquaresTask task(3);
  TrainLoopOptions quiet;
  quiet.verbose = false;
  try {
    RunTrainLoop(task, optim, {}, out, quiet);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("--device"));
    EXPECT_THAT(e.what(), HasSubstr("cuda"));
  }
  EXPECT_FALSE(std::filesystem::exists(out));
  optim.device = "tpu";
  EXPECT_THROW(TrainDevice(optim, "lsq"), Error);
}

// On CUDA the loop trains where the parameters are: float32 with other kernels, so the losses
// and weights agree with the CPU run to a tolerance (1e-3 relative on the final held-out loss,
// 1e-3 absolute on the weights), not bitwise. A CUDA checkpoint resumes on the CPU and the
// other way round, because train states are float32 host tensors.
TEST(TrainLoopCuda, LeastSquaresOnCudaMatchesCpuAndResumesAcrossDevices) {
  SPECBED_SKIP_WITHOUT_CUDA();
  at::set_num_threads(1);
  const std::string root = Scratch();
  TrainLoopOptions quiet;
  quiet.verbose = false;
  LeastSquaresTask cpu(5);
  const TrainLoopResult rc = RunTrainLoop(cpu, SmallOptim(), {}, root + "/cpu", quiet);
  OptimConfig on_cuda = SmallOptim();
  on_cuda.device = "cuda";
  LeastSquaresTask cuda(5, at::Device(at::kCUDA));
  ASSERT_TRUE(cuda.Parameters()[0].second.is_cuda());
  const TrainLoopResult rg = RunTrainLoop(cuda, on_cuda, {}, root + "/cuda", quiet);
  EXPECT_EQ(rg.device, "cuda");
  EXPECT_NEAR(rg.eval.loss, rc.eval.loss, 1e-3 * std::abs(rc.eval.loss));
  EXPECT_NEAR(rg.first_loss, rc.first_loss, 1e-3 * std::abs(rc.first_loss));
  EXPECT_LT((cuda.w() - cpu.w()).abs().max().item<double>(), 1e-3);

  // cuda -> cpu and cpu -> cuda resumes.
  TrainLoopOptions stop = quiet;
  stop.stop_after = 25;
  TrainLoopOptions resume = quiet;
  resume.resume = true;
  LeastSquaresTask first(5, at::Device(at::kCUDA));
  RunTrainLoop(first, on_cuda, {}, root + "/g2c", stop);
  LeastSquaresTask second(5);
  const TrainLoopResult r2 = RunTrainLoop(second, SmallOptim(), {}, root + "/g2c", resume);
  EXPECT_TRUE(r2.finished);
  EXPECT_LT((second.w() - cpu.w()).abs().max().item<double>(), 1e-3);
  LeastSquaresTask third(5);
  RunTrainLoop(third, SmallOptim(), {}, root + "/c2g", stop);
  LeastSquaresTask fourth(5, at::Device(at::kCUDA));
  const TrainLoopResult r4 = RunTrainLoop(fourth, on_cuda, {}, root + "/c2g", resume);
  EXPECT_TRUE(r4.finished);
  EXPECT_TRUE(fourth.Parameters()[0].second.is_cuda());
  EXPECT_LT((fourth.w() - cpu.w()).abs().max().item<double>(), 1e-3);
}

}  // namespace
}  // namespace specbed
