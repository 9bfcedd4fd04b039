// The one place where LibTorch meets the CUDA runtime: the device and current stream a wrapper
// launches a raw kernel on. Declared for every build, defined in kernels/cuda_glue.cpp, which is
// compiled only with SPECBED_CUDA=ON and a CUDA build of LibTorch (SPECBED_HAVE_CUDA_TORCH;
// Debian's LibTorch has c10/cuda headers but no libc10_cuda to link). Wrappers use it only
// under #ifdef SPECBED_HAVE_CUDA_TORCH.
// Checked by: tests/kernels/kernel_test.cpp (the *Cuda tests launch through it on a GPU).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace specbed {
namespace kernel_detail {

// For its lifetime makes `t`'s CUDA device current (restoring the previous one after) and
// exposes that device's current CUDA stream, so launches follow LibTorch's stream semantics
// (and can be captured in CUDA graphs).
class CudaLaunchScope {
 public:
  explicit CudaLaunchScope(const at::Tensor& t);  // t: any CUDA tensor
  ~CudaLaunchScope();
  CudaLaunchScope(const CudaLaunchScope&) = delete;
  CudaLaunchScope& operator=(const CudaLaunchScope&) = delete;

  // The current stream of t's device, as a cudaStream_t.
  void* stream() const { return stream_; }

 private:
  int previous_device_ = -1;
  int device_ = -1;
  void* stream_ = nullptr;
};

// Waits for the current CUDA stream of device `index` (-1 = the current device).
void SynchronizeCurrentStream(int index);

// One line per visible CUDA device: name, compute capability, driver and runtime versions (the
// environment record; models/device.h DescribeCudaDevices).
std::string DescribeCudaDevices();

}  // namespace kernel_detail
}  // namespace specbed
