// `specbed generate`: one prompt through AR decoding; prints the text and speed
// (or, with --json, prompt ids, generated ids, text and timings for scripts).
#include <ATen/Parallel.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "base/json_read.h"
#include "base/knob_ranges.h"
#include "harness/cli/cli_flags.h"
#include "harness/cli/commands.h"
#include "harness/engine/ar_generate.h"
#include "harness/runner/runner.h"
#include "models/device.h"
#include "models/model_registry.h"

namespace specbed::cli {
namespace {

struct GenerateOptions {
  std::string model = "stories260K";
  std::string prompt;
  int64_t max_new_tokens = 128;
  GenerationConfig gen;  // -t/--temperature, --top-p, --top-k, -s/--seed (stop: from the model)
  std::string dtype = "float32";
  std::string device = "cpu";
  int threads = 1;
  std::string chat_template;
  std::vector<std::string> stop;
  bool json = false;
};

void RunGenerate(const GenerateOptions& o) {
  at::set_num_threads(o.threads);
  WarnLargeTargetOnCpu("generate", o.model, o.device);
  LoadedTarget target = LoadModel(o.model, ParseDtype(o.dtype), o.chat_template,
                                  ParseDevice(o.device, "generate --device"));
  const std::vector<int32_t> ids = BuildPromptIds(target, {{"user", o.prompt}});
  GenerationConfig gen = o.gen;
  gen.stop = StopConfigFor(target, o.max_new_tokens, o.stop);
  const int64_t max_len = std::min<int64_t>(
      target.model->config().max_seq_len, static_cast<int64_t>(ids.size()) + o.max_new_tokens + 1);
  KvCache cache = target.model->NewCache(1, max_len);
  GenerationResult r = GenerateAr(*target.model, target.tokenizer.get(), ids, gen, cache);
  const double decode_tps =
      r.decode_ms > 0 ? (static_cast<double>(r.tokens.size()) - 1) / (r.decode_ms * 1e-3) : 0.0;
  if (o.json) {
    nlohmann::json j = {{"model", target.spec.name},
                        {"model_label", target.model->config().twin_label},
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
    std::cout << DumpJsonForOutput(j) << std::endl;
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
      "\n[%s] %zu prompt tokens, %zu generated (%s); prefill %.2f ms; decode %.1f tokens/s\n",
      name.c_str(), ids.size(), r.tokens.size(), StopReasonName(r.stop_reason), r.prefill_ms,
      decode_tps);
}

}  // namespace

void AddGenerateCommand(CLI::App& app) {
  auto [cmd, o] =
      AddSubcommand(&app, "generate", RunGenerate, "Generate from one prompt with AR decoding");
  OldSpellings(
      cmd,
      cmd->add_option("--target", o->model, "Model name (specbed list models) or checkpoint path")
          ->capture_default_str(),
      {"-m", "--model"});
  cmd->add_option("-p,--prompt", o->prompt, "Prompt text (default: empty = BOS only)");
  OldSpellings(
      cmd,
      cmd->add_option("-n,--max-new-tokens", o->max_new_tokens, "Maximum tokens to generate")
          ->capture_default_str()
          ->check(CLI::Range(1, 1 << 20)),
      {"--tokens"});
  cmd->add_option("-t,--temperature", o->gen.sampling.temperature,
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
