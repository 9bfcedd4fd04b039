// A second host thread with its own LibTorch intra-op thread budget, for decoders that overlap
// drafting with verification (PEARL, SpecBranch).
//
// Thread budgets. With LibTorch's OpenMP backend (the Debian/PyTorch CPU builds), the intra-op
// width at::parallel_for uses is the calling thread's OpenMP `nthreads-var` ICV, which is
// per-thread: at::set_num_threads(n) on a thread sets that thread's ICV (omp_set_num_threads)
// and, as a side effect, a process-global default that only threads which have not yet run an
// ATen parallel op pick up on first use (at::internal::lazy_init_num_threads). So each side can
// have its own width: the side thread sets its budget once on start (before its first parallel
// op); the calling thread sets its budget with a ThreadBudget guard around the decode and restores
// its previous width (which also restores the global default) on exit. Each root thread that
// enters an OpenMP parallel region gets its own team, so the two sides never share workers; at a
// budget of 1 a side runs no OpenMP workers at all.
//
// Devices. On a GPU the worker queues its work on its own stream (ScopedSideStream,
// models/device.h), so the draft side's kernels can overlap the verify side's. Start() first waits
// for the caller's stream (the job may read what the caller queued) and the worker waits for its
// own stream before it reports the job done, so after Wait() everything the job queued has run.
// Checked by: tests/methods/pearl_test.cpp (budgets are per thread; overlap of the two sides).
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace specbed {

// Sets the calling thread's intra-op width for its lifetime and restores the previous one.
class ThreadBudget {
 public:
  explicit ThreadBudget(int threads);
  ~ThreadBudget();
  ThreadBudget(const ThreadBudget&) = delete;
  ThreadBudget& operator=(const ThreadBudget&) = delete;

 private:
  int saved_;
};

// One worker thread that runs one job at a time: Start(job) hands it over and returns at once;
// Wait() blocks until it finished (rethrowing its exception). The worker's intra-op width is
// `threads` (set on the worker itself before any job); on a non-CPU `device` it has its own stream.
class SideThread {
 public:
  explicit SideThread(int threads, at::Device device = at::kCPU);
  ~SideThread();
  SideThread(const SideThread&) = delete;
  SideThread& operator=(const SideThread&) = delete;

  void Start(std::function<void()> job);
  void Wait();
  // Start(job) then Wait(); returns the wall time in nanoseconds (e.g. the drafter's prefill).
  int64_t RunTimed(std::function<void()> job);
  int threads() const { return threads_; }
  const at::Device& device() const { return device_; }
  // The intra-op width the worker reports (at::get_num_threads() on the worker).
  int WorkerThreads();

 private:
  void Loop();

  int threads_;
  at::Device device_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool has_job_ = false, done_ = true, quit_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace specbed
