// Sampled tree verification: argument checks and CPU / CUDA dispatch (see
// kernels/sampled_verify.h).
// Checked by: tests/kernels/sampled_verify_test.cpp.
#include "kernels/sampled_verify.h"

#include "kernels/kernel_wrapper.h"

namespace specbed {
namespace {

constexpr const char* kKernel = "SampledTreeVerify";

void CheckArguments(const at::Tensor& probs, const at::Tensor& draft_probs,
                    const at::Tensor& tokens, const at::Tensor& parent, const at::Tensor& u,
                    int32_t mode, const at::Tensor& residual, const at::Tensor& accepted,
                    const at::Tensor& n_accepted, const at::Tensor& bonus) {
  using namespace kernel_detail;
  CheckTensor(kKernel, "probs", probs, {at::kFloat}, {-1, -1, -1}, "[B, n + 1, V]");
  const int64_t batch = probs.size(0), n = probs.size(1) - 1, vocab = probs.size(2);
  SPECBED_CHECK(n >= 0 && vocab >= 1, kKernel, ": probs [", batch, ", ", n + 1, ", ", vocab,
                "] needs at least the root row (n + 1 >= 1) and V >= 1");
  SPECBED_CHECK(mode >= kSampledRejection && mode <= kSampledRejectionTargetResidual, kKernel,
                ": mode ", mode, " is not one of kSampledRejection .. ",
                "kSampledRejectionTargetResidual");
  const bool rejection = mode == kSampledRejection || mode == kSampledRejectionTargetResidual;
  const auto same_device = [&](const char* name, const at::Tensor& t) {
    CheckSameDevice(kKernel, name, t, "probs", probs);
  };
  if ((rejection && n > 0) || draft_probs.defined()) {
    CheckTensor(kKernel, "draft_probs", draft_probs, {at::kFloat}, {batch, n + 1, vocab},
                "[B, n + 1, V]");
    same_device("draft_probs", draft_probs);
  }
  CheckTensor(kKernel, "tokens", tokens, {at::kInt}, {batch, n}, "[B, n]");
  CheckTensor(kKernel, "parent", parent, {at::kInt}, {batch, n}, "[B, n]");
  CheckTensor(kKernel, "u", u, {at::kDouble}, {batch, n + 1}, "[B, n + 1]");
  CheckTensor(kKernel, "residual", residual, {at::kFloat}, {batch, vocab}, "[B, V]");
  CheckTensor(kKernel, "accepted", accepted, {at::kInt}, {batch, n}, "[B, n]");
  CheckTensor(kKernel, "n_accepted", n_accepted, {at::kInt}, {batch}, "[B]");
  CheckTensor(kKernel, "bonus", bonus, {at::kInt}, {batch}, "[B]");
  same_device("tokens", tokens);
  same_device("parent", parent);
  same_device("u", u);
  same_device("residual", residual);
  same_device("accepted", accepted);
  same_device("n_accepted", n_accepted);
  same_device("bonus", bonus);
  if (DeviceOf(kKernel, "probs", probs) == KernelDevice::kCpu) {
    CheckTreeParents(kKernel, "parent", parent);
  }
}

}  // namespace

void SampledTreeVerify(const at::Tensor& probs, const at::Tensor& draft_probs,
                       const at::Tensor& tokens, const at::Tensor& parent, const at::Tensor& u,
                       int32_t mode, const at::Tensor& residual, const at::Tensor& accepted,
                       const at::Tensor& n_accepted, const at::Tensor& bonus) {
  using namespace kernel_detail;
  SPECBED_RECORD_KERNEL("sampled_tree_verify", probs, draft_probs, tokens, parent, u, accepted);
  CheckArguments(probs, draft_probs, tokens, parent, u, mode, residual, accepted, n_accepted,
                 bonus);
  const int64_t batch = probs.size(0), n = probs.size(1) - 1, vocab = probs.size(2);
  const float* q = draft_probs.defined() ? draft_probs.data_ptr<float>() : nullptr;
  const KernelDevice device = DeviceOf(kKernel, "probs", probs);
  if (device == KernelDevice::kCpu) {
    CheckKernelStatus(
        kKernel, device,
        cpu::SampledTreeVerify(probs.data_ptr<float>(), q, tokens.data_ptr<int32_t>(),
                               parent.data_ptr<int32_t>(), u.data_ptr<double>(), batch, n, vocab,
                               mode, residual.data_ptr<float>(), accepted.data_ptr<int32_t>(),
                               n_accepted.data_ptr<int32_t>(), bonus.data_ptr<int32_t>()));
    return;
  }
  CudaLaunchScope scope(probs);
  CheckKernelStatus(kKernel, device,
                    scope.kernels().sampled_tree_verify(
                        probs.data_ptr<float>(), q, tokens.data_ptr<int32_t>(),
                        parent.data_ptr<int32_t>(), u.data_ptr<double>(), batch, n, vocab, mode,
                        residual.data_ptr<float>(), accepted.data_ptr<int32_t>(),
                        n_accepted.data_ptr<int32_t>(), bonus.data_ptr<int32_t>(), scope.stream()));
}

}  // namespace specbed
