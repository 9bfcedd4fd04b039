// Greedy tree verification: argument checks and CPU / CUDA dispatch (see
// kernels/greedy_verify.h).
// Checked by: tests/kernels/kernel_test.cpp (GreedyVerify* tests).
#include "kernels/greedy_verify.h"

#include "kernels/kernel_wrapper.h"

namespace specbed {

void GreedyTreeVerify(const at::Tensor& logits, const at::Tensor& tokens, const at::Tensor& parent,
                      const at::Tensor& accepted, const at::Tensor& n_accepted,
                      const at::Tensor& bonus) {
  using namespace kernel_detail;
  constexpr const char* kKernel = "GreedyTreeVerify";
  SPECBED_RECORD_KERNEL("greedy_tree_verify", logits, tokens, parent, accepted);
  CheckTensor(kKernel, "logits", logits, {at::kFloat}, {-1, -1, -1}, "[B, n + 1, V]");
  const int64_t batch = logits.size(0), n = logits.size(1) - 1, vocab = logits.size(2);
  SPECBED_CHECK(n >= 0 && vocab >= 1, kKernel, ": logits [", batch, ", ", n + 1, ", ", vocab,
                "] needs at least the root row (n + 1 >= 1) and V >= 1");
  CheckTensor(kKernel, "tokens", tokens, {at::kInt}, {batch, n}, "[B, n]");
  CheckTensor(kKernel, "parent", parent, {at::kInt}, {batch, n}, "[B, n]");
  CheckTensor(kKernel, "accepted", accepted, {at::kInt}, {batch, n}, "[B, n]");
  CheckTensor(kKernel, "n_accepted", n_accepted, {at::kInt}, {batch}, "[B]");
  CheckTensor(kKernel, "bonus", bonus, {at::kInt}, {batch}, "[B]");
  const KernelDevice device = DeviceOf(kKernel, "logits", logits);
  CheckSameDevices(kKernel,
                   {{"tokens", tokens},
                    {"parent", parent},
                    {"accepted", accepted},
                    {"n_accepted", n_accepted},
                    {"bonus", bonus}},
                   "logits", logits);
  if (device == KernelDevice::kCpu) {
    // Parent values are checked for host tensors only: reading a device tensor's values would
    // cost a device-to-host copy per verify step. The walk stays in bounds for any parent values
    // (a parent outside [-1, i) never matches), and the decode path validates its trees on the
    // host before upload (DraftTree::ValidateStructure).
    CheckTreeParents(kKernel, "parent", parent);
    CheckKernelStatus(kKernel, device,
                      cpu::GreedyTreeVerify(
                          logits.data_ptr<float>(), tokens.data_ptr<int32_t>(),
                          parent.data_ptr<int32_t>(), batch, n, vocab, accepted.data_ptr<int32_t>(),
                          n_accepted.data_ptr<int32_t>(), bonus.data_ptr<int32_t>()));
    return;
  }
  CudaLaunchScope scope(logits);
  CheckKernelStatus(kKernel, device,
                    scope.kernels().greedy_tree_verify(
                        logits.data_ptr<float>(), tokens.data_ptr<int32_t>(),
                        parent.data_ptr<int32_t>(), batch, n, vocab, accepted.data_ptr<int32_t>(),
                        n_accepted.data_ptr<int32_t>(), bonus.data_ptr<int32_t>(), scope.stream()));
}

}  // namespace specbed
