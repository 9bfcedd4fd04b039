// CUDA stream / device glue for the kernel wrappers (see kernels/cuda_glue.h). Compiled only
// when SPECBED_HAVE_CUDA_TORCH is set (SPECBED_CUDA=ON and a CUDA build of LibTorch).
// Checked by: tests/kernels/kernel_test.cpp (the *Cuda tests launch through it on a GPU).
#include "kernels/cuda_glue.h"

#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

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

namespace {
std::string VersionString(int v) {  // CUDA encodes 13.0 as 13000
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
}  // namespace

void SynchronizeCurrentStream(int index) {
  const auto device =
      static_cast<c10::DeviceIndex>(index < 0 ? c10::cuda::current_device() : index);
  c10::cuda::getCurrentCUDAStream(device).synchronize();
}

std::string DescribeCudaDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return "";
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::string out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    if (!out.empty()) out += "; ";
    out += std::string(prop.name) + ", compute capability " + std::to_string(prop.major) + "." +
           std::to_string(prop.minor) + ", driver " + VersionString(driver) + ", CUDA runtime " +
           VersionString(runtime);
  }
  return out;
}

}  // namespace kernel_detail
}  // namespace specbed
