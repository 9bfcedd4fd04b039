// Machine-level speed figures for `specbed bench` and reports: the memory bandwidth (STREAM-style
// copy and triad), the verify-width curve of a model (forward time of n new tokens after a
// context, the cost structure speculative decoding relies on), the weight bytes an AR decode step
// reads and its fraction of the memory roofline, and the BLAS kernel in use.
// Checked by: tests/engine/machine_bench_test.cpp and tests/cli/cli_test.cpp (CliBench.*).
#pragma once

#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

#include "models/llama_model.h"

namespace specbed {

struct MemoryBandwidth {
  int threads = 1;
  int64_t array_bytes = 0;  // bytes of each of the three double arrays
  int reps = 0;
  double copy_gb_s = 0;   // best of reps; c[i] = a[i], 16 bytes per element (1 GB = 1e9 B)
  double triad_gb_s = 0;  // best of reps; a[i] = b[i] + s * c[i], 24 bytes per element
};

// Default array size: 256 MiB per array (768 MiB in all): 8x the 32 MiB L3 of the machines here
// and far above any current server's per-socket LLC share, yet small enough for a 24 GiB machine
// shared with other jobs.
inline constexpr int64_t kDefaultBandwidthArrayBytes = int64_t{256} << 20;

// STREAM-style copy and triad over three double arrays of `array_bytes` each (first touched by the
// same threads), best of `reps` after one untimed pass, on `threads` threads (at::parallel_for;
// the caller's thread count is restored). Bytes are counted as STREAM does (no write-allocate).
MemoryBandwidth MeasureMemoryBandwidth(int threads = 1,
                                       int64_t array_bytes = kDefaultBandwidthArrayBytes,
                                       int reps = 5);

// Copy bandwidth of `device` in GB/s (bytes read + bytes written, 1 GB = 1e9 B): one ATen copy
// between two `bytes`-byte buffers on the device, best of `reps` after one untimed copy, the
// device synchronized around each (models/device.h). The roofline of a GPU case (an accelerator's
// memory is read by its copy engine at about the rate a memory-bound kernel reaches).
double MeasureDeviceCopyBandwidth(const at::Device& device, int64_t bytes = int64_t{1} << 30,
                                  int reps = 10);

struct VerifyWidthPoint {
  int64_t n_query = 1;      // new tokens in the forward
  double forward_ms = 0;    // median over reps
  double ratio_to_one = 0;  // forward_ms / forward_ms(n_query = 1)
};

// Forward time of n new tokens (one sequence, all logits, as a verifier computes them) appended
// after `context` cached tokens (random ids, seeded), for every n in `widths` (each >= 1; n = 1
// is measured too when missing, for the ratio), median of `reps` timed runs after one warmup.
// With captured steps on (SPECBED_GRAPHS=on) n tokens run as the verifier runs them: padded to
// StepBucket(n) rows where the cache has room, after two warm-ups (eager, capture).
// Uses the model's current thread count; the cache is truncated back to `context` between runs.
std::vector<VerifyWidthPoint> MeasureVerifyWidthCurve(LlamaModel& model, int64_t context,
                                                      const std::vector<int64_t>& widths,
                                                      int64_t reps = 5);

// Bytes an AR decode step reads from the weights: every layer matrix (q/k/v with bias, o,
// gate/up, down) and lm_head, in the model dtype. Norm vectors and the one embedding row are
// left out (negligible).
int64_t DecodeWeightBytes(const LlamaModel& model);

// (weight_bytes / bandwidth) / forward time: 1.0 = the step runs at the memory roofline.
double RooflineFraction(int64_t weight_bytes, double bandwidth_gb_s, double forward_ms);

// The BLAS behind ATen's CPU GEMMs. With OpenBLAS loaded (a LibTorch built against it): its core,
// "OpenBLAS core Zen (OPENBLAS_CORETYPE=unset; OpenBLAS 0.3.21 ...)", from openblas_get_corename /
// openblas_get_config looked up with dlsym. Otherwise (PyPI's LibTorch: MKL, statically linked)
// LibTorch's build configuration: "mkl/AVX512 (LibTorch 2.11.0's BLAS_INFO and CPU capability)".
std::string BlasCoreDescription();
// Just the name: the OpenBLAS core ("Haswell", "Zen"), else "<BLAS_INFO>/<CPU capability>"
// ("mkl/AVX512"), else "unknown".
std::string BlasCoreName();

}  // namespace specbed
