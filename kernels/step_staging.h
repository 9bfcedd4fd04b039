// A step's small int64 inputs (positions, KV slots, cached lengths, tree bits) staged on the host
// and sent to a fixed device buffer in one copy per step (issue 45): the step then reads every
// input from the same device addresses at any context length, the shape a CUDA graph replays.
// On CUDA the host block is pinned and the copy asynchronous; before the host block is written
// again the previous copy is waited for (a CUDA event), so the host may run ahead of the device
// without overwriting what is still in flight. On the CPU both blocks are host memory and the
// copy is a plain copy_ (kept, so the CPU trace has the GPU's shape).
// Checked by: tests/kernels/decoder_ops_test.cpp (StepStaging.*), tests/engine/step_ops_test.cpp
// (trace identity of a decode step across context lengths).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>

namespace specbed {

class StepStaging {
 public:
  StepStaging() = default;
  ~StepStaging();
  StepStaging(const StepStaging&) = delete;
  StepStaging& operator=(const StepStaging&) = delete;

  // Room for n int64 values on `device` (grown, never shrunk: a growth moves the device buffer).
  void Reserve(int64_t n, const at::Device& device);
  // The host block's first n values (n <= the reserved size), once the previous upload from it
  // has completed.
  int64_t* Host(int64_t n);
  // Copies the host block's first n values to the device buffer; returns its int64 [n] view.
  at::Tensor Upload(int64_t n);

 private:
  at::Tensor host_, device_;
  void* event_ = nullptr;  // CUDA: recorded after each upload (kernels/cuda_backend.h)
  int device_index_ = -1;
  bool pending_ = false;  // an upload was recorded and not yet waited for
};

}  // namespace specbed
