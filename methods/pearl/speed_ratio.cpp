// Speed ratio c = T_target / T_draft for PEARL / SpecBranch chunk lengths (speed_ratio.h).
#include "methods/pearl/speed_ratio.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "methods/pearl/side_thread.h"

namespace specbed {
namespace {

double MedianForwardMs(LlamaModel& model, int threads, int64_t context, int reps) {
  ThreadBudget budget(threads);
  const int64_t len = std::min<int64_t>(context, model.config().max_seq_len - reps - 2);
  KvCache cache = model.NewCache(1, len + reps + 2);
  const at::Tensor prefix = at::ones({1, std::max<int64_t>(len, 1)}, at::kLong);
  model.Forward(prefix, cache);
  const at::Tensor one = at::ones({1, 1}, at::kLong);
  model.Forward(one, cache);  // warm-up
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    model.Forward(one, cache);
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

SpeedRatio MeasureSpeedRatio(LlamaModel& target, LlamaModel& draft, int target_threads,
                             int draft_threads, int64_t context, int reps) {
  SpeedRatio r;
  r.target_ms = MedianForwardMs(target, std::max(1, target_threads), context, std::max(1, reps));
  r.draft_ms = MedianForwardMs(draft, std::max(1, draft_threads), context, std::max(1, reps));
  r.c = r.target_ms / std::max(r.draft_ms, 1e-6);
  return r;
}

int64_t ChunkForSpeedRatio(double c, int64_t max_chunk) {
  if (!std::isfinite(c)) return max_chunk;
  return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(c - 1e-9)), 1, max_chunk);
}

int64_t ResolveChunkKnob(int64_t knob, const std::string& method, const std::string& knob_name,
                         LlamaModel& target, LlamaModel& draft, int target_threads,
                         int draft_threads, int64_t max_chunk) {
  if (knob > 0) return knob;
  const SpeedRatio r = MeasureSpeedRatio(target, draft, target_threads, draft_threads);
  const int64_t chunk = ChunkForSpeedRatio(r.c, max_chunk);
  std::fprintf(stderr,
               "%s: %s auto = %lld (c = %.2f: one-token forward %.3f ms target, %.3f ms draft)\n",
               method.c_str(), knob_name.c_str(), static_cast<long long>(chunk), r.c, r.target_ms,
               r.draft_ms);
  return chunk;
}

}  // namespace specbed
