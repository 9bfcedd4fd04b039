// `specbed generate`: one prompt through any registered method (AR by default; --method, --knob
// KEY=VALUE); prints the text, speed and, for a speculative method, τ and acceptance (or, with
// --json, prompt ids, generated ids, text, timings and the per-step drafted / accepted / emitted
// counts for scripts).
// Checked by: tests/cli/cli_test.cpp (generate's output and flags; every registered method on one
// prompt, lossless ones token-identical to AR at T = 0).
#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_read.h"
#include "base/knob_ranges.h"
#include "harness/cli/cli_flags.h"
#include "harness/cli/commands.h"
#include "harness/engine/ar_generate.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/runner/runner.h"
#include "methods/method_registry.h"
#include "models/device.h"
#include "models/model_registry.h"

namespace specbed::cli {
namespace {

struct GenerateOptions {
  std::string model = "stories260K";
  std::string prompt;
  int64_t max_new_tokens = 128;
  GenerationConfig gen;  // -T/--temperature, --top-p, --top-k, -s/--seed (stop: from the model)
  std::string dtype = "float32";
  std::string device = "cpu";
  int threads = 1;
  std::string chat_template;
  std::vector<std::string> stop;
  bool json = false;
  std::string method = "ar";       // any registered method (specbed list methods)
  std::vector<std::string> knobs;  // --knob KEY=VALUE, repeatable
};

// --knob KEY=VALUE pairs as a JSON object (the last of a repeated key wins).
nlohmann::json KnobsFromFlags(const std::vector<std::string>& pairs) {
  nlohmann::json knobs = nlohmann::json::object();
  for (auto& [key, value] : KnobPairsFromFlags(pairs, "generate")) knobs[key] = value;
  return knobs;
}

// What a speculative decode's steps add up to (all zero for AR, which has no steps).
struct StepTotals {
  int64_t steps = 0, drafted = 0, accepted = 0, emitted = 0;
  double tau() const { return steps > 0 ? static_cast<double>(emitted) / steps : 0.0; }
  double acceptance() const { return drafted > 0 ? static_cast<double>(accepted) / drafted : 0.0; }
};

StepTotals TotalsOf(const std::vector<StepStats>& steps) {
  StepTotals t;
  for (const StepStats& s : steps) {
    ++t.steps;
    t.drafted += s.n_drafted;
    t.accepted += s.n_accepted;
    t.emitted += s.n_emitted;
  }
  return t;
}

nlohmann::json GenerateJson(const GenerateOptions& o, const LoadedTarget& target,
                            const nlohmann::json& knobs, const std::vector<int32_t>& ids,
                            const DecodeResult& result, double decode_tps) {
  const GenerationResult& r = result.generation;
  nlohmann::json j = {{"model", target.spec.name},
                      {"model_label", target.model->config().twin_label},
                      {"method", o.method},
                      {"knobs", knobs},
                      {"prompt", o.prompt},
                      {"prompt_ids", ids},
                      {"generated_ids", r.tokens},
                      {"text", r.text},
                      {"stop_reason", StopReasonName(r.stop_reason)},
                      {"timings",
                       {{"prefill_ms", r.prefill_ms},
                        {"decode_ms", r.decode_ms},
                        {"forward_ms", r.forward_ms},
                        {"decode_tokens_per_s", decode_tps}}}};
  if (result.steps.empty()) return j;
  const StepTotals t = TotalsOf(result.steps);
  nlohmann::json per_step = nlohmann::json::array();
  for (const StepStats& s : result.steps) {
    per_step.push_back(
        {{"drafted", s.n_drafted}, {"accepted", s.n_accepted}, {"emitted", s.n_emitted}});
  }
  j["speculation"] = {{"verify_steps", t.steps}, {"drafted", t.drafted},
                      {"accepted", t.accepted},  {"emitted", t.emitted},
                      {"tau", t.tau()},          {"acceptance_rate", t.acceptance()},
                      {"per_step", per_step}};
  return j;
}

// `generate -t 0.7` meant the temperature before -t became the target on every command: a -t
// value that reads as a number and names no file is still taken as the temperature, with a note.
GenerateOptions WithOldTemperatureSpelling(GenerateOptions o) {
  char* end = nullptr;
  const double value = std::strtod(o.model.c_str(), &end);
  if (o.model.empty() || *end != '\0' || std::filesystem::exists(o.model)) return o;
  std::fprintf(stderr,
               "specbed generate: note: -t %s as the temperature is deprecated (-t is the target "
               "on every command); use -T/--temperature %s\n",
               o.model.c_str(), o.model.c_str());
  SPECBED_CHECK(value >= 0 && value <= kMaxTemperature,
                "generate -t (the old temperature): ", o.model, " is outside [0, ", kMaxTemperature,
                "]");
  o.gen.sampling.temperature = value;
  o.model = GenerateOptions().model;
  return o;
}

void RunGenerate(const GenerateOptions& given) {
  const GenerateOptions o = WithOldTemperatureSpelling(given);
  at::set_num_threads(o.threads);
  WarnLargeTargetOnCpu("generate", o.model, o.device);
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  const nlohmann::json knobs =
      registry.ResolveKnobsFor(o.method, KnobsFromFlags(o.knobs), o.model);  // before loading
  const at::ScalarType dtype = ParseDtype(o.dtype);
  const at::Device device = ParseDevice(o.device, "generate --device");
  LoadedTarget target = LoadModel(o.model, dtype, o.chat_template, device);
  std::map<std::string, LoadedTarget> drafters;  // draft models the method loads
  MethodContext context;
  context.target = &target;
  context.dtype = dtype;
  context.device = device;
  context.load_model = [&](const std::string& name) -> LoadedTarget& {
    auto it = drafters.find(name);
    if (it == drafters.end()) it = drafters.emplace(name, LoadModel(name, dtype, "", device)).first;
    return it->second;
  };
  std::unique_ptr<Decoder> decoder = registry.Build(o.method, context, knobs);
  const std::vector<int32_t> ids = BuildPromptIds(target, {{"user", o.prompt}});
  GenerationConfig gen = o.gen;
  gen.stop = StopConfigFor(target, o.max_new_tokens, o.stop);
  KvCache cache = target.model->NewCache(
      1,
      CacheLengthFor(*target.model, static_cast<int64_t>(ids.size()), o.max_new_tokens, *decoder));
  DecodeResult result;
  decoder->Generate(ids, gen, cache, result);
  const GenerationResult& r = result.generation;
  const double decode_tps =
      r.decode_ms > 0 ? (static_cast<double>(r.tokens.size()) - 1) / (r.decode_ms * 1e-3) : 0.0;
  if (o.json) {
    std::cout << DumpJsonForOutput(GenerateJson(o, target, knobs, ids, result, decode_tps))
              << std::endl;
    return;
  }
  std::cout << o.prompt << r.text << std::endl;
  // A cost twin says so: its speed is that of the larger shape, its outputs the original's.
  const std::string& label = target.model->config().twin_label;
  const std::string name = label.empty()
                               ? target.spec.name
                               : target.spec.name + ", " + label.substr(0, label.find(" ("));
  std::fprintf(
      stderr,
      "\n[%s] %s: %zu prompt tokens, %zu generated (%s); prefill %.2f ms; decode %.1f tokens/s\n",
      name.c_str(), o.method.c_str(), ids.size(), r.tokens.size(), StopReasonName(r.stop_reason),
      r.prefill_ms, decode_tps);
  if (!result.steps.empty()) {
    const StepTotals t = TotalsOf(result.steps);
    std::fprintf(stderr,
                 "%lld verify steps; acceptance length (τ) %.2f; acceptance %.1f%% (%lld of %lld "
                 "drafted tokens)\n",
                 static_cast<long long>(t.steps), t.tau(), 100 * t.acceptance(),
                 static_cast<long long>(t.accepted), static_cast<long long>(t.drafted));
  }
}

}  // namespace

void AddGenerateCommand(CLI::App& app) {
  auto [cmd, o] = AddSubcommand(&app, "generate", RunGenerate,
                                "Generate from one prompt with any method (AR by default)");
  OldSpellings(cmd,
               cmd->add_option("-t,--target", o->model,
                               "Model name (specbed list models) or checkpoint path")
                   ->capture_default_str(),
               {"-m", "--model"});
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (default: empty = BOS only)");
  cmd->add_option("--method", o->method, "Method (specbed list methods)")->capture_default_str();
  cmd->add_option("--knob", o->knobs,
                  "A knob of the method as KEY=VALUE, repeatable (e.g. --knob depth=7 --knob "
                  "head=DIR); the rest take their defaults for the target");
  OldSpellings(
      cmd,
      cmd->add_option("-n,--max-new-tokens", o->max_new_tokens, "Maximum tokens to generate")
          ->capture_default_str()
          ->check(CLI::Range(1, 1 << 20)),
      {"--tokens"});
  cmd->add_option("-T,--temperature", o->gen.sampling.temperature,
                  "Sampling temperature (0 = greedy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, kMaxTemperature));
  cmd->add_option("--top-p", o->gen.sampling.top_p, "Nucleus sampling mass in (0, 1] (1 = off)")
      ->capture_default_str()
      ->check(CLI::Range(1e-6, 1.0));
  cmd->add_option("--top-k", o->gen.sampling.top_k, "Top-k sampling (0 = off)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-s,--seed", o->gen.seed, "Sampling seed")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--dtype", o->dtype, "Weights/activations dtype: float32, bfloat16 or float16")
      ->capture_default_str();
  cmd->add_option("--device", o->device, "Device: cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads")
      ->capture_default_str()
      ->check(CLI::Range(1, 256));
  cmd->add_option("--chat-template", o->chat_template,
                  "Override the model's chat template (raw, llama3, chatml, vicuna)");
  cmd->add_option("--stop", o->stop, "Stop string (repeatable)");
  cmd->add_flag("--json", o->json, "Print prompt ids, generated ids, text and timings as JSON");
}

}  // namespace specbed::cli
