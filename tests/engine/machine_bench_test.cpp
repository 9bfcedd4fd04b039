// harness/engine/machine_bench.h: the bandwidth figures (STREAM, device copy) are positive and
// finite, the verify-width curve covers the widths asked for (plus n = 1) with ratio 1 at n = 1,
// the roofline arithmetic, the weight byte count, and clear errors for bad arguments.
#include "harness/engine/machine_bench.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cmath>

#include "base/error.h"
#include "models/llama_weights.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

TEST(MachineBench, MemoryBandwidthIsPositiveAndFinite) {
  const int threads_before = at::get_num_threads();
  for (int threads : {1, 2}) {
    const MemoryBandwidth bw = MeasureMemoryBandwidth(threads, int64_t{8} << 20, 2);
    EXPECT_EQ(bw.threads, threads);
    EXPECT_EQ(bw.array_bytes, int64_t{8} << 20);
    EXPECT_TRUE(std::isfinite(bw.copy_gb_s) && bw.copy_gb_s > 0) << bw.copy_gb_s;
    EXPECT_TRUE(std::isfinite(bw.triad_gb_s) && bw.triad_gb_s > 0) << bw.triad_gb_s;
  }
  EXPECT_EQ(at::get_num_threads(), threads_before);
  EXPECT_THROW(MeasureMemoryBandwidth(0), Error);
  EXPECT_THROW(MeasureMemoryBandwidth(1, 10), Error);
  EXPECT_THROW(MeasureMemoryBandwidth(1, 1 << 20, 0), Error);
}

// The roofline of a GPU case; on the CPU it is an ATen copy, which must measure something real.
TEST(MachineBench, DeviceCopyBandwidthIsPositiveAndFinite) {
  const double gb_s = MeasureDeviceCopyBandwidth(at::kCPU, int64_t{8} << 20, 2);
  EXPECT_TRUE(std::isfinite(gb_s) && gb_s > 0) << gb_s;
  EXPECT_THROW(MeasureDeviceCopyBandwidth(at::kCPU, 10, 2), Error);
  EXPECT_THROW(MeasureDeviceCopyBandwidth(at::kCPU, 1 << 20, 0), Error);
}

TEST(MachineBench, VerifyWidthCurveCoversWidthsWithRatioToOne) {
  const LlamaConfig config = testing_util::SmallLlama3Config();
  LlamaModel model(config, RandomLlamaWeights(config, 3));
  const std::vector<VerifyWidthPoint> curve = MeasureVerifyWidthCurve(model, 5, {4, 2, 4}, 3);
  ASSERT_EQ(curve.size(), 3u);
  EXPECT_EQ(curve[0].n_query, 1);
  EXPECT_EQ(curve[1].n_query, 4);
  EXPECT_EQ(curve[2].n_query, 2);
  EXPECT_DOUBLE_EQ(curve[0].ratio_to_one, 1.0);
  for (const auto& p : curve) {
    EXPECT_GT(p.forward_ms, 0.0);
    EXPECT_NEAR(p.ratio_to_one, p.forward_ms / curve[0].forward_ms, 1e-12);
  }
  EXPECT_THROW(MeasureVerifyWidthCurve(model, 5, {0}, 1), Error);
  EXPECT_THROW(MeasureVerifyWidthCurve(model, 5, {-3}, 1), Error);
  EXPECT_THROW(MeasureVerifyWidthCurve(model, 5, {}, 1), Error);
  EXPECT_THROW(MeasureVerifyWidthCurve(model, config.max_seq_len, {1}, 1), Error);
}

TEST(MachineBench, WeightBytesAndRooflineFraction) {
  const LlamaConfig config = testing_util::SmallQwen2Config();  // q/k/v bias, tied head
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    LlamaModel model(config, RandomLlamaWeights(config, 4, dtype));
    int64_t per_layer = config.qkv_dim() * config.dim + config.qkv_dim() +
                        config.dim * config.q_dim() + 3 * config.hidden_dim * config.dim;
    const int64_t elements = config.n_layers * per_layer + config.vocab_size * config.dim;
    EXPECT_EQ(DecodeWeightBytes(model), elements * (dtype == at::kFloat ? 4 : 2));
  }
  // 1e9 bytes at 10 GB/s = 100 ms; measured 125 ms -> 0.8.
  EXPECT_DOUBLE_EQ(RooflineFraction(1000000000, 10.0, 125.0), 0.8);
  EXPECT_TRUE(std::isnan(RooflineFraction(1000, 0.0, 1.0)));
  // PyPI's LibTorch: MKL with the CPU capability ATen dispatches to ("mkl/AVX512").
  EXPECT_NE(BlasCoreName(), "unknown");
  EXPECT_NE(BlasCoreName().find('/'), std::string::npos) << BlasCoreName();
  EXPECT_NE(BlasCoreDescription().find(BlasCoreName()), std::string::npos);
}

}  // namespace
}  // namespace specbed
