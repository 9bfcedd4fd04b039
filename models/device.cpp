// Device names, availability and synchronization (see device.h).
#include "models/device.h"

#include <ATen/Context.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cctype>

#include "base/error.h"
#include "kernels/cuda_backend.h"

namespace specbed {

at::Device ParseDevice(const std::string& name, const std::string& context) {
  if (name == "cpu") return at::Device(at::kCPU);
  if (name == "cuda") return at::Device(at::kCUDA);
  const std::string prefix = "cuda:";
  if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) {
    const std::string digits = name.substr(prefix.size());
    bool ok = digits.size() <= 3;
    for (char c : digits) ok = ok && std::isdigit(static_cast<unsigned char>(c));
    if (ok) return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(std::stoi(digits)));
  }
  Fail(context, ": unknown device '", name, "' (expected cpu, cuda or cuda:N)");
}

std::string DeviceName(const at::Device& device) {
  if (device.is_cpu()) return "cpu";
  return device.has_index() ? "cuda:" + std::to_string(device.index()) : "cuda";
}

namespace {
c10::DeviceIndex IndexOrCurrent(const at::Device& d) {
  if (d.has_index() || d.is_cpu()) return d.index();
  if (!c10::impl::hasDeviceGuardImpl(d.type())) return 0;
  // With no device visible (a CUDA LibTorch on a machine without a driver) asking for the
  // current one throws; the current device of such a machine is 0 as far as comparing goes.
  const auto* impl = c10::impl::getDeviceGuardImpl(d.type());
  return impl->deviceCount() > 0 ? impl->getDevice().index() : 0;
}
}  // namespace

bool SameDevice(const at::Device& a, const at::Device& b) {
  return a.type() == b.type() && (a.is_cpu() || IndexOrCurrent(a) == IndexOrCurrent(b));
}

void CheckDeviceAvailable(const at::Device& device, const std::string& context) {
  if (device.is_cpu()) return;
  SPECBED_CHECK(device.is_cuda(), context, ": device '", device.str(), "' is not supported");
  SPECBED_CHECK(at::globalContext().hasCUDA(), context, ": device '", DeviceName(device),
                "' is not available: this SpecBed build's LibTorch has no CUDA support or no "
                "CUDA device is visible (use \"device\": \"cpu\", or a CUDA build on a GPU "
                "machine)");
  const auto* impl = c10::impl::getDeviceGuardImpl(at::kCUDA);
  const int count = impl->deviceCount();
  const int index = device.has_index() ? device.index() : 0;
  SPECBED_CHECK(index < count, context, ": device '", DeviceName(device),
                "' is not available: ", count, " CUDA device(s) visible");
}

void SynchronizeDevice(const at::Device& device) {
  if (device.is_cpu()) return;
  // The device's current stream through LibTorch's device-guard interface (CUDA's is registered
  // by libc10_cuda; a CPU-only binary never holds a CUDA tensor to wait for).
  const auto* impl = c10::impl::getDeviceGuardImpl(device.type());
  const at::Device concrete =
      device.has_index() ? device : at::Device(device.type(), impl->getDevice().index());
  impl->synchronizeStream(impl->getStream(concrete));
}

struct DeviceMarks::Events {
  std::vector<std::unique_ptr<c10::Event>> marks;
};

DeviceMarks::DeviceMarks(const at::Device& device)
    : device_(device), events_(std::make_unique<Events>()) {}

DeviceMarks::~DeviceMarks() = default;

void DeviceMarks::KeepLast() {
  if (n_ <= 1) return;
  if (IsAsyncDevice(device_)) {
    std::swap(events_->marks[0], events_->marks[static_cast<size_t>(n_ - 1)]);
  } else {
    host_ns_[0] = host_ns_[static_cast<size_t>(n_ - 1)];
  }
  n_ = 1;
}

void DeviceMarks::Mark() {
  const size_t i = static_cast<size_t>(n_++);
  if (!IsAsyncDevice(device_)) {
    if (host_ns_.size() <= i) host_ns_.resize(i + 1);
    host_ns_[i] = NowNanos();
    return;
  }
  auto& marks = events_->marks;
  if (marks.size() <= i) {
    marks.push_back(std::make_unique<c10::Event>(device_.type(), c10::EventFlag::BACKEND_DEFAULT));
  }
  const auto* impl = c10::impl::getDeviceGuardImpl(device_.type());
  const at::Device concrete =
      device_.has_index() ? device_ : at::Device(device_.type(), impl->getDevice().index());
  marks[i]->record(impl->getStream(concrete));
}

double DeviceMarks::ElapsedUs(int64_t i) const {
  SPECBED_CHECK(i >= 1 && i < n_, "DeviceMarks: no interval ", i, " (", n_, " marks)");
  const size_t k = static_cast<size_t>(i);
  if (!IsAsyncDevice(device_)) return (host_ns_[k] - host_ns_[k - 1]) * 1e-3;
  return events_->marks[k - 1]->elapsedTime(*events_->marks[k]) * 1e3;  // ms -> us
}

ScopedSideStream::ScopedSideStream(const at::Device& device) : device_(device) {
  if (device.is_cpu()) return;
  const auto* impl = c10::impl::getDeviceGuardImpl(device.type());
  const at::Device concrete =
      device.has_index() ? device : at::Device(device.type(), impl->getDevice().index());
  previous_ = impl->exchangeStream(impl->getStreamFromGlobalPool(concrete));
}

ScopedSideStream::~ScopedSideStream() {
  if (previous_) c10::impl::getDeviceGuardImpl(device_.type())->exchangeStream(*previous_);
}

std::string DescribeCudaDevices() {
  const kernel_detail::CudaKernelTable* cuda = kernel_detail::CudaKernels();
  if (cuda == nullptr || !at::globalContext().hasCUDA()) return "";
  return cuda->describe_devices();
}

}  // namespace specbed
