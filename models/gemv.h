// SpecBed's own matrix-vector product for a few activation rows (decode steps, short verify
// blocks): out[r, j] = sum_i x[r, i] * weight[j, i] over row-major [out_features, in_features]
// weights (the untransposed layer weights), float32 or bfloat16 storage, float32 accumulation,
// optional bias and optional accumulation into `out` (the residual adds).
//
// Why: LlamaModel::Forward's GEMMs go through ATen (OpenBLAS sgemm / oneDNN). With one activation
// row the speed then depends on which kernel the BLAS library picks: with
// OPENBLAS_CORETYPE=Haswell a width-512 16-layer model's 1-token forward went from 9.9 to 15.9 ms
// while 4 tokens stayed ~17 ms. A decode step is memory-bound (every weight is read once), so a
// streaming dot-product kernel reaches the memory roofline whatever BLAS does.
//
// Kernels: compiled once per instruction set (models/gemv_kernels.inc, one gemv_isa_*.cpp each)
// and picked at run time by the CPU, per weight dtype:
//   float32   x86-64-v4 (AVX-512, 16 lanes) > x86-64-v3 (AVX2 + FMA, 8 lanes) > generic
//   bfloat16  avx512bf16 (vdpbf16ps: bf16 weights x bf16 activations, fp32 accumulation) >
//             x86-64-v4 > x86-64-v3 > generic (these widen bf16 to fp32)
//   float16   x86-64-v4 (vcvtph2ps zmm) > x86-64-v3 (F16C) > generic (software conversion)
// SetGemvIsa, the environment variable SPECBED_GEMV_ISA and `specbed bench --gemv-isa` cap the
// choice (e.g. x86-64-v3 = the kernels SpecBed ran before the AVX-512 ones) for A/B runs.
//
// Numerics: each out[r, j] is a fixed-order sum of float32 lane partials over i (8 or 16 lanes;
// FMA where the ISA has it; with vdpbf16ps each lane adds two exact bf16 products per step), a
// fixed horizontal sum, then + bias, then + the old out value, rounded once to the storage type.
// The result depends on the kernel (so runs record it: GemvKernelName) but never on the row count
// or on how output features are split across threads, so a 1-row decode step and an n-row verify
// through the same kernel give the same bits per row.
//
// Checked by: tests/models/gemv_test.cpp (every kernel this CPU supports against at::mm for
// random and odd shapes, fp32, bf16 and fp16, with/without bias and accumulation; row-count and
// thread independence; LlamaModel 1-token forward vs multi-row forward).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace specbed {

// Largest number of activation rows for which LlamaModel::Forward uses GemvRows instead of ATen
// (MKL sgemm / oneDNN through LibTorch). Re-measured for the per-ISA kernels on this 2-core AMD
// EPYC Zen 4 VM (AVX-512 + AVX512_BF16), stories260K-twin, 1 thread, context 64, weights in 2 MiB
// pages, forward ms for n = 1/2/4/8/12/16 rows (`specbed bench -t stories260K-twin --dtype
// float32,bfloat16,float16 -c 64 -n 16 -r 5 --verify-widths 1,2,3,4,5,6,8,12,16 --gemv-max-rows
// 0|16`, 2026-12-02; results/bench_cpu_vector_width.md):
//   fp32  ATen 16.5/25.4/26.6/29.7/35.6/42.6    GEMV (x86-64-v4)   8.2/ 7.9/11.3/24.0/31.5/41.6
//   bf16  ATen 11.8/12.5/17.0/19.5/25.6/30.6    GEMV (avx512bf16)  4.3/ 5.3/10.0/17.1/24.7/34.8
//   fp16  ATen  7.2/14.0/28.2/56.6/86.4/116.6   GEMV (x86-64-v4)   5.2/ 9.1/15.3/33.9/47.3/73.8
// GEMV wins through 12 rows in fp32 and bf16 (ties at 16) and at every width in fp16 (ATen's CPU
// fp16 GEMM is slow). Before the per-ISA kernels (8-lane kernels reading 8 weight rows side by
// side, 4 KiB pages) the thresholds were 8 (fp32) and 4 (bf16): results/bench_gemv_rows_cpu.md.
inline constexpr int64_t kGemvMaxRowsFloat = 12;
inline constexpr int64_t kGemvMaxRowsBFloat16 = 12;
inline constexpr int64_t kGemvMaxRowsHalf = 64;

// The row threshold in use for `dtype` (kFloat, kBFloat16 or kHalf): the constants above unless
// overridden by SetGemvMaxRows.
int64_t GemvMaxRows(at::ScalarType dtype);
// Overrides the threshold for every dtype (0 = always ATen/BLAS, for A/B measurements); a
// negative value restores the defaults. Process-wide; not thread-safe against running forwards.
void SetGemvMaxRows(int64_t max_rows);

// out[r, j] = (accumulate ? out[r, j] : 0) + (bias defined ? bias[j] : 0)
//             + sum_i x[r, i] * weight[j, i]
// x:      [rows, in] contiguous, same dtype as weight (any rows >= 0; up to 8 rows share one
//         pass over the weights).
// weight: [out_features, in] contiguous, float32, bfloat16 or float16.
// bias:   [out_features] contiguous, weight's dtype, or undefined.
// out:    [rows, out_features] contiguous, weight's dtype; must not overlap x or weight.
// Parallel over output features with at::parallel_for (at::get_num_threads threads).
void GemvRows(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
              const at::Tensor& out, bool accumulate);

// The kernel GemvRows runs for `dtype` weights (kFloat, kBFloat16 or kHalf): "avx512bf16",
// "x86-64-v4", "x86-64-v3" or "generic".
std::string GemvKernelName(at::ScalarType dtype);
// All three at once, e.g. "fp32 x86-64-v4, bf16 avx512bf16, fp16 x86-64-v4".
std::string GemvIsaName();
// The instruction sets this CPU (and OS) supports, best first, "generic" last.
std::vector<std::string> SupportedGemvIsas();
// Caps the kernels at instruction set `name` ("auto" = the best this CPU has, or one of
// SupportedGemvIsas()); `context` names the input in the error for an unknown or unsupported
// name. Process-wide; not thread-safe against running forwards. Without a call the cap is the
// environment variable SPECBED_GEMV_ISA (same names), read at the first GEMV, else "auto".
void SetGemvIsa(const std::string& name, const std::string& context);
// Fails as SetGemvIsa would for `name`, without changing the cap.
void ValidateGemvIsa(const std::string& name, const std::string& context);

}  // namespace specbed
