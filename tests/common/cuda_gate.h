// The one rule for tests that need CUDA (tests/common/cuda_test_util.h applies it): a CUDA test
// runs when a CUDA device (and, for kernel tests, SpecBed's CUDA kernels) is there; otherwise it
// is skipped, or, with SPECBED_REQUIRE_CUDA=1 in the environment (the GPU CI and the GPU check),
// it fails, so a GPU run can never pass by skipping. No LibTorch here: the decision is a pure
// function of what was probed, tested on any machine.
// Checked by: tests/common/cuda_gate_test.cpp; tests/kernels/CMakeLists.txt
// (KernelTest.RequireCudaTurnsSkipsIntoFailures: the real *Cuda tests fail under the switch).
#pragma once

#include <cstdlib>
#include <string>

namespace specbed {
namespace test {

// SPECBED_REQUIRE_CUDA: unset, empty or "0" = skip CUDA tests without CUDA; any other value
// (e.g. "1") = fail them.
inline bool CudaRequiredByValue(const char* value) {
  return value != nullptr && value[0] != '\0' && std::string(value) != "0";
}
inline bool CudaRequired() {
  return CudaRequiredByValue(std::getenv("SPECBED_REQUIRE_CUDA"));
}

// What the probe found (tests/common/cuda_test_util.h fills it from LibTorch).
struct CudaProbe {
  bool cuda_available = false;  // LibTorch has CUDA and sees at least one device
  bool kernels_built = false;   // SpecBed's CUDA kernels are compiled in (SPECBED_CUDA=ON)
  std::string devices;          // one description per visible device ("" when none)
};

enum class CudaGateAction { kRun, kSkip, kFail };

struct CudaGateDecision {
  CudaGateAction action = CudaGateAction::kSkip;
  std::string message;  // kRun: "CUDA device: ..."; kSkip/kFail: why CUDA cannot run
};

// need_kernels: the test launches SpecBed's own CUDA kernels (kernels/cuda), not only ATen ops.
inline CudaGateDecision DecideCudaGate(const CudaProbe& probe, bool need_kernels, bool required) {
  std::string why;
  if (!probe.cuda_available) {
    why = "no CUDA device: this LibTorch has no CUDA backend or no GPU is visible";
  } else if (need_kernels && !probe.kernels_built) {
    why =
        "SpecBed's CUDA kernels are not built (configure with -DSPECBED_CUDA=ON against a CUDA "
        "LibTorch)";
  }
  if (why.empty()) {
    return {CudaGateAction::kRun,
            "CUDA device: " +
                (probe.devices.empty() ? std::string("(no description)") : probe.devices)};
  }
  if (required) {
    return {CudaGateAction::kFail,
            "SPECBED_REQUIRE_CUDA is set, so this CUDA test fails instead of skipping: " + why};
  }
  return {CudaGateAction::kSkip, why + " (set SPECBED_REQUIRE_CUDA=1 to fail instead)"};
}

}  // namespace test
}  // namespace specbed
