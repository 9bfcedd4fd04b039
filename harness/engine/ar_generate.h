// Autoregressive (AR) generation: prefill + one-token decode steps with the KV cache. The
// reference every speculative method is compared with (speed and output).
// Timing convention (shared with all methods): prefill_ms covers the prompt forward and the
// sampling of the first new token; decode_ms covers everything after (tokens 2..n), and
// forward_ms is the part of decode_ms spent inside the model forward.
// Checked by: tests/engine/generation_test.cpp (pinned greedy stories260K tokens, stop rules,
// seeded sampling, KV-cached decode vs. full-sequence forward).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness/engine/sampler.h"
#include "harness/engine/stop_rules.h"
#include "models/llama_model.h"
#include "models/tokenizer/tokenizer.h"

namespace specbed {

class DeviceVerifier;  // harness/engine/device_sampling.h

struct GenerationConfig {
  SamplingParams sampling;
  uint64_t seed = 0;
  StopConfig stop;
  // Record the target's top-2 logit gap at every generated token (GenerationResult::
  // token_margins); used to judge divergences from AR (a tiny margin = a numerical near-tie).
  // The margin scans are timed apart and excluded from decode_ms.
  bool record_margins = false;
  // Synthetic acceptance (speculative decoders only; TreeVerifier::SetSyntheticAcceptance): forced
  // per-position acceptance probabilities, for measuring system overhead apart from draft
  // quality. Outputs are NOT the target's: such results are flagged as not real measurements.
  // Empty = off.
  std::vector<double> synthetic_acceptance;
  // Online adapters (OSD, the cost-aware bandit) observe and learn from this generation. The
  // runner's warm-up generations set false: adapters see only the measured requests.
  bool adapt = true;
  // The prompt's category ("" = none), passed to online adapters (DraftBegin::category), e.g. to
  // normalise a throughput reward per category.
  std::string category;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (EOS excluded)
  std::string text;             // decoded, cut at a stop string
  StopReason stop_reason = StopReason::kNone;
  double prefill_ms = 0, decode_ms = 0, forward_ms = 0;
  int64_t n_steps = 0;  // decode forwards (one per token after the first)
  // With GenerationConfig::record_margins: logit(top1) - logit(top2) of the distribution each
  // generated token was drawn from (one per token, EOS excluded).
  std::vector<float> token_margins;
};

// logit(top1) - logit(top2) over logits[0..vocab) (0 for vocab < 2).
float TopTwoMargin(const float* logits, int64_t vocab);

// The next token from `logits` ([..., V] float32, one row, on any device). With `on_device`
// (the ATen path: every device, forced on the CPU in tests) the token is taken where the logits
// are (DeviceVerifier::SampleToken: argmax, or a draw from SamplingProbs) and one small copy
// comes back; otherwise (the row kernels) the host Sampler reads the row in place.
int32_t SampleNext(Sampler& sampler, const at::Tensor& logits, DeviceVerifier* on_device);

// Generates from `prompt` (non-empty ids, BOS included if wanted) into a reset `cache`
// (batch 1; its max_len bounds prompt + output). `tokenizer` may be null (no text, no stop
// strings).
GenerationResult GenerateAr(LlamaModel& model, const Tokenizer* tokenizer,
                            const std::vector<int32_t>& prompt, const GenerationConfig& config,
                            KvCache& cache);

}  // namespace specbed
