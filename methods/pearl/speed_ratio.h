// The speed ratio c = T_target / T_draft of one-token forwards, which PEARL and SpecBranch use as
// their draft chunk length (the `gamma` / `gamma_max` knob value 0 = "auto": the chunk is
// ceil(c), measured once when the decoder is built). Each side is timed on the calling thread
// with its own intra-op budget (ThreadBudget): the median of `reps` single-token forwards after
// a `context`-token prefix, after one warm-up forward. The papers assume a verify of gamma
// tokens costs about one forward (GPU); on a CPU target it does not, so the auto chunk can be
// too long there (methods/pearl/README.md).
// Checked by: tests/methods/pearl_test.cpp (Pearl.AutoChunkFollowsTheMeasuredSpeedRatio).
#pragma once

#include <cstdint>
#include <string>

#include "models/llama_model.h"

namespace specbed {

struct SpeedRatio {
  double target_ms = 0, draft_ms = 0;  // median one-token forward times
  double c = 0;                        // target_ms / draft_ms
};

SpeedRatio MeasureSpeedRatio(LlamaModel& target, LlamaModel& draft, int target_threads,
                             int draft_threads, int64_t context = 32, int reps = 7);

// ceil(c) clamped to [1, max_chunk].
int64_t ChunkForSpeedRatio(double c, int64_t max_chunk);

// The chunk for a knob value: `knob` > 0 as is; 0 = ChunkForSpeedRatio of a fresh measurement,
// reported on stderr as "<method>: <knob_name> auto = N (c = ...)".
int64_t ResolveChunkKnob(int64_t knob, const std::string& method, const std::string& knob_name,
                         LlamaModel& target, LlamaModel& draft, int target_threads,
                         int draft_threads, int64_t max_chunk);

}  // namespace specbed
