// Captured step programs (issue 45, step 4): a decode or verify step whose ops read and write
// only fixed buffers is run eagerly once (the warm-up: lazy allocations, cuBLAS handles, the
// caching allocator's blocks), then captured once into a CUDA graph and replayed from then on,
// one launch for the ~10 a layer the step makes. On the CPU there is nothing to capture: the
// "capture" and every "replay" run the program eagerly, so CPU CI runs the same bookkeeping (which
// step is warm-up, capture or replay, the counters) and the same padded shapes a GPU replays.
// The caller keys one StepGraph per step shape and per set of buffer addresses the program reads
// or writes (models/llama_forward_aten.h): a graph replays fixed addresses, so a changed address
// is a different graph, never a replay into the wrong memory.
// Knob: SPECBED_GRAPHS = on | off (unset: off on every device until a GPU run proves replay =
// eager; anything else is an error naming the variable). Widths: a step of n <= 64 new tokens
// is padded up to StepBucket(n) (kStepBuckets) by the verifier, so at most 10 graphs serve every
// decode and verify step of a model, cache and set of outputs.
// Checked by: tests/engine/step_graph_test.cpp (graphs on = off: logits, verdicts bit for bit on
// random trees at three context lengths, counters; the knob's parsing; StepGraphCuda on a GPU:
// replay = eager bit for bit).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <functional>

namespace specbed {

enum class GraphMode { kOff, kOn };
// SPECBED_GRAPHS: "on" | "off" | unset (= off); anything else throws naming the variable.
GraphMode ResolveGraphMode();
const char* GraphModeName(GraphMode mode);

// The widths a step is padded to: powers of two, with 12, 24 and 48 between the larger ones so
// that no step pays more than a third of its rows in padding above 8 (a 33-row DDTree step runs
// 48 rows, not 64).
inline constexpr int64_t kStepBuckets[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
inline constexpr int64_t kMaxGraphTokens = 64;
// The padded width of a step of n >= 1 new tokens: the smallest bucket >= n; n itself above 64
// (such steps run eagerly).
int64_t StepBucket(int64_t n);

// What the captured steps of a model did (printed by bench, recorded with every case).
struct GraphStats {
  int64_t eager_warmups = 0;  // first runs of a step shape (eager, before its capture)
  int64_t captures = 0;       // graphs captured (each followed by its first replay)
  int64_t replays = 0;        // replays, the first one after each capture included
  int64_t dropped = 0;        // graphs released when a model held too many
  double capture_s = 0.0;     // wall time inside captures (never part of a step's timing)
};

class StepGraph {
 public:
  StepGraph() = default;
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // The first call runs `program` eagerly; the second captures it on `device` (CUDA: into a graph
  // on a side stream, in the process-wide graph memory pool, then replays it once: a capture
  // computes nothing) and every later call replays. On the CPU each call runs `program`. A
  // failed capture throws naming the step (`what`) and SPECBED_GRAPHS=off as the way around.
  void Run(const at::Device& device, const std::function<void()>& program, const char* what,
           GraphStats& stats);
  bool captured() const { return captured_; }

 private:
  void Capture(const at::Device& device, const std::function<void()>& program, const char* what);

  bool warm_ = false, captured_ = false;
  void* graph_ = nullptr;  // CUDA: the backend's graph (kernels/cuda_backend.h)
};

}  // namespace specbed
