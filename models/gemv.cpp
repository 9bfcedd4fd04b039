// SpecBed's small-row matrix-vector product (see gemv.h). The kernels are compiled twice
// (target_clones: x86-64-v3 = AVX2 + FMA, and the baseline), picked at load time by the CPU; the
// file is built with -ffp-contract=fast so that `acc += x * w` becomes an FMA in the v3 clone.
#include "models/gemv.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "harness/base/error.h"

namespace specbed {
namespace {

// GCC vector extensions: 8 float lanes (one ymm register with AVX2; two xmm otherwise).
typedef float V8f __attribute__((vector_size(32)));
typedef uint32_t V8u __attribute__((vector_size(32)));
typedef uint16_t V8h __attribute__((vector_size(16)));

constexpr int64_t kLanes = 8;
// Prefetch distance in weight elements (8 KiB of fp32): far enough ahead to hide DRAM latency while
// the multi-row blocks are busy with FMAs (measured 512 / 1024 / 2048 / 4096: see gemv.h).
constexpr int64_t kPrefetchFloats = 2048;

std::atomic<int64_t> g_max_rows_override{-1};

inline __attribute__((always_inline)) V8f LoadVec(const float* p) {
  V8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// bfloat16 -> float32 is the upper half of the float bits.
inline __attribute__((always_inline)) V8f LoadVec(const c10::BFloat16* p) {
  V8h h;
  std::memcpy(&h, p, sizeof(h));
  const V8u u = __builtin_convertvector(h, V8u) << 16;
  V8f v;
  std::memcpy(&v, &u, sizeof(v));
  return v;
}

inline __attribute__((always_inline)) float LoadScalar(const float* p) {
  return *p;
}
inline __attribute__((always_inline)) float LoadScalar(const c10::BFloat16* p) {
  return static_cast<float>(*p);
}

// Fixed-order horizontal sum (the same for every row count and block shape).
inline __attribute__((always_inline)) float HorizontalSum(V8f v) {
  return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}

struct GemvArgs {
  const float* x;  // [rows, in] float32 (bf16 activations are converted once per call)
  int64_t rows, in;
  const void* weight;  // [out_features, in], W
  const void* bias;    // [out_features], W, or nullptr
  void* out;           // [rows, out_features], W
  int64_t out_features;
  bool accumulate;
};

// Computes out[r, j0 .. j0 + J) for R rows starting at row r0. x rows stay in L1; each weight
// row is streamed once per call of this block.
template <typename W, int R, int J>
inline __attribute__((always_inline)) void Block(const GemvArgs& a, int64_t r0, int64_t j0) {
  const W* w = static_cast<const W*>(a.weight) + j0 * a.in;
  const float* x = a.x + r0 * a.in;
  V8f acc[R][J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) acc[r][j] = V8f{};
  const int64_t in_vec = a.in / kLanes * kLanes;
  for (int64_t i = 0; i < in_vec; i += kLanes) {
    V8f xv[R];
    for (int r = 0; r < R; ++r) xv[r] = LoadVec(x + r * a.in + i);
    for (int j = 0; j < J; ++j) {
      // Software prefetch kPrefetchFloats ahead in the weight stream: with several rows the loop
      // is FMA-heavy and the hardware prefetcher alone leaves DRAM latency exposed. (Prefetching
      // past the end of a row is harmless: prefetches never fault.)
      __builtin_prefetch(w + j * a.in + i + kPrefetchFloats, 0, 0);
      const V8f wv = LoadVec(w + j * a.in + i);
      for (int r = 0; r < R; ++r) acc[r][j] += xv[r] * wv;
    }
  }
  const W* bias = static_cast<const W*>(a.bias);
  W* out = static_cast<W*>(a.out);
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < J; ++j) {
      float sum = HorizontalSum(acc[r][j]);
      for (int64_t i = in_vec; i < a.in; ++i) sum += x[r * a.in + i] * LoadScalar(w + j * a.in + i);
      if (bias != nullptr) sum += LoadScalar(bias + j0 + j);
      W* o = out + (r0 + r) * a.out_features + j0 + j;
      if (a.accumulate) sum += LoadScalar(o);
      *o = static_cast<W>(sum);
    }
  }
}

// Rows [r0, r0 + R) x output features [j_begin, j_end): blocks of J features, then single ones.
template <typename W, int R, int J>
inline __attribute__((always_inline)) void RowGroup(const GemvArgs& a, int64_t r0, int64_t j_begin,
                                                    int64_t j_end) {
  int64_t j = j_begin;
  for (; j + J <= j_end; j += J) Block<W, R, J>(a, r0, j);
  for (; j < j_end; ++j) Block<W, R, 1>(a, r0, j);
}

// Register budget (16 ymm with AVX2): R*J accumulators + R x vectors + J weight vectors. Up to 8
// rows take one pass over the weights (R = rows, J = 2; from 5 rows on the x vectors are re-read
// from L1 where registers run out): splitting 5 rows as 4 + 1 streamed the weights twice and made
// a 5-row verify cost 2.3 one-row forwards on the memory-bound stories260K-twin, against 1.4 now
// (results/bench_gemv_rows_cpu.md).
template <typename W>
inline __attribute__((always_inline)) void Range(const GemvArgs& a, int64_t j_begin,
                                                 int64_t j_end) {
  switch (a.rows) {
    case 8:
      return RowGroup<W, 8, 2>(a, 0, j_begin, j_end);
    case 7:
      return RowGroup<W, 7, 2>(a, 0, j_begin, j_end);
    case 6:
      return RowGroup<W, 6, 2>(a, 0, j_begin, j_end);
    case 5:
      return RowGroup<W, 5, 2>(a, 0, j_begin, j_end);
    default:
      break;
  }
  int64_t r = 0;
  for (; r + 4 <= a.rows; r += 4) RowGroup<W, 4, 2>(a, r, j_begin, j_end);
  switch (a.rows - r) {
    case 3:
      RowGroup<W, 3, 3>(a, r, j_begin, j_end);
      break;
    case 2:
      RowGroup<W, 2, 4>(a, r, j_begin, j_end);
      break;
    case 1:
      RowGroup<W, 1, 8>(a, r, j_begin, j_end);
      break;
    default:
      break;
  }
}

__attribute__((target_clones("arch=x86-64-v3", "default"))) void RangeFloat(const GemvArgs& a,
                                                                            int64_t j_begin,
                                                                            int64_t j_end) {
  Range<float>(a, j_begin, j_end);
}

__attribute__((target_clones("arch=x86-64-v3", "default"))) void RangeBFloat16(const GemvArgs& a,
                                                                               int64_t j_begin,
                                                                               int64_t j_end) {
  Range<c10::BFloat16>(a, j_begin, j_end);
}

bool Overlaps(const at::Tensor& a, const at::Tensor& b) {
  const auto* a0 = static_cast<const char*>(a.data_ptr());
  const auto* b0 = static_cast<const char*>(b.data_ptr());
  const auto* a1 = a0 + a.numel() * a.element_size();
  const auto* b1 = b0 + b.numel() * b.element_size();
  return a0 < b1 && b0 < a1;
}

}  // namespace

int64_t GemvMaxRows(at::ScalarType dtype) {
  const int64_t override_rows = g_max_rows_override.load(std::memory_order_relaxed);
  if (override_rows >= 0) return override_rows;
  return dtype == at::kBFloat16 ? kGemvMaxRowsBFloat16 : kGemvMaxRowsFloat;
}

void SetGemvMaxRows(int64_t max_rows) {
  g_max_rows_override.store(max_rows < 0 ? -1 : max_rows, std::memory_order_relaxed);
}

std::string GemvIsaName() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("x86-64-v3") ? "x86-64-v3" : "generic";
}

void GemvRows(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
              const at::Tensor& out, bool accumulate) {
  const at::ScalarType dtype = weight.scalar_type();
  SPECBED_CHECK(dtype == at::kFloat || dtype == at::kBFloat16,
                "GemvRows: weight must be float32 or bfloat16, got ", dtype);
  SPECBED_CHECK(weight.dim() == 2 && weight.is_contiguous(),
                "GemvRows: weight must be a contiguous [out_features, in] matrix");
  const int64_t out_features = weight.size(0), in = weight.size(1);
  SPECBED_CHECK(x.dim() == 2 && x.size(1) == in && x.is_contiguous() && x.scalar_type() == dtype,
                "GemvRows: x must be contiguous [rows, ", in, "] of the weight's dtype");
  const int64_t rows = x.size(0);
  SPECBED_CHECK(out.dim() == 2 && out.size(0) == rows && out.size(1) == out_features &&
                    out.is_contiguous() && out.scalar_type() == dtype,
                "GemvRows: out must be contiguous [", rows, ", ", out_features,
                "] of the weight's dtype");
  SPECBED_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == out_features &&
                                    bias.is_contiguous() && bias.scalar_type() == dtype),
                "GemvRows: bias must be contiguous [", out_features, "] of the weight's dtype");
  if (rows == 0 || out_features == 0) return;
  SPECBED_CHECK(!Overlaps(out, x) && !Overlaps(out, weight), "GemvRows: out overlaps x or weight");

  // Activations as float32 (a copy only for bf16; a few KB).
  thread_local std::vector<float> x_float;
  const float* xf;
  if (dtype == at::kFloat) {
    xf = x.data_ptr<float>();
  } else {
    x_float.resize(static_cast<size_t>(rows * in));
    const c10::BFloat16* xb = x.data_ptr<c10::BFloat16>();
    for (int64_t i = 0; i < rows * in; ++i) x_float[i] = static_cast<float>(xb[i]);
    xf = x_float.data();
  }
  GemvArgs args{xf,
                rows,
                in,
                weight.data_ptr(),
                bias.defined() ? bias.data_ptr() : nullptr,
                out.data_ptr(),
                out_features,
                accumulate};
  // Tasks of >= ~64 KiB of weights in blocks of 8 output features, so threads share the
  // streaming evenly and a task never splits a block.
  constexpr int64_t kBlock = 8;
  const int64_t n_blocks = (out_features + kBlock - 1) / kBlock;
  const int64_t block_bytes = kBlock * in * static_cast<int64_t>(weight.element_size());
  const int64_t grain =
      std::max<int64_t>(1, (int64_t{64} << 10) / std::max<int64_t>(1, block_bytes));
  at::parallel_for(0, n_blocks, grain, [&](int64_t b0, int64_t b1) {
    const int64_t j0 = b0 * kBlock, j1 = std::min(out_features, b1 * kBlock);
    if (dtype == at::kFloat) {
      RangeFloat(args, j0, j1);
    } else {
      RangeBFloat16(args, j0, j1);
    }
  });
}

}  // namespace specbed
