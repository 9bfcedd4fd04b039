// Tests of drafter training data and target features (methods/common/train/regen.*,
// target_features.*, harness/cli/cmd_regen.cpp) on the real stories260K target: regen file round
// trip and provenance, determinism (same seed -> same tokens; a sequence does not depend on how
// many others are generated), equality with GenerateAr under each sequence's seed, resume from a
// partial file, malformed-file errors; MakeSequenceBatch padding and loss mask; the disk feature
// cache against the online source (F32 ~exact, BF16 within its rounding), manifest mismatch,
// rebuild and resumed builds; `specbed regen` end to end. Every run is seeded and single-threaded,
// so the false-failure rate is 0 except where a comment says otherwise.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/engine/ar_generate.h"
#include "harness/runner/runner.h"
#include "methods/common/train/regen.h"
#include "methods/common/train/target_features.h"
#include "models/checkpoint/hf_checkpoint.h"
#include "models/checkpoint/safetensors.h"
#include "models/model_registry.h"
#include "tests/common/test_util.h"
#include "tests/models/model_test_util.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;
using testing::ErrorOf;
using testing::kNoSpecbedError;
using testing_util::TestName;

// A fresh, empty scratch folder for the current test.
std::string Scratch() {
  return testing::ScratchDir("regen_" + TestName(), /*create=*/true);
}

#define EXPECT_ERROR_HAS(stmt, text)                                      \
  do {                                                                    \
    const std::string msg_ = ErrorOf([&] { stmt; });                      \
    EXPECT_NE(msg_.find(text), std::string::npos) << "message: " << msg_; \
  } while (0)

// Responses of 24 new tokens to `prompts` ("bos" or a dataset) under `seed`.
RegenConfig ShortConfig(const std::string& prompts, uint64_t seed) {
  RegenConfig c;
  c.prompts = prompts;
  c.max_new_tokens = 24;
  c.seed = seed;
  return c;
}

// `n` unconditional sequences of 24 new tokens.
RegenConfig BosConfig(int64_t n, uint64_t seed = 7) {
  RegenConfig c = ShortConfig("bos", seed);
  c.n_sequences = n;
  return c;
}

LoadedTarget& Target() {
  static LoadedTarget target = LoadModel("stories260K", at::kFloat);
  return target;
}

// The response GenerateAr gives for `prompt` under sample (p, s)'s seed, with regen's EOS rule.
std::vector<int32_t> ExpectedResponse(const RegenConfig& c, const std::vector<int32_t>& prompt,
                                      int64_t p, int64_t s, LoadedTarget& t = Target()) {
  GenerationConfig gen;
  gen.sampling = c.sampling;
  gen.seed = RegenSeed(c.seed, p, s);
  gen.stop = StopConfigFor(t, c.max_new_tokens, {});
  gen.stop.stop_on_eos = c.stop_at_eos;
  KvCache cache = t.model->NewCache(1, static_cast<int64_t>(prompt.size()) + c.max_new_tokens);
  const GenerationResult r = GenerateAr(*t.model, nullptr, prompt, gen, cache);
  std::vector<int32_t> out = r.tokens;
  if (r.stop_reason == StopReason::kEos) out.push_back(gen.stop.eos_ids.front());
  return out;
}

std::vector<int32_t> Response(const RegenSequence& s) {
  return std::vector<int32_t>(s.begin() + s.prompt_length, s.end());
}

TEST(RegenTest, BosRoundTripProvenanceAndDeterminism) {
  at::set_num_threads(1);
  const std::string dir = Scratch();
  const RegenConfig c = BosConfig(6);
  const RegenData data = GenerateRegenData(c, /*verbose=*/false);
  ASSERT_EQ(data.size(), 6);
  for (int64_t i = 0; i < data.size(); ++i) {
    const RegenSequence s = data.sequence(i);
    EXPECT_EQ(s.prompt_length, 1);
    EXPECT_EQ(s[0], 1);  // BOS
    EXPECT_GE(s.response_length(), 1);
    EXPECT_LE(s.response_length(), c.max_new_tokens);
    EXPECT_EQ(Response(s), ExpectedResponse(c, {1}, i, 0)) << "sequence " << i;
  }

  const std::string path = dir + "/stories.regen.safetensors";
  WriteRegenData(path, data);
  const RegenData back = LoadRegenData(path, 512);
  EXPECT_EQ(back.tokens, data.tokens);
  EXPECT_EQ(back.offsets, data.offsets);
  EXPECT_EQ(back.prompt_lengths, data.prompt_lengths);
  EXPECT_EQ(back.provenance, data.provenance);
  const auto& p = back.provenance;
  EXPECT_EQ(p["format_version"], kRegenFormatVersion);
  EXPECT_EQ(p["target"]["name"], "stories260K");
  EXPECT_EQ(p["target"]["fingerprint"].get<std::string>().size(), 16u);
  EXPECT_EQ(p["target"]["dtype"], "float32");
  EXPECT_EQ(p["prompts"]["source"], "bos");
  EXPECT_EQ(p["prompts"]["n_prompts"], 6);
  EXPECT_EQ(p["sampling"]["temperature"], 1.0);
  EXPECT_EQ(p["sampling"]["top_k"], 0);
  EXPECT_EQ(p["sampling"]["top_p"], 1.0);
  EXPECT_EQ(p["seed"], 7);
  EXPECT_EQ(p["max_new_tokens"], 24);
  EXPECT_EQ(p["stop_at_eos"], true);
  EXPECT_EQ(p["n_sequences"], 6);
  EXPECT_EQ(p["total_tokens"], data.total_tokens());
  EXPECT_NEAR(p["mean_response_length"].get<double>(), (data.total_tokens() - 6) / 6.0, 1e-12);
  for (const char* key :
       {"wall_seconds", "specbed_git_commit", "specbed_version", "created_utc", "stop_reasons"}) {
    EXPECT_TRUE(p.contains(key)) << key;
  }

  // Same seed: identical; fewer sequences: a prefix; another seed: different (two T=1 samples of
  // 24 tokens agreeing everywhere has probability far below 1e-9).
  EXPECT_EQ(GenerateRegenData(c, false).tokens, data.tokens);
  const RegenData three = GenerateRegenData(BosConfig(3), false);
  ASSERT_EQ(three.size(), 3);
  EXPECT_EQ(three.tokens,
            std::vector<int32_t>(data.tokens.begin(), data.tokens.begin() + data.offsets[3]));
  EXPECT_NE(GenerateRegenData(BosConfig(6, 8), false).tokens, data.tokens);
}

TEST(RegenTest, DatasetPromptsWithSamplesPerPrompt) {
  at::set_num_threads(1);
  RegenConfig c = ShortConfig("stories", 3);
  c.limit = 2;
  c.n_per_prompt = 2;
  const RegenData data = GenerateRegenData(c, false);
  ASSERT_EQ(data.size(), 4);
  DatasetFilter filter;
  filter.limit = 2;
  const std::vector<Prompt> prompts = LoadDataset("stories", filter);
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t p = i / 2, s = i % 2;
    const std::vector<int32_t> ids = BuildPromptIds(Target(), {{"user", prompts[p].turns[0]}});
    const RegenSequence seq = data.sequence(i);
    ASSERT_EQ(seq.prompt_length, static_cast<int64_t>(ids.size()));
    EXPECT_GT(seq.prompt_length, 1);
    EXPECT_TRUE(std::equal(ids.begin(), ids.end(), seq.begin()));
    EXPECT_EQ(Response(seq), ExpectedResponse(c, ids, p, s)) << "sequence " << i;
  }
  // The two samples of a prompt differ (T = 1; equal 24-token samples: probability << 1e-9).
  EXPECT_NE(Response(data.sequence(0)), Response(data.sequence(1)));
  EXPECT_EQ(data.provenance["prompts"]["kind"], "dataset");
  EXPECT_EQ(data.provenance["prompts"]["n_prompts"], 2);
  EXPECT_EQ(data.provenance["prompts"]["n_per_prompt"], 2);
  EXPECT_EQ(data.provenance["prompts"]["limit"], 2);
}

TEST(RegenTest, ResumesFromPartialFile) {
  at::set_num_threads(1);
  const std::string dir = Scratch();
  const std::string path = dir + "/out/data.regen.safetensors";
  const RegenConfig c = BosConfig(6);
  RegenRunOptions stop;
  stop.verbose = false;
  stop.stop_after = 3;
  RegenRunResult r = RegenerateToFile(c, path, stop);
  EXPECT_FALSE(r.finished);
  EXPECT_EQ(r.data.size(), 3);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(fs::exists(path + ".partial"));

  RegenRunOptions quiet;
  quiet.verbose = false;
  r = RegenerateToFile(c, path, quiet);
  EXPECT_TRUE(r.finished);
  EXPECT_EQ(r.resumed, 3);
  EXPECT_FALSE(fs::exists(path + ".partial"));
  const RegenData loaded = LoadRegenData(path);
  EXPECT_EQ(loaded.tokens, GenerateRegenData(c, false).tokens);
  EXPECT_EQ(loaded.provenance["resumed_sequences"], 3);

  // A progress file from other settings is discarded, not continued.
  RegenerateToFile(BosConfig(6, 99), path, stop);
  r = RegenerateToFile(c, path, quiet);
  EXPECT_EQ(r.resumed, 0);
  EXPECT_EQ(LoadRegenData(path).tokens, loaded.tokens);
}

TEST(RegenTest, EosEndsAResponseAndIsKept) {
  at::set_num_threads(1);
  // A random-weight HF target (near-uniform over 128 ids, EOS = 2): about 40% of 64-token
  // responses meet an EOS. The seeds are fixed, so the outcome is too.
  const std::string dir = Scratch() + "/model";
  LlamaConfig config = testing_util::SmallLlama3Config();
  config.eos_token_ids = {2};
  WriteHfCheckpoint(dir, config, RandomHfTensors(config, 11));
  RegenConfig c = BosConfig(8);
  c.target = dir;
  c.max_new_tokens = 64;
  const RegenData stop = GenerateRegenData(c, false);
  c.stop_at_eos = false;
  const RegenData full = GenerateRegenData(c, false);
  LoadedTarget target = LoadModel(dir, at::kFloat);
  int64_t eos_stops = 0;
  for (int64_t i = 0; i < 8; ++i) {
    const std::vector<int32_t> a = Response(stop.sequence(i)), b = Response(full.sequence(i));
    const auto first_eos = std::find(a.begin(), a.end(), 2);
    if (first_eos != a.end()) {
      ++eos_stops;
      EXPECT_EQ(first_eos + 1, a.end()) << "sequence " << i << ": EOS is the last token";
    } else {
      EXPECT_EQ(a.size(), 64u);
    }
    // Without the EOS stop the same seed gives the same tokens, continued to 64.
    EXPECT_EQ(b.size(), 64u);
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << "sequence " << i;
    RegenConfig with_stop = c;
    with_stop.stop_at_eos = true;
    EXPECT_EQ(a, ExpectedResponse(with_stop, {1}, i, 0, target)) << "sequence " << i;
  }
  EXPECT_GE(eos_stops, 1);
  EXPECT_EQ(stop.provenance["stop_reasons"].value("eos", int64_t{0}), eos_stops);
  EXPECT_EQ(full.provenance["stop_reasons"]["max_new_tokens"], 8);
}

// Writes the three arrays and a provenance without any validation.
void WriteRaw(const std::string& path, const std::vector<int32_t>& tokens,
              const std::vector<int64_t>& offsets, const std::vector<int64_t>& prompt_lengths,
              const std::string& provenance) {
  std::vector<SafetensorsTensorView> views = {{"tokens",
                                               SafetensorsDtype::kI32,
                                               {static_cast<int64_t>(tokens.size())},
                                               tokens.data(),
                                               tokens.size() * 4},
                                              {"offsets",
                                               SafetensorsDtype::kI64,
                                               {static_cast<int64_t>(offsets.size())},
                                               offsets.data(),
                                               offsets.size() * 8},
                                              {"prompt_lengths",
                                               SafetensorsDtype::kI64,
                                               {static_cast<int64_t>(prompt_lengths.size())},
                                               prompt_lengths.data(),
                                               prompt_lengths.size() * 8}};
  std::map<std::string, std::string> meta;
  if (!provenance.empty()) meta[kRegenMetadataKey] = provenance;
  WriteSafetensors(path, views, meta);
}

TEST(RegenTest, MalformedFilesAreRejectedWithTheReason) {
  const std::string dir = Scratch();
  const std::string f = dir + "/bad.safetensors";
  const std::vector<int32_t> tokens = {1, 5, 6, 1, 7, 8, 9};
  const std::string v1 = R"({"format_version": 1})";
  WriteRaw(f, tokens, {0, 3, 7}, {1, 2}, v1);
  EXPECT_EQ(LoadRegenData(f).size(), 2);  // the baseline is valid

  WriteRaw(f, tokens, {0, 3}, {1, 2}, v1);  // truncated offsets
  EXPECT_ERROR_HAS(LoadRegenData(f), f + ": 'offsets' has 2 entries, expected n + 1 = 3");
  WriteRaw(f, tokens, {0, 3, 6}, {1, 2}, v1);  // offsets end early
  EXPECT_ERROR_HAS(LoadRegenData(f), "offsets end at 6 but there are 7 tokens");
  WriteRaw(f, tokens, {0, 4, 3}, {1, 2}, v1);  // decreasing
  EXPECT_ERROR_HAS(LoadRegenData(f), "offsets must increase (sequence 1");
  WriteRaw(f, tokens, {0, 3, 7}, {1, 5}, v1);  // prompt longer than the sequence
  EXPECT_ERROR_HAS(LoadRegenData(f),
                   "sequence 1 has prompt_length 5, expected 1 <= prompt_length <= its length 4");
  WriteRaw(f, tokens, {0, 3, 7}, {1, 2}, R"({"format_version": 2})");
  EXPECT_ERROR_HAS(LoadRegenData(f), "format version 2, this build reads version 1");
  WriteRaw(f, tokens, {0, 3, 7}, {1, 2}, "");
  EXPECT_ERROR_HAS(LoadRegenData(f), "not a specbed regen file");
  WriteRaw(f, {1, 5, 6, 1, 7, 8, 600}, {0, 3, 7}, {1, 2}, v1);
  EXPECT_EQ(LoadRegenData(f).size(), 2);  // no vocabulary given: any id >= 0
  EXPECT_ERROR_HAS(LoadRegenData(f, 512), "token 6 has id 600, outside the vocabulary [0, 512)");
  WriteRaw(f, tokens, {0, 3, 7}, {1, 2}, R"({"format_version": 1, "n_sequences": 3})");
  EXPECT_ERROR_HAS(LoadRegenData(f), "provenance says 3 sequences, the arrays hold 2");

  RegenData bad;
  bad.provenance = {{"format_version", 1}};
  bad.Append({1}, {4, 5});
  bad.prompt_lengths[0] = 0;
  EXPECT_ERROR_HAS(WriteRegenData(dir + "/x.safetensors", bad), "prompt_length 0");
}

TEST(RegenTest, ImpossibleSettingsFail) {
  RegenConfig c = BosConfig(0);
  EXPECT_ERROR_HAS(GenerateRegenData(c, false), "--prompts bos needs --n-sequences >= 1");
  c = BosConfig(2);
  c.limit = 3;
  EXPECT_ERROR_HAS(GenerateRegenData(c, false), "--limit and --dataset-categories apply");
  c = BosConfig(2);
  c.sampling.top_p = 0;
  EXPECT_NE(ErrorOf([&] { GenerateRegenData(c, false); }), kNoSpecbedError);
  RegenConfig d;
  d.prompts = "no_such_set";
  EXPECT_ERROR_HAS(GenerateRegenData(d, false), "unknown dataset 'no_such_set'");
  d.prompts = "stories";
  d.n_sequences = 4;
  EXPECT_ERROR_HAS(GenerateRegenData(d, false), "--n-sequences applies to --prompts bos");
}

// ---------------------------------------------------------------------------------------------
// Batches and target features.

TEST(TargetFeaturesTest, SequenceBatchPadsCropsAndMasks) {
  RegenData d;
  d.provenance = {{"format_version", 1}};
  d.Append({1, 5}, {6, 7});        // length 4, prompt 2
  d.Append({1}, {9});              // length 2, prompt 1
  d.Append({1, 2, 3}, {4, 5, 6});  // length 6, prompt 3: cropped to 5
  const SequenceBatch b = MakeSequenceBatch(d, {2, 0, 1}, 5);
  ASSERT_EQ(b.tokens.sizes(), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(b.tokens.scalar_type(), at::kLong);
  EXPECT_EQ(b.loss_mask.scalar_type(), at::kFloat);
  const std::vector<int64_t> tokens(b.tokens.data_ptr<int64_t>(),
                                    b.tokens.data_ptr<int64_t>() + 15);
  EXPECT_EQ(tokens, (std::vector<int64_t>{1, 2, 3, 4, 5, 1, 5, 6, 7, 0, 1, 9, 0, 0, 0}));
  const std::vector<int64_t> lengths(b.lengths.data_ptr<int64_t>(),
                                     b.lengths.data_ptr<int64_t>() + 3);
  EXPECT_EQ(lengths, (std::vector<int64_t>{5, 4, 2}));
  const std::vector<float> mask(b.loss_mask.data_ptr<float>(), b.loss_mask.data_ptr<float>() + 15);
  EXPECT_EQ(mask, (std::vector<float>{0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 0, 0, 0, 0}));
  // Only the two shorter rows: T shrinks to 4.
  EXPECT_EQ(MakeSequenceBatch(d, {1, 0}, 64).tokens.size(1), 4);
  EXPECT_ERROR_HAS(MakeSequenceBatch(d, {3}, 5), "row 3 outside [0, 3)");
  EXPECT_ERROR_HAS(MakeSequenceBatch(d, {0}, 0), "max_len must be >= 1");
}

const RegenData& FeatureData() {
  static const RegenData data = [] {
    at::set_num_threads(1);
    return GenerateRegenData(BosConfig(6), false);
  }();
  return data;
}

double MaxAbs(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(TargetFeaturesTest, DiskCacheMatchesOnline) {
  at::set_num_threads(1);
  const std::string dir = Scratch();
  LlamaModel& target = *Target().model;
  const RegenData& data = FeatureData();
  const std::vector<int64_t> layers = {2, 0, 5};  // any order; 5 = last layer of stories260K
  const int64_t max_len = 20;                     // crops the longer sequences
  DiskFeatureCacheOptions o;
  o.shard_bytes = 8 << 10;    // several shards
  o.build_batch_tokens = 40;  // several forwards
  auto disk = DiskFeatureCache::Build(target, data, layers, max_len, dir + "/f32",
                                      SafetensorsDtype::kF32, o);
  EXPECT_FALSE(disk->reused());
  EXPECT_GE(disk->manifest()["shards"].size(), 2u);
  OnlineFeatureSource online(target, layers);

  const std::vector<int64_t> rows = {4, 0, 3, 0};
  const SequenceBatch batch = MakeSequenceBatch(data, rows, max_len);
  const int64_t B = 4, T = batch.tokens.size(1), dim = 64, vocab = 512;
  const TargetFeatures a = online.Get(rows, batch);
  const TargetFeatures b = disk->Get(rows, batch);
  ASSERT_EQ(a.hidden.sizes(), (std::vector<int64_t>{B, T, 3 * dim}));
  ASSERT_EQ(a.logits.sizes(), (std::vector<int64_t>{B, T, vocab}));
  ASSERT_EQ(b.hidden.sizes(), a.hidden.sizes());
  ASSERT_EQ(b.logits.sizes(), a.logits.sizes());
  // Same forward for the hidden states; the logits differ only by the order of the RMSNorm sum
  // (engine row kernel vs. ATen): measured 0 and 5.7e-6 at logits up to 20.5.
  EXPECT_LT(MaxAbs(a.hidden, b.hidden), 1e-5);
  EXPECT_LT(MaxAbs(a.logits, b.logits), 2e-5);
  // The second block is hidden_states[0] = the embedding rows of the tokens (the order of
  // `layers` is kept); padding positions are 0 in both sources.
  const at::Tensor emb = target.weights().tok_embeddings.to(at::kFloat);
  const int64_t* len = batch.lengths.data_ptr<int64_t>();
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t t = 0; t < T; ++t) {
      const at::Tensor h = b.hidden[i][t].slice(0, dim, 2 * dim);
      if (t < len[i]) {
        EXPECT_TRUE(h.equal(emb[batch.tokens[i][t].item<int64_t>()])) << i << "," << t;
      } else {
        EXPECT_EQ(b.hidden[i][t].abs().max().item<float>(), 0.f);
        EXPECT_EQ(a.logits[i][t].abs().max().item<float>(), 0.f);
        EXPECT_EQ(b.logits[i][t].abs().max().item<float>(), 0.f);
      }
    }
  }
  // Rows that do not index the cached data are caught.
  EXPECT_ERROR_HAS(disk->Get({1, 0, 3, 0}, batch), "rows do not index the data");
  // A second Build with the same settings reuses the cache; Open finds it too.
  EXPECT_TRUE(DiskFeatureCache::Build(target, data, layers, max_len, dir + "/f32",
                                      SafetensorsDtype::kF32, o)
                  ->reused());
  EXPECT_LT(MaxAbs(DiskFeatureCache::Open(target, dir + "/f32")->Get(rows, batch).logits, a.logits),
            2e-5);

  // BF16 storage: hidden within bf16 rounding (relative 2^-9, bound 2^-8), logits close.
  auto bf16 = DiskFeatureCache::Build(target, data, layers, max_len, dir + "/bf16",
                                      SafetensorsDtype::kBF16, o);
  const TargetFeatures c = bf16->Get(rows, batch);
  EXPECT_TRUE(
      (c.hidden - a.hidden).abs().le(a.hidden.abs() * (1.0 / 256) + 1e-5).all().item<bool>());
  const double logit_scale = a.logits.abs().max().item<double>();
  EXPECT_LT(MaxAbs(c.logits, a.logits), 0.005 * logit_scale);  // measured 0.029 of 20.5
  EXPECT_GT(MaxAbs(c.logits, a.logits), 0.0);                  // it really was rounded
}

TEST(TargetFeaturesTest, ManifestMismatchRebuildAndResumedBuild) {
  at::set_num_threads(1);
  const std::string dir = Scratch() + "/cache";
  LlamaModel& target = *Target().model;
  const RegenData& data = FeatureData();
  DiskFeatureCacheOptions o;
  o.shard_bytes = 8 << 10;
  auto first = DiskFeatureCache::Build(target, data, {1}, 32, dir, SafetensorsDtype::kF32, o);
  const int64_t n_shards = static_cast<int64_t>(first->manifest()["shards"].size());
  ASSERT_GE(n_shards, 2);

  EXPECT_ERROR_HAS(DiskFeatureCache::Build(target, data, {2}, 32, dir),
                   "'layers' is [1] there but [2] now");
  EXPECT_ERROR_HAS(DiskFeatureCache::Build(target, data, {1}, 16, dir),
                   "'max_len' is 32 there but 16 now");
  EXPECT_ERROR_HAS(DiskFeatureCache::Build(target, data, {1}, 32, dir, SafetensorsDtype::kBF16),
                   "'store_dtype' is \"F32\" there but \"BF16\" now");
  RegenData other = data;
  other.tokens[1] = other.tokens[1] == 7 ? 8 : 7;
  EXPECT_ERROR_HAS(DiskFeatureCache::Build(target, other, {1}, 32, dir),
                   "was built for other training data");
  LlamaModel bf16_target(target.config(), target.weights().To(at::kBFloat16));
  EXPECT_ERROR_HAS(DiskFeatureCache::Open(bf16_target, dir), "other target weights");

  // An interrupted build (manifest and last shard missing) keeps its finished shards.
  const std::vector<int64_t> rows = {5, 2};
  const SequenceBatch batch = MakeSequenceBatch(data, rows, 32);
  const TargetFeatures want = first->Get(rows, batch);
  first.reset();
  fs::remove(dir + "/manifest.json");
  char last[64];
  std::snprintf(last, sizeof(last), "/shard-%05lld.safetensors",
                static_cast<long long>(n_shards - 1));
  fs::remove(dir + last);
  auto resumed = DiskFeatureCache::Build(target, data, {1}, 32, dir, SafetensorsDtype::kF32, o);
  EXPECT_GT(resumed->manifest()["resumed_from_sequence"].get<int64_t>(), 0);
  EXPECT_EQ(static_cast<int64_t>(resumed->manifest()["shards"].size()), n_shards);
  const TargetFeatures got = resumed->Get(rows, batch);
  // Same rows, same values up to the GEMM's summation order: the resumed build batches the
  // sequences differently; forwards of <= 4 rows use SpecBed's GEMV (models/gemv.h) instead of
  // BLAS, and some OpenBLAS kernels (e.g. OPENBLAS_CORETYPE=Haswell) round differently per batch
  // shape. A misaligned row or shard would differ by O(1).
  EXPECT_TRUE(at::allclose(got.hidden, want.hidden, 1e-5, 1e-5));
  EXPECT_TRUE(at::allclose(got.logits, want.logits, 1e-5, 1e-4));

  // rebuild replaces a cache with other settings.
  DiskFeatureCacheOptions rebuild;
  rebuild.rebuild = true;
  auto two = DiskFeatureCache::Build(target, data, {2}, 32, dir, SafetensorsDtype::kF32, rebuild);
  EXPECT_EQ(two->layers(), (std::vector<int64_t>{2}));
  EXPECT_EQ(two->manifest()["resumed_from_sequence"], 0);

  // The factory.
  TargetFeatureOptions f;
  f.source = "disk";
  f.layers = {2};
  f.max_len = 32;
  f.cache_dir = dir;
  EXPECT_EQ(MakeTargetFeatureSource(target, data, f)->name(), "disk");
  f.source = "online";
  EXPECT_EQ(MakeTargetFeatureSource(target, data, f)->name(), "online");
  f.source = "onlin";
  EXPECT_ERROR_HAS(MakeTargetFeatureSource(target, data, f),
                   "unknown target feature source 'onlin'");
  f.source = "disk";
  f.cache_dir = "";
  EXPECT_ERROR_HAS(MakeTargetFeatureSource(target, data, f), "needs a cache directory");
  EXPECT_ERROR_HAS(OnlineFeatureSource bad(target, {6}), "hidden layer 6 outside [0, 5]");
}

// ---------------------------------------------------------------------------------------------
// `specbed regen` (the real binary).

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

CliRun Specbed(const std::string& args, const std::string& dir) {
  const std::string out = dir + "/stdout", err = dir + "/stderr";
  const std::string cmd = std::string(SPECBED_BIN) + " " + args + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  CliRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadAll(out);
  r.err = ReadAll(err);
  return r;
}

TEST(RegenCliTest, SuccessAndErrors) {
  const std::string dir = Scratch();
  const std::string out = dir + "/data/stories.regen.safetensors";
  CliRun r = Specbed(
      "regen --target stories260K --prompts bos --n-sequences 3 "
      "--max-new-tokens 8 --seed 1 -q --output " +
          out,
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("regen: 3 sequences"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tokens/s"), std::string::npos) << r.out;
  const RegenData d = LoadRegenData(out, 512);
  EXPECT_EQ(d.size(), 3);
  EXPECT_EQ(d.tokens, GenerateRegenData(
                          [] {
                            RegenConfig c = BosConfig(3, 1);
                            c.max_new_tokens = 8;
                            return c;
                          }(),
                          false)
                          .tokens);

  r = Specbed("regen --prompts stories --limit 1 --n-per-prompt 2 --max-new-tokens 4 -q --output " +
                  dir + "/s.safetensors",
              dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("regen: 2 sequences"), std::string::npos) << r.out;

  // Bad settings: exit code 1 with the reason.
  for (const auto& [prompts, error] : std::vector<std::pair<std::string, std::string>>{
           {"no_such_set", "unknown dataset 'no_such_set'"},
           {"stories --limit 0", "--limit must be -1 (all) or >= 1"}}) {
    r = Specbed("regen --prompts " + prompts + " -q --output " + dir + "/x.safetensors", dir);
    EXPECT_EQ(r.exit_code, 1) << prompts;
    EXPECT_NE(r.err.find(error), std::string::npos) << r.err;
  }
  r = Specbed("regen --prompts bos --n-sequences 2", dir);  // -o/--output missing: usage error
  EXPECT_GE(r.exit_code, 100) << r.err;
  EXPECT_FALSE(fs::exists(dir + "/x.safetensors"));
}

}  // namespace
}  // namespace specbed
