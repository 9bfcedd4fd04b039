// `specbed twin`: writes cost twins (models/twin/cost_twin.h) — checkpoints that compute exactly a
// small model's function at the cost of a larger one.
//   specbed twin stories260K -o DIR --width-factor 8 --depth 16   a target (registry name,
//                                                                      llama2.c .bin or HF dir)
//   specbed twin models/stories260K/eagle3 -o DIR --width-factor 8   any drafter SpecBed
//                                                                      writes (HF layout)
//   specbed twin models/stories260K/hrad -o DIR --width-factor 8   H-RAD, SpecDec++ (or an LTD
//                                                                      baseline set): zero input
//                                                                      columns (the twin writers
//                                                                      the methods declare)
//   specbed twin --builtin                 builds (or finds) the cached stories260K-twin set
// Checked by: tests/cli/twin_cli_test.cpp (shapes, drafters, errors, labels).
#include <cstdio>
#include <filesystem>
#include <string>

#include "base/error.h"
#include "base/mapped_file.h"
#include "harness/cli/commands.h"
#include "methods/method_registry.h"
#include "models/model_registry.h"
#include "models/twin/cost_twin.h"
#include "models/twin/stories_twin.h"

namespace specbed::cli {
namespace {

struct TwinOptions {
  TwinOptions() { shape.width_factor = kStoriesTwinWidthFactor; }
  std::string source, output, of;
  TwinShape shape;  // --width-factor, --depth, --head-dim, ...: 0 = x width factor / keep
  std::string store_dtype = "float32";
  bool builtin = false;
};

// The small learned parts outside the HF layout that read hidden states (H-RAD, LTD's
// classifiers), padded at the width factor of what they read by the twin writer their method
// declares. Returns false when no writer takes the source.
bool TwinLearnedPart(const TwinOptions& o) {
  const TwinShape& shape = o.shape;
  const int64_t f = shape.target_width_factor > 0 ? shape.target_width_factor : shape.width_factor;
  for (const TwinWriter& write : BuiltinMethodRegistry().TwinWriters()) {
    if (!write(o.source, o.output, f)) continue;
    std::printf("%s at width factor %lld (exact: zero input columns) -> %s\n", o.source.c_str(),
                static_cast<long long>(f), o.output.c_str());
    return true;
  }
  return false;
}

// The TwinShape flags (--width-factor, ..., --ffn): each shows its default and takes [min, max].
void AddShapeFlags(CLI::App* cmd, TwinShape& s) {
  struct ShapeFlag {
    const char* name;
    int64_t* value;
    int min, max;
    const char* help;
  };
  const ShapeFlag flags[] = {
      {"--width-factor", &s.width_factor, 1, 64,
       "Multiplies hidden size, heads, KV heads, FFN width (powers of 4 keep RMSNorm bit-exact)"},
      {"--target-width-factor", &s.target_width_factor, 0, 64,
       "Width factor of the target whose hidden states a drafter head reads (0 = --width-factor)"},
      {"--depth", &s.depth, 0, 4096,
       "Total layers (identity layers appended; 0 = keep the original depth)"},
      {"--head-dim", &s.head_dim, 0, 1024,
       "Explicit head_dim (0 = keep): RoPE pairs land on the padded pair of equal frequency and q "
       "is scaled so attention is unchanged (e.g. the Llama-3-8B shape: --width-factor 64 "
       "--head-dim 128 --heads 32 --kv-heads 8 --ffn 14336 --depth 32)"},
      {"--heads", &s.heads, 0, 1024, "Explicit attention heads (0 = original x width factor)"},
      {"--kv-heads", &s.kv_heads, 0, 1024, "Explicit KV heads (0 = original x width factor)"},
      {"--ffn", &s.ffn, 0, 1 << 20, "Explicit FFN width (0 = original x width factor)"},
  };
  for (const ShapeFlag& f : flags) {
    cmd->add_option(f.name, *f.value, f.help)
        ->capture_default_str()
        ->check(CLI::Range(f.min, f.max));
  }
}

void RunTwin(const TwinOptions& o) {
  if (o.builtin) {
    std::printf("stories260K-twin set: %s\n  %-10s %s\n", StoriesTwinRoot().c_str(), "target",
                StoriesTwinTarget().c_str());
    const MethodRegistry& methods = BuiltinMethodRegistry();
    for (const NamedDrafter& d : methods.Drafters()) {
      if (d.twin) std::printf("  %-10s %s\n", d.family.c_str(), methods.DrafterDir(d).c_str());
    }
    return;
  }
  SPECBED_CHECK(!o.source.empty() && !o.output.empty(),
                "twin: give a model or drafter and -o DIR (or --builtin)");
  if (TwinLearnedPart(o)) return;
  HfCheckpointFiles files;
  std::string of = o.of;
  std::string where = o.source;
  std::string tokenizer;  // the source model's tokenizer file, copied beside the twin
  const bool is_dir = PathExists(o.source + "/config.json");
  if (is_dir) {
    files = ReadCheckpointFiles(o.source);
  } else {
    const ModelSpec spec = ResolveModel(o.source);
    where = spec.path;
    tokenizer = spec.tokenizer_path;
    if (spec.format == "llama2c") {
      files = Llama2cAsHf(spec.path);
    } else if (spec.format == "hf") {
      files = ReadCheckpointFiles(spec.path);
    } else {
      Fail("twin: model '", o.source, "' is a ", spec.format,
           " shape without a checkpoint; give a checkpoint");
    }
    if (of.empty()) of = spec.name;
  }
  if (of.empty()) of = o.source;
  const HfCheckpointFiles twin =
      PadToCostTwin(files, o.shape, of, where, BuiltinMethodRegistry().TwinPadRules());
  WriteCheckpointFiles(
      o.output, twin,
      o.store_dtype == "bfloat16" ? SafetensorsDtype::kBF16 : SafetensorsDtype::kF32);
  // The twin of a model keeps its tokenizer beside it, so `--target DIR` works as the original.
  if (!tokenizer.empty()) {
    const bool bin =
        tokenizer.size() > 4 && tokenizer.compare(tokenizer.size() - 4, 4, ".bin") == 0;
    std::filesystem::copy_file(tokenizer, o.output + (bin ? "/tokenizer.bin" : "/tokenizer.json"),
                               std::filesystem::copy_options::overwrite_existing);
  }
  std::printf("%s -> %s\n", TwinLabel(nlohmann::json::parse(twin.config.dump())).c_str(),
              o.output.c_str());
}

}  // namespace

void AddTwinCommand(CLI::App& app) {
  auto [cmd, o] = AddSubcommand(
      &app, "twin", RunTwin,
      "Write a cost twin: a checkpoint with exactly a model's (or drafter's) function at the cost "
      "of a wider/deeper one (zero-weight padding; models/twin/cost_twin.h)");
  cmd->add_option("source", o->source,
                  "Model (registry name, llama2.c .bin, HF directory) or drafter directory");
  OldSpellings(cmd, cmd->add_option("-o,--output", o->output, "Output checkpoint directory"),
               {"--out"});
  AddShapeFlags(cmd, o->shape);
  cmd->add_option("--store-dtype", o->store_dtype,
                  "Float dtype of the written tensors: float32 (exact) or bfloat16 (half the "
                  "bytes, for large twins loaded in bfloat16 anyway, e.g. on a GPU)")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  cmd->add_option("--of", o->of, "Name of the original in the twin's label (default: source)");
  cmd->add_flag("--builtin", o->builtin,
                "Build (or find) the cached stories260K-twin set and print where it is");
}

}  // namespace specbed::cli
