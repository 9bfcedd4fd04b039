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
#include <memory>
#include <random>
#include <sstream>

#include "datasets/dataset.h"
#include "harness/base/error.h"
#include "harness/base/hash.h"
#include "harness/base/json_read.h"
#include "harness/base/mapped_file.h"
#include "harness/base/paths.h"
#include "harness/base/progress.h"
#include "harness/base/timer.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/runner/runner.h"
#include "methods/ltd/ltd_controllers.h"
#include "methods/ltd/ltd_method.h"
#include "methods/ltd/ltd_policy.h"
#include "models/drafter_catalog.h"
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
  s["target"] = c.target;
  s["head"] = c.head;
  s["dtype"] = c.dtype;
  s["prompts"] = c.prompts;
  s["train_from"] = c.train_from;
  s["val_from"] = c.val_from;
  s["val_count"] = c.val_count;
  s["max_new_tokens"] = c.max_new_tokens;
  s["top_k"] = c.top_k;
  s["max_depth"] = c.max_depth;
  s["depth_every"] = c.depth_every;
  s["size_step"] = c.size_step;
  s["n_actions"] = c.n_actions;
  s["depth_hidden"] = c.depth_hidden;
  s["size_hidden"] = c.size_hidden;
  s["critic_hidden"] = c.critic_hidden;
  s["activation"] = c.activation;
  s["partner_rounds_max"] = c.partner_rounds_max;
  s["partner_nodes"] = c.partner_nodes;
  s["reward"] = c.reward;
  s["timing"] = c.timing;
  s["tables"] = c.tables;
  s["size_steps"] = c.size_steps;
  s["depth_steps"] = c.depth_steps;
  s["iter_steps"] = c.iter_steps;
  s["iterations"] = c.iterations;
  s["gamma_size"] = c.gamma_size;
  s["gamma_depth"] = c.gamma_depth;
  s["ppo"] = PpoConfigToJson(c.ppo);
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

std::unique_ptr<LtdTrainSetup> PrepareLtdTraining(const std::string& target_name,
                                                  const std::string& dtype, const std::string& head,
                                                  const std::string& prompts_name,
                                                  int64_t train_from, int64_t val_from,
                                                  int64_t val_count, int64_t max_new_tokens,
                                                  const std::string& who) {
  auto s = std::make_unique<LtdTrainSetup>();
  s->target = LoadModel(target_name, ParseDtype(dtype));
  s->context.target = &s->target;
  s->context.dtype = s->target.model->dtype();
  s->context.load_model = [who](const std::string& name) -> LoadedTarget& {
    Fail(who, ": needs no other model (asked for '", name, "')");
  };
  s->head = head == "auto" ? DefaultDrafterName("eagle3", s->target.spec.name, who) : head;
  DatasetFilter filter;
  const std::vector<Prompt> prompts = LoadDataset(prompts_name, filter);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto ids = BuildPromptIds(s->target, {{"user", prompts[i].turns[0]}});
    const int64_t ii = static_cast<int64_t>(i);
    if (ii >= train_from) s->train_prompts.push_back(ids);
    if (ii >= val_from && ii < val_from + val_count) s->val_prompts.push_back(ids);
  }
  SPECBED_CHECK(
      !s->train_prompts.empty() && static_cast<int64_t>(s->val_prompts.size()) == val_count, who,
      ": '", prompts_name, "' has ", prompts.size(), " prompts: too few for --train-from ",
      train_from, ", --val-from ", val_from, ", --val-count ", val_count);
  s->stop = StopConfigFor(s->target, max_new_tokens, {});
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
                model.dtype());
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

}  // namespace

LtdTrainResult TrainLtd(const LtdTrainConfig& c, const std::string& out_dir, bool verbose,
                        int64_t stop_after_stages) {
  CheckConfig(c);
  SPECBED_CHECK(!out_dir.empty(), "train ltd: -o/--output is required");
  at::set_num_threads(c.threads);
  fs::create_directories(out_dir + "/work");
  const std::string state_path = out_dir + "/work/state.json";
  ojson state = LoadRunState(c, out_dir, state_path);
  const ojson settings = state["settings"];  // a copy: state gains keys later

  const auto setup = PrepareLtdTraining(c.target, c.dtype, c.head, c.prompts, c.train_from,
                                        c.val_from, c.val_count, c.max_new_tokens, "train ltd");
  MethodContext& context = setup->context;
  const std::string& head = setup->head;
  const std::vector<std::vector<int32_t>>& train_prompts = setup->train_prompts;
  const std::vector<std::vector<int32_t>>& val_prompts = setup->val_prompts;

  const int64_t vmax = std::max(c.size_step * c.n_actions, c.partner_nodes);
  const LtdCostTables tables = CostTablesFor(c, *setup, out_dir, vmax, verbose);

  auto owned = std::make_unique<TrainController>(c, &tables);
  TrainController* ctl = owned.get();
  auto decoder = MakeLtdEagle3Decoder(context, head, c.top_k, c.max_depth, vmax, std::move(owned));

  auto generate = [&](const std::vector<int32_t>& prompt) {
    RunLtdGeneration(*setup, *decoder, prompt, c.max_new_tokens);
    ctl->DropOpen();
  };

  // Policies: current weights of both (random init until trained).
  const LtdPolicyConfig depth_cfg = PolicyConfig(c, LtdPolicyKind::kDepth);
  const LtdPolicyConfig size_cfg = PolicyConfig(c, LtdPolicyKind::kSize);
  std::map<std::string, at::Tensor> depth_w = RandomLtdPolicyTensors(depth_cfg, c.ppo.seed * 2 + 1);
  std::map<std::string, at::Tensor> size_w = RandomLtdPolicyTensors(size_cfg, c.ppo.seed * 2 + 2);
  bool depth_trained = false, size_trained = false;
  auto load_part = [&](const char* part, std::map<std::string, at::Tensor>& w, bool& trained) {
    const std::string dir = out_dir + "/" + part;
    if (PathExists(dir + "/config.json")) {
      w = LoadLtdPolicy(dir).tensors;
      trained = true;
    }
  };
  const int64_t stages_done = state.value("stages_done", int64_t{0});
  if (stages_done > 0) {
    load_part("depth", depth_w, depth_trained);
    load_part("size", size_w, size_trained);
  }
  auto make_policy = [](const LtdPolicyConfig& cfg, const std::map<std::string, at::Tensor>& w) {
    LtdPolicyCheckpoint ck;
    ck.config = cfg;
    ck.tensors = w;
    return std::make_shared<LtdPolicy>(std::move(ck));
  };

  // Stages: size, depth, then alternate (size, depth, ...).
  struct Stage {
    LtdPolicyKind kind;
    int64_t steps;
    std::string name;
  };
  std::vector<Stage> stages = {{LtdPolicyKind::kSize, c.size_steps, "size (heuristic depth)"},
                               {LtdPolicyKind::kDepth, c.depth_steps, "depth (fixed V)"}};
  for (int64_t i = 1; i <= c.iterations; ++i) {
    const bool size_turn = i % 2 == 1;
    stages.push_back(
        {size_turn ? LtdPolicyKind::kSize : LtdPolicyKind::kDepth, c.iter_steps,
         "iter" + std::to_string(i) + " " + (size_turn ? "size" : "depth") + " (partner frozen)"});
  }

  auto store = ResultsStore::Open(out_dir + "/train_log.db");
  TrainRunRecord run;
  const std::string sdump = settings.dump();
  run.train_key = Hex64(Fnv1a64(sdump.data(), sdump.size()));
  run.task = "ltd";
  run.out_dir = out_dir;
  run.settings_json = sdump;
  run.started_at = NowRfc3339();
  const int64_t train_id = store->BeginTrainRun(run);
  int64_t global_update = state.value("global_update", int64_t{0});
  store->TruncateTrainRun(train_id, global_update);
  double elapsed = state.value("elapsed_s", 0.0);

  std::mt19937_64 prompt_rng(c.ppo.seed ^ 0x70726f6d7074ULL);  // "prompt"
  if (state.contains("prompt_rng")) {
    std::istringstream in(state["prompt_rng"].get<std::string>());
    in >> prompt_rng;
  }
  ojson stage_summaries = state.value("stages", ojson::array());

  // Validation: greedy policies of the current weights on the held-out prompts.
  // Heuristic depth in validation: the middle of the training partner's U{1..max}.
  const int64_t heuristic_rounds = (1 + c.partner_rounds_max + 1) / 2;
  auto validate = [&](bool use_depth, bool use_size) {
    ctl->learner = nullptr;
    ctl->random_depth = false;
    ctl->fixed_rounds = heuristic_rounds;
    ctl->depth = use_depth ? make_policy(depth_cfg, depth_w) : nullptr;
    ctl->size = use_size ? make_policy(size_cfg, size_w) : nullptr;
    ctl->totals = CycleTotals();
    for (const auto& p : val_prompts) generate(p);
    return ctl->totals;
  };

  LtdTrainResult result;
  for (size_t si = static_cast<size_t>(stages_done); si < stages.size(); ++si) {
    if (stop_after_stages > 0 && static_cast<int64_t>(si) >= stop_after_stages) break;
    const Stage& stage = stages[si];
    const bool is_size = stage.kind == LtdPolicyKind::kSize;
    const LtdPolicyConfig& cfg = is_size ? size_cfg : depth_cfg;
    std::map<std::string, at::Tensor>& weights = is_size ? size_w : depth_w;
    PpoConfig ppo = c.ppo;
    ppo.total_steps = stage.steps;
    ppo.gamma = is_size ? c.gamma_size : c.gamma_depth;
    ppo.seed = c.ppo.seed * 1000 + si;
    PpoAgent agent(ArchOf(cfg), weights, ppo);
    const std::string agent_path = out_dir + "/work/agent";
    if (state.value("stage_in_progress", int64_t{-1}) == static_cast<int64_t>(si) &&
        PathExists(agent_path + ".json")) {
      agent.Load(agent_path);
      if (verbose)
        std::fprintf(stderr, "train ltd: resuming stage %zu at %lld steps\n", si,
                     static_cast<long long>(agent.steps_done()));
    }
    // Partners.
    const bool first_size = si == 0;
    const bool first_depth = si == 1;
    ctl->learner = &agent;
    ctl->learner_kind = stage.kind;
    ctl->random_depth = is_size && first_size;
    ctl->fixed_rounds = 0;
    ctl->depth =
        (!is_size || first_size || !depth_trained) ? nullptr : make_policy(depth_cfg, depth_w);
    ctl->size = (is_size || first_depth || !size_trained) ? nullptr : make_policy(size_cfg, size_w);
    if (is_size && !ctl->depth && !first_size) ctl->random_depth = true;
    const bool partner_depth = !is_size ? false : ctl->depth != nullptr;
    const bool partner_size = is_size ? false : ctl->size != nullptr;

    double best_val = -1;
    std::map<std::string, at::Tensor> best = weights;
    ojson best_fig;
    int64_t updates_since_eval = 0;
    std::vector<TrainLogRow> logs;
    std::vector<TrainEvalRow> evals;
    const int64_t start_ns = NowNanos();
    ProgressBar bar("train ltd " + stage.name, stage.steps, "ep");
    int64_t shown = agent.steps_done();
    if (verbose) bar.Advance(shown);
    ctl->on_update = [&](const PpoUpdateStats& s) {
      ++global_update;
      ++updates_since_eval;
      TrainLogRow row;
      row.step = global_update;
      row.loss = s.policy_loss + c.ppo.vf_coef * s.value_loss - c.ppo.ent_coef * s.entropy;
      row.lr = s.lr;
      row.grad_norm = s.grad_norm;
      row.elapsed_s = elapsed + (NowNanos() - start_ns) * 1e-9;
      logs.push_back(row);
      TrainEvalRow ev;
      ev.step = global_update;
      ev.val_loss = s.value_loss;
      ev.acceptance_proxy = s.mean_reward;
      ojson m;
      m["stage"] = si;
      m["stage_name"] = stage.name;
      m["policy_loss"] = s.policy_loss;
      m["value_loss"] = s.value_loss;
      m["entropy"] = s.entropy;
      m["approx_kl"] = s.approx_kl;
      m["clip_fraction"] = s.clip_fraction;
      m["mean_reward"] = s.mean_reward;
      m["transitions"] = s.transitions;
      m["episodes"] = s.episodes;
      ev.metrics_json = m.dump();
      evals.push_back(ev);
      // Resume point: right after an update the rollout is empty.
      agent.Save(agent_path);
      std::ostringstream rng_state;
      rng_state << prompt_rng;
      state["stage_in_progress"] = si;
      state["global_update"] = global_update;
      state["prompt_rng"] = rng_state.str();
      state["elapsed_s"] = elapsed + (NowNanos() - start_ns) * 1e-9;
      WriteFileAtomically(state_path, state.dump(2));
      if (verbose) {
        char note[128];
        std::snprintf(note, sizeof(note), "reward %.3f ent %.2f", s.mean_reward, s.entropy);
        bar.Advance(agent.steps_done() - shown, note);
        shown = agent.steps_done();
      }
    };
    auto run_validation = [&]() {
      weights = agent.Tensors();
      const bool use_depth = is_size ? partner_depth : true;
      const bool use_size = is_size ? true : partner_size;
      const CycleTotals t = validate(use_depth, use_size);
      const ojson fig = t.ToJson();
      const double v = fig["throughput_tok_s"].get<double>();
      if (v > best_val) {
        best_val = v;
        best = weights;
        best_fig = fig;
      }
      if (!evals.empty()) {
        ojson m = ojson::parse(evals.back().metrics_json);
        m["validation"] = fig;
        evals.back().metrics_json = m.dump();
      }
      // Back to training roles.
      ctl->learner = &agent;
      ctl->random_depth = is_size && (first_size || !partner_depth);
      ctl->depth = partner_depth ? make_policy(depth_cfg, depth_w) : nullptr;
      ctl->size = partner_size ? make_policy(size_cfg, size_w) : nullptr;
      updates_since_eval = 0;
    };
    while (agent.steps_done() < stage.steps) {
      const size_t p = static_cast<size_t>(prompt_rng() % train_prompts.size());
      ctl->totals = CycleTotals();
      generate(train_prompts[p]);
      if (updates_since_eval >= c.eval_every) run_validation();
      if (!logs.empty()) {
        store->AppendTrainLog(train_id, logs, evals);
        logs.clear();
        evals.clear();
      }
    }
    run_validation();
    if (!logs.empty() || !evals.empty()) {
      store->AppendTrainLog(train_id, logs, evals);
      logs.clear();
      evals.clear();
    }
    bar.Finish();
    weights = best;
    elapsed += (NowNanos() - start_ns) * 1e-9;
    LtdPolicyConfig written = cfg;
    written.training = {{"trainer", "specbed train ltd"},
                        {"settings", settings},
                        {"stage", si},
                        {"stage_name", stage.name},
                        {"ppo", PpoConfigToJson(ppo)}};
    written.evaluation = {{"validation", best_fig}};
    WriteLtdPolicy(out_dir + "/" + (is_size ? "size" : "depth"), written, weights);
    (is_size ? size_trained : depth_trained) = true;
    stage_summaries.push_back({{"stage", si},
                               {"name", stage.name},
                               {"steps", agent.steps_done()},
                               {"updates", agent.updates_done()},
                               {"best_validation", best_fig}});
    state["stages"] = stage_summaries;
    state["stages_done"] = si + 1;
    state["stage_in_progress"] = -1;
    state["global_update"] = global_update;
    state["elapsed_s"] = elapsed;
    WriteFileAtomically(state_path, state.dump(2));
    result.stages_done = static_cast<int64_t>(si + 1);
    if (verbose) {
      std::fprintf(stderr, "train ltd: stage %zu (%s) done: best validation %s\n", si,
                   stage.name.c_str(), best_fig.dump().c_str());
    }
  }
  result.stages_done = state.value("stages_done", int64_t{0});
  result.finished = result.stages_done == static_cast<int64_t>(stages.size());
  if (result.finished) {
    // Final figures on the validation prompts: static partner pair, each policy alone, both.
    ojson fin;
    fin["both"] = validate(true, true).ToJson();
    fin["size_only"] = validate(false, true).ToJson();
    fin["depth_only"] = validate(true, false).ToJson();
    fin["static_partner"] = validate(false, false).ToJson();
    fin["static_partner"]["rounds"] = heuristic_rounds;
    fin["static_partner"]["nodes"] = c.partner_nodes;
    ojson summary;
    summary["settings"] = settings;
    summary["stages"] = stage_summaries;
    summary["final_validation"] = fin;
    summary["tables"] = tables.ToJson();
    summary["train_seconds"] = elapsed;
    summary["note"] = c.timing == "measured"
                          ? "rewards are measured wall times: runs are not bitwise reproducible"
                          : "simulated rewards from tables.json: bitwise reproducible";
    WriteFileAtomically(out_dir + "/train_summary.json", summary.dump(2));
    store->FinishTrainRun(train_id, summary.dump());
    result.summary = summary;
  }
  return result;
}

}  // namespace specbed
