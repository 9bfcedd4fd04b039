// Tests of the fused decoder-layer ops (kernels/decoder_ops.h): each CPU reference against an ATen
// composition of the same math written here (float32, or float64 for attention, rounded once to
// the dtype), over float32, bfloat16 and float16, strided and in-place rows, RoPE halves and
// interleaved, with and without the q/k norm, batch 2 with positions apart from slots, attention
// over random trees and causal rows (grouped-query, per-sequence cached lengths, a row that sees
// nothing, 64 new rows); untouched cache slots stay untouched;
// argument errors name the argument; and, on a machine with a CUDA device and a CUDA build, the
// CUDA kernels against the CPU references (DecoderOpsCuda; skipped otherwise, failed instead with
// SPECBED_REQUIRE_CUDA=1). Seeds fixed (at::manual_seed, std::mt19937_64).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/decoder_ops.h"
#include "kernels/step_staging.h"
#include "tests/common/cuda_test_util.h"
#include "tests/common/test_util.h"

namespace specbed {
namespace {

using testing::ErrorOf;
using testing::kNoSpecbedError;

constexpr at::ScalarType kDtypes[] = {at::kFloat, at::kBFloat16, at::kHalf};
constexpr double kEps = 1e-5;

// Equal up to one rounding of `dtype` (the composition and the kernel may round a float32 value
// that differs in its last bits to neighbouring representable numbers).
void ExpectClose(const at::Tensor& got, const at::Tensor& want, at::ScalarType dtype) {
  const double rtol = dtype == at::kFloat ? 1e-5 : (dtype == at::kBFloat16 ? 8e-3 : 1e-3);
  ASSERT_EQ(got.sizes(), want.sizes());
  EXPECT_TRUE(at::allclose(got.to(at::kFloat).cpu(), want.to(at::kFloat).cpu(), rtol, 1e-5))
      << "max |diff| " << (got.to(at::kFloat).cpu() - want.to(at::kFloat).cpu()).abs().max();
}

at::Tensor RmsNormComposition(const at::Tensor& x, const at::Tensor& w) {
  const at::Tensor xf = x.to(at::kFloat);
  return (xf * (xf * xf).mean(-1, true).add(kEps).rsqrt() * w).to(x.scalar_type());
}

// (x0 cos - x1 sin, x1 cos + x0 sin) over pairs of the last dim; cos, sin broadcast [..., hd/2].
at::Tensor RopeComposition(const at::Tensor& xf, const at::Tensor& cos, const at::Tensor& sin,
                           bool interleaved) {
  const int64_t half = xf.size(-1) / 2;
  at::Tensor x0, x1;
  if (interleaved) {
    x0 = xf.slice(-1, 0, 2 * half, 2);
    x1 = xf.slice(-1, 1, 2 * half, 2);
  } else {
    x0 = xf.narrow(-1, 0, half);
    x1 = xf.narrow(-1, half, half);
  }
  const at::Tensor y0 = x0 * cos - x1 * sin, y1 = x1 * cos + x0 * sin;
  if (!interleaved) return at::cat({y0, y1}, -1);
  return at::stack({y0, y1}, -1).flatten(-2);
}

struct RopeCase {
  int64_t batch = 2, tokens = 3, heads = 4, kv_heads = 2, hd = 8, max_len = 11, layers = 2;
  int64_t layer = 1;
  at::ScalarType dtype = at::kFloat;
  bool interleaved = false, norms = false;
  at::Tensor qkv, positions, slots, cos, sin, q_norm, k_norm, q_out, cache;
};

RopeCase MakeRopeCase(at::ScalarType dtype, bool interleaved, bool norms, uint64_t seed) {
  RopeCase c;
  c.dtype = dtype;
  c.interleaved = interleaved;
  c.norms = norms;
  at::manual_seed(seed);
  std::mt19937_64 rng(seed);
  const int64_t rows = c.batch * c.tokens, half = c.hd / 2, n_pos = 40;
  c.qkv = at::randn({rows, (c.heads + 2 * c.kv_heads) * c.hd}).to(dtype);
  std::vector<int64_t> pos(rows), slot(rows);
  for (int64_t b = 0; b < c.batch; ++b) {
    std::vector<int64_t> free(c.max_len);
    for (int64_t i = 0; i < c.max_len; ++i) free[i] = i;
    std::shuffle(free.begin(), free.end(), rng);
    for (int64_t t = 0; t < c.tokens; ++t) {
      pos[b * c.tokens + t] = static_cast<int64_t>(rng() % n_pos);
      slot[b * c.tokens + t] = free[t];  // distinct within a sequence
    }
  }
  c.positions = at::tensor(pos, at::kLong);
  c.slots = at::tensor(slot, at::kLong);
  const at::Tensor angle = at::arange(n_pos, at::kDouble).unsqueeze(1) *
                           at::pow(10000.0, -at::arange(half, at::kDouble) * 2 / c.hd);
  c.cos = angle.cos().to(at::kFloat);
  c.sin = angle.sin().to(at::kFloat);
  if (norms) {
    c.q_norm = at::rand({c.hd}) + 0.5;
    c.k_norm = at::rand({c.hd}) + 0.5;
  }
  c.q_out = at::full({c.batch, c.heads, c.tokens, c.hd}, 7.0).to(dtype);
  c.cache = at::full({c.layers, 2, c.batch, c.kv_heads, c.max_len, c.hd}, 9.0).to(dtype);
  return c;
}

void RunRope(RopeCase& c) {
  FusedRopeKvWrite(c.qkv, c.positions, c.slots, c.cos, c.sin, c.q_norm, c.k_norm, kEps,
                   c.interleaved, c.q_out, c.cache, c.layer);
}

// What RunRope must write: q_out, and the cache with the new rows.
std::pair<at::Tensor, at::Tensor> RopeComposition(const RopeCase& c) {
  const at::Tensor x =
      c.qkv.view({c.batch, c.tokens, c.heads + 2 * c.kv_heads, c.hd}).to(at::kFloat);
  at::Tensor q = x.narrow(2, 0, c.heads), k = x.narrow(2, c.heads, c.kv_heads),
             v = x.narrow(2, c.heads + c.kv_heads, c.kv_heads);
  if (c.norms) {  // rounded to the dtype before RoPE (the contract)
    q = RmsNormComposition(q.to(c.dtype), c.q_norm).to(at::kFloat);
    k = RmsNormComposition(k.to(c.dtype), c.k_norm).to(at::kFloat);
  }
  const at::Tensor cos = c.cos.index_select(0, c.positions).view({c.batch, c.tokens, 1, -1});
  const at::Tensor sin = c.sin.index_select(0, c.positions).view({c.batch, c.tokens, 1, -1});
  const at::Tensor q_want = RopeComposition(q, cos, sin, c.interleaved).permute({0, 2, 1, 3});
  const at::Tensor k_rot = RopeComposition(k, cos, sin, c.interleaved).to(c.dtype);
  at::Tensor cache = c.cache.clone();
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t t = 0; t < c.tokens; ++t) {
      const int64_t slot = c.slots[b * c.tokens + t].item<int64_t>();
      cache[c.layer][0][b].select(1, slot).copy_(k_rot[b][t]);
      cache[c.layer][1][b].select(1, slot).copy_(v[b][t].to(c.dtype));
    }
  }
  return {q_want.to(c.dtype), cache};
}

TEST(DecoderOps, RmsNormMatchesCompositionStridedAndInPlace) {
  for (at::ScalarType dtype : kDtypes) {
    for (int64_t d : {7, 64, 1000}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " d=" + std::to_string(d));
      at::manual_seed(d);
      const at::Tensor base = at::randn({5, d + 3}).to(dtype);
      const at::Tensor x = base.narrow(1, 0, d);  // row stride d + 3
      const at::Tensor w = at::rand({d}) + 0.5;
      const at::Tensor out = at::empty({5, d}, dtype);
      FusedRmsNorm(x, w, kEps, out);
      ExpectClose(out, RmsNormComposition(x, w), dtype);
      const at::Tensor in_place = x.contiguous();
      FusedRmsNorm(in_place, w, kEps, in_place);
      EXPECT_TRUE(at::equal(in_place, out));
    }
  }
}

TEST(DecoderOps, SiluMulMatchesComposition) {
  for (at::ScalarType dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    at::manual_seed(3);
    const at::Tensor gate_up = (at::randn({4, 2 * 37}) * 3).to(dtype);
    const at::Tensor act = at::empty({4, 37}, dtype);
    FusedSiluMul(gate_up, act);
    const at::Tensor g = gate_up.narrow(1, 0, 37).to(at::kFloat);
    const at::Tensor u = gate_up.narrow(1, 37, 37).to(at::kFloat);
    ExpectClose(act, (at::silu(g) * u).to(dtype), dtype);
  }
}

TEST(DecoderOps, RopeKvWriteMatchesCompositionAndLeavesOtherSlots) {
  uint64_t seed = 10;
  for (at::ScalarType dtype : kDtypes) {
    for (bool interleaved : {false, true}) {
      for (bool norms : {false, true}) {
        SCOPED_TRACE(std::string(c10::toString(dtype)) + (interleaved ? " interleaved" : "") +
                     (norms ? " q/k norm" : ""));
        RopeCase c = MakeRopeCase(dtype, interleaved, norms, ++seed);
        const auto [q_want, cache_want] = RopeComposition(c);
        RunRope(c);
        ExpectClose(c.q_out, q_want, dtype);
        ExpectClose(c.cache, cache_want, dtype);
        // Every entry the call must not write (layer 0, other slots) keeps its sentinel.
        at::Tensor written = at::zeros(c.cache.sizes(), at::kBool);
        for (int64_t r = 0; r < c.batch * c.tokens; ++r) {
          written[c.layer]
              .select(1, r / c.tokens)
              .select(2, c.slots[r].item<int64_t>())
              .fill_(true);
        }
        EXPECT_TRUE(c.cache.masked_select(written.logical_not()).eq(9.0).all().item<bool>());
      }
    }
  }
}

TEST(DecoderOps, BadArgumentsNameTheArgument) {
  RopeCase c = MakeRopeCase(at::kFloat, false, false, 5);
  c.positions[4] = 40;  // the tables hold 40 positions
  EXPECT_NE(ErrorOf([&] { RunRope(c); }).find("a position outside [0, 40)"), std::string::npos);
  c = MakeRopeCase(at::kFloat, false, false, 5);
  c.slots[0] = c.max_len;
  EXPECT_NE(ErrorOf([&] { RunRope(c); }).find("slot outside [0, max_len = 11)"), std::string::npos);
  c = MakeRopeCase(at::kFloat, false, false, 5);
  c.q_out = c.q_out.to(at::kBFloat16);
  EXPECT_NE(ErrorOf([&] { RunRope(c); }).find("q_out"), std::string::npos);
  c = MakeRopeCase(at::kFloat, false, false, 5);
  c.layer = 2;
  EXPECT_NE(ErrorOf([&] { RunRope(c); }).find("layer 2 outside [0, 2)"), std::string::npos);
  const at::Tensor x = at::randn({2, 8});
  EXPECT_NE(ErrorOf([&] { FusedRmsNorm(x, at::ones({7}), kEps, x); }).find("w"), std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              FusedRmsNorm(x, at::ones({8}), kEps, at::empty({2, 8}, at::kHalf));
            }).find("out must be float32 [2, 8]"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              FusedSiluMul(at::randn({2, 7}), at::empty({2, 3}));
            }).find("odd"),
            std::string::npos);
  EXPECT_EQ(ErrorOf([&] { FusedSiluMul(at::randn({2, 8}), at::empty({2, 4})); }), kNoSpecbedError);
}

struct AttentionCase {
  int64_t batch = 2, tokens = 6, heads = 4, kv_heads = 2, hd = 16, max_len = 20;
  at::ScalarType dtype = at::kFloat;
  at::Tensor q, cache, kv_len, bits, out;
  int64_t layer = 1;
};

// Seeded q and cache; kv_len {3, 9}; per-sequence tree bits (random parents; row 0 the root) or,
// with `shared`, one causal row set for both sequences.
AttentionCase MakeAttentionCase(at::ScalarType dtype, bool shared, uint64_t seed) {
  AttentionCase c;
  c.dtype = dtype;
  at::manual_seed(seed);
  std::mt19937_64 rng(seed);
  c.q = at::randn({c.batch, c.heads, c.tokens, c.hd}).to(dtype);
  c.cache = at::randn({2, 2, c.batch, c.kv_heads, c.max_len, c.hd}).to(dtype);
  c.kv_len = at::tensor(std::vector<int64_t>{3, 9}, at::kLong);
  std::vector<int64_t> bits(shared ? c.tokens : c.batch * c.tokens);
  for (size_t r = 0; r < bits.size(); ++r) {
    const int64_t t = static_cast<int64_t>(r) % c.tokens;
    if (shared) {
      bits[r] = (int64_t{2} << t) - 1;
    } else if (t == 0) {
      bits[r] = 1;
    } else {  // a random ancestor row plus itself
      bits[r] = bits[r - t + static_cast<int64_t>(rng() % t)] | (int64_t{1} << t);
    }
  }
  c.bits = at::tensor(bits, at::kLong).view({shared ? 1 : c.batch, c.tokens});
  c.out = at::full({c.batch, c.tokens, c.heads, c.hd}, 5.0).to(dtype);
  return c;
}

void RunAttention(AttentionCase& c) {
  FusedTreeAttention(c.q, c.cache, c.layer, c.kv_len, c.bits, 0.25, c.out);
}

// softmax(q k^T * 0.25) v over each row's visible slots, in float64.
at::Tensor AttentionComposition(const AttentionCase& c) {
  at::Tensor out = at::zeros({c.batch, c.tokens, c.heads, c.hd}, at::kDouble);
  const at::Tensor cache = c.cache.to(at::kDouble), q = c.q.to(at::kDouble);
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t kv_len = c.kv_len[b].item<int64_t>();
    for (int64_t t = 0; t < c.tokens; ++t) {
      const auto bits =
          static_cast<uint64_t>(c.bits[c.bits.size(0) == 1 ? 0 : b][t].item<int64_t>());
      std::vector<int64_t> slots;
      for (int64_t j = 0; j < kv_len; ++j) slots.push_back(j);
      for (int64_t j = 0; j < c.tokens; ++j) {
        if ((bits >> j) & 1) slots.push_back(kv_len + j);
      }
      const at::Tensor index = at::tensor(slots, at::kLong);
      for (int64_t h = 0; h < c.heads; ++h) {
        const int64_t kvh = h / (c.heads / c.kv_heads);
        const at::Tensor k = cache[c.layer][0][b][kvh].index_select(0, index);
        const at::Tensor v = cache[c.layer][1][b][kvh].index_select(0, index);
        const at::Tensor p = at::softmax(at::mv(k, q[b][h][t]) * 0.25, 0);
        out[b][t][h].copy_(at::mv(v.t(), p));
      }
    }
  }
  return out.to(c.dtype);
}

TEST(DecoderOps, TreeAttentionMatchesCompositionOnTreesAndCausalRows) {
  uint64_t seed = 40;
  for (at::ScalarType dtype : kDtypes) {
    for (bool shared : {false, true}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + (shared ? " shared causal" : " trees"));
      AttentionCase c = MakeAttentionCase(dtype, shared, ++seed);
      RunAttention(c);
      ExpectClose(c.out, AttentionComposition(c), dtype);
    }
  }
  // A row that sees nothing (no cache, no bits) is zeros; T = 64 takes every bit.
  AttentionCase c = MakeAttentionCase(at::kFloat, true, 7);
  c.kv_len.zero_();
  c.bits[0][2] = 0;
  RunAttention(c);
  EXPECT_TRUE(c.out.select(1, 2).eq(0).all().item<bool>());
  ExpectClose(c.out.select(1, 3), AttentionComposition(c).select(1, 3), at::kFloat);
}

TEST(DecoderOps, TreeAttentionAtSixtyFourTokens) {
  AttentionCase c;
  at::manual_seed(64);
  c.tokens = 64;
  c.max_len = 80;
  c.q = at::randn({c.batch, c.heads, 64, c.hd});
  c.cache = at::randn({2, 2, c.batch, c.kv_heads, c.max_len, c.hd});
  c.kv_len = at::tensor(std::vector<int64_t>{0, 16}, at::kLong);
  std::vector<int64_t> causal(64);
  for (int64_t t = 0; t < 64; ++t) causal[t] = t == 63 ? -1 : (int64_t{2} << t) - 1;
  c.bits = at::tensor(causal, at::kLong).view({1, 64});
  c.out = at::empty({c.batch, 64, c.heads, c.hd});
  RunAttention(c);
  ExpectClose(c.out, AttentionComposition(c), at::kFloat);
}

TEST(DecoderOps, TreeAttentionRejectsWhatBreaksItsContract) {
  AttentionCase c = MakeAttentionCase(at::kFloat, false, 3);
  c.kv_len[1] = c.max_len - c.tokens + 1;
  EXPECT_NE(ErrorOf([&] { RunAttention(c); }).find("kv_len + T > max_len = 20"), std::string::npos);
  c = MakeAttentionCase(at::kFloat, false, 3);
  c.bits[1][2] = int64_t{1} << c.tokens;
  EXPECT_NE(ErrorOf([&] { RunAttention(c); }).find("tree bit at or past T = 6"), std::string::npos);
  c = MakeAttentionCase(at::kFloat, false, 3);
  c.bits = c.bits.narrow(1, 0, 5).contiguous();
  EXPECT_NE(ErrorOf([&] { RunAttention(c); }).find("tree_bits"), std::string::npos);
  c = MakeAttentionCase(at::kFloat, false, 3);
  c.q = at::randn({c.batch, c.heads, 65, c.hd});
  EXPECT_NE(ErrorOf([&] { RunAttention(c); }).find("T <= 64 (got 65)"), std::string::npos);
}

// One host block, one fixed device buffer: every upload lands at the same address (what a
// captured step reads), with the values of the latest host block.
TEST(StepStaging, UploadsIntoOneFixedDeviceBuffer) {
  StepStaging staging;
  staging.Reserve(8, at::kCPU);
  int64_t* h = staging.Host(3);
  h[0] = 1, h[1] = 2, h[2] = 3;
  const at::Tensor a = staging.Upload(3);
  EXPECT_TRUE(at::equal(a, at::tensor(std::vector<int64_t>{1, 2, 3}, at::kLong)));
  h = staging.Host(3);
  h[0] = 7;
  const at::Tensor b = staging.Upload(3);
  EXPECT_EQ(a.data_ptr(), b.data_ptr());
  EXPECT_EQ(b[0].item<int64_t>(), 7);
  EXPECT_NE(b.data_ptr(), static_cast<void*>(h));  // a copy, not the host block itself
  EXPECT_THROW(staging.Host(1 << 20), Error);
}

// ---------------------------------------------------------------------------------------------
// CUDA kernels vs. the CPU references

// Pinned host block, asynchronous copies: a host block rewritten right after an upload (Host
// waits for the copy in flight) never changes what the earlier upload delivered.
TEST(StepStagingCuda, AsyncUploadsKeepTheirValues) {
  SPECBED_SKIP_WITHOUT_CUDA_KERNELS();
  StepStaging staging;
  staging.Reserve(1 << 16, at::Device(at::kCUDA));
  at::Tensor sums = at::zeros({2}, at::TensorOptions(at::kLong).device(at::kCUDA));
  for (int64_t value : {3, 5}) {
    int64_t* h = staging.Host(1 << 16);
    std::fill(h, h + (1 << 16), value);
    sums[value == 3 ? 0 : 1] = staging.Upload(1 << 16).sum();  // enqueued behind the copy
  }
  EXPECT_EQ(sums[0].item<int64_t>(), 3 * (1 << 16));
  EXPECT_EQ(sums[1].item<int64_t>(), 5 * (1 << 16));
}

TEST(DecoderOpsCuda, MatchCpuReferences) {
  SPECBED_SKIP_WITHOUT_CUDA_KERNELS();
  const at::Device cuda(at::kCUDA);
  for (at::ScalarType dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    at::manual_seed(21);
    const at::Tensor x = at::randn({6, 4099}).to(dtype).narrow(1, 0, 4096);
    const at::Tensor w = at::rand({4096}) + 0.5;
    at::Tensor out = at::empty({6, 4096}, dtype), out_gpu = out.to(cuda);
    FusedRmsNorm(x, w, kEps, out);
    FusedRmsNorm(x.to(cuda).narrow(1, 0, 4096), w.to(cuda), kEps, out_gpu);
    ExpectClose(out_gpu, out, dtype);
    const at::Tensor gate_up = at::randn({3, 2 * 1000}).to(dtype);
    at::Tensor act = at::empty({3, 1000}, dtype), act_gpu = act.to(cuda);
    FusedSiluMul(gate_up, act);
    FusedSiluMul(gate_up.to(cuda), act_gpu);
    ExpectClose(act_gpu, act, dtype);
    for (bool interleaved : {false, true}) {
      for (bool norms : {false, true}) {
        RopeCase c = MakeRopeCase(dtype, interleaved, norms, 31);
        RopeCase g = c;
        for (at::Tensor* t : {&g.qkv, &g.positions, &g.slots, &g.cos, &g.sin, &g.q_norm, &g.k_norm,
                              &g.q_out, &g.cache}) {
          if (t->defined()) *t = t->to(cuda);
        }
        RunRope(c);
        RunRope(g);
        ExpectClose(g.q_out, c.q_out, dtype);
        ExpectClose(g.cache, c.cache, dtype);
      }
    }
    for (bool shared : {false, true}) {
      AttentionCase c = MakeAttentionCase(dtype, shared, 51);
      AttentionCase g = c;
      for (at::Tensor* t : {&g.q, &g.cache, &g.kv_len, &g.bits, &g.out}) *t = t->to(cuda);
      RunAttention(c);
      RunAttention(g);
      ExpectClose(g.out, c.out, dtype);
    }
  }
}

}  // namespace
}  // namespace specbed
