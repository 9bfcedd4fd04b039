// models/gemv.h: GemvRows against at::mm for random and odd shapes (fp32, bf16, fp16; bias,
// accumulation, several threads) on every kernel this CPU supports (x86-64-v3, x86-64-v4,
// avx512bf16, generic), the choice and naming of the kernels, and LlamaModel's small-row path
// against its ATen path: a 1-token (GEMV) forward equals the last row of a multi-row (BLAS)
// forward.
#include "models/gemv.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/half_bits.h"
#include "models/llama_model.h"
#include "models/llama_weights.h"
#include "tests/common/test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

// Restores the default row threshold, kernels and thread count when a test ends.
struct Restore {
  int threads = at::get_num_threads();
  ~Restore() {
    SetGemvMaxRows(-1);
    SetGemvIsa("auto", "test");
    at::set_num_threads(threads);
  }
};

// max |a - b| / max(1, max |b|), in float64.
double RelativeError(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor a64 = a.to(at::kDouble), b64 = b.to(at::kDouble);
  const double scale = std::max(1.0, b64.abs().max().item<double>());
  return (a64 - b64).abs().max().item<double>() / scale;
}

void CheckShape(int64_t rows, int64_t out_features, int64_t in, at::ScalarType dtype,
                bool with_bias, bool accumulate, double tolerance) {
  SCOPED_TRACE(::testing::Message()
               << "rows " << rows << " out " << out_features << " in " << in << " dtype " << dtype
               << " bias " << with_bias << " accumulate " << accumulate);
  const at::Tensor x = at::randn({rows, in}).to(dtype);
  const at::Tensor w = at::randn({out_features, in}).to(dtype);
  const at::Tensor bias = with_bias ? at::randn({out_features}).to(dtype) : at::Tensor();
  const at::Tensor old = at::randn({rows, out_features}).to(dtype);
  at::Tensor out = accumulate ? old.clone() : at::full({rows, out_features}, 7.0, dtype);
  GemvRows(x, w, bias, out, accumulate);
  // Reference in float64 over the same (rounded) inputs.
  at::Tensor expected = at::mm(x.to(at::kDouble), w.to(at::kDouble).t());
  if (with_bias) expected += bias.to(at::kDouble);
  if (accumulate) expected += old.to(at::kDouble);
  EXPECT_LT(RelativeError(out, expected), tolerance);
  // And against ATen's own GEMM in the storage dtype.
  if (dtype == at::kFloat) {
    at::Tensor aten = at::mm(x, w.t());
    if (with_bias) aten += bias;
    if (accumulate) aten += old;
    EXPECT_LT(RelativeError(out, aten), 1e-5);
  }
}

// CheckShape for every row count of `rows_list` and (out_features, in) of `shapes`, with and
// without bias, accumulating and not.
void CheckShapes(const std::vector<int64_t>& rows_list,
                 const std::vector<std::pair<int64_t, int64_t>>& shapes, at::ScalarType dtype,
                 double tol) {
  for (int64_t rows : rows_list) {
    for (auto [out_features, in] : shapes) {
      for (bool bias : {false, true}) {
        for (bool accumulate : {false, true}) {
          CheckShape(rows, out_features, in, dtype, bias, accumulate, tol);
        }
      }
    }
  }
}

// Every instruction set this CPU supports, each made the kernels' cap in turn.
std::vector<std::string> EachIsa() {
  std::vector<std::string> isas = SupportedGemvIsas();
  EXPECT_EQ(isas.back(), "generic");
  return isas;
}

TEST(GemvRows, MatchesMmForRandomAndOddShapesFloat32) {
  Restore restore;
  at::manual_seed(1);
  for (const std::string& isa : EachIsa()) {
    SCOPED_TRACE(isa);
    SetGemvIsa(isa, "test");
    for (int threads : {1, 2}) {
      at::set_num_threads(threads);
      CheckShapes({1, 2, 3, 4, 5, 6, 7, 8, 9, 17},
                  {{1, 1}, {3, 7}, {8, 8}, {9, 17}, {33, 64}, {100, 129}, {257, 512}, {1000, 31}},
                  at::kFloat, 1e-5);
    }
  }
}

TEST(GemvRows, MatchesMmForRandomAndOddShapesBFloat16AndFloat16) {
  Restore restore;
  at::manual_seed(2);
  // Inputs are exact bf16 / fp16 values; the float32 result is rounded once to the storage type
  // (at most 2^-9 resp. 2^-12 of the largest output). Shapes include in = 64 and 96 (whole
  // vdpbf16ps steps) and odd ones (its tail).
  for (const std::string& isa : EachIsa()) {
    SCOPED_TRACE(isa);
    SetGemvIsa(isa, "test");
    const std::vector<std::pair<int64_t, int64_t>> shapes = {
        {1, 1}, {5, 9}, {16, 24}, {63, 100}, {300, 257}, {40, 64}, {17, 96}};
    CheckShapes({1, 2, 3, 4, 6, 9}, shapes, at::kBFloat16, 4e-3);
    CheckShapes({1, 2, 3, 4, 6, 9}, shapes, at::kHalf, 1e-3);
  }
}

TEST(GemvRows, ResultDoesNotDependOnRowCountOrThreads) {
  Restore restore;
  at::manual_seed(3);
  for (const std::string& isa : EachIsa()) {
    SetGemvIsa(isa, "test");
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      const at::Tensor x = at::randn({12, 300}).to(dtype);
      const at::Tensor w = at::randn({77, 300}).to(dtype);
      at::Tensor one = at::empty({1, 77}, dtype);
      for (int64_t rows = 2; rows <= 12; ++rows) {  // every one-pass count and the 8-row groups
        at::Tensor all = at::empty({rows, 77}, dtype);
        at::set_num_threads(1);
        GemvRows(x.narrow(0, 0, rows), w, {}, all, false);
        at::set_num_threads(2);
        for (int64_t r = 0; r < rows; ++r) {
          GemvRows(x.narrow(0, r, 1), w, {}, one, false);
          EXPECT_TRUE(at::equal(one[0], all[r]))
              << isa << " " << dtype << ": " << rows << " rows, row " << r;
        }
      }
    }
  }
}

// models/half_bits.h: the branch-free float16 conversion of the GEMV kernels and row kernels
// equals c10::Half's for every one of the 65,536 bit patterns (NaNs stay NaN).
TEST(HalfBits, EveryFloat16ValueConvertsAsC10Does) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ours = HalfBitsToFloat(static_cast<uint16_t>(h));
    const float c10 =
        static_cast<float>(c10::Half(static_cast<uint16_t>(h), c10::Half::from_bits()));
    if (std::isnan(c10)) {
      EXPECT_TRUE(std::isnan(ours)) << h;
    } else {
      uint32_t a, b;
      std::memcpy(&a, &ours, 4);
      std::memcpy(&b, &c10, 4);
      ASSERT_EQ(a, b) << "half bits " << h;
    }
  }
}

// The kernel names per dtype under each cap, and clear errors for unknown or unsupported names.
TEST(GemvRows, KernelChoiceAndNames) {
  Restore restore;
  const std::vector<std::string> isas = EachIsa();
  SetGemvIsa("auto", "test");
  EXPECT_EQ(GemvKernelName(at::kBFloat16), isas.front());
  SetGemvIsa("generic", "test");
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    EXPECT_EQ(GemvKernelName(dtype), "generic");
  }
  EXPECT_EQ(GemvIsaName(), "fp32 generic, bf16 generic, fp16 generic");
  if (std::find(isas.begin(), isas.end(), "avx512bf16") != isas.end()) {
    SetGemvIsa("avx512bf16", "test");  // vdpbf16ps only changes the bf16 kernel
    EXPECT_EQ(GemvKernelName(at::kBFloat16), "avx512bf16");
    EXPECT_EQ(GemvKernelName(at::kFloat), "x86-64-v4");
    EXPECT_EQ(GemvKernelName(at::kHalf), "x86-64-v4");
  }
  if (std::find(isas.begin(), isas.end(), "x86-64-v4") != isas.end()) {
    SetGemvIsa("x86-64-v4", "test");
    EXPECT_EQ(GemvKernelName(at::kBFloat16), "x86-64-v4");
  }
  specbed::testing::ExpectError([] { SetGemvIsa("avx9000", "bench --gemv-isa"); },
                                {"bench --gemv-isa", "unknown GEMV instruction set 'avx9000'",
                                 "avx512bf16, x86-64-v4, x86-64-v3 or generic"});
  for (const char* name : {"avx512bf16", "x86-64-v4", "x86-64-v3"}) {
    if (std::find(isas.begin(), isas.end(), name) != isas.end()) continue;
    specbed::testing::ExpectError([&] { SetGemvIsa(name, "ctx"); }, {"not supported by this CPU"});
  }
}

TEST(GemvRows, BadArgumentsFailClearly) {
  const at::Tensor w = at::randn({4, 6});
  at::Tensor out = at::empty({1, 4});
  EXPECT_THROW(GemvRows(at::randn({1, 5}), w, {}, out, false), Error);              // in mismatch
  EXPECT_THROW(GemvRows(at::randn({1, 6}), w.t(), {}, out, false), Error);          // not contig.
  EXPECT_THROW(GemvRows(at::randn({1, 6}), w, at::randn({3}), out, false), Error);  // bias
  EXPECT_THROW(GemvRows(at::randn({1, 6}).to(at::kBFloat16), w, {}, out, false), Error);
  EXPECT_THROW(GemvRows(at::randn({1, 6}), w.to(at::kDouble), {}, out, false), Error);
  EXPECT_THROW(GemvRows(at::randn({1, 6}).to(at::kHalf), w, {}, out, false), Error);
  at::Tensor wrong_out = at::empty({2, 4});
  EXPECT_THROW(GemvRows(at::randn({1, 6}), w, {}, wrong_out, false), Error);
  EXPECT_FALSE(GemvIsaName().empty());
}

TEST(GemvRows, ThresholdDefaultsAndOverride) {
  Restore restore;
  EXPECT_EQ(GemvMaxRows(at::kFloat), kGemvMaxRowsFloat);
  EXPECT_EQ(GemvMaxRows(at::kBFloat16), kGemvMaxRowsBFloat16);
  EXPECT_EQ(GemvMaxRows(at::kHalf), kGemvMaxRowsHalf);
  SetGemvMaxRows(0);
  EXPECT_EQ(GemvMaxRows(at::kFloat), 0);
  SetGemvMaxRows(-1);
  EXPECT_EQ(GemvMaxRows(at::kFloat), kGemvMaxRowsFloat);
}

// The model's last-token logits after a prompt, running the new tokens `n_new` at a time.
at::Tensor LastLogits(LlamaModel& model, const std::vector<int64_t>& ids, int64_t n_new) {
  KvCache cache = model.NewCache(1, static_cast<int64_t>(ids.size()) + 1);
  const int64_t n = static_cast<int64_t>(ids.size());
  at::Tensor all = at::tensor(ids, at::kLong).view({1, n});
  model.Forward(all.narrow(1, 0, n - n_new), cache);
  ForwardOptions options;
  options.logits = LogitsMode::kAll;
  return model.Forward(all.narrow(1, n - n_new, n_new), cache, options).logits[0].clone();
}

TEST(GemvRows, ModelOneTokenForwardEqualsMultiRowForwardLastRow) {
  Restore restore;
  for (const LlamaConfig& config :
       {testing_util::SmallLlama3Config(), testing_util::SmallQwen2Config(),
        testing_util::SmallQwen3Config(), testing_util::SmallLlama2cConfig()}) {
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
      SCOPED_TRACE(::testing::Message() << config.architecture << " " << dtype);
      LlamaModel model(config, RandomLlamaWeights(config, 5, dtype));
      std::mt19937_64 rng(7);
      std::vector<int64_t> ids(12);
      for (auto& id : ids) id = static_cast<int64_t>(rng() % config.vocab_size);
      SetGemvMaxRows(4);  // 1 and 4 new rows: GEMV; 9 rows: ATen's GEMM
      const at::Tensor gemv_one = LastLogits(model, ids, 1);
      const at::Tensor gemv_four = LastLogits(model, ids, 4);
      const at::Tensor blas_nine = LastLogits(model, ids, 9);
      SetGemvMaxRows(0);  // everything through ATen
      const at::Tensor blas_one = LastLogits(model, ids, 1);
      const double tol = dtype == at::kFloat ? 1e-5 : dtype == at::kHalf ? 1e-2 : 3e-2;
      EXPECT_LT(RelativeError(gemv_one[0], blas_nine[8]), tol);
      EXPECT_LT(RelativeError(gemv_one[0], blas_one[0]), tol);
      EXPECT_LT(RelativeError(gemv_four[3], blas_nine[8]), tol);
      EXPECT_LT(RelativeError(gemv_four[0], blas_nine[5]), tol);
    }
  }
}

}  // namespace
}  // namespace specbed

namespace specbed {
namespace {

// Timing probe, not a check: `gemv_test --gtest_also_run_disabled_tests --gtest_filter=*Speed*`
// prints GemvRows vs at::mm microseconds per call for 1..8 rows on a [2816, 512] matrix.
TEST(GemvRows, DISABLED_Speed) {
  at::set_num_threads(1);
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    const at::Tensor w = at::randn({2816, 512}).to(dtype);
    const at::Tensor w_t = w.t();
    for (int64_t rows : {1, 2, 3, 4, 6, 8}) {
      const at::Tensor x = at::randn({rows, 512}).to(dtype);
      at::Tensor out = at::empty({rows, 2816}, dtype);
      auto time_us = [&](auto&& f) {
        for (int i = 0; i < 20; ++i) f();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < 200; ++i) f();
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                   .count() /
               200;
      };
      const double gemv = time_us([&] { GemvRows(x, w, {}, out, false); });
      const double mm = time_us([&] { at::mm_out(out, x, w_t); });
      std::printf("%s rows %lld: GemvRows %.1f us, at::mm %.1f us\n",
                  dtype == at::kFloat ? "fp32" : "bf16", static_cast<long long>(rows), gemv, mm);
    }
  }
}

}  // namespace
}  // namespace specbed
