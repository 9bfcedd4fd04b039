// Argument checks and device dispatch shared by the LibTorch kernel wrappers.
// Checked by: tests/kernels/kernel_test.cpp (the *Rejects* tests assert the messages).
#include "kernels/kernel_checks.h"

#include <ATen/ATen.h>

#include <sstream>

#include "base/error.h"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_status.h"

namespace specbed {
namespace kernel_detail {
namespace {

std::string SizesText(at::IntArrayRef sizes) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < sizes.size(); ++i) out << (i ? ", " : "") << sizes[i];
  out << ']';
  return out.str();
}

std::string ExpectedText(std::initializer_list<at::ScalarType> dtypes,
                         std::initializer_list<int64_t> shape, const char* shape_doc) {
  std::ostringstream out;
  bool first = true;
  for (at::ScalarType d : dtypes) {
    out << (first ? "" : " or ") << DtypeName(d);
    first = false;
  }
  out << " [";
  first = true;
  for (int64_t s : shape) {
    out << (first ? "" : ", ");
    if (s < 0) {
      out << '*';
    } else {
      out << s;
    }
    first = false;
  }
  out << "] (" << shape_doc << ")";
  return out.str();
}

}  // namespace

const char* DtypeName(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "float32";
    case at::kDouble:
      return "float64";
    case at::kHalf:
      return "float16";
    case at::kBFloat16:
      return "bfloat16";
    case at::kInt:
      return "int32";
    case at::kLong:
      return "int64";
    case at::kShort:
      return "int16";
    case at::kChar:
      return "int8";
    case at::kByte:
      return "uint8";
    case at::kBool:
      return "bool";
    default:
      return c10::toString(dtype);
  }
}

void CheckTensor(const char* kernel, const char* name, const at::Tensor& t,
                 std::initializer_list<at::ScalarType> dtypes, std::initializer_list<int64_t> shape,
                 const char* shape_doc) {
  SPECBED_CHECK(t.defined(), kernel, ": ", name, " is an undefined tensor; expected ",
                ExpectedText(dtypes, shape, shape_doc));
  bool dtype_ok = false;
  for (at::ScalarType d : dtypes) dtype_ok = dtype_ok || t.scalar_type() == d;
  bool shape_ok = t.dim() == static_cast<int64_t>(shape.size());
  if (shape_ok) {
    int64_t i = 0;
    for (int64_t s : shape) {
      shape_ok = shape_ok && (s < 0 || t.size(i) == s);
      ++i;
    }
  }
  SPECBED_CHECK(dtype_ok && shape_ok, kernel, ": ", name, " must be ",
                ExpectedText(dtypes, shape, shape_doc), "; got ", DtypeName(t.scalar_type()), " ",
                SizesText(t.sizes()));
  SPECBED_CHECK(t.is_contiguous(), kernel, ": ", name, " ", SizesText(t.sizes()),
                " must be contiguous (call .contiguous() first)");
}

KernelDevice DeviceOf(const char* kernel, const char* name, const at::Tensor& t) {
  if (t.device().is_cpu()) return KernelDevice::kCpu;
  if (t.device().is_cuda()) {
    if (CudaKernels() != nullptr) return KernelDevice::kCuda;
    Fail(kernel, ": ", name, " is on ", t.device().str(),
         " but SpecBed was built without CUDA (configure with the 'cuda' preset, "
         "SPECBED_CUDA=ON, and a CUDA build of LibTorch; the binary must link specbed_cuda); "
         "pass CPU tensors");
  }
  Fail(kernel, ": ", name, " is on ", t.device().str(),
       "; only CPU and CUDA tensors are supported");
}

void CheckSameDevice(const char* kernel, const char* name, const at::Tensor& t,
                     const char* ref_name, const at::Tensor& ref) {
  SPECBED_CHECK(t.device() == ref.device(), kernel, ": ", name, " is on ", t.device().str(),
                " but ", ref_name, " is on ", ref.device().str(), "; they must share a device");
}

void CheckSameDevices(const char* kernel, std::initializer_list<NamedTensor> tensors,
                      const char* ref_name, const at::Tensor& ref) {
  for (const NamedTensor& t : tensors) CheckSameDevice(kernel, t.name, t.tensor, ref_name, ref);
}

at::Tensor HostView(const at::Tensor& t) {
  return t.device().is_cpu() ? t : t.cpu();
}

void CheckTreeParents(const char* kernel, const char* name, const at::Tensor& parent) {
  const at::Tensor host = HostView(parent);
  const int64_t batch = host.size(0), n = host.size(1);
  const int32_t* par = host.data_ptr<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      const int32_t p = par[b * n + i];
      SPECBED_CHECK(p >= -1 && p < i, kernel, ": ", name, "[", b, "][", i, "] = ", p,
                    " must be in [-1, ", i,
                    ") (nodes in topological order, -1 = child of the root)");
    }
  }
}

void CheckKernelStatus(const char* kernel, KernelDevice device, int status) {
  if (status == kKernelOk) return;
  if (device == KernelDevice::kCuda && CudaKernels() != nullptr) {
    Fail(kernel, ": CUDA launch failed: ", CudaKernels()->status_string(status), " (status ",
         status, ")");
  }
  Fail(kernel, ": ", device == KernelDevice::kCpu ? "CPU reference" : "kernel",
       " rejected its inputs (status ", status,
       "): an index input is outside its documented range");
}

namespace {
const CudaKernelTable* g_cuda_kernels = nullptr;  // constant-initialized before any registrar
}  // namespace

const CudaKernelTable* CudaKernels() {
  return g_cuda_kernels;
}

void RegisterCudaKernels(const CudaKernelTable* table) {
  g_cuda_kernels = table;
}

CudaLaunchScope::CudaLaunchScope(const at::Tensor& t) : kernels_(CudaKernels()) {
  SPECBED_CHECK(kernels_ != nullptr,
                "CudaLaunchScope: no CUDA kernels in this binary (link "
                "specbed_cuda, SPECBED_CUDA=ON)");
  device_ = t.device().index();
  previous_device_ = kernels_->exchange_device(device_);
  stream_ = kernels_->current_stream(device_);
}

CudaLaunchScope::~CudaLaunchScope() {
  if (device_ != previous_device_) kernels_->exchange_device(previous_device_);
}

}  // namespace kernel_detail
}  // namespace specbed
