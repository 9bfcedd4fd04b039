// LlamaModel::ForwardRagged: one forward over several sequences, each with its own cache, length
// and mask. On the row kernels (batch_invariant) every chunk's logits, hidden states and cache
// writes are bit-identical to the same tokens through a batch-1 Forward, whatever its batch-mates
// (decode rows, chains, a tree with positions and a mask, a chunk past the GEMV threshold); a
// swapped cache changes them (the negative control); bad chunks are refused naming the chunk; the
// ATen path agrees within float tolerance, and batches: one GEMM per projection for all chunks
// (its launching ops per layer counted), each chunk within float tolerance of its own Forward.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <vector>

#include "base/error.h"
#include "models/gemv.h"
#include "models/llama_model.h"
#include "models/op_trace.h"
#include "tests/engine/engine_test_util.h"

namespace specbed {
namespace {

using testing_util::Ids;
using testing_util::Stories260KModel;

// One sequence of the test: its prompt (prefilled alone) and the tokens of the step under test,
// with optional tree positions and mask.
struct Seq {
  std::vector<int32_t> prompt, step;
  bool tree = false;
};

std::vector<Seq> Sequences() {
  std::vector<Seq> seqs = {
      {{1, 400, 33, 70}, {55}},                           // a decode row
      {{1, 17}, {90, 91, 92}},                            // a short chain
      {{1, 5, 6, 7, 8, 9, 10, 11, 12}, {3}},              // a longer context, one row
      {{1, 300, 301}, {}},                                // a chain past the GEMV threshold (below)
      {{1, 44, 45, 46, 47}, {60, 61, 62, 63, 64}, true},  // a tree
  };
  for (int i = 0; i < 14; ++i) seqs[3].step.push_back(100 + i);
  return seqs;
}

// The tree of Seq::tree: root, two children of the root, a child of each (positions by depth).
void TreeInputs(int64_t past, at::Tensor& positions, at::Tensor& mask) {
  const std::vector<int64_t> parent = {-1, 0, 0, 1, 2};  // row r's parent row (-1: none)
  const int64_t n = static_cast<int64_t>(parent.size());
  positions = at::empty({1, n}, at::kLong);
  mask = at::zeros({1, n, past + n}, at::kBool);
  for (int64_t r = 0; r < n; ++r) {
    int64_t depth = 0;
    for (int64_t a = r; a >= 0; a = parent[a]) {
      mask[0][r][past + a] = true;
      depth += a != r ? 1 : 0;
    }
    positions[0][r] = past + depth;
    for (int64_t s = 0; s < past; ++s) mask[0][r][s] = true;
  }
}

struct Prepared {
  std::vector<KvCache> caches;
  std::vector<SeqChunk> chunks;
};

// Every sequence prefilled into its own cache, its step staged as a chunk.
Prepared Prepare(LlamaModel& model, const std::vector<Seq>& seqs) {
  Prepared p;
  for (const Seq& s : seqs) {
    p.caches.push_back(model.NewCache(1, 64));
    model.Forward(Ids(s.prompt), p.caches.back(), {});
  }
  for (size_t i = 0; i < seqs.size(); ++i) {
    SeqChunk ch;
    ch.cache = &p.caches[i];
    ch.tokens = Ids(seqs[i].step);
    if (seqs[i].tree) TreeInputs(p.caches[i].length(), ch.positions, ch.mask);
    p.chunks.push_back(ch);
  }
  return p;
}

// The options of a chunk's batch-1 Forward: its positions and mask, `logits`, `hidden_layers`.
ForwardOptions AloneOptions(const SeqChunk& chunk, LogitsMode logits,
                            const std::vector<int64_t>& hidden_layers) {
  ForwardOptions fo;
  fo.positions = chunk.positions;
  fo.mask = chunk.mask;
  fo.logits = logits;
  fo.hidden_layers = hidden_layers;
  return fo;
}

void ExpectBatchOneBits(at::ScalarType dtype) {
  LlamaModel model = Stories260KModel(dtype);
  ASSERT_GT(14, GemvMaxRows(dtype)) << "the long chunk must cross the GEMV threshold";
  const std::vector<Seq> seqs = Sequences();
  Prepared ragged = Prepare(model, seqs);
  RaggedOptions options;
  options.hidden_layers = {1, model.config().n_layers};
  RaggedOutput out = model.ForwardRagged(ragged.chunks, options);
  ASSERT_EQ(out.logits.size(), seqs.size());
  for (at::Tensor& l : out.logits) l = l.clone();  // views of the model's buffer
  Prepared alone = Prepare(model, seqs);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const ForwardOutput one =
        model.Forward(alone.chunks[i].tokens, alone.caches[i],
                      AloneOptions(alone.chunks[i], LogitsMode::kAll, options.hidden_layers));
    EXPECT_TRUE(at::equal(out.logits[i], one.logits[0])) << "chunk " << i << " logits";
    for (size_t h = 0; h < one.hidden.size(); ++h) {
      EXPECT_TRUE(at::equal(out.hidden[i][h], one.hidden[h])) << "chunk " << i << " hidden " << h;
    }
    EXPECT_EQ(ragged.caches[i].length(), alone.caches[i].length());
    EXPECT_TRUE(at::equal(ragged.caches[i].storage(), alone.caches[i].storage()))
        << "chunk " << i << " cache";
  }
}

TEST(RaggedForward, EveryChunkIsBitIdenticalToItsBatchOneForwardFloat32) {
  ExpectBatchOneBits(at::kFloat);
}

TEST(RaggedForward, EveryChunkIsBitIdenticalToItsBatchOneForwardBFloat16) {
  ExpectBatchOneBits(at::kBFloat16);
}

TEST(RaggedForward, LastLogitsAreEachChunksBatchOneLastLogits) {
  LlamaModel model = Stories260KModel();
  Prepared ragged = Prepare(model, Sequences());
  Prepared alone = Prepare(model, Sequences());
  RaggedOptions options;
  options.logits = LogitsMode::kLast;
  RaggedOutput out = model.ForwardRagged(ragged.chunks, options);
  for (at::Tensor& l : out.logits) l = l.clone();  // views of the model's buffer
  for (size_t i = 0; i < out.logits.size(); ++i) {
    ForwardOptions fo;
    fo.positions = alone.chunks[i].positions;
    fo.mask = alone.chunks[i].mask;
    const ForwardOutput one = model.Forward(alone.chunks[i].tokens, alone.caches[i], fo);
    ASSERT_EQ(out.logits[i].size(0), 1);
    EXPECT_TRUE(at::equal(out.logits[i], one.logits[0])) << "chunk " << i;
  }
}

// A row's logits do not depend on how many rows were normed with it (RmsNormRow): the last row
// of an n-token forward's every-row logits equals its last-row logits (before the fix n = 3
// differed by ~4e-6).
TEST(RaggedForward, BatchOneAllRowsAndLastRowLogitsAgree) {
  LlamaModel model = Stories260KModel();
  for (int n = 1; n <= 12; ++n) {
    std::vector<int32_t> ids = {1};
    for (int i = 1; i < n; ++i) ids.push_back(20 + 7 * i);
    KvCache a = model.NewCache(1, 64), b = model.NewCache(1, 64);
    ForwardOptions all;
    all.logits = LogitsMode::kAll;
    const at::Tensor la = model.Forward(Ids(ids), a, all).logits.clone();
    const at::Tensor lb = model.Forward(Ids(ids), b, {}).logits.clone();
    EXPECT_TRUE(at::equal(la[0][n - 1], lb[0][0])) << n << " tokens";
  }
}

// Negative control: the same step with two sequences' caches swapped gives other logits (the
// comparison above would see a cache mixed up between sequences).
TEST(RaggedForward, SwappedCachesChangeTheLogits) {
  LlamaModel model = Stories260KModel();
  Prepared right = Prepare(model, Sequences());
  Prepared swapped = Prepare(model, Sequences());
  std::swap(swapped.chunks[0].cache, swapped.chunks[2].cache);
  const RaggedOutput a = model.ForwardRagged(right.chunks);
  const at::Tensor a0 = a.logits[0].clone();
  const RaggedOutput b = model.ForwardRagged(swapped.chunks);
  EXPECT_FALSE(at::allclose(a0, b.logits[0], 1e-3, 1e-3));
}

TEST(RaggedForward, NonInvariantPlanStaysCloseToBatchOne) {
  LlamaModel model = Stories260KModel();
  Prepared ragged = Prepare(model, Sequences());
  Prepared alone = Prepare(model, Sequences());
  RaggedOptions options;
  options.batch_invariant = false;  // one GEMM over all 24 rows
  RaggedOutput out = model.ForwardRagged(ragged.chunks, options);
  for (at::Tensor& l : out.logits) l = l.clone();  // views of the model's buffer
  for (size_t i = 0; i < out.logits.size(); ++i) {
    ForwardOptions fo;
    fo.positions = alone.chunks[i].positions;
    fo.mask = alone.chunks[i].mask;
    fo.logits = LogitsMode::kAll;
    const ForwardOutput one = model.Forward(alone.chunks[i].tokens, alone.caches[i], fo);
    EXPECT_TRUE(at::allclose(out.logits[i], one.logits[0], 1e-4, 1e-4)) << i;
  }
}

TEST(RaggedForward, AtenPathAgreesWithTheRowKernels) {
  LlamaModel rows = Stories260KModel();
  const auto& ckpt = testing_util::Stories260K();
  LlamaModel aten(ckpt.config, WeightsFromHfTensors(ckpt.config, ckpt.tensors, "stories260K"),
                  ModelOptions{ForwardPath::kAten});
  Prepared a = Prepare(rows, Sequences());
  Prepared b = Prepare(aten, Sequences());
  const RaggedOutput ra = rows.ForwardRagged(a.chunks);  // two models: two buffers
  const RaggedOutput rb = aten.ForwardRagged(b.chunks);
  for (size_t i = 0; i < ra.logits.size(); ++i) {
    EXPECT_TRUE(at::allclose(ra.logits[i], rb.logits[i], 1e-4, 1e-4)) << i;
    EXPECT_EQ(a.caches[i].length(), b.caches[i].length());
  }
}

// The ATen path with its fused attention (the CPU default) runs the batch as one step: per layer
// 2 RMSNorms, the qkv, wo, gate/up and down GEMMs and SiLU * up once for every chunk's rows, RoPE
// + KV write and attention once per chunk (7 + 2 x chunks launching ops, against 9 x chunks for a
// Forward each); every chunk's logits (all rows, last row), hidden states and cache writes
// within float tolerance of its own Forward on the same path (the tree chunk's mask read as
// tree bits there, as an additive mask alone).
TEST(RaggedForward, AtenPathRunsOneGemmPerProjectionForTheWholeBatch) {
  const auto& ckpt = testing_util::Stories260K();
  LlamaModel aten(ckpt.config, WeightsFromHfTensors(ckpt.config, ckpt.tensors, "stories260K"),
                  ModelOptions{ForwardPath::kAten});
  const std::vector<Seq> seqs = Sequences();
  const int64_t layers = aten.config().n_layers, n_chunks = static_cast<int64_t>(seqs.size());
  for (LogitsMode mode : {LogitsMode::kAll, LogitsMode::kLast}) {
    SCOPED_TRACE(mode == LogitsMode::kAll ? "every row's logits" : "last rows, hidden states");
    Prepared ragged = Prepare(aten, seqs);
    RaggedOptions options;
    options.logits = mode;
    if (mode == LogitsMode::kLast) options.hidden_layers = {1, layers};
    OpTrace trace;
    RaggedOutput out = aten.ForwardRagged(ragged.chunks, options);
    trace.Stop();
    if (options.hidden_layers.empty()) {  // (a kept hidden state adds a copy inside the layers)
      EXPECT_EQ(CountOps(trace.ops()).in_layers, layers * (7 + 2 * n_chunks));
    }
    for (at::Tensor& l : out.logits) l = l.clone();  // views of the model's buffer
    Prepared alone = Prepare(aten, seqs);
    for (size_t i = 0; i < seqs.size(); ++i) {
      const ForwardOutput one =
          aten.Forward(alone.chunks[i].tokens, alone.caches[i],
                       AloneOptions(alone.chunks[i], mode, options.hidden_layers));
      EXPECT_TRUE(at::allclose(out.logits[i], one.logits[0], 1e-5, 1e-5)) << "chunk " << i;
      ASSERT_EQ(out.hidden[i].size(), one.hidden.size());
      for (size_t h = 0; h < one.hidden.size(); ++h) {
        EXPECT_TRUE(at::allclose(out.hidden[i][h], one.hidden[h], 1e-5, 1e-5)) << i << " " << h;
      }
      EXPECT_EQ(ragged.caches[i].length(), alone.caches[i].length());
      EXPECT_TRUE(at::allclose(ragged.caches[i].storage(), alone.caches[i].storage(), 1e-5, 1e-5))
          << "chunk " << i << " cache";
    }
  }
}

TEST(RaggedForward, BadChunksAreRefusedNamingTheChunk) {
  LlamaModel model = Stories260KModel();
  Prepared p = Prepare(model, Sequences());
  std::vector<SeqChunk> shared = {p.chunks[0], p.chunks[1]};
  shared[1].cache = shared[0].cache;
  EXPECT_THROW(
      {
        try {
          model.ForwardRagged(shared);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("chunks 0 and 1 share a cache"), std::string::npos);
          throw;
        }
      },
      Error);
  KvCache two = model.NewCache(2, 32);
  std::vector<SeqChunk> batch2 = {p.chunks[0]};
  batch2[0].cache = &two;
  EXPECT_THROW(model.ForwardRagged(batch2), Error);
  std::vector<SeqChunk> bad_mask = {p.chunks[4]};
  bad_mask[0].mask = at::ones({1, 5, 3}, at::kBool);
  EXPECT_THROW(model.ForwardRagged(bad_mask), Error);
  EXPECT_THROW(model.ForwardRagged({}), Error);
  EXPECT_EQ(p.caches[4].length(), 5) << "a refused step leaves the caches as they were";
}

}  // namespace
}  // namespace specbed
