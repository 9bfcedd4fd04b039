// Devices: parsing a device name from a config or the command line, checking that it exists
// before anything runs, and synchronizing it at phase boundaries so a wall clock read after the
// sync includes the device work queued before it. Written against c10's device-guard interface,
// so this file needs no CUDA headers and works with any LibTorch backend.
// Checked by: tests/engine/speculative_test.cpp (DeviceMarks on the CPU: marks tile the host
// clock; the per-phase device time of every step), tests/engine/aten_forward_test.cpp (parsing,
// SameDevice, "cuda" refused on a CPU-only build naming the device, CPU sync is a no-op),
// tests/cli/cli_test.cpp (--device cuda exits 1), tests/methods/pearl_test.cpp (a side thread's
// stream; on a GPU, PearlCuda).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/timer.h"

namespace specbed {

// "cpu" | "cuda" | "cuda:N" (N >= 0); anything else fails naming `context` and the accepted
// spellings. Only parses: availability is CheckDeviceAvailable's job.
at::Device ParseDevice(const std::string& name, const std::string& context);
// The canonical name ParseDevice reads back: "cpu", "cuda", "cuda:1".
std::string DeviceName(const at::Device& device);
// True when `a` and `b` hold the same tensors: same type and the same index, an index-less device
// ("cuda", as ParseDevice reads it) standing for the backend's current one (where tensors moved
// `.to("cuda")` land; a tensor's own device always has its index, "cuda:0"). Compare a tensor's
// device with a parsed one through this, never with ==.
bool SameDevice(const at::Device& a, const at::Device& b);

// Fails (specbed::Error naming `context` and the device) unless `device` can run tensors here:
// the CPU always can; "cuda[:N]" needs a CUDA build of LibTorch and a visible device N.
void CheckDeviceAvailable(const at::Device& device, const std::string& context);

// Waits until the work queued on `device`'s current stream has finished (no-op on the CPU).
// Phase timers call it before reading the clock on a device that runs asynchronously.
void SynchronizeDevice(const at::Device& device);

// True when `device` runs work asynchronously to the host (everything but the CPU): the timers
// must synchronize it.
inline bool IsAsyncDevice(const at::Device& device) {
  return !device.is_cpu();
}

// The phase clock: NowNanos() read after `device` finished its queued work (a plain NowNanos()
// on the CPU), so a phase boundary charges device work to the phase that queued it.
inline int64_t DeviceNowNanos(const at::Device& device) {
  if (IsAsyncDevice(device)) SynchronizeDevice(device);
  return NowNanos();
}

// Device time between marks on `device`'s current stream (issue 45, step 6: the phases' device
// time beside their synced wall time). On a device each mark records a timing event (c10::Event,
// the backend's default flags: timing on), read once the work before it has completed (after a
// SynchronizeDevice); on the CPU, whose ops run synchronously on the host, a mark reads the host
// clock, which is the device's. The events are made once and reused: marking allocates nothing
// after the first step.
class DeviceMarks {
 public:
  explicit DeviceMarks(const at::Device& device);
  ~DeviceMarks();
  DeviceMarks(const DeviceMarks&) = delete;
  DeviceMarks& operator=(const DeviceMarks&) = delete;

  // Forgets every mark (the events stay for reuse).
  void Clear() { n_ = 0; }
  // Keeps only the last mark, as mark 0 (a step starts where the previous one ended); none
  // before the first Mark().
  void KeepLast();
  void Mark();
  int64_t size() const { return n_; }
  // Microseconds from mark i - 1 to mark i (1 <= i < size()); the work before mark i must have
  // completed (a SynchronizeDevice after it).
  double ElapsedUs(int64_t i) const;

 private:
  struct Events;  // c10::Event per mark (a device), else unused
  at::Device device_;
  std::unique_ptr<Events> events_;
  std::vector<int64_t> host_ns_;  // the CPU's marks
  int64_t n_ = 0;
};

// Gives the calling thread its own stream on `device` while it lives: a stream from the backend's
// pool becomes the thread's current stream (CUDA streams are per thread), so work that two host
// threads queue can overlap on the device; SynchronizeDevice on that thread then waits for this
// stream only. A no-op on the CPU. The previous current stream is restored on destruction.
// Used by PEARL's and SpecBranch's draft thread (methods/pearl/side_thread.h).
class ScopedSideStream {
 public:
  explicit ScopedSideStream(const at::Device& device);
  ~ScopedSideStream();
  ScopedSideStream(const ScopedSideStream&) = delete;
  ScopedSideStream& operator=(const ScopedSideStream&) = delete;

 private:
  at::Device device_;
  std::optional<c10::Stream> previous_;
};

// One line per visible CUDA device ("NVIDIA H100 80GB HBM3, compute capability 9.0, driver
// 13.0, CUDA runtime 13.0"), "" when there is none or this binary has no CUDA kernels
// (kernels/cuda_backend.h: only binaries linking specbed_cuda have them).
std::string DescribeCudaDevices();

}  // namespace specbed
