// A counting CPU allocator for the "a steady decode step allocates nothing" tests: while a
// ScopedAllocationCount is alive every tensor storage allocated on the CPU is counted.
// Checked by: the tests that use it (tests/engine/aten_forward_test.cpp
// SteadyDecodeStepAllocatesNothing counts 0 over a steady step and more than 0 over a fresh
// tensor; tests/engine/speculative_test.cpp, tests/engine/device_sampling_test.cpp).
#pragma once

#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>

namespace specbed {
namespace testing_util {

// Counts tensor storage allocations on the CPU while installed.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base) {}
  c10::DataPtr allocate(size_t n) override {
    ++count_;
    return base_->allocate(n);
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
  c10::DeleterFnPtr raw_deleter() const override { return base_->raw_deleter(); }
  int64_t count() const { return count_.load(); }

 private:
  c10::Allocator* base_;
  mutable std::atomic<int64_t> count_{0};
};

// Installs a CountingAllocator over the current CPU allocator for its lifetime.
class ScopedAllocationCount {
 public:
  // c10 replaces an allocator only at a priority >= the current one: both directions use the
  // highest, so a second count in the same process installs too (checked: a count that is not
  // installed would read 0 and pass anything).
  ScopedAllocationCount() : base_(c10::GetCPUAllocator()), counting_(base_) {
    c10::SetCPUAllocator(&counting_, kPriority);
    if (c10::GetCPUAllocator() != &counting_) {
      throw std::logic_error("ScopedAllocationCount: the counting allocator was not installed");
    }
  }
  ~ScopedAllocationCount() { c10::SetCPUAllocator(base_, kPriority); }
  ScopedAllocationCount(const ScopedAllocationCount&) = delete;
  ScopedAllocationCount& operator=(const ScopedAllocationCount&) = delete;
  // Storage allocations so far.
  int64_t count() const { return counting_.count(); }

 private:
  static constexpr uint8_t kPriority = 255;
  c10::Allocator* base_;
  CountingAllocator counting_;
};

}  // namespace testing_util
}  // namespace specbed
