// KV-cache compaction: argument checks and CPU / CUDA dispatch (see kernels/kv_compact.h).
// Checked by: tests/kernels/kernel_test.cpp (KvCompact* tests).
#include "kernels/kv_compact.h"

#include "kernels/kernel_wrapper.h"

namespace specbed {

void CompactKvCache(const at::Tensor& storage, int64_t committed_len, const at::Tensor& indices) {
  using namespace kernel_detail;
  constexpr const char* kKernel = "CompactKvCache";
  SPECBED_RECORD_KERNEL("compact_kv_cache", storage, committed_len, indices);
  CheckTensor(kKernel, "storage", storage, {at::kFloat, at::kBFloat16, at::kHalf},
              {-1, 2, -1, -1, -1, -1}, "[n_layers, 2, B, H, max_len, D]");
  const int64_t n_outer = storage.size(0) * 2, batch = storage.size(2), n_heads = storage.size(3),
                max_len = storage.size(4),
                row_bytes = storage.size(5) * static_cast<int64_t>(storage.element_size());
  SPECBED_CHECK(committed_len >= 0 && committed_len <= max_len, kKernel, ": committed_len ",
                committed_len, " outside [0, max_len = ", max_len, "]");
  CheckTensor(kKernel, "indices", indices, {at::kLong}, {batch, -1}, "[B, K]");
  const int64_t keep = indices.size(1);
  const KernelDevice device = DeviceOf(kKernel, "storage", storage);
  SPECBED_CHECK(indices.device().is_cpu() || indices.device() == storage.device(), kKernel,
                ": indices is on ", indices.device().str(), "; expected the CPU or storage's ",
                storage.device().str());
  const at::Tensor host = HostView(indices);
  const int64_t* ip = host.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < keep; ++j) {
      const int64_t src = ip[b * keep + j];
      const int64_t lower = j == 0 ? committed_len : ip[b * keep + j - 1] + 1;
      SPECBED_CHECK(src >= lower && src < max_len, kKernel, ": indices[", b, "][", j, "] = ", src,
                    " breaks the contract (each row strictly increasing, >= committed_len ",
                    committed_len, ", < max_len ", max_len, ")");
    }
  }
  if (keep == 0) return;
  if (device == KernelDevice::kCpu) {
    CheckKernelStatus(kKernel, device,
                      cpu::CompactKvRows(storage.data_ptr(), n_outer, batch, n_heads, max_len,
                                         row_bytes, committed_len, ip, keep));
    return;
  }
  CudaLaunchScope scope(storage);
  const at::Tensor device_indices = indices.device() == storage.device()
                                        ? indices
                                        : indices.to(storage.device(), /*non_blocking=*/false);
  CheckKernelStatus(kKernel, device,
                    scope.kernels().compact_kv_rows(
                        storage.data_ptr(), n_outer, batch, n_heads, max_len, row_bytes,
                        committed_len, device_indices.data_ptr<int64_t>(), keep, scope.stream()));
}

void CompactKvCacheToPath(const at::Tensor& storage, const at::Tensor& root_slot,
                          const at::Tensor& accepted, const at::Tensor& n_accepted) {
  using namespace kernel_detail;
  constexpr const char* kKernel = "CompactKvCacheToPath";
  SPECBED_RECORD_KERNEL("compact_kv_cache_to_path", storage, root_slot, accepted, n_accepted);
  CheckTensor(kKernel, "storage", storage, {at::kFloat, at::kBFloat16, at::kHalf},
              {-1, 2, -1, -1, -1, -1}, "[n_layers, 2, B, H, max_len, D]");
  const int64_t n_outer = storage.size(0) * 2, batch = storage.size(2), n_heads = storage.size(3),
                max_len = storage.size(4),
                row_bytes = storage.size(5) * static_cast<int64_t>(storage.element_size());
  SPECBED_CHECK(row_bytes % 4 == 0, kKernel, ": rows of ", row_bytes,
                " bytes (expected a multiple of 4)");
  CheckTensor(kKernel, "root_slot", root_slot, {at::kInt}, {batch}, "[B]");
  CheckTensor(kKernel, "accepted", accepted, {at::kInt}, {batch, -1}, "[B, n]");
  CheckTensor(kKernel, "n_accepted", n_accepted, {at::kInt}, {batch}, "[B]");
  CheckSameDevices(kKernel,
                   {{"root_slot", root_slot}, {"accepted", accepted}, {"n_accepted", n_accepted}},
                   "storage", storage);
  const int64_t n = accepted.size(1);
  const KernelDevice device = DeviceOf(kKernel, "storage", storage);
  if (device == KernelDevice::kCpu) {
    const int status =
        cpu::CompactKvToPath(storage.data_ptr(), n_outer, batch, n_heads, max_len, row_bytes,
                             root_slot.data_ptr<int32_t>(), accepted.data_ptr<int32_t>(), n,
                             n_accepted.data_ptr<int32_t>());
    SPECBED_CHECK(status != kKernelBadInput, kKernel,
                  ": a verdict breaks the contract (n_accepted in [0, n], accepted nodes "
                  "increasing in [0, n), their slots < max_len ",
                  max_len, ")");
    CheckKernelStatus(kKernel, device, status);
    return;
  }
  CudaLaunchScope scope(storage);
  CheckKernelStatus(kKernel, device,
                    scope.kernels().compact_kv_to_path(
                        storage.data_ptr(), n_outer, batch, n_heads, max_len, row_bytes,
                        root_slot.data_ptr<int32_t>(), accepted.data_ptr<int32_t>(), n,
                        n_accepted.data_ptr<int32_t>(), scope.stream()));
}

}  // namespace specbed
