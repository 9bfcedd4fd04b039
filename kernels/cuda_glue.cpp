// CUDA stream / device glue for the kernel wrappers (see kernels/cuda_glue.h). Compiled only
// when SPECBED_HAVE_CUDA_TORCH is set (SPECBED_CUDA=ON and a CUDA build of LibTorch).
// Checked by: tests/kernels/kernel_test.cpp (the *Cuda tests launch through it on a GPU).
#include "kernels/cuda_glue.h"

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

namespace specbed {
namespace kernel_detail {

CudaLaunchScope::CudaLaunchScope(const at::Tensor& t) {
  device_ = t.device().index();
  previous_device_ = c10::cuda::current_device();
  if (device_ != previous_device_) c10::cuda::set_device(static_cast<c10::DeviceIndex>(device_));
  stream_ = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_)).stream();
}

CudaLaunchScope::~CudaLaunchScope() {
  if (device_ != previous_device_) {
    c10::cuda::set_device(static_cast<c10::DeviceIndex>(previous_device_));
  }
}

}  // namespace kernel_detail
}  // namespace specbed
