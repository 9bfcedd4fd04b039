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
// Numerics: each out[r, j] is one 8-lane float32 chain over i (FMA where the CPU has it), a fixed
// horizontal sum, then + bias, then + the old out value, rounded once to the storage type. The
// result does not depend on the row count or on how output features are split across threads.
//
// Checked by: tests/models/gemv_test.cpp (against at::mm for random and odd shapes, fp32 and
// bf16, with/without bias and accumulation; LlamaModel 1-token forward vs multi-row forward).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

namespace specbed {

// Largest number of activation rows for which LlamaModel::Forward uses GemvRows instead of ATen.
// Measured with `specbed bench -t random-35m -c 64 --verify-widths 1,2,3,4,6,8 --gemv-max-rows
// 0|8` (2-core AMD EPYC Zen 4 VM shared with other builds, so +-20% noise; 1 thread; OpenBLAS
// 0.3.21 with OPENBLAS_CORETYPE=Haswell; forward ms for n = 1/2/3/4/6/8 rows):
//   fp32  ATen 23.6/24.1/29.4/22.0/26.9/25.8   GEMV  8.9/11.6/14.6/18.0/25.9/32.0
//   bf16  ATen 10.5/13.5/13.8/13.9/14.4/14.7   GEMV  6.2/ 7.7/10.8/13.8/20.7/25.9
// (an earlier bf16 ATen run: 9.5/9.5/9.6/9.8/9.0/6.6). A quieter fp32 run, n = 1/4 rows, ATen
// vs GEMV: random-35m 22.7/16.0 vs 5.6/13.3 ms (OPENBLAS_CORETYPE=Haswell: 16.3/15.5 vs
// 8.5/12.6); a width-512 16-layer shape 13.4/23.6 vs 8.2/17.8 (Haswell: 18.9/18.5 vs 8.4/19.0).
// stories260K-twin (width 512, 16 layers, the cost-twin target), n = 1/2/3/4 rows, ATen vs GEMV:
//   fp32  default core 14.0/18.7/22.4/20.7 vs 8.0/11.6/15.6/17.7; Haswell 18.6/19.5/25.2/18.8 vs
//         8.2/11.8/15.8/18.5
//   bf16  default core  7.5/ 8.1/ 8.6/ 9.4 vs 5.4/ 8.5/ 8.7/ 9.7; Haswell  7.3/ 7.7/ 8.2/ 8.9 vs
//         5.0/ 8.2/ 8.8/ 9.6
// GEMV wins at 1-3 rows in fp32 and ties or wins at 4 (OpenBLAS's small-M sgemm is far from the
// memory roofline); in bf16 only the 1-row step wins (oneDNN's AVX512-BF16 kernels are well
// blocked beyond that).
//
// With the software prefetch (8 KiB ahead in each weight row, gemv.cpp) the multi-row kernel
// overlaps DRAM streaming with its FMAs; before it, 4 rows out of cache ran at ~12 GFMA/s against
// ~40 in cache. stories260K-twin, 1 thread, context 64, default core (2026-11-24, `specbed bench
// --verify-widths ... --gemv-max-rows 0|8|16`): fp32 n = 1/2/3/4/6/8 rows 6.9/7.0/7.5/7.9 ms
// (4 rows = 1.15x one row) and 6/8 rows 12.0/15.1 ms with GEMV vs 21.5/22.4 ms through BLAS;
// 12/16 rows 22.9/30.0 vs ~33 (a tie, so BLAS from 9 rows on). bf16 n = 1/2/4/8: GEMV
// 5.0/5.4/8.6/12.6 ms vs oneDNN (from 2 rows) 4.6/8.0/9.4/12.3.
inline constexpr int64_t kGemvMaxRowsFloat = 8;
inline constexpr int64_t kGemvMaxRowsBFloat16 = 4;

// The row threshold in use for `dtype` (kFloat or kBFloat16): the constants above unless
// overridden by SetGemvMaxRows.
int64_t GemvMaxRows(at::ScalarType dtype);
// Overrides the threshold for both dtypes (0 = always ATen/BLAS, for A/B measurements); a
// negative value restores the defaults. Process-wide; not thread-safe against running forwards.
void SetGemvMaxRows(int64_t max_rows);

// out[r, j] = (accumulate ? out[r, j] : 0) + (bias defined ? bias[j] : 0)
//             + sum_i x[r, i] * weight[j, i]
// x:      [rows, in] contiguous, same dtype as weight (any rows >= 0; fastest for rows <= 4).
// weight: [out_features, in] contiguous, float32 or bfloat16.
// bias:   [out_features] contiguous, weight's dtype, or undefined.
// out:    [rows, out_features] contiguous, weight's dtype; must not overlap x or weight.
// Parallel over output features with at::parallel_for (at::get_num_threads threads).
void GemvRows(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
              const at::Tensor& out, bool accumulate);

// The instruction set GemvRows runs on this CPU: "x86-64-v3" (AVX2 + FMA) or "generic".
std::string GemvIsaName();

}  // namespace specbed
