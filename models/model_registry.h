// Named models and model loading. A --target argument is either a registry name
// (`specbed list models`) or a path: a Hugging Face directory (config.json + safetensors
// [+ tokenizer.json]) or a llama2.c .bin checkpoint.
// Built-in names: stories260K (the real pretrained default), stories260K-draft (its SpS draft,
// trained by `specbed train draft-lm`), random-35m (random init, a ~35M-parameter Llama shape for
// speed benchmarks; no tokenizer), stories260K-twin / stories260K-twin-draft (cost twins of
// stories260K and its draft: the same function at the cost of a larger model, built on first use;
// models/twin/stories_twin.h).
// Checked by: tests/cli/cli_test.cpp (unknown names, list), tests/methods/cost_twin_test.cpp
// (the stories260K-twin names), tests/cli/sweep_cli_test.cpp (ModelParameterCount through the
// CPU size warning).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/llama_model.h"
#include "models/tokenizer/chat_template.h"
#include "models/tokenizer/tokenizer.h"

namespace specbed {

struct ModelSpec {
  std::string name;            // registry name, or the path as given
  std::string format;          // "llama2c" | "hf" | "random"
  std::string path;            // checkpoint file (llama2c) or directory (hf); "" for random
  std::string tokenizer_path;  // "" = none
  std::string chat_template;   // chat template name (models/tokenizer/chat_template.h)
  std::string description;
  LlamaConfig random_config;  // format "random" only
  uint64_t random_seed = 0;
};

// Built-in model names.
std::vector<std::string> BuiltinModelNames();
// Resolves a name or a path; unknown names fail listing the known ones.
ModelSpec ResolveModel(const std::string& name_or_path);

// The parameter count of a resolved model read from its config alone (no weights loaded): an HF
// directory's config.json, a llama2.c header, a random shape; -1 when it cannot be read (a
// missing or malformed file: loading reports that).
int64_t ModelParameterCount(const ModelSpec& spec);

// The tokenizer of a resolved model, or null when it has none. For llama2.c checkpoints the
// vocabulary size comes from the checkpoint header.
std::shared_ptr<Tokenizer> LoadModelTokenizer(const ModelSpec& spec);

struct LoadedTarget {
  ModelSpec spec;
  std::shared_ptr<LlamaModel> model;
  std::shared_ptr<Tokenizer> tokenizer;  // null when the model has none (random shapes)
  ChatTemplate chat_template = ChatTemplate::kRaw;
};

// Loads weights as `dtype` (kFloat, kBFloat16 or kHalf) onto `device` (checked with
// CheckDeviceAvailable first). `chat_template_override` ("" = model default).
LoadedTarget LoadModel(const std::string& name_or_path, at::ScalarType dtype,
                       const std::string& chat_template_override = "",
                       at::Device device = at::kCPU);

// "float32" / "fp32" -> kFloat, "bfloat16" / "bf16" -> kBFloat16, "float16" / "fp16" -> kHalf;
// anything else fails.
at::ScalarType ParseDtype(const std::string& name);
std::string DtypeName(at::ScalarType dtype);

}  // namespace specbed
