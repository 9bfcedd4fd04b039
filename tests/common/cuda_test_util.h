// The shared skip helper of every CUDA test: CudaTestGate() probes LibTorch and decides
// (tests/common/cuda_gate.h) whether the test runs, is skipped, or fails (SPECBED_REQUIRE_CUDA=1);
// when it runs, the device is printed once per process. Use the macros at the top of a TEST body:
//   SPECBED_SKIP_WITHOUT_CUDA();          ATen on a CUDA device
//   SPECBED_SKIP_WITHOUT_CUDA_KERNELS();  SpecBed's CUDA kernels (kernels/cuda) too
// The including test binary must link specbed_models (DescribeCudaDevices); with SPECBED_CUDA=ON
// it links specbed_cuda, the CUDA kernels, because its sources hold *Cuda tests
// (cmake/SpecBedTest.cmake).
// Checked by: tests/kernels/kernel_test.cpp (the *Cuda tests); tests/common/cuda_gate_test.cpp.
#pragma once

#include <ATen/Context.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "kernels/cuda_backend.h"
#include "models/device.h"
#include "tests/common/cuda_gate.h"

namespace specbed {
namespace test {

inline CudaGateDecision CudaTestGate(bool need_kernels) {
  CudaProbe probe;
  probe.cuda_available =
      at::globalContext().hasCUDA() && c10::impl::getDeviceGuardImpl(at::kCUDA)->deviceCount() > 0;
  probe.kernels_built = kernel_detail::CudaKernels() != nullptr;
  if (probe.cuda_available) {
    probe.devices = DescribeCudaDevices();
    if (probe.devices.empty()) {
      probe.devices = std::to_string(c10::impl::getDeviceGuardImpl(at::kCUDA)->deviceCount()) +
                      " CUDA device(s) (no description: SpecBed built without SPECBED_CUDA)";
    }
  }
  CudaGateDecision decision = DecideCudaGate(probe, need_kernels, CudaRequired());
  if (decision.action == CudaGateAction::kRun) {
    static bool printed = false;
    if (!printed) {
      std::cout << "[ CUDA     ] " << decision.message << std::endl;
      printed = true;
    }
    ::testing::Test::RecordProperty("cuda_device", probe.devices);
  }
  return decision;
}

}  // namespace test
}  // namespace specbed

#define SPECBED_CUDA_GATE_(need_kernels)                                         \
  do {                                                                           \
    const ::specbed::test::CudaGateDecision specbed_gate_ =                      \
        ::specbed::test::CudaTestGate(need_kernels);                             \
    if (specbed_gate_.action == ::specbed::test::CudaGateAction::kFail) {        \
      FAIL() << specbed_gate_.message;                                           \
    } else if (specbed_gate_.action == ::specbed::test::CudaGateAction::kSkip) { \
      GTEST_SKIP() << specbed_gate_.message;                                     \
    }                                                                            \
  } while (0)
#define SPECBED_SKIP_WITHOUT_CUDA() SPECBED_CUDA_GATE_(false)
#define SPECBED_SKIP_WITHOUT_CUDA_KERNELS() SPECBED_CUDA_GATE_(true)
