// BlockPilot's offline label data (`specbed blockpilot label`): for every prompt of a TRAINING
// prompt set, the target's logits at the last prompt position (p(x) before the input transform)
// and, for every candidate block size b in {B − k, …, B + k} (b >= 2), one greedy speculative
// decode with the DFlash chain drafter at block size b (the `dflash` method's decoder), recording
// τ(b; x) = tokens emitted per verify step and the decode throughput. Labels (argmax τ, or argmax
// throughput) are derived at training time, so one file serves both criteria.
// The file is safetensors with a JSON provenance record; an interrupted run resumes from
// OUT.partial (written every partial_every_s seconds, atomically) and OUT is written atomically.
// Format and knobs: methods/blockpilot/README.md.
// Checked by: tests/methods/blockpilot_test.cpp (τ per candidate equals running `dflash` at that
// block size; the logits equal the target's prefill; resume equals an uninterrupted run; file
// round trip and malformed files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace specbed {

// The safetensors metadata key holding the provenance JSON; the format version this build writes.
inline constexpr const char* kBlockPilotLabelsKey = "specbed_blockpilot_labels";
inline constexpr int64_t kBlockPilotLabelsVersion = 1;

struct BlockPilotLabelConfig {
  std::string target = "stories260K";  // registry name or path
  std::string dtype = "float32";       // target dtype: float32 | bfloat16
  std::string drafter;                 // DFlash checkpoint directory (required)
  // Prompt set: "bos" = n_prompts prompts [BOS] + prompt_tokens tokens sampled from the target at
  // T = 1 (seeded per prompt; never an evaluation set), or a dataset name / .jsonl / .json prompt
  // file (first user turn through the chat template, as `specbed run`).
  std::string prompts = "bos";
  int64_t n_prompts = 512;              // bos mode
  int64_t prompt_tokens = 16;           // bos mode: sampled tokens after BOS
  std::vector<std::string> categories;  // dataset mode: category filter
  int64_t limit = -1;                   // dataset mode: first N prompts (-1 = all)
  int64_t radius = 2;                   // k
  int64_t max_new_tokens = 128;         // per decode (greedy, stops at EOS)
  // Timed decodes per (prompt, candidate); throughput uses the fastest (tokens are identical).
  int64_t timing_repeats = 1;
  uint64_t seed = 0;  // bos prompt sampling
  int threads = 1;    // LibTorch CPU threads
};

// The label data, row-major per prompt.
struct BlockPilotLabels {
  std::vector<int64_t> candidates;  // [C] ascending block sizes
  int64_t trained_block_size = 0;
  int64_t vocab_size = 0;
  std::vector<float> logits;            // [N, V] target logits at the last prompt position
  std::vector<double> tau;              // [N, C] emitted tokens per verify step
  std::vector<double> decode_ms;        // [N, C] decode wall time (fastest repeat)
  std::vector<int64_t> decode_tokens;   // [N, C] tokens after the first (= sum of emitted)
  std::vector<int64_t> steps;           // [N, C] verify steps
  std::vector<int32_t> prompt_tokens;   // prompts concatenated
  std::vector<int64_t> prompt_offsets;  // [N + 1]
  nlohmann::ordered_json provenance;    // see README.md

  int64_t size() const { return static_cast<int64_t>(prompt_offsets.size()) - 1; }
  int64_t n_candidates() const { return static_cast<int64_t>(candidates.size()); }
  // Decode throughput of prompt i at candidate c, tokens/s (0 when decode_ms is 0).
  double TokensPerSecond(int64_t i, int64_t c) const;
  const float* logits_row(int64_t i) const { return logits.data() + i * vocab_size; }
};

// Per-prompt labels (indices into candidates): criterion "tau" (argmax τ) or "throughput"
// (argmax tokens/s); ties by ChooseBlockLabel. Errors name the criterion.
std::vector<int64_t> BlockPilotLabelIndices(const BlockPilotLabels& labels,
                                            const std::string& criterion);

struct BlockPilotLabelRunOptions {
  bool verbose = true;
  double partial_every_s = 30;  // seconds between writes of OUT.partial (0 = every prompt)
  int64_t stop_after = 0;       // test hook: stop after this many prompts in total (0 = off)
};

struct BlockPilotLabelResult {
  BlockPilotLabels labels;
  bool finished = false;  // OUT was written (or already complete)
  int64_t resumed = 0;    // prompts taken from OUT.partial or an existing OUT
  double seconds = 0;     // labelling wall time of this process
};

// Labels into `out_path` (creating its directory); reruns continue from OUT.partial when its
// identity matches (else it is discarded), an existing complete OUT with the same identity is
// returned as it is. Throws specbed::Error for impossible settings, an unknown target / dataset,
// a drafter that does not fit the target.
BlockPilotLabelResult LabelBlockPilot(const BlockPilotLabelConfig& config,
                                      const std::string& out_path,
                                      const BlockPilotLabelRunOptions& options = {});

// Writes / reads the label file (safetensors, validated; errors name the file).
void WriteBlockPilotLabels(const std::string& path, const BlockPilotLabels& labels);
BlockPilotLabels LoadBlockPilotLabels(const std::string& path);
// Throws naming `where` for inconsistent sizes or values (τ < 1 with steps, negative counts).
void ValidateBlockPilotLabels(const BlockPilotLabels& labels, const std::string& where);

}  // namespace specbed
