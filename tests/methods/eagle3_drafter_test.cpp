// EAGLE-3 drafting end to end on the speculative decoder:
// - the shipped stories260K head (models/stories260K/eagle3, trained by `specbed train eagle3`)
//   reproduces AR token for token at T = 0 in fp32 on every story prompt, with tau > 1;
// - a random head with a reduced draft vocabulary on a tiny random target (vocabulary 4) is
//   lossless at T = 1: the distribution of 3-token outputs over 40000 seeded generations matches
//   the target's exact distribution (chi-square over 64 cells, reject at p < 1e-4: false-failure
//   rate about 1e-4; the seeds are fixed, so the outcome is deterministic), and greedy acceptance
//   (VerifierFault) fails it;
// - the shipped head at T = 1 with a depth-3 tree: the third generated token's distribution
//   matches the target's exact marginal (the token is decided at a tree node's slot in > 1/4 of
//   draws), and greedy acceptance fails the same check;
// - the registry builds `eagle3` with EAGLE's knobs and rejects a head for another vocabulary;
// - the device frontier (Eagle3DeviceFrontier, the head on the ATen path on the CPU) drafts the
//   host path's tree bit for bit at every step of every story prompt (tokens, parents, log-prob
//   bits) with one download and at most one upload per Draft (the host path: one download per
//   layer), and the decode matches AR; it refuses a head on the row loops; three sequences' trees
//   grown together (GrowBatch, different contexts and depths) equal each grown alone, in one head
//   forward per layer, one download and well under the ops of growing them one by one.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/engine/verifier.h"
#include "harness/runner/runner.h"
#include "kernels/engine_counters.h"
#include "methods/eagle3/eagle3_checkpoint.h"
#include "methods/eagle3/eagle3_drafter.h"
#include "methods/eagle3/eagle3_method.h"
#include "methods/method_registry.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/llama_model.h"
#include "models/op_trace.h"
#include "tests/engine/engine_test_util.h"
#include "tests/methods/method_test_util.h"
#include "tests/methods/story_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using testing::HasSubstr;

TEST(Eagle3Drafter, ShippedHeadMatchesArOnEveryStoryPrompt) {
  at::set_num_threads(1);
  testing_util::StoriesMethods s;
  for (const nlohmann::json& knobs :
       {nlohmann::json::object(), nlohmann::json{{"depth", 3}, {"top_k", 4}, {"total_tokens", 9}},
        nlohmann::json{{"depth", 4}, {"top_k", 1}, {"total_tokens", 6}}}) {
    std::unique_ptr<Decoder> decoder = s.registry.Build("eagle3", s.context, knobs);
    testing_util::StoryTotals totals;
    ASSERT_NO_FATAL_FAILURE(testing_util::ExpectStoriesMatchAr(
        s.target, *decoder, knobs.dump(),
        [&](const StepStats& s) {
          EXPECT_LE(s.n_drafted, knobs.value("total_tokens", 60) - 1);
          EXPECT_LE(s.draft_depth, knobs.value("depth", 7) + 1);
        },
        &totals));
    EXPECT_GT(totals.tau(), 1.5) << knobs.dump();
  }
}

// Exact next-token distributions of `model` after `prompt` + each row of `suffixes` (one batched
// forward): float64 [rows, vocab].
at::Tensor NextProbs(LlamaModel& model, const std::vector<int32_t>& prompt,
                     const std::vector<std::vector<int32_t>>& suffixes) {
  const int64_t rows = static_cast<int64_t>(suffixes.size());
  const int64_t len = static_cast<int64_t>(prompt.size() + suffixes[0].size());
  at::Tensor batch = at::empty({rows, len}, at::kLong);
  int64_t* b = batch.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t k = r * len;
    for (int32_t t : prompt) b[k++] = t;
    for (int32_t t : suffixes[r]) b[k++] = t;
  }
  KvCache cache = model.NewCache(rows, len);
  ForwardOptions o;
  o.logits = LogitsMode::kLast;
  const int64_t vocab = model.config().vocab_size;
  return at::softmax(model.Forward(batch, cache, o).logits.reshape({rows, vocab}).to(at::kDouble),
                     1);
}

// The shipped head at T = 1 (tree depth 3, 8 nodes): the distribution of the THIRD generated
// token over 12000 seeded generations matches the target's exact marginal
// sum_{a,b} p(a) p(b | a) p(c | a, b). The first token comes from the prefill and the second is
// the first one a tree verification decides; the third is decided at a tree node when the
// second was an accepted draft (sample-then-follow descends into it), so it depends on the tree's
// attention mask, positions and KV compaction. The exact marginal sums over the (a, b) pairs
// holding all but 2e-5 of the mass (the rest, at most 0.24 expected draws, is spread
// proportionally). Chi-square over the cells with expected count >= 5, the rest pooled; reject at
// p < 1e-4 (false-failure rate about 1e-4, deterministic given the seeds). Negative control:
// greedy acceptance (VerifierFault) fails the same check.
TEST(Eagle3Drafter, ShippedHeadIsLosslessAtTemperatureOneOnTheThirdToken) {
  at::set_num_threads(2);
  testing_util::StoriesMethods s;
  LoadedTarget& target = s.target;
  LlamaModel& model = *target.model;
  const int64_t vocab = model.config().vocab_size;
  const std::vector<int32_t> prompt =
      BuildPromptIds(target, {{"user", "Once upon a time, there was a little dog named"}});
  const int64_t p = static_cast<int64_t>(prompt.size());
  const at::Tensor p1 = NextProbs(model, prompt, {{}}).reshape({-1});
  std::vector<std::vector<int32_t>> firsts(vocab);
  for (int64_t a = 0; a < vocab; ++a) firsts[a] = {static_cast<int32_t>(a)};
  const at::Tensor p2 = NextProbs(model, prompt, firsts);         // [vocab, vocab]
  const at::Tensor joint = (p1.unsqueeze(1) * p2).reshape({-1});  // p(a) p(b | a)
  const at::Tensor order = at::argsort(joint, 0, /*descending=*/true);
  std::vector<std::vector<int32_t>> pairs;
  std::vector<double> pair_mass;
  double covered = 0;
  for (int64_t k = 0; k < order.size(0) && covered < 1.0 - 2e-5; ++k) {
    const int64_t cell = order[k].item<int64_t>();
    pairs.push_back({static_cast<int32_t>(cell / vocab), static_cast<int32_t>(cell % vocab)});
    pair_mass.push_back(joint[cell].item<double>());
    covered += pair_mass.back();
  }
  at::Tensor marginal = at::zeros({vocab}, at::kDouble);
  for (size_t start = 0; start < pairs.size(); start += 2048) {
    const size_t end = std::min(pairs.size(), start + 2048);
    const std::vector<std::vector<int32_t>> chunk(pairs.begin() + start, pairs.begin() + end);
    const at::Tensor w = at::tensor(
        std::vector<double>(pair_mass.begin() + start, pair_mass.begin() + end), at::kDouble);
    marginal += at::matmul(w.unsqueeze(0), NextProbs(model, prompt, chunk)).reshape({-1});
  }
  marginal /= covered;
  const std::vector<double> expected(marginal.data_ptr<double>(),
                                     marginal.data_ptr<double>() + vocab);

  at::set_num_threads(1);  // the batched forwards above use 2; one-token steps are faster on 1
  auto decoder =
      s.registry.Build("eagle3", s.context, {{"depth", 3}, {"top_k", 4}, {"total_tokens", 8}});
  const int kDraws = 12000;
  KvCache cache = model.NewCache(1, p + 4);
  // The chi-square p-value of the third tokens; counts the draws whose second token was an
  // accepted draft token (the third is then decided at that tree node's slot).
  auto third_token_p_value = [&](int draws, int64_t* deep) {
    std::vector<double> counts(vocab, 0);
    for (int i = 0; i < draws; ++i) {
      GenerationConfig g;
      g.sampling.temperature = 1.0;
      g.seed = 5000 + i;
      g.stop.max_new_tokens = 3;
      g.stop.stop_on_eos = false;
      DecodeResult r;
      decoder->Generate(prompt, g, cache, r);
      EXPECT_EQ(r.generation.tokens.size(), 3u);
      if (r.generation.tokens.size() != 3u) return 0.0;
      counts[r.generation.tokens[2]] += 1;
      if (!r.steps.empty() && r.steps[0].n_accepted >= 1) ++*deep;
    }
    double chi2 = 0, pooled_count = 0, pooled_expected = 0;
    int cells = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double e = expected[v] * draws;
      if (e >= 5) {
        chi2 += (counts[v] - e) * (counts[v] - e) / e;
        ++cells;
      } else {
        pooled_count += counts[v];
        pooled_expected += e;
      }
    }
    if (pooled_expected > 0) {
      chi2 += (pooled_count - pooled_expected) * (pooled_count - pooled_expected) / pooled_expected;
      ++cells;
    }
    EXPECT_GT(cells, 5);
    return testing_util::ChiSquareSf(chi2, cells - 1);
  };
  int64_t deep = 0;
  EXPECT_GT(third_token_p_value(kDraws, &deep), 1e-4);
  // The head's drafts are taken often: in this many draws the third token was decided at a tree
  // node's slot, so the tree path matters.
  EXPECT_GT(deep, kDraws / 4);
  {
    ScopedVerifierFault inject(VerifierFault::kGreedyAcceptance);
    int64_t ignored = 0;
    EXPECT_LT(third_token_p_value(kDraws / 4, &ignored), 1e-4);  // 3000 draws suffice
  }
}

// A tiny random target (vocabulary 4, engine_test_util.h) and a random EAGLE-3 head over 3 of
// the 4 tokens (method_test_util.h).
struct TinyPair {
  std::shared_ptr<LlamaModel> target = testing_util::TinyRandomTarget(21, 60.0);
  testing_util::TinyEagle3Head head = testing_util::MakeTinyEagle3Head();
};

TEST(Eagle3Drafter, LosslessAtTemperatureOneWithSampleFollow) {
  at::set_num_threads(1);
  TinyPair pair;
  LlamaModel& target = *pair.target;
  Eagle3DraftOptions o;
  o.depth = 3;
  o.top_k = 2;
  o.nodes = 5;
  auto head = std::make_unique<Eagle3Head>(pair.head.config, pair.head.tensors,
                                           target.weights().tok_embeddings);
  SpeculativeOptions so;
  so.budget = {o.nodes, o.depth};
  so.sampling_rule = VerifyRule::kSampleFollow;
  SpeculativeDecoder decoder(target, nullptr, std::make_unique<Eagle3Drafter>(std::move(head), o),
                             so);
  int64_t accepted = 0;
  EXPECT_GT(testing_util::TinyOutputPValue(target, decoder, {1, 3}, 3, 40000, 1000, &accepted),
            1e-4);
  EXPECT_GT(accepted, testing_util::ScaledDraws(40000) / 4);  // accepted often enough to matter
  // Negative control: greedy acceptance fails the same check.
  ScopedVerifierFault inject(VerifierFault::kGreedyAcceptance);
  int64_t ignored = 0;
  EXPECT_LT(testing_util::TinyFaultPValue(target, decoder, {1, 3}, 3, 40000, 1000, &ignored), 1e-4);
}

TEST(Eagle3Drafter, RegistryKnobsAndHeadChecks) {
  testing_util::StoriesMethods s;
  const MethodInfo& info = s.registry.Info("eagle3");
  EXPECT_TRUE(info.traits.tree);
  EXPECT_TRUE(info.traits.needs_target_hidden);
  EXPECT_EQ(info.traits.sampling_verifier, "sample_follow");
  const nlohmann::json knobs = s.registry.ResolveKnobs("eagle3", {});
  EXPECT_EQ(knobs["depth"], 7);
  EXPECT_EQ(knobs["top_k"], 10);
  EXPECT_EQ(knobs["total_tokens"], 60);
  EXPECT_THROW(s.registry.ResolveKnobs("eagle3", {{"top_k", 0}}), Error);

  // A head for a 4-token vocabulary does not pair with stories260K (vocabulary 512).
  TinyPair pair;
  const std::string dir = testing_util::ScratchDir("eagle3_drafter_wrong_vocab");
  pair.head.config.aux_layer_ids.clear();
  WriteEagle3Checkpoint(dir, pair.head.config, pair.head.tensors);
  try {
    s.registry.Build("eagle3", s.context, {{"head", dir}});
    FAIL() << "expected a vocabulary mismatch";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("vocab_size 4 but the target 'stories260K' has 512"));
  }
  EXPECT_THROW(s.registry.Build("eagle3", s.context, {{"head", dir + "/missing"}}), Error);
}

// Two EAGLE-3 drafters over the same head weights, one growing its tree on the host and one on
// the device. Every Draft runs both and compares their trees; the decoder follows the device's.
// Records the copies each side's Draft made (kernels/engine_counters.h).
class FrontierTwin : public Drafter {
 public:
  FrontierTwin(std::unique_ptr<Eagle3Drafter> host, std::unique_ptr<Eagle3Drafter> device)
      : host_(std::move(host)), device_(std::move(device)) {}

  std::vector<int64_t> TargetHiddenLayers() const override { return host_->TargetHiddenLayers(); }
  void Begin(const DraftBegin& begin) override {
    host_->Begin(begin);
    device_->Begin(begin);
  }
  void Prefill() override {
    host_->Prefill();
    device_->Prefill();
  }
  void Draft(const DraftStep& step, DraftTree& tree) override {
    DraftTree host_tree;
    const EngineCounters before = ReadEngineCounters();
    host_->Draft(step, host_tree);
    const EngineCounters middle = ReadEngineCounters();
    device_->Draft(step, tree);
    const EngineCounters host = middle.Since(before), device = ReadEngineCounters().Since(middle);
    const Eagle3DraftOptions& o = host_->options();
    layers.push_back(
        std::min(std::min(o.depth, step.budget.depth), std::min(o.nodes, step.budget.nodes)));
    host_downloads.push_back(host.d2h);
    device_downloads.push_back(device.d2h);
    device_uploads.push_back(device.h2d);
    const bool same_logp = host_tree.draft_logp.size() == tree.draft_logp.size() &&
                           std::memcmp(host_tree.draft_logp.data(), tree.draft_logp.data(),
                                       tree.draft_logp.size() * sizeof(float)) == 0;
    differing += host_tree.token != tree.token || host_tree.parent != tree.parent || !same_logp;
    ++steps;
  }
  void Accept(const DraftTree& tree, const Verdict& verdict) override {
    host_->Accept(tree, verdict);
    device_->Accept(tree, verdict);
  }

  int64_t steps = 0, differing = 0;
  // Per step: the tree layers the budget allowed and each side's copies.
  std::vector<int64_t> layers, host_downloads, device_downloads, device_uploads;

 private:
  std::unique_ptr<Eagle3Drafter> host_, device_;
};

// The shipped stories260K head placed as `placement`.
std::unique_ptr<Eagle3Drafter> ShippedEagle3(const LoadedTarget& target, Eagle3DraftOptions o,
                                             const HeadPlacement& placement) {
  const Eagle3Checkpoint ckpt = LoadEagle3HeadFor("stories260K-eagle3", target);
  return std::make_unique<Eagle3Drafter>(
      std::make_unique<Eagle3Head>(ckpt.config, ckpt.tensors,
                                   target.model->weights().tok_embeddings, placement),
      o);
}

// The ATen forward path on the CPU while alive.
struct AtenPathOnCpu {
  AtenPathOnCpu() { SetCpuForwardPathOverride(ForwardPath::kAten); }
  ~AtenPathOnCpu() { SetCpuForwardPathOverride(ForwardPath::kAuto); }
};

TEST(Eagle3DeviceFrontier, DraftsTheHostTreeBitForBitWithOneDownloadPerStep) {
  at::set_num_threads(1);
  const AtenPathOnCpu aten;
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  ASSERT_EQ(target.model->forward_path(), ForwardPath::kAten);
  const HeadPlacement placement = TargetHeadPlacement(*target.model);
  ASSERT_TRUE(placement.aten);
  for (const auto& [depth, top_k, nodes] :
       std::vector<std::array<int64_t, 3>>{{8, 10, 59}, {4, 4, 8}, {5, 1, 5}, {3, 3, 30}}) {
    const std::string what = "depth " + std::to_string(depth) + ", top_k " + std::to_string(top_k) +
                             ", nodes " + std::to_string(nodes);
    Eagle3DraftOptions o;
    o.depth = depth;
    o.top_k = top_k;
    o.nodes = nodes;
    o.frontier = Eagle3DraftOptions::Frontier::kHost;
    std::unique_ptr<Eagle3Drafter> host = ShippedEagle3(target, o, placement);
    o.frontier = Eagle3DraftOptions::Frontier::kDevice;
    auto twin =
        std::make_unique<FrontierTwin>(std::move(host), ShippedEagle3(target, o, placement));
    FrontierTwin& seen = *twin;
    SpeculativeOptions options;
    options.budget.nodes = nodes;
    options.budget.depth = depth;
    options.sampling_rule = VerifyRule::kSampleFollow;
    SpeculativeDecoder decoder(*target.model, target.tokenizer.get(), std::move(twin), options);
    testing_util::StoryTotals totals;
    ASSERT_NO_FATAL_FAILURE(testing_util::ExpectStoriesMatchAr(
        target, decoder, what, [](const StepStats&) {}, &totals));
    EXPECT_GT(totals.accepted, 0) << what;
    EXPECT_GT(seen.steps, 100) << what;
    EXPECT_EQ(seen.differing, 0) << what << ": steps whose device tree differs from the host's";
    for (int64_t i = 0; i < seen.steps; ++i) {
      ASSERT_EQ(seen.device_downloads[i], 1) << what << ", step " << i;
      ASSERT_LE(seen.device_uploads[i], 1) << what << ", step " << i;
      ASSERT_EQ(seen.host_downloads[i], seen.layers[i]) << what << ", step " << i;
    }
  }
}

// Three sequences' trees grown together (contexts of 5, 9 and 3 rows; 3, 4 and 2 tree layers of
// width 3) equal each tree grown alone, token for token: one head forward per tree layer for the
// whole batch (3, for the deepest tree), one download for all of them, and well under the
// launching ops of growing them one by one.
TEST(Eagle3DeviceFrontier, GrowBatchGrowsEveryTreeAsGrowDoesInOneForwardPerLayer) {
  at::set_num_threads(1);
  Eagle3Config c;
  testing_util::SetTinyHeadShape(c);
  c.vocab_size = c.draft_vocab_size = 64;
  HeadPlacement aten;
  aten.aten = true;
  at::manual_seed(9);
  const auto weights = std::make_shared<const Eagle3Weights>(c, RandomEagle3Tensors(c, 9),
                                                             at::randn({64, 16}), aten);
  const std::vector<int64_t> contexts = {5, 9, 3}, layers = {3, 4, 2};
  const int64_t k = 3;
  std::vector<std::unique_ptr<Eagle3Head>> heads[2];
  std::vector<Eagle3HeadOutput> outs[2] = {std::vector<Eagle3HeadOutput>(3),
                                           std::vector<Eagle3HeadOutput>(3)};
  std::vector<Eagle3DeviceFrontier> frontiers[2] = {std::vector<Eagle3DeviceFrontier>(3),
                                                    std::vector<Eagle3DeviceFrontier>(3)};
  std::vector<Eagle3DeviceFrontier::Job> jobs[2];
  for (size_t i = 0; i < 3; ++i) {
    const at::Tensor features = at::randn({contexts[i], c.fc_in_dim()});
    std::vector<int32_t> tokens;
    for (int64_t t = 0; t < contexts[i]; ++t)
      tokens.push_back(static_cast<int32_t>(7 * t + i) % 64);
    for (int side = 0; side < 2; ++side) {
      heads[side].push_back(std::make_unique<Eagle3Head>(weights));
      heads[side][i]->ResetCache(64);
      heads[side][i]->Forward(features, tokens.data(), nullptr, contexts[i], nullptr,
                              outs[side][i]);
      const int64_t last = contexts[i] - 1;
      jobs[side].push_back({&frontiers[side][i], heads[side][i].get(),
                            outs[side][i].hidden.narrow(0, last, 1).clone(),
                            outs[side][i].logits.narrow(0, last, 1).clone(), contexts[i], layers[i],
                            k, &outs[side][i]});
    }
  }
  const int64_t forwards = Eagle3HeadForwards();
  const EngineCounters before = ReadEngineCounters();
  OpTrace together;
  Eagle3DeviceFrontier::GrowBatch(jobs[0]);
  together.Stop();
  EXPECT_EQ(Eagle3HeadForwards() - forwards, 3);
  EXPECT_EQ(ReadEngineCounters().Since(before).d2h, 1);
  OpTrace alone_trace;
  for (size_t i = 0; i < 3; ++i) {
    const Eagle3DeviceFrontier::Job& alone = jobs[1][i];
    frontiers[1][i].Grow(*alone.head, alone.root_hidden, alone.root_logits, alone.context_len,
                         alone.layers, k, *alone.out);
  }
  alone_trace.Stop();
  const int64_t ops_together = CountOps(together.ops()).launching;
  const int64_t ops_alone = CountOps(alone_trace.ops()).launching;
  // The beam, gathers, top-k and every projection once a layer for the batch; attention and
  // the cache writes stay per sequence (391 against 692 launching ops here).
  EXPECT_LT(ops_together, 0.7 * ops_alone)
      << "together " << ops_together << ", alone " << ops_alone;
  for (size_t i = 0; i < 3; ++i) {
    const Eagle3DeviceFrontier &a = frontiers[0][i], &b = frontiers[1][i];
    ASSERT_EQ(a.size(), k + (layers[i] - 1) * k * k);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(heads[0][i]->cache_length(), contexts[i] + (layers[i] - 1) * k);
    for (int64_t n = 0; n < a.size(); ++n) {
      ASSERT_EQ(a.tokens()[n], b.tokens()[n]) << "sequence " << i << ", candidate " << n;
      ASSERT_EQ(a.parents()[n], b.parents()[n]) << "sequence " << i << ", candidate " << n;
      EXPECT_NEAR(a.scores()[n], b.scores()[n], 1e-4) << "sequence " << i << ", candidate " << n;
    }
  }
}

TEST(Eagle3DeviceFrontier, RefusesAHeadOnTheRowLoops) {
  at::set_num_threads(1);
  testing_util::StoriesMethods s;
  Eagle3DraftOptions o;
  o.frontier = Eagle3DraftOptions::Frontier::kDevice;
  SpeculativeOptions options;
  options.budget.nodes = o.nodes;
  options.budget.depth = o.depth;
  SpeculativeDecoder decoder(*s.target.model, s.target.tokenizer.get(),
                             ShippedEagle3(s.target, o, HeadPlacement{}), options);
  const auto prompts = LoadDataset("stories", {});
  try {
    testing_util::RunStoryPrompt(s.target, decoder, prompts[0], {8, 0, 0});
    ADD_FAILURE() << "the device frontier ran a row-loop head";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("needs the head on the ATen path"));
  }
}

}  // namespace
}  // namespace specbed
