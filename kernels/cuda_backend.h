// The CUDA half of the kernel layer as a table: the raw launchers (kernels/cuda/launchers.h) and
// the LibTorch glue they need (device switch, current stream, device description). The table is
// filled by kernels/cuda_backend.cpp, compiled only with SPECBED_CUDA=ON into the object library
// specbed_cuda, which registers it when its binary starts. Binaries that link specbed_cuda (the
// CLI and the test binaries holding *Cuda tests) dispatch CUDA tensors through it; every other
// binary of the same build links libtorch_cpu alone (no libtorch_cuda to load per test process),
// sees CudaKernels() == nullptr, and rejects CUDA tensors with "built without CUDA". So one
// build tree serves the CPU tests and the CUDA binaries, and no other file depends on the build's
// CUDA setting.
// Checked by: tests/kernels/kernel_test.cpp (the *Cuda tests launch through it on a GPU;
// KernelChecks.* the messages without it); scripts/check_cuda_build (what links it).
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "kernels/cuda/launchers.h"

namespace specbed {
namespace kernel_detail {

struct CudaKernelTable {
  // Layer 1, the raw launchers (pointers to the functions of kernels/cuda/launchers.h).
  decltype(&gpu::BuildTreeMask) build_tree_mask = nullptr;
  decltype(&gpu::GreedyTreeVerify) greedy_tree_verify = nullptr;
  decltype(&gpu::CompactKvRows) compact_kv_rows = nullptr;
  decltype(&gpu::CompactKvToPath) compact_kv_to_path = nullptr;
  decltype(&gpu::TreeRejectionStep) tree_rejection_step = nullptr;
  decltype(&gpu::SampledTreeVerify) sampled_tree_verify = nullptr;
  decltype(&gpu::RmsNormRows) rms_norm_rows = nullptr;
  decltype(&gpu::SiluMulRows) silu_mul_rows = nullptr;
  decltype(&gpu::RopeKvWrite) rope_kv_write = nullptr;
  decltype(&gpu::TreeAttention) tree_attention = nullptr;
  decltype(&gpu::KernelStatusString) status_string = nullptr;
  // Makes CUDA device `device` current; returns the previously current device.
  int (*exchange_device)(int device) = nullptr;
  // The current CUDA stream of `device` (a cudaStream_t).
  void* (*current_stream)(int device) = nullptr;
  // One line per visible CUDA device: name, compute capability, driver and runtime versions.
  std::string (*describe_devices)() = nullptr;
  // CUDA events without timing (kernels/step_staging.h): make one, record it on the current
  // stream of `device`, wait on the host until it has happened, free it.
  void* (*new_event)() = nullptr;
  void (*record_event)(void* event, int device) = nullptr;
  void (*wait_event)(void* event) = nullptr;
  void (*destroy_event)(void* event) = nullptr;
  // CUDA graphs (kernels/step_graph.h): make one; begin capturing the ops LibTorch and the
  // launchers issue on `device` (-1: the current one) on a side stream made current, in the
  // process-wide graph memory pool; end the capture (restoring the stream) and instantiate;
  // replay on the current stream; free.
  void* (*new_graph)() = nullptr;
  void (*begin_capture)(void* graph, int device) = nullptr;
  void (*end_capture)(void* graph) = nullptr;
  void (*replay_graph)(void* graph) = nullptr;
  void (*destroy_graph)(void* graph) = nullptr;
};

// The registered table, or nullptr in a binary that does not link specbed_cuda.
const CudaKernelTable* CudaKernels();

// Called once, by kernels/cuda_backend.cpp's registrar at static initialization.
void RegisterCudaKernels(const CudaKernelTable* table);

// For its lifetime makes `t`'s CUDA device current (restoring the previous one after) and
// exposes that device's current CUDA stream and the table, so launches follow LibTorch's stream
// semantics (and can be captured in CUDA graphs). Throws when no table is registered.
class CudaLaunchScope {
 public:
  explicit CudaLaunchScope(const at::Tensor& t);  // t: any CUDA tensor
  ~CudaLaunchScope();
  CudaLaunchScope(const CudaLaunchScope&) = delete;
  CudaLaunchScope& operator=(const CudaLaunchScope&) = delete;

  const CudaKernelTable& kernels() const { return *kernels_; }
  // The current stream of t's device, as a cudaStream_t.
  void* stream() const { return stream_; }

 private:
  const CudaKernelTable* kernels_ = nullptr;
  int previous_device_ = -1;
  int device_ = -1;
  void* stream_ = nullptr;
};

}  // namespace kernel_detail
}  // namespace specbed
