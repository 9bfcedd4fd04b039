// Training data for drafters (`specbed regen`): the target's own responses to a prompt set,
// generated with GenerateAr, one seed per (prompt, sample) so every sequence is deterministic and
// independent of how many others are generated or in which order. The result is one safetensors
// file (tokens, offsets, prompt lengths + a JSON provenance record); LoadRegenData validates it.
// Long runs write their progress to PATH.partial and continue from it when rerun. Knobs, file
// format and determinism rules: methods/common/train/README.md ("Training data: specbed regen").
// Checked by: tests/train/regen_test.cpp (round trip, provenance, determinism, equality with
// GenerateAr, resume, malformed files) and the `specbed regen` CLI test there.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "datasets/dataset.h"
#include "harness/engine/sampler.h"
#include "models/model_registry.h"

namespace specbed {

// The format version this build writes and reads (provenance "format_version").
inline constexpr int64_t kRegenFormatVersion = 1;
// The safetensors metadata key holding the provenance JSON.
inline constexpr const char* kRegenMetadataKey = "specbed_regen";

struct RegenConfig {
  // Target: a model registry name or path, run as `dtype` ("float32" or "bfloat16").
  std::string target = "stories260K";
  std::string dtype = "float32";
  // "cpu", "cuda" or "cuda:N": where the target runs (checked before anything is written).
  std::string device = "cpu";
  // "bos": unconditional, every prompt is [BOS] and `n_sequences` sequences are generated.
  // Otherwise a dataset registry name (`specbed list datasets`) or a .jsonl/.json prompt file;
  // each prompt's first user turn goes through the target's chat template (BuildPromptIds).
  std::string prompts = "bos";
  std::vector<std::string> categories;  // dataset mode: category filter (empty = all)
  int64_t limit = -1;                   // dataset mode: first `limit` prompts (-1 = all)
  int64_t n_per_prompt = 1;             // dataset mode: samples per prompt
  int64_t n_sequences = 0;              // bos mode: how many sequences (>= 1 required there)
  int64_t max_new_tokens = 256;
  SamplingParams sampling{/*temperature=*/1.0, /*top_p=*/1.0, /*top_k=*/0};
  uint64_t seed = 0;
  // Stop a response at the target's EOS (the EOS token is kept as the response's last token);
  // false = always generate max_new_tokens tokens.
  bool stop_at_eos = true;
  int threads = 1;  // LibTorch CPU threads (at::set_num_threads)
};

// One sequence of a RegenData: prompt ids followed by response ids.
struct RegenSequence {
  const int32_t* tokens = nullptr;
  int64_t length = 0;         // prompt + response tokens
  int64_t prompt_length = 0;  // 1 <= prompt_length <= length
  const int32_t* begin() const { return tokens; }
  const int32_t* end() const { return tokens + length; }
  int32_t operator[](int64_t i) const { return tokens[i]; }
  int64_t response_length() const { return length - prompt_length; }
};

struct RegenData {
  std::vector<int32_t> tokens;   // every sequence's tokens, concatenated
  std::vector<int64_t> offsets;  // [size() + 1]: sequence i is tokens[offsets[i], offsets[i+1])
  std::vector<int64_t> prompt_lengths;  // [size()]
  nlohmann::ordered_json provenance;    // see README.md; "format_version" == kRegenFormatVersion

  int64_t size() const { return static_cast<int64_t>(prompt_lengths.size()); }
  int64_t total_tokens() const { return static_cast<int64_t>(tokens.size()); }
  RegenSequence sequence(int64_t i) const;  // i in [0, size()) (unchecked)
  void Append(const std::vector<int32_t>& prompt, const std::vector<int32_t>& response);
};

// The sampling seed of sample `sample_index` of prompt `prompt_index` (bos mode: prompt index =
// sequence index, sample index 0). Sequence order in the data is prompt-major.
uint64_t RegenSeed(uint64_t seed, int64_t prompt_index, int64_t sample_index);

// Throws specbed::Error naming `where` and the first thing wrong: offsets not starting at 0,
// not increasing or not ending at the token count; a prompt length outside [1, length]; a token
// outside [0, vocab_size) (vocab_size <= 0: only >= 0 is checked); provenance without the
// current "format_version" or with "n_sequences" / "total_tokens" that disagree with the arrays.
void ValidateRegenData(const RegenData& data, const std::string& where, int64_t vocab_size = -1);

// 16 hex digits over tokens, offsets and prompt lengths (not the provenance): identifies the data
// in feature-cache manifests.
std::string RegenDataFingerprint(const RegenData& data);

// Generates in memory (no progress file). Throws specbed::Error for impossible settings, an
// unknown target / dataset / category, or a prompt that does not fit the target's context.
RegenData GenerateRegenData(const RegenConfig& config, bool verbose = true);

struct RegenRunOptions {
  bool verbose = true;
  // Seconds between writes of the progress file PATH.partial (0 = after every sequence).
  double partial_every_s = 30;
  // Test hook: stop after this many sequences in total (0 = off), leaving PATH.partial (and no
  // PATH) behind, as an interruption would.
  int64_t stop_after = 0;
};

struct RegenRunResult {
  RegenData data;          // complete unless stopped by stop_after
  bool finished = false;   // PATH was written
  int64_t resumed = 0;     // sequences taken from PATH.partial
  double seconds = 0;      // generation wall time of this process
  int64_t new_tokens = 0;  // response tokens generated by this process
};

// Generates into `path` (WriteRegenData), creating its directory. Progress goes to
// `path`.partial every options.partial_every_s seconds; a rerun with the same settings continues
// from it (the per-sequence seeds make the result identical to an uninterrupted run); a partial
// file from other settings is discarded. The partial file is removed once `path` is written.
RegenRunResult RegenerateToFile(const RegenConfig& config, const std::string& path,
                                const RegenRunOptions& options = {});

// Writes `data` (validated first) to `path` as safetensors: tokens I32 [total], offsets I64
// [n + 1], prompt_lengths I64 [n], metadata kRegenMetadataKey = provenance JSON.
void WriteRegenData(const std::string& path, const RegenData& data);

// Reads and validates a file written by WriteRegenData (see ValidateRegenData; vocab_size > 0
// also checks every token id). Errors name `path` and what is wrong.
RegenData LoadRegenData(const std::string& path, int64_t vocab_size = -1);

// The prompts a training-data job runs (`specbed regen`, `specbed blockpilot label`): kind "bos"
// (the caller fills the BOS-started sequences), "dataset" or "file"; one token-id prompt each.
struct TrainingPromptSet {
  std::string kind;
  std::vector<std::vector<int32_t>> ids;
};

// The target's BOS id (its config's, else its tokenizer's); fails naming `who` and the target
// when it has none ("--prompts bos needs one").
int32_t TargetBosId(const LoadedTarget& target, const std::string& who);

// The first user turn of each prompt of dataset or prompt file `prompts` (through `filter`),
// in the target's chat template (the later turns need the target's own earlier answer); fails
// naming `who` when nothing is selected.
TrainingPromptSet DatasetPromptSet(const std::string& prompts, const DatasetFilter& filter,
                                   const LoadedTarget& target, const std::string& who);

}  // namespace specbed
