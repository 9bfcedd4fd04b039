// Per-step engine counters (issue 45, step 6): host launches, host reads, captured-step replays
// and captures, and copies each way, counted process-wide so the decoder loop takes a step's share
// as the difference of two readings (ReadEngineCounters before and after).
// - Replays and captures: every StepGraph::Run that replays or captures (the CPU's eager
//   "replays" included: the same bookkeeping a GPU runs).
// - Copies: SpecBed's transfer points announce themselves with a TransferScope on any device
//   (StepStaging::Upload, HostStaging::Upload, CopyToHost), so the CPU counts the copies a GPU
//   makes there; while the op counter runs (SPECBED_COUNT_OPS=on, models/op_trace.h OpCounting) a
//   cross-device copy anywhere else counts too.
// - Launches and host reads: only while the op counter runs (an at::RecordFunction callback on
//   every dispatcher call, a cost no timed step should carry by default); -1 otherwise.
// Checked by: tests/engine/step_ops_test.cpp (EngineCounters.*: a verify step's one upload and one
// download, replays with graphs on, launches under OpCounting, a stray copy counted).
#pragma once

#include <atomic>
#include <cstdint>

namespace specbed {

struct EngineCounters {
  int64_t launches = -1;    // launching dispatcher calls (op counter only; -1: not counted)
  int64_t host_reads = -1;  // item / nonzero / ... (op counter only; -1: not counted)
  int64_t replays = 0;      // captured steps replayed
  int64_t captures = 0;     // captured steps captured
  int64_t h2d = 0;          // host-to-device copies
  int64_t d2h = 0;          // device-to-host copies
  // this - before, field by field (-1 stays -1).
  EngineCounters Since(const EngineCounters& before) const;
};

// The process's counters now.
EngineCounters ReadEngineCounters();

enum class Transfer { kHostToDevice, kDeviceToHost };

// One announced copy: counted once, and while alive the op counter does not count the
// cross-device copy_ calls made on this thread (they are this transfer). Each scope counts, so
// announce a transfer at one level only.
class TransferScope {
 public:
  explicit TransferScope(Transfer direction);
  ~TransferScope();
  TransferScope(const TransferScope&) = delete;
  TransferScope& operator=(const TransferScope&) = delete;
  // Whether the calling thread is inside an announced transfer.
  static bool Active();
};

namespace engine_counters_detail {
// The op counter's side (models/op_trace.cpp) and StepGraph's.
void AddLaunches(int64_t n);
void AddHostReads(int64_t n);
void AddCopy(Transfer direction);
void AddReplay();
void AddCapture();
// Launch counting on / off (launches and host reads read -1 while off).
void SetOpCounting(bool on);
}  // namespace engine_counters_detail

}  // namespace specbed
