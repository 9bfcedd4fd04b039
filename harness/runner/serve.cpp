// The serve runner (see serve.h): config expansion, traces, the continuous-batching loop of one
// cell and the resumable run over every cell.
#include "harness/runner/serve.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <map>
#include <random>
#include <set>

#include "base/error.h"
#include "base/hash.h"
#include "base/json_read.h"
#include "base/names.h"
#include "base/timer.h"
#include "datasets/dataset.h"
#include "harness/engine/batch_engine.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/runner/runner.h"
#include "methods/method_registry.h"
#include "models/device.h"

namespace specbed {

namespace {

const std::set<std::string> kServeKeys = {
    "name",           "output",          "targets",     "dataset",     "methods",
    "concurrency",    "rates",           "max_running", "schedules",   "n_requests",
    "max_new_tokens", "temperature",     "seeds",       "dtype",       "device",
    "threads",        "batch_invariant", "warmup",      "batch_drafts"};

template <typename T>
std::vector<T> ListOf(const nlohmann::json& j, const char* key, std::vector<T> fallback,
                      const std::string& path) {
  if (!j.contains(key)) return fallback;
  const nlohmann::json& v = j[key];
  SPECBED_CHECK(v.is_array() && !v.empty(), path, ": \"", key, "\" must be a non-empty list");
  std::vector<T> out;
  for (const auto& e : v) {
    try {
      out.push_back(e.get<T>());
    } catch (const std::exception&) {
      Fail(path, ": \"", key, "\" entry ", e.dump(), " has the wrong type");
    }
  }
  return out;
}

// The methods of a serve config, knobs resolved; AR first when present.
std::vector<MethodSpec> ParseMethods(const nlohmann::json& j, const MethodRegistry& methods,
                                     const std::string& target, const std::string& path) {
  SPECBED_CHECK(j.contains("methods") && j["methods"].is_array() && !j["methods"].empty(), path,
                ": \"methods\" must be a non-empty list of names or {\"name\", \"knobs\"}");
  std::vector<MethodSpec> out;
  for (const auto& m : j["methods"]) {
    MethodSpec spec;
    if (m.is_string()) {
      spec.name = m.get<std::string>();
    } else {
      SPECBED_CHECK(m.is_object() && m.contains("name"), path, ": method entry ", m.dump(),
                    " must be a name or {\"name\": ..., \"knobs\": {...}}");
      spec.name = m["name"].get<std::string>();
      if (m.contains("knobs")) spec.knobs = m["knobs"];
    }
    SPECBED_CHECK(methods.Has(spec.name), path, ": unknown method \"", spec.name, "\"");
    spec.knobs = methods.ResolveKnobsFor(spec.name, spec.knobs, target);
    out.push_back(spec);
  }
  return out;
}

// Fills the settings every cell of the config shares.
ServeCell BaseCell(const nlohmann::json& j, const ServeOverrides& o, const std::string& path) {
  ServeCell base;
  SPECBED_CHECK(j.contains("dataset") && j["dataset"].is_object() && j["dataset"].contains("name"),
                path, ": \"dataset\" must be {\"name\": ..., \"limit\": N}");
  base.dataset.name = j["dataset"]["name"].get<std::string>();
  base.dataset.limit = j["dataset"].value("limit", int64_t{-1});
  base.n_requests = o.n_requests > 0 ? o.n_requests : j.value("n_requests", int64_t{32});
  base.max_new_tokens =
      o.max_new_tokens > 0 ? o.max_new_tokens : j.value("max_new_tokens", int64_t{64});
  base.temperature = j.value("temperature", 0.0);
  base.dtype = j.value("dtype", std::string("float32"));
  base.device = j.value("device", std::string("cpu"));
  base.threads = j.value("threads", int64_t{1});
  base.batch_invariant = j.value("batch_invariant", true);
  base.batch_drafts = j.value("batch_drafts", true);
  base.warmup = j.value("warmup", int64_t{1});
  SPECBED_CHECK(base.n_requests >= 1 && base.max_new_tokens >= 1 && base.threads >= 1 &&
                    base.warmup >= 0 && base.temperature >= 0,
                path,
                ": n_requests, max_new_tokens and threads must be >= 1, warmup and "
                "temperature >= 0");
  return base;
}

// The load points: closed loops at each concurrency, open loops at each rate.
std::vector<ServeCell> LoadPoints(const nlohmann::json& j, const ServeOverrides& o,
                                  const ServeCell& base, const std::string& path) {
  std::vector<ServeCell> out;
  const std::vector<int64_t> cs =
      !o.concurrency.empty() ? o.concurrency : ListOf<int64_t>(j, "concurrency", {}, path);
  for (int64_t c : cs) {
    SPECBED_CHECK(c >= 1, path, ": concurrency must be >= 1, got ", c);
    ServeCell cell = base;
    cell.mode = "closed";
    cell.concurrency = cell.max_running = c;
    out.push_back(cell);
  }
  for (double rate : ListOf<double>(j, "rates", {}, path)) {
    SPECBED_CHECK(rate > 0, path, ": rates must be > 0 requests/s, got ", rate);
    ServeCell cell = base;
    cell.mode = "open";
    cell.rate = rate;
    cell.max_running = j.value("max_running", int64_t{16});
    SPECBED_CHECK(cell.max_running >= 1, path, ": max_running must be >= 1");
    out.push_back(cell);
  }
  SPECBED_CHECK(!out.empty(), path,
                ": give \"concurrency\" (closed loop) and/or \"rates\" "
                "(open loop)");
  return out;
}

}  // namespace

nlohmann::json ServeCell::IdentityJson() const {
  nlohmann::json j = {{"target", target},
                      {"method", method.name},
                      {"knobs", method.knobs},
                      {"dataset", dataset.name},
                      {"limit", dataset.limit},
                      {"mode", mode},
                      {"concurrency", concurrency},
                      {"rate", rate},
                      {"max_running", max_running},
                      {"schedule", schedule},
                      {"n_requests", n_requests},
                      {"max_new_tokens", max_new_tokens},
                      {"temperature", temperature},
                      {"seed", seed},
                      {"dtype", dtype},
                      {"device", device},
                      {"threads", threads},
                      {"batch_invariant", batch_invariant}};
  // Named only when off, so that the cells stored before the knob keep their keys.
  if (!batch_drafts) j["batch_drafts"] = false;
  return j;
}

std::string ServeCell::Key() const {
  return HashString(IdentityJson().dump());
}

std::string ServeCell::Label() const {
  const std::string load = mode == "closed" ? StrCat("C=", concurrency) : StrCat("rate=", rate);
  return StrCat(target, " ", method.name, " ", load, " ", schedule.value("policy", "fixed"),
                " T=", temperature, " seed=", seed);
}

ServeConfig LoadServeConfig(const std::string& path, const MethodRegistry& methods,
                            const ServeOverrides& overrides) {
  ServeConfig config;
  const nlohmann::json j = ReadJsonFile(path);
  SPECBED_CHECK(j.is_object(), path, ": a serve config is a JSON object");
  for (const auto& [key, value] : j.items()) {
    SPECBED_CHECK(kServeKeys.count(key), path, ": unknown key \"", key, "\" (a serve config has ",
                  Join(std::vector<std::string>(kServeKeys.begin(), kServeKeys.end()), ", "), ")");
  }
  config.json = j;
  config.name = j.value("name", config.name);
  config.output = j.value("output", config.output);
  const ServeCell base = BaseCell(j, overrides, path);
  const std::vector<std::string> targets =
      !overrides.target.empty() ? std::vector<std::string>{overrides.target}
                                : ListOf<std::string>(j, "targets", {"stories260K-twin"}, path);
  const std::vector<nlohmann::json> schedules =
      ListOf<nlohmann::json>(j, "schedules", {{{"policy", "fixed"}}}, path);
  for (const nlohmann::json& s : schedules) ParseDraftSchedule(s, path);  // checked up front
  const std::vector<uint64_t> seeds = ListOf<uint64_t>(j, "seeds", {0}, path);
  for (const std::string& target : targets) {
    for (const MethodSpec& method : ParseMethods(j, methods, target, path)) {
      const bool speculative = methods.Info(method.name).traits.speculative;
      for (size_t s = 0; s < (speculative ? schedules.size() : 1); ++s) {
        for (ServeCell cell : LoadPoints(j, overrides, base, path)) {
          for (uint64_t seed : seeds) {
            cell.target = target;
            cell.method = method;
            cell.schedule = speculative ? schedules[s] : nlohmann::json{{"policy", "fixed"}};
            cell.seed = seed;
            config.cells.push_back(cell);
          }
        }
      }
    }
  }
  return config;
}

ServeTrace BuildServeTrace(const ServeCell& cell, int64_t n_prompts) {
  SPECBED_CHECK(n_prompts >= 1, "serve: the dataset has no prompts");
  ServeTrace trace;
  std::mt19937_64 rng(cell.seed ^ 0x7365727665ULL);  // "serve"
  std::vector<int64_t> order(n_prompts);
  for (int64_t i = 0; i < n_prompts; ++i) order[i] = i;
  std::shuffle(order.begin(), order.end(), rng);
  std::exponential_distribution<double> gap(cell.mode == "open" ? cell.rate : 1.0);
  double t = 0;
  for (int64_t r = 0; r < cell.n_requests; ++r) {
    trace.prompt_index.push_back(order[r % n_prompts]);
    trace.seeds.push_back(PromptSeed(cell.seed, r, 0));
    if (cell.mode == "open") {
      trace.arrival_ms.push_back(t);
      t += gap(rng) * 1000.0;
    }
  }
  return trace;
}

namespace {

// One cell's continuous-batching loop on a measured clock (see serve.h).
class CellRun {
 public:
  CellRun(const ServeCell& cell, const LoadedTarget& target, BatchEngine& engine,
          const std::vector<std::vector<int32_t>>& prompts, const ServeTrace& trace)
      : cell_(cell), target_(target), engine_(engine), prompts_(prompts), trace_(trace) {
    requests_.resize(cell.n_requests);
    emits_.resize(cell.n_requests);
    for (int64_t r = 0; r < cell.n_requests; ++r) requests_[r].request_index = r;
  }

  void Run() {
    const int64_t n = cell_.n_requests;
    if (cell_.mode == "closed") {
      for (; next_ < std::min(n, cell_.concurrency); ++next_) queue_.push_back(next_);
    }
    while (done_ < n) {
      ServeStepRecord step;  // this boundary's admissions, then the step
      Arrivals();
      AdmitQueued(step);
      if (engine_.running() == 0) {
        if (cell_.mode == "open" && queue_.empty() && next_ < n) {
          now_ms_ = std::max(now_ms_, trace_.arrival_ms[next_]);  // idle until the next arrival
        }
        continue;
      }
      RunStep(step);
    }
  }
  std::vector<ServeRequestRecord>& requests() { return requests_; }
  std::vector<ServeStepRecord>& steps() { return steps_; }
  double makespan_ms() const { return now_ms_; }

 private:
  GenerationConfig ConfigOf(int64_t r) const {
    GenerationConfig g;
    g.stop = StopConfigFor(target_, cell_.max_new_tokens, {});
    g.sampling.temperature = cell_.temperature;
    g.seed = trace_.seeds[r];
    return g;
  }
  void Arrivals() {
    if (cell_.mode != "open") return;
    for (; next_ < cell_.n_requests && trace_.arrival_ms[next_] <= now_ms_; ++next_) {
      requests_[next_].arrival_ms = trace_.arrival_ms[next_];
      queue_.push_back(next_);
    }
  }
  void AdmitQueued(ServeStepRecord& step) {
    while (!queue_.empty() && engine_.free_slots() > 0) {
      const int64_t r = queue_.front();
      queue_.pop_front();
      ServeRequestRecord& req = requests_[r];
      req.admitted_ms = now_ms_;
      const std::vector<int32_t>& prompt = prompts_[trace_.prompt_index[r]];
      req.n_prompt_tokens = static_cast<int64_t>(prompt.size());
      const int64_t t0 = DeviceNowNanos(target_.model->device());
      engine_.Admit(r, prompt, ConfigOf(r));
      const double dt = (DeviceNowNanos(target_.model->device()) - t0) * 1e-6;
      now_ms_ += dt;
      req.first_token_ms = now_ms_;
      ++step.n_admitted;
      step.t_prefill_ms += dt;
      Collect();
    }
  }
  void RunStep(ServeStepRecord& step) {
    step.step_index = static_cast<int64_t>(steps_.size());
    step.start_ms = now_ms_;
    const int64_t t0 = DeviceNowNanos(target_.model->device());
    const BatchStepReport report = engine_.Step();
    now_ms_ += (DeviceNowNanos(target_.model->device()) - t0) * 1e-6;
    step.batch_size = report.batch_size;
    step.n_verify_tokens = report.n_verify_tokens;
    step.n_drafted = report.n_drafted;
    step.n_accepted = report.n_accepted;
    step.n_emitted = report.n_emitted;
    step.k_chosen = report.k_chosen;
    step.t_draft_ms = report.t_draft_us * 1e-3;
    step.t_verify_ms = report.t_verify_us * 1e-3;
    step.t_other_ms = report.t_other_us * 1e-3;
    step.t_adapt_ms = report.t_adapt_us * 1e-3;
    for (const auto& [id, n] : report.emitted) {
      if (n > 0) emits_[id].push_back({now_ms_, n});
      requests_[id].t_adapt_ms += step.t_adapt_ms;  // an update stalls every co-running request
    }
    steps_.push_back(step);
    Collect();
  }
  // Finished requests' records; in closed loop each frees its user, whose next request arrives.
  void Collect() {
    for (FinishedRequest& f : engine_.TakeFinished()) {
      ServeRequestRecord& req = requests_[f.id];
      const GenerationResult& gen = f.result.generation;
      req.prompt_id = StrCat(trace_.prompt_index[f.id]);
      req.n_output_tokens = static_cast<int64_t>(gen.tokens.size());
      req.finish_ms = emits_[f.id].empty() ? req.first_token_ms : emits_[f.id].back().first;
      nlohmann::json emits = nlohmann::json::array();
      for (const auto& [t, n] : emits_[f.id]) emits.push_back({t, n});
      req.emits_json = emits.dump();
      req.n_steps = static_cast<int64_t>(f.result.steps.size());
      for (const StepStats& s : f.result.steps) {
        req.n_drafted += s.n_drafted;
        req.n_accepted += s.n_accepted;
        req.n_drafts += s.n_drafted > 0 ? 1 : 0;
      }
      if (req.n_steps == 0) req.n_steps = gen.n_steps;  // AR: one step per token after the first
      req.stop_reason = StopReasonName(gen.stop_reason);
      req.output_hash = HashTokens(gen.tokens);
      req.output_ids_json = nlohmann::json(gen.tokens).dump();
      ++done_;
      if (cell_.mode == "closed" && next_ < cell_.n_requests) {
        requests_[next_].arrival_ms = now_ms_;
        queue_.push_back(next_++);
      }
    }
  }

  const ServeCell& cell_;
  const LoadedTarget& target_;
  BatchEngine& engine_;
  const std::vector<std::vector<int32_t>>& prompts_;
  const ServeTrace& trace_;
  std::vector<ServeRequestRecord> requests_;
  std::vector<std::vector<std::pair<double, int64_t>>> emits_;
  std::vector<ServeStepRecord> steps_;
  std::deque<int64_t> queue_;  // arrived, waiting for a slot
  int64_t next_ = 0, done_ = 0;
  double now_ms_ = 0;
};

// Untimed requests through the engine before a cell (every slot's decoder built, buffers grown):
// `rounds` batches of the first prompts, 8 tokens each, adapters off.
void WarmUp(BatchEngine& engine, const LoadedTarget& target,
            const std::vector<std::vector<int32_t>>& prompts, int64_t slots, int64_t rounds) {
  for (int64_t round = 0; round < rounds; ++round) {
    for (int64_t i = 0; i < slots && engine.free_slots() > 0; ++i) {
      GenerationConfig g;
      g.stop = StopConfigFor(target, 8, {});
      g.adapt = false;
      engine.Admit(-1 - i, prompts[i % prompts.size()], g);
    }
    while (engine.running() > 0) engine.Step();
    engine.TakeFinished();
  }
}

}  // namespace

void ValidateServe(const ServeConfig& config, const MethodRegistry& methods) {
  for (const ServeCell& cell : config.cells) {
    const MethodTraits& traits = methods.Info(cell.method.name).traits;
    SPECBED_CHECK(traits.supports_batch, "serve: method ", cell.method.name,
                  " runs its own decode loop (supports_batch = false: its gain is hardware one "
                  "request leaves idle, which a batch fills); measure it at concurrency 1 with "
                  "`specbed run`, not in a serve config");
    ParseDraftSchedule(cell.schedule, "serve cell " + cell.Label());
    LoadDataset(cell.dataset.name, {1, {}});
  }
}

namespace {

// What the store keeps of a cell besides its rows.
ServeCellRecord CellRecord(const ServeCell& cell, const MethodRegistry& methods, double makespan_ms,
                           double wall_s) {
  ServeCellRecord r;
  r.cell_key = cell.Key();
  r.target = cell.target;
  r.method = cell.method.name;
  r.method_knobs_json = cell.method.knobs.dump();
  r.dataset = cell.dataset.name;
  r.mode = cell.mode;
  r.concurrency = cell.concurrency;
  r.rate = cell.rate;
  r.max_running = cell.max_running;
  r.schedule = cell.schedule.value("policy", "fixed");
  r.schedule_json = cell.schedule.dump();
  r.n_requests = cell.n_requests;
  r.max_new_tokens = cell.max_new_tokens;
  r.temperature = cell.temperature;
  r.seed = cell.seed;
  r.dtype = cell.dtype;
  r.device = cell.device;
  r.threads = cell.threads;
  r.batch_invariant = cell.batch_invariant ? 1 : 0;
  r.config_json = cell.IdentityJson().dump();
  r.method_traits_json = methods.Info(cell.method.name).traits.ToJson().dump();
  r.makespan_ms = makespan_ms;
  r.wall_s = wall_s;
  return r;
}

}  // namespace

ServeSummary RunServe(const ServeConfig& config, ResultsStore& store, const RunInfo& run_info,
                      bool show_progress) {
  MethodRegistry methods;
  RegisterBuiltinMethods(methods);
  ValidateServe(config, methods);
  ServeSummary summary;
  summary.cells_total = static_cast<int64_t>(config.cells.size());
  const int64_t t0 = NowNanos();
  std::map<std::string, LoadedTarget> models;
  auto load = [&](const std::string& name, const ServeCell& c) -> LoadedTarget& {
    const std::string key = name + "|" + c.dtype + "|" + c.device;
    auto it = models.find(key);
    if (it == models.end()) {
      it = models
               .emplace(key, LoadModel(name, ParseDtype(c.dtype), "",
                                       ParseDevice(c.device, "serve target " + name)))
               .first;
    }
    return it->second;
  };
  RunInfo info = run_info;
  info.config_json = config.json.dump();
  const int64_t run_id = store.BeginRun(info);
  for (const ServeCell& cell : config.cells) {
    if (store.HasServeCell(cell.Key())) {
      ++summary.cells_skipped;
      continue;
    }
    if (show_progress) std::fprintf(stderr, "specbed serve: %s\n", cell.Label().c_str());
    at::set_num_threads(static_cast<int>(cell.threads));
    const int64_t c0 = NowNanos();
    LoadedTarget& target = load(cell.target, cell);
    DatasetFilter filter;
    filter.limit = cell.dataset.limit;
    std::vector<std::vector<int32_t>> prompts;
    for (const Prompt& p : LoadDataset(cell.dataset.name, filter)) {
      prompts.push_back(BuildPromptIds(target, {{"user", p.turns[0]}}));
    }
    SPECBED_CHECK(!prompts.empty(), "serve: dataset ", cell.dataset.name, " has no prompts");
    MethodContext context;
    context.target = &target;
    context.dtype = ParseDtype(cell.dtype);
    context.device = target.model->device();
    context.load_model = [&](const std::string& name) -> LoadedTarget& { return load(name, cell); };
    auto make = [&] { return methods.Build(cell.method.name, context, cell.method.knobs); };
    BatchOptions options;
    options.max_running = cell.max_running;
    options.batch_invariant = cell.batch_invariant;
    options.batch_drafts = cell.batch_drafts;
    int64_t longest = 0;
    for (const auto& p : prompts) longest = std::max<int64_t>(longest, p.size());
    {
      const std::unique_ptr<Decoder> probe = make();
      options.method_nodes = probe->MaxDraftNodes();
      options.cache_len = CacheLengthFor(*target.model, longest, cell.max_new_tokens, *probe);
    }
    BatchEngine engine(*target.model, make, options,
                       ParseDraftSchedule(cell.schedule, cell.Label()));
    WarmUp(engine, target, prompts, cell.max_running, cell.warmup);
    const ServeTrace trace = BuildServeTrace(cell, static_cast<int64_t>(prompts.size()));
    CellRun run(cell, target, engine, prompts, trace);
    run.Run();
    store.AddServeCell(run_id,
                       CellRecord(cell, methods, run.makespan_ms(), (NowNanos() - c0) * 1e-9),
                       run.requests(), run.steps());
    ++summary.cells_run;
  }
  summary.wall_s = (NowNanos() - t0) * 1e-9;
  return summary;
}

}  // namespace specbed
