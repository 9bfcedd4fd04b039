// Host staging of a step's inputs (see kernels/step_staging.h).
#include "kernels/step_staging.h"

#include "kernels/engine_counters.h"
#include "kernels/kernel_wrapper.h"

namespace specbed {

using kernel_detail::CudaKernels;

StepStaging::~StepStaging() {
  if (event_ != nullptr && CudaKernels() != nullptr) CudaKernels()->destroy_event(event_);
}

void StepStaging::Reserve(int64_t n, const at::Device& device) {
  // "cuda" without an index means the current device: the buffer's own device then matches.
  const bool same_device = device_.defined() && device_.device().type() == device.type() &&
                           (!device.has_index() || device_.device().index() == device.index());
  if (host_.defined() && host_.numel() >= n && same_device) return;
  const int64_t cap = std::max<int64_t>(n, host_.defined() ? 2 * host_.numel() : 256);
  if (pending_) Host(0);  // the old host block may still be read by a copy in flight
  const bool cuda = device.is_cuda();
  host_ = at::empty({cap}, at::TensorOptions(at::kLong).pinned_memory(cuda));
  device_ = at::empty({cap}, at::TensorOptions(at::kLong).device(device));
  if (cuda && event_ == nullptr) {
    const kernel_detail::CudaKernelTable* cuda_kernels = CudaKernels();
    SPECBED_CHECK(cuda_kernels != nullptr,
                  "StepStaging: SpecBed was built without CUDA (a CUDA device buffer needs its "
                  "CUDA backend)");
    event_ = cuda_kernels->new_event();
  }
  device_index_ = cuda ? device_.device().index() : -1;  // the buffer's actual device
}

int64_t* StepStaging::Host(int64_t n) {
  SPECBED_CHECK(host_.defined() && n <= host_.numel(), "StepStaging: ", n,
                " values do not fit the reserved ", host_.defined() ? host_.numel() : 0);
  if (pending_) {
    CudaKernels()->wait_event(event_);
    pending_ = false;
  }
  return host_.data_ptr<int64_t>();
}

at::Tensor StepStaging::Upload(int64_t n) {
  at::Tensor dst = device_.narrow(0, 0, n);
  const TransferScope transfer(Transfer::kHostToDevice);
  dst.copy_(host_.narrow(0, 0, n), /*non_blocking=*/device_index_ >= 0);
  if (device_index_ >= 0) {
    CudaKernels()->record_event(event_, device_index_);
    pending_ = true;
  }
  return dst;
}

}  // namespace specbed
