// `specbed train ltd` (see ltd_trainer.h).
// Checked by: tests/methods/ltd_trainer_test.cpp.
#include "methods/ltd/ltd_trainer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>

#include "base/error.h"
#include "base/hash.h"
#include "base/json_read.h"
#include "base/mapped_file.h"
#include "base/paths.h"
#include "base/progress.h"
#include "base/timer.h"
#include "datasets/dataset.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/runner/runner.h"
#include "methods/common/json_fields.h"
#include "methods/drafter_catalog.h"
#include "methods/ltd/ltd_controllers.h"
#include "methods/ltd/ltd_method.h"
#include "methods/ltd/ltd_policy.h"
#include "models/device.h"
#include "models/model_registry.h"
#include "results/store.h"

namespace specbed {
namespace {
using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;
}  // namespace

double LtdCostTables::Draft(int64_t rounds) const {
  SPECBED_CHECK(draft_s.size() >= 2, "LTD cost tables: no T_draft entries");
  const int64_t d = std::clamp<int64_t>(rounds, 1, static_cast<int64_t>(draft_s.size()) - 1);
  return draft_s[d];
}

double LtdCostTables::Verify(int64_t nodes) const {
  SPECBED_CHECK(!verify_v.empty(), "LTD cost tables: no T_verify entries");
  if (nodes <= verify_v.front()) return verify_s.front();
  if (nodes >= verify_v.back()) return verify_s.back();
  const auto it = std::upper_bound(verify_v.begin(), verify_v.end(), nodes);
  const size_t i = static_cast<size_t>(it - verify_v.begin());
  const double f = static_cast<double>(nodes - verify_v[i - 1]) /
                   static_cast<double>(verify_v[i] - verify_v[i - 1]);
  return verify_s[i - 1] + f * (verify_s[i] - verify_s[i - 1]);
}

ojson LtdCostTables::ToJson() const {
  ojson j;
  ojson d = ojson::array(), v = ojson::array();
  for (size_t i = 1; i < draft_s.size(); ++i) d.push_back({{"D", i}, {"ms", draft_s[i] * 1e3}});
  for (size_t i = 0; i < verify_v.size(); ++i)
    v.push_back({{"V", verify_v[i]}, {"ms", verify_s[i] * 1e3}});
  j["t_draft"] = d;
  j["t_verify"] = v;
  return j;
}

LtdCostTables LtdCostTables::FromJson(const nlohmann::json& j, const std::string& source) {
  LtdCostTables t;
  SPECBED_CHECK(j.contains("t_draft") && j["t_draft"].is_array() && j.contains("t_verify") &&
                    j["t_verify"].is_array(),
                source, ": expected arrays 't_draft' ({D, ms}) and 't_verify' ({V, ms})");
  t.draft_s.assign(1, 0.0);
  for (const auto& e : j["t_draft"]) {
    SPECBED_CHECK(e.value("D", -1) == static_cast<int64_t>(t.draft_s.size()), source,
                  ": t_draft must list D = 1, 2, ... in order");
    t.draft_s.push_back(e.at("ms").get<double>() * 1e-3);
  }
  for (const auto& e : j["t_verify"]) {
    const int64_t v = e.at("V").get<int64_t>();
    SPECBED_CHECK(t.verify_v.empty() || v > t.verify_v.back(), source,
                  ": t_verify must list V ascending");
    t.verify_v.push_back(v);
    t.verify_s.push_back(e.at("ms").get<double>() * 1e-3);
  }
  SPECBED_CHECK(t.draft_s.size() >= 2 && !t.verify_v.empty(), source, ": empty tables");
  return t;
}

LtdTrainConfig DefaultLtdTrainConfig() {
  LtdTrainConfig c;
  c.ppo.n_steps = 256;
  c.ppo.minibatch = 64;
  c.ppo.epochs = 10;
  c.ppo.lr = 1e-3;
  c.ppo.ent_coef = 0.01;
  return c;
}

namespace {

ojson Settings(const LtdTrainConfig& c) {
  ojson s;
  SPECBED_JSON_PUT(s, c, target, head, dtype, prompts, train_from, val_from, val_count,
                   max_new_tokens, top_k, max_depth, depth_every, size_step, n_actions,
                   depth_hidden, size_hidden, critic_hidden, activation, partner_rounds_max,
                   partner_nodes, reward, timing, tables, size_steps, depth_steps, iter_steps,
                   iterations, gamma_size, gamma_depth);
  s["ppo"] = PpoConfigToJson(c.ppo);
  // The measured reward depends on the device; "cpu" stays out so earlier runs resume.
  if (c.device != "cpu") s["device"] = c.device;
  return s;
}

void CheckConfig(const LtdTrainConfig& c) {
  SPECBED_CHECK(c.reward == "throughput" || c.reward == "tau",
                "train ltd: --reward must be throughput or tau, got '", c.reward, "'");
  SPECBED_CHECK(c.timing == "measured" || c.timing == "simulated",
                "train ltd: --timing must be measured or simulated, got '", c.timing, "'");
  SPECBED_CHECK(c.max_depth >= 1 && c.top_k >= 1 && c.depth_every >= 1 && c.size_step >= 1 &&
                    c.n_actions >= 1,
                "train ltd: --max-depth, --top-k, --depth-every, --size-step, --n-actions must be "
                ">= 1");
  SPECBED_CHECK(
      c.partner_rounds_max >= 1 && c.partner_rounds_max <= c.max_depth && c.partner_nodes >= 1,
      "train ltd: need 1 <= --partner-rounds-max <= --max-depth and --partner-nodes >= 1");
  SPECBED_CHECK(c.size_steps >= 1 && c.depth_steps >= 1 && c.iter_steps >= 1 && c.iterations >= 0,
                "train ltd: step counts must be >= 1 and --iterations >= 0");
  SPECBED_CHECK(c.val_count >= 1 && c.val_from >= 0 && c.train_from >= 0 &&
                    (c.val_from + c.val_count <= c.train_from || c.val_from >= c.train_from),
                "train ltd: validation prompts [--val-from, +--val-count) must not overlap the "
                "training prompts (index >= --train-from)");
  SPECBED_CHECK(c.val_from < c.train_from, "train ltd: --val-from must be below --train-from");
}

LtdPolicyConfig PolicyConfig(const LtdTrainConfig& c, LtdPolicyKind kind) {
  LtdPolicyConfig p = DefaultLtdPolicyConfig(kind);
  p.top_k = c.top_k;
  p.max_depth = c.max_depth;
  p.depth_every = c.depth_every;
  if (kind == LtdPolicyKind::kSize) {
    p.size_step = c.size_step;
    p.n_actions = c.n_actions;
    p.actor_hidden = c.size_hidden;
  } else {
    p.actor_hidden = c.depth_hidden;
  }
  p.critic_hidden = c.critic_hidden;
  p.activation = c.activation;
  return p;
}

PpoArch ArchOf(const LtdPolicyConfig& p) {
  PpoArch a;
  a.obs_dim = p.obs_dim();
  a.actions = p.actions();
  a.actor_hidden = p.actor_hidden;
  a.critic_hidden = p.critic_hidden;
  a.relu = p.activation == "relu";
  return a;
}

// Statistics of greedy (evaluation) or training cycles.
struct CycleTotals {
  int64_t cycles = 0;
  double tokens = 0, seconds = 0, rounds = 0, nodes = 0, policy_us = 0, reward = 0;
  ojson ToJson() const {
    ojson j;
    const double n = std::max<int64_t>(cycles, 1);
    j["cycles"] = cycles;
    j["throughput_tok_s"] = seconds > 0 ? tokens / seconds : 0;
    j["tau"] = tokens / n;
    j["mean_D"] = rounds / n;
    j["mean_V"] = nodes / n;
    j["policy_us_per_cycle"] = policy_us / n;
    j["mean_reward"] = reward / n;
    return j;
  }
};

// The environment: acts through the draft hooks, pays the reward after the verdict.
class TrainController : public TreeShapeController {
 public:
  TrainController(const LtdTrainConfig& c, const LtdCostTables* tables)
      : TreeShapeController(c.max_depth, c.size_step * c.n_actions),
        c_(c),
        tables_(tables),
        depth_cfg_(PolicyConfig(c, LtdPolicyKind::kDepth)),
        size_cfg_(PolicyConfig(c, LtdPolicyKind::kSize)),
        depth_obs_(static_cast<size_t>(depth_cfg_.obs_dim())),
        size_obs_(static_cast<size_t>(size_cfg_.obs_dim())) {
    max_nodes_ = std::max(max_nodes_, c.partner_nodes);
  }

  // Roles for the next generations.
  PpoAgent* learner = nullptr;  // null = evaluation (greedy policies below)
  LtdPolicyKind learner_kind = LtdPolicyKind::kSize;
  std::shared_ptr<LtdPolicy> depth;  // frozen / evaluated depth policy (null = heuristic)
  std::shared_ptr<LtdPolicy> size;   // frozen / evaluated size policy (null = partner_nodes)
  bool random_depth = false;         // heuristic depth: U{1..partner_rounds_max} per cycle
  int64_t fixed_rounds = 0;          // heuristic depth otherwise (0 = max_depth)
  std::function<void(const PpoUpdateStats&)> on_update;
  CycleTotals totals;
  std::mt19937_64 rng{0};

  void BeforeStep(const DraftStep& step, DraftBudget& budget) override {
    TreeShapeController::BeforeStep(step, budget);
    rounds_ = 0;
    excluded_ns_ = 0;
    policy_ns_ = 0;
    step_rounds_ = fixed_rounds > 0 ? fixed_rounds : c_.max_depth;
    if (random_depth)
      step_rounds_ = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(c_.partner_rounds_max));
    t0_ = NowNanos();
  }

  bool ContinueDrafting(const DraftRoundInfo& info) override {
    rounds_ = info.rounds;
    const bool learning = learner != nullptr && learner_kind == LtdPolicyKind::kDepth;
    if (!learning && !depth) return info.rounds < step_rounds_;
    if (info.rounds % c_.depth_every != 0) return true;
    const int64_t t = NowNanos();
    EncodeDepthObservation(depth_cfg_, info.child_scores, info.n_child_scores, info.context_len,
                           info.rounds, depth_obs_.data());
    bool go;
    if (learning) {
      go = learner->Act(depth_obs_.data()) == 1;
      excluded_ns_ += NowNanos() - t;
    } else {
      go = depth->Act(depth_obs_.data()) == 1;
      policy_ns_ += NowNanos() - t;
    }
    if (!go) return false;
    return true;
  }

  int64_t VerifySize(const DraftTreeInfo& info) override {
    rounds_ = info.rounds;
    const bool learning = learner != nullptr && learner_kind == LtdPolicyKind::kSize;
    if (!learning && !size) return std::min(c_.partner_nodes, info.budget_nodes);
    const int64_t t = NowNanos();
    EncodeSizeObservation(size_cfg_, info.scores, info.n_scores, info.context_len, info.rounds,
                          size_obs_.data());
    int64_t a;
    if (learning) {
      a = learner->Act(size_obs_.data());
      excluded_ns_ += NowNanos() - t;
    } else {
      a = size->Act(size_obs_.data());
      policy_ns_ += NowNanos() - t;
    }
    return std::min(LtdVerifySize(size_cfg_, a), info.budget_nodes);
  }

  void AfterStep(const DraftTree& tree, const Verdict& verdict) override {
    const int64_t t1 = NowNanos();
    const int64_t v = tree.size();
    const double la = static_cast<double>(verdict.n_accepted() + 1);
    double seconds = (t1 - t0_ - excluded_ns_) * 1e-9;
    if (c_.timing == "simulated") seconds = tables_->Draft(rounds_) + tables_->Verify(v);
    const double reward = c_.reward == "tau" ? la : la / (100.0 * seconds + 1e-6);
    ++totals.cycles;
    totals.tokens += la;
    totals.seconds += seconds;
    totals.rounds += static_cast<double>(rounds_);
    totals.nodes += static_cast<double>(v);
    totals.policy_us += policy_ns_ * 1e-3;
    totals.reward += reward;
    if (learner != nullptr) {
      learner->EndEpisode(reward);
      if (learner->ReadyToUpdate()) {
        const PpoUpdateStats stats = learner->Update();
        if (on_update) on_update(stats);
      }
    }
  }

  // A generation cut the episode (stop rule before AfterStep cannot happen; kept for safety).
  void DropOpen() {
    if (learner != nullptr) learner->DropOpen();
  }

 private:
  const LtdTrainConfig& c_;
  const LtdCostTables* tables_;
  LtdPolicyConfig depth_cfg_, size_cfg_;
  std::vector<float> depth_obs_, size_obs_;
  int64_t rounds_ = 0, step_rounds_ = 0;
  int64_t t0_ = 0, excluded_ns_ = 0, policy_ns_ = 0;
};

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Static-shape controller used for the tables (fixed D and V).
class StaticShape : public TreeShapeController {
 public:
  StaticShape(int64_t max_rounds, int64_t max_nodes) : TreeShapeController(max_rounds, max_nodes) {}
  int64_t rounds = 1, nodes = 1;
  bool ContinueDrafting(const DraftRoundInfo& info) override { return info.rounds < rounds; }
  int64_t VerifySize(const DraftTreeInfo& info) override {
    return std::min(nodes, info.budget_nodes);
  }
};

}  // namespace

std::unique_ptr<LtdTrainSetup> PrepareLtdTraining(const LtdSetupConfig& c, const std::string& who) {
  const at::Device device = ParseDevice(c.device, who + " --device");
  CheckDeviceAvailable(device, who + " --device");
  auto s = std::make_unique<LtdTrainSetup>();
  s->target = LoadModel(c.target, ParseDtype(c.dtype), "", device);
  s->context.target = &s->target;
  s->context.dtype = s->target.model->dtype();
  s->context.device = device;
  s->context.load_model = [who](const std::string& name) -> LoadedTarget& {
    Fail(who, ": needs no other model (asked for '", name, "')");
  };
  s->head = c.head == "auto" ? DefaultDrafterName("eagle3", s->target.spec.name, who) : c.head;
  DatasetFilter filter;
  const std::vector<Prompt> prompts = LoadDataset(c.prompts, filter);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto ids = BuildPromptIds(s->target, {{"user", prompts[i].turns[0]}});
    const int64_t ii = static_cast<int64_t>(i);
    if (ii >= c.train_from) s->train_prompts.push_back(ids);
    if (ii >= c.val_from && ii < c.val_from + c.val_count) s->val_prompts.push_back(ids);
  }
  SPECBED_CHECK(
      !s->train_prompts.empty() && static_cast<int64_t>(s->val_prompts.size()) == c.val_count, who,
      ": '", c.prompts, "' has ", prompts.size(), " prompts: too few for --train-from ",
      c.train_from, ", --val-from ", c.val_from, ", --val-count ", c.val_count);
  s->stop = StopConfigFor(s->target, c.max_new_tokens, {});
  return s;
}

DecodeResult RunLtdGeneration(LtdTrainSetup& setup, SpeculativeDecoder& decoder,
                              const std::vector<int32_t>& prompt, int64_t max_new_tokens) {
  GenerationConfig g;
  g.stop = setup.stop;
  g.stop.max_new_tokens = max_new_tokens;
  const LlamaModel& model = *setup.target.model;
  KvCache cache(model.config(), 1,
                CacheLengthFor(model, static_cast<int64_t>(prompt.size()), max_new_tokens, decoder),
                model.dtype(), model.device());
  DecodeResult r;
  decoder.Generate(prompt, g, cache, r);
  return r;
}

namespace {

// The run state of out_dir (a fresh one when absent), with the settings of `c`; another run's
// settings in the same directory fail.
ojson LoadRunState(const LtdTrainConfig& c, const std::string& out_dir,
                   const std::string& state_path) {
  const ojson settings = Settings(c);
  ojson state = {{"stages_done", 0}};
  if (PathExists(state_path)) {
    state = ParseOrderedJsonText(ReadFileToString(state_path), state_path);
    const bool same = WithJsonContext(state_path, [&] {  // key order does not matter
      return nlohmann::json::parse(state.at("settings").dump()) ==
             nlohmann::json::parse(settings.dump());
    });
    SPECBED_CHECK(same, "train ltd: '", out_dir, "' holds a run with other settings (", state_path,
                  "); use another -o/--output or delete it");
  }
  state["settings"] = settings;
  return state;
}

// T_draft(D) for D = 1..max_depth (at V = partner_nodes) and T_verify(V) for every V of the
// action map (at D = min(max_depth, 3)): medians per step over 2 training prompts x <= 32 tokens.
LtdCostTables MeasureCostTables(const LtdTrainConfig& c, LtdTrainSetup& setup, int64_t vmax,
                                bool verbose) {
  auto shape = std::make_unique<StaticShape>(c.max_depth, vmax);
  StaticShape* s = shape.get();
  auto dec =
      MakeLtdEagle3Decoder(setup.context, setup.head, c.top_k, c.max_depth, vmax, std::move(shape));
  auto run = [&](int64_t rounds, int64_t nodes) {
    s->rounds = rounds;
    s->nodes = nodes;
    std::vector<double> draft, verify;
    for (size_t p = 0; p < std::min<size_t>(2, setup.train_prompts.size()); ++p) {
      const DecodeResult r = RunLtdGeneration(setup, *dec, setup.train_prompts[p],
                                              std::min<int64_t>(c.max_new_tokens, 32));
      for (size_t st = 1; st < r.steps.size(); ++st) {
        draft.push_back(r.steps[st].t_draft_us * 1e-6);
        verify.push_back(r.steps[st].t_verify_us * 1e-6);
      }
    }
    return std::make_pair(Median(draft), Median(verify));
  };
  LtdCostTables tables;
  ProgressBar bar("ltd tables", c.max_depth + c.n_actions, "cfg");
  tables.draft_s.assign(1, 0.0);
  for (int64_t d = 1; d <= c.max_depth; ++d) {
    tables.draft_s.push_back(run(d, c.partner_nodes).first);
    if (verbose) bar.Advance();
  }
  std::vector<int64_t> vs;
  for (int64_t a = 0; a < c.n_actions; ++a) vs.push_back(c.size_step * (a + 1));
  if (std::find(vs.begin(), vs.end(), c.partner_nodes) == vs.end()) vs.push_back(c.partner_nodes);
  std::sort(vs.begin(), vs.end());
  for (int64_t v : vs) {
    tables.verify_v.push_back(v);
    tables.verify_s.push_back(run(std::min<int64_t>(c.max_depth, 3), v).second);
    if (verbose) bar.Advance();
  }
  bar.Finish();
  return tables;
}

// The cost tables: --tables, else OUT/tables.json of an earlier run, else measured; written to
// OUT/tables.json.
LtdCostTables CostTablesFor(const LtdTrainConfig& c, LtdTrainSetup& setup,
                            const std::string& out_dir, int64_t vmax, bool verbose) {
  const std::string tables_path = out_dir + "/tables.json";
  LtdCostTables tables;
  if (!c.tables.empty()) {
    tables = LtdCostTables::FromJson(ReadJsonFile(c.tables), c.tables);
  } else if (PathExists(tables_path)) {
    tables = LtdCostTables::FromJson(ReadJsonFile(tables_path), tables_path);
  } else {
    tables = MeasureCostTables(c, setup, vmax, verbose);
  }
  WriteFileAtomically(tables_path, tables.ToJson().dump(2));
  return tables;
}

// One policy's weights in a run: its config, its current tensors (random until trained) and
// whether a stage has trained them (in this run or an earlier one in the same directory).
struct PolicyWeights {
  LtdPolicyConfig config;
  std::map<std::string, at::Tensor> tensors;
  bool trained = false;

  // The weights of an earlier stage in `dir`, when it holds a written policy.
  void LoadIfWritten(const std::string& dir) {
    if (!PathExists(dir + "/config.json")) return;
    tensors = LoadLtdPolicy(dir).tensors;
    trained = true;
  }
  // A policy of the current tensors (frozen partner or evaluated policy).
  std::shared_ptr<LtdPolicy> Policy() const {
    LtdPolicyCheckpoint ck;
    ck.config = config;
    ck.tensors = tensors;
    return std::make_shared<LtdPolicy>(std::move(ck));
  }
};

struct LtdStage {
  LtdPolicyKind kind;
  int64_t steps;
  std::string name;
};

// The schedule: size, depth, then `iterations` rounds alternating size and depth.
std::vector<LtdStage> LtdStages(const LtdTrainConfig& c) {
  std::vector<LtdStage> stages = {{LtdPolicyKind::kSize, c.size_steps, "size (heuristic depth)"},
                                  {LtdPolicyKind::kDepth, c.depth_steps, "depth (fixed V)"}};
  for (int64_t i = 1; i <= c.iterations; ++i) {
    const bool size_turn = i % 2 == 1;
    stages.push_back(
        {size_turn ? LtdPolicyKind::kSize : LtdPolicyKind::kDepth, c.iter_steps,
         "iter" + std::to_string(i) + " " + (size_turn ? "size" : "depth") + " (partner frozen)"});
  }
  return stages;
}

// The PPO settings of stage `si`: its step count, its policy's discount, a seed of its own.
PpoConfig StagePpo(const LtdTrainConfig& c, const LtdStage& stage, size_t si) {
  PpoConfig ppo = c.ppo;
  ppo.total_steps = stage.steps;
  ppo.gamma = stage.kind == LtdPolicyKind::kSize ? c.gamma_size : c.gamma_depth;
  ppo.seed = c.ppo.seed * 1000 + si;
  return ppo;
}

// One `train ltd` run into out_dir (TrainLtd): the run state (work/state.json), the setup, the
// decoder with its training controller, both policies' weights and the run in train_log.db.
// RunStage trains one stage of the schedule; FinalSummary validates the result and writes
// train_summary.json. Not copyable (the controller points at the tables).
class LtdRun {
 public:
  LtdRun(const LtdTrainConfig& c, const std::string& out_dir, bool verbose);
  LtdRun(const LtdRun&) = delete;
  LtdRun& operator=(const LtdRun&) = delete;

  int64_t stages_done() const { return state_.value("stages_done", int64_t{0}); }
  int64_t stage_count() const { return static_cast<int64_t>(stages_.size()); }
  void RunStage(size_t si);
  ojson FinalSummary();

 private:
  // A stage in progress: the learner, its partners, the best validated weights, the log rows
  // not yet stored and the progress bar.
  struct StageRun {
    StageRun(size_t index, const LtdStage& s, PolicyWeights& learned, const PpoConfig& ppo_config,
             bool depth_partner, bool size_partner)
        : si(index),
          stage(s),
          is_size(s.kind == LtdPolicyKind::kSize),
          policy(learned),
          ppo(ppo_config),
          agent(ArchOf(learned.config), learned.tensors, ppo_config),
          partner_depth(depth_partner),
          partner_size(size_partner) {}
    size_t si;
    const LtdStage& stage;
    bool is_size;
    PolicyWeights& policy;  // the learned policy's weights
    PpoConfig ppo;
    PpoAgent agent;
    bool partner_depth, partner_size;  // whether the frozen partner is a trained policy
    double best_val = -1;
    std::map<std::string, at::Tensor> best;
    ojson best_fig;
    int64_t updates_since_eval = 0;
    std::vector<TrainLogRow> logs;
    std::vector<TrainEvalRow> evals;
    int64_t start_ns = 0;
    std::unique_ptr<ProgressBar> bar;
    int64_t shown = 0;
  };

  void LoadPolicies();
  void OpenTrainLog();
  void Generate(const std::vector<int32_t>& prompt);
  CycleTotals Validate(bool use_depth, bool use_size);
  void ResumeAgent(StageRun& s);
  void SetTrainingRoles(StageRun& s);
  void OnUpdate(StageRun& s, const PpoUpdateStats& u);
  void LogUpdate(StageRun& s, const PpoUpdateStats& u);
  void SaveResumePoint(StageRun& s);
  void ValidateStage(StageRun& s);
  void FlushLog(StageRun& s);
  void FinishStage(StageRun& s);
  double ElapsedS(const StageRun& s) const { return elapsed_ + (NowNanos() - s.start_ns) * 1e-9; }
  void WriteState() const { WriteFileAtomically(state_path_, state_.dump(2)); }

  const LtdTrainConfig& c_;
  const std::string out_dir_;
  const bool verbose_;
  const std::string state_path_, agent_path_;
  // Heuristic depth in validation: the middle of the training partner's U{1..max}.
  const int64_t heuristic_rounds_;
  ojson state_;
  ojson settings_;  // a copy: state_ gains keys later
  std::unique_ptr<LtdTrainSetup> setup_;
  LtdCostTables tables_;
  TrainController* ctl_ = nullptr;  // owned by decoder_
  std::unique_ptr<SpeculativeDecoder> decoder_;
  PolicyWeights depth_, size_;
  std::vector<LtdStage> stages_;
  std::unique_ptr<ResultsStore> store_;
  int64_t train_id_ = 0;
  int64_t global_update_ = 0;
  double elapsed_ = 0;
  std::mt19937_64 prompt_rng_;
  ojson stage_summaries_;
};

LtdRun::LtdRun(const LtdTrainConfig& c, const std::string& out_dir, bool verbose)
    : c_(c),
      out_dir_(out_dir),
      verbose_(verbose),
      state_path_(out_dir + "/work/state.json"),
      agent_path_(out_dir + "/work/agent"),
      heuristic_rounds_((1 + c.partner_rounds_max + 1) / 2) {
  CheckConfig(c);
  SPECBED_CHECK(!out_dir.empty(), "train ltd: -o/--output is required");
  at::set_num_threads(c.threads);
  fs::create_directories(out_dir + "/work");
  state_ = LoadRunState(c, out_dir, state_path_);
  settings_ = state_["settings"];
  setup_ = PrepareLtdTraining(c, "train ltd");
  const int64_t vmax = std::max(c.size_step * c.n_actions, c.partner_nodes);
  tables_ = CostTablesFor(c, *setup_, out_dir, vmax, verbose);
  auto owned = std::make_unique<TrainController>(c, &tables_);
  ctl_ = owned.get();
  decoder_ = MakeLtdEagle3Decoder(setup_->context, setup_->head, c.top_k, c.max_depth, vmax,
                                  std::move(owned));
  LoadPolicies();
  stages_ = LtdStages(c);
  OpenTrainLog();
}

// Current weights of both policies: random, or those of the stages done before a resume.
void LtdRun::LoadPolicies() {
  depth_.config = PolicyConfig(c_, LtdPolicyKind::kDepth);
  size_.config = PolicyConfig(c_, LtdPolicyKind::kSize);
  depth_.tensors = RandomLtdPolicyTensors(depth_.config, c_.ppo.seed * 2 + 1);
  size_.tensors = RandomLtdPolicyTensors(size_.config, c_.ppo.seed * 2 + 2);
  if (stages_done() > 0) {
    depth_.LoadIfWritten(out_dir_ + "/depth");
    size_.LoadIfWritten(out_dir_ + "/size");
  }
}

// The run in train_log.db (rows past the resume point dropped) and the counters, prompt order
// and stage summaries of the state.
void LtdRun::OpenTrainLog() {
  store_ = ResultsStore::Open(out_dir_ + "/train_log.db");
  TrainRunRecord run;
  const std::string sdump = settings_.dump();
  run.train_key = Hex64(Fnv1a64(sdump.data(), sdump.size()));
  run.task = "ltd";
  run.out_dir = out_dir_;
  run.settings_json = sdump;
  run.started_at = NowRfc3339();
  train_id_ = store_->BeginTrainRun(run);
  global_update_ = state_.value("global_update", int64_t{0});
  store_->TruncateTrainRun(train_id_, global_update_);
  elapsed_ = state_.value("elapsed_s", 0.0);
  prompt_rng_.seed(c_.ppo.seed ^ 0x70726f6d7074ULL);  // "prompt"
  if (state_.contains("prompt_rng")) {
    std::istringstream in(state_["prompt_rng"].get<std::string>());
    in >> prompt_rng_;
  }
  stage_summaries_ = state_.value("stages", ojson::array());
}

void LtdRun::Generate(const std::vector<int32_t>& prompt) {
  RunLtdGeneration(*setup_, *decoder_, prompt, c_.max_new_tokens);
  ctl_->DropOpen();
}

// Validation: greedy policies of the current weights on the held-out prompts (heuristic depth
// and the fixed V where a policy is not used).
CycleTotals LtdRun::Validate(bool use_depth, bool use_size) {
  ctl_->learner = nullptr;
  ctl_->random_depth = false;
  ctl_->fixed_rounds = heuristic_rounds_;
  ctl_->depth = use_depth ? depth_.Policy() : nullptr;
  ctl_->size = use_size ? size_.Policy() : nullptr;
  ctl_->totals = CycleTotals();
  for (const auto& p : setup_->val_prompts) Generate(p);
  return ctl_->totals;
}

void LtdRun::RunStage(size_t si) {
  const LtdStage& stage = stages_[si];
  const bool is_size = stage.kind == LtdPolicyKind::kSize;
  // Partners: the other policy once trained, except in the two initial stages (heuristic depth,
  // fixed V).
  StageRun s(si, stage, is_size ? size_ : depth_, StagePpo(c_, stage, si),
             is_size && si != 0 && depth_.trained, !is_size && si != 1 && size_.trained);
  ResumeAgent(s);
  ctl_->learner_kind = stage.kind;
  ctl_->fixed_rounds = 0;
  SetTrainingRoles(s);
  s.best = s.policy.tensors;
  s.start_ns = NowNanos();
  s.bar = std::make_unique<ProgressBar>("train ltd " + stage.name, stage.steps, "ep");
  s.shown = s.agent.steps_done();
  if (verbose_) s.bar->Advance(s.shown);
  ctl_->on_update = [this, &s](const PpoUpdateStats& u) { OnUpdate(s, u); };
  while (s.agent.steps_done() < stage.steps) {
    const size_t p = static_cast<size_t>(prompt_rng_() % setup_->train_prompts.size());
    ctl_->totals = CycleTotals();
    Generate(setup_->train_prompts[p]);
    if (s.updates_since_eval >= c_.eval_every) ValidateStage(s);
    if (!s.logs.empty()) FlushLog(s);
  }
  ValidateStage(s);
  if (!s.logs.empty() || !s.evals.empty()) FlushLog(s);
  s.bar->Finish();
  ctl_->on_update = nullptr;  // both point into `s`
  ctl_->learner = nullptr;
  FinishStage(s);
}

// A stage interrupted after an update continues from the agent saved then.
void LtdRun::ResumeAgent(StageRun& s) {
  if (state_.value("stage_in_progress", int64_t{-1}) != static_cast<int64_t>(s.si) ||
      !PathExists(agent_path_ + ".json")) {
    return;
  }
  s.agent.Load(agent_path_);
  if (verbose_) {
    std::fprintf(stderr, "train ltd: resuming stage %zu at %lld steps\n", s.si,
                 static_cast<long long>(s.agent.steps_done()));
  }
}

// The learner acts; the partner is the frozen trained policy, else the heuristic (depth:
// U{1..partner_rounds_max} per cycle; size: partner_nodes).
void LtdRun::SetTrainingRoles(StageRun& s) {
  ctl_->learner = &s.agent;
  ctl_->random_depth = s.is_size && (s.si == 0 || !s.partner_depth);
  ctl_->depth = s.partner_depth ? depth_.Policy() : nullptr;
  ctl_->size = s.partner_size ? size_.Policy() : nullptr;
}

void LtdRun::OnUpdate(StageRun& s, const PpoUpdateStats& u) {
  ++global_update_;
  ++s.updates_since_eval;
  LogUpdate(s, u);
  SaveResumePoint(s);
  if (verbose_) {
    char note[128];
    std::snprintf(note, sizeof(note), "reward %.3f ent %.2f", u.mean_reward, u.entropy);
    s.bar->Advance(s.agent.steps_done() - s.shown, note);
    s.shown = s.agent.steps_done();
  }
}

// The train_log row (PPO loss, lr, grad norm) and train_eval row (the update's statistics) of an
// update.
void LtdRun::LogUpdate(StageRun& s, const PpoUpdateStats& u) {
  TrainLogRow row;
  row.step = global_update_;
  row.loss = u.policy_loss + c_.ppo.vf_coef * u.value_loss - c_.ppo.ent_coef * u.entropy;
  row.lr = u.lr;
  row.grad_norm = u.grad_norm;
  row.elapsed_s = ElapsedS(s);
  s.logs.push_back(row);
  TrainEvalRow ev;
  ev.step = global_update_;
  ev.val_loss = u.value_loss;
  ev.acceptance_proxy = u.mean_reward;
  ojson m;
  m["stage"] = s.si;
  m["stage_name"] = s.stage.name;
  m["policy_loss"] = u.policy_loss;
  m["value_loss"] = u.value_loss;
  m["entropy"] = u.entropy;
  m["approx_kl"] = u.approx_kl;
  m["clip_fraction"] = u.clip_fraction;
  m["mean_reward"] = u.mean_reward;
  m["transitions"] = u.transitions;
  m["episodes"] = u.episodes;
  ev.metrics_json = m.dump();
  s.evals.push_back(ev);
}

// Resume point: right after an update the rollout is empty.
void LtdRun::SaveResumePoint(StageRun& s) {
  s.agent.Save(agent_path_);
  std::ostringstream rng_state;
  rng_state << prompt_rng_;
  state_["stage_in_progress"] = s.si;
  state_["global_update"] = global_update_;
  state_["prompt_rng"] = rng_state.str();
  state_["elapsed_s"] = ElapsedS(s);
  WriteState();
}

// Validates the learner's current weights with the stage's partners (kept when best so far, the
// figures added to the last update's train_eval row), then back to the training roles.
void LtdRun::ValidateStage(StageRun& s) {
  s.policy.tensors = s.agent.Tensors();
  const bool use_depth = s.is_size ? s.partner_depth : true;
  const bool use_size = s.is_size ? true : s.partner_size;
  const ojson fig = Validate(use_depth, use_size).ToJson();
  const double v = fig["throughput_tok_s"].get<double>();
  if (v > s.best_val) {
    s.best_val = v;
    s.best = s.policy.tensors;
    s.best_fig = fig;
  }
  if (!s.evals.empty()) {
    ojson m = ojson::parse(s.evals.back().metrics_json);
    m["validation"] = fig;
    s.evals.back().metrics_json = m.dump();
  }
  SetTrainingRoles(s);
  s.updates_since_eval = 0;
}

void LtdRun::FlushLog(StageRun& s) {
  store_->AppendTrainLog(train_id_, s.logs, s.evals);
  s.logs.clear();
  s.evals.clear();
}

// Writes the stage's best validated weights as the policy and records the stage as done.
void LtdRun::FinishStage(StageRun& s) {
  s.policy.tensors = s.best;
  elapsed_ += (NowNanos() - s.start_ns) * 1e-9;
  LtdPolicyConfig written = s.policy.config;
  written.training = {{"trainer", "specbed train ltd"},
                      {"settings", settings_},
                      {"stage", s.si},
                      {"stage_name", s.stage.name},
                      {"ppo", PpoConfigToJson(s.ppo)}};
  written.evaluation = {{"validation", s.best_fig}};
  WriteLtdPolicy(out_dir_ + "/" + (s.is_size ? "size" : "depth"), written, s.policy.tensors);
  s.policy.trained = true;
  stage_summaries_.push_back({{"stage", s.si},
                              {"name", s.stage.name},
                              {"steps", s.agent.steps_done()},
                              {"updates", s.agent.updates_done()},
                              {"best_validation", s.best_fig}});
  state_["stages"] = stage_summaries_;
  state_["stages_done"] = s.si + 1;
  state_["stage_in_progress"] = -1;
  state_["global_update"] = global_update_;
  state_["elapsed_s"] = elapsed_;
  WriteState();
  if (verbose_) {
    std::fprintf(stderr, "train ltd: stage %zu (%s) done: best validation %s\n", s.si,
                 s.stage.name.c_str(), s.best_fig.dump().c_str());
  }
}

// Final figures on the validation prompts (static partner pair, each policy alone, both) ->
// train_summary.json and the run's summary in train_log.db.
ojson LtdRun::FinalSummary() {
  ojson fin;
  fin["both"] = Validate(true, true).ToJson();
  fin["size_only"] = Validate(false, true).ToJson();
  fin["depth_only"] = Validate(true, false).ToJson();
  fin["static_partner"] = Validate(false, false).ToJson();
  fin["static_partner"]["rounds"] = heuristic_rounds_;
  fin["static_partner"]["nodes"] = c_.partner_nodes;
  ojson summary;
  summary["settings"] = settings_;
  summary["stages"] = stage_summaries_;
  summary["final_validation"] = fin;
  summary["tables"] = tables_.ToJson();
  summary["train_seconds"] = elapsed_;
  summary["note"] = c_.timing == "measured"
                        ? "rewards are measured wall times: runs are not bitwise reproducible"
                        : "simulated rewards from tables.json: bitwise reproducible";
  WriteFileAtomically(out_dir_ + "/train_summary.json", summary.dump(2));
  store_->FinishTrainRun(train_id_, summary.dump());
  return summary;
}

}  // namespace

LtdTrainResult TrainLtd(const LtdTrainConfig& c, const std::string& out_dir, bool verbose,
                        int64_t stop_after_stages) {
  LtdRun run(c, out_dir, verbose);
  for (int64_t si = run.stages_done(); si < run.stage_count(); ++si) {
    if (stop_after_stages > 0 && si >= stop_after_stages) break;
    run.RunStage(static_cast<size_t>(si));
  }
  LtdTrainResult result;
  result.stages_done = run.stages_done();
  result.finished = result.stages_done == run.stage_count();
  if (result.finished) result.summary = run.FinalSummary();
  return result;
}

}  // namespace specbed
