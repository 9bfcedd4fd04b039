// What every LibTorch kernel wrapper (kernels/*.cpp, the middle of the three kernel layers)
// includes: errors, the argument checks and device dispatch (kernel_checks.h), the CPU
// references, and, in a build with a CUDA LibTorch, the raw CUDA launchers and the stream glue.
// Internal to kernels/.
// Checked by: tests/kernels/kernel_test.cpp (every wrapper on the CPU; on CUDA where present).
#pragma once

#include <ATen/ATen.h>

#include "harness/base/error.h"
#include "kernels/cpu/references.h"
#include "kernels/kernel_checks.h"
#ifdef SPECBED_HAVE_CUDA_TORCH
#include "kernels/cuda/launchers.h"
#include "kernels/cuda_glue.h"
#endif
