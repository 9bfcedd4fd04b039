// Tests of the CUDA test gate (tests/common/cuda_gate.h), the rule every CUDA test follows: the
// SPECBED_REQUIRE_CUDA values, and run / skip / fail for each probe outcome (no device, device
// without SpecBed's kernels, device with them), with the messages naming the device or the cause.
// No LibTorch, no GPU needed.
#include "tests/common/cuda_gate.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace specbed {
namespace test {
namespace {

TEST(CudaGate, RequireSwitchValues) {
  EXPECT_FALSE(CudaRequiredByValue(nullptr));
  EXPECT_FALSE(CudaRequiredByValue(""));
  EXPECT_FALSE(CudaRequiredByValue("0"));
  EXPECT_TRUE(CudaRequiredByValue("1"));
  EXPECT_TRUE(CudaRequiredByValue("yes"));  // any other value requires CUDA: the safe side
}

TEST(CudaGate, RequireSwitchReadsTheEnvironment) {
  ASSERT_EQ(setenv("SPECBED_REQUIRE_CUDA", "1", 1), 0);
  EXPECT_TRUE(CudaRequired());
  ASSERT_EQ(setenv("SPECBED_REQUIRE_CUDA", "0", 1), 0);
  EXPECT_FALSE(CudaRequired());
  ASSERT_EQ(unsetenv("SPECBED_REQUIRE_CUDA"), 0);
  EXPECT_FALSE(CudaRequired());
}

TEST(CudaGate, NoDeviceSkipsOrFails) {
  const CudaProbe none;  // CPU-only LibTorch
  for (bool need_kernels : {false, true}) {
    const CudaGateDecision skip = DecideCudaGate(none, need_kernels, /*required=*/false);
    EXPECT_EQ(skip.action, CudaGateAction::kSkip);
    EXPECT_NE(skip.message.find("no CUDA device"), std::string::npos) << skip.message;
    EXPECT_NE(skip.message.find("SPECBED_REQUIRE_CUDA=1"), std::string::npos) << skip.message;
    const CudaGateDecision fail = DecideCudaGate(none, need_kernels, /*required=*/true);
    EXPECT_EQ(fail.action, CudaGateAction::kFail);
    EXPECT_NE(fail.message.find("SPECBED_REQUIRE_CUDA"), std::string::npos) << fail.message;
    EXPECT_NE(fail.message.find("no CUDA device"), std::string::npos) << fail.message;
  }
}

TEST(CudaGate, DeviceWithoutKernelsRunsAtenTestsOnly) {
  CudaProbe probe;
  probe.cuda_available = true;
  probe.devices = "NVIDIA H100 80GB HBM3, compute capability 9.0";
  const CudaGateDecision aten = DecideCudaGate(probe, /*need_kernels=*/false, true);
  EXPECT_EQ(aten.action, CudaGateAction::kRun);
  EXPECT_EQ(aten.message, "CUDA device: NVIDIA H100 80GB HBM3, compute capability 9.0");
  EXPECT_EQ(DecideCudaGate(probe, /*need_kernels=*/true, false).action, CudaGateAction::kSkip);
  const CudaGateDecision fail = DecideCudaGate(probe, /*need_kernels=*/true, true);
  EXPECT_EQ(fail.action, CudaGateAction::kFail);
  EXPECT_NE(fail.message.find("-DSPECBED_CUDA=ON"), std::string::npos) << fail.message;
}

TEST(CudaGate, DeviceWithKernelsRunsAndNamesTheDevice) {
  CudaProbe probe;
  probe.cuda_available = true;
  probe.kernels_built = true;
  probe.devices = "NVIDIA H200, compute capability 9.0";
  for (bool required : {false, true}) {
    const CudaGateDecision d = DecideCudaGate(probe, /*need_kernels=*/true, required);
    EXPECT_EQ(d.action, CudaGateAction::kRun);
    EXPECT_EQ(d.message, "CUDA device: NVIDIA H200, compute capability 9.0");
  }
  probe.devices.clear();
  EXPECT_EQ(DecideCudaGate(probe, true, true).message, "CUDA device: (no description)");
}

}  // namespace
}  // namespace test
}  // namespace specbed
