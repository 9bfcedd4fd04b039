// EAGLE-3 drafting end to end on the speculative decoder:
// - the shipped stories260K head (models/stories260K/eagle3, trained by `specbed train eagle3`)
//   reproduces AR token for token at T = 0 in fp32 on every story prompt, with tau > 1;
// - a random head with a reduced draft vocabulary on a tiny random target (vocabulary 4) is
//   lossless at T = 1: the distribution of 3-token outputs over 40000 seeded generations matches
//   the target's exact distribution (chi-square over 64 cells, reject at p < 1e-4: false-failure
//   rate about 1e-4; the seeds are fixed, so the outcome is deterministic);
// - the registry builds `eagle3` with EAGLE's knobs and rejects a head for another vocabulary.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>

#include "datasets/dataset.h"
#include "harness/base/error.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/runner/runner.h"
#include "methods/eagle3/eagle3_checkpoint.h"
#include "methods/eagle3/eagle3_drafter.h"
#include "methods/eagle3/eagle3_method.h"
#include "methods/method_registry.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "tests/engine/engine_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using testing::HasSubstr;

MethodContext ContextFor(LoadedTarget& target) {
  MethodContext c;
  c.target = &target;
  c.dtype = at::kFloat;
  c.load_model = [](const std::string& name) -> LoadedTarget& {
    static std::map<std::string, LoadedTarget> cache;
    auto it = cache.find(name);
    if (it == cache.end()) it = cache.emplace(name, LoadModel(name, at::kFloat)).first;
    return it->second;
  };
  return c;
}

TEST(Eagle3Drafter, ShippedHeadMatchesArOnEveryStoryPrompt) {
  at::set_num_threads(1);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = ContextFor(target);
  for (const nlohmann::json& knobs :
       {nlohmann::json::object(), nlohmann::json{{"depth", 3}, {"top_k", 4}, {"total_tokens", 9}},
        nlohmann::json{{"depth", 4}, {"top_k", 1}, {"total_tokens", 6}}}) {
    std::unique_ptr<Decoder> decoder = registry.Build("eagle3", context, knobs);
    int64_t steps = 0, emitted = 0;
    const auto prompts = LoadDataset("stories", {});
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::vector<int32_t> ids = BuildPromptIds(target, {{"user", prompts[i].turns[0]}});
      GenerationConfig g;
      g.stop = StopConfigFor(target, 96, {});
      g.seed = i;
      KvCache cache = target.model->NewCache(1, static_cast<int64_t>(ids.size()) + 97);
      const GenerationResult ar = GenerateAr(*target.model, target.tokenizer.get(), ids, g, cache);
      DecodeResult spec;
      decoder->Generate(ids, g, cache, spec);
      ASSERT_EQ(spec.generation.tokens, ar.tokens) << knobs.dump() << " prompt " << i;
      EXPECT_EQ(spec.generation.stop_reason, ar.stop_reason);
      int64_t e = 0;
      for (const StepStats& s : spec.steps) {
        EXPECT_LE(s.n_drafted, knobs.value("total_tokens", 60) - 1);
        EXPECT_LE(s.draft_depth, knobs.value("depth", 7) + 1);
        e += s.n_emitted;
      }
      EXPECT_EQ(e, static_cast<int64_t>(ar.tokens.size()) - 1);
      steps += static_cast<int64_t>(spec.steps.size());
      emitted += e;
    }
    const double tau = static_cast<double>(emitted) / steps;
    EXPECT_GT(tau, 1.5) << knobs.dump();
  }
}

// The shipped head at T = 1: the distribution of the second generated token (the first one
// decided by tree verification) over 12000 seeded generations matches the target's exact
// marginal sum_a p(a) p(b | a) (chi-square over the cells with expected count >= 5, the rest
// pooled; reject at p < 1e-4: false-failure rate about 1e-4, deterministic given the seeds).
TEST(Eagle3Drafter, ShippedHeadIsLosslessAtTemperatureOneOnTheFirstVerifiedToken) {
  at::set_num_threads(1);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  LlamaModel& model = *target.model;
  const int64_t vocab = model.config().vocab_size;
  const std::vector<int32_t> prompt =
      BuildPromptIds(target, {{"user", "Once upon a time, there was a little dog named"}});
  const int64_t p = static_cast<int64_t>(prompt.size());
  // Exact marginal of the second token.
  at::Tensor p1;
  {
    KvCache cache = model.NewCache(1, p);
    p1 = at::softmax(model.Forward(testing_util::Ids(prompt), cache).logits.reshape({-1}), 0);
  }
  at::Tensor batch = at::empty({vocab, p + 1}, at::kLong);
  for (int64_t a = 0; a < vocab; ++a) {
    for (int64_t j = 0; j < p; ++j) batch[a][j] = prompt[j];
    batch[a][p] = a;
  }
  KvCache batch_cache = model.NewCache(vocab, p + 1);
  const at::Tensor p2 =
      at::softmax(model.Forward(batch, batch_cache).logits.reshape({vocab, vocab}), 1);
  const at::Tensor marginal = at::matmul(p1.unsqueeze(0), p2).reshape({-1});

  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = ContextFor(target);
  auto decoder =
      registry.Build("eagle3", context, {{"depth", 3}, {"top_k", 4}, {"total_tokens", 8}});
  const int kDraws = 12000;
  std::vector<double> counts(vocab, 0);
  KvCache cache = model.NewCache(1, p + 3);
  int64_t accepted = 0;
  for (int i = 0; i < kDraws; ++i) {
    GenerationConfig g;
    g.sampling.temperature = 1.0;
    g.seed = 5000 + i;
    g.stop.max_new_tokens = 2;
    g.stop.stop_on_eos = false;
    DecodeResult r;
    decoder->Generate(prompt, g, cache, r);
    ASSERT_EQ(r.generation.tokens.size(), 2u);
    counts[r.generation.tokens[1]] += 1;
    for (const StepStats& s : r.steps) accepted += s.n_accepted;
  }
  double chi2 = 0, pooled_count = 0, pooled_expected = 0;
  int cells = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const double e = marginal[v].item<double>() * kDraws;
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
  ASSERT_GT(cells, 5);
  EXPECT_GT(testing_util::ChiSquareSf(chi2, cells - 1), 1e-4)
      << "chi2 " << chi2 << " cells " << cells;
  EXPECT_GT(accepted, kDraws / 3);  // the head's drafts are taken often: the tree path matters
}

// A tiny random target (vocabulary 4) and a random EAGLE-3 head over 3 of the 4 tokens.
struct TinyPair {
  LlamaConfig target_config;
  std::shared_ptr<LlamaModel> target;
  Eagle3Config head_config;
  std::map<std::string, at::Tensor> head_tensors;
};

TinyPair MakeTinyPair() {
  TinyPair p;
  LlamaConfig& c = p.target_config;
  c.architecture = "LlamaForCausalLM";
  c.dim = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.hidden_dim = 32;
  c.vocab_size = 4;
  c.max_seq_len = 32;
  c.tie_embeddings = false;
  c.Validate("tiny target");
  LlamaWeights w = RandomLlamaWeights(c, 21);
  // Sharper next-token distributions than the 0.02 init gives.
  w.lm_head = w.lm_head * 60;
  p.target = std::make_shared<LlamaModel>(c, w);
  Eagle3Config& h = p.head_config;
  h.hidden_size = 16;
  h.intermediate_size = 32;
  h.n_heads = 2;
  h.n_kv_heads = 1;
  h.head_dim = 8;
  h.target_hidden_size = 16;
  h.vocab_size = 4;
  h.draft_vocab_size = 3;
  h.aux_layer_ids = {0, 1, 2};
  p.head_tensors = RandomEagle3Tensors(h, 5);
  p.head_tensors[kEagle3LmHead] = p.head_tensors[kEagle3LmHead] * 80;
  return p;
}

TEST(Eagle3Drafter, LosslessAtTemperatureOneWithSampleFollow) {
  at::set_num_threads(1);
  TinyPair pair = MakeTinyPair();
  LlamaModel& target = *pair.target;
  Eagle3DraftOptions o;
  o.depth = 3;
  o.top_k = 2;
  o.nodes = 5;
  auto head = std::make_unique<Eagle3Head>(pair.head_config, pair.head_tensors,
                                           target.weights().tok_embeddings);
  SpeculativeOptions so;
  so.budget = {o.nodes, o.depth};
  so.sampling_rule = VerifyRule::kSampleFollow;
  SpeculativeDecoder decoder(target, nullptr, std::make_unique<Eagle3Drafter>(std::move(head), o),
                             so);
  const std::vector<int32_t> prompt = {1, 3};

  // Exact distribution of the 3 generated tokens: p(a) p(b | a) p(c | a, b).
  auto next_probs = [&](const std::vector<int32_t>& ids) {
    KvCache cache = target.NewCache(1, 8);
    const at::Tensor logits = target.Forward(testing_util::Ids(ids), cache).logits;
    return at::softmax(logits.reshape({-1}), 0);
  };
  std::vector<double> expected(64, 0);
  const at::Tensor pa = next_probs(prompt);
  for (int a = 0; a < 4; ++a) {
    const at::Tensor pb = next_probs({1, 3, a});
    for (int b = 0; b < 4; ++b) {
      const at::Tensor pc = next_probs({1, 3, a, b});
      for (int c = 0; c < 4; ++c) {
        expected[a * 16 + b * 4 + c] =
            pa[a].item<double>() * pb[b].item<double>() * pc[c].item<double>();
      }
    }
  }
  const int kDraws = 40000;
  std::vector<double> counts(64, 0);
  int64_t accepted = 0;
  KvCache cache = target.NewCache(1, 16);
  for (int i = 0; i < kDraws; ++i) {
    GenerationConfig g;
    g.sampling.temperature = 1.0;
    g.seed = 1000 + i;
    g.stop.max_new_tokens = 3;
    DecodeResult r;
    decoder.Generate(prompt, g, cache, r);
    ASSERT_EQ(r.generation.tokens.size(), 3u);
    const auto& t = r.generation.tokens;
    counts[t[0] * 16 + t[1] * 4 + t[2]] += 1;
    for (const StepStats& s : r.steps) accepted += s.n_accepted;
  }
  double chi2 = 0;
  int cells = 0;
  for (int i = 0; i < 64; ++i) {
    const double e = expected[i] * kDraws;
    if (e < 1e-9) {
      EXPECT_EQ(counts[i], 0) << "cell " << i;
      continue;
    }
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  EXPECT_GT(testing_util::ChiSquareSf(chi2, cells - 1), 1e-4) << "chi2 " << chi2;
  EXPECT_GT(accepted, kDraws / 4);  // drafts are accepted often enough to matter
}

TEST(Eagle3Drafter, RegistryKnobsAndHeadChecks) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  const MethodInfo& info = registry.Info("eagle3");
  EXPECT_TRUE(info.traits.tree);
  EXPECT_TRUE(info.traits.needs_target_hidden);
  EXPECT_EQ(info.traits.sampling_verifier, "sample_follow");
  const nlohmann::json knobs = registry.ResolveKnobs("eagle3", {});
  EXPECT_EQ(knobs["depth"], 7);
  EXPECT_EQ(knobs["top_k"], 10);
  EXPECT_EQ(knobs["total_tokens"], 60);
  EXPECT_THROW(registry.ResolveKnobs("eagle3", {{"top_k", 0}}), Error);

  // A head for a 4-token vocabulary does not pair with stories260K (vocabulary 512).
  TinyPair pair = MakeTinyPair();
  const std::string dir = testing_util::ScratchDir("eagle3_drafter_wrong_vocab");
  pair.head_config.aux_layer_ids.clear();
  WriteEagle3Checkpoint(dir, pair.head_config, pair.head_tensors);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  MethodContext context = ContextFor(target);
  try {
    registry.Build("eagle3", context, {{"head", dir}});
    FAIL() << "expected a vocabulary mismatch";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("vocab_size 4 but the target 'stories260K' has 512"));
  }
  EXPECT_THROW(registry.Build("eagle3", context, {{"head", dir + "/missing"}}), Error);
}

}  // namespace
}  // namespace specbed
