// The shared drafter training loop (see train_loop.h and README.md beside it).
// Checked by: tests/train/train_loop_test.cpp.
#include "methods/common/train/train_loop.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <sstream>

#include "base/error.h"
#include "base/hash.h"
#include "base/json_read.h"
#include "base/paths.h"
#include "base/progress.h"
#include "base/timer.h"
#include "methods/common/train/param_device.h"
#include "methods/common/train/train_util.h"
#include "models/checkpoint/safetensors.h"
#include "models/device.h"
#include "results/store.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

constexpr const char* kStateFormat = "specbed-train-state-v2";
constexpr size_t kLossWindow = 20;

// Shuffled passes over the training rows; the whole state is (rng, perm, cursor).
struct DataOrder {
  std::mt19937_64 rng;
  std::vector<int32_t> perm;
  int64_t cursor = 0;

  std::vector<int64_t> Next(int64_t n_rows, int64_t batch) {
    if (perm.empty() || cursor + batch > static_cast<int64_t>(perm.size())) {
      perm.resize(n_rows);
      for (int64_t i = 0; i < n_rows; ++i) perm[i] = static_cast<int32_t>(i);
      for (int64_t i = n_rows - 1; i > 0; --i) {
        const int64_t j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
        std::swap(perm[i], perm[j]);
      }
      cursor = 0;
    }
    std::vector<int64_t> rows(perm.begin() + cursor, perm.begin() + cursor + batch);
    cursor += batch;
    return rows;
  }
};

SafetensorsTensorView F32View(const std::string& name, const at::Tensor& t) {
  return {name, SafetensorsDtype::kF32, t.sizes().vec(), t.data_ptr<float>(),
          static_cast<size_t>(t.numel()) * sizeof(float)};
}

at::Tensor TensorFromEntry(const SafetensorsEntry& e, const std::string& path) {
  SPECBED_CHECK(e.dtype == SafetensorsDtype::kF32, path, ": tensor '", e.name, "' is ",
                SafetensorsDtypeName(e.dtype), ", expected F32");
  at::Tensor t = at::empty(e.shape, at::kFloat);
  std::memcpy(t.data_ptr<float>(), e.data, e.nbytes);
  return t;
}

struct TrainState {
  int64_t step = 0;
  double train_seconds = 0;
  std::vector<double> loss_window;
};

void SaveState(const std::string& path, AdamWOptimizer& opt, const DataOrder& order,
               const TrainState& st, const ojson& settings) {
  std::vector<at::Tensor> keep;  // detached copies must outlive the write
  std::vector<SafetensorsTensorView> views;
  const auto& params = opt.params();
  keep.reserve(3 * params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    // Host copies off the CPU (once per checkpoint); the tensors themselves on the CPU.
    keep.push_back(ToHost(params[i].second).contiguous());
    views.push_back(F32View("param/" + params[i].first, keep.back()));
    keep.push_back(ToHost(opt.exp_avg()[i]).contiguous());
    views.push_back(F32View("exp_avg/" + params[i].first, keep.back()));
    keep.push_back(ToHost(opt.exp_avg_sq()[i]).contiguous());
    views.push_back(F32View("exp_avg_sq/" + params[i].first, keep.back()));
  }
  views.push_back({"order/perm",
                   SafetensorsDtype::kI32,
                   {static_cast<int64_t>(order.perm.size())},
                   order.perm.data(),
                   order.perm.size() * sizeof(int32_t)});
  std::ostringstream rng;
  rng << order.rng;
  std::map<std::string, std::string> meta;
  meta["format"] = kStateFormat;
  meta["settings"] = settings.dump();
  meta["step"] = std::to_string(st.step);
  meta["order_cursor"] = std::to_string(order.cursor);
  meta["order_rng"] = rng.str();
  meta["train_seconds"] = ojson(st.train_seconds).dump();
  meta["loss_window"] = ojson(st.loss_window).dump();
  WriteSafetensors(path, views, meta);
}

// The stored settings of a train state (for the mismatch check before anything is loaded).
ojson ReadStateSettings(const std::string& path, const std::string& who) {
  const auto file = SafetensorsFile::Open(path);
  const auto& meta = file->metadata();
  SPECBED_CHECK(meta.count("format") && meta.at("format") == kStateFormat, path, ": not a ", who,
                " train state of this version (metadata format != ", kStateFormat,
                "); pass --restart to discard it");
  SPECBED_CHECK(meta.count("settings"), path, ": metadata has no 'settings'");
  return ParseOrderedJsonText(meta.at("settings"), path + " metadata 'settings'");
}

void LoadState(const std::string& path, AdamWOptimizer& opt, DataOrder& order, TrainState& st) {
  const auto file = SafetensorsFile::Open(path);
  const auto& meta = file->metadata();
  for (const char* key : {"step", "order_cursor", "order_rng", "train_seconds", "loss_window"}) {
    SPECBED_CHECK(meta.count(key), path, ": metadata has no '", key, "'");
  }
  auto find = [&](const std::string& name) -> const SafetensorsEntry& {
    const SafetensorsEntry* e = file->Find(name);
    SPECBED_CHECK(e != nullptr, path, ": missing tensor '", name, "'");
    return *e;
  };
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < opt.params().size(); ++i) {
    const auto& [name, p] = opt.params()[i];
    // Read on the host, then onto the parameter's device (nothing moves on the CPU).
    const at::Tensor value = TensorFromEntry(find("param/" + name), path);
    opt.exp_avg()[i] = TensorFromEntry(find("exp_avg/" + name), path).to(p.device());
    opt.exp_avg_sq()[i] = TensorFromEntry(find("exp_avg_sq/" + name), path).to(p.device());
    SPECBED_CHECK(value.sizes() == p.sizes() && opt.exp_avg()[i].sizes() == p.sizes() &&
                      opt.exp_avg_sq()[i].sizes() == p.sizes(),
                  path, ": parameter '", name, "' or its optimizer moments have the wrong shape");
    p.copy_(value);
  }
  const SafetensorsEntry& perm = find("order/perm");
  SPECBED_CHECK(perm.dtype == SafetensorsDtype::kI32 && perm.shape.size() == 1, path,
                ": 'order/perm' must be a 1-D I32 tensor");
  order.perm.resize(perm.shape[0]);
  std::memcpy(order.perm.data(), perm.data, perm.nbytes);
  order.cursor = std::stoll(meta.at("order_cursor"));
  std::istringstream rng(meta.at("order_rng"));
  rng >> order.rng;
  SPECBED_CHECK(!rng.fail(), path, ": malformed 'order_rng'");
  st.step = std::stoll(meta.at("step"));
  const std::string seconds_source = path + " metadata 'train_seconds'";
  const std::string window_source = path + " metadata 'loss_window'";
  st.train_seconds = WithJsonContext(seconds_source, [&] {
    return ParseJsonText(meta.at("train_seconds"), seconds_source).get<double>();
  });
  st.loss_window = WithJsonContext(window_source, [&] {
    return ParseJsonText(meta.at("loss_window"), window_source).get<std::vector<double>>();
  });
  opt.set_steps_done(st.step);
}

TrainEvalRow EvalRow(int64_t step, const EvalMetrics& m) {
  ojson all = m.extra;
  all["loss"] = m.loss;
  all["acceptance_proxy"] = m.acceptance_proxy;
  return {step, m.loss, m.acceptance_proxy, all.dump()};
}

}  // namespace

void CheckSameSettings(const ojson& stored, const ojson& wanted, const std::string& where) {
  for (const auto& [key, value] : wanted.items()) {
    const bool has = stored.contains(key);
    if (has && stored[key] == value) continue;
    const std::string hint =
        "; pass --restart to discard it (or resume with the same settings, or use another "
        "-o/--output)";
    if (key == "target_fingerprint") {
      Fail(where, " holds a run trained on other target weights (fingerprint ",
           has ? stored[key].dump() : "none", ", this target's ", value.dump(), ")", hint);
    }
    Fail(where, " holds a run with different settings: '", key, "' (", FlagName(key), ") is ",
         has ? stored[key].dump() : "absent", " there but ", value.dump(), " now", hint);
  }
}

namespace {

// The loop's settings before anything is written: the optimizer's, the output, resume/restart.
at::Device CheckLoopSettings(const OptimConfig& optim, int64_t train_rows,
                             const std::string& out_dir, const TrainLoopOptions& options,
                             const std::string& who) {
  CheckOptimConfig(optim, train_rows, who);
  const at::Device device = TrainDevice(optim, who);
  SPECBED_CHECK(!out_dir.empty(), who, ": -o/--output is required");
  SPECBED_CHECK(!(options.resume && options.restart), who,
                ": --resume and --restart exclude each other");
  SPECBED_CHECK(options.stop_after >= 0, who, ": stop_after must be >= 0");
  return device;
}

// Fails naming `who` unless every parameter lives on `device` (the task placed its model there).
void CheckParamsOn(const std::vector<std::pair<std::string, at::Tensor>>& params,
                   const at::Device& device, const std::string& who) {
  for (const auto& [name, p] : params) {
    SPECBED_CHECK(SameDevice(p.device(), device), who, ": parameter '", name, "' is on ",
                  p.device(), " but --device is ", DeviceName(device));
  }
}

// The files of a run in OUT: its train state and log database, and whether a state is kept.
struct RunDir {
  std::string state_path, db_path;
  bool have_state = false;
};

// Creates OUT/work, discards the run in OUT on --restart, and checks that a kept run has the
// same `settings` (and that --resume finds one).
RunDir PrepareRunDir(const std::string& out_dir, const TrainLoopOptions& options,
                     const ojson& settings, const std::string& who) {
  const std::string work = out_dir + "/work";
  RunDir dir{work + "/train_state.safetensors", out_dir + "/train_log.db"};
  fs::create_directories(work);
  WriteFileAtomically(work + "/.gitignore", "# scratch of specbed train\n*\n");
  if (options.restart) {
    fs::remove(dir.state_path);
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(dir.db_path + suffix);
    fs::remove(out_dir + "/train_summary.json");
  }
  dir.have_state = PathExists(dir.state_path);
  SPECBED_CHECK(dir.have_state || !options.resume, who, ": --resume given but '", out_dir,
                "' holds no train state (", dir.state_path, ")");
  if (dir.have_state) {
    CheckSameSettings(ReadStateSettings(dir.state_path, who), settings, "'" + out_dir + "'");
  }
  return dir;
}

}  // namespace

TrainLoopResult RunTrainLoop(TrainTask& task, const OptimConfig& optim, const ojson& task_settings,
                             const std::string& out_dir, const TrainLoopOptions& options) {
  const std::string who = task.Name();
  const at::Device device = CheckLoopSettings(optim, task.TrainRows(), out_dir, options, who);
  at::set_num_threads(optim.threads);

  ojson settings = task_settings;
  const ojson optim_settings = OptimSettings(optim);
  for (const auto& [key, value] : optim_settings.items()) settings[key] = value;

  const RunDir dir = PrepareRunDir(out_dir, options, settings, who);
  const std::string& state_path = dir.state_path;
  const bool have_state = dir.have_state;

  std::vector<std::pair<std::string, at::Tensor>> params = task.Parameters();
  CheckParamsOn(params, device, who);
  std::vector<bool> decay;
  for (const auto& [name, p] : params) decay.push_back(task.Decays(name, p));
  AdamWOptimizer opt(std::move(params), std::move(decay), optim.beta1, optim.beta2,
                     optim.weight_decay);
  DataOrder order;
  order.rng.seed(DeriveSeed(optim.seed, 0, 0x6f72646572));  // "order"
  TrainState st;
  if (have_state) LoadState(state_path, opt, order, st);

  auto store = ResultsStore::Open(dir.db_path);
  TrainRunRecord run;
  run.train_key = Hex64(Fnv1a64(settings.dump().data(), settings.dump().size()));
  run.task = who;
  run.out_dir = out_dir;
  run.settings_json = settings.dump();
  TrainLoopResult result;
  result.device = DeviceName(device);
  result.train_id = store->BeginTrainRun(run);
  store->TruncateTrainRun(result.train_id, st.step);
  if (options.verbose && st.step > 0) {
    std::fprintf(stderr, "%s: resuming '%s' at step %lld of %lld\n", who.c_str(), out_dir.c_str(),
                 static_cast<long long>(st.step), static_cast<long long>(optim.steps));
  }

  const int64_t end_step =
      options.stop_after > 0 ? std::min(optim.steps, options.stop_after) : optim.steps;
  std::vector<TrainLogRow> pending_log;
  std::vector<TrainEvalRow> pending_eval;
  auto flush_log = [&] {
    store->AppendTrainLog(result.train_id, pending_log, pending_eval);
    pending_log.clear();
    pending_eval.clear();
  };
  auto checkpoint = [&] {
    flush_log();
    SaveState(state_path, opt, order, st, settings);
    task.WriteDrafter(out_dir);
  };
  if (st.step < end_step) {
    task.Prepare();
    if (st.step == 0 && optim.eval_every > 0) pending_eval.push_back(EvalRow(0, task.Evaluate()));
    std::unique_ptr<ProgressBar> bar;
    if (options.verbose) {
      bar = std::make_unique<ProgressBar>("train " + who, std::max<int64_t>(0, end_step - st.step),
                                          "step");
    }
    bool first = true;
    while (st.step < end_step) {
      const int64_t t0 = NowMicros();
      const std::vector<int64_t> rows = order.Next(task.TrainRows(), optim.batch);
      task.BeginStep(st.step);
      const at::Tensor loss = task.Loss(rows);
      loss.backward();
      const double lr = ScheduledLearningRate(optim, st.step);
      const double grad_norm = opt.Step(lr, optim.grad_clip);
      const double loss_value = loss.item<double>();
      ++st.step;
      st.train_seconds += (NowMicros() - t0) * 1e-6;
      st.loss_window.push_back(loss_value);
      if (st.loss_window.size() > kLossWindow) st.loss_window.erase(st.loss_window.begin());
      if (first) result.first_loss = loss_value;
      first = false;
      if (st.step % optim.log_every == 0 || st.step == optim.steps) {
        pending_log.push_back({st.step, loss_value, lr, grad_norm, st.train_seconds});
      }
      if (optim.eval_every > 0 && st.step % optim.eval_every == 0 && st.step != optim.steps) {
        pending_eval.push_back(EvalRow(st.step, task.Evaluate()));
      }
      if (st.step % optim.checkpoint_every == 0 || st.step == end_step) checkpoint();
      if (bar) {
        char note[64];
        std::snprintf(note, sizeof(note), "loss %.4f lr %.2e", loss_value, lr);
        bar->Advance(1, note);
      }
    }
  }
  if (!PathExists(state_path)) checkpoint();

  result.step = st.step;
  result.train_seconds = st.train_seconds;
  double window = 0;
  for (double l : st.loss_window) window += l;
  result.final_loss = st.loss_window.empty() ? 0 : window / st.loss_window.size();
  result.finished = st.step >= optim.steps;
  if (!result.finished) return result;
  result.eval = task.Evaluate();
  pending_eval.push_back(EvalRow(st.step, result.eval));
  flush_log();
  return result;
}

void WriteTrainSummary(const std::string& out_dir, const nlohmann::ordered_json& recipe,
                       const nlohmann::ordered_json& extra, const TrainLoopResult& loop,
                       const std::string& proxy_key, int threads) {
  nlohmann::ordered_json summary;
  summary["date"] = NowRfc3339();
  summary["recipe"] = recipe;
  for (const auto& [key, value] : extra.items()) summary[key] = value;
  summary["steps"] = loop.step;
  summary["final_train_loss"] = loop.final_loss;
  summary["eval_loss"] = loop.eval.loss;
  summary[proxy_key] = loop.eval.acceptance_proxy;
  summary["eval"] = loop.eval.extra;
  summary["train_seconds"] = loop.train_seconds;
  summary["threads"] = threads;
  summary["device"] = loop.device;
  WriteFileAtomically(out_dir + "/train_summary.json", summary.dump(2) + "\n");
}

}  // namespace specbed
