// Draft-tree ancestor mask: argument checks and CPU / CUDA dispatch (see kernels/tree_mask.h).
// Checked by: tests/kernels/kernel_test.cpp (TreeMask* tests).
#include "kernels/tree_mask.h"

#include "kernels/kernel_wrapper.h"

namespace specbed {

void BuildTreeMask(const at::Tensor& parent, int64_t prefix_len, const at::Tensor& mask) {
  using namespace kernel_detail;
  constexpr const char* kKernel = "BuildTreeMask";
  SPECBED_RECORD_KERNEL("build_tree_mask", parent, prefix_len, mask);
  CheckTensor(kKernel, "parent", parent, {at::kInt}, {-1, -1}, "[B, n]");
  const int64_t batch = parent.size(0), n = parent.size(1);
  SPECBED_CHECK(prefix_len >= 0, kKernel, ": prefix_len must be >= 0 (got ", prefix_len, ")");
  CheckTensor(kKernel, "mask", mask, {at::kBool}, {batch, n + 1, prefix_len + n + 1},
              "[B, n + 1, prefix_len + n + 1]");
  const KernelDevice device = DeviceOf(kKernel, "parent", parent);
  CheckSameDevice(kKernel, "mask", mask, "parent", parent);
  CheckTreeParents(kKernel, "parent", parent);
  if (device == KernelDevice::kCpu) {
    CheckKernelStatus(kKernel, device,
                      cpu::BuildTreeMask(parent.data_ptr<int32_t>(), batch, n, prefix_len,
                                         mask.data_ptr<bool>()));
    return;
  }
  CudaLaunchScope scope(parent);
  CheckKernelStatus(
      kKernel, device,
      scope.kernels().build_tree_mask(parent.data_ptr<int32_t>(), batch, n, prefix_len,
                                      mask.data_ptr<bool>(), scope.stream()));
}

}  // namespace specbed
