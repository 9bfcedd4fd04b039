// `specbed regen` training data (see regen.h and README.md beside it).
// Checked by: tests/train/regen_test.cpp.
#include "methods/common/train/regen.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
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
#include "methods/common/train/train_util.h"
#include "models/checkpoint/safetensors.h"
#include "models/device.h"
#include "models/model_registry.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

constexpr const char* kRegenFormat = "specbed-regen";
constexpr uint64_t kRegenSalt = 0x726567656eULL;  // "regen"

void CheckConfig(const RegenConfig& c) {
  SPECBED_CHECK(!c.prompts.empty(), "regen: --prompts is empty (give 'bos', a dataset name or ",
                "a prompt file)");
  SPECBED_CHECK(c.max_new_tokens >= 1, "regen: --max-new-tokens must be >= 1, got ",
                c.max_new_tokens);
  SPECBED_CHECK(c.threads >= 1, "regen: --threads must be >= 1, got ", c.threads);
  SPECBED_CHECK(c.n_per_prompt >= 1, "regen: --n-per-prompt must be >= 1, got ", c.n_per_prompt);
  ValidateSamplingParams(c.sampling);
  if (c.prompts == "bos") {
    SPECBED_CHECK(c.n_sequences >= 1, "regen: --prompts bos needs --n-sequences >= 1 (got ",
                  c.n_sequences, ")");
    SPECBED_CHECK(c.n_per_prompt == 1, "regen: --n-per-prompt applies to dataset prompts; with ",
                  "--prompts bos give the number of sequences with --n-sequences");
    SPECBED_CHECK(c.limit == -1 && c.categories.empty(), "regen: --limit and ",
                  "--dataset-categories apply to dataset prompts, not to --prompts bos");
  } else {
    SPECBED_CHECK(c.n_sequences == 0, "regen: --n-sequences applies to --prompts bos; with a ",
                  "dataset use --limit and --n-per-prompt");
    SPECBED_CHECK(c.limit == -1 || c.limit >= 1, "regen: --limit must be -1 (all) or >= 1, got ",
                  c.limit);
  }
}

TrainingPromptSet BuildPrompts(const RegenConfig& c, const LoadedTarget& target) {
  if (c.prompts != "bos") {
    DatasetFilter filter;
    filter.limit = c.limit;
    filter.categories = c.categories;
    return DatasetPromptSet(c.prompts, filter, target, "regen");
  }
  TrainingPromptSet set;
  set.kind = "bos";
  set.ids.assign(c.n_sequences, std::vector<int32_t>{TargetBosId(target, "regen")});
  return set;
}

// Everything that determines the sequences (compared when resuming from a partial file).
ojson RegenIdentity(const ojson& provenance) {
  ojson id;
  for (const char* key : {"format_version", "target", "prompts", "sampling", "seed",
                          "max_new_tokens", "stop_at_eos"}) {
    id[key] = provenance.contains(key) ? provenance[key] : ojson();
  }
  return id;
}

ojson BaseProvenance(const RegenConfig& c, const LoadedTarget& target,
                     const TrainingPromptSet& prompts, const std::vector<int32_t>& eos_ids) {
  const LlamaConfig& tc = target.model->config();
  ojson p;
  p["format"] = kRegenFormat;
  p["format_version"] = kRegenFormatVersion;
  p["target"] = {{"name", target.spec.name},
                 {"fingerprint", TargetFingerprint(*target.model)},
                 {"dtype", DtypeName(target.model->dtype())},
                 {"device", DeviceName(target.model->device())},
                 {"vocab_size", tc.vocab_size},
                 {"max_seq_len", tc.max_seq_len}};
  ojson pr;
  pr["source"] = c.prompts;
  pr["kind"] = prompts.kind;
  pr["categories"] = c.categories;
  pr["limit"] = c.limit;
  pr["n_prompts"] = static_cast<int64_t>(prompts.ids.size());
  pr["n_per_prompt"] = c.n_per_prompt;
  if (prompts.kind != "bos") {
    pr["chat_template"] = ChatTemplateName(target.chat_template);
    pr["turn"] = "first user turn";
  }
  p["prompts"] = pr;
  p["sampling"] = {{"temperature", c.sampling.temperature},
                   {"top_k", c.sampling.top_k},
                   {"top_p", c.sampling.top_p}};
  p["seed"] = c.seed;
  p["seeding"] = "RegenSeed(seed, prompt_index, sample_index)";
  p["max_new_tokens"] = c.max_new_tokens;
  p["stop_at_eos"] = c.stop_at_eos;
  p["eos_ids"] = eos_ids;
  return p;
}

// Adds the statistics of `data` to a copy of `base`.
ojson WithStats(const ojson& base, const RegenData& data,
                const std::map<std::string, int64_t>& stops, double wall_seconds, int64_t resumed,
                int threads) {
  ojson p = base;
  int64_t prompt_tokens = 0;
  for (int64_t pl : data.prompt_lengths) prompt_tokens += pl;
  const int64_t response_tokens = data.total_tokens() - prompt_tokens;
  p["n_sequences"] = data.size();
  p["total_tokens"] = data.total_tokens();
  p["prompt_tokens"] = prompt_tokens;
  p["response_tokens"] = response_tokens;
  p["mean_response_length"] =
      data.size() > 0 ? static_cast<double>(response_tokens) / data.size() : 0.0;
  ojson s = ojson::object();
  for (const auto& [reason, count] : stops) s[reason] = count;
  p["stop_reasons"] = s;
  p["wall_seconds"] = wall_seconds;
  p["resumed_sequences"] = resumed;
  p["threads"] = threads;
  const RunInfo env = CurrentEnvironment();
  p["specbed_version"] = env.specbed_version;
  p["specbed_git_commit"] = env.git_commit;
  p["created_utc"] = NowRfc3339();
  return p;
}

// Loads `partial` when it holds a prefix of this run (same identity and prompts); else returns
// false (the caller starts afresh).
bool LoadPartial(const std::string& partial, const ojson& base, const TrainingPromptSet& prompts,
                 int64_t n_per_prompt, int64_t vocab, bool verbose, RegenData* data,
                 std::map<std::string, int64_t>* stops, double* wall) {
  if (partial.empty() || !PathExists(partial)) return false;
  std::string why;
  try {
    RegenData d = LoadRegenData(partial, vocab);
    const ojson& p = d.provenance;
    if (RegenIdentity(p) != RegenIdentity(base)) {
      why = "it was made with other settings";
    } else if (d.size() > static_cast<int64_t>(prompts.ids.size()) * n_per_prompt) {
      why = "it holds more sequences than this run makes";
    } else {
      for (int64_t i = 0; i < d.size() && why.empty(); ++i) {
        const RegenSequence s = d.sequence(i);
        const std::vector<int32_t>& want = prompts.ids[i / n_per_prompt];
        if (s.prompt_length != static_cast<int64_t>(want.size()) ||
            !std::equal(want.begin(), want.end(), s.begin())) {
          why = StrCat("the prompt of sequence ", i, " differs (prompt file changed?)");
        }
      }
    }
    if (why.empty()) {
      if (p.contains("stop_reasons")) {
        for (const auto& [k, v] : p["stop_reasons"].items()) (*stops)[k] = v.get<int64_t>();
      }
      *wall = p.value("wall_seconds", 0.0);
      d.provenance = ojson();
      *data = std::move(d);
      return true;
    }
  } catch (const Error& e) {
    why = e.what();
  }
  if (verbose) {
    std::fprintf(stderr, "regen: discarding progress file '%s': %s\n", partial.c_str(),
                 why.c_str());
  }
  fs::remove(partial);
  return false;
}

RegenRunResult Run(const RegenConfig& c, const std::string& partial,
                   const RegenRunOptions& options) {
  CheckConfig(c);
  SPECBED_CHECK(options.stop_after >= 0 && options.partial_every_s >= 0,
                "regen: stop_after and partial_every_s must be >= 0");
  at::set_num_threads(c.threads);
  const LoadedTarget target =
      LoadModel(c.target, ParseDtype(c.dtype), "", ParseDevice(c.device, "regen --device"));
  LlamaModel& model = *target.model;
  const LlamaConfig& tc = model.config();
  const TrainingPromptSet prompts = BuildPrompts(c, target);
  const int64_t n_total = static_cast<int64_t>(prompts.ids.size()) * c.n_per_prompt;

  GenerationConfig gen;
  gen.sampling = c.sampling;
  gen.stop = StopConfigFor(target, c.max_new_tokens, {});
  gen.stop.stop_on_eos = c.stop_at_eos;
  // A whole sequence (prompt + response, EOS included) must fit one target forward: the cache
  // holds at most max_seq_len - 1 positions, the last sampled token is never fed back.
  int64_t longest = 0;
  for (size_t i = 0; i < prompts.ids.size(); ++i) {
    const int64_t len = static_cast<int64_t>(prompts.ids[i].size());
    SPECBED_CHECK(len <= tc.max_seq_len - 2, "regen: prompt ", i, " of '", c.prompts, "' has ", len,
                  " tokens; the target's context of ", tc.max_seq_len,
                  " positions leaves no room for a response");
    longest = std::max(longest, len);
  }
  KvCache cache = model.NewCache(1, std::min(longest + c.max_new_tokens, tc.max_seq_len - 1));

  const ojson base = BaseProvenance(c, target, prompts, gen.stop.eos_ids);
  RegenRunResult result;
  std::map<std::string, int64_t> stops;
  double previous_wall = 0;
  if (LoadPartial(partial, base, prompts, c.n_per_prompt, tc.vocab_size, options.verbose,
                  &result.data, &stops, &previous_wall)) {
    result.resumed = result.data.size();
    if (options.verbose) {
      std::fprintf(stderr, "regen: resuming from '%s' at sequence %lld of %lld\n", partial.c_str(),
                   static_cast<long long>(result.resumed), static_cast<long long>(n_total));
    }
  }
  RegenData& data = result.data;
  const int64_t t0 = NowMicros();
  auto stamp = [&] {
    result.seconds = (NowMicros() - t0) * 1e-6;
    data.provenance =
        WithStats(base, data, stops, previous_wall + result.seconds, result.resumed, c.threads);
  };
  auto write_partial = [&] {
    stamp();
    data.provenance["partial"] = true;
    WriteRegenData(partial, data);
  };

  std::unique_ptr<ProgressBar> bar;
  if (options.verbose) {
    bar = std::make_unique<ProgressBar>("regen", n_total, "seq");
    if (result.resumed > 0) bar->Advance(result.resumed, "resumed");
  }
  int64_t last_partial_us = NowMicros();
  std::vector<int32_t> response;
  response.reserve(c.max_new_tokens + 1);
  for (int64_t i = data.size(); i < n_total; ++i) {
    const int64_t p = i / c.n_per_prompt, s = i % c.n_per_prompt;
    gen.seed = RegenSeed(c.seed, p, s);
    const GenerationResult r = GenerateAr(model, nullptr, prompts.ids[p], gen, cache);
    response.assign(r.tokens.begin(), r.tokens.end());
    // GenerateAr drops the EOS it stopped on; keep it so the drafter learns where answers end
    // (the primary EOS id: StopConfigFor lists the tokenizer's primary EOS first).
    if (r.stop_reason == StopReason::kEos) response.push_back(gen.stop.eos_ids.front());
    data.Append(prompts.ids[p], response);
    ++stops[StopReasonName(r.stop_reason)];
    result.new_tokens += static_cast<int64_t>(response.size());
    if (bar) {
      const double secs = (NowMicros() - t0) * 1e-6;
      char note[48];
      std::snprintf(note, sizeof(note), "%.0f tok/s", secs > 0 ? result.new_tokens / secs : 0.0);
      bar->Advance(1, note);
    }
    const bool more = i + 1 < n_total;
    if (more && options.stop_after > 0 && data.size() >= options.stop_after) {
      if (!partial.empty()) write_partial();
      if (bar) bar->Finish();
      stamp();
      return result;
    }
    if (more && !partial.empty() &&
        (NowMicros() - last_partial_us) * 1e-6 >= options.partial_every_s) {
      write_partial();
      last_partial_us = NowMicros();
    }
  }
  if (bar) bar->Finish();
  stamp();
  result.finished = true;
  return result;
}

}  // namespace

int32_t TargetBosId(const LoadedTarget& target, const std::string& who) {
  int32_t bos = static_cast<int32_t>(target.model->config().bos_token_id);
  if (bos < 0 && target.tokenizer) bos = target.tokenizer->bos_id();
  SPECBED_CHECK(bos >= 0, who, ": target '", target.spec.name, "' has no BOS token; --prompts bos ",
                "needs one (use a dataset instead)");
  return bos;
}

TrainingPromptSet DatasetPromptSet(const std::string& prompts, const DatasetFilter& filter,
                                   const LoadedTarget& target, const std::string& who) {
  TrainingPromptSet set;
  set.kind = DatasetRegistry::Builtin().Has(prompts) ? "dataset" : "file";
  const std::vector<Prompt> loaded = LoadDataset(prompts, filter);
  SPECBED_CHECK(!loaded.empty(), who, ": --prompts '", prompts, "' selects no prompts");
  for (const Prompt& p : loaded) set.ids.push_back(BuildPromptIds(target, {{"user", p.turns[0]}}));
  return set;
}

RegenSequence RegenData::sequence(int64_t i) const {
  RegenSequence s;
  s.tokens = tokens.data() + offsets[i];
  s.length = offsets[i + 1] - offsets[i];
  s.prompt_length = prompt_lengths[i];
  return s;
}

void RegenData::Append(const std::vector<int32_t>& prompt, const std::vector<int32_t>& response) {
  if (offsets.empty()) offsets.push_back(0);
  tokens.insert(tokens.end(), prompt.begin(), prompt.end());
  tokens.insert(tokens.end(), response.begin(), response.end());
  offsets.push_back(static_cast<int64_t>(tokens.size()));
  prompt_lengths.push_back(static_cast<int64_t>(prompt.size()));
}

uint64_t RegenSeed(uint64_t seed, int64_t prompt_index, int64_t sample_index) {
  return DeriveSeed(DeriveSeed(seed, static_cast<uint64_t>(prompt_index), kRegenSalt),
                    static_cast<uint64_t>(sample_index), kRegenSalt);
}

void ValidateRegenData(const RegenData& data, const std::string& where, int64_t vocab_size) {
  const ojson& p = data.provenance;
  SPECBED_CHECK(p.is_object() && p.contains("format_version"), where,
                ": provenance has no 'format_version' (not a specbed regen file?)");
  const ojson& version = p["format_version"];
  SPECBED_CHECK(version.is_number_integer() && version.get<int64_t>() == kRegenFormatVersion, where,
                ": format version ", version.dump(), ", this build reads version ",
                kRegenFormatVersion, " (regenerate the file with this specbed)");
  const int64_t n = data.size();
  const int64_t total = data.total_tokens();
  SPECBED_CHECK(static_cast<int64_t>(data.offsets.size()) == n + 1, where, ": 'offsets' has ",
                data.offsets.size(), " entries, expected n + 1 = ", n + 1, " for the ", n,
                " sequences of 'prompt_lengths'");
  SPECBED_CHECK(data.offsets[0] == 0, where, ": offsets[0] is ", data.offsets[0], ", expected 0");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t a = data.offsets[i], b = data.offsets[i + 1];
    SPECBED_CHECK(b > a, where, ": offsets must increase (sequence ", i, " spans [", a, ", ", b,
                  "))");
    SPECBED_CHECK(b <= total, where, ": offsets[", i + 1, "] = ", b, " is past the ", total,
                  " tokens");
    const int64_t pl = data.prompt_lengths[i];
    SPECBED_CHECK(pl >= 1 && pl <= b - a, where, ": sequence ", i, " has prompt_length ", pl,
                  ", expected 1 <= prompt_length <= its length ", b - a);
  }
  SPECBED_CHECK(data.offsets[n] == total, where, ": offsets end at ", data.offsets[n], " but ",
                "there are ", total, " tokens");
  for (int64_t t = 0; t < total; ++t) {
    const int32_t id = data.tokens[t];
    SPECBED_CHECK(id >= 0 && (vocab_size <= 0 || id < vocab_size), where, ": token ", t, " has id ",
                  id, ", outside the vocabulary [0, ",
                  vocab_size > 0 ? std::to_string(vocab_size) : std::string("inf"), ")");
  }
  if (p.contains("n_sequences")) {
    SPECBED_CHECK(p["n_sequences"] == n, where, ": provenance says ", p["n_sequences"].dump(),
                  " sequences, the arrays hold ", n);
  }
  if (p.contains("total_tokens")) {
    SPECBED_CHECK(p["total_tokens"] == total, where, ": provenance says ", p["total_tokens"].dump(),
                  " tokens, the arrays hold ", total);
  }
}

std::string RegenDataFingerprint(const RegenData& data) {
  uint64_t h = Fnv1a64(data.tokens.data(), data.tokens.size() * sizeof(int32_t));
  h = Fnv1a64(data.offsets.data(), data.offsets.size() * sizeof(int64_t), h);
  h = Fnv1a64(data.prompt_lengths.data(), data.prompt_lengths.size() * sizeof(int64_t), h);
  return Hex64(h);
}

RegenData GenerateRegenData(const RegenConfig& config, bool verbose) {
  RegenRunOptions options;
  options.verbose = verbose;
  return Run(config, "", options).data;
}

RegenRunResult RegenerateToFile(const RegenConfig& config, const std::string& path,
                                const RegenRunOptions& options) {
  SPECBED_CHECK(!path.empty(), "regen: -o/--output is required");
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) fs::create_directories(parent);
  const std::string partial = path + ".partial";
  RegenRunResult result = Run(config, partial, options);
  if (result.finished) {
    WriteRegenData(path, result.data);
    fs::remove(partial);
  }
  return result;
}

void WriteRegenData(const std::string& path, const RegenData& data) {
  ValidateRegenData(data, "regen data for '" + path + "'");
  const int64_t n = data.size();
  std::vector<SafetensorsTensorView> views = {{"tokens",
                                               SafetensorsDtype::kI32,
                                               {data.total_tokens()},
                                               data.tokens.data(),
                                               data.tokens.size() * sizeof(int32_t)},
                                              {"offsets",
                                               SafetensorsDtype::kI64,
                                               {n + 1},
                                               data.offsets.data(),
                                               data.offsets.size() * sizeof(int64_t)},
                                              {"prompt_lengths",
                                               SafetensorsDtype::kI64,
                                               {n},
                                               data.prompt_lengths.data(),
                                               data.prompt_lengths.size() * sizeof(int64_t)}};
  WriteSafetensors(path, views, {{kRegenMetadataKey, data.provenance.dump()}});
}

RegenData LoadRegenData(const std::string& path, int64_t vocab_size) {
  const auto file = SafetensorsFile::Open(path);
  const auto& meta = file->metadata();
  const auto it = meta.find(kRegenMetadataKey);
  SPECBED_CHECK(it != meta.end(), path, ": not a specbed regen file (no '", kRegenMetadataKey,
                "' metadata)");
  RegenData data;
  data.provenance = ojson::parse(it->second, nullptr, /*allow_exceptions=*/false);
  SPECBED_CHECK(data.provenance.is_object(), path, ": metadata '", kRegenMetadataKey,
                "' is not a JSON object");
  auto read = [&](const char* name, SafetensorsDtype dtype, auto& out) {
    const SafetensorsEntry* e = file->Find(name);
    SPECBED_CHECK(e != nullptr, path, ": missing tensor '", name, "'");
    SPECBED_CHECK(e->dtype == dtype && e->shape.size() == 1, path, ": tensor '", name,
                  "' must be 1-D ", SafetensorsDtypeName(dtype), ", got ",
                  SafetensorsDtypeName(e->dtype), " with ", e->shape.size(), " dimensions");
    out.resize(e->shape[0]);
    if (e->nbytes > 0) std::memcpy(out.data(), e->data, e->nbytes);
  };
  read("tokens", SafetensorsDtype::kI32, data.tokens);
  read("offsets", SafetensorsDtype::kI64, data.offsets);
  read("prompt_lengths", SafetensorsDtype::kI64, data.prompt_lengths);
  ValidateRegenData(data, path, vocab_size);
  return data;
}

}  // namespace specbed
