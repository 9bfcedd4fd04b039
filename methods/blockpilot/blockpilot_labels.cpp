// BlockPilot label data: prompts, one decode per candidate block size, the label file (see
// blockpilot_labels.h and methods/blockpilot/README.md).
// Checked by: tests/methods/blockpilot_test.cpp.
#include "methods/blockpilot/blockpilot_labels.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "base/error.h"
#include "base/hash.h"
#include "base/mapped_file.h"
#include "base/progress.h"
#include "base/timer.h"
#include "datasets/dataset.h"
#include "harness/engine/ar_generate.h"
#include "harness/runner/environment.h"
#include "harness/runner/runner.h"
#include "methods/blockpilot/blockpilot_method.h"
#include "methods/blockpilot/blockpilot_predictor.h"
#include "methods/common/train/regen.h"
#include "methods/common/train/train_util.h"
#include "models/checkpoint/safetensors.h"
#include "models/model_registry.h"
#include "models/tokenizer/chat_template.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

constexpr const char* kFormat = "specbed-blockpilot-labels";
constexpr uint64_t kPromptSalt = 0x62706c7450ULL;  // "bpltP"

void CheckConfig(const BlockPilotLabelConfig& c) {
  SPECBED_CHECK(!c.drafter.empty(), "blockpilot label: --drafter (a DFlash checkpoint directory) ",
                "is required");
  SPECBED_CHECK(PathExists(c.drafter), "blockpilot label: drafter '", c.drafter,
                "' does not exist");
  SPECBED_CHECK(!c.prompts.empty(), "blockpilot label: --prompts is empty (give 'bos', a dataset ",
                "name or a prompt file)");
  SPECBED_CHECK(c.radius >= 1, "blockpilot label: --radius must be >= 1, got ", c.radius);
  SPECBED_CHECK(c.max_new_tokens >= 2, "blockpilot label: --max-new-tokens must be >= 2 (one ",
                "verify step at least), got ", c.max_new_tokens);
  SPECBED_CHECK(c.timing_repeats >= 1, "blockpilot label: --timing-repeats must be >= 1, got ",
                c.timing_repeats);
  SPECBED_CHECK(c.threads >= 1, "blockpilot label: --threads must be >= 1, got ", c.threads);
  if (c.prompts == "bos") {
    SPECBED_CHECK(c.n_prompts >= 1 && c.prompt_tokens >= 0, "blockpilot label: --prompts bos ",
                  "needs --n-prompts >= 1 and --prompt-tokens >= 0");
    SPECBED_CHECK(c.categories.empty() && c.limit < 0, "blockpilot label: --dataset-categories ",
                  "and --limit apply to dataset prompts, not to --prompts bos");
  }
}

TrainingPromptSet BuildPrompts(const BlockPilotLabelConfig& c, const LoadedTarget& target) {
  if (c.prompts != "bos") {
    DatasetFilter filter;
    filter.limit = c.limit;
    filter.categories = c.categories;
    return DatasetPromptSet(c.prompts, filter, target, "blockpilot label");
  }
  TrainingPromptSet set;
  set.kind = "bos";
  LlamaModel& model = *target.model;
  const int32_t bos = TargetBosId(target, "blockpilot label");
  GenerationConfig gen;
  gen.sampling.temperature = 1.0;
  gen.stop.max_new_tokens = c.prompt_tokens;
  gen.stop.stop_on_eos = false;  // fixed-length prompts
  KvCache cache = model.NewCache(1, c.prompt_tokens + 2);
  for (int64_t i = 0; i < c.n_prompts; ++i) {
    std::vector<int32_t> ids{bos};
    if (c.prompt_tokens > 0) {
      gen.seed = DeriveSeed(c.seed, static_cast<uint64_t>(i), kPromptSalt);
      const GenerationResult r = GenerateAr(model, nullptr, ids, gen, cache);
      ids.insert(ids.end(), r.tokens.begin(), r.tokens.end());
    }
    set.ids.push_back(std::move(ids));
  }
  return set;
}

// 16 hex digits over the drafter directory's config.json and, per *.safetensors file, its size
// and up to 4 MiB from its start and its end (identifies the drafter without reading all of it).
std::string DrafterFingerprint(const std::string& dir) {
  uint64_t h = Fnv1a64(nullptr, 0);
  const std::string config = ReadFileToString(dir + "/config.json");
  h = Fnv1a64(config.data(), config.size(), h);
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".safetensors")
      files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  constexpr size_t kSpan = size_t{4} << 20;
  for (const std::string& f : files) {
    const auto map = MappedFile::Open(f);
    const uint64_t size = map->size();
    h = Fnv1a64(&size, sizeof(size), h);
    const size_t head = std::min(kSpan, map->size());
    h = Fnv1a64(map->data(), head, h);
    const size_t tail = std::min(kSpan, map->size());
    h = Fnv1a64(map->data() + map->size() - tail, tail, h);
  }
  return Hex64(h);
}

// The settings that determine the rows (compared when resuming).
ojson LabelsIdentity(const ojson& p) {
  ojson id;
  for (const char* key : {"format_version", "target", "drafter", "prompts", "radius", "candidates",
                          "max_new_tokens", "timing_repeats", "decoding"}) {
    id[key] = p.contains(key) ? p[key] : ojson();
  }
  return id;
}

ojson BaseProvenance(const BlockPilotLabelConfig& c, const LoadedTarget& target,
                     const TrainingPromptSet& prompts, int64_t trained_block_size,
                     const std::vector<int64_t>& candidates) {
  const LlamaConfig& tc = target.model->config();
  ojson p;
  p["format"] = kFormat;
  p["format_version"] = kBlockPilotLabelsVersion;
  p["target"] = {{"name", target.spec.name},
                 {"fingerprint", TargetFingerprint(*target.model)},
                 {"dtype", DtypeName(target.model->dtype())},
                 {"vocab_size", tc.vocab_size}};
  p["drafter"] = {{"path", c.drafter},
                  {"block_size", trained_block_size},
                  {"fingerprint", DrafterFingerprint(c.drafter)}};
  ojson pr;
  pr["source"] = c.prompts;
  pr["kind"] = prompts.kind;
  if (prompts.kind == "bos") {
    pr["n_prompts"] = c.n_prompts;
    pr["prompt_tokens"] = c.prompt_tokens;
    pr["seed"] = c.seed;
    pr["sampling"] =
        "[BOS] + prompt_tokens tokens sampled from the target at T = 1, seed "
        "DeriveSeed(seed, prompt_index, 'bpltP')";
  } else {
    pr["categories"] = c.categories;
    pr["limit"] = c.limit;
    pr["n_prompts"] = static_cast<int64_t>(prompts.ids.size());
    pr["chat_template"] = ChatTemplateName(target.chat_template);
    pr["turn"] = "first user turn";
  }
  p["prompts"] = pr;
  p["radius"] = c.radius;
  p["candidates"] = candidates;
  std::vector<int64_t> dropped;
  for (int64_t b = trained_block_size - c.radius; b < 2; ++b) dropped.push_back(b);
  p["dropped_candidates"] = dropped;
  p["max_new_tokens"] = c.max_new_tokens;
  p["timing_repeats"] = c.timing_repeats;
  p["decoding"] = "dflash chain, greedy (T = 0), stop at EOS";
  return p;
}

// Loads `path` when it holds rows of this run (same identity); else false with `why`.
bool LoadMatching(const std::string& path, const ojson& base, BlockPilotLabels* labels,
                  std::string* why) {
  try {
    BlockPilotLabels l = LoadBlockPilotLabels(path);
    if (LabelsIdentity(l.provenance) != LabelsIdentity(base)) {
      *why = "it was made with other settings";
      return false;
    }
    *labels = std::move(l);
    return true;
  } catch (const Error& e) {
    *why = e.what();
    return false;
  }
}

// Appends one prompt's row.
void AppendRow(BlockPilotLabels& l, const std::vector<int32_t>& prompt, int64_t prompt_index,
               const std::vector<float>& logits, const std::vector<double>& tau,
               const std::vector<double>& ms, const std::vector<int64_t>& tokens,
               const std::vector<int64_t>& steps) {
  if (l.prompt_offsets.empty()) l.prompt_offsets.push_back(0);
  l.prompt_tokens.insert(l.prompt_tokens.end(), prompt.begin(), prompt.end());
  l.prompt_offsets.push_back(static_cast<int64_t>(l.prompt_tokens.size()));
  l.logits.insert(l.logits.end(), logits.begin(), logits.end());
  l.tau.insert(l.tau.end(), tau.begin(), tau.end());
  l.decode_ms.insert(l.decode_ms.end(), ms.begin(), ms.end());
  l.decode_tokens.insert(l.decode_tokens.end(), tokens.begin(), tokens.end());
  l.steps.insert(l.steps.end(), steps.begin(), steps.end());
  l.provenance["prompt_index"].push_back(prompt_index);
}

}  // namespace

double BlockPilotLabels::TokensPerSecond(int64_t i, int64_t c) const {
  const double ms = decode_ms[i * n_candidates() + c];
  return ms > 0 ? decode_tokens[i * n_candidates() + c] * 1e3 / ms : 0.0;
}

std::vector<int64_t> BlockPilotLabelIndices(const BlockPilotLabels& labels,
                                            const std::string& criterion) {
  SPECBED_CHECK(criterion == "tau" || criterion == "throughput", "blockpilot: unknown label ",
                "criterion '", criterion, "'; known: tau, throughput");
  const int64_t n = labels.size(), nc = labels.n_candidates();
  std::vector<int64_t> out(n);
  std::vector<double> values(nc);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < nc; ++c) {
      values[c] = criterion == "tau" ? labels.tau[i * nc + c] : labels.TokensPerSecond(i, c);
    }
    out[i] = ChooseBlockLabel(values.data(), labels.candidates, labels.trained_block_size);
  }
  return out;
}

void ValidateBlockPilotLabels(const BlockPilotLabels& l, const std::string& where) {
  const ojson& p = l.provenance;
  SPECBED_CHECK(p.is_object() && p.value("format", "") == kFormat, where,
                ": not a BlockPilot label file (provenance format is not '", kFormat, "')");
  SPECBED_CHECK(p.value("format_version", int64_t{-1}) == kBlockPilotLabelsVersion, where,
                ": format_version ", p.value("format_version", int64_t{-1}), ", this build reads ",
                kBlockPilotLabelsVersion, " (relabel with this specbed)");
  SPECBED_CHECK(l.vocab_size >= 1 && l.trained_block_size >= 2, where,
                ": vocab_size and trained_block_size must be positive / >= 2");
  const int64_t radius = p.value("radius", int64_t{-1});
  SPECBED_CHECK(
      l.candidates == BlockPilotCandidates(l.trained_block_size, std::max<int64_t>(radius, 0)),
      where, ": candidates ", ojson(l.candidates).dump(), " do not match trained block size ",
      l.trained_block_size, " and radius ", radius);
  SPECBED_CHECK(!l.prompt_offsets.empty() && l.prompt_offsets.front() == 0, where,
                ": prompt_offsets must start at 0");
  const int64_t n = l.size(), nc = l.n_candidates();
  for (int64_t i = 0; i < n; ++i) {
    SPECBED_CHECK(l.prompt_offsets[i + 1] > l.prompt_offsets[i], where,
                  ": prompt_offsets must increase (prompt ", i, " is empty)");
  }
  SPECBED_CHECK(l.prompt_offsets.back() == static_cast<int64_t>(l.prompt_tokens.size()), where,
                ": prompt_offsets end at ", l.prompt_offsets.back(), " but there are ",
                l.prompt_tokens.size(), " prompt tokens");
  const size_t cells = static_cast<size_t>(n * nc);
  SPECBED_CHECK(l.logits.size() == static_cast<size_t>(n * l.vocab_size) && l.tau.size() == cells &&
                    l.decode_ms.size() == cells && l.decode_tokens.size() == cells &&
                    l.steps.size() == cells,
                where, ": tensor sizes do not match ", n, " prompts x ", nc, " candidates (vocab ",
                l.vocab_size, ")");
  SPECBED_CHECK(p.contains("prompt_index") && p["prompt_index"].is_array() &&
                    static_cast<int64_t>(p["prompt_index"].size()) == n,
                where, ": provenance prompt_index must list one index per prompt");
  for (size_t k = 0; k < cells; ++k) {
    SPECBED_CHECK(l.steps[k] >= 1 && l.decode_tokens[k] >= 0 && l.decode_ms[k] >= 0, where,
                  ": row ", k / nc, ", candidate ", l.candidates[k % nc],
                  ": needs >= 1 verify step and non-negative counts and times");
    const double want = static_cast<double>(l.decode_tokens[k]) / l.steps[k];
    SPECBED_CHECK(std::abs(l.tau[k] - want) <= 1e-9 * std::max(1.0, want), where, ": row ", k / nc,
                  ", candidate ", l.candidates[k % nc], ": tau ", l.tau[k],
                  " != decode_tokens / steps = ", want);
  }
}

void WriteBlockPilotLabels(const std::string& path, const BlockPilotLabels& l) {
  ValidateBlockPilotLabels(l, "writing BlockPilot labels '" + path + "'");
  const int64_t n = l.size(), nc = l.n_candidates();
  auto view = [](const char* name, SafetensorsDtype dtype, std::vector<int64_t> shape,
                 const void* data, size_t nbytes) {
    return SafetensorsTensorView{name, dtype, std::move(shape), data, nbytes};
  };
  const std::vector<SafetensorsTensorView> tensors = {
      view("candidates", SafetensorsDtype::kI64, {nc}, l.candidates.data(), nc * 8),
      view("logits", SafetensorsDtype::kF32, {n, l.vocab_size}, l.logits.data(),
           l.logits.size() * 4),
      view("tau", SafetensorsDtype::kF64, {n, nc}, l.tau.data(), l.tau.size() * 8),
      view("decode_ms", SafetensorsDtype::kF64, {n, nc}, l.decode_ms.data(),
           l.decode_ms.size() * 8),
      view("decode_tokens", SafetensorsDtype::kI64, {n, nc}, l.decode_tokens.data(),
           l.decode_tokens.size() * 8),
      view("steps", SafetensorsDtype::kI64, {n, nc}, l.steps.data(), l.steps.size() * 8),
      view("prompt_tokens", SafetensorsDtype::kI32, {static_cast<int64_t>(l.prompt_tokens.size())},
           l.prompt_tokens.data(), l.prompt_tokens.size() * 4),
      view("prompt_offsets", SafetensorsDtype::kI64, {n + 1}, l.prompt_offsets.data(),
           l.prompt_offsets.size() * 8),
  };
  ojson p = l.provenance;
  p["trained_block_size"] = l.trained_block_size;
  p["vocab_size"] = l.vocab_size;
  const std::string dir = fs::path(path).parent_path().string();
  if (!dir.empty()) fs::create_directories(dir);
  WriteSafetensors(path, tensors, {{kBlockPilotLabelsKey, p.dump()}});
}

BlockPilotLabels LoadBlockPilotLabels(const std::string& path) {
  const std::string where = "BlockPilot labels '" + path + "'";
  SPECBED_CHECK(PathExists(path), where, ": file does not exist");
  const auto file = SafetensorsFile::Open(path);
  auto meta = file->metadata().find(kBlockPilotLabelsKey);
  SPECBED_CHECK(meta != file->metadata().end(), where, ": no '", kBlockPilotLabelsKey,
                "' metadata (not written by `specbed blockpilot label`)");
  BlockPilotLabels l;
  l.provenance = ojson::parse(meta->second, nullptr, /*allow_exceptions=*/false);
  SPECBED_CHECK(l.provenance.is_object(), where, ": metadata '", kBlockPilotLabelsKey,
                "' is not a JSON object");
  l.trained_block_size = l.provenance.value("trained_block_size", int64_t{0});
  l.vocab_size = l.provenance.value("vocab_size", int64_t{0});
  auto read = [&](const char* name, SafetensorsDtype dtype, int64_t dims, auto& out) {
    const SafetensorsEntry* e = file->Find(name);
    SPECBED_CHECK(e != nullptr, where, ": missing tensor '", name, "'");
    SPECBED_CHECK(e->dtype == dtype && static_cast<int64_t>(e->shape.size()) == dims, where,
                  ", tensor '", name, "': expected ", SafetensorsDtypeName(dtype), " with ", dims,
                  " dimension(s), got ", SafetensorsDtypeName(e->dtype), " with ", e->shape.size());
    using T = typename std::decay_t<decltype(out)>::value_type;
    out.resize(e->nbytes / sizeof(T));
    if (e->nbytes > 0) std::memcpy(out.data(), e->data, e->nbytes);
    return e->shape;
  };
  read("candidates", SafetensorsDtype::kI64, 1, l.candidates);
  const auto logits_shape = read("logits", SafetensorsDtype::kF32, 2, l.logits);
  SPECBED_CHECK(logits_shape[1] == l.vocab_size, where, ", tensor 'logits': ", logits_shape[1],
                " columns but the provenance says vocab_size ", l.vocab_size);
  read("tau", SafetensorsDtype::kF64, 2, l.tau);
  read("decode_ms", SafetensorsDtype::kF64, 2, l.decode_ms);
  read("decode_tokens", SafetensorsDtype::kI64, 2, l.decode_tokens);
  read("steps", SafetensorsDtype::kI64, 2, l.steps);
  read("prompt_tokens", SafetensorsDtype::kI32, 1, l.prompt_tokens);
  read("prompt_offsets", SafetensorsDtype::kI64, 1, l.prompt_offsets);
  ValidateBlockPilotLabels(l, where);
  return l;
}

namespace {

// The DFlash chain decoder of the drafter, at a block size the labelling sets per decode.
class LabelDecoder {
 public:
  LabelDecoder(const BlockPilotLabelConfig& c, LoadedTarget& target) : model_(*target.model) {
    context_.target = &target;
    context_.dtype = model_.dtype();
    context_.load_model = [](const std::string& name) -> LoadedTarget& {
      Fail("blockpilot label: the DFlash chain needs no other model (asked for '", name, "')");
    };
    chain_ = MakeDflashChainDecoder(context_, c.drafter, "blockpilot label");
    gen_.sampling.temperature = 0;
    gen_.stop = StopConfigFor(target, c.max_new_tokens, {});
    max_new_tokens_ = c.max_new_tokens;
  }

  int64_t trained_block_size() const { return chain_.trained_block_size; }

  // Puts the fixed-block controller on the decoder (before the first Run).
  void UseFixedBlocks() {
    controller_ = new FixedBlockController(chain_.drafter, trained_block_size());
    chain_.decoder->SetController(std::unique_ptr<Controller>(controller_));
  }

  // One greedy decode of `ids` at block size `block`; `capture`: keep the target's last-position
  // logits (last_logits()).
  const DecodeResult& Run(const std::vector<int32_t>& ids, int64_t block, bool capture) {
    controller_->set_block_size(block);
    // Sized as the runner sizes it (room for the largest draft of this block size), so budgets
    // are clipped only at the model's context limit, as in `specbed run`.
    const int64_t need =
        CacheLengthFor(model_, static_cast<int64_t>(ids.size()), max_new_tokens_, *chain_.decoder);
    if (!cache_.defined() || cache_.max_len() != need) cache_ = model_.NewCache(1, need);
    controller_->set_capture_logits(capture);
    chain_.decoder->Generate(ids, gen_, cache_, out_);
    return out_;
  }
  const std::vector<float>& last_logits() const { return controller_->last_logits(); }

 private:
  LlamaModel& model_;
  MethodContext context_;
  DflashChainDecoder chain_;
  FixedBlockController* controller_ = nullptr;  // owned by chain_.decoder
  GenerationConfig gen_;
  int64_t max_new_tokens_ = 0;
  DecodeResult out_;
  KvCache cache_;
};

// The candidates around the drafter's block size; at least 2 of them.
std::vector<int64_t> LabelCandidates(const BlockPilotLabelConfig& c, int64_t trained) {
  const std::vector<int64_t> candidates = BlockPilotCandidates(trained, c.radius);
  SPECBED_CHECK(candidates.size() >= 2, "blockpilot label: radius ", c.radius,
                " around the drafter's block size ", trained,
                " leaves fewer than 2 candidates >= 2");
  return candidates;
}

void CheckPromptLengths(const BlockPilotLabelConfig& c, const TrainingPromptSet& prompts,
                        const LlamaConfig& tc) {
  for (size_t i = 0; i < prompts.ids.size(); ++i) {
    SPECBED_CHECK(static_cast<int64_t>(prompts.ids[i].size()) < tc.max_seq_len - 1,
                  "blockpilot label: prompt ", i, " of '", c.prompts, "' has ",
                  prompts.ids[i].size(), " tokens; the target's context of ", tc.max_seq_len,
                  " positions leaves no room for a response");
  }
}

// Where a run stands (what OUT.partial records besides the rows).
struct LabelProgress {
  int64_t next_prompt = 0;
  double previous_wall = 0;
  int64_t skipped = 0, mismatches = 0;
};

// True (result filled) when out_path already holds the complete labels of this run.
bool KeepComplete(const std::string& out_path, const ojson& base, bool verbose,
                  BlockPilotLabelResult& result) {
  if (!PathExists(out_path)) return false;
  std::string why;
  if (LoadMatching(out_path, base, &result.labels, &why) &&
      !result.labels.provenance.value("partial", false)) {
    result.finished = true;
    result.resumed = result.labels.size();
    if (verbose) {
      std::fprintf(stderr, "blockpilot label: '%s' is complete with these settings; kept\n",
                   out_path.c_str());
    }
    return true;
  }
  if (verbose) {
    std::fprintf(stderr, "blockpilot label: replacing '%s' (%s)\n", out_path.c_str(), why.c_str());
  }
  return false;
}

// Starts result.labels afresh or from `partial` (when it holds rows of this run; else it is
// removed) and returns the progress to continue from.
LabelProgress StartLabels(const std::string& partial, const ojson& base, int64_t n_total,
                          bool verbose, BlockPilotLabelResult& result) {
  LabelProgress progress;
  BlockPilotLabels& labels = result.labels;
  labels = BlockPilotLabels();
  std::string why;
  if (PathExists(partial)) {
    if (LoadMatching(partial, base, &labels, &why)) {
      const ojson& p = labels.provenance;
      progress.next_prompt = p.value("prompts_done", int64_t{0});
      progress.previous_wall = p.value("wall_seconds", 0.0);
      progress.skipped = p.value("skipped_prompts", int64_t{0});
      progress.mismatches = p.value("output_mismatches", int64_t{0});
      result.resumed = labels.size();
      if (verbose) {
        std::fprintf(stderr, "blockpilot label: resuming from '%s' at prompt %lld of %lld\n",
                     partial.c_str(), static_cast<long long>(progress.next_prompt),
                     static_cast<long long>(n_total));
      }
    } else {
      if (verbose) {
        std::fprintf(stderr, "blockpilot label: discarding progress file '%s': %s\n",
                     partial.c_str(), why.c_str());
      }
      labels = BlockPilotLabels();
      fs::remove(partial);
    }
  }
  if (labels.prompt_offsets.empty()) {
    labels.provenance = base;
    labels.provenance["prompt_index"] = ojson::array();
  }
  return progress;
}

// One prompt's row: the decodes at every candidate (timing_repeats times; the fastest time).
struct PromptRow {
  std::vector<double> tau, ms;
  std::vector<int64_t> tokens, steps;
  std::vector<float> logits;  // the target's last-position logits
};

// Decodes `ids` at every candidate block size into *row; false when the first token already
// stopped the decode (no verify step: no label). Counts outputs that differ from the first
// candidate's in *mismatches.
bool DecodePrompt(LabelDecoder& decoder, const std::vector<int32_t>& ids,
                  const std::vector<int64_t>& candidates, int64_t timing_repeats, PromptRow* row,
                  int64_t* mismatches) {
  const size_t nc = candidates.size();
  row->tau.resize(nc);
  row->ms.resize(nc);
  row->tokens.resize(nc);
  row->steps.resize(nc);
  std::vector<int32_t> first_output;
  for (int64_t r = 0; r < timing_repeats; ++r) {
    for (size_t ci = 0; ci < nc; ++ci) {
      const bool first = r == 0 && ci == 0;
      const DecodeResult& out = decoder.Run(ids, candidates[ci], first);
      if (first) row->logits = decoder.last_logits();
      const GenerationResult& g = out.generation;
      int64_t emitted = 0;
      for (const StepStats& s : out.steps) emitted += s.n_emitted;
      const int64_t n_steps = static_cast<int64_t>(out.steps.size());
      if (first && n_steps == 0) return false;
      if (r > 0) {
        row->ms[ci] = std::min(row->ms[ci], g.decode_ms);
        continue;
      }
      row->tau[ci] = static_cast<double>(emitted) / n_steps;
      row->tokens[ci] = emitted;
      row->steps[ci] = n_steps;
      row->ms[ci] = g.decode_ms;
      if (ci == 0) {
        first_output = g.tokens;
      } else if (g.tokens != first_output) {
        ++*mismatches;
      }
    }
  }
  return true;
}

// The run's figures and build identity in the provenance.
void StampProvenance(BlockPilotLabels& labels, const LabelProgress& progress, int threads,
                     double seconds, bool partial_file) {
  ojson& p = labels.provenance;
  p["partial"] = partial_file;
  p["prompts_done"] = progress.next_prompt;
  p["n_rows"] = labels.size();
  p["skipped_prompts"] = progress.skipped;
  p["output_mismatches"] = progress.mismatches;
  p["wall_seconds"] = progress.previous_wall + seconds;
  p["threads"] = threads;
  const RunInfo env = CurrentEnvironment();
  p["specbed_version"] = env.specbed_version;
  p["specbed_git_commit"] = env.git_commit;
  p["created_utc"] = NowRfc3339();
}

// Labels the prompts from progress.next_prompt on, writing OUT.partial every partial_every_s
// seconds and OUT at the end (result.finished); stops early after options.stop_after prompts.
void LabelPrompts(const BlockPilotLabelConfig& c, const BlockPilotLabelRunOptions& options,
                  const TrainingPromptSet& prompts, LabelDecoder& decoder,
                  const std::string& out_path, LabelProgress progress,
                  BlockPilotLabelResult& result) {
  BlockPilotLabels& labels = result.labels;
  const std::string partial = out_path + ".partial";
  const int64_t n_total = static_cast<int64_t>(prompts.ids.size());
  const int64_t t0 = NowMicros();
  auto stamp = [&](bool partial_file) {
    result.seconds = (NowMicros() - t0) * 1e-6;
    StampProvenance(labels, progress, c.threads, result.seconds, partial_file);
  };
  std::unique_ptr<ProgressBar> bar;
  if (options.verbose) {
    bar = std::make_unique<ProgressBar>("blockpilot label", n_total, "prompt");
    if (progress.next_prompt > 0) bar->Advance(progress.next_prompt, "resumed");
  }
  if (progress.next_prompt < n_total) {  // warmup, discarded
    decoder.Run(prompts.ids[progress.next_prompt], labels.trained_block_size, false);
  }
  int64_t last_partial_us = NowMicros();
  while (progress.next_prompt < n_total) {
    const std::vector<int32_t>& ids = prompts.ids[progress.next_prompt];
    PromptRow row;
    if (DecodePrompt(decoder, ids, labels.candidates, c.timing_repeats, &row,
                     &progress.mismatches)) {
      AppendRow(labels, ids, progress.next_prompt, row.logits, row.tau, row.ms, row.tokens,
                row.steps);
    } else {
      ++progress.skipped;
    }
    ++progress.next_prompt;
    if (bar) bar->Advance(1);
    const bool more = progress.next_prompt < n_total;
    const bool stop = more && options.stop_after > 0 && progress.next_prompt >= options.stop_after;
    const bool due = more && labels.size() > 0 &&
                     (NowMicros() - last_partial_us) * 1e-6 >= options.partial_every_s;
    if ((stop || due) && labels.size() > 0) {
      stamp(true);
      WriteBlockPilotLabels(partial, labels);
      last_partial_us = NowMicros();
    }
    if (stop) {
      if (bar) bar->Finish();
      return;
    }
  }
  if (bar) bar->Finish();
  SPECBED_CHECK(labels.size() > 0, "blockpilot label: every prompt stopped at its first token; ",
                "no labels");
  stamp(false);
  WriteBlockPilotLabels(out_path, labels);
  if (PathExists(partial)) fs::remove(partial);
  result.finished = true;
}

}  // namespace

BlockPilotLabelResult LabelBlockPilot(const BlockPilotLabelConfig& c, const std::string& out_path,
                                      const BlockPilotLabelRunOptions& options) {
  CheckConfig(c);
  SPECBED_CHECK(!out_path.empty(), "blockpilot label: -o/--output is required");
  SPECBED_CHECK(options.stop_after >= 0 && options.partial_every_s >= 0,
                "blockpilot label: stop_after and partial_every_s must be >= 0");
  at::set_num_threads(c.threads);
  LoadedTarget target = LoadModel(c.target, ParseDtype(c.dtype));
  LabelDecoder decoder(c, target);
  const int64_t trained = decoder.trained_block_size();
  const std::vector<int64_t> candidates = LabelCandidates(c, trained);
  const TrainingPromptSet prompts = BuildPrompts(c, target);
  CheckPromptLengths(c, prompts, target.model->config());
  if (options.verbose && prompts.kind != "bos") {
    std::fprintf(stderr,
                 "blockpilot label: prompts from '%s'; evaluate the predictor on other prompts\n",
                 c.prompts.c_str());
  }
  const ojson base = BaseProvenance(c, target, prompts, trained, candidates);

  BlockPilotLabelResult result;
  if (KeepComplete(out_path, base, options.verbose, result)) return result;
  const int64_t n_total = static_cast<int64_t>(prompts.ids.size());
  const LabelProgress progress =
      StartLabels(out_path + ".partial", base, n_total, options.verbose, result);
  BlockPilotLabels& labels = result.labels;
  labels.candidates = candidates;
  labels.trained_block_size = trained;
  labels.vocab_size = target.model->config().vocab_size;
  decoder.UseFixedBlocks();
  LabelPrompts(c, options, prompts, decoder, out_path, progress, result);
  return result;
}

}  // namespace specbed
