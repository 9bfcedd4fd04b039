// SpecBed's small-row matrix-vector product (see gemv.h): argument checks, the choice of kernel
// table by the CPU (models/gemv_kernels.h; the kernels themselves are gemv_kernels.inc, compiled
// per instruction set) and the split of output features across threads.
#include "models/gemv.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <vector>

#include "base/error.h"
#include "base/names.h"
#include "models/gemv_kernels.h"

namespace specbed {
namespace {

using gemv::CpuHas;
using gemv::Isa;

std::atomic<int64_t> g_max_rows_override{-1};
// The instruction-set cap: -1 = not set yet (SPECBED_GEMV_ISA or the best at the first use).
std::atomic<int> g_isa_cap{-1};

constexpr const char* kIsaNames[gemv::kIsaCount] = {"generic", "x86-64-v3", "x86-64-v4",
                                                    "avx512bf16"};

Isa BestIsa() {
  for (int i = gemv::kIsaCount - 1; i > 0; --i) {
    if (CpuHas(static_cast<Isa>(i))) return static_cast<Isa>(i);
  }
  return Isa::kGeneric;
}

// "auto" -> the best this CPU has; otherwise a supported instruction set by name.
Isa ParseIsa(const std::string& name, const std::string& context) {
  if (name == "auto") return BestIsa();
  for (int i = 0; i < gemv::kIsaCount; ++i) {
    if (name != kIsaNames[i]) continue;
    SPECBED_CHECK(CpuHas(static_cast<Isa>(i)), context, ": GEMV instruction set '", name,
                  "' is not supported by this CPU (supported: ", Join(SupportedGemvIsas(), ", "),
                  ")");
    return static_cast<Isa>(i);
  }
  Fail(context, ": unknown GEMV instruction set '", name,
       "' (expected auto, avx512bf16, x86-64-v4, x86-64-v3 or generic)");
}

Isa CurrentIsa() {
  int cap = g_isa_cap.load(std::memory_order_relaxed);
  if (cap < 0) {
    const char* env = std::getenv("SPECBED_GEMV_ISA");
    cap = static_cast<int>(ParseIsa(env != nullptr && *env != 0 ? env : "auto",
                                    "environment variable SPECBED_GEMV_ISA"));
    g_isa_cap.store(cap, std::memory_order_relaxed);
  }
  return static_cast<Isa>(cap);
}

gemv::Storage StorageOf(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return gemv::Storage::kFloat;
    case at::kBFloat16:
      return gemv::Storage::kBFloat16;
    case at::kHalf:
      return gemv::Storage::kHalf;
    default:
      Fail("GemvRows: weight must be float32, bfloat16 or float16, got ", dtype);
  }
}

// The table whose kernel runs for `dtype`: vdpbf16ps only changes the bf16 kernel, so the other
// dtypes report (and run) the plain AVX-512 table under the avx512bf16 cap.
const gemv::Table& TableFor(at::ScalarType dtype) {
  Isa isa = CurrentIsa();
  if (isa == Isa::kAvx512Bf16 && dtype != at::kBFloat16) isa = Isa::kAvx512;
  const gemv::Table* table = gemv::TableOf(isa);
  return table != nullptr ? *table : gemv::GenericTable();
}

// The activations as float32 (a copy of a few KB for 16-bit dtypes), unless the kernel reads them
// in the weight's dtype.
const void* KernelInput(const at::Tensor& x, bool native) {
  if (x.scalar_type() == at::kFloat || native) return x.data_ptr();
  thread_local std::vector<float> x_float;
  const int64_t n = x.numel();
  x_float.resize(static_cast<size_t>(n));
  if (x.scalar_type() == at::kBFloat16) {
    const c10::BFloat16* xb = x.data_ptr<c10::BFloat16>();
    for (int64_t i = 0; i < n; ++i) x_float[i] = static_cast<float>(xb[i]);
  } else {
    const c10::Half* xh = x.data_ptr<c10::Half>();
    for (int64_t i = 0; i < n; ++i) x_float[i] = static_cast<float>(xh[i]);
  }
  return x_float.data();
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
  if (dtype == at::kHalf) return kGemvMaxRowsHalf;
  return dtype == at::kBFloat16 ? kGemvMaxRowsBFloat16 : kGemvMaxRowsFloat;
}

void SetGemvMaxRows(int64_t max_rows) {
  g_max_rows_override.store(max_rows < 0 ? -1 : max_rows, std::memory_order_relaxed);
}

std::string GemvKernelName(at::ScalarType dtype) {
  return TableFor(dtype).name;
}

std::string GemvIsaName() {
  return StrCat("fp32 ", GemvKernelName(at::kFloat), ", bf16 ", GemvKernelName(at::kBFloat16),
                ", fp16 ", GemvKernelName(at::kHalf));
}

std::vector<std::string> SupportedGemvIsas() {
  std::vector<std::string> names;
  for (int i = gemv::kIsaCount - 1; i >= 0; --i) {
    if (CpuHas(static_cast<Isa>(i))) names.push_back(kIsaNames[i]);
  }
  return names;
}

void SetGemvIsa(const std::string& name, const std::string& context) {
  g_isa_cap.store(static_cast<int>(ParseIsa(name, context)), std::memory_order_relaxed);
}

void ValidateGemvIsa(const std::string& name, const std::string& context) {
  ParseIsa(name, context);
}

void GemvRows(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
              const at::Tensor& out, bool accumulate) {
  const at::ScalarType dtype = weight.scalar_type();
  const gemv::Storage storage = StorageOf(dtype);
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

  const gemv::Table& table = TableFor(dtype);
  const gemv::RangeFn range = table.range[static_cast<int>(storage)];
  const bool native_x = storage == gemv::Storage::kBFloat16 && table.bf16_x;
  const gemv::Args args{KernelInput(x, native_x),
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
    range(args, b0 * kBlock, std::min(out_features, b1 * kBlock));
  });
}

}  // namespace specbed
