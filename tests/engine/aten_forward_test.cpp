// Tests of the ATen forward path (models/llama_forward_aten.h) against the CPU row kernels
// (models/llama_model.cpp), and of device handling (models/device.h):
// - logits within 1e-4 (float32) and identical greedy ids on stories260K, stories260K-twin and
//   random Llama-3 / Qwen2 / Qwen3 weights (sharpened heads, so greedy ids are not near-ties);
//   causal prefill, one-token decode, a draft tree with its mask, depth positions and KV
//   compaction, returned hidden states, batch 2; bfloat16 loosely;
// - path selection: ModelOptions, SPECBED_FORWARD, the process-wide override, rows off the CPU;
// - a steady decode step of the ATen path allocates no tensor storage (a counting CPU allocator);
// - device names, and "cuda" refused naming the device on a machine without CUDA;
// - on a CUDA device (the AtenForwardCuda tests; skipped without one, failed with
//   SPECBED_REQUIRE_CUDA=1): the ATen path on the GPU against the row kernels on the CPU, float32
//   logits within 1e-4 and identical greedy ids on stories260K, its twin and Llama-3/Qwen2/Qwen3,
//   the draft tree with compaction, and a steady decode step making no device-to-host copy.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "base/error.h"
#include "harness/engine/verifier.h"
#include "kernels/tree_mask.h"
#include "models/checkpoint/llama2c_checkpoint.h"
#include "models/device.h"
#include "models/llama_forward_aten.h"
#include "models/model_registry.h"
#include "models/op_trace.h"
#include "tests/common/cuda_test_util.h"
#include "tests/engine/engine_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using testing_util::Ids;

LlamaModel WithPath(const LlamaModel& m, ForwardPath path, at::Device device = at::kCPU) {
  ModelOptions options;
  options.forward_path = path;
  return LlamaModel(m.config(), m.weights().To(m.dtype(), device), options);
}

// The model on the first CUDA device through the ATen path (the path every non-CPU device takes).
LlamaModel OnCuda(const LlamaModel& m) {
  return WithPath(m, ForwardPath::kAuto, at::Device(at::kCUDA, 0));
}

double MaxDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kCPU, at::kFloat) - b.to(at::kCPU, at::kFloat)).abs().max().item<double>();
}

int32_t Argmax(const at::Tensor& row) {
  return static_cast<int32_t>(row.argmax().item<int64_t>());
}

// Prefill (all logits + hidden states of the first, a middle and the last layer), then `n`
// greedy decode steps on both paths: per-step logits within `tol`, identical greedy ids.
void ExpectPathsAgree(LlamaModel& rows, LlamaModel& aten, const std::vector<int32_t>& prompt, int n,
                      double tol) {
  ASSERT_EQ(rows.forward_path(), ForwardPath::kRowKernels);
  ASSERT_EQ(aten.forward_path(), ForwardPath::kAten);
  const int64_t max_len = static_cast<int64_t>(prompt.size()) + n + 1;
  KvCache cr = rows.NewCache(1, max_len), ca = aten.NewCache(1, max_len);
  ForwardOptions options;
  options.logits = LogitsMode::kAll;
  const int64_t L = rows.config().n_layers;
  options.hidden_layers = {0, L / 2, L};
  ForwardOutput orow = rows.Forward(Ids(prompt), cr, options);
  ForwardOutput oaten = aten.Forward(Ids(prompt), ca, options);
  EXPECT_LT(MaxDiff(orow.logits, oaten.logits), tol) << "prefill logits";
  ASSERT_EQ(oaten.hidden.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_LT(MaxDiff(orow.hidden[i], oaten.hidden[i]), tol) << "hidden layer " << i;
  }
  int32_t token = Argmax(orow.logits[0][prompt.size() - 1]);
  ASSERT_EQ(token, Argmax(oaten.logits[0][prompt.size() - 1]));
  for (int i = 0; i < n; ++i) {
    const at::Tensor lr = rows.Forward(Ids({token}), cr).logits.clone();
    const at::Tensor la = aten.Forward(Ids({token}), ca).logits;
    EXPECT_LT(MaxDiff(lr, la), tol) << "decode step " << i;
    token = Argmax(lr[0][0]);
    ASSERT_EQ(token, Argmax(la[0][0])) << "greedy ids differ at step " << i;
  }
}

LlamaModel SharpRandom(LlamaConfig config, uint64_t seed) {
  config.Validate("random");
  LlamaWeights w = RandomLlamaWeights(config, seed);
  w.lm_head = (w.lm_head * 40.0).contiguous();  // untied heads only (see the configs)
  if (config.tie_embeddings) w.tok_embeddings = w.lm_head;
  return LlamaModel(config, w);
}

TEST(AtenForward, MatchesRowKernelsOnStories260K) {
  LlamaModel rows = testing_util::Stories260KModel();
  LlamaModel aten = WithPath(rows, ForwardPath::kAten);
  for (const std::vector<int32_t>& prompt :
       {std::vector<int32_t>{1},
        {1, 403, 407, 261, 378},
        {1, 274, 287, 269, 317, 263, 377, 267, 265, 282, 295, 433, 426}}) {
    ExpectPathsAgree(rows, aten, prompt, 48, 1e-4);
  }
}

TEST(AtenForward, MatchesRowKernelsOnTheStoriesTwin) {
  LoadedTarget twin = LoadModel("stories260K-twin", at::kFloat);
  LlamaModel rows = WithPath(*twin.model, ForwardPath::kRowKernels);
  LlamaModel aten = WithPath(*twin.model, ForwardPath::kAten);
  ExpectPathsAgree(rows, aten, {1, 403, 407, 261, 378}, 32, 1e-4);
}

TEST(AtenForward, MatchesRowKernelsOnLlama3Qwen2Qwen3) {
  const std::vector<std::pair<std::string, LlamaConfig>> families = {
      {"llama3", testing_util::SmallLlama3Config()},
      {"qwen2", testing_util::SmallQwen2Config()},
      {"qwen3", testing_util::SmallQwen3Config()}};
  for (const auto& [name, config] : families) {
    SCOPED_TRACE(name);
    LlamaModel rows = SharpRandom(config, 7);
    LlamaModel aten = WithPath(rows, ForwardPath::kAten);
    ExpectPathsAgree(rows, aten, {1, 5, 9, 17, 33, 65, 3}, 24, 1e-4);
  }
}

// A draft tree after a committed prefix: root, two branches (nodes 0 and 1), node 2 below 0 and
// node 3 below 2; verified with the tree mask and depth positions (the ATen path with the tree's
// bits instead when `bits`: its fused attention), then the accepted path {0, 2, 3} compacted; the
// next step agrees too.
void ExpectTreeStepAgrees(at::Device device, bool bits = false) {
  LlamaModel rows = SharpRandom(testing_util::SmallLlama3Config(), 11);
  LlamaModel aten = WithPath(rows, ForwardPath::kAten, device);
  const std::vector<int32_t> prompt = {1, 8, 20, 44, 7};
  const int64_t p = static_cast<int64_t>(prompt.size());
  KvCache cr = rows.NewCache(1, 32), ca = aten.NewCache(1, 32);
  rows.Forward(Ids(prompt), cr);
  aten.Forward(Ids(prompt), ca);
  const std::vector<int32_t> parent = {-1, -1, 0, 2};
  const std::vector<int64_t> depth = {1, 1, 2, 3};
  const int64_t n = 4;
  at::Tensor parents = at::tensor(std::vector<int32_t>(parent), at::kInt).view({1, n});
  at::Tensor mask = at::empty({1, n + 1, p + n + 1}, at::kBool);
  BuildTreeMask(parents, p, mask);
  at::Tensor positions = at::empty({1, n + 1}, at::kLong);
  positions[0][0] = p;
  for (int64_t i = 0; i < n; ++i) positions[0][i + 1] = p + depth[i];
  ForwardOptions options;
  options.logits = LogitsMode::kAll;
  options.mask = mask;
  options.positions = positions;
  options.hidden_layers = {1, 2};
  const at::Tensor tokens = Ids({9, 30, 31, 32, 33});
  ForwardOutput orow = rows.Forward(tokens, cr, options);
  const at::Tensor lr = orow.logits.clone();
  if (bits) {
    at::Tensor tree_bits = at::empty({1, n + 1}, at::kLong);
    TreeBitsOf(parent.data(), n, tree_bits.data_ptr<int64_t>());
    EXPECT_TRUE(at::equal(TreeBitsMask(tree_bits, p), mask));  // the mask they stand for
    EXPECT_EQ(aten.TakesTreeBits(n + 1), ResolveAttentionKind(device) == AttentionKind::kFused);
    options.mask = at::Tensor();
    options.tree_bits = tree_bits;
  }
  ForwardOutput oaten = aten.Forward(tokens, ca, options);
  EXPECT_LT(MaxDiff(lr, oaten.logits), 1e-4);
  for (size_t i = 0; i < 2; ++i) EXPECT_LT(MaxDiff(orow.hidden[i], oaten.hidden[i]), 1e-4);
  for (int64_t s = 0; s <= n; ++s) EXPECT_EQ(Argmax(lr[0][s]), Argmax(oaten.logits[0][s]));
  const at::Tensor keep = at::tensor(std::vector<int64_t>{p, p + 1, p + 3, p + 4}, at::kLong);
  cr.KeepPositions(p, keep.view({1, 4}));
  ca.KeepPositions(p, keep.view({1, 4}));
  const at::Tensor next_r = rows.Forward(Ids({5}), cr).logits.clone();
  EXPECT_LT(MaxDiff(next_r, aten.Forward(Ids({5}), ca).logits), 1e-4);
}

TEST(AtenForward, TreeMaskPositionsAndCompactionMatchRowKernels) {
  ExpectTreeStepAgrees(at::kCPU);
  ExpectTreeStepAgrees(at::kCPU, /*bits=*/true);
}

TEST(AtenForward, BatchOfTwoMatchesRowKernels) {
  LlamaModel rows = SharpRandom(testing_util::SmallQwen3Config(), 3);
  LlamaModel aten = WithPath(rows, ForwardPath::kAten);
  at::Tensor tokens = at::tensor(std::vector<int64_t>{1, 4, 9, 16, 1, 7, 7, 2}, at::kLong);
  tokens = tokens.view({2, 4});
  KvCache cr = rows.NewCache(2, 16), ca = aten.NewCache(2, 16);
  ForwardOptions options;
  options.logits = LogitsMode::kAll;
  const at::Tensor lr = rows.Forward(tokens, cr, options).logits.clone();
  EXPECT_LT(MaxDiff(lr, aten.Forward(tokens, ca, options).logits), 1e-4);
  const at::Tensor step = at::tensor(std::vector<int64_t>{3, 5}, at::kLong).view({2, 1});
  const at::Tensor sr = rows.Forward(step, cr).logits.clone();
  EXPECT_LT(MaxDiff(sr, aten.Forward(step, ca).logits), 1e-4);
}

TEST(AtenForward, Bfloat16StaysCloseToTheRowKernels) {
  LlamaModel rows = testing_util::Stories260KModel(at::kBFloat16);
  LlamaModel aten = WithPath(rows, ForwardPath::kAten);
  std::vector<int32_t> seq = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421};
  ForwardOptions options;
  options.logits = LogitsMode::kAll;
  KvCache cr = rows.NewCache(1, 32), ca = aten.NewCache(1, 32);
  const at::Tensor lr = rows.Forward(Ids(seq), cr, options).logits.clone();
  const at::Tensor la = aten.Forward(Ids(seq), ca, options).logits;
  EXPECT_EQ(la.scalar_type(), at::kFloat);
  EXPECT_LT((lr - la).abs().mean().item<double>(), 0.05);  // bfloat16 roundings differ per path
  EXPECT_GT(lr.argmax(-1).eq(la.argmax(-1)).to(at::kFloat).mean().item<double>(), 0.8);
}

TEST(AtenForward, ForwardPathSelection) {
  LlamaModel m = testing_util::Stories260KModel();
  EXPECT_EQ(ParseForwardPath("aten", "t"), ForwardPath::kAten);
  EXPECT_EQ(ParseForwardPath("rows", "t"), ForwardPath::kRowKernels);
  EXPECT_THROW(ParseForwardPath("gpu", "t"), Error);
  ::setenv("SPECBED_FORWARD", "aten", 1);
  EXPECT_EQ(ResolveForwardPath(ForwardPath::kAuto, at::kCPU), ForwardPath::kAten);
  EXPECT_EQ(WithPath(m, ForwardPath::kAuto).forward_path(), ForwardPath::kAten);
  EXPECT_EQ(ResolveForwardPath(ForwardPath::kRowKernels, at::kCPU), ForwardPath::kRowKernels);
  ::setenv("SPECBED_FORWARD", "nonsense", 1);
  EXPECT_THROW(ResolveForwardPath(ForwardPath::kAuto, at::kCPU), Error);
  ::unsetenv("SPECBED_FORWARD");
  EXPECT_EQ(ResolveForwardPath(ForwardPath::kAuto, at::kCPU), ForwardPath::kRowKernels);
  SetCpuForwardPathOverride(ForwardPath::kAten);
  EXPECT_EQ(ResolveForwardPath(ForwardPath::kAuto, at::kCPU), ForwardPath::kAten);
  SetCpuForwardPathOverride(ForwardPath::kAuto);
  // Off the CPU the ATen path is the only one.
  EXPECT_EQ(ResolveForwardPath(ForwardPath::kAuto, at::Device(at::kCUDA)), ForwardPath::kAten);
  EXPECT_THROW(ResolveForwardPath(ForwardPath::kRowKernels, at::Device(at::kCUDA)), Error);
  // A cache from another model's device is refused (here: a row-kernel cache is fine, the
  // check is on the device).
  KvCache cache = m.NewCache(1, 8);
  EXPECT_EQ(cache.device(), at::Device(at::kCPU));
}

// A steady decode step of the ATen path (AR: one token appended, the last logits read on the
// host) allocates no storage once warm: every activation lives in a preallocated buffer sized
// for the cache's max_len. Greedy verification of a draft chain on the CPU makes no
// device-to-host copy (a device makes one per step, counted by DeviceToHostCopies).
TEST(AtenForward, SteadyDecodeStepAllocatesNothing) {
  at::set_num_threads(1);
  LlamaModel model = WithPath(testing_util::Stories260KModel(), ForwardPath::kAten);
  KvCache cache = model.NewCache(1, 96);
  const at::Tensor prompt = Ids({1, 403, 407, 261, 378});
  at::Tensor step = Ids({0});
  int64_t* step_id = step.data_ptr<int64_t>();
  ForwardOutput out = model.Forward(prompt, cache);
  for (int i = 0; i < 8; ++i) {  // warm-up: buffers reach their steady size
    step_id[0] = Argmax(out.logits[0][0]);
    out = model.Forward(step, cache);
  }
  int64_t allocations = 0;
  const int64_t copies_before = DeviceToHostCopies();
  {
    AllocationCount counting;
    for (int i = 0; i < 32; ++i) {
      const float* row = out.logits.data_ptr<float>();
      step_id[0] =
          static_cast<int32_t>(std::max_element(row, row + model.config().vocab_size) - row);
      out = model.Forward(step, cache);
    }
    allocations = counting.count();
    at::empty({4});  // the counter sees a fresh tensor (so 0 above is a real reading)
    EXPECT_EQ(counting.count(), allocations + 1);
  }
  EXPECT_EQ(allocations, 0) << "storage allocations in 32 steady decode steps";
  EXPECT_EQ(DeviceToHostCopies() - copies_before, 0);
}

// Greedy verification on the ATen path (a tree with two branches, then a chain, each step
// against AR's own greedy continuation) accepts what the target's argmax accepts and copies at
// most once per verify step to the host: once on a CUDA device (when one is visible), never on the
// CPU, where the logits are read in place.
TEST(AtenForward, GreedyVerifyStepCopiesAtMostOnceToTheHost) {
  const at::Device device = at::globalContext().hasCUDA() ? at::Device(at::kCUDA) : at::kCPU;
  const auto& ckpt = testing_util::Stories260K();
  ModelOptions aten;
  aten.forward_path = ForwardPath::kAten;
  LlamaModel target(
      ckpt.config,
      WeightsFromHfTensors(ckpt.config, ckpt.tensors, "stories260K").To(at::kFloat, device), aten);
  ASSERT_EQ(target.forward_path(), ForwardPath::kAten);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  const std::vector<int32_t> continuation = {432, 383, 286, 261, 376, 298};  // greedy (pinned)
  KvCache cache = target.NewCache(1, 64);
  ForwardOutput out = target.Forward(Ids(prompt), cache);
  cache.Truncate(static_cast<int64_t>(prompt.size()) - 1);  // the root is verified with the tree
  TreeVerifier verifier(target);
  Sampler sampler(SamplingParams{}, 0);
  Verdict verdict;
  DraftTree tree;
  tree.AddNode(999 % 512, -1);        // a wrong branch
  tree.AddNode(continuation[0], -1);  // the right one, then a right and a wrong child
  tree.AddNode(continuation[1], 1);
  tree.AddNode(7, 2);
  const int64_t before = DeviceToHostCopies();
  verifier.Verify(prompt.back(), tree, VerifyRule::kGreedy, sampler, cache, {}, verdict);
  EXPECT_EQ(verdict.path, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(verdict.bonus, continuation[2]);
  EXPECT_EQ(DeviceToHostCopies() - before, device.is_cpu() ? 0 : 1);
  tree.Clear();
  tree.AddNode(continuation[3], -1);
  tree.AddNode(continuation[4], 0);
  verifier.Verify(verdict.bonus, tree, VerifyRule::kGreedy, sampler, cache, {}, verdict);
  EXPECT_EQ(verdict.tokens,
            (std::vector<int32_t>{continuation[3], continuation[4], continuation[5]}));
  EXPECT_EQ(DeviceToHostCopies() - before, device.is_cpu() ? 0 : 2);
}

TEST(Device, NamesParseAndUnavailableDevicesAreRefused) {
  EXPECT_EQ(DeviceName(ParseDevice("cpu", "t")), "cpu");
  EXPECT_EQ(DeviceName(ParseDevice("cuda", "t")), "cuda");
  EXPECT_EQ(DeviceName(ParseDevice("cuda:1", "t")), "cuda:1");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "CPU", "cuda:1234", ""}) {
    EXPECT_THROW(ParseDevice(bad, "config 'x.json'"), Error) << bad;
  }
  // "cuda" as parsed is the current device, where a tensor's own device names its index (the
  // GPU run's trainers refused their own parameters when these were compared with ==).
  EXPECT_TRUE(SameDevice(ParseDevice("cuda", "t"), at::Device(at::kCUDA, 0)));
  EXPECT_TRUE(SameDevice(at::Device(at::kCUDA, 0), ParseDevice("cuda", "t")));
  EXPECT_FALSE(SameDevice(ParseDevice("cuda", "t"), ParseDevice("cuda:1", "t")));
  EXPECT_FALSE(SameDevice(ParseDevice("cuda", "t"), at::kCPU));
  EXPECT_TRUE(SameDevice(at::kCPU, ParseDevice("cpu", "t")));
  CheckDeviceAvailable(at::kCPU, "t");
  SynchronizeDevice(at::kCPU);  // a no-op on the CPU
  if (at::globalContext().hasCUDA()) GTEST_SKIP() << "a CUDA device is visible";
  try {
    CheckDeviceAvailable(ParseDevice("cuda", "t"), "config 'x.json'");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config 'x.json'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("device 'cuda' is not available"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(LoadModel("stories260K", at::kFloat, "", at::Device(at::kCUDA, 1)), Error);
  EXPECT_EQ(DescribeCudaDevices(), "");
}

}  // namespace
}  // namespace specbed

namespace specbed {
namespace {

TEST(AtenForwardCuda, MatchesRowKernelsOnStories260KAndTheTwin) {
  SPECBED_SKIP_WITHOUT_CUDA();
  LlamaModel rows = testing_util::Stories260KModel();
  LlamaModel cuda = OnCuda(rows);
  ASSERT_EQ(cuda.forward_path(), ForwardPath::kAten);
  ExpectPathsAgree(rows, cuda, {1, 274, 287, 269, 317, 263, 377, 267, 265, 282, 295, 433}, 48,
                   1e-4);
  LoadedTarget twin = LoadModel("stories260K-twin", at::kFloat);
  LlamaModel twin_rows = WithPath(*twin.model, ForwardPath::kRowKernels);
  LlamaModel twin_cuda = OnCuda(*twin.model);
  ExpectPathsAgree(twin_rows, twin_cuda, {1, 403, 407, 261, 378}, 32, 1e-4);
}

TEST(AtenForwardCuda, MatchesRowKernelsOnLlama3Qwen2Qwen3) {
  SPECBED_SKIP_WITHOUT_CUDA();
  for (const auto& [name, config] : {std::pair{"llama3", testing_util::SmallLlama3Config()},
                                     std::pair{"qwen2", testing_util::SmallQwen2Config()},
                                     std::pair{"qwen3", testing_util::SmallQwen3Config()}}) {
    SCOPED_TRACE(name);
    LlamaModel rows = SharpRandom(config, 7);
    LlamaModel cuda = OnCuda(rows);
    ExpectPathsAgree(rows, cuda, {1, 5, 9, 17, 33, 65, 3}, 24, 1e-4);
  }
}

TEST(AtenForwardCuda, TreeMaskPositionsAndCompactionMatchRowKernels) {
  SPECBED_SKIP_WITHOUT_CUDA();
  ExpectTreeStepAgrees(at::Device(at::kCUDA, 0));
  ExpectTreeStepAgrees(at::Device(at::kCUDA, 0), /*bits=*/true);
}

// A steady decode step with ids already on the GPU copies nothing to the host.
TEST(AtenForwardCuda, SteadyDecodeStepCopiesNothingToTheHost) {
  SPECBED_SKIP_WITHOUT_CUDA();
  LlamaModel model = OnCuda(testing_util::Stories260KModel());
  KvCache cache = model.NewCache(1, 96);
  ForwardOutput out = model.Forward(Ids({1, 403, 407, 261, 378}), cache);
  const int64_t before = DeviceToHostCopies();
  for (int i = 0; i < 16; ++i) {
    const at::Tensor next = out.logits.reshape({1, -1}).argmax(-1, /*keepdim=*/true);
    out = model.Forward(next, cache);
  }
  EXPECT_EQ(DeviceToHostCopies() - before, 0);
  EXPECT_EQ(out.logits.device().type(), at::kCUDA);
}

}  // namespace
}  // namespace specbed
