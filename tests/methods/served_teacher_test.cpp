// The online adapters' teacher is what the target computed while serving
// (methods/common/served_teacher.h):
// - the record of one hand-made request (prompt hidden states, two verify steps with their
//   committed slots and logits) gives the batch layout the students read: features at the right
//   positions (the last token's row zero), the supervised rows and their teacher logits, the crop
//   to the last max_tokens tokens;
// - OSD (sps+osd, eagle3+osd, specblock+osd) and the SpecBlock bandit make the same number of
//   teacher forwards per update event: none. Every target forward of a served stream is a
//   prefill or a verify step, updates included.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <string>
#include <vector>

#include "datasets/dataset.h"
#include "harness/base/error.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/runner/runner.h"
#include "methods/common/served_teacher.h"
#include "methods/method_registry.h"
#include "methods/osd/osd_adapter.h"
#include "methods/specblock/specblock_bandit.h"
#include "models/model_registry.h"
#include "tests/methods/method_test_util.h"
#include "tests/methods/story_test_util.h"

namespace specbed {
namespace {

// Hidden state of position j, layer l: the value 10 j + l in every feature.
at::Tensor Hidden(int64_t first, int64_t n, int64_t layer) {
  return (at::arange(first, first + n, at::kFloat) * 10 + layer).view({1, n, 1}).expand({1, n, 2});
}

TEST(ServedTeacher, KeepsTheServedRowsInTheBatchLayout) {
  const std::vector<int32_t> prompt = {5, 6, 7};
  DraftBegin begin;
  begin.prompt = &prompt;
  begin.hidden = {Hidden(0, 3, 0), Hidden(0, 3, 1)};
  ServedTeacher served;
  served.Begin(begin);
  // Step 1: root at position 3, one accepted node (position 4), bonus at 5 sampled at slot 2.
  Verdict v1;
  v1.path = {1};
  v1.hidden = {Hidden(3, 2, 0), Hidden(3, 2, 1)};
  v1.logits = at::arange(0, 4 * 3, at::kFloat).view({4, 3});  // slot s row = [3s, 3s+1, 3s+2]
  served.Observe(v1, /*supervise=*/true, /*bonus_index=*/5);
  // Step 2: root at position 5, nothing accepted, bonus at 6 sampled at slot 0 (not supervised).
  Verdict v2;
  v2.hidden = {Hidden(5, 1, 0), Hidden(5, 1, 1)};
  v2.logits = at::full({2, 3}, -1.f);
  served.Observe(v2, /*supervise=*/false, 6);
  const std::vector<int32_t> committed = {5, 6, 7, 8, 9, 10, 11};  // 3 prompt + 4 generated

  const ServedRequest whole = served.Finish(committed, 64);
  EXPECT_EQ(whole.tokens, committed);
  EXPECT_EQ(whole.supervised, std::vector<int64_t>({5}));
  ASSERT_EQ(whole.features.size(0), 7);
  for (int64_t j = 0; j < 6; ++j) {
    EXPECT_EQ(whole.features[j][0].item<float>(), 10.f * j) << j;      // layer 0
    EXPECT_EQ(whole.features[j][2].item<float>(), 10.f * j + 1) << j;  // layer 1
  }
  EXPECT_EQ(whole.features[6].abs().sum().item<float>(), 0.f);  // never forwarded

  const ServedRequest tail = served.Finish(committed, 4);  // tokens 3..6
  EXPECT_EQ(tail.tokens, std::vector<int32_t>({8, 9, 10, 11}));
  EXPECT_EQ(tail.supervised, std::vector<int64_t>({2}));
  EXPECT_EQ(tail.features[0][0].item<float>(), 30.f);

  const OnlineBatch b = BuildOnlineBatch({whole, tail});
  EXPECT_EQ(b.tokens.sizes(), at::IntArrayRef({2, 7}));
  EXPECT_EQ(b.loss_mask.sum().item<float>(), 2.f);
  EXPECT_EQ(b.loss_mask[0][4].item<float>(), 1.f);  // p - 1 for p = 5
  EXPECT_EQ(b.loss_mask[1][1].item<float>(), 1.f);
  EXPECT_EQ(b.features.sizes(), at::IntArrayRef({2, 7, 4}));
  const at::Tensor rows = TeacherRowsAt(b, b.loss_mask);
  ASSERT_EQ(rows.sizes(), at::IntArrayRef({2, 3}));
  EXPECT_TRUE(rows[0].equal(at::tensor({6.f, 7.f, 8.f})));  // slot 2 of step 1
  EXPECT_TRUE(rows[1].equal(at::tensor({6.f, 7.f, 8.f})));
  EXPECT_THROW(TeacherRowsAtFlat(b, at::tensor({int64_t{0}})), Error);  // not supervised
}

// Records every served request of a decoder into a ServedTeacher (every bonus supervised).
class Recorder : public Adapter {
 public:
  void BeginSequence(const DraftBegin& begin) override {
    served.Begin(begin);
    position = static_cast<int64_t>(begin.prompt->size());
  }
  void Observe(const DraftTree& tree, const Verdict& verdict) override {
    served.Observe(verdict, true, position + verdict.n_accepted() + 1);
    position += verdict.n_accepted() + 1;
  }
  void EndSequence(const std::vector<int32_t>& committed, int64_t prompt_len) override {
    request = served.Finish(committed, 1 << 20);
  }
  ServedTeacher served;
  int64_t position = 0;
  ServedRequest request;
};

// What the adapters keep equals a fresh target forward over the committed tokens: the hidden
// states at every position but the last, and the logits that predicted each supervised token.
TEST(ServedTeacher, EqualsAFreshTargetForwardOverTheRequest) {
  at::set_num_threads(1);
  testing_util::StoriesMethods s;
  for (const std::string method : {"specblock", "eagle3"}) {
    std::unique_ptr<Decoder> decoder =
        s.registry.Build(method, s.context, nlohmann::json::object());
    auto& spec = dynamic_cast<SpeculativeDecoder&>(*decoder);
    auto recorder = std::make_unique<Recorder>();
    Recorder* rec = recorder.get();
    spec.SetAdapter(std::move(recorder));
    const std::vector<int32_t> ids =
        BuildPromptIds(s.target, {{"user", "Once upon a time, there was a little dog named"}});
    const DecodeResult r = testing_util::DecodeIds(s.target, *decoder, ids, 40);
    const ServedRequest& req = rec->request;
    const int64_t n = static_cast<int64_t>(req.tokens.size());
    ASSERT_GE(req.supervised.size(), 3u) << method;
    KvCache fresh = s.target.model->NewCache(1, n);
    ForwardOptions fo;
    fo.logits = LogitsMode::kAll;
    fo.hidden_layers = spec.drafter().TargetHiddenLayers();
    std::vector<int64_t> all(req.tokens.begin(), req.tokens.end());
    const ForwardOutput out =
        s.target.model->Forward(at::tensor(all, at::kLong).view({1, n}), fresh, fo);
    const at::Tensor hidden = at::cat(out.hidden, -1)[0];
    EXPECT_TRUE(
        at::allclose(req.features.narrow(0, 0, n - 1), hidden.narrow(0, 0, n - 1), 1e-4, 1e-4))
        << method << ": max diff "
        << (req.features.narrow(0, 0, n - 1) - hidden.narrow(0, 0, n - 1))
               .abs()
               .max()
               .item<float>();
    const at::Tensor logits = out.logits[0];
    for (size_t k = 0; k < req.supervised.size(); ++k) {
      const int64_t p = req.supervised[k];
      EXPECT_TRUE(at::allclose(req.teacher[k], logits[p - 1], 1e-4, 1e-4))
          << method << " supervised index " << p;
    }
  }
}

struct StreamRun {
  int64_t forwards = 0;  // target forwards during the stream
  int64_t expected = 0;  // prefills + verify steps
  const Adapter* adapter = nullptr;
  std::unique_ptr<Decoder> decoder;
};

StreamRun Serve(LoadedTarget& target, const std::string& method, const nlohmann::json& knobs,
                int requests) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  MethodContext context = testing_util::CachingContextFor(target);
  StreamRun run;
  run.decoder = registry.Build(method, context, knobs);
  run.adapter = dynamic_cast<SpeculativeDecoder&>(*run.decoder).adapter();
  const auto prompts = LoadDataset("stories", {});
  const int64_t before = target.model->forward_calls();
  for (int i = 0; i < requests; ++i) {
    const std::vector<int32_t> ids = BuildPromptIds(target, {{"user", prompts[i].turns[0]}});
    const DecodeResult r = testing_util::DecodeIds(target, *run.decoder, ids, 32);
    run.expected += 1;  // prefill
    for (const StepStats& s : r.steps) run.expected += s.n_target_forwards;
  }
  run.forwards = target.model->forward_calls() - before;
  return run;
}

TEST(ServedTeacher, OnlineUpdatesRunNoTeacherForward) {
  at::set_num_threads(1);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  for (const auto& [method, knobs] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"sps+osd", {{"osd_interval", 2}}},
           {"eagle3+osd", {{"osd_interval", 2}}},
           {"specblock+osd", {{"osd_interval", 2}, {"adapt_tokens", 64}}}}) {
    const StreamRun run = Serve(target, method, knobs, 6);
    const auto& osd = dynamic_cast<const OsdAdapter&>(*run.adapter);
    EXPECT_EQ(osd.stats().updates, 3) << method;
    EXPECT_EQ(run.forwards, run.expected) << method << ": teacher forwards during updates";
  }
  const StreamRun run = Serve(target, "specblock+bandit",
                              {{"warmup", 1},
                               {"cold_start", 4},
                               {"buffer", 1},
                               {"interval", 2},
                               {"s_min", 0.0},
                               {"adapt_tokens", 64}},
                              8);
  const auto& bandit = dynamic_cast<const SpecBlockBanditAdapter&>(*run.adapter);
  EXPECT_GE(bandit.stats().events, 2);
  EXPECT_EQ(run.forwards, run.expected) << "specblock+bandit: teacher forwards during events";
}

}  // namespace
}  // namespace specbed
