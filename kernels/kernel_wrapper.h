// What every LibTorch kernel wrapper (kernels/*.cpp, the middle of the three kernel layers)
// includes: errors, the argument checks and device dispatch (kernel_checks.h), the CPU
// references, and the CUDA launch scope (kernels/cuda_backend.h: the raw launchers, when the binary
// has them). Internal to kernels/. Checked by: tests/kernels/kernel_test.cpp (every wrapper on the
// CPU; on CUDA where present).
#pragma once

#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include "base/error.h"
#include "kernels/cpu/references.h"
#include "kernels/cuda_backend.h"
#include "kernels/kernel_checks.h"

// Announces a wrapper call to the op recorder (models/op_trace.h) as "specbed::<name>" with its
// tensor arguments: one launching op per call. Costs one thread-local check when nothing records.
#define SPECBED_RECORD_KERNEL(name, ...) \
  RECORD_FUNCTION("specbed::" name, std::vector<c10::IValue>({__VA_ARGS__}))
