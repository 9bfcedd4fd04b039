// Captured step programs (issue 45, step 4; kernels/step_graph.h): the SPECBED_GRAPHS knob, the
// warm-up / capture / replay sequence and its counters, and that graphs change no result: AR
// decode logits with graphs on equal graphs off bit for bit, and a verify step padded up to its
// bucket gives the unpadded step's verdict (greedy, tree_rrs with draft distributions,
// sample_follow, chains and trees of 1 to 63 nodes, three context lengths), the same logits
// (float32, 1e-5), draws the same uniforms and leaves a cache from which the next step's logits
// are the same. A draft chain with graphs on is one captured program equal to the per-token loop
// bit for bit (greedy and sampled, six context lengths from one capture), one replay, one upload
// and one download; a verify step (tree and uniforms in the forward's upload) one upload and one
// download. On a GPU (StepGraphCuda) replayed CUDA graphs equal eager steps bit for bit.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/error.h"
#include "harness/engine/device_sampling.h"
#include "harness/engine/step_ops.h"
#include "harness/engine/verifier.h"
#include "kernels/engine_counters.h"
#include "kernels/step_graph.h"
#include "methods/common/draft_chain.h"
#include "methods/common/tree_builders.h"
#include "models/llama_forward_aten.h"
#include "tests/common/cuda_test_util.h"
#include "tests/engine/engine_test_util.h"

namespace specbed {
namespace {

// SPECBED_GRAPHS set to `value` (nullptr: unset) for its lifetime.
class ScopedGraphsEnv {
 public:
  explicit ScopedGraphsEnv(const char* value) {
    if (value == nullptr) {
      unsetenv("SPECBED_GRAPHS");
    } else {
      setenv("SPECBED_GRAPHS", value, 1);
    }
  }
  ~ScopedGraphsEnv() { unsetenv("SPECBED_GRAPHS"); }
};

// stories260K on the ATen path on `device`, with graphs on or off.
LlamaModel AtenStories260K(bool graphs, const at::Device& device = at::kCPU) {
  const LlamaModel& m = testing_util::Stories260KModel();
  ModelOptions options;
  options.forward_path = ForwardPath::kAten;
  ScopedGraphsEnv env(graphs ? "on" : "off");
  return LlamaModel(m.config(), m.weights().To(m.dtype(), device), options);
}

at::Tensor Ids(const std::vector<int64_t>& ids) {
  return at::tensor(ids, at::kLong).view({1, static_cast<int64_t>(ids.size())});
}

TEST(StepGraph, KnobIsOnOrOffAndBucketsCoverEveryWidthUpTo64) {
  {
    ScopedGraphsEnv env(nullptr);
    EXPECT_EQ(ResolveGraphMode(), GraphMode::kOff);
  }
  {
    ScopedGraphsEnv env("on");
    EXPECT_EQ(ResolveGraphMode(), GraphMode::kOn);
  }
  {
    ScopedGraphsEnv env("yes");
    try {
      ResolveGraphMode();
      FAIL() << "SPECBED_GRAPHS=yes accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("SPECBED_GRAPHS=yes: expected on or off"),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_EQ(StepBucket(1), 1);
  EXPECT_EQ(StepBucket(2), 2);
  EXPECT_EQ(StepBucket(3), 4);
  EXPECT_EQ(StepBucket(9), 12);
  EXPECT_EQ(StepBucket(33), 48);
  EXPECT_EQ(StepBucket(49), 64);
  EXPECT_EQ(StepBucket(64), 64);
  EXPECT_EQ(StepBucket(65), 65);  // eager above the largest bucket
  EXPECT_THROW(StepBucket(0), Error);
  // A captured step needs the fused attention: the other kinds are refused with graphs on.
  setenv("SPECBED_ATTENTION", "bmm", 1);
  EXPECT_THROW(ResolveAttentionKind(at::kCPU, GraphMode::kOn), Error);
  EXPECT_EQ(ResolveAttentionKind(at::kCPU, GraphMode::kOff), AttentionKind::kBmm);
  unsetenv("SPECBED_ATTENTION");
  EXPECT_EQ(ResolveAttentionKind(at::Device(at::kCUDA), GraphMode::kOn), AttentionKind::kFused);
  EXPECT_EQ(ResolveAttentionKind(at::Device(at::kCUDA), GraphMode::kOff), AttentionKind::kSdpa);
}

TEST(StepGraph, WarmsUpThenCapturesThenReplays) {
  StepGraph graph;
  GraphStats stats;
  int runs = 0;
  for (int i = 0; i < 4; ++i)
    graph.Run(
        at::kCPU, [&] { ++runs; }, "a test step", stats);
  EXPECT_EQ(runs, 4);  // the CPU captures nothing: every call runs the program
  EXPECT_TRUE(graph.captured());
  EXPECT_EQ(stats.eager_warmups, 1);
  EXPECT_EQ(stats.captures, 1);
  EXPECT_EQ(stats.replays, 3);
}

// Greedy AR through both models; every step's logits compared bit for bit.
void ExpectDecodeEqual(LlamaModel& on, LlamaModel& off, int64_t steps) {
  KvCache cache_on = on.NewCache(1, 128), cache_off = off.NewCache(1, 128);
  const at::Tensor prompt = Ids({1, 403, 261, 376, 298});  // 5 tokens: not a bucket, eager
  at::Tensor a = on.Forward(prompt.to(on.device()), cache_on).logits;
  at::Tensor b = off.Forward(prompt.to(off.device()), cache_off).logits;
  for (int64_t i = 0; i < steps; ++i) {
    ASSERT_TRUE(at::equal(a.cpu(), b.cpu())) << "step " << i;
    const int64_t next = b.argmax(-1).item<int64_t>();
    a = on.Forward(Ids({next}).to(on.device()), cache_on).logits;
    b = off.Forward(Ids({next}).to(off.device()), cache_off).logits;
  }
}

TEST(StepGraph, DecodeWithGraphsEqualsEagerBitForBit) {
  at::set_num_threads(1);
  LlamaModel on = AtenStories260K(true), off = AtenStories260K(false);
  EXPECT_EQ(on.graph_mode(), GraphMode::kOn);
  EXPECT_TRUE(on.ReplaysSteps(1));
  EXPECT_FALSE(off.ReplaysSteps(1));
  EXPECT_FALSE(on.ReplaysSteps(3));  // not a bucket width
  ExpectDecodeEqual(on, off, 30);
  const GraphStats stats = on.graph_stats();
  EXPECT_EQ(stats.eager_warmups, 1);
  EXPECT_EQ(stats.captures, 1);
  EXPECT_EQ(stats.replays, 29);
  EXPECT_EQ(off.graph_stats().replays, 0);
}

// With graphs on, a verify step padded to its bucket records the same ops, shapes and pointers at
// two context lengths (what the capture bakes in), as a decode step does.
TEST(StepGraph, PaddedStepsKeepTraceIdentity) {
  at::set_num_threads(1);
  LlamaModel on = AtenStories260K(true);
  EXPECT_EQ(TraceDecodeStep(on, 20, 41).difference, "");
  for (int64_t nodes : {2, 12, 40}) {  // 3, 13 and 41 rows: buckets 4, 16 and 48
    EXPECT_EQ(TraceVerifyStep(on, nodes, 20, 41).difference, "") << nodes << " nodes";
  }
  EXPECT_GT(on.graph_stats().replays, 0);
}

struct VerifyCase {
  VerifyRule rule;
  double temperature;
};

// max |a - b| <= 1e-5 of b's scale (at least 1): float32 GEMMs of another row count may sum in
// another order.
void ExpectClose(const at::Tensor& a, const at::Tensor& b) {
  const float scale = std::max(1.0f, b.abs().max().item<float>());
  EXPECT_LE((a - b).abs().max().item<float>(), 1e-5f * scale);
}

// The padded verify (graphs on) against the unpadded one (graphs off) on the same tree, cache
// contents and sampler seed.
void ExpectSameVerdict(LlamaModel& on, LlamaModel& off, KvCache& cache_on, KvCache& cache_off,
                       const DraftTree& tree, const VerifyCase& c, uint64_t seed) {
  const int64_t committed = cache_on.length();
  TreeVerifier verifier_on(on), verifier_off(off);
  Sampler sampler_on(testing_util::Temperature(c.temperature), seed);
  Sampler sampler_off(testing_util::Temperature(c.temperature), seed);
  Verdict v_on, v_off;
  const int32_t root = 7;
  verifier_on.Verify(root, tree, c.rule, sampler_on, cache_on, {1}, v_on);
  verifier_off.Verify(root, tree, c.rule, sampler_off, cache_off, {1}, v_off);
  ASSERT_EQ(v_on.path, v_off.path);
  ASSERT_EQ(v_on.bonus, v_off.bonus);
  ASSERT_EQ(v_on.logits.sizes(), v_off.logits.sizes());
  ExpectClose(v_on.logits, v_off.logits);
  ASSERT_EQ(v_on.hidden.size(), 1u);
  ExpectClose(v_on.hidden[0], v_off.hidden[0]);
  EXPECT_EQ(sampler_on.rng()(), sampler_off.rng()()) << "a pad row drew a uniform";
  ASSERT_EQ(cache_on.length(), cache_off.length());
  // The compacted caches: the next step's logits agree.
  const at::Tensor next = Ids({v_off.bonus});
  const at::Tensor a = on.Forward(next, cache_on).logits, b = off.Forward(next, cache_off).logits;
  ExpectClose(a, b);
  cache_on.Truncate(committed);
  cache_off.Truncate(committed);
}

TEST(StepGraph, PaddedVerifyGivesTheUnpaddedVerdict) {
  at::set_num_threads(1);
  LlamaModel on = AtenStories260K(true), off = AtenStories260K(false);
  const int64_t vocab = on.config().vocab_size;
  at::manual_seed(45);
  const std::vector<VerifyCase> cases = {
      {VerifyRule::kGreedy, 0.0}, {VerifyRule::kTreeRrs, 1.0}, {VerifyRule::kSampleFollow, 0.8}};
  uint64_t seed = 0;
  for (int64_t committed : {9, 40, 100}) {
    KvCache cache_on = on.NewCache(1, 256), cache_off = off.NewCache(1, 256);
    const at::Tensor prompt = at::randint(1, vocab, {1, committed}, at::kLong);
    on.Forward(prompt, cache_on);
    off.Forward(prompt, cache_off);
    for (int64_t n : {1, 2, 6, 9, 20, 40, 63}) {
      for (bool chain : {false, true}) {
        for (const VerifyCase& c : cases) {
          RandomTreeOptions options;
          options.chain = chain;
          options.with_draft_probs = true;
          const DraftTree tree = RandomTree(n, vocab, ++seed, options);
          SCOPED_TRACE(::testing::Message()
                       << "committed " << committed << ", " << n << (chain ? " chain" : " tree")
                       << ", rule " << static_cast<int>(c.rule));
          ExpectSameVerdict(on, off, cache_on, cache_off, tree, c, seed);
        }
      }
    }
  }
  // Rows 2, 3, 7, 10, 21, 41, 64 fall into 7 buckets (2, 4, 8, 12, 24, 48, 64), the next steps
  // into the decode one: each captured at most once per cache, then replayed.
  const GraphStats stats = on.graph_stats();
  EXPECT_GT(stats.captures, 0);
  EXPECT_LE(stats.captures, 3 * 8);
  EXPECT_GT(stats.replays, 3 * stats.captures);
  EXPECT_EQ(off.graph_stats().replays, 0);
}

TEST(StepGraph, NoPaddingWhereTheCacheHasNoRoomForTheBucket) {
  at::set_num_threads(1);
  LlamaModel on = AtenStories260K(true), off = AtenStories260K(false);
  at::manual_seed(46);
  const int64_t vocab = on.config().vocab_size, max_len = 48;
  KvCache cache_on = on.NewCache(1, max_len), cache_off = off.NewCache(1, max_len);
  const at::Tensor prompt = at::randint(1, vocab, {1, max_len - 10}, at::kLong);
  on.Forward(prompt, cache_on);
  off.Forward(prompt, cache_off);
  const DraftTree tree = RandomTree(8, vocab, 3);  // 9 rows: bucket 16 > the 10 free slots
  ExpectSameVerdict(on, off, cache_on, cache_off, tree, {VerifyRule::kGreedy, 0.0}, 3);
  EXPECT_EQ(on.graph_stats().replays + on.graph_stats().eager_warmups, 1);  // the 1-token step
}

// A draft model's chains of n tokens (methods/common/draft_chain.h: SpS's, PEARL's) through `on`
// (graphs on: each chain one captured program) and `off` (the per-token loop), `rounds` chains
// from one prompt, each followed by the forward of its last token as the next draft step feeds
// it, so every chain starts at a longer context: tokens, draft distributions (sampled) and the
// next logits equal bit for bit.
void ExpectChainsEqual(LlamaModel& on, LlamaModel& off, bool sampled, int64_t n, int64_t rounds) {
  const at::Device device = on.device();
  KvCache cache_on = on.NewCache(1, 192), cache_off = off.NewCache(1, 192);
  const at::Tensor prompt = Ids({1, 403, 261, 376, 298}).to(device);
  ForwardOutput a = on.Forward(prompt, cache_on), b = off.Forward(prompt, cache_off);
  SamplingParams params;
  params.temperature = sampled ? 0.8 : 0.0;
  params.top_k = sampled ? 50 : 0;
  Sampler sampler_on(params, 7), sampler_off(params, 7);
  DeviceDraftSampler draws_on, draws_off;
  at::Tensor ids_on, ids_off;
  for (int64_t round = 0; round < rounds; ++round) {
    const at::Tensor t_on =
        sampled ? SampledChainOnDevice(on, cache_on, a, n, sampler_on, draws_on, ids_on)
                : GreedyChainOnDevice(on, cache_on, a, n, ids_on);
    const at::Tensor t_off =
        sampled ? SampledChainOnDevice(off, cache_off, b, n, sampler_off, draws_off, ids_off)
                : GreedyChainOnDevice(off, cache_off, b, n, ids_off);
    ASSERT_TRUE(at::equal(t_on, t_off)) << "round " << round << ": " << t_on << " vs " << t_off;
    if (sampled) {
      ASSERT_TRUE(at::equal(draws_on.probs().narrow(0, 0, n + 1).cpu(),
                            draws_off.probs().narrow(0, 0, n + 1).cpu()))
          << "round " << round;
    }
    ASSERT_EQ(cache_on.length(), cache_off.length());
    const int64_t last = t_on.to(at::kLong)[n - 1].item<int64_t>();
    a = on.Forward(Ids({last}).to(device), cache_on);
    b = off.Forward(Ids({last}).to(device), cache_off);
    ASSERT_TRUE(at::equal(a.logits.cpu(), b.logits.cpu())) << "after round " << round;
  }
}

TEST(StepGraph, DraftChainIsOneCapturedProgramEqualToTheLoop) {
  at::set_num_threads(1);
  for (bool sampled : {false, true}) {
    LlamaModel on = AtenStories260K(true), off = AtenStories260K(false);
    EXPECT_TRUE(on.ChainsSteps(5));
    EXPECT_FALSE(off.ChainsSteps(5));
    EXPECT_FALSE(on.ChainsSteps(1));
    ExpectChainsEqual(on, off, sampled, 5, 6);
    // One chain program (warm-up, capture, 4 replays at 4 more context lengths) and the width-1
    // decode step the feeds replay: 2 captures, nothing recaptured as the context grew.
    EXPECT_EQ(on.graph_stats().captures, 2) << (sampled ? "sampled" : "greedy");
    EXPECT_EQ(off.graph_stats().replays, 0);
  }
}

// The chain's counters (kernels/engine_counters.h): with graphs on a warm chain is one replay,
// its steps' inputs one upload and its tokens one download; the per-token loop uploads per token.
TEST(StepGraph, DraftChainIsOneReplayOneUploadAndOneDownload) {
  at::set_num_threads(1);
  for (bool graphs : {true, false}) {
    LlamaModel model = AtenStories260K(graphs);
    KvCache cache = model.NewCache(1, 128);
    ForwardOutput out = model.Forward(Ids({1, 403, 261, 376}), cache);
    at::Tensor ids;
    EngineCounters d;
    for (int round = 0; round < 3; ++round) {  // warm-up, capture, replay
      const EngineCounters before = ReadEngineCounters();
      const at::Tensor tokens = GreedyChainOnDevice(model, cache, out, 6, ids);
      d = ReadEngineCounters().Since(before);
      out = model.Forward(Ids({tokens[5].item<int64_t>()}), cache);
    }
    const char* mode = graphs ? "graphs on" : "graphs off";
    EXPECT_EQ(d.replays, graphs ? 1 : 0) << mode;
    EXPECT_EQ(d.captures, 0) << mode;
    EXPECT_EQ(d.h2d, graphs ? 1 : 5) << mode;
    EXPECT_EQ(d.d2h, 1) << mode;
    EXPECT_EQ(d.launches, -1) << mode << ": launches are counted under OpCounting only";
  }
}

// A verify step's copies (kernels/engine_counters.h): the tree and the uniforms ride in the
// forward's one upload (ForwardOptions::staged_extra), the verdict comes back in one download,
// greedy or sampled, graphs on or off.
TEST(StepGraph, VerifyStepIsOneUploadAndOneDownload) {
  at::set_num_threads(1);
  for (bool graphs : {true, false}) {
    LlamaModel model = AtenStories260K(graphs);
    const int64_t vocab = model.config().vocab_size;
    KvCache cache = model.NewCache(1, 256);
    model.Forward(Ids({1, 403, 261, 376, 20}), cache);
    TreeVerifier verifier(model);
    for (uint64_t seed = 0; seed < 8; ++seed) {
      const DraftTree tree = RandomTree(3 + 2 * static_cast<int64_t>(seed % 4), vocab, seed);
      const double t = seed % 2 == 0 ? 0.0 : 1.0;
      Sampler sampler(testing_util::Temperature(t), seed);
      Verdict verdict;
      const int64_t committed = cache.length();
      const EngineCounters before = ReadEngineCounters();
      verifier.Verify(7, tree, VerifyRule::kSampleFollow, sampler, cache, {1}, verdict);
      const EngineCounters d = ReadEngineCounters().Since(before);
      const std::string what = std::string(graphs ? "graphs on" : "graphs off") +
                               ", T = " + std::to_string(t) + ", seed " + std::to_string(seed);
      EXPECT_EQ(d.h2d, 1) << what;
      EXPECT_EQ(d.d2h, 1) << what;
      cache.Truncate(committed);
    }
  }
}

TEST(StepGraphCuda, DraftChainGraphEqualsTheLoopBitForBit) {
  SPECBED_SKIP_WITHOUT_CUDA_KERNELS();
  for (bool sampled : {false, true}) {
    setenv("SPECBED_ATTENTION", "fused", 1);  // graphs on picks it anyway; off must match
    LlamaModel on = AtenStories260K(true, at::kCUDA), off = AtenStories260K(false, at::kCUDA);
    unsetenv("SPECBED_ATTENTION");
    ExpectChainsEqual(on, off, sampled, 5, 6);
    EXPECT_EQ(on.graph_stats().captures, 2);
  }
}

TEST(StepGraphCuda, ReplayedGraphsEqualEagerStepsBitForBit) {
  SPECBED_SKIP_WITHOUT_CUDA_KERNELS();
  setenv("SPECBED_ATTENTION", "fused", 1);  // graphs on picks it anyway; off must match
  LlamaModel on = AtenStories260K(true, at::kCUDA), off = AtenStories260K(false, at::kCUDA);
  unsetenv("SPECBED_ATTENTION");
  ExpectDecodeEqual(on, off, 30);
  EXPECT_EQ(on.graph_stats().captures, 1);
  const int64_t vocab = on.config().vocab_size;
  KvCache cache_on = on.NewCache(1, 256), cache_off = off.NewCache(1, 256);
  at::manual_seed(47);
  const at::Tensor prompt = at::randint(1, vocab, {1, 40}, at::kLong).to(at::kCUDA);
  on.Forward(prompt, cache_on);
  off.Forward(prompt, cache_off);
  RandomTreeOptions options;
  options.with_draft_probs = true;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    const DraftTree tree = RandomTree(5 + 4 * static_cast<int64_t>(seed), vocab, seed, options);
    ExpectSameVerdict(on, off, cache_on, cache_off, tree, {VerifyRule::kTreeRrs, 1.0}, seed);
  }
  EXPECT_GT(on.graph_stats().captures, 1);
}

}  // namespace
}  // namespace specbed
