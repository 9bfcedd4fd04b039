// Rejection step: argument checks and CPU / CUDA dispatch (see kernels/rejection_step.h).
// Checked by: tests/kernels/kernel_test.cpp (RejectionStep* tests).
#include "kernels/rejection_step.h"

#include "kernels/kernel_wrapper.h"

namespace specbed {

void TreeRejectionStep(const at::Tensor& p, const at::Tensor& q, const at::Tensor& token,
                       const at::Tensor& u, const at::Tensor& accepted) {
  using namespace kernel_detail;
  constexpr const char* kKernel = "TreeRejectionStep";
  SPECBED_RECORD_KERNEL("tree_rejection_step", p, q, token, u, accepted);
  CheckTensor(kKernel, "p", p, {at::kFloat}, {-1, -1}, "[B, V]");
  const int64_t batch = p.size(0), vocab = p.size(1);
  SPECBED_CHECK(vocab >= 1, kKernel, ": p needs V >= 1 (got [", batch, ", ", vocab, "])");
  CheckTensor(kKernel, "q", q, {at::kFloat}, {batch, vocab}, "[B, V]");
  CheckTensor(kKernel, "token", token, {at::kInt}, {batch}, "[B]");
  CheckTensor(kKernel, "u", u, {at::kFloat}, {batch}, "[B]");
  CheckTensor(kKernel, "accepted", accepted, {at::kByte, at::kBool}, {batch}, "[B]");
  const KernelDevice device = DeviceOf(kKernel, "p", p);
  CheckSameDevice(kKernel, "q", q, "p", p);
  CheckSameDevice(kKernel, "token", token, "p", p);
  CheckSameDevice(kKernel, "u", u, "p", p);
  CheckSameDevice(kKernel, "accepted", accepted, "p", p);
  {
    const at::Tensor host = HostView(token);
    const int32_t* tp = host.data_ptr<int32_t>();
    for (int64_t b = 0; b < batch; ++b) {
      SPECBED_CHECK(tp[b] >= 0 && tp[b] < vocab, kKernel, ": token[", b, "] = ", tp[b],
                    " outside [0, V = ", vocab, ")");
    }
  }
  uint8_t* acc = static_cast<uint8_t*>(accepted.data_ptr());
  if (device == KernelDevice::kCpu) {
    CheckKernelStatus(
        kKernel, device,
        cpu::TreeRejectionStep(p.data_ptr<float>(), q.data_ptr<float>(), token.data_ptr<int32_t>(),
                               u.data_ptr<float>(), batch, vocab, acc));
    return;
  }
  CudaLaunchScope scope(p);
  CheckKernelStatus(kKernel, device,
                    scope.kernels().tree_rejection_step(
                        p.data_ptr<float>(), q.data_ptr<float>(), token.data_ptr<int32_t>(),
                        u.data_ptr<float>(), batch, vocab, acc, scope.stream()));
}

}  // namespace specbed
