// Tests of the speculative-decoding kernels (kernels/): each CPU reference against an
// independent naive implementation written here (tree mask from a transitive closure of the
// parent relation, greedy verification from a recursive search using
// harness/engine/sampler.h Argmax, compaction from index_select copies, the rejection step from
// a double-precision formula plus two statistical checks), over batch {1,3} x nodes
// {1,7,63,255} x vocab {111,32000} with random trees (random parents, chains, bushy and deep
// shapes, duplicate sibling tokens); argument errors; and, on a machine with a CUDA device and a
// CUDA build, the CUDA path against the CPU reference (the *Cuda tests; skipped otherwise, failed
// instead with SPECBED_REQUIRE_CUDA=1: tests/common/cuda_test_util.h).
// Every random input comes from fixed seeds (std::mt19937_64, at::manual_seed).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "harness/engine/sampler.h"
#include "kernels/cpu/references.h"
#include "kernels/greedy_verify.h"
#include "kernels/kv_compact.h"
#include "kernels/rejection_step.h"
#include "kernels/tree_mask.h"
#include "tests/common/cuda_test_util.h"
#include "tests/common/test_util.h"

namespace specbed {
namespace {

using testing::ErrorOf;
using testing::kNoSpecbedError;

constexpr int64_t kBatches[] = {1, 3};
constexpr int64_t kNodes[] = {1, 7, 63, 255};
constexpr int64_t kVocabs[] = {111, 32000};

// ---------------------------------------------------------------------------------------------
// Random trees

enum class Shape { kRandom, kChain, kBushy, kDeep };
const char* ShapeName(Shape s) {
  static constexpr const char* kNames[] = {"random", "chain", "bushy", "deep"};  // Shape order
  return kNames[static_cast<int>(s)];
}

int64_t Uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {  // in [lo, hi)
  return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo));
}

// parent[i] in [-1, i) for each shape: uniform, i - 1, near the root (wide), near i (deep).
std::vector<int32_t> RandomParents(std::mt19937_64& rng, int64_t n, Shape shape) {
  std::vector<int32_t> parent(n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t p = -1;
    switch (shape) {
      case Shape::kRandom:
        p = Uniform(rng, -1, i);
        break;
      case Shape::kChain:
        p = i - 1;
        break;
      case Shape::kBushy:
        p = Uniform(rng, -1, std::min<int64_t>(i, 3));
        break;
      case Shape::kDeep:
        p = Uniform(rng, std::max<int64_t>(-1, i - 3), i);
        break;
    }
    parent[i] = static_cast<int32_t>(p);
  }
  return parent;
}

// Drafted tokens; a 4-token alphabet makes duplicate sibling tokens common.
std::vector<int32_t> RandomTokens(std::mt19937_64& rng, int64_t n, int64_t vocab, bool small) {
  std::vector<int32_t> tokens(n);
  const int64_t alphabet = small ? std::min<int64_t>(4, vocab) : vocab;
  for (auto& t : tokens) t = static_cast<int32_t>(Uniform(rng, 0, alphabet));
  return tokens;
}

at::Tensor IntTensor(const std::vector<int32_t>& v, int64_t rows) {
  const int64_t cols = rows == 0 ? 0 : static_cast<int64_t>(v.size()) / rows;
  return at::tensor(v, at::kInt).view({rows, cols}).clone();
}

// A batch of random trees: parent, tokens [B, n] int32; shapes vary by row and `salt`.
struct TreeBatch {
  std::vector<int32_t> parent, tokens;  // row-major [B, n]
  std::vector<Shape> shapes;            // [B]
};
TreeBatch RandomTreeBatch(std::mt19937_64& rng, int64_t batch, int64_t n, int64_t vocab, int salt) {
  TreeBatch t;
  for (int64_t b = 0; b < batch; ++b) {
    const Shape shape = static_cast<Shape>((b + salt) % 4);
    const std::vector<int32_t> p = RandomParents(rng, n, shape);
    const std::vector<int32_t> k = RandomTokens(rng, n, vocab, (b + salt) % 2 == 0);
    t.parent.insert(t.parent.end(), p.begin(), p.end());
    t.tokens.insert(t.tokens.end(), k.begin(), k.end());
    t.shapes.push_back(shape);
  }
  return t;
}

std::string Where(int64_t batch, int64_t n, int64_t vocab, int salt) {
  return "batch=" + std::to_string(batch) + " n=" + std::to_string(n) +
         " vocab=" + std::to_string(vocab) + " salt=" + std::to_string(salt);
}

// `fn` throws a specbed::Error whose message contains `part`.
void ExpectErrorContains(const std::function<void()>& fn, const std::string& part) {
  EXPECT_NE(ErrorOf(fn).find(part), std::string::npos) << part;
}

// ---------------------------------------------------------------------------------------------
// Tree mask

// Naive mask: the ancestor-or-self relation as a transitive closure built in topological order
// (anc[i] = anc[parent[i]] + {i}), then rows laid out as the contract says.
at::Tensor NaiveTreeMask(const std::vector<int32_t>& parent, int64_t batch, int64_t n,
                         int64_t prefix_len) {
  at::Tensor mask = at::zeros({batch, n + 1, prefix_len + n + 1}, at::kBool);
  auto m = mask.accessor<bool, 3>();
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<std::vector<bool>> anc(n, std::vector<bool>(n, false));
    for (int64_t i = 0; i < n; ++i) {
      const int32_t p = parent[b * n + i];
      if (p >= 0) anc[i] = anc[p];
      anc[i][i] = true;
    }
    for (int64_t s = 0; s <= n; ++s) {
      for (int64_t c = 0; c <= prefix_len; ++c) m[b][s][c] = true;
      for (int64_t j = 0; j < n && s > 0; ++j) m[b][s][prefix_len + 1 + j] = anc[s - 1][j];
    }
  }
  return mask;
}

TEST(TreeMask, HandWrittenTree) {
  // Nodes: 0 and 1 under the root, 2 under 0, 3 under 2, 4 under 1. Prefix of 2 positions.
  const at::Tensor parent = IntTensor({-1, -1, 0, 2, 1}, 1);
  at::Tensor mask = at::empty({1, 6, 8}, at::kBool);
  BuildTreeMask(parent, 2, mask);
  const std::vector<std::vector<int>> expected = {
      // p0 p1 root n0 n1 n2 n3 n4
      {1, 1, 1, 0, 0, 0, 0, 0},  // root
      {1, 1, 1, 1, 0, 0, 0, 0},  // node 0
      {1, 1, 1, 0, 1, 0, 0, 0},  // node 1
      {1, 1, 1, 1, 0, 1, 0, 0},  // node 2
      {1, 1, 1, 1, 0, 1, 1, 0},  // node 3
      {1, 1, 1, 0, 1, 0, 0, 1},  // node 4
  };
  for (int s = 0; s < 6; ++s) {
    for (int c = 0; c < 8; ++c) {
      EXPECT_EQ(mask[0][s][c].item<bool>(), expected[s][c] == 1) << "row " << s << " col " << c;
    }
  }
}

TEST(TreeMask, CpuMatchesTransitiveClosureOnGrid) {
  std::mt19937_64 rng(11);
  for (int64_t batch : kBatches) {
    for (int64_t n : kNodes) {
      for (int64_t prefix_len : {0, 5, 37}) {
        for (int salt = 0; salt < 2; ++salt) {
          SCOPED_TRACE(Where(batch, n, 0, salt) + " prefix=" + std::to_string(prefix_len));
          const TreeBatch t = RandomTreeBatch(rng, batch, n, 111, salt * 2 + prefix_len);
          // Fill with true so stale values would show.
          at::Tensor mask = at::ones({batch, n + 1, prefix_len + n + 1}, at::kBool);
          BuildTreeMask(IntTensor(t.parent, batch), prefix_len, mask);
          EXPECT_TRUE(at::equal(mask, NaiveTreeMask(t.parent, batch, n, prefix_len)));
        }
      }
    }
  }
}

TEST(TreeMask, EmptyTreeIsPrefixAndRoot) {
  at::Tensor mask = at::zeros({2, 1, 4}, at::kBool);
  BuildTreeMask(at::empty({2, 0}, at::kInt), 3, mask);
  EXPECT_TRUE(mask.all().item<bool>());
}

TEST(TreeMask, RejectsBadArguments) {
  const at::Tensor parent = IntTensor({-1, 0, 1}, 1);
  const at::Tensor mask = at::empty({1, 4, 6}, at::kBool);
  ExpectErrorContains([&] { BuildTreeMask(parent.to(at::kLong), 2, mask); },
                      "BuildTreeMask: parent must be int32");
  ExpectErrorContains(
      [&] {
        BuildTreeMask(parent, 2, at::empty({1, 4, 7}, at::kBool));
      },
      "mask must be bool [1, 4, 6]");
  ExpectErrorContains([&] { BuildTreeMask(parent, 2, at::empty({1, 4, 6}, at::kInt)); }, "mask");
  ExpectErrorContains([&] { BuildTreeMask(parent, -1, mask); }, "prefix_len");
  ExpectErrorContains(
      [&] {
        BuildTreeMask(IntTensor({-1, 1, 1}, 1), 2, mask);
      },
      "parent[0][1] = 1 must be in [-1, 1)");
  ExpectErrorContains(
      [&] {
        BuildTreeMask(IntTensor({-2, 0, 1}, 1), 2, mask);
      },
      "parent[0][0] = -2");
  ExpectErrorContains(
      [&] {
        BuildTreeMask(IntTensor({-1, 0, 1, -1, 0, 1}, 3).t(), 2, at::empty({2, 4, 6}, at::kBool));
      },
      "contiguous");
  ExpectErrorContains(
      [&] {
        BuildTreeMask(parent, 2,
                      at::empty({1, 4, 6}, at::TensorOptions(at::kBool).device(at::kMeta)));
      },
      "mask is on meta");
  // The raw reference reports what it cannot handle instead of walking out of bounds.
  const std::vector<int32_t> bad = {-1, 5};
  std::vector<uint8_t> out(3 * 5);
  EXPECT_EQ(cpu::BuildTreeMask(bad.data(), 1, 2, 2, reinterpret_cast<bool*>(out.data())),
            kKernelBadInput);
}

// ---------------------------------------------------------------------------------------------
// Greedy verification

// Logits that make walks go deep: small random integers (many ties); then, per sequence with
// probability 97% or 70% per slot, the token of a random child raised to the maximum, sometimes
// tied with a random higher index (the child's token must still win) or, rarely, a lower one
// (which then wins and usually ends the walk).
at::Tensor GreedyLogits(std::mt19937_64& rng, const TreeBatch& t, int64_t batch, int64_t n,
                        int64_t vocab) {
  at::Tensor logits = at::empty({batch, n + 1, vocab}, at::kFloat);
  float* lp = logits.data_ptr<float>();
  const int64_t total = batch * (n + 1) * vocab;
  for (int64_t i = 0; i < total; i += 16) {
    uint64_t bits = rng();
    for (int64_t k = i; k < std::min(total, i + 16); ++k, bits >>= 2) {
      lp[k] = static_cast<float>(bits & 3);
    }
  }
  std::vector<int32_t> kids;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t boost_pct = Uniform(rng, 0, 2) == 0 ? 97 : 70;
    for (int64_t s = 0; s <= n; ++s) {
      kids.clear();
      for (int64_t j = s; j < n; ++j) {
        if (t.parent[b * n + j] == s - 1) kids.push_back(static_cast<int32_t>(j));
      }
      if (kids.empty() || Uniform(rng, 0, 100) >= boost_pct) continue;
      float* row = lp + (b * (n + 1) + s) * vocab;
      const int32_t token =
          t.tokens[b * n + kids[Uniform(rng, 0, static_cast<int64_t>(kids.size()))]];
      row[token] = 5.f;
      const int64_t tie = Uniform(rng, 0, 100);
      if (tie < 25 && token + 1 < vocab) row[Uniform(rng, token + 1, vocab)] = 5.f;
      if (tie >= 97 && token > 0) row[Uniform(rng, 0, token)] = 5.f;
    }
  }
  return logits;
}

// Naive greedy verification: child lists, then a recursive descent using the engine's Argmax.
void NaiveGreedy(const float* logits, const int32_t* tokens, const int32_t* parent, int64_t n,
                 int64_t vocab, std::vector<int32_t>& path, int32_t& bonus) {
  std::vector<std::vector<int32_t>> children(n + 1);
  for (int64_t i = 0; i < n; ++i) children[parent[i] + 1].push_back(static_cast<int32_t>(i));
  path.clear();
  std::function<void(int64_t)> descend = [&](int64_t slot) {
    const int32_t target = Argmax(logits + slot * vocab, vocab);
    for (int32_t c : children[slot]) {
      if (tokens[c] == target) {
        path.push_back(c);
        descend(c + 1);
        return;
      }
    }
    bonus = target;
  };
  descend(0);
}

struct GreedyOut {
  at::Tensor accepted, n_accepted, bonus;
};
GreedyOut RunGreedy(const at::Tensor& logits, const at::Tensor& tokens, const at::Tensor& parent) {
  const int64_t batch = tokens.size(0), n = tokens.size(1);
  const auto opts = at::TensorOptions(at::kInt).device(logits.device());
  GreedyOut out{at::full({batch, n}, 77, opts), at::full({batch}, 77, opts),
                at::full({batch}, 77, opts)};
  GreedyTreeVerify(logits, tokens, parent, out.accepted, out.n_accepted, out.bonus);
  return out;
}

void ExpectGreedyMatchesNaive(const at::Tensor& logits, const TreeBatch& t, int64_t batch,
                              int64_t n, int64_t vocab, const GreedyOut& out, int64_t& longest) {
  std::vector<int32_t> path;
  int32_t bonus = -1;
  const int32_t* accepted = out.accepted.data_ptr<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    SCOPED_TRACE("row " + std::to_string(b) + " (" + ShapeName(t.shapes[b]) + ")");
    NaiveGreedy(logits.data_ptr<float>() + b * (n + 1) * vocab, t.tokens.data() + b * n,
                t.parent.data() + b * n, n, vocab, path, bonus);
    ASSERT_EQ(out.n_accepted[b].item<int32_t>(), static_cast<int32_t>(path.size()));
    for (int64_t j = 0; j < n; ++j) {
      const int32_t want = j < static_cast<int64_t>(path.size()) ? path[j] : -1;
      ASSERT_EQ(accepted[b * n + j], want) << "accepted[" << j << "]";
    }
    EXPECT_EQ(out.bonus[b].item<int32_t>(), bonus);
    longest = std::max<int64_t>(longest, static_cast<int64_t>(path.size()));
  }
}

TEST(GreedyVerify, CpuMatchesRecursiveSearchOnGrid) {
  std::mt19937_64 rng(22);
  int64_t longest = 0;
  for (int64_t batch : kBatches) {
    for (int64_t n : kNodes) {
      for (int64_t vocab : kVocabs) {
        const int reps = vocab > 1000 ? 1 : 3;
        for (int salt = 0; salt < reps; ++salt) {
          SCOPED_TRACE(Where(batch, n, vocab, salt));
          const TreeBatch t = RandomTreeBatch(rng, batch, n, vocab, salt + static_cast<int>(n));
          const at::Tensor logits = GreedyLogits(rng, t, batch, n, vocab);
          const GreedyOut out =
              RunGreedy(logits, IntTensor(t.tokens, batch), IntTensor(t.parent, batch));
          ExpectGreedyMatchesNaive(logits, t, batch, n, vocab, out, longest);
        }
      }
    }
  }
  // The inputs are meant to exercise deep walks, not only stops at the root.
  EXPECT_GE(longest, 20);
}

TEST(GreedyVerify, TiesPickLowestTokenAndFirstDuplicateChild) {
  // Root children: node 0 (token 7), node 1 (token 3), node 2 (token 3, duplicate of node 1);
  // node 3 (token 5) under node 2, node 4 (token 5) under node 1.
  const at::Tensor tokens = IntTensor({7, 3, 3, 5, 5}, 1);
  const at::Tensor parent = IntTensor({-1, -1, -1, 2, 1}, 1);
  at::Tensor logits = at::zeros({1, 6, 10}, at::kFloat);
  logits[0][0][3] = 2.f;  // tie between 3 and 7: token 3 wins, so node 1 (not node 2)
  logits[0][0][7] = 2.f;
  logits[0][2][5] = 1.f;  // slot of node 1: target 5 -> node 4
  logits[0][5][9] = 4.f;  // slot of node 4: bonus 9
  logits[0][5][2] = 4.f - 1e-6f;
  const GreedyOut out = RunGreedy(logits, tokens, parent);
  EXPECT_EQ(out.n_accepted[0].item<int32_t>(), 2);
  EXPECT_EQ(out.accepted[0][0].item<int32_t>(), 1);
  EXPECT_EQ(out.accepted[0][1].item<int32_t>(), 4);
  for (int j = 2; j < 5; ++j) EXPECT_EQ(out.accepted[0][j].item<int32_t>(), -1);
  EXPECT_EQ(out.bonus[0].item<int32_t>(), 9);
}

TEST(GreedyVerify, EmptyTreeAndNanRowsFollowSamplerArgmax) {
  // n = 0: bonus is the argmax of the root row, for every sequence.
  at::manual_seed(7);
  at::Tensor logits = at::randn({3, 1, 111}, at::TensorOptions(at::kFloat));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  logits[1][0][0] = nan;   // NaN first: the sequential Argmax returns 0
  logits[2][0][17] = nan;  // NaN elsewhere: never chosen
  logits[2][0][40] = 100.f;
  const at::Tensor empty = at::empty({3, 0}, at::kInt);
  const GreedyOut out = RunGreedy(logits, empty, empty);
  for (int64_t b = 0; b < 3; ++b) {
    EXPECT_EQ(out.n_accepted[b].item<int32_t>(), 0);
    EXPECT_EQ(out.bonus[b].item<int32_t>(), Argmax(logits[b][0].data_ptr<float>(), 111)) << b;
  }
  EXPECT_EQ(out.bonus[1].item<int32_t>(), 0);
  EXPECT_EQ(out.bonus[2].item<int32_t>(), 40);
}

// Rows that stress the argmax rule, as [rows, 1, vocab] logits for n = 0 verification (bonus =
// argmax of each row): ties everywhere, -inf, NaN first / elsewhere / almost everywhere, signed
// zeros, the maximum last, and widths around the 8-lane unrolling (1, 7, 9, 17).
std::vector<at::Tensor> ArgmaxEdgeRows() {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> rows = {
      {3.f},
      {1.f, 1.f, 1.f, 1.f, 1.f, 1.f, 1.f},
      {-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf},
      {nan, 5.f, 6.f, 7.f, 1.f, 2.f, 3.f, 4.f, 5.f},
      {1.f, nan, 6.f, nan, 6.f, 2.f, 3.f, 4.f, 5.f},
      {nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, 2.f},
      {-inf, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan, nan},
      {-1.f, -0.f, 0.f, -0.f, 0.f, -2.f, -3.f, -4.f, -5.f},
      {-1.f, 0.f, -0.f, -2.f, -3.f, -4.f, -5.f, -6.f, -7.f},
      {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 1.f},
      {-inf, 2.f, inf, 3.f, inf, 1.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, inf},
  };
  std::vector<at::Tensor> out;
  for (const auto& r : rows) {
    out.push_back(at::tensor(r, at::kFloat).view({1, 1, static_cast<int64_t>(r.size())}).clone());
  }
  return out;
}

TEST(GreedyVerify, ArgmaxEdgeRowsMatchSamplerArgmax) {
  const at::Tensor empty = at::empty({1, 0}, at::kInt);
  for (const at::Tensor& row : ArgmaxEdgeRows()) {
    const GreedyOut out = RunGreedy(row, empty, empty);
    EXPECT_EQ(out.bonus[0].item<int32_t>(), Argmax(row.data_ptr<float>(), row.size(2))) << row;
  }
}

TEST(GreedyVerify, RejectsBadArguments) {
  const at::Tensor logits = at::zeros({2, 4, 11}, at::kFloat);
  const at::Tensor tokens = at::zeros({2, 3}, at::kInt);
  const at::Tensor parent = IntTensor({-1, 0, 1, -1, -1, 0}, 2);
  const at::Tensor acc = at::empty({2, 3}, at::kInt), cnt = at::empty({2}, at::kInt),
                   bonus = at::empty({2}, at::kInt);
  auto call = [&](const at::Tensor& l, const at::Tensor& t, const at::Tensor& p,
                  const at::Tensor& a, const at::Tensor& c, const at::Tensor& bo) {
    return ErrorOf([&] { GreedyTreeVerify(l, t, p, a, c, bo); });
  };
  EXPECT_EQ(call(logits, tokens, parent, acc, cnt, bonus), kNoSpecbedError);
  EXPECT_NE(call(logits.to(at::kDouble), tokens, parent, acc, cnt, bonus)
                .find("GreedyTreeVerify: logits must be float32 [*, *, *] ([B, n + 1, V]); got "
                      "float64 [2, 4, 11]"),
            std::string::npos);
  EXPECT_NE(call(logits, at::zeros({2, 2}, at::kInt), parent, acc, cnt, bonus)
                .find("tokens must be int32 [2, 3]"),
            std::string::npos);
  EXPECT_NE(call(logits, tokens.to(at::kLong), parent, acc, cnt, bonus).find("tokens"),
            std::string::npos);
  EXPECT_NE(call(logits, tokens, parent, acc, cnt, at::empty({3}, at::kInt)).find("bonus"),
            std::string::npos);
  EXPECT_NE(call(logits, tokens, parent, acc, at::empty({2}, at::kLong), bonus).find("n_accepted"),
            std::string::npos);
  EXPECT_NE(call(logits, tokens, parent, at::empty({2, 4}, at::kInt), cnt, bonus).find("accepted"),
            std::string::npos);
  EXPECT_NE(call(logits, tokens, IntTensor({-1, 0, 1, -1, 2, 0}, 2), acc, cnt, bonus)
                .find("parent[1][1] = 2 must be in [-1, 1)"),
            std::string::npos);
  EXPECT_NE(call(at::zeros({2, 11, 4}, at::kFloat).transpose(1, 2), tokens, parent, acc, cnt, bonus)
                .find("logits [2, 4, 11] must be contiguous"),
            std::string::npos);
  EXPECT_NE(
      call(at::zeros({2, 0, 11}, at::kFloat), tokens, parent, acc, cnt, bonus).find("root row"),
      std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// KV-cache compaction

// Strictly increasing random subset of [committed, committed + span), of random size (sometimes
// empty, sometimes everything, sometimes a prefix that is already in place).
std::vector<int64_t> RandomKeep(std::mt19937_64& rng, int64_t committed, int64_t span) {
  std::vector<int64_t> keep;
  const int64_t mode = Uniform(rng, 0, 5);
  const int64_t in_place = mode == 0 ? Uniform(rng, 0, span + 1) : 0;
  for (int64_t i = 0; i < span; ++i) {
    if (i < in_place || mode == 1 || (mode > 1 && mode != 4 && Uniform(rng, 0, 3) == 0)) {
      keep.push_back(committed + i);
    }
  }
  return keep;  // mode 4: empty
}

// The compaction grid: batch x nodes, float32 and bfloat16 storage; storage and indices.
struct CompactCase {
  at::Tensor storage, indices;
  int64_t committed;
};
CompactCase RandomCompactCase(std::mt19937_64& rng, int64_t batch, int64_t n, at::ScalarType dtype,
                              int64_t head_dim) {
  const int64_t committed = Uniform(rng, 0, 9);
  const int64_t max_len = committed + n + 1 + Uniform(rng, 0, 4);
  // K: the same count for every row (the verifier keeps B paths of equal length after padding),
  // chosen from the first row's random subset.
  std::vector<std::vector<int64_t>> rows;
  size_t keep = 0;
  for (int64_t b = 0; b < batch; ++b) {
    rows.push_back(RandomKeep(rng, committed, n + 1));
    if (b == 0) keep = rows[0].size();
  }
  std::vector<int64_t> flat;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<int64_t>& r = rows[b];
    // Trim or extend with the largest unused positions so every row keeps `keep` entries.
    for (int64_t pos = committed + n; r.size() < keep; --pos) {
      if (!std::binary_search(r.begin(), r.end(), pos)) {
        r.insert(std::lower_bound(r.begin(), r.end(), pos), pos);
      }
    }
    r.resize(keep);
    flat.insert(flat.end(), r.begin(), r.end());
  }
  CompactCase c;
  c.committed = committed;
  c.storage = at::randn({2, 2, batch, 3, max_len, head_dim}, at::kFloat).to(dtype);
  c.indices = at::tensor(flat, at::kLong).view({batch, static_cast<int64_t>(keep)}).clone();
  return c;
}

// Naive compaction: gather the kept rows with index_select from a copy, then write them at
// [committed, committed + K); everything else unchanged.
at::Tensor NaiveCompact(const at::Tensor& storage, int64_t committed, const at::Tensor& indices) {
  at::Tensor expected = storage.clone();
  const int64_t keep = indices.size(1);
  for (int64_t b = 0; b < storage.size(2); ++b) {
    const at::Tensor rows = storage.select(2, b).index_select(3, indices[b]);
    expected.select(2, b).narrow(3, committed, keep).copy_(rows);
  }
  return expected;
}

// Runs `check` on a random compaction case (seeded `seed`, for rng and ATen) of every batch in
// kBatches, node count in kNodes, dtype float32 / bfloat16 and head_dim in `head_dims`.
void ForEachCompactCase(uint64_t seed, const std::vector<int64_t>& head_dims,
                        const std::function<void(CompactCase&, int64_t n)>& check) {
  std::mt19937_64 rng(seed);
  at::manual_seed(seed);
  for (int64_t batch : kBatches) {
    for (int64_t n : kNodes) {
      for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
        for (int64_t head_dim : head_dims) {
          SCOPED_TRACE(Where(batch, n, 0, 0) + " dtype=" + std::string(c10::toString(dtype)) +
                       " head_dim=" + std::to_string(head_dim));
          CompactCase c = RandomCompactCase(rng, batch, n, dtype, head_dim);
          check(c, n);
        }
      }
    }
  }
}

TEST(KvCompact, CpuMatchesIndexSelectOnGrid) {
  ForEachCompactCase(33, {8, 5}, [](CompactCase& c, int64_t) {
    const at::Tensor expected = NaiveCompact(c.storage, c.committed, c.indices);
    CompactKvCache(c.storage, c.committed, c.indices);
    EXPECT_TRUE(at::equal(c.storage, expected));
  });
}

// A verify step's verdict per sequence (root slot, accepted nodes increasing, -1 padded, count)
// and what CompactKvCacheToPath must leave: each sequence compacted as CompactKvCache would with
// its own committed length and kept slots.
struct PathCompactCase {
  at::Tensor storage, root_slot, accepted, n_accepted, expected;
};
PathCompactCase RandomPathCompactCase(std::mt19937_64& rng, int64_t batch, int64_t n) {
  PathCompactCase c;
  const int64_t max_len = 12 + n + 1;
  c.storage = at::randn({2, 2, batch, 3, max_len, 8});
  c.expected = c.storage.clone();
  std::vector<int32_t> root(batch), accepted(batch * n, -1), count(batch);
  for (int64_t b = 0; b < batch; ++b) {
    root[b] = static_cast<int32_t>(Uniform(rng, 0, 12));
    std::vector<int64_t> keep{root[b]};
    for (int64_t node = 0; node < n; ++node) {
      if (rng() % 3 == 0) continue;
      accepted[b * n + count[b]++] = static_cast<int32_t>(node);
      keep.push_back(root[b] + 1 + node);
    }
    const at::Tensor idx = at::tensor(keep, at::kLong).view({1, -1});
    c.expected.narrow(2, b, 1).copy_(NaiveCompact(c.storage.narrow(2, b, 1), root[b], idx));
  }
  c.root_slot = at::tensor(root, at::kInt);
  c.accepted = at::tensor(accepted, at::kInt).view({batch, n});
  c.n_accepted = at::tensor(count, at::kInt);
  return c;
}

TEST(KvCompact, ToPathEqualsCompactionOfTheKeptSlots) {
  std::mt19937_64 rng(55);
  at::manual_seed(55);
  for (int64_t batch : kBatches) {
    for (int64_t n : {0, 1, 7, 63}) {
      SCOPED_TRACE(Where(batch, n, 0, 0));
      PathCompactCase c = RandomPathCompactCase(rng, batch, n);
      CompactKvCacheToPath(c.storage, c.root_slot, c.accepted, c.n_accepted);
      EXPECT_TRUE(at::equal(c.storage, c.expected));
    }
  }
}

TEST(KvCompact, ToPathRejectsABrokenVerdict) {
  std::mt19937_64 rng(56);
  PathCompactCase c = RandomPathCompactCase(rng, 1, 7);
  c.n_accepted[0] = 8;
  EXPECT_NE(ErrorOf([&] {
              CompactKvCacheToPath(c.storage, c.root_slot, c.accepted, c.n_accepted);
            }).find("a verdict breaks the contract"),
            std::string::npos);
  c = RandomPathCompactCase(rng, 1, 7);
  c.accepted[0][0] = 5;
  c.accepted[0][1] = 5;
  c.n_accepted[0] = 2;
  EXPECT_NE(ErrorOf([&] {
              CompactKvCacheToPath(c.storage, c.root_slot, c.accepted, c.n_accepted);
            }).find("increasing"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] {
              CompactKvCacheToPath(c.storage, c.root_slot.to(at::kLong), c.accepted, c.n_accepted);
            }).find("root_slot"),
            std::string::npos);
}

TEST(KvCompact, OverlappingMovesKeepOrder) {
  // Rows 3, 4, 5, 6 move to 2, 3, 4, 5: each destination is the previous j's source, which must
  // be read before it is overwritten (a parallel-over-j implementation would race here).
  at::Tensor storage = at::arange(1 * 2 * 1 * 1 * 10 * 2, at::kFloat).view({1, 2, 1, 1, 10, 2});
  const at::Tensor indices = at::tensor(std::vector<int64_t>{3, 4, 5, 6}, at::kLong).view({1, 4});
  const at::Tensor expected = NaiveCompact(storage, 2, indices);
  CompactKvCache(storage, 2, indices);
  EXPECT_TRUE(at::equal(storage, expected));
  EXPECT_EQ(storage[0][0][0][0][2][0].item<float>(), 6.f);  // row 3 of kv 0, element 0
}

TEST(KvCompact, RejectsBadArguments) {
  const at::Tensor storage = at::zeros({1, 2, 2, 1, 8, 4}, at::kFloat);
  auto idx = [](std::vector<int64_t> v, int64_t rows) {
    const int64_t cols = static_cast<int64_t>(v.size()) / rows;
    return at::tensor(v, at::kLong).view({rows, cols}).clone();
  };
  EXPECT_EQ(ErrorOf([&] { CompactKvCache(storage, 2, idx({2, 5, 3, 4}, 2)); }), kNoSpecbedError);
  ExpectErrorContains(
      [&] {
        CompactKvCache(storage.to(at::kDouble), 2, idx({2, 5, 3, 4}, 2));
      },
      "CompactKvCache: storage must be float32 or bfloat16 or float16");
  ExpectErrorContains(
      [&] {
        CompactKvCache(at::zeros({1, 3, 2, 1, 8, 4}), 2, idx({2, 3}, 2));
      },
      "storage must be");
  ExpectErrorContains(
      [&] {
        CompactKvCache(storage, 2, idx({2, 3, 4}, 1));
      },
      "indices must be int64 [2, *]");
  ExpectErrorContains(
      [&] {
        CompactKvCache(storage, 2, idx({4, 3, 3, 4}, 2));
      },
      "indices[0][1] = 3 breaks the contract");
  ExpectErrorContains(
      [&] {
        CompactKvCache(storage, 2, idx({2, 3, 1, 4}, 2));
      },
      "indices[1][0] = 1");
  ExpectErrorContains(
      [&] {
        CompactKvCache(storage, 2, idx({2, 8, 3, 4}, 2));
      },
      "indices[0][1] = 8");
  ExpectErrorContains([&] { CompactKvCache(storage, 9, idx({}, 2)); }, "committed_len 9");
  ExpectErrorContains(
      [&] {
        CompactKvCache(storage, 2, idx({2, 3, 4, 5}, 2).to(at::kInt));
      },
      "indices");
  const std::vector<int64_t> unsorted = {3, 2};
  std::vector<float> raw(8 * 4);
  EXPECT_EQ(cpu::CompactKvRows(raw.data(), 1, 1, 1, 8, 16, 2, unsorted.data(), 2), kKernelBadInput);
}

// ---------------------------------------------------------------------------------------------
// Rejection step

// A random distribution over `vocab`: peaked (exp of scaled normals) with ~`zero_share` of the
// entries exactly zero.
std::vector<float> RandomDistribution(std::mt19937_64& rng, int64_t vocab, double zero_share) {
  std::normal_distribution<double> normal(0.0, 2.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> w(vocab);
  double sum = 0.0;
  for (auto& x : w) {
    x = unit(rng) < zero_share ? 0.0 : std::exp(normal(rng));
    sum += x;
  }
  if (sum == 0.0) {
    w[0] = 1.0;
    sum = 1.0;
  }
  std::vector<float> p(vocab);
  for (int64_t i = 0; i < vocab; ++i) p[i] = static_cast<float>(w[i] / sum);
  return p;
}

// What the step must do to row (p, q, t, u), in double precision.
struct RejectionExpectation {
  bool accept = false;
  bool decided = true;  // false when u * q[t] is within rounding of p[t]
  std::vector<double> p_after;
};
RejectionExpectation NaiveRejection(const float* p, const float* q, int32_t t, float u,
                                    int64_t vocab) {
  RejectionExpectation e;
  const double lhs = static_cast<double>(u) * q[t], rhs = p[t];
  e.accept = lhs < rhs;
  e.decided = rhs == 0.0 || std::abs(lhs - rhs) > 1e-6 * rhs;
  e.p_after.assign(p, p + vocab);
  if (e.accept) return e;
  double mass = 0.0;
  for (int64_t i = 0; i < vocab; ++i) mass += std::max(static_cast<double>(p[i]) - q[i], 0.0);
  if (mass == 0.0) return e;
  for (int64_t i = 0; i < vocab; ++i) {
    e.p_after[i] = std::max(static_cast<double>(p[i]) - q[i], 0.0) / mass;
  }
  return e;
}

// One batch of rejection-step inputs, covering the special cases by row: a token drawn from q,
// q[t] = 0 < p[t] (must accept), p[t] = 0 < q[t] (must reject), p == q with p[t] = 0 (rejected,
// zero residual, p unchanged).
struct RejectionCase {
  std::vector<float> p, q, u;
  std::vector<int32_t> token;
};
RejectionCase RandomRejectionCase(std::mt19937_64& rng, int64_t batch, int64_t vocab, int rep) {
  RejectionCase c;
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<float> p = RandomDistribution(rng, vocab, 0.2);
    std::vector<float> q = RandomDistribution(rng, vocab, 0.2);
    int32_t t = 0;
    const int mode = static_cast<int>((b + rep) % 6);
    if (mode == 3) {  // q[t] = 0, p[t] > 0
      while (p[t] == 0.f) t = static_cast<int32_t>(Uniform(rng, 0, vocab));
      q[t] = 0.f;
    } else if (mode == 4) {  // p[t] = 0, q[t] > 0
      while (q[t] == 0.f) t = static_cast<int32_t>(Uniform(rng, 0, vocab));
      p[t] = 0.f;
    } else if (mode == 5) {  // p == q, p[t] = q[t] = 0
      q = p;
      while (p[t] != 0.f) t = static_cast<int32_t>(Uniform(rng, 0, vocab));
    } else {  // t ~ q
      const float r = unit(rng);
      float cum = 0.f;
      for (t = 0; t < vocab - 1; ++t) {
        cum += q[t];
        if (r < cum) break;
      }
    }
    c.p.insert(c.p.end(), p.begin(), p.end());
    c.q.insert(c.q.end(), q.begin(), q.end());
    c.token.push_back(t);
    c.u.push_back(unit(rng) * 0.999999f);
  }
  return c;
}

struct RejectionTensors {
  at::Tensor p, q, token, u, accepted;
};
RejectionTensors ToTensors(const RejectionCase& c, int64_t batch, int64_t vocab) {
  return {at::tensor(c.p, at::kFloat).view({batch, vocab}).clone(),
          at::tensor(c.q, at::kFloat).view({batch, vocab}).clone(),
          at::tensor(c.token, at::kInt).clone(), at::tensor(c.u, at::kFloat).clone(),
          at::full({batch}, 7, at::kByte)};
}

TEST(RejectionStep, CpuMatchesDoubleFormulaOnGrid) {
  std::mt19937_64 rng(44);
  int special_rows = 0, rejected_rows = 0;
  for (int64_t batch : kBatches) {
    for (int64_t vocab : kVocabs) {
      const int reps = vocab > 1000 ? 6 : 12;
      for (int rep = 0; rep < reps; ++rep) {
        SCOPED_TRACE(Where(batch, 0, vocab, rep));
        const RejectionCase c = RandomRejectionCase(rng, batch, vocab, rep);
        RejectionTensors t = ToTensors(c, batch, vocab);
        TreeRejectionStep(t.p, t.q, t.token, t.u, t.accepted);
        for (int64_t b = 0; b < batch; ++b) {
          const RejectionExpectation e = NaiveRejection(
              c.p.data() + b * vocab, c.q.data() + b * vocab, c.token[b], c.u[b], vocab);
          const bool accepted = t.accepted[b].item<uint8_t>() == 1;
          ASSERT_TRUE(t.accepted[b].item<uint8_t>() <= 1);
          const int mode = static_cast<int>((b + rep) % 6);
          if (mode == 3) {
            EXPECT_TRUE(accepted) << "q[t] = 0 < p[t] must accept";
          } else if (mode >= 4) {
            EXPECT_FALSE(accepted) << "p[t] = 0 must reject";
          }
          special_rows += mode >= 3;
          if (!e.decided) continue;  // within float rounding of the boundary (never seen so far)
          ASSERT_EQ(accepted, e.accept) << "row " << b;
          rejected_rows += !accepted;
          const float* got = t.p.data_ptr<float>() + b * vocab;
          double sum = 0.0;
          for (int64_t i = 0; i < vocab; ++i) {
            ASSERT_NEAR(got[i], e.p_after[i], 1e-6 + 1e-6 * e.p_after[i]) << "p[" << i << "]";
            sum += got[i];
          }
          EXPECT_NEAR(sum, 1.0, 1e-4);
          if (mode == 5) {  // zero residual: p bit-identical to the input
            EXPECT_TRUE(std::equal(got, got + vocab, c.p.data() + b * vocab));
          }
        }
      }
    }
  }
  EXPECT_GT(special_rows, 10);
  EXPECT_GT(rejected_rows, 10);
}

// Acceptance frequency of a fixed (p, q) row equals min(1, p[t]/q[t]) for several ratios.
// N = 40000 draws per token; the check allows 5 binomial standard deviations, so a correct
// kernel fails one check with probability ~5.7e-7 (4 checks: ~2.3e-6; the seed is fixed, so a
// pass is reproducible).
TEST(RejectionStep, AcceptanceFrequencyIsMinOneRatio) {
  constexpr int64_t kVocab = 111, kDraws = 40000;
  std::vector<float> p(kVocab, 0.f), q(kVocab, 0.f);
  // Token 0: p/q = 0.1; token 1: 0.5; token 2: 0.9; token 3: 2 (always accepted).
  const float ratios[] = {0.1f, 0.5f, 0.9f, 2.f};
  for (int t = 0; t < 4; ++t) {
    q[t] = 0.1f;
    p[t] = 0.1f * ratios[t];
  }
  double p_rest = 1.0, q_rest = 1.0;
  for (int t = 0; t < 4; ++t) {
    p_rest -= p[t];
    q_rest -= q[t];
  }
  for (int64_t i = 4; i < kVocab; ++i) {
    p[i] = static_cast<float>(p_rest / (kVocab - 4));
    q[i] = static_cast<float>(q_rest / (kVocab - 4));
  }
  std::mt19937_64 rng(55);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  std::vector<float> work(kVocab);
  for (int32_t t = 0; t < 4; ++t) {
    int64_t accepted = 0;
    for (int64_t k = 0; k < kDraws; ++k) {
      std::copy(p.begin(), p.end(), work.begin());
      const float u = unit(rng);
      uint8_t acc = 0;
      ASSERT_EQ(cpu::TreeRejectionStep(work.data(), q.data(), &t, &u, 1, kVocab, &acc), kKernelOk);
      accepted += acc;
    }
    const double a = std::min(1.0, static_cast<double>(p[t]) / q[t]);
    const double sd = std::sqrt(a * (1.0 - a) / kDraws);
    EXPECT_NEAR(static_cast<double>(accepted) / kDraws, a, 5.0 * sd + 1e-12) << "token " << t;
  }
}

// One full speculative-sampling step (draft t ~ q, accept or resample from the residual) must
// emit tokens distributed as p. Chi-square over 8 tokens (7 degrees of freedom) with 200000
// draws; the threshold 40 is exceeded by a correct kernel with probability ~1.3e-6.
TEST(RejectionStep, FullStepSamplesTheTargetDistribution) {
  constexpr int64_t kVocab = 8, kDraws = 200000;
  const std::vector<float> p = {0.30f, 0.05f, 0.10f, 0.15f, 0.02f, 0.18f, 0.12f, 0.08f};
  const std::vector<float> q = {0.05f, 0.25f, 0.10f, 0.05f, 0.20f, 0.15f, 0.12f, 0.08f};
  std::mt19937_64 rng(66);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  auto draw = [&](const float* dist) {
    const float r = unit(rng);
    float cum = 0.f;
    for (int32_t i = 0; i < kVocab; ++i) {
      cum += dist[i];
      if (r < cum) return i;
    }
    return static_cast<int32_t>(kVocab - 1);
  };
  std::vector<int64_t> counts(kVocab, 0);
  std::vector<float> work(kVocab);
  for (int64_t k = 0; k < kDraws; ++k) {
    std::copy(p.begin(), p.end(), work.begin());
    const int32_t t = draw(q.data());
    const float u = unit(rng);
    uint8_t acc = 0;
    ASSERT_EQ(cpu::TreeRejectionStep(work.data(), q.data(), &t, &u, 1, kVocab, &acc), kKernelOk);
    ++counts[acc ? t : draw(work.data())];
  }
  double chi2 = 0.0;
  for (int64_t i = 0; i < kVocab; ++i) {
    const double expected = static_cast<double>(p[i]) * kDraws;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  EXPECT_LT(chi2, 40.0);
}

TEST(RejectionStep, RejectsBadArguments) {
  const at::Tensor p = at::full({2, 5}, 0.2f), q = at::full({2, 5}, 0.2f);
  const at::Tensor token = at::zeros({2}, at::kInt), u = at::zeros({2}, at::kFloat);
  const at::Tensor acc = at::zeros({2}, at::kByte);
  auto call = [&](const at::Tensor& a, const at::Tensor& b, const at::Tensor& t,
                  const at::Tensor& uu, const at::Tensor& out) {
    return ErrorOf([&] { TreeRejectionStep(a, b, t, uu, out); });
  };
  EXPECT_EQ(call(p, q, token, u, acc), kNoSpecbedError);
  EXPECT_EQ(call(p, q, token, u, at::zeros({2}, at::kBool)), kNoSpecbedError);
  EXPECT_NE(call(p.to(at::kDouble), q, token, u, acc).find("TreeRejectionStep: p must be float32"),
            std::string::npos);
  EXPECT_NE(call(p, at::full({2, 6}, 0.2f), token, u, acc).find("q must be float32 [2, 5]"),
            std::string::npos);
  EXPECT_NE(call(p, q, at::zeros({2}, at::kLong), u, acc).find("token must be int32 [2]"),
            std::string::npos);
  EXPECT_NE(call(p, q, token, at::zeros({3}), acc).find("u must be"), std::string::npos);
  EXPECT_NE(call(p, q, token, u, at::zeros({2}, at::kInt)).find("accepted must be uint8 or bool"),
            std::string::npos);
  EXPECT_NE(call(p, q, at::tensor(std::vector<int32_t>{0, 5}, at::kInt), u, acc)
                .find("token[1] = 5 outside [0, V = 5)"),
            std::string::npos);
  EXPECT_NE(
      call(p, at::empty({2, 5}, at::TensorOptions(at::kFloat).device(at::kMeta)), token, u, acc)
          .find("q is on meta"),
      std::string::npos);
  const int32_t bad = -1;
  const float one_u = 0.f;
  std::vector<float> row(5, 0.2f);
  uint8_t out = 0;
  EXPECT_EQ(cpu::TreeRejectionStep(row.data(), row.data(), &bad, &one_u, 1, 5, &out),
            kKernelBadInput);
}

// ---------------------------------------------------------------------------------------------
// CUDA path vs. the CPU reference (skipped without a CUDA device / CUDA build; failed instead with
// SPECBED_REQUIRE_CUDA=1)

TEST(TreeMaskCuda, MatchesCpuReferenceOnGrid) {
  SPECBED_SKIP_WITHOUT_CUDA_KERNELS();
  std::mt19937_64 rng(111);
  for (int64_t batch : kBatches) {
    for (int64_t n : kNodes) {
      for (int64_t prefix_len : {0, 5, 600}) {
        SCOPED_TRACE(Where(batch, n, 0, 0) + " prefix=" + std::to_string(prefix_len));
        const TreeBatch t = RandomTreeBatch(rng, batch, n, 111, static_cast<int>(n));
        const at::Tensor parent = IntTensor(t.parent, batch);
        at::Tensor cpu_mask = at::empty({batch, n + 1, prefix_len + n + 1}, at::kBool);
        BuildTreeMask(parent, prefix_len, cpu_mask);
        at::Tensor gpu_mask = at::ones_like(cpu_mask).to(at::kCUDA);
        BuildTreeMask(parent.to(at::kCUDA), prefix_len, gpu_mask);
        EXPECT_TRUE(at::equal(gpu_mask.cpu(), cpu_mask));
      }
    }
  }
}

TEST(GreedyVerifyCuda, MatchesCpuReferenceOnGrid) {
  SPECBED_SKIP_WITHOUT_CUDA_KERNELS();
  std::mt19937_64 rng(222);
  for (int64_t batch : kBatches) {
    for (int64_t n : kNodes) {
      for (int64_t vocab : kVocabs) {
        SCOPED_TRACE(Where(batch, n, vocab, 0));
        const TreeBatch t = RandomTreeBatch(rng, batch, n, vocab, static_cast<int>(n));
        at::Tensor logits = GreedyLogits(rng, t, batch, n, vocab);
        // NaN rows: element 0 (sequential Argmax returns 0) and elsewhere (never chosen).
        logits[0][0][0] = std::numeric_limits<float>::quiet_NaN();
        logits[batch - 1][n][vocab / 2] = std::numeric_limits<float>::quiet_NaN();
        const at::Tensor tokens = IntTensor(t.tokens, batch), parent = IntTensor(t.parent, batch);
        const GreedyOut want = RunGreedy(logits, tokens, parent);
        const GreedyOut got =
            RunGreedy(logits.to(at::kCUDA), tokens.to(at::kCUDA), parent.to(at::kCUDA));
        EXPECT_TRUE(at::equal(got.accepted.cpu(), want.accepted));
        EXPECT_TRUE(at::equal(got.n_accepted.cpu(), want.n_accepted));
        EXPECT_TRUE(at::equal(got.bonus.cpu(), want.bonus));
      }
    }
  }
}

TEST(GreedyVerifyCuda, ArgmaxEdgeRowsMatchCpu) {
  SPECBED_SKIP_WITHOUT_CUDA_KERNELS();
  const at::Tensor empty = at::empty({1, 0}, at::kInt);
  for (const at::Tensor& row : ArgmaxEdgeRows()) {
    const GreedyOut want = RunGreedy(row, empty, empty);
    const GreedyOut got = RunGreedy(row.to(at::kCUDA), empty.to(at::kCUDA), empty.to(at::kCUDA));
    EXPECT_EQ(got.bonus.cpu()[0].item<int32_t>(), want.bonus[0].item<int32_t>()) << row;
  }
}

TEST(KvCompactCuda, MatchesCpuReferenceOnGrid) {
  SPECBED_SKIP_WITHOUT_CUDA_KERNELS();
  ForEachCompactCase(333, {64, 5}, [](CompactCase& c, int64_t n) {
    at::Tensor gpu = c.storage.to(at::kCUDA);
    CompactKvCache(c.storage, c.committed, c.indices);
    // Indices from the host and from the device must both work.
    const at::Tensor idx = n % 2 ? c.indices : c.indices.to(at::kCUDA);
    CompactKvCache(gpu, c.committed, idx);
    EXPECT_TRUE(at::equal(gpu.cpu(), c.storage));
  });
}

TEST(KvCompactCuda, ToPathMatchesCpuReference) {
  SPECBED_SKIP_WITHOUT_CUDA_KERNELS();
  std::mt19937_64 rng(57);
  for (int64_t batch : kBatches) {
    for (int64_t n : {0, 7, 63}) {
      PathCompactCase c = RandomPathCompactCase(rng, batch, n);
      at::Tensor gpu = c.storage.to(at::kCUDA);
      CompactKvCacheToPath(gpu, c.root_slot.to(at::kCUDA), c.accepted.to(at::kCUDA),
                           c.n_accepted.to(at::kCUDA));
      EXPECT_TRUE(at::equal(gpu.cpu(), c.expected));
    }
  }
}

TEST(RejectionStepCuda, MatchesCpuReference) {
  SPECBED_SKIP_WITHOUT_CUDA_KERNELS();
  std::mt19937_64 rng(444);
  for (int64_t batch : kBatches) {
    for (int64_t vocab : kVocabs) {
      for (int rep = 0; rep < 6; ++rep) {
        SCOPED_TRACE(Where(batch, 0, vocab, rep));
        const RejectionCase c = RandomRejectionCase(rng, batch, vocab, rep);
        RejectionTensors cpu_t = ToTensors(c, batch, vocab);
        RejectionTensors gpu_t = ToTensors(c, batch, vocab);
        for (at::Tensor* x : {&gpu_t.p, &gpu_t.q, &gpu_t.token, &gpu_t.u, &gpu_t.accepted}) {
          *x = x->to(at::kCUDA);
        }
        TreeRejectionStep(cpu_t.p, cpu_t.q, cpu_t.token, cpu_t.u, cpu_t.accepted);
        TreeRejectionStep(gpu_t.p, gpu_t.q, gpu_t.token, gpu_t.u, gpu_t.accepted);
        EXPECT_TRUE(at::equal(gpu_t.accepted.cpu(), cpu_t.accepted));
        EXPECT_LE((gpu_t.p.cpu() - cpu_t.p).abs().max().item<float>(), 1e-6f);
      }
    }
  }
}

}  // namespace
}  // namespace specbed
