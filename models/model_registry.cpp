// Model name resolution and loading.
#include "models/model_registry.h"

#include <ATen/ATen.h>

#include "base/error.h"
#include "base/json_read.h"
#include "base/mapped_file.h"
#include "base/names.h"
#include "base/paths.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/checkpoint/llama2c_checkpoint.h"
#include "models/device.h"
#include "models/twin/stories_twin.h"

namespace specbed {
namespace {

// A model of the stories260K family: its llama2.c tokenizer (tok512.bin) and raw prompts.
ModelSpec StoriesSpec(const std::string& name, const std::string& format, const std::string& path,
                      const std::string& description) {
  ModelSpec s;
  s.name = name;
  s.format = format;
  s.path = path;
  s.tokenizer_path = HomePath("models/stories260K/tok512.bin");
  s.chat_template = "raw";
  s.description = description;
  return s;
}

ModelSpec Stories260K() {
  return StoriesSpec(
      "stories260K", "llama2c", HomePath("models/stories260K/stories260K.bin"),
      "Karpathy's TinyStories 260K-parameter llama2.c model (real, pretrained), vocab 512");
}

// The default SpS draft for stories260K: trained by `specbed train draft-lm` (see its
// PROVENANCE.md); an HF directory sharing stories260K's llama2.c tokenizer.
ModelSpec Stories260KDraft() {
  return StoriesSpec("stories260K-draft", "hf", HomePath("models/stories260K/draft"),
                     "draft LM distilled from stories260K for speculative sampling, vocab 512");
}

// The cost twin of stories260K (models/twin/stories_twin.h): stories260K's exact function at the
// cost of a 512-wide, 16-layer model, built on first use into the cache.
ModelSpec Stories260KTwin() {
  return StoriesSpec("stories260K-twin", "hf", StoriesTwinTarget(),
                     "cost twin of stories260K: its exact function (same ids, logits within 1e-4) "
                     "at the cost of a width-512, 16-layer model (~47M parameters); built on "
                     "first use");
}

ModelSpec Stories260KTwinDraft() {
  return StoriesSpec("stories260K-twin-draft", "hf", StoriesTwinDrafter(StoriesTwinDraftLm(), {}),
                     "cost twin of stories260K-draft (width x4) for SpS on stories260K-twin");
}

ModelSpec Random35M() {
  ModelSpec s;
  s.name = "random-35m";
  s.format = "random";
  s.chat_template = "raw";
  s.description =
      "random-init Llama shape, ~35M params (dim 512, 6 layers, 8 heads, ffn 1408, "
      "vocab 32000, tied); speed benchmarks only";
  LlamaConfig& c = s.random_config;
  c.architecture = "LlamaForCausalLM";
  c.dim = 512;
  c.n_layers = 6;
  c.n_heads = 8;
  c.n_kv_heads = 8;
  c.head_dim = 64;
  c.hidden_dim = 1408;
  c.vocab_size = 32000;
  c.max_seq_len = 4096;
  c.tie_embeddings = true;
  c.rope_theta = 10000.0;
  c.norm_eps = 1e-5;
  s.random_seed = 1234;
  return s;
}

// Chat template a Hugging Face checkpoint most likely uses, from its architecture and vocab.
std::string GuessChatTemplate(const LlamaConfig& config) {
  if (config.architecture.rfind("Qwen", 0) == 0) return "chatml";
  if (config.vocab_size >= 128000 && config.vocab_size <= 128512) return "llama3";
  if (config.vocab_size == 32000) return "vicuna";
  return "raw";
}

// The registry, in `specbed list models` order (a spec is built only when its name is asked for:
// the twins build on first use).
const std::vector<std::pair<std::string, ModelSpec (*)()>>& BuiltinModels() {
  static const std::vector<std::pair<std::string, ModelSpec (*)()>> models = {
      {"stories260K", &Stories260K},
      {"stories260K-draft", &Stories260KDraft},
      {"stories260K-twin", &Stories260KTwin},
      {"stories260K-twin-draft", &Stories260KTwinDraft},
      {"random-35m", &Random35M}};
  return models;
}

}  // namespace

std::vector<std::string> BuiltinModelNames() {
  std::vector<std::string> names;
  for (const auto& [name, spec] : BuiltinModels()) names.push_back(name);
  return names;
}

ModelSpec ResolveModel(const std::string& name_or_path) {
  for (const auto& [name, spec] : BuiltinModels()) {
    if (name == name_or_path) return spec();
  }
  if (PathExists(name_or_path)) {
    ModelSpec s;
    s.name = name_or_path;
    s.path = name_or_path;
    if (EndsWith(name_or_path, ".bin")) {
      s.format = "llama2c";
      s.chat_template = "raw";
      s.description = "llama2.c checkpoint";
      // A tokenizer.bin beside the checkpoint is used when present.
      const auto slash = name_or_path.find_last_of('/');
      const std::string dir = slash == std::string::npos ? "." : name_or_path.substr(0, slash);
      if (PathExists(dir + "/tokenizer.bin")) s.tokenizer_path = dir + "/tokenizer.bin";
    } else {
      s.format = "hf";
      s.description = "Hugging Face checkpoint directory";
      if (PathExists(name_or_path + "/tokenizer.json")) {
        s.tokenizer_path = name_or_path + "/tokenizer.json";
      } else if (PathExists(name_or_path + "/vocab.json") &&
                 PathExists(name_or_path + "/merges.txt")) {
        s.tokenizer_path = name_or_path;  // a GPT-2 style pair: LoadTokenizer reads the folder
      } else if (PathExists(name_or_path + "/tokenizer.bin")) {
        // A llama2.c tokenizer beside an HF checkpoint (e.g. a cost twin of stories260K).
        s.tokenizer_path = name_or_path + "/tokenizer.bin";
        s.chat_template = "raw";
      }
    }
    return s;
  }
  // A name with a '/' or a checkpoint suffix is a path: say what is wrong with it (missing, a
  // symbolic link loop, a FIFO, ...) instead of "unknown model".
  if (name_or_path.find('/') != std::string::npos || EndsWith(name_or_path, ".bin")) {
    CheckPathKind(name_or_path,
                  EndsWith(name_or_path, ".bin") ? PathKind::kFile : PathKind::kDirectory,
                  "target checkpoint");
  }
  FailUnknownName("model", name_or_path, BuiltinModelNames());
}

int64_t ModelParameterCount(const ModelSpec& spec) {
  try {
    if (spec.format == "random") return spec.random_config.ParameterCount();
    if (spec.format == "llama2c") return ReadLlama2cConfig(spec.path).ParameterCount();
    const std::string config_path = spec.path + "/config.json";
    if (spec.format != "hf" || !PathExists(config_path)) return -1;
    return ParseHfConfig(ReadJsonFile(config_path), config_path).ParameterCount();
  } catch (const Error&) {
    return -1;
  }
}

std::shared_ptr<Tokenizer> LoadModelTokenizer(const ModelSpec& spec) {
  if (spec.tokenizer_path.empty()) return nullptr;
  int32_t vocab = -1;
  if (spec.format == "llama2c") {
    vocab = static_cast<int32_t>(ReadLlama2cConfig(spec.path).vocab_size);
  } else if (spec.format == "hf" && EndsWith(spec.tokenizer_path, ".bin")) {
    // A llama2.c tokenizer shared with an HF checkpoint (a trained draft): vocab from config.json.
    const std::string config_path = spec.path + "/config.json";
    vocab = static_cast<int32_t>(ParseHfConfig(ReadJsonFile(config_path), config_path).vocab_size);
  }
  return LoadTokenizer(spec.tokenizer_path, vocab);
}

LoadedTarget LoadModel(const std::string& name_or_path, at::ScalarType dtype,
                       const std::string& chat_template_override, at::Device device) {
  CheckDeviceAvailable(device, "model '" + name_or_path + "'");
  LoadedTarget out;
  out.spec = ResolveModel(name_or_path);
  LlamaConfig config;
  LlamaWeights weights;
  if (out.spec.format == "llama2c") {
    Llama2cCheckpoint ckpt = ReadLlama2cCheckpoint(out.spec.path);
    config = ckpt.config;
    weights = WeightsFromHfTensors(config, ckpt.tensors, out.spec.path).To(dtype);
  } else if (out.spec.format == "hf") {
    LoadedModel loaded = LoadHfCheckpoint(out.spec.path, dtype);
    config = loaded.config;
    weights = std::move(loaded.weights);
    if (out.spec.chat_template.empty()) out.spec.chat_template = GuessChatTemplate(config);
  } else {
    config = out.spec.random_config;
    weights = RandomLlamaWeights(config, out.spec.random_seed, dtype);
  }
  if (!chat_template_override.empty()) out.spec.chat_template = chat_template_override;
  out.chat_template = ChatTemplateFromName(out.spec.chat_template);
  if (!out.spec.tokenizer_path.empty()) {
    out.tokenizer = LoadModelTokenizer(out.spec);
    SPECBED_CHECK(out.tokenizer->vocab_size() <= config.vocab_size, "tokenizer '",
                  out.spec.tokenizer_path, "' has ", out.tokenizer->vocab_size(),
                  " tokens but model '", out.spec.name, "' only ", config.vocab_size);
  }
  if (!SameDevice(weights.tok_embeddings.device(), device) ||
      weights.tok_embeddings.scalar_type() != dtype) {
    weights = weights.To(dtype, device);
  }
  out.model = std::make_shared<LlamaModel>(config, std::move(weights));
  return out;
}

at::ScalarType ParseDtype(const std::string& name) {
  if (name == "float32" || name == "fp32") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  if (name == "float16" || name == "fp16") return at::kHalf;
  FailUnknownName("dtype", name, {"float32", "bfloat16", "float16"});
}

std::string DtypeName(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "float32";
    case at::kBFloat16:
      return "bfloat16";
    case at::kHalf:
      return "float16";
    default:
      return "unsupported";
  }
}

}  // namespace specbed
