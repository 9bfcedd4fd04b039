// Captured step programs (see kernels/step_graph.h).
#include "kernels/step_graph.h"

#include <chrono>
#include <cstdlib>
#include <string>

#include "base/error.h"
#include "kernels/cuda_backend.h"
#include "kernels/engine_counters.h"

namespace specbed {

using kernel_detail::CudaKernels;

GraphMode ResolveGraphMode() {
  const char* env = std::getenv("SPECBED_GRAPHS");
  const std::string name = env == nullptr ? "" : env;
  if (name.empty() || name == "off") return GraphMode::kOff;
  if (name == "on") return GraphMode::kOn;
  throw Error(StrCat("SPECBED_GRAPHS=", name, ": expected on or off"));
}

const char* GraphModeName(GraphMode mode) {
  return mode == GraphMode::kOn ? "on" : "off";
}

int64_t StepBucket(int64_t n) {
  SPECBED_CHECK(n >= 1, "StepBucket: a step of ", n, " tokens");
  for (int64_t width : kStepBuckets) {
    if (width >= n) return width;
  }
  return n;
}

StepGraph::~StepGraph() {
  if (graph_ != nullptr && CudaKernels() != nullptr) CudaKernels()->destroy_graph(graph_);
}

void StepGraph::Capture(const at::Device& device, const std::function<void()>& program,
                        const char* what) {
  if (!device.is_cuda()) {
    program();
    return;
  }
  const kernel_detail::CudaKernelTable* cuda = CudaKernels();
  SPECBED_CHECK(cuda != nullptr, "StepGraph: SpecBed was built without CUDA");
  graph_ = cuda->new_graph();
  try {
    cuda->begin_capture(graph_, device.has_index() ? device.index() : -1);
    try {
      program();
    } catch (...) {
      cuda->end_capture(graph_);  // leave capture mode before reporting
      throw;
    }
    cuda->end_capture(graph_);
  } catch (const std::exception& e) {
    cuda->destroy_graph(graph_);
    graph_ = nullptr;
    throw Error(StrCat("CUDA graph capture of ", what, " failed (set SPECBED_GRAPHS=off to run ",
                       "steps eagerly): ", e.what()));
  }
  cuda->replay_graph(graph_);
}

void StepGraph::Run(const at::Device& device, const std::function<void()>& program,
                    const char* what, GraphStats& stats) {
  if (!warm_) {
    program();
    warm_ = true;
    ++stats.eager_warmups;
    return;
  }
  if (!captured_) {
    const auto start = std::chrono::steady_clock::now();
    Capture(device, program, what);
    captured_ = true;
    engine_counters_detail::AddCapture();
    ++stats.captures;
    ++stats.replays;
    stats.capture_s +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return;
  }
  ++stats.replays;
  engine_counters_detail::AddReplay();
  if (graph_ != nullptr) {
    CudaKernels()->replay_graph(graph_);
  } else {
    program();  // the CPU: nothing was captured
  }
}

}  // namespace specbed
