// SideThread and ThreadBudget (see side_thread.h).
#include "methods/pearl/side_thread.h"

#include <ATen/Parallel.h>

#include "base/error.h"
#include "base/timer.h"
#include "models/device.h"

namespace specbed {

ThreadBudget::ThreadBudget(int threads) : saved_(at::get_num_threads()) {
  SPECBED_CHECK(threads >= 1, "thread budget must be >= 1, got ", threads);
  if (threads != saved_) at::set_num_threads(threads);
}

ThreadBudget::~ThreadBudget() {
  if (at::get_num_threads() != saved_) at::set_num_threads(saved_);
}

SideThread::SideThread(int threads, at::Device device) : threads_(threads), device_(device) {
  SPECBED_CHECK(threads >= 1, "side thread budget must be >= 1, got ", threads);
  // The caller's width: the worker's set_num_threads also moves the process-global default, which
  // is put back below so that threads started later are unaffected.
  const int caller = at::get_num_threads();
  thread_ = std::thread([this] { Loop(); });
  // The worker sets its own width first thing; wait for that before restoring the default.
  Start([] {});
  Wait();
  at::set_num_threads(caller);
}

SideThread::~SideThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SideThread::Loop() {
  // LibTorch 2.x sets a thread's width lazily, from the process-wide default, on the thread's first
  // get_num_threads / parallel call, which would overwrite a width set before it: take that first.
  at::get_num_threads();
  at::set_num_threads(threads_);
  ScopedSideStream stream(device_);
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return has_job_ || quit_; });
    if (quit_) return;
    std::function<void()> job = std::move(job_);
    has_job_ = false;
    lock.unlock();
    std::exception_ptr error;
    try {
      job();
      SynchronizeDevice(device_);  // this thread's stream: the job's device work has run
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    error_ = error;
    done_ = true;
    cv_.notify_all();
  }
}

void SideThread::Start(std::function<void()> job) {
  SynchronizeDevice(device_);  // the caller's stream: what the job may read is ready
  {
    std::lock_guard<std::mutex> lock(mu_);
    SPECBED_CHECK(done_, "SideThread::Start while a job is running");
    job_ = std::move(job);
    has_job_ = true;
    done_ = false;
    error_ = nullptr;
  }
  cv_.notify_all();
}

void SideThread::Wait() {
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

int64_t SideThread::RunTimed(std::function<void()> job) {
  const int64_t t0 = NowNanos();
  Start(std::move(job));
  Wait();
  return NowNanos() - t0;
}

int SideThread::WorkerThreads() {
  int n = 0;
  Start([&n] { n = at::get_num_threads(); });
  Wait();
  return n;
}

}  // namespace specbed
