// PEARL (methods/pearl): token-identical to AR at T = 0 on every story prompt (parallel and
// serialised sides, several chunk lengths), lossless at T = 1 (exact chi-square, with a negative
// control that accepts the next chunk's first token unverified), a rollback discards every token
// drafted after the rejected position (trace), per-thread intra-op budgets, registry entry.
// On the ATen path (forced on the CPU) the draft LM's sampled chunk equals the row path's, and at
// T = 1 every step is one device walk and no verify rows
// come to the host. On a GPU a greedy step copies ids only, and at T = 1 PEARL and SpecBranch
// copy one verdict per step on the target side (ParallelDecoderCuda). The overlap test is in
// pearl_overlap_test.cpp (run serially). The chi-square test runs again on the ATen path as the
// ctest entry AtenPath.PearlChiSquare (SPECBED_FORWARD=aten, tests/methods/CMakeLists.txt).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cmath>
#include <cstdio>

#include "harness/engine/device_sampling.h"
#include "methods/method_registry.h"
#include "methods/pearl/pearl_decoder.h"
#include "methods/pearl/side_thread.h"
#include "methods/pearl/speed_ratio.h"
#include "methods/specbranch/specbranch_decoder.h"
#include "tests/common/cuda_test_util.h"
#include "tests/methods/method_test_util.h"
#include "tests/methods/parallel_test_util.h"

namespace specbed {
namespace {

using parallel_test::Shared;

// `accept_next_unverified`: the negative control of the T = 1 test.
std::unique_ptr<PearlDecoder> MakePearl(int64_t gamma, bool parallel = true,
                                        bool accept_next_unverified = false) {
  PearlOptions options;
  options.gamma = gamma;
  options.parallel = parallel;
  options.test_accept_next_unverified = accept_next_unverified;
  options.target_threads = 1;
  options.draft_threads = 1;
  return std::make_unique<PearlDecoder>(*Shared().target.model, Shared().target.tokenizer.get(),
                                        Shared().draft.model, options);
}

TEST(Pearl, MatchesArOnEveryStoryPrompt) {
  for (int64_t gamma : {1, 4, 7}) {
    auto pearl = MakePearl(gamma);
    double rollback = 0;
    parallel_test::ExpectSameAsAr(*pearl, 0.0, 96, "pearl gamma " + std::to_string(gamma),
                                  &rollback, &pearl->ledger());
    EXPECT_GT(rollback, 0.0) << gamma;  // the shipped draft is imperfect: some rollbacks
    EXPECT_LT(rollback, 1.0) << gamma;
  }
  auto serial = MakePearl(4, /*parallel=*/false);
  parallel_test::ExpectSameAsAr(*serial, 0.0, 96, "pearl serialised");
}

TEST(Pearl, MatchesArAtTheContextLimit) {
  // A cache that ends before max_new_tokens: PEARL stops for the context like AR.
  LoadedTarget& target = Shared().target;
  auto pearl = MakePearl(4);
  const auto& prompt = Shared().prompts[1];
  const GenerationConfig g = parallel_test::Config(target, 0.0, 400);
  KvCache cache = target.model->NewCache(1, static_cast<int64_t>(prompt.size()) + 30);
  const GenerationResult ar = GenerateAr(*target.model, target.tokenizer.get(), prompt, g, cache);
  DecodeResult r;
  pearl->Generate(prompt, g, cache, r);
  EXPECT_EQ(r.generation.tokens, ar.tokens);
  EXPECT_EQ(r.generation.stop_reason, ar.stop_reason);
}

TEST(Pearl, RollbackDiscardsEveryTokenDraftedAfterTheRejection) {
  LoadedTarget& target = Shared().target;
  auto pearl = MakePearl(5);
  PearlTrace trace;
  pearl->SetTrace(&trace);
  int64_t rollbacks = 0;
  for (size_t i = 0; i < 8; ++i) {
    const auto& prompt = Shared().prompts[i];
    DecodeResult r;
    KvCache cache = parallel_test::CacheFor(*target.model, prompt, 96, *pearl);
    pearl->Generate(prompt, parallel_test::Config(target, 0.0, 96), cache, r);
    ASSERT_EQ(trace.steps.size(), r.steps.size());
    std::vector<int32_t> committed = prompt;
    committed.push_back(r.generation.tokens.at(0));
    for (size_t k = 0; k < trace.steps.size(); ++k) {
      const PearlTraceStep& s = trace.steps[k];
      const int64_t n_r = static_cast<int64_t>(s.verified.size());
      if (s.rollback) {
        ++rollbacks;
        // Nothing drafted before the rejection survives: the next step verifies no old token.
        EXPECT_TRUE(s.next_r.empty()) << k;
        if (k + 1 < trace.steps.size()) {
          EXPECT_TRUE(trace.steps[k + 1].verified.empty()) << k;
        }
        // Rolled back: the rejected token and every R token after it, plus the whole chunk
        // drafted concurrently (it assumed the rejected token).
        const int64_t expected =
            s.n_accepted_r < n_r ? (n_r - s.n_accepted_r) + static_cast<int64_t>(s.drafted.size())
                                 : static_cast<int64_t>(s.drafted.size());
        EXPECT_EQ(s.n_rolled_back, expected) << k;
        EXPECT_EQ(r.steps[k].n_rolled_back, expected) << k;
        // The committed tokens are R's accepted prefix + the target's correction (differs from
        // the rejected draft token).
        ASSERT_EQ(static_cast<int64_t>(s.committed.size()), s.n_accepted_r + 1) << k;
        const int32_t rejected =
            s.n_accepted_r < n_r ? s.verified[s.n_accepted_r] : s.drafted.at(0);
        EXPECT_NE(s.committed.back(), rejected) << k;
        // The draft of the next step continues the committed tokens only (its cache keeps no
        // discarded token): its context is exactly committed, ending with the correction.
      } else {
        EXPECT_EQ(s.n_rolled_back, 0) << k;
        EXPECT_EQ(s.n_accepted_r, n_r) << k;
        if (!s.drafted.empty()) {
          // N[0] accepted: the rest of N is verified next.
          EXPECT_EQ(s.committed.back(), s.drafted[0]) << k;
          EXPECT_EQ(s.next_r, std::vector<int32_t>(s.drafted.begin() + 1, s.drafted.end())) << k;
        }
      }
      committed.insert(committed.end(), s.committed.begin(), s.committed.end());
    }
    // The draft cache only ever holds committed tokens and the last chunk's speculative ones:
    // after the sequence, its tokens before the last step's R are a prefix of committed.
    const auto& cached = pearl->draft().cached();
    const size_t common = std::min(cached.size(), committed.size());
    size_t same = 0;
    while (same < common && cached[same] == committed[same]) ++same;
    EXPECT_GE(same + 8, common) << "draft cache diverges from the committed tokens";
  }
  EXPECT_GT(rollbacks, 5);
}

TEST(Pearl, LosslessAtTemperatureOneAndNegativeControlFails) {
  for (bool broken : {false, true}) {
    auto pearl = MakePearl(2, /*parallel=*/true, /*accept_next_unverified=*/broken);
    parallel_test::ExpectChiSquareVerdict(
        "pearl", parallel_test::TopThreeChiSquareP(*pearl), broken,
        broken ? "next token accepted unverified" : "chain rejection sampling",
        "the negative control must fail");
  }
}

// The drafter's side at T = 1.5 (ExpectDraftSideChecks): row path only; the ATen path's draft
// distributions (DeviceDraftSampler) are checked by AtenPath.SpsChiSquare.
TEST(Pearl, LosslessAtTemperatureOnePointFiveAndDraftFaultsFail) {
  parallel_test::ExpectDraftSideChecks(*MakePearl(2, /*parallel=*/true), "pearl");
}

TEST(Pearl, SeededAtTemperatureOne) {
  LoadedTarget& target = Shared().target;
  auto pearl = MakePearl(4);
  const auto& prompt = Shared().prompts[2];
  DecodeResult a, b, c;
  KvCache cache = parallel_test::CacheFor(*target.model, prompt, 64, *pearl);
  pearl->Generate(prompt, parallel_test::Config(target, 1.0, 64, 5), cache, a);
  pearl->Generate(prompt, parallel_test::Config(target, 1.0, 64, 5), cache, b);
  pearl->Generate(prompt, parallel_test::Config(target, 1.0, 64, 6), cache, c);
  EXPECT_EQ(a.generation.tokens, b.generation.tokens);
  EXPECT_NE(a.generation.tokens, c.generation.tokens);
  parallel_test::ExpectInvariants(a, "T=1");
}

TEST(Pearl, ThreadBudgetsArePerThread) {
  const int before = at::get_num_threads();
  {
    SideThread side(1);
    EXPECT_EQ(side.WorkerThreads(), 1);
    EXPECT_EQ(at::get_num_threads(), before);  // the caller's width is untouched
    {
      ThreadBudget budget(2);
      EXPECT_EQ(at::get_num_threads(), 2);
      EXPECT_EQ(side.WorkerThreads(), 1);  // and the worker's too
    }
    EXPECT_EQ(at::get_num_threads(), before);
  }
  EXPECT_EQ(at::get_num_threads(), before);
}

// At T = 0 the draft LM on the ATen path chains its argmax ids on the model's device and copies
// the chunk once; the chunk and the cached prefix equal the row path's, also after a context that
// diverges from the cache (a rollback).
TEST(Pearl, DraftLmArgmaxChunkOnTheAtenPathMatchesTheRowPath) {
  SetCpuForwardPathOverride(ForwardPath::kAten);
  LoadedTarget aten_model = LoadModel("stories260K-draft", at::kFloat);
  SetCpuForwardPathOverride(ForwardPath::kAuto);
  ASSERT_EQ(aten_model.model->forward_path(), ForwardPath::kAten);
  DraftLm rows(Shared().draft.model), aten(aten_model.model);
  const std::vector<int32_t>& prompt = Shared().prompts[2];
  const SamplingParams greedy = parallel_test::Config(Shared().target, 0.0, 8).sampling;
  rows.Begin(prompt, greedy, 1, 512);
  aten.Begin(prompt, greedy, 1, 512);
  DraftChunk a, b;
  rows.Draft(prompt, 6, false, a);
  aten.Draft(prompt, 6, false, b);
  ASSERT_EQ(a.tokens.size(), 6u);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(rows.cached(), aten.cached());
  std::vector<int32_t> diverged = prompt;  // the first drafted token rejected
  diverged.push_back(a.tokens[0] == 5 ? 6 : 5);
  rows.Draft(diverged, 4, false, a);
  aten.Draft(diverged, 4, false, b);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(rows.cached(), aten.cached());
}

// T > 0: the ATen path's chunk (drawn on the model's device, the distributions copied back in
// one piece) is the row path's from the same seed: tokens, distributions and cached context.
TEST(Pearl, DraftLmSampledChunkOnTheAtenPathMatchesTheRowPath) {
  SetCpuForwardPathOverride(ForwardPath::kAten);
  LoadedTarget aten_model = LoadModel("stories260K-draft", at::kFloat);
  SetCpuForwardPathOverride(ForwardPath::kAuto);
  DraftLm rows(Shared().draft.model), aten(aten_model.model);
  const std::vector<int32_t>& prompt = Shared().prompts[2];
  const SamplingParams sampled = parallel_test::Config(Shared().target, 1.0, 8).sampling;
  for (uint64_t seed : {1u, 2u, 3u}) {
    rows.Begin(prompt, sampled, seed, 512);
    aten.Begin(prompt, sampled, seed, 512);
    DraftChunk a, b;
    std::vector<int32_t> context = prompt;
    for (int chunk = 0; chunk < 3; ++chunk) {
      rows.Draft(context, 5, false, a);
      aten.Draft(context, 5, false, b);
      ASSERT_EQ(a.tokens.size(), 5u);
      EXPECT_EQ(a.tokens, b.tokens) << "seed " << seed << " chunk " << chunk;
      ASSERT_EQ(a.q.size(), b.q.size());
      for (size_t i = 0; i < a.q.size(); ++i) ASSERT_NEAR(a.q[i], b.q[i], 1e-5f) << i;
      EXPECT_EQ(rows.cached(), aten.cached());
      context.insert(context.end(), a.tokens.begin(), a.tokens.begin() + 2);  // two accepted
    }
  }
}

// The stories260K target and draft on the ATen forward path (forced on the CPU), on `device`.
std::pair<LoadedTarget, LoadedTarget> AtenPair(at::Device device = at::kCPU) {
  SetCpuForwardPathOverride(ForwardPath::kAten);
  std::pair<LoadedTarget, LoadedTarget> pair{
      LoadModel("stories260K", at::kFloat, "", device),
      LoadModel("stories260K-draft", at::kFloat, "", device)};
  SetCpuForwardPathOverride(ForwardPath::kAuto);
  return pair;
}

// T = 1 on the ATen path: every step's acceptance (R, then the next chunk's first token or the
// bonus) is one DeviceVerifier walk where the logits are; no [n + 1, V] verify rows come to the
// host; seeded; drafts get accepted. The row path (CPU default) makes no walk.
TEST(Pearl, AtenPathAtTemperatureOneAcceptsOnTheDevice) {
  auto [target, draft] = AtenPair();
  ASSERT_EQ(target.model->forward_path(), ForwardPath::kAten);
  PearlOptions options;
  options.gamma = 3;
  options.target_threads = 1;
  PearlDecoder pearl(*target.model, target.tokenizer.get(), draft.model, options);
  int64_t accepted = 0, rollbacks = 0;
  parallel_test::ExpectOneDeviceWalkPerStep(pearl, pearl, target, "pearl", accepted, rollbacks);
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rollbacks, 0);
  auto rows = MakePearl(3);
  DecodeResult r;
  const auto& prompt = Shared().prompts[0];
  KvCache cache = parallel_test::CacheFor(*Shared().target.model, prompt, 16, *rows);
  rows->Generate(prompt, parallel_test::Config(Shared().target, 1.0, 16), cache, r);
  EXPECT_EQ(rows->device_walks(), 0);
  EXPECT_EQ(rows->verify_row_copies(), 0);
}

// Device-to-host copies of one answer of `decoder` at T = 1 on `model`'s device, less the
// prefill's row and the draft LM's (one [V] row per draft forward after its prefill): what the
// target side copied. Prints the counts.
int64_t TargetSideCopiesAtT1(ParallelDecoder& decoder, LoadedTarget& target, const char* name,
                             DecodeResult& r) {
  const auto& prompt = Shared().prompts[0];
  KvCache cache = target.model->NewCache(1, 512);
  const int64_t before = DeviceToHostCopies();
  decoder.Generate(prompt, parallel_test::Config(target, 1.0, 48, 3), cache, r);
  const int64_t copies = DeviceToHostCopies() - before;
  const int64_t draft_copies = decoder.draft().host_copies();
  std::printf("%s T=1 on %s: %zu steps, %lld copies (%lld draft side)\n", name,
              target.model->device().str().c_str(), r.steps.size(), static_cast<long long>(copies),
              static_cast<long long>(draft_copies));
  return copies - 1 - draft_copies;
}

// On a GPU at T = 1, PEARL and SpecBranch (w/o H-RAD: its features cross on their own) accept
// on the device: the target side copies one small verdict per step (no verify rows).
TEST(ParallelDecoderCuda, SampledStepsCopyOneVerdictPerStep) {
  SPECBED_SKIP_WITHOUT_CUDA();
  auto [target, draft] = AtenPair(at::Device(at::kCUDA, 0));
  PearlOptions options;
  options.target_threads = 1;
  PearlDecoder pearl(*target.model, target.tokenizer.get(), draft.model, options);
  DecodeResult r;
  // Named first: the steps are counted after the answer (argument order is unspecified).
  const int64_t pearl_copies = TargetSideCopiesAtT1(pearl, target, "pearl", r);
  EXPECT_EQ(pearl_copies, static_cast<int64_t>(r.steps.size()));
  EXPECT_EQ(pearl.verify_row_copies(), 0);
  parallel_test::ExpectInvariants(r, "pearl cuda T=1");
  SpecBranchOptions sb;
  sb.hrad = false;
  sb.target_threads = 1;
  SpecBranchDecoder specbranch(*target.model, target.tokenizer.get(), draft.model, nullptr, {}, sb);
  DecodeResult s;
  const int64_t specbranch_copies = TargetSideCopiesAtT1(specbranch, target, "specbranch", s);
  EXPECT_EQ(specbranch_copies, static_cast<int64_t>(s.steps.size()));
  EXPECT_EQ(specbranch.verify_row_copies(), 0);
  EXPECT_GT(specbranch.counters().branches, 0);
  parallel_test::ExpectInvariants(s, "specbranch cuda T=1");
}

// On a GPU at T = 0 a PEARL step brings ids only to the host: the verify rows' argmax (one copy)
// and the drafted chunk (one copy, ParallelDecoder / DraftLm); the answer matches AR on the CPU.
TEST(ParallelDecoderCuda, GreedyStepsCopyIdsOnly) {
  SPECBED_SKIP_WITHOUT_CUDA();
  const at::Device cuda(at::kCUDA, 0);
  LoadedTarget target = LoadModel("stories260K", at::kFloat, "", cuda);
  LoadedTarget draft = LoadModel("stories260K-draft", at::kFloat, "", cuda);
  PearlOptions options;
  options.target_threads = 1;
  PearlDecoder pearl(*target.model, target.tokenizer.get(), draft.model, options);
  const auto& prompt = Shared().prompts[0];
  const GenerationConfig g = parallel_test::Config(Shared().target, 0.0, 64);
  KvCache cpu_cache = Shared().target.model->NewCache(1, 512);
  const GenerationResult ar =
      GenerateAr(*Shared().target.model, Shared().target.tokenizer.get(), prompt, g, cpu_cache);
  KvCache cache = target.model->NewCache(1, 512);
  DecodeResult r;
  const int64_t before = DeviceToHostCopies();
  pearl.Generate(prompt, g, cache, r);
  const int64_t copies = DeviceToHostCopies() - before;
  EXPECT_EQ(r.generation.tokens, ar.tokens);
  // The prefill's row, then per step one verify copy and at most one chunk copy.
  EXPECT_LE(copies, 1 + 2 * static_cast<int64_t>(r.steps.size()));
  std::printf("pearl on %s: %lld steps, %lld device-to-host copies\n", cuda.str().c_str(),
              static_cast<long long>(r.steps.size()), static_cast<long long>(copies));
}

// gamma 0 = auto: the chunk is ceil(c), c = T_target / T_draft of measured one-token forwards.
// The same model on both sides gives c near 1 (checked within [0.2, 5]: a timing check, loose
// enough that contention from a parallel ctest does not fail it in practice); the registry builds
// a PEARL decoder with an auto chunk in [1, 64] that still matches AR.
// On a GPU the draft side queues its work on a stream of its own, and after Wait() that work has
// run (the worker synchronizes its stream before it reports the job done).
TEST(SideThreadCuda, TheWorkerQueuesOnItsOwnStream) {
  SPECBED_SKIP_WITHOUT_CUDA();
  const at::Device cuda(at::kCUDA, 0);
  const auto* impl = c10::impl::getDeviceGuardImpl(at::kCUDA);
  SideThread side(1, cuda);
  std::optional<c10::Stream> worker;
  at::Tensor out;
  side.Start([&] {
    worker = impl->getStream(cuda);
    out = at::ones({1 << 20}, at::TensorOptions().device(cuda)).cumsum(0);
  });
  side.Wait();
  ASSERT_TRUE(worker.has_value());
  EXPECT_NE(*worker, impl->getStream(cuda));
  EXPECT_EQ(out[-1].item<float>(), static_cast<float>(1 << 20));
}

TEST(Pearl, AutoChunkFollowsTheMeasuredSpeedRatio) {
  EXPECT_EQ(ChunkForSpeedRatio(3.2, 64), 4);
  EXPECT_EQ(ChunkForSpeedRatio(4.0, 64), 4);
  EXPECT_EQ(ChunkForSpeedRatio(0.3, 64), 1);
  EXPECT_EQ(ChunkForSpeedRatio(500.0, 64), 64);
  EXPECT_EQ(ChunkForSpeedRatio(std::nan(""), 16), 16);
  const SpeedRatio same =
      MeasureSpeedRatio(*Shared().target.model, *Shared().target.model, 1, 1, 16, 9);
  EXPECT_GT(same.target_ms, 0);
  EXPECT_GT(same.c, 0.2);
  EXPECT_LT(same.c, 5.0);
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context;
  context.target = &Shared().target;
  context.load_model = [](const std::string&) -> LoadedTarget& { return Shared().draft; };
  auto decoder = registry.Build("pearl", context, {{"gamma", 0}, {"drafter", "stories260K-draft"}});
  EXPECT_GE(decoder->MaxDraftNodes(), 1);
  EXPECT_LE(decoder->MaxDraftNodes(), 64);
  parallel_test::ExpectSameAsAr(*decoder, 0.0, 48, "pearl gamma auto");
}

TEST(Pearl, RegisteredWithTraitsAndKnobs) {
  testing_util::ExpectBuiltin(
      "pearl",
      {{"overlaps_verification", true}, {"lossless", true}, {"sampling_verifier", "chain_rs"}},
      "stories260K-twin",
      {{"drafter", "stories260K-twin-draft"}, {"gamma", 4}, {"draft_threads", 1}});
}

}  // namespace
}  // namespace specbed
