// DFlash / DDTree drafting end to end on the speculative decoder, with seeded random heads (the
// losslessness of verification does not depend on the head's quality):
// - stories260K at T = 0, fp32: `dflash` (chain) and `ddtree` (best-first tree) outputs are token-
//   identical to AR on 8 story prompts, and the budget / block size bound every step;
// - a tiny random target (vocabulary 4): the distribution of 3-token outputs over 30000 seeded
//   generations matches the target's exact distribution for `dflash` (chain rejection sampling
//   with the recorded per-row distributions) and `ddtree` (sample-then-follow); chi-square over
//   64 cells, reject at p < 1e-4 (false-failure rate about 1e-4 per test; seeds fixed);
// - a head for another vocabulary or target layers beyond the target fail clearly.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>

#include "datasets/dataset.h"
#include "harness/base/error.h"
#include "harness/engine/runner.h"
#include "harness/engine/speculative_decoder.h"
#include "methods/dflash/dflash_checkpoint.h"
#include "methods/dflash/dflash_drafter.h"
#include "methods/method_registry.h"
#include "tests/engine/engine_test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

using testing::HasSubstr;

MethodContext ContextFor(LoadedTarget& target) {
  MethodContext c;
  c.target = &target;
  c.load_model = [](const std::string& name) -> LoadedTarget& {
    static std::map<std::string, LoadedTarget> cache;
    auto it = cache.find(name);
    if (it == cache.end()) it = cache.emplace(name, LoadModel(name, at::kFloat)).first;
    return it->second;
  };
  return c;
}

// A DFlash head shaped for a target of width `dim`, vocabulary `vocab` and `layers` layers.
DflashConfig HeadConfig(int64_t dim, int64_t vocab, int64_t layers, int64_t heads,
                        int64_t kv_heads) {
  DflashConfig c;
  c.hidden_size = dim;
  c.intermediate_size = 2 * dim;
  c.n_layers = 2;
  c.n_heads = heads;
  c.n_kv_heads = kv_heads;
  c.head_dim = dim / heads;
  c.vocab_size = vocab;
  c.max_position_embeddings = 1024;
  c.rms_norm_eps = 1e-5;
  c.block_size = 6;
  c.mask_token_id = 0;
  c.num_target_layers = layers;
  c.target_layer_ids = {0, layers - 1};
  return c;
}

std::string WriteHead(const DflashConfig& c, uint64_t seed, const std::string& name,
                      double scale = 1.0) {
  const std::string dir = testing_util::ScratchDir(name);
  auto tensors = RandomDflashTensors(c, seed);
  if (scale != 1.0) {
    for (auto& [n, t] : tensors) {
      if (t.dim() == 2) t = t * scale;
    }
  }
  WriteDflashCheckpoint(dir, c, tensors);
  return dir;
}

TEST(DflashDrafter, ChainAndTreeMatchArOnStoryPrompts) {
  at::set_num_threads(1);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  const LlamaConfig& t = target.model->config();
  const std::string dir =
      WriteHead(HeadConfig(t.dim, t.vocab_size, t.n_layers, t.n_heads, t.n_kv_heads), 3,
                "dflash_drafter_stories");
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = ContextFor(target);
  const auto prompts = LoadDataset("stories", {});
  for (const auto& [method, knobs] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"dflash", {{"drafter", dir}}},
           {"dflash", {{"drafter", dir}, {"block_size", 3}}},
           {"ddtree", {{"drafter", dir}, {"budget", 12}, {"top_k", 3}}}}) {
    auto decoder = registry.Build(method, context, knobs);
    for (size_t i = 0; i < 8; ++i) {
      const std::vector<int32_t> ids = BuildPromptIds(target, {{"user", prompts[i].turns[0]}});
      GenerationConfig g;
      g.stop = StopConfigFor(target, 48, {});
      KvCache cache = target.model->NewCache(1, static_cast<int64_t>(ids.size()) + 49);
      const GenerationResult ar = GenerateAr(*target.model, target.tokenizer.get(), ids, g, cache);
      DecodeResult spec;
      decoder->Generate(ids, g, cache, spec);
      ASSERT_EQ(spec.generation.tokens, ar.tokens) << method << knobs.dump() << " prompt " << i;
      const int64_t depth = knobs.value("block_size", 6) - 1;
      for (const StepStats& s : spec.steps) {
        EXPECT_LE(s.draft_depth, depth);
        EXPECT_LE(s.n_drafted, method == "ddtree" ? 12 : depth);
      }
    }
  }
}

struct Tiny {
  std::shared_ptr<LlamaModel> target;
  std::string head_dir;
};

Tiny MakeTiny() {
  LlamaConfig c;
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
  w.lm_head = w.lm_head * 60;  // sharper distributions than the 0.02 init gives
  Tiny t;
  t.target = std::make_shared<LlamaModel>(c, w);
  t.head_dir = WriteHead(HeadConfig(16, 4, 2, 2, 1), 9, "dflash_drafter_tiny", 20.0);
  return t;
}

// Chi-square p-value of the 3-token output distribution of `decoder` from prompt {1, 3}.
double OutputPValue(LlamaModel& target, Decoder& decoder, int64_t* accepted) {
  auto next_probs = [&](const std::vector<int32_t>& ids) {
    KvCache cache = target.NewCache(1, 8);
    return at::softmax(target.Forward(testing_util::Ids(ids), cache).logits.reshape({-1}), 0);
  };
  std::vector<double> expected(64, 0);
  const at::Tensor pa = next_probs({1, 3});
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
  const int kDraws = 30000;
  std::vector<double> counts(64, 0);
  KvCache cache = target.NewCache(1, 16);
  for (int i = 0; i < kDraws; ++i) {
    GenerationConfig g;
    g.sampling.temperature = 1.0;
    g.seed = 777 + i;
    g.stop.max_new_tokens = 3;
    g.stop.stop_on_eos = false;
    DecodeResult r;
    decoder.Generate({1, 3}, g, cache, r);
    EXPECT_EQ(r.generation.tokens.size(), 3u);
    const auto& t = r.generation.tokens;
    counts[t[0] * 16 + t[1] * 4 + t[2]] += 1;
    for (const StepStats& s : r.steps) *accepted += s.n_accepted;
  }
  double chi2 = 0;
  int cells = 0;
  for (int i = 0; i < 64; ++i) {
    const double e = expected[i] * kDraws;
    if (e < 1e-9) {
      EXPECT_EQ(counts[i], 0);
      continue;
    }
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++cells;
  }
  return testing_util::ChiSquareSf(chi2, cells - 1);
}

TEST(DflashDrafter, LosslessAtTemperatureOneForChainAndTree) {
  at::set_num_threads(1);
  Tiny tiny = MakeTiny();
  for (bool tree : {false, true}) {
    const DflashCheckpoint ckpt = LoadDflashCheckpoint(tiny.head_dir);
    const LlamaWeights& w = tiny.target->weights();
    DflashDraftOptions o;
    o.tree = tree;
    o.top_k = 2;
    o.budget = 5;
    auto drafter = std::make_unique<DflashDrafter>(
        std::make_unique<DflashHead>(ckpt.config, ckpt.tensors, w.tok_embeddings, w.lm_head), o);
    SpeculativeOptions so;
    so.budget = {5, 5};
    so.sampling_rule = tree ? VerifyRule::kSampleFollow : VerifyRule::kChainRs;
    SpeculativeDecoder decoder(*tiny.target, nullptr, std::move(drafter), so);
    int64_t accepted = 0;
    const double p = OutputPValue(*tiny.target, decoder, &accepted);
    EXPECT_GT(p, 1e-4) << (tree ? "ddtree" : "dflash");
    EXPECT_GT(accepted, 1000) << (tree ? "ddtree" : "dflash");  // drafts are taken often enough
  }
}

TEST(DflashDrafter, MismatchedHeadsFailClearly) {
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = ContextFor(target);
  const std::string tiny = WriteHead(HeadConfig(16, 4, 2, 2, 1), 1, "dflash_drafter_wrong");
  try {
    registry.Build("dflash", context, {{"drafter", tiny}});
    FAIL() << "expected a mismatch";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("does not match the target 'stories260K'"));
  }
  EXPECT_THROW(registry.Build("ddtree", context, {{"drafter", ""}}), Error);
  EXPECT_THROW(registry.Build("dflash", context, {{"drafter", tiny + "/missing"}}), Error);
}

}  // namespace
}  // namespace specbed
