// Case runner (see runner.h).
#include "harness/runner/runner.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "base/error.h"
#include "base/hash.h"
#include "base/json_read.h"
#include "base/mapped_file.h"
#include "base/progress.h"
#include "base/timer.h"
#include "datasets/dataset.h"
#include "harness/engine/machine_bench.h"
#include "harness/engine/speculative_decoder.h"
#include "methods/method_registry.h"
#include "models/checkpoint/llama2c_checkpoint.h"
#include "models/device.h"
#include "models/gemv.h"
#include "models/llama_config.h"
#include "models/op_trace.h"

namespace specbed {

std::vector<int32_t> BuildPromptIds(const LoadedTarget& target,
                                    const std::vector<ChatMessage>& messages) {
  SPECBED_CHECK(target.tokenizer != nullptr, "model '", target.spec.name,
                "' has no tokenizer (looked in '", target.spec.path,
                "' for tokenizer.json, vocab.json + merges.txt, tokenizer.bin); it can only be "
                "benchmarked (specbed bench)");
  const std::string text = ApplyChatTemplate(target.chat_template, messages, true);
  EncodeOptions options;
  options.add_bos = !ChatTemplateIncludesBos(target.chat_template);
  options.parse_special = true;
  std::vector<int32_t> ids = target.tokenizer->Encode(text, options);
  if (ids.empty() && target.tokenizer->bos_id() >= 0) ids.push_back(target.tokenizer->bos_id());
  return ids;
}

StopConfig StopConfigFor(const LoadedTarget& target, int64_t max_new_tokens,
                         const std::vector<std::string>& stop_strings) {
  StopConfig stop;
  stop.max_new_tokens = max_new_tokens;
  if (target.tokenizer) stop.eos_ids = target.tokenizer->eos_ids();
  for (int64_t e : target.model->config().eos_token_ids) {
    const auto id = static_cast<int32_t>(e);
    if (std::find(stop.eos_ids.begin(), stop.eos_ids.end(), id) == stop.eos_ids.end()) {
      stop.eos_ids.push_back(id);
    }
  }
  stop.stop_strings = stop_strings;
  return stop;
}

uint64_t PromptSeed(uint64_t case_seed, int64_t prompt_index, int32_t turn) {
  // splitmix64 over the three inputs.
  uint64_t z = case_seed * 0x9e3779b97f4a7c15ULL +
               static_cast<uint64_t>(prompt_index) * 0xbf58476d1ce4e5b9ULL +
               static_cast<uint64_t>(turn) * 0x94d049bb133111ebULL + 0x2545f4914f6cdd1dULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Runner::Runner(ResultsStore& store, RunnerOptions options)
    : store_(store), options_(std::move(options)) {}

double Runner::MemoryBandwidthGbs(int threads, const std::string& device) {
  const at::Device d = ParseDevice(device, "case");
  const std::string key = d.is_cpu() ? "cpu|" + std::to_string(threads) : device;
  auto it = bandwidth_gb_s_.find(key);
  if (it == bandwidth_gb_s_.end()) {
    // CPU: 3 x 64 MiB arrays, best of 3: ~0.3 s, 2x the last-level cache of the machines here.
    // A device: 2 x 1 GiB, best of 10 (far above any GPU's L2).
    const double gb_s = d.is_cpu()
                            ? MeasureMemoryBandwidth(threads, int64_t{64} << 20, 3).triad_gb_s
                            : MeasureDeviceCopyBandwidth(d);
    it = bandwidth_gb_s_.emplace(key, gb_s).first;
  }
  return it->second;
}

LoadedTarget& Runner::Target(const std::string& name, const std::string& dtype,
                             const std::string& chat_template, const std::string& device) {
  const std::string key = name + "|" + dtype + "|" + chat_template + "|" + device;
  auto it = targets_.find(key);
  if (it == targets_.end()) {
    const at::Device d = ParseDevice(device, "model '" + name + "'");
    it = targets_.emplace(key, LoadModel(name, ParseDtype(dtype), chat_template, d)).first;
  }
  return it->second;
}

namespace {

// "[v0,v1,...]" with each value printed by `format` (printf style).
template <typename T>
std::string JsonArray(const std::vector<T>& values, const char* format) {
  std::string out = "[";
  char buf[32];
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    std::snprintf(buf, sizeof(buf), format, values[i]);
    out += buf;
  }
  return out + "]";
}

std::string IdsJson(const std::vector<int32_t>& ids) {
  return JsonArray(ids, "%d");
}

// Empty (not "[]") when no margins were recorded: the column's "not recorded" value.
std::string MarginsJson(const std::vector<float>& margins) {
  if (margins.empty()) return "";
  return JsonArray(margins, "%.6g");
}

constexpr const char* kArMethodName = "ar";

// One paired AR generation of `ids` with the answer's seed.
void RunPairedAr(Decoder& ar, const std::vector<int32_t>& ids, GenerationConfig config,
                 uint64_t seed, KvCache& cache, DecodeResult& result) {
  config.seed = seed;
  ar.Generate(ids, config, cache, result);
}

}  // namespace

RunnerSummary Runner::Run(const RunConfig& config) {
  return Run(SweepFromRunConfig(config));
}

RunnerSummary Runner::Run(const SweepConfig& config) {
  MethodRegistry methods;
  RegisterBuiltinMethods(methods);
  SweepExpansion expansion = ExpandSweep(config, methods);
  return RunCases(std::move(expansion.cases), config.base.name, config.base.warmup,
                  config.ToJson());
}

namespace {

// The context length of a target from its config alone (no weights loaded); -1 when it cannot be
// read without building something (a cost twin not built yet).
int64_t ContextLengthOf(const ModelSpec& spec) {
  if (spec.format == "random") return spec.random_config.max_seq_len;
  if (spec.format == "llama2c") return ReadLlama2cConfig(spec.path).max_seq_len;
  const std::string config = spec.path + "/config.json";
  if (spec.format != "hf" || !PathExists(config)) return -1;
  return ParseHfConfig(ReadJsonFile(config), config).max_seq_len;
}

// Step 1 of RunCases: everything is validated before anything runs — knobs resolved ("auto"
// drafters for the case's target), names and the models they name, datasets loaded. Returns the
// prompts of each case.
std::vector<std::vector<Prompt>> ValidateCases(std::vector<CaseConfig>& cases,
                                               const MethodRegistry& methods) {
  std::vector<std::vector<Prompt>> prompts(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    CaseConfig& c = cases[i];
    c.method.knobs = methods.ResolveKnobsFor(c.method.name, c.method.knobs, c.target);
    SPECBED_CHECK(c.batch_size == 1, "case ", c.Label(), ": batch_size ", c.batch_size,
                  " needs batched decoding, which the runner does not implement yet (no method "
                  "has supports_batch)");
    CheckDeviceAvailable(ParseDevice(c.device, "case " + c.Label()), "case " + c.Label());
    const int64_t context = ContextLengthOf(ResolveModel(c.target));
    SPECBED_CHECK(context < 0 || c.max_new_tokens < context,
                  "max_new_tokens (-n or the config's "
                  "\"max_new_tokens\") is ",
                  c.max_new_tokens, ", but target '", c.target, "' has a context of ", context,
                  " tokens, which must hold the prompt and the "
                  "answer: use at most ",
                  context - 1);
    const MethodInfo& checked = methods.Info(c.method.name);
    if (checked.validate) {
      checked.validate(c.method.knobs);
    } else if (!checked.traits.drafter_knob.empty()) {
      ResolveModel(c.method.knobs.at(checked.traits.drafter_knob).get<std::string>());
    }
    DatasetFilter filter;
    filter.limit = c.dataset.limit;
    filter.categories = c.dataset.categories;
    prompts[i] = LoadDataset(c.dataset.name, filter);
  }
  return prompts;
}

// The sampling and stop settings of a case's generations.
GenerationConfig GenerationConfigFor(const CaseConfig& c, const LoadedTarget& target,
                                     const MethodInfo& method_info) {
  GenerationConfig gen;
  gen.sampling.temperature = c.temperature;
  gen.sampling.top_p = c.top_p;
  gen.sampling.top_k = c.top_k;
  ValidateSamplingParams(gen.sampling);
  gen.stop = StopConfigFor(target, c.max_new_tokens, c.stop_strings);
  // AR cases record the target's top-2 margins so divergences of other methods can be judged.
  gen.record_margins = !method_info.traits.speculative;
  gen.synthetic_acceptance = c.synthetic_acceptance;
  return gen;
}

// The conversation so far (system prompt, then alternating user / assistant turns).
std::vector<ChatMessage> StartConversation(const CaseConfig& c) {
  std::vector<ChatMessage> messages;
  if (!c.system_prompt.empty()) messages.push_back({"system", c.system_prompt});
  return messages;
}

SampleRecord ToSampleRecord(const Prompt& prompt, size_t turn, size_t n_prompt_tokens,
                            const GenerationResult& r) {
  SampleRecord s;
  s.prompt_id = prompt.id;
  s.turn = static_cast<int32_t>(turn);
  s.category = prompt.category;
  s.n_prompt_tokens = static_cast<int64_t>(n_prompt_tokens);
  s.n_output_tokens = static_cast<int64_t>(r.tokens.size());
  s.prefill_ms = r.prefill_ms;
  s.decode_ms = r.decode_ms;
  s.n_steps = r.n_steps;
  s.stop_reason = StopReasonName(r.stop_reason);
  s.output_hash = HashTokens(r.tokens);
  s.output_text = r.text;
  s.output_ids_json = IdsJson(r.tokens);
  s.token_margins_json = MarginsJson(r.token_margins);
  return s;
}

void AppendStepRecords(const Prompt& prompt, size_t turn, const std::vector<StepStats>& stats,
                       std::vector<StepRecord>& steps) {
  for (size_t k = 0; k < stats.size(); ++k) {
    StepRecord step;
    static_cast<StepCounters&>(step) = stats[k];
    step.prompt_id = prompt.id;
    step.turn = static_cast<int32_t>(turn);
    step.step_idx = static_cast<int64_t>(k);
    steps.push_back(std::move(step));
  }
}

// The case row as stored: the resolved config, the method's traits and drafter, and what the
// target costs (a cost twin's label, the weight bytes a decode step reads) with the machine's
// measured memory bandwidth, from which reports state AR's roofline fraction.
// What the target's captured steps (kernels/step_graph.h) did between two snapshots.
nlohmann::json GraphStatsJson(const GraphStats& from, const GraphStats& to) {
  return {{"eager_warmups", to.eager_warmups - from.eager_warmups},
          {"captures", to.captures - from.captures},
          {"replays", to.replays - from.replays},
          {"capture_s", to.capture_s - from.capture_s}};
}

// The target's engine settings, and its captured steps in the warm-up and in the timed prompts
// (a capture inside a timed prompt is inside its decode time: nonzero timed captures say so).
struct CaseGraphStats {
  GraphStats start, after_warmup, end;
};

nlohmann::json EngineJson(const LlamaModel& model, const CaseGraphStats& graphs) {
  return {{"forward_path", ForwardPathName(model.forward_path())},
          {"graphs", GraphModeName(model.graph_mode())},
          {"count_ops", ResolveCountOps() ? "on" : "off"},
          {"graphs_warmup", GraphStatsJson(graphs.start, graphs.after_warmup)},
          {"graphs_timed", GraphStatsJson(graphs.after_warmup, graphs.end)}};
}

CaseRecord BuildCaseRecord(const CaseConfig& c, const MethodTraits& traits, const LlamaModel& model,
                           double bandwidth_gb_s, const CaseGraphStats& graphs) {
  CaseRecord record;
  record.case_key = c.Key();
  record.target = c.target;
  record.method = c.method.name;
  record.method_knobs_json = c.method.knobs.dump();
  record.method_traits_json = traits.ToJson().dump();
  if (!traits.drafter_knob.empty()) record.drafter = c.method.knobs.value(traits.drafter_knob, "");
  record.dataset = c.dataset.name;
  std::string cats;
  for (size_t k = 0; k < c.dataset.categories.size(); ++k)
    cats += (k ? "," : "") + c.dataset.categories[k];
  record.categories = cats;
  record.prompt_limit = c.dataset.limit;
  record.temperature = c.temperature;
  record.top_p = c.top_p;
  record.top_k = c.top_k;
  record.seed = c.seed;
  record.max_new_tokens = c.max_new_tokens;
  record.batch_size = c.batch_size;
  record.threads = c.threads;
  record.dtype = c.dtype;
  record.device = c.device;
  nlohmann::json case_json = c.ToJson();
  case_json["target_info"] = {{"label", model.config().twin_label},
                              {"weight_bytes", DecodeWeightBytes(model)},
                              {"parameters", model.config().ParameterCount()}};
  case_json["machine"] = {
      {"memory_bandwidth_gb_s", bandwidth_gb_s},
      {"memory_bandwidth_kind", model.device().is_cpu() ? "stream_triad" : "device_copy"},
      {"blas_core", BlasCoreName()}};
  if (model.device().is_cpu() && model.forward_path() == ForwardPath::kRowKernels) {
    // The CPU row kernels' GEMV (models/gemv.h) and how much of the weights sit in huge pages.
    case_json["machine"]["gemv_kernel"] = GemvKernelName(model.dtype());
    case_json["machine"]["weight_huge_page_bytes"] =
        model.weight_arena().bytes > 0 ? model.weight_arena().huge_page_bytes : -1;
  }
  case_json["engine"] = EngineJson(model, graphs);
  record.config_json = case_json.dump();
  record.timing_mode = c.timing;
  return record;
}

// The method's traits as built for a case's knobs: the decoder's sampling rule.
MethodTraits BuiltTraits(const MethodInfo& info, const Decoder& decoder) {
  MethodTraits traits = info.traits;
  traits.sampling_verifier = decoder.SamplingVerifier();
  return traits;
}

// Progress labels: "case 3/12" is followed by target, method and only the knobs that differ
// between the cases of that method in this run (CaseConfig::Label has every knob, so a narrow
// terminal cut the line inside the knob JSON, hiding the knob that tells cases apart).
std::vector<std::string> ProgressLabels(const std::vector<CaseConfig>& cases) {
  std::map<std::string, std::map<std::string, std::set<std::string>>> values;  // method -> key
  for (const CaseConfig& c : cases) {
    for (auto it = c.method.knobs.begin(); it != c.method.knobs.end(); ++it) {
      values[c.method.name][it.key()];
    }
  }
  for (const CaseConfig& c : cases) {
    for (auto& [key, seen] : values[c.method.name]) {
      seen.insert(c.method.knobs.contains(key) ? c.method.knobs[key].dump() : "null");
    }
  }
  std::vector<std::string> labels;
  for (const CaseConfig& c : cases) {
    std::string label = c.target + " " + c.method.name;
    for (const auto& [key, seen] : values[c.method.name]) {
      if (seen.size() > 1 && c.method.knobs.contains(key)) {
        const nlohmann::json& v = c.method.knobs[key];
        label += " " + key + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
      }
    }
    // The rest as CaseConfig::Label writes it (every field but the knobs).
    std::ostringstream rest;
    rest << " " << c.dataset.name << " T=" << c.temperature << " seed=" << c.seed;
    if (c.batch_size != 1) rest << " batch=" << c.batch_size;
    if (c.repeat != 0) rest << " repeat=" << c.repeat;
    if (!c.synthetic_acceptance.empty()) rest << " SYNTHETIC";
    if (c.timing == kTimingPaired) rest << " paired";
    if (!c.shard.empty()) rest << " shard=" << c.shard;
    if (c.device != "cpu") rest << " device=" << c.device;
    labels.push_back(label + rest.str());
  }
  return labels;
}

int64_t TurnsOf(const std::vector<Prompt>& prompts) {
  int64_t turns = 0;
  for (const Prompt& p : prompts) turns += static_cast<int64_t>(p.turns.size());
  return turns;
}

// The progress ETA from measured case costs: seconds per turn of each (target, method, knobs)
// measured in this run (e.g. at T = 0 before its T = 1 case), else the mean over the cases of the
// same method, else over the measured cases of its kind (AR / speculative: AR turns are the
// cheapest, and a paired speculative turn runs AR too). Turns of different methods cost very
// different times, so a units/s ETA underestimates while the cheap AR cases run first.
class CaseCostModel {
 public:
  void Record(const CaseConfig& c, int64_t turns, double seconds) {
    if (turns <= 0) return;
    const double per_turn = seconds / static_cast<double>(turns);
    by_config_[ConfigKey(c)] = per_turn;
    auto& m = by_method_[c.method.name];
    m.first += per_turn, m.second += 1;
    auto& kind = by_kind_[c.IsArBaseline()];
    kind.first += per_turn, kind.second += 1;
    all_.first += per_turn, all_.second += 1;
  }
  // Seconds left for cases todo[from..] (-1 before any case was measured).
  double RemainingSeconds(const std::vector<CaseConfig>& cases,
                          const std::vector<std::vector<Prompt>>& prompts,
                          const std::vector<size_t>& todo, size_t from) const {
    if (all_.second == 0) return -1;
    double total = 0;
    for (size_t k = from; k < todo.size(); ++k) {
      const CaseConfig& c = cases[todo[k]];
      double per_turn = all_.first / all_.second;
      const auto kind = by_kind_.find(c.IsArBaseline());
      if (kind != by_kind_.end()) per_turn = kind->second.first / kind->second.second;
      const auto exact = by_config_.find(ConfigKey(c));
      const auto method = by_method_.find(c.method.name);
      if (exact != by_config_.end()) {
        per_turn = exact->second;
      } else if (method != by_method_.end()) {
        per_turn = method->second.first / method->second.second;
      }
      total += per_turn * static_cast<double>(TurnsOf(prompts[todo[k]]));
    }
    return total;
  }

 private:
  static std::string ConfigKey(const CaseConfig& c) {
    return c.target + "|" + c.method.name + "|" + c.method.knobs.dump() + "|" + c.timing;
  }
  std::map<std::string, double> by_config_;
  std::map<std::string, std::pair<double, double>> by_method_;  // sum, count
  std::map<bool, std::pair<double, double>> by_kind_;           // AR or not -> sum, count
  std::pair<double, double> all_{0, 0};
};

}  // namespace

void ValidateRunCases(std::vector<CaseConfig> cases) {
  MethodRegistry methods;
  RegisterBuiltinMethods(methods);
  ValidateCases(cases, methods);
}

RunnerSummary Runner::RunCases(std::vector<CaseConfig> cases, const std::string& name,
                               int64_t warmup, const nlohmann::json& config_json) {
  MethodRegistry methods;
  RegisterBuiltinMethods(methods);
  const std::vector<std::vector<Prompt>> prompts = ValidateCases(cases, methods);
  RunnerSummary summary;
  summary.cases_total = static_cast<int64_t>(cases.size());
  const int64_t t_start = NowMicros();

  // Step 2: skip what the store already holds (resume).
  std::vector<size_t> todo;
  int64_t total_turns = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (store_.HasCompletedCase(cases[i].Key())) {
      ++summary.cases_skipped;
      continue;
    }
    todo.push_back(i);
    for (const auto& p : prompts[i]) total_turns += static_cast<int64_t>(p.turns.size());
  }
  if (summary.cases_skipped > 0) {
    std::fprintf(stderr, "specbed: %lld of %lld cases already complete in %s; skipping them\n",
                 static_cast<long long>(summary.cases_skipped),
                 static_cast<long long>(summary.cases_total), store_.path().c_str());
  }
  if (todo.empty()) return summary;

  // Step 3: one run row, then every pending case, each written in one transaction.
  RunInfo run_info = options_.run_info;
  run_info.config_json = config_json.dump();
  const int64_t run_id = store_.BeginRun(run_info);
  std::unique_ptr<ProgressBar> progress;
  if (options_.show_progress) progress = std::make_unique<ProgressBar>(name, total_turns, "turn");
  const std::vector<std::string> labels = ProgressLabels(cases);
  CaseCostModel costs;
  for (size_t ti = 0; ti < todo.size(); ++ti) {
    const size_t ci = todo[ti];
    const int64_t case_start_us = NowMicros();
    if (progress) {
      const double eta_s = costs.RemainingSeconds(cases, prompts, todo, ti);
      progress->set_eta_deadline_us(eta_s < 0 ? -1
                                              : case_start_us + static_cast<int64_t>(eta_s * 1e6));
    }
    // "case 3/12 <label>": cases done (including those complete before) / all cases.
    const std::string note = "case " + std::to_string(summary.cases_skipped + ti + 1) + "/" +
                             std::to_string(summary.cases_total) + " " + labels[ci];
    RunCase(methods, cases[ci], prompts[ci], warmup, run_id, note, progress.get());
    costs.Record(cases[ci], TurnsOf(prompts[ci]), (NowMicros() - case_start_us) * 1e-6);
    ++summary.cases_run;
  }
  if (progress) progress->Finish();
  summary.wall_s = (NowMicros() - t_start) * 1e-6;
  return summary;
}

namespace {

// Warmup: `warmup` full generations of the first prompt's first turn by the method (and by the
// paired AR when there is one), discarded. `cache_for(prompt_len)` gives a cache large enough.
// The paired AR run's figures on the method's sample.
void SetPairedAr(const GenerationResult& ar, bool ar_first, SampleRecord& s) {
  s.paired_ar_decode_ms = ar.decode_ms;
  s.paired_ar_prefill_ms = ar.prefill_ms;
  s.paired_ar_output_tokens = static_cast<int64_t>(ar.tokens.size());
  s.paired_ar_first = ar_first ? 1 : 0;
}

// The warm-up generations of the first prompt. The cache is sized for the longest first turn of
// the case from the start: captured steps (kernels/step_graph.h) bake in its address, so a cache
// remade for a longer prompt would be recaptured inside the timed prompts.
void RunWarmup(const CaseConfig& c, const LoadedTarget& target, const std::vector<Prompt>& prompts,
               int64_t warmup, const GenerationConfig& gen, Decoder& decoder, Decoder* paired_ar,
               const std::function<KvCache&(size_t)>& cache_for, DecodeResult& result,
               DecodeResult& paired_result) {
  auto first_turn_ids = [&](const Prompt& prompt) {
    std::vector<ChatMessage> messages = StartConversation(c);
    messages.push_back({"user", prompt.turns[0]});
    return BuildPromptIds(target, messages);
  };
  const auto ids = first_turn_ids(prompts[0]);
  size_t longest = ids.size();
  for (const Prompt& prompt : prompts) longest = std::max(longest, first_turn_ids(prompt).size());
  for (int64_t w = 0; w < warmup; ++w) {
    KvCache& cache = cache_for(longest);
    GenerationConfig warm = gen;
    warm.seed = PromptSeed(c.seed, -1, static_cast<int32_t>(w));
    warm.adapt = false;  // online adapters learn from the measured requests only
    decoder.Generate(ids, warm, cache, result);
    if (paired_ar) {
      warm.record_margins = false;
      paired_ar->Generate(ids, warm, cache, paired_result);
    }
  }
}

}  // namespace

MethodContext Runner::ContextFor(const CaseConfig& c, LoadedTarget& target) {
  MethodContext context;
  context.target = &target;
  context.dtype = ParseDtype(c.dtype);
  context.device = target.model->device();
  context.load_model = [this, c](const std::string& name) -> LoadedTarget& {
    return Target(name, c.dtype, "", c.device);
  };
  return context;
}

// Paired timing: AR on the same prompt ids, seed and threads, timed back to back with every
// answer (the order alternates by answer index), so a shared machine's drift hits both.
std::unique_ptr<Decoder> PairedArDecoder(const MethodRegistry& methods, MethodContext& context,
                                         bool paired) {
  if (!paired) return nullptr;
  return methods.Build(kArMethodName, context,
                       methods.ResolveKnobs(kArMethodName, nlohmann::json::object()));
}

void Runner::RunCase(const MethodRegistry& methods, const CaseConfig& c,
                     const std::vector<Prompt>& prompts, int64_t warmup, int64_t run_id,
                     const std::string& note, ProgressBar* progress) {
  at::set_num_threads(static_cast<int>(c.threads));
  LoadedTarget& target = Target(c.target, c.dtype, c.chat_template, c.device);
  LlamaModel& model = *target.model;
  const MethodInfo& method_info = methods.Info(c.method.name);
  MethodContext method_context = ContextFor(c, target);
  std::unique_ptr<Decoder> decoder = methods.Build(c.method.name, method_context, c.method.knobs);
  const bool paired = c.timing == kTimingPaired;
  std::unique_ptr<Decoder> paired_ar = PairedArDecoder(methods, method_context, paired);
  const GenerationConfig gen = GenerationConfigFor(c, target, method_info);
  // The paired AR run records no margins (none are stored for it; they cost AR time).
  GenerationConfig paired_gen = gen;
  paired_gen.record_margins = false;
  // Sized for the largest draft tree, so budgets are never clipped by the cache (only at the
  // model's context limit).
  KvCache cache;
  auto ensure_cache = [&](size_t prompt_len) -> KvCache& {
    const int64_t need =
        CacheLengthFor(model, static_cast<int64_t>(prompt_len), c.max_new_tokens, *decoder);
    if (!cache.defined() || cache.max_len() < need) cache = model.NewCache(1, need);
    return cache;
  };
  DecodeResult result, paired_result;

  const int64_t case_start = NowMicros();
  const OpCounting op_counting;  // SPECBED_COUNT_OPS=on: the steps' launches and host reads
  CaseGraphStats graphs;
  graphs.start = model.graph_stats();
  if (!prompts.empty()) {
    RunWarmup(c, target, prompts, warmup, gen, *decoder, paired_ar.get(), ensure_cache, result,
              paired_result);
  }
  graphs.after_warmup = model.graph_stats();

  // Every turn of every prompt.
  std::vector<SampleRecord> samples;
  std::vector<StepRecord> steps;
  for (size_t pi = 0; pi < prompts.size(); ++pi) {
    const Prompt& prompt = prompts[pi];
    std::vector<ChatMessage> messages = StartConversation(c);
    for (size_t turn = 0; turn < prompt.turns.size(); ++turn) {
      messages.push_back({"user", prompt.turns[turn]});
      GenerationConfig g = gen;
      g.seed = PromptSeed(c.seed, static_cast<int64_t>(pi), static_cast<int32_t>(turn));
      g.category = prompt.category;
      // Even answers: AR first; odd answers: the method first.
      const bool ar_first = paired && samples.size() % 2 == 0;
      std::vector<int32_t> ids;
      try {
        ids = BuildPromptIds(target, messages);
        ensure_cache(ids.size());
        if (ar_first) RunPairedAr(*paired_ar, ids, paired_gen, g.seed, cache, paired_result);
        decoder->Generate(ids, g, cache, result);
        if (paired && !ar_first) {
          RunPairedAr(*paired_ar, ids, paired_gen, g.seed, cache, paired_result);
        }
      } catch (const Error& e) {
        // Name the prompt's file and line (a prompt too long for the context, ...).
        Fail(prompt.source.empty() ? "dataset '" + c.dataset.name + "'" : prompt.source,
             ": prompt '", prompt.id, "' (turn ", turn + 1, ", method ", c.method.name,
             "): ", e.what());
      }
      const GenerationResult& r = result.generation;
      messages.push_back({"assistant", r.text});
      SampleRecord s = ToSampleRecord(prompt, turn, ids.size(), r);
      if (paired) SetPairedAr(paired_result.generation, ar_first, s);
      samples.push_back(std::move(s));
      AppendStepRecords(prompt, turn, result.steps, steps);
      if (progress) progress->Advance(1, note);
    }
  }
  graphs.end = model.graph_stats();
  const MethodTraits traits = BuiltTraits(method_info, *decoder);
  CaseRecord record = BuildCaseRecord(
      c, traits, model, MemoryBandwidthGbs(static_cast<int>(c.threads), c.device), graphs);
  record.wall_s = (NowMicros() - case_start) * 1e-6;
  store_.WriteCase(run_id, record, samples, steps);
}

}  // namespace specbed
