// The CUDA backend of the kernel wrappers (see kernels/cuda_backend.h): the table of raw
// launchers and the LibTorch CUDA glue (device switch, current stream, device description, events,
// CUDA graph capture and replay for kernels/step_graph.h), registered at static initialization.
// Compiled only with SPECBED_CUDA=ON, into the object library specbed_cuda (with the CUDA
// LibTorch's flags and libraries), and linked into the CLI and the test binaries holding *Cuda
// tests. The one translation unit that touches LibTorch's CUDA API.
// Checked by: tests/kernels/kernel_test.cpp (the *Cuda tests launch through it on a GPU),
// tests/engine/step_graph_test.cpp (StepGraphCuda: replayed graphs = eager steps);
// scripts/check_cuda_build (compiles and links it).
#include "kernels/cuda_backend.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <mutex>
#include <optional>

namespace specbed {
namespace kernel_detail {
namespace {

int ExchangeDevice(int device) {
  const int previous = c10::cuda::current_device();
  if (device != previous) c10::cuda::set_device(static_cast<c10::DeviceIndex>(device));
  return previous;
}

void* CurrentStream(int device) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
}

void* NewEvent() {
  cudaEvent_t event = nullptr;
  const cudaError_t status = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  TORCH_CHECK(status == cudaSuccess, "cudaEventCreate: ", cudaGetErrorString(status));
  return event;
}

void RecordEvent(void* event, int device) {
  const cudaError_t status = cudaEventRecord(static_cast<cudaEvent_t>(event),
                                             static_cast<cudaStream_t>(CurrentStream(device)));
  TORCH_CHECK(status == cudaSuccess, "cudaEventRecord: ", cudaGetErrorString(status));
}

void WaitEvent(void* event) {
  const cudaError_t status = cudaEventSynchronize(static_cast<cudaEvent_t>(event));
  TORCH_CHECK(status == cudaSuccess, "cudaEventSynchronize: ", cudaGetErrorString(status));
}

void DestroyEvent(void* event) {
  cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

// A step's graph and, while it is being captured, the side stream made current (a capture cannot
// run on the default stream). `holds_pool`: its capture ended, so the graph holds a use of the
// shared pool until it is destroyed.
struct CapturedGraph {
  at::cuda::CUDAGraph graph;
  std::optional<c10::cuda::CUDAStreamGuard> side_stream;
  bool holds_pool = false;
};

// One memory pool for every step graph: their temporaries never outlive a replay, and the
// graphs run one at a time on one stream. PyTorch releases a pool when its last graph goes and
// refuses a capture into a released pool's id while its blocks are still alive (an internal
// assert, seen on the H200 when a test's second model captured after the first was destroyed), so
// a capture with no captured graph alive starts a new pool.
struct SharedGraphPool {
  std::mutex mu;
  at::cuda::MempoolId_t id{0, 0};
  int64_t holders = 0;  // captured graphs alive
};

SharedGraphPool& GraphPool() {
  static SharedGraphPool pool;
  return pool;
}

at::cuda::MempoolId_t PoolForCapture() {
  SharedGraphPool& pool = GraphPool();
  std::lock_guard<std::mutex> lock(pool.mu);
  if (pool.holders == 0) pool.id = at::cuda::graph_pool_handle();
  return pool.id;
}

void* NewGraph() {
  return new CapturedGraph();
}

void BeginCapture(void* graph, int device) {
  auto* g = static_cast<CapturedGraph*>(graph);
  const c10::DeviceIndex index =
      device < 0 ? c10::cuda::current_device() : static_cast<c10::DeviceIndex>(device);
  g->side_stream.emplace(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index));
  g->graph.capture_begin(PoolForCapture());
}

void EndCapture(void* graph) {
  auto* g = static_cast<CapturedGraph*>(graph);
  try {
    g->graph.capture_end();
  } catch (...) {
    g->side_stream.reset();
    throw;
  }
  g->side_stream.reset();
  SharedGraphPool& pool = GraphPool();
  std::lock_guard<std::mutex> lock(pool.mu);
  g->holds_pool = true;
  ++pool.holders;
}

void ReplayGraph(void* graph) {
  static_cast<CapturedGraph*>(graph)->graph.replay();
}

void DestroyGraph(void* graph) {
  auto* g = static_cast<CapturedGraph*>(graph);
  const bool held = g->holds_pool;
  delete g;  // releases its use of the pool
  if (!held) return;
  SharedGraphPool& pool = GraphPool();
  std::lock_guard<std::mutex> lock(pool.mu);
  --pool.holders;
}

std::string VersionString(int v) {  // CUDA encodes 13.0 as 13000
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string DescribeDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return "";
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::string out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    if (!out.empty()) out += "; ";
    out += std::string(prop.name) + ", compute capability " + std::to_string(prop.major) + "." +
           std::to_string(prop.minor) + ", driver " + VersionString(driver) + ", CUDA runtime " +
           VersionString(runtime);
  }
  return out;
}

CudaKernelTable MakeTable() {
  CudaKernelTable table;
  table.build_tree_mask = &gpu::BuildTreeMask;
  table.greedy_tree_verify = &gpu::GreedyTreeVerify;
  table.compact_kv_rows = &gpu::CompactKvRows;
  table.compact_kv_to_path = &gpu::CompactKvToPath;
  table.tree_rejection_step = &gpu::TreeRejectionStep;
  table.sampled_tree_verify = &gpu::SampledTreeVerify;
  table.rms_norm_rows = &gpu::RmsNormRows;
  table.silu_mul_rows = &gpu::SiluMulRows;
  table.rope_kv_write = &gpu::RopeKvWrite;
  table.tree_attention = &gpu::TreeAttention;
  table.status_string = &gpu::KernelStatusString;
  table.exchange_device = &ExchangeDevice;
  table.current_stream = &CurrentStream;
  table.describe_devices = &DescribeDevices;
  table.new_event = &NewEvent;
  table.record_event = &RecordEvent;
  table.wait_event = &WaitEvent;
  table.destroy_event = &DestroyEvent;
  table.new_graph = &NewGraph;
  table.begin_capture = &BeginCapture;
  table.end_capture = &EndCapture;
  table.replay_graph = &ReplayGraph;
  table.destroy_graph = &DestroyGraph;
  return table;
}

const CudaKernelTable kTable = MakeTable();

// Registers kTable when the binary starts (an object library's objects are always linked).
const bool kRegistered = (RegisterCudaKernels(&kTable), true);

}  // namespace
}  // namespace kernel_detail
}  // namespace specbed
