// Names of the status codes returned by the raw CUDA launchers (kernels/cuda/launchers.h).
// Checked by: compiled by scripts/check_cuda_build; its text reaches users through the wrappers'
// specbed::Error on a failing launch (kernels/kernel_checks.cpp CheckKernelStatus).
#include "kernels/cuda/cuda_util.cuh"

namespace specbed {
namespace gpu {

const char* KernelStatusString(int status) {
  if (status == kKernelOk) return "no error";
  if (status == kKernelBadInput) return "index input outside its documented range";
  return cudaGetErrorString(static_cast<cudaError_t>(status));
}

}  // namespace gpu
}  // namespace specbed
