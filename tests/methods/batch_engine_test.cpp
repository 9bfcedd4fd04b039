// The batch engine (harness/engine/batch_engine.h) with every registered method on stories260K
// (its shipped drafters), row kernels, float32: at concurrency B = 2, 4 and 8 (continuous
// batching over the 32 story prompts) every answer is token-identical to the method's batch-1
// decode, at T = 0 and (B = 4) at T = 1 with the same seeds, so the batch-1 chi-square tests of
// each rule hold for its batched answers sample for sample (online adapters: T = 0 only, below); a
// method that runs its own loop (PEARL, SpecBranch) is refused with a clear error and has
// supports_batch = false, every other has it; a KV cache mixed up between sequences (the negative
// control) breaks the identity; the K schedules: K = 0 runs the plain AR step and equals AR,
// by_batch switches at its threshold, split spends its token budget; SpS drafts the whole batch in
// one draft forward per chain position and Medusa in one head pass a step, DFlash and DDTree in
// one head forward a step and EAGLE-3 in one head forward per tree layer on the ATen path, with
// the answers (and Medusa's trees, the others' draft sizes) of drafting alone.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <deque>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/engine/batch_engine.h"
#include "harness/runner/runner.h"
#include "methods/dflash/dflash_head.h"
#include "methods/eagle3/eagle3_head.h"
#include "methods/medusa/medusa_drafter.h"
#include "methods/method_registry.h"

namespace specbed {
namespace {

constexpr int64_t kTokens = 32;

struct Fixture {
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  std::map<std::string, LoadedTarget> loaded;
  MethodContext context;
  MethodRegistry registry;
  std::vector<std::vector<int32_t>> ids;

  Fixture() {
    at::set_num_threads(1);
    context.target = &target;
    context.dtype = at::kFloat;
    context.load_model = [this](const std::string& name) -> LoadedTarget& {
      auto it = loaded.find(name);
      if (it == loaded.end()) it = loaded.emplace(name, LoadModel(name, at::kFloat)).first;
      return it->second;
    };
    RegisterBuiltinMethods(registry);
    for (const Prompt& p : LoadDataset("stories", {})) {
      ids.push_back(BuildPromptIds(target, {{"user", p.turns[0]}}));
    }
  }
  GenerationConfig Config(size_t prompt, double temperature) const {
    GenerationConfig g;
    // 32, 27, 22 tokens: requests finish at different steps, so a closed-loop batch drains and
    // refills at uneven boundaries (and a schedule's K changes mid-answer at the tail).
    g.stop = StopConfigFor(target, kTokens - 5 * static_cast<int64_t>(prompt % 3), {});
    g.sampling.temperature = temperature;
    g.seed = PromptSeed(7, static_cast<int64_t>(prompt), 0);
    return g;
  }
  std::unique_ptr<Decoder> Build(const std::string& name) {
    return registry.Build(name, context, nlohmann::json::object());
  }
};

Fixture& F() {
  static Fixture* f = new Fixture();
  return *f;
}

// Every prompt decoded alone (batch 1) with one decoder of `name`.
std::vector<std::vector<int32_t>> BatchOne(const std::string& name, double temperature) {
  Fixture& f = F();
  std::unique_ptr<Decoder> decoder = f.Build(name);
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < f.ids.size(); ++i) {
    KvCache cache = f.target.model->NewCache(1, 512);
    DecodeResult r;
    decoder->Generate(f.ids[i], f.Config(i, temperature), cache, r);
    out.push_back(r.generation.tokens);
  }
  return out;
}

// Every prompt through a BatchEngine of `max_running` slots, closed loop (a finished request's
// slot takes the next prompt at the next step boundary); `steps` counts the batch steps.
std::vector<std::vector<int32_t>> Batched(const std::string& name, double temperature,
                                          int64_t max_running, const nlohmann::json& schedule,
                                          int64_t* steps = nullptr,
                                          std::vector<BatchStepReport>* reports = nullptr,
                                          bool batch_drafts = true) {
  Fixture& f = F();
  BatchOptions options;
  options.max_running = max_running;
  options.batch_drafts = batch_drafts;
  options.cache_len = 512;
  options.method_nodes = f.Build(name)->MaxDraftNodes();
  BatchEngine engine(
      *f.target.model, [&] { return f.Build(name); }, options,
      ParseDraftSchedule(schedule, "test"));
  std::vector<std::vector<int32_t>> out(f.ids.size());
  size_t next = 0, done = 0;
  auto collect = [&] {
    for (FinishedRequest& r : engine.TakeFinished()) {
      out[r.id] = r.result.generation.tokens;
      ++done;
    }
  };
  while (done < f.ids.size()) {
    while (next < f.ids.size() && engine.free_slots() > 0) {
      engine.Admit(static_cast<int64_t>(next), f.ids[next], f.Config(next, temperature));
      ++next;
    }
    collect();
    if (engine.running() == 0) continue;
    BatchStepReport report = engine.Step();
    if (steps) ++*steps;
    if (reports) reports->push_back(report);
    collect();
  }
  return out;
}

const nlohmann::json kFixed = {{"policy", "fixed"}};

// Draft tokens accepted over a run's steps.
double Accepted(const std::vector<BatchStepReport>& steps) {
  double n = 0;
  for (const BatchStepReport& r : steps) n += static_cast<double>(r.n_accepted);
  return n;
}

void ExpectIdentical(const std::vector<std::vector<int32_t>>& a,
                     const std::vector<std::vector<int32_t>>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << what << ", prompt " << i;
}

TEST(BatchEngine, EveryBatchableMethodIsTokenIdenticalToBatchOneAtT0) {
  Fixture& f = F();
  for (const std::string& name : f.registry.Names()) {
    SCOPED_TRACE(name);
    const MethodTraits& traits = f.registry.Info(name).traits;
    std::unique_ptr<Decoder> probe = f.Build(name);
    EXPECT_EQ(traits.supports_batch, probe->stepper() != nullptr)
        << "supports_batch must say whether the decoder can share a batch";
    if (!traits.supports_batch) {
      EXPECT_THROW(Batched(name, 0, 2, kFixed), Error);
      continue;
    }
    const auto alone = BatchOne(name, 0);
    for (int64_t b : {2, 4, 8})
      ExpectIdentical(Batched(name, 0, b, kFixed), alone, "B=" + std::to_string(b));
    if (HasFatalFailure()) return;
  }
}

TEST(BatchEngine, EveryBatchableMethodIsTokenIdenticalToBatchOneAtT1) {
  Fixture& f = F();
  for (const std::string& name : f.registry.Names()) {
    SCOPED_TRACE(name);
    const MethodTraits& traits = f.registry.Info(name).traits;
    // An online adapter (OSD) updates its slot's drafter after each request: a batch changes
    // which requests a drafter has learned from when it drafts, so its drafts (and the draws that
    // follow them) differ from batch 1; its answers at T = 0 are identical (above).
    if (!traits.supports_batch || traits.trains_online) continue;
    ExpectIdentical(Batched(name, 1.0, 4, kFixed), BatchOne(name, 1.0), "B=4, T=1");
  }
}

// SpS's drafts of a step are made together (Drafter::DraftBatch): one draft-model forward per
// chain position for the whole batch, not one per sequence, with the answers (T = 1: sampled
// chains, per-request seeds) of every sequence drafting alone.
TEST(BatchEngine, SpsDraftsTheWholeBatchInOneForwardPerPosition) {
  Fixture& f = F();
  f.Build("sps");  // loads its draft model
  auto draft_forwards = [&] {
    int64_t n = 0;
    for (const auto& [name, loaded] : f.loaded) n += loaded.model->forward_calls();
    return n;
  };
  int64_t steps_together = 0, steps_alone = 0;
  int64_t n0 = draft_forwards();
  const auto together = Batched("sps", 1.0, 8, kFixed, &steps_together, nullptr, true);
  const int64_t n_together = draft_forwards() - n0;
  n0 = draft_forwards();
  const auto alone = Batched("sps", 1.0, 8, kFixed, &steps_alone, nullptr, false);
  const int64_t n_alone = draft_forwards() - n0;
  ExpectIdentical(together, alone, "drafts made together vs alone");
  EXPECT_EQ(steps_together, steps_alone);
  // Together: at most gamma (4) forwards a step plus each request's prompt prefill; alone: gamma
  // per running sequence a step.
  const int64_t requests = static_cast<int64_t>(f.ids.size());
  EXPECT_LE(n_together, 4 * steps_together + requests);
  EXPECT_GT(n_alone, 3 * n_together) << "together " << n_together << ", alone " << n_alone;
}

// Medusa's drafts of a step are made together beside the row-kernel target: one pass of the heads
// over every drafting sequence's hidden state, not one per sequence, with the trees of drafting
// alone (every step drafts and accepts as many tokens; the answers are equal), at T = 0 and T = 1.
TEST(BatchEngine, MedusaDraftsTheWholeBatchInOneHeadPass) {
  for (double temperature : {0.0, 1.0}) {
    SCOPED_TRACE(temperature);
    int64_t steps_together = 0, steps_alone = 0;
    std::vector<BatchStepReport> together_steps, alone_steps;
    int64_t p0 = MedusaHeadPasses();
    const auto together =
        Batched("medusa", temperature, 8, kFixed, &steps_together, &together_steps, true);
    const int64_t passes_together = MedusaHeadPasses() - p0;
    p0 = MedusaHeadPasses();
    const auto alone = Batched("medusa", temperature, 8, kFixed, &steps_alone, &alone_steps, false);
    const int64_t passes_alone = MedusaHeadPasses() - p0;
    ExpectIdentical(together, alone, "drafts made together vs alone");
    ASSERT_EQ(together_steps.size(), alone_steps.size());
    for (size_t i = 0; i < together_steps.size(); ++i) {
      EXPECT_EQ(together_steps[i].n_drafted, alone_steps[i].n_drafted) << "step " << i;
      EXPECT_EQ(together_steps[i].n_accepted, alone_steps[i].n_accepted) << "step " << i;
    }
    EXPECT_LE(passes_together, steps_together);
    EXPECT_GT(passes_alone, 3 * passes_together)
        << "together " << passes_together << ", alone " << passes_alone;
  }
}

// DFlash's and DDTree's drafts of a step are made together on the ATen path (the GPU's): one
// forward of the shared head for every drafting sequence's block (DflashHead::ForwardBatch), with
// the answers and draft sizes of drafting alone; on the row loops each sequence drafts alone (its
// block GEMMs are its own calls either way). AtenPath.BatchIdentityAtT0 runs it on the ATen path.
TEST(BatchEngine, DflashFamilyDraftsTheWholeBatchInOneHeadForwardOnTheAtenPath) {
  const bool aten = F().target.model->forward_path() == ForwardPath::kAten;
  for (const char* name : {"dflash", "ddtree"}) {
    SCOPED_TRACE(name);
    int64_t steps_together = 0, steps_alone = 0;
    std::vector<BatchStepReport> together_steps, alone_steps;
    int64_t f0 = DflashHeadForwards();
    const auto together = Batched(name, 0, 8, kFixed, &steps_together, &together_steps, true);
    const int64_t forwards_together = DflashHeadForwards() - f0;
    f0 = DflashHeadForwards();
    const auto alone = Batched(name, 0, 8, kFixed, &steps_alone, &alone_steps, false);
    const int64_t forwards_alone = DflashHeadForwards() - f0;
    ExpectIdentical(together, alone, "drafts made together vs alone");
    ASSERT_EQ(together_steps.size(), alone_steps.size());
    for (size_t i = 0; i < together_steps.size(); ++i) {
      EXPECT_EQ(together_steps[i].n_drafted, alone_steps[i].n_drafted) << "step " << i;
    }
    EXPECT_GE(Accepted(together_steps), 0.97 * Accepted(alone_steps));  // as EAGLE-3's, below
    if (aten) {
      EXPECT_LE(forwards_together, steps_together);
      EXPECT_GT(forwards_alone, 3 * forwards_together)
          << "together " << forwards_together << ", alone " << forwards_alone;
    } else {
      EXPECT_EQ(forwards_together, forwards_alone);
    }
  }
}

// EAGLE-3's drafts of a step are made together on the ATen path: every sequence's queued context
// rows in one head forward, then its trees grown in lockstep on the device frontier, one head
// forward per tree layer for the whole batch (Eagle3DeviceFrontier::GrowBatch), with the answers
// and draft sizes of drafting alone; on the row loops each sequence drafts alone.
// AtenPath.BatchIdentityAtT0 runs it on the ATen path.
TEST(BatchEngine, Eagle3DraftsTheWholeBatchOneHeadForwardPerTreeLayerOnTheAtenPath) {
  const bool aten = F().target.model->forward_path() == ForwardPath::kAten;
  int64_t steps_together = 0, steps_alone = 0;
  std::vector<BatchStepReport> together_steps, alone_steps;
  int64_t f0 = Eagle3HeadForwards();
  const auto together = Batched("eagle3", 0, 8, kFixed, &steps_together, &together_steps, true);
  const int64_t forwards_together = Eagle3HeadForwards() - f0;
  f0 = Eagle3HeadForwards();
  const auto alone = Batched("eagle3", 0, 8, kFixed, &steps_alone, &alone_steps, false);
  const int64_t forwards_alone = Eagle3HeadForwards() - f0;
  ExpectIdentical(together, alone, "drafts made together vs alone");
  ASSERT_EQ(together_steps.size(), alone_steps.size());
  for (size_t i = 0; i < together_steps.size(); ++i) {
    EXPECT_EQ(together_steps[i].n_drafted, alone_steps[i].n_drafted) << "step " << i;
  }
  // The batch's head rows are within rounding of each sequence's own, so near-ties aside the
  // trees and their acceptance are the same (a cache mixed up between sequences drafts blind).
  EXPECT_GE(Accepted(together_steps), 0.97 * Accepted(alone_steps));
  if (aten) {
    // A step: one context forward and depth (7) tree layers; a request's prompt: one more.
    EXPECT_LE(forwards_together, 8 * steps_together + static_cast<int64_t>(F().ids.size()));
    EXPECT_GT(forwards_alone, 3 * forwards_together)
        << "together " << forwards_together << ", alone " << forwards_alone;
  } else {
    EXPECT_EQ(forwards_together, forwards_alone);
  }
}

// The negative control: with the sequences' caches swapped between two slots after a step (the
// bug class "a cache row mixed up between sequences"), answers differ from batch 1.
TEST(BatchEngine, ACacheMixedUpBetweenSequencesBreaksTheIdentity) {
  const auto alone = BatchOne("ar", 0);
  SetBatchFaultForTesting(BatchFault::kSwapCaches);
  const auto mixed = Batched("ar", 0, 4, kFixed);
  SetBatchFaultForTesting(BatchFault::kNone);
  size_t differ = 0;
  for (size_t i = 0; i < alone.size(); ++i) differ += mixed[i] != alone[i] ? 1 : 0;
  EXPECT_GE(differ, alone.size() / 4) << "the identity test above would fail";
}

TEST(BatchEngine, KZeroRunsThePlainArStepAndEqualsAr) {
  const auto ar = BatchOne("ar", 0);
  std::vector<BatchStepReport> reports;
  const auto off = Batched("eagle3", 0, 4, {{"policy", "by_batch"}, {"k_by_batch", {{"1", 4}}}},
                           nullptr, &reports);
  ExpectIdentical(off, ar, "eagle3 with K = 0 above batch 1");
  int64_t at_four = 0;
  for (const BatchStepReport& r : reports) {
    if (r.batch_size > 1) {
      EXPECT_EQ(r.k_chosen, 0);
      EXPECT_EQ(r.n_drafted, 0);
      EXPECT_EQ(r.n_verify_tokens, r.batch_size) << "one row per sequence";
      ++at_four;
    }
  }
  EXPECT_GT(at_four, 0);
}

// Every drafter under a schedule that turns drafting off above batch 2 (K = 0: no Draft call,
// its Accepts deferred) and back on as the batch drains: its state follows, answers stay AR's.
TEST(BatchEngine, EveryBatchableMethodSurvivesKZeroStepsAndResumesDrafting) {
  Fixture& f = F();
  const auto ar = BatchOne("ar", 0);
  const nlohmann::json off_above_two = {{"policy", "by_batch"}, {"k_by_batch", {{"2", -1}}}};
  for (const std::string& name : f.registry.Names()) {
    SCOPED_TRACE(name);
    if (!f.registry.Info(name).traits.supports_batch) continue;
    std::cerr << "[ METHOD   ] " << name << std::endl;  // names the method if the process dies
    std::vector<BatchStepReport> reports;
    ExpectIdentical(Batched(name, 0, 4, off_above_two, nullptr, &reports), ar, "K = 0 above 2");
    int64_t off = 0, drafted = 0;
    for (const BatchStepReport& r : reports) {
      off += r.batch_size > 2 ? 1 : 0;
      drafted += r.batch_size <= 2 ? r.n_drafted : 0;
    }
    EXPECT_GT(off, 0);
    if (f.registry.Info(name).traits.speculative) EXPECT_GT(drafted, 0) << "drafting resumed";
  }
}

TEST(BatchEngine, ByBatchScheduleSwitchesAtItsThreshold) {
  std::vector<BatchStepReport> reports;
  Batched("sps", 0, 4, {{"policy", "by_batch"}, {"k_by_batch", {{"2", 3}, {"4", 1}}}}, nullptr,
          &reports);
  for (const BatchStepReport& r : reports) {
    const int64_t want = r.batch_size <= 2 ? 3 : 1;
    EXPECT_EQ(r.k_chosen, want) << "batch " << r.batch_size;
    EXPECT_LE(r.n_drafted, want * r.batch_size);
  }
}

TEST(BatchEngine, SplitScheduleSpendsItsTokenBudgetAcrossTheBatch) {
  std::vector<BatchStepReport> reports;
  const auto split = Batched("sps", 0, 4, {{"policy", "split"}, {"tokens", 6}}, nullptr, &reports);
  ExpectIdentical(split, BatchOne("ar", 0), "split is lossless at T = 0");
  int64_t full = 0;
  for (const BatchStepReport& r : reports) {
    EXPECT_LE(r.n_drafted, 6);
    full += r.batch_size == 4 && r.n_drafted == 6 ? 1 : 0;
  }
  EXPECT_GT(full, 0) << "a full batch gets the whole budget";
}

TEST(BatchEngine, BadSchedulesNameWhatWasExpected) {
  EXPECT_THROW(ParseDraftSchedule({{"policy", "adaptive"}}, "serve.json"), Error);
  EXPECT_THROW(ParseDraftSchedule({{"policy", "by_batch"}}, "serve.json"), Error);
  EXPECT_THROW(ParseDraftSchedule({{"policy", "by_batch"}, {"k_by_batch", {{"0", 2}}}}, "x"),
               Error);
  EXPECT_THROW(ParseDraftSchedule({{"policy", "split"}, {"tokens", -1}}, "x"), Error);
  EXPECT_THROW(ParseDraftSchedule({{"policy", "fixed"}, {"k", 2}}, "x"), Error);
  try {
    ParseDraftSchedule({{"policy", "by_batch"}, {"k_by_batch", {{"four", 2}}}}, "serve.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("serve.json: k_by_batch key \"four\""), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace specbed
