// models/gemv.h: GemvRows against at::mm for random and odd shapes (fp32, bf16; bias,
// accumulation, several threads), and LlamaModel's small-row path against its ATen path: a
// 1-token (GEMV) forward equals the last row of a multi-row (BLAS) forward.
#include "models/gemv.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "harness/base/error.h"
#include "models/llama_model.h"
#include "models/llama_weights.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

// Restores the default row threshold and thread count when a test ends.
struct Restore {
  int threads = at::get_num_threads();
  ~Restore() {
    SetGemvMaxRows(-1);
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
  SCOPED_TRACE(testing::Message() << "rows " << rows << " out " << out_features << " in " << in
                                  << " dtype " << dtype << " bias " << with_bias << " accumulate "
                                  << accumulate);
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

TEST(GemvRows, MatchesMmForRandomAndOddShapesFloat32) {
  Restore restore;
  at::manual_seed(1);
  for (int threads : {1, 2}) {
    at::set_num_threads(threads);
    CheckShapes({1, 2, 3, 4, 5, 6, 7, 8, 9},
                {{1, 1}, {3, 7}, {8, 8}, {9, 17}, {33, 64}, {100, 129}, {257, 512}, {1000, 31}},
                at::kFloat, 1e-5);
  }
}

TEST(GemvRows, MatchesMmForRandomAndOddShapesBFloat16) {
  Restore restore;
  at::manual_seed(2);
  // Inputs are exact bf16 values; the float32 result is rounded once to bf16 (at most 2^-9 of the
  // largest output).
  CheckShapes({1, 2, 3, 4, 6}, {{1, 1}, {5, 9}, {16, 24}, {63, 100}, {300, 257}}, at::kBFloat16,
              4e-3);
}

TEST(GemvRows, ResultDoesNotDependOnRowCountOrThreads) {
  Restore restore;
  at::manual_seed(3);
  const at::Tensor x = at::randn({8, 300});
  const at::Tensor w = at::randn({77, 300});
  at::Tensor one = at::empty({1, 77});
  for (int64_t rows = 2; rows <= 8; ++rows) {  // every one-pass tile (5..8) and the 4-row groups
    at::Tensor all = at::empty({rows, 77});
    at::set_num_threads(1);
    GemvRows(x.narrow(0, 0, rows), w, {}, all, false);
    at::set_num_threads(2);
    for (int64_t r = 0; r < rows; ++r) {
      GemvRows(x.narrow(0, r, 1), w, {}, one, false);
      EXPECT_TRUE(at::equal(one[0], all[r])) << rows << " rows, row " << r;
    }
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
  at::Tensor wrong_out = at::empty({2, 4});
  EXPECT_THROW(GemvRows(at::randn({1, 6}), w, {}, wrong_out, false), Error);
  EXPECT_FALSE(GemvIsaName().empty());
}

TEST(GemvRows, ThresholdDefaultsAndOverride) {
  Restore restore;
  EXPECT_EQ(GemvMaxRows(at::kFloat), kGemvMaxRowsFloat);
  EXPECT_EQ(GemvMaxRows(at::kBFloat16), kGemvMaxRowsBFloat16);
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
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
      SCOPED_TRACE(testing::Message() << config.architecture << " " << dtype);
      LlamaModel model(config, RandomLlamaWeights(config, 5, dtype));
      std::mt19937_64 rng(7);
      std::vector<int64_t> ids(12);
      for (auto& id : ids) id = static_cast<int64_t>(rng() % config.vocab_size);
      SetGemvMaxRows(-1);  // 1 and 4 new rows: GEMV (fp32); 9 rows: BLAS
      const at::Tensor gemv_one = LastLogits(model, ids, 1);
      const at::Tensor gemv_four = LastLogits(model, ids, 4);
      const at::Tensor blas_nine = LastLogits(model, ids, 9);
      SetGemvMaxRows(0);  // everything through ATen
      const at::Tensor blas_one = LastLogits(model, ids, 1);
      const double tol = dtype == at::kFloat ? 1e-5 : 3e-2;
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
