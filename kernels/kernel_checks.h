// Argument checks and device dispatch shared by the LibTorch kernel wrappers (kernels/*.cpp):
// dtype / shape / contiguity / device checks that throw specbed::Error naming the kernel and the
// argument, tree-parent validation, and the CPU / CUDA / "built without CUDA" decision.
// Internal to kernels/; callers use the wrappers (tree_mask.h, greedy_verify.h, kv_compact.h,
// rejection_step.h).
// Checked by: tests/kernels/kernel_test.cpp (the *Rejects* tests assert the messages).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <initializer_list>

namespace specbed {
namespace kernel_detail {

// Where a wrapper runs its kernel.
enum class KernelDevice { kCpu, kCuda };

// Throws unless `t` is defined, contiguous, of one of `dtypes`, and has exactly the sizes in
// `shape` (-1 = any size). `shape_doc` is the symbolic shape for the message ("[B, n]").
void CheckTensor(const char* kernel, const char* name, const at::Tensor& t,
                 std::initializer_list<at::ScalarType> dtypes, std::initializer_list<int64_t> shape,
                 const char* shape_doc);

// The device `t` (argument `name`) lives on: CPU, or CUDA when this binary has the CUDA kernels
// (kernels/cuda_backend.h: linked with specbed_cuda, SPECBED_CUDA=ON). Throws for CUDA tensors in
// other binaries and for any other device.
KernelDevice DeviceOf(const char* kernel, const char* name, const at::Tensor& t);

// Throws unless `t` (argument `name`) is on the same device as `ref` (argument `ref_name`).
void CheckSameDevice(const char* kernel, const char* name, const at::Tensor& t,
                     const char* ref_name, const at::Tensor& ref);

// One named tensor argument of a kernel, for the checks that take several.
struct NamedTensor {
  const char* name;
  const at::Tensor& tensor;
};

// CheckSameDevice for each of `tensors` against `ref` (argument `ref_name`).
void CheckSameDevices(const char* kernel, std::initializer_list<NamedTensor> tensors,
                      const char* ref_name, const at::Tensor& ref);

// `t` itself when it is on the CPU, otherwise a CPU copy (one small synchronous transfer, for
// validating index inputs of CUDA launches).
at::Tensor HostView(const at::Tensor& t);

// parent: [B, n] int32 contiguous, any device. Throws unless every parent[b][i] is in [-1, i)
// (methods/common/draft_tree.h: nodes in topological order, -1 = child of the root).
void CheckTreeParents(const char* kernel, const char* name, const at::Tensor& parent);

// Throws unless a raw launcher / CPU reference returned kKernelOk.
void CheckKernelStatus(const char* kernel, KernelDevice device, int status);

// Printable dtype name ("float32", "int64", ...).
const char* DtypeName(at::ScalarType dtype);

}  // namespace kernel_detail
}  // namespace specbed
