// The online adapters' teacher is what the target computed while serving
// (methods/common/served_teacher.h):
// - the record of one hand-made request (prompt hidden states, two verify steps with their
//   committed slots and logits) gives the batch layout the students read: features at the right
//   positions (the last token's row zero), the supervised rows and their teacher logits, the whole
//   request (max_tokens 0) or the crop to the last max_tokens tokens;
// - by default the students see the whole served request (sps+osd, specblock+osd: as many tokens
//   as with no cap; a cap keeps that many per request);
// - the bandit's objective `osd` is specblock+osd's loss (the rank head stays as stored; the
//   default objective moves it);
// - OSD (sps+osd, eagle3+osd, specblock+osd) and the SpecBlock bandit make the same number of
//   teacher forwards per update event: none. Every target forward of a served stream is a
//   prefill or a verify step, updates included;
// - the batch is built on the students' device in float32 from served rows of any dtype (the same
//   values as the host layout), and with a bfloat16 target on the ATen path every student trains
//   in float32 on the target's device while the served drafter keeps the target's dtype;
// - ServedTeacherCuda / OnlineUpdateCuda (skipped without CUDA): the batch on cuda equals the
//   CPU batch exactly; an update on cuda equals the CPU update (parameters within lr / 4, the
//   first loss to 1e-4 relative) and makes no counted device-to-host copy (reading the losses
//   afterwards makes one).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "datasets/dataset.h"
#include "harness/engine/device_sampling.h"
#include "harness/engine/speculative_decoder.h"
#include "harness/runner/runner.h"
#include "methods/common/served_teacher.h"
#include "methods/eagle3/eagle3_drafter.h"
#include "methods/method_registry.h"
#include "methods/osd/osd_adapter.h"
#include "methods/specblock/specblock_bandit.h"
#include "methods/specblock/specblock_drafter.h"
#include "methods/specblock/specblock_model.h"
#include "methods/sps/sps_drafter.h"
#include "models/device.h"
#include "models/model_registry.h"
#include "tests/common/cuda_test_util.h"
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

  const ServedRequest all = served.Finish(committed, 0);  // 0: the whole request
  EXPECT_EQ(all.tokens, committed);
  EXPECT_EQ(all.supervised, whole.supervised);
  EXPECT_TRUE(all.features.equal(whole.features));

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

// specblock+bandit knobs for a short stream: one measured query, then every query fires an event
// (buffer 1, s_min 0) in the cold start.
nlohmann::json FastBanditKnobs() {
  return {{"warmup", 1},   {"cold_start", 4}, {"buffer", 1},
          {"interval", 2}, {"s_min", 0.0},    {"adapt_tokens", 64}};
}

struct StreamRun {
  int64_t forwards = 0;  // target forwards during the stream
  int64_t expected = 0;  // prefills + verify steps
  const Adapter* adapter = nullptr;
  std::unique_ptr<Decoder> decoder;
};

// The decoder of `method` with its adapter, before any request.
StreamRun BuildRun(MethodContext context, const std::string& method, const nlohmann::json& knobs) {
  MethodRegistry registry;
  RegisterBuiltinMethods(registry);
  StreamRun run;
  run.decoder = registry.Build(method, context, knobs);
  run.adapter = dynamic_cast<SpeculativeDecoder&>(*run.decoder).adapter();
  return run;
}

// Serves the first `requests` story prompts (32 tokens each) in order, counting target forwards.
void ServeRequests(LoadedTarget& target, StreamRun& run, int requests) {
  const auto prompts = LoadDataset("stories", {});
  const int64_t before = target.model->forward_calls();
  for (int i = 0; i < requests; ++i) {
    const std::vector<int32_t> ids = BuildPromptIds(target, {{"user", prompts[i].turns[0]}});
    const DecodeResult r = testing_util::DecodeIds(target, *run.decoder, ids, 32);
    run.expected += 1;  // prefill
    for (const StepStats& s : r.steps) run.expected += s.n_target_forwards;
  }
  run.forwards = target.model->forward_calls() - before;
}

StreamRun ServeIn(LoadedTarget& target, MethodContext context, const std::string& method,
                  const nlohmann::json& knobs, int requests) {
  StreamRun run = BuildRun(std::move(context), method, knobs);
  ServeRequests(target, run, requests);
  return run;
}

StreamRun Serve(LoadedTarget& target, const std::string& method, const nlohmann::json& knobs,
                int requests) {
  return ServeIn(target, testing_util::CachingContextFor(target), method, knobs, requests);
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
  // The bandit's head/full routing reads a cost model, not the wall clock (deterministic).
  const CostModelClock clock = testing_util::TargetForwardClock(target);
  MethodContext context = testing_util::CachingContextFor(target);
  context.clock = &clock;
  const StreamRun run = ServeIn(target, context, "specblock+bandit", FastBanditKnobs(), 8);
  const auto& bandit = dynamic_cast<const SpecBlockBanditAdapter&>(*run.adapter);
  EXPECT_GE(bandit.stats().events, 2);
  EXPECT_EQ(run.forwards, run.expected) << "specblock+bandit: teacher forwards during events";
}

// The students attend over the context each request was served with unless a cap is asked for
// (a default crop would train on a tail the drafter never served alone): by default an update
// sees as many tokens as with an unbounded cap, and a cap of 16 keeps 16 per request.
TEST(ServedTeacher, StudentsSeeTheWholeServedRequestByDefault) {
  at::set_num_threads(1);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  for (const auto& [method, cap] : std::vector<std::pair<std::string, std::string>>{
           {"sps+osd", "osd_max_tokens"}, {"specblock+osd", "adapt_tokens"}}) {
    auto context_tokens = [&](const nlohmann::json& knobs) {
      const StreamRun run = Serve(target, method, knobs, 4);
      const auto& osd = dynamic_cast<const OsdAdapter&>(*run.adapter);
      EXPECT_GE(osd.stats().updates, 1) << method;
      return osd.stats().context_tokens;
    };
    const int64_t by_default = context_tokens({{"osd_interval", 2}});
    EXPECT_EQ(by_default, context_tokens({{"osd_interval", 2}, {cap, 1 << 16}})) << method;
    const int64_t capped = context_tokens({{"osd_interval", 2}, {cap, 16}});
    EXPECT_GT(capped, 0) << method;
    EXPECT_EQ(capped % 16, 0) << method;
    EXPECT_GT(by_default, capped / 16 * 40) << method;  // every request is > 40 tokens
  }
}

// The bandit's `objective`: osd trains with specblock+osd's loss (forward KL only), so the rank
// head, which only the bandit objective's rank-head CE reaches, is left as stored; the default
// objective moves it.
TEST(ServedTeacher, BanditObjectiveOsdLeavesTheRankHead) {
  at::set_num_threads(1);
  LoadedTarget target = LoadModel("stories260K", at::kFloat);
  const CostModelClock clock = testing_util::TargetForwardClock(target);
  MethodContext context = testing_util::CachingContextFor(target);
  context.clock = &clock;
  auto rank_change = [&](const std::string& objective) {
    nlohmann::json knobs = FastBanditKnobs();
    knobs["objective"] = objective;
    knobs["lr"] = 1e-2;
    StreamRun run = BuildRun(context, "specblock+bandit", knobs);
    const auto& bandit = dynamic_cast<const SpecBlockBanditAdapter&>(*run.adapter);
    std::map<std::string, at::Tensor> stored;  // θ_train's rank head before any event
    for (const auto& [name, p] : bandit.trained().named_parameters()) {
      if (name.rfind("rank_head.", 0) == 0) stored[name] = p.detach().clone();
    }
    EXPECT_EQ(stored.size(), 4u);
    ServeRequests(target, run, 4);
    EXPECT_GE(bandit.stats().events, 1) << objective;
    double change = 0;
    for (const auto& [name, p] : bandit.trained().named_parameters()) {
      if (stored.count(name)) change += (p.detach() - stored[name]).abs().sum().item<double>();
    }
    return change;
  };
  EXPECT_EQ(rank_change("osd"), 0.0);
  EXPECT_GT(rank_change("bandit"), 0.0);
}

// Two hand-made served requests whose hidden states and logits rows are in `dtype` on `device`
// (small integers: exact in bfloat16): request 0 has 5 tokens (supervised 2 and 4), request 1
// has 3 (supervised 2).
std::vector<ServedRequest> HandMadeRequests(at::ScalarType dtype, const at::Device& device) {
  const auto opts = at::TensorOptions().dtype(dtype).device(device);
  ServedRequest a, b;
  a.tokens = {3, 4, 5, 6, 7};
  a.supervised = {2, 4};
  a.teacher = {at::arange(0, 4, opts), at::arange(10, 14, opts)};
  a.features = at::arange(0, 5 * 2, opts).view({5, 2});
  b.tokens = {8, 9, 10};
  b.supervised = {2};
  b.teacher = {at::arange(20, 24, opts)};
  b.features = at::arange(100, 100 + 3 * 2, opts).view({3, 2});
  return {a, b};
}

// The batch of HandMadeRequests, as the host layout gives it (the CPU batch before the students
// moved to the target's device built exactly this).
void ExpectHandMadeBatch(const OnlineBatch& b) {
  const at::Tensor tokens = b.tokens.cpu(), mask = b.loss_mask.cpu();
  EXPECT_TRUE(tokens.equal(at::tensor({3, 4, 5, 6, 7, 8, 9, 10, 0, 0}, at::kLong).view({2, 5})));
  EXPECT_TRUE(b.lengths.cpu().equal(at::tensor({5, 3}, at::kLong)));
  EXPECT_TRUE(mask.equal(at::tensor({0, 1, 0, 1, 0, 0, 1, 0, 0, 0}, at::kFloat).view({2, 5})));
  EXPECT_TRUE(b.teacher_index.cpu().equal(
      at::tensor({-1, 0, -1, 1, -1, -1, 2, -1, -1, -1}, at::kLong).view({2, 5})));
  EXPECT_TRUE(b.host_loss_mask.equal(mask));
  EXPECT_TRUE(b.host_teacher_index.equal(b.teacher_index.cpu()));
  ASSERT_EQ(b.features.scalar_type(), at::kFloat);
  at::Tensor features = at::zeros({2, 5, 2}, at::kFloat);
  features[0].copy_(at::arange(0, 10, at::kFloat).view({5, 2}));
  features[1].narrow(0, 0, 3).copy_(at::arange(100, 106, at::kFloat).view({3, 2}));
  EXPECT_TRUE(b.features.cpu().equal(features));
  ASSERT_EQ(b.teacher_rows.scalar_type(), at::kFloat);
  EXPECT_TRUE(b.teacher_rows.cpu().equal(
      at::stack({at::arange(0, 4, at::kFloat), at::arange(10, 14, at::kFloat),
                 at::arange(20, 24, at::kFloat)})));
  for (const at::Tensor& t :
       {b.tokens, b.lengths, b.loss_mask, b.features, b.teacher_rows, b.teacher_index}) {
    EXPECT_TRUE(SameDevice(t.device(), b.device())) << t.device();
  }
  EXPECT_TRUE(b.host_loss_mask.is_cpu());
  EXPECT_TRUE(b.host_teacher_index.is_cpu());
  // Rows at host indices, on the batch's device; a position that was not supervised is refused.
  const at::Tensor rows = TeacherRowsAtFlat(b, at::tensor({int64_t{6}, int64_t{1}}));
  EXPECT_TRUE(SameDevice(rows.device(), b.device())) << rows.device();
  EXPECT_TRUE(
      rows.cpu().equal(at::stack({at::arange(20, 24, at::kFloat), at::arange(0, 4, at::kFloat)})));
  EXPECT_THROW(TeacherRowsAtFlat(b, at::tensor({int64_t{2}})), Error);
  EXPECT_EQ(TeacherRowsAt(b, b.host_loss_mask).sizes(), at::IntArrayRef({3, 4}));
}

TEST(ServedTeacher, BatchIsFloat32WhateverTheServedDtype) {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const int64_t copies = DeviceToHostCopies();
    const OnlineBatch b = BuildOnlineBatch(HandMadeRequests(dtype, at::kCPU), at::kCPU);
    EXPECT_EQ(DeviceToHostCopies(), copies);
    ExpectHandMadeBatch(b);
    // On the CPU the host layouts are the batch's own tensors (no copy).
    EXPECT_TRUE(b.host_loss_mask.is_same(b.loss_mask));
    EXPECT_TRUE(b.host_teacher_index.is_same(b.teacher_index));
  }
  // Device indices are refused by name (the check reads the host layout).
  const OnlineBatch b = BuildOnlineBatch(HandMadeRequests(at::kFloat, at::kCPU));
  EXPECT_THROW(TeacherRowsAt(b, b.loss_mask.to(at::kMeta)), Error);
}

// A method context whose drafters load like the target (its dtype, on its device), as the CLI
// loads them; models kept in `loaded`.
MethodContext PlacedContext(LoadedTarget& target, std::map<std::string, LoadedTarget>& loaded) {
  MethodContext context;
  context.target = &target;
  context.dtype = target.model->dtype();
  const at::ScalarType dtype = target.model->dtype();
  const at::Device device = target.model->device();
  context.load_model = [&loaded, dtype, device](const std::string& name) -> LoadedTarget& {
    auto it = loaded.find(name);
    if (it == loaded.end()) it = loaded.emplace(name, LoadModel(name, dtype, "", device)).first;
    return it->second;
  };
  return context;
}

void ExpectFloat32On(const std::vector<std::pair<std::string, at::Tensor>>& params,
                     const at::Device& device, const std::string& what) {
  ASSERT_FALSE(params.empty()) << what;
  for (const auto& [name, p] : params) {
    EXPECT_TRUE(SameDevice(p.device(), device))
        << p.device() << " vs " << device << ": " << what << " " << name;
    EXPECT_EQ(p.scalar_type(), at::kFloat) << what << " " << name;
    EXPECT_TRUE(p.requires_grad()) << what << " " << name;
  }
}

// The served drafter's dtype of an OSD decoder.
at::ScalarType ServedDtype(Decoder& decoder) {
  Drafter& drafter = dynamic_cast<SpeculativeDecoder&>(decoder).drafter();
  if (auto* sps = dynamic_cast<SpsDrafter*>(&drafter)) return sps->model().dtype();
  if (auto* eagle = dynamic_cast<Eagle3Drafter*>(&drafter)) return eagle->head().placement().dtype;
  return dynamic_cast<SpecBlockDrafter&>(drafter).model().dtype();
}

// A bfloat16 target on the ATen path (forced on the CPU, as a GPU runs it): every online
// student trains in float32 on the target's device while the served drafter stays bfloat16.
TEST(ServedTeacher, StudentsTrainInFloat32OnTheTargetDeviceWithABfloat16Target) {
  at::set_num_threads(1);
  SetCpuForwardPathOverride(ForwardPath::kAten);
  LoadedTarget target = LoadModel("stories260K", at::kBFloat16);
  ASSERT_EQ(target.model->forward_path(), ForwardPath::kAten);
  const at::Device device = target.model->device();
  std::map<std::string, LoadedTarget> loaded;
  for (const auto& [method, knobs] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"sps+osd", {{"osd_interval", 2}}},
           {"eagle3+osd", {{"osd_interval", 2}}},
           {"specblock+osd", {{"osd_interval", 2}, {"adapt_tokens", 64}}}}) {
    StreamRun run = ServeIn(target, PlacedContext(target, loaded), method, knobs, 4);
    const auto& osd = dynamic_cast<const OsdAdapter&>(*run.adapter);
    EXPECT_EQ(osd.stats().updates, 2) << method;
    ASSERT_EQ(osd.stats().losses.size(), 2u) << method;
    for (double l : osd.stats().losses) EXPECT_TRUE(std::isfinite(l)) << method;
    ExpectFloat32On(osd.student().Parameters(), device, method);
    EXPECT_EQ(ServedDtype(*run.decoder), at::kBFloat16) << method;
  }
  StreamRun run =
      ServeIn(target, PlacedContext(target, loaded), "specblock+bandit", FastBanditKnobs(), 4);
  const auto& bandit = dynamic_cast<const SpecBlockBanditAdapter&>(*run.adapter);
  EXPECT_GE(bandit.stats().events, 1);
  ExpectFloat32On(bandit.trained().named_parameters(), device, "specblock+bandit");
  EXPECT_EQ(ServedDtype(*run.decoder), at::kBFloat16);
  SetCpuForwardPathOverride(ForwardPath::kAuto);
}

TEST(ServedTeacherCuda, BatchOnCudaEqualsTheCpuBatch) {
  SPECBED_SKIP_WITHOUT_CUDA();
  const at::Device cuda("cuda");
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const std::vector<ServedRequest> requests = HandMadeRequests(dtype, cuda);
    const int64_t copies = DeviceToHostCopies();
    const OnlineBatch b = BuildOnlineBatch(requests, cuda);
    EXPECT_EQ(DeviceToHostCopies(), copies) << "building the batch copies nothing back";
    EXPECT_TRUE(SameDevice(b.device(), cuda)) << b.device();
    ExpectHandMadeBatch(b);
  }
}

// The largest |a - b| over two parameter lists of the same names.
double MaxParamDiff(const std::vector<std::pair<std::string, at::Tensor>>& a,
                    const std::vector<std::pair<std::string, at::Tensor>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    diff = std::max(
        diff, (a[i].second.detach().cpu() - b[i].second.detach().cpu()).abs().max().item<double>());
  }
  return diff;
}

// stories260K in float32 on the CPU (row path) and on cuda (ATen path), drafters placed alike.
struct CpuAndCuda {
  LoadedTarget cpu = LoadModel("stories260K", at::kFloat);
  LoadedTarget cuda = LoadModel("stories260K", at::kFloat, "", at::Device("cuda"));
  std::map<std::string, LoadedTarget> cpu_loaded, cuda_loaded;
  StreamRun ServeOnCpu(const std::string& method, const nlohmann::json& knobs, int requests) {
    return ServeIn(cpu, PlacedContext(cpu, cpu_loaded), method, knobs, requests);
  }
  StreamRun ServeOnCuda(const std::string& method, const nlohmann::json& knobs, int requests) {
    return ServeIn(cuda, PlacedContext(cuda, cuda_loaded), method, knobs, requests);
  }
};

// One OSD update over the same served requests on the CPU (row path) and on cuda (float32
// target): the students' parameters agree within lr / 4 (AdamW's first step moves a parameter
// by about lr whatever its gradient's size, so a sign decided by rounding would differ by 2 lr),
// the first loss to 1e-4 relative; the update makes no counted device-to-host copy (the losses
// are read afterwards, one copy), and the students live on cuda in float32.
TEST(OnlineUpdateCuda, OsdUpdateOnCudaMatchesCpu) {
  SPECBED_SKIP_WITHOUT_CUDA();
  at::set_num_threads(1);
  const at::Device cuda("cuda");
  CpuAndCuda both;
  for (const auto& [method, knobs] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"sps+osd", {{"osd_interval", 1000}}},
           {"eagle3+osd", {{"osd_interval", 1000}}},
           {"specblock+osd", {{"osd_interval", 1000}, {"adapt_tokens", 64}}}}) {
    SCOPED_TRACE(method);
    StreamRun on_cpu = both.ServeOnCpu(method, knobs, 3);
    StreamRun on_cuda = both.ServeOnCuda(method, knobs, 3);
    auto& cpu_osd =
        dynamic_cast<OsdAdapter&>(*dynamic_cast<SpeculativeDecoder&>(*on_cpu.decoder).adapter());
    auto& cuda_osd =
        dynamic_cast<OsdAdapter&>(*dynamic_cast<SpeculativeDecoder&>(*on_cuda.decoder).adapter());
    ExpectFloat32On(cuda_osd.student().Parameters(), cuda, method);
    cpu_osd.Update();
    const int64_t copies = DeviceToHostCopies();
    cuda_osd.Update();
    EXPECT_EQ(DeviceToHostCopies() - copies, 0) << "counted device-to-host copies in an update";
    ASSERT_EQ(cuda_osd.stats().updates, 1);
    EXPECT_EQ(DeviceToHostCopies() - copies, 1) << "reading the losses: one copy";
    ASSERT_EQ(cpu_osd.stats().supervised_positions, cuda_osd.stats().supervised_positions)
        << "the two streams recorded different corrections: no update to compare";
    const double lr = 3e-4;  // osd_lr's default
    EXPECT_LE(MaxParamDiff(cpu_osd.student().Parameters(), cuda_osd.student().Parameters()),
              lr / 4);
    ASSERT_EQ(cuda_osd.stats().losses.size(), 1u);
    EXPECT_NEAR(cuda_osd.stats().losses[0], cpu_osd.stats().losses[0],
                1e-4 * std::abs(cpu_osd.stats().losses[0]));
  }
}

// One bandit event (the cold start's first, head-only, drawn from the fixed seed) on the CPU and
// on cuda over the same stream: θ_train on cuda in float32 and equal to the CPU's within lr / 4.
TEST(OnlineUpdateCuda, BanditEventOnCudaMatchesCpu) {
  SPECBED_SKIP_WITHOUT_CUDA();
  at::set_num_threads(1);
  const at::Device cuda("cuda");
  CpuAndCuda both;
  StreamRun on_cpu = both.ServeOnCpu("specblock+bandit", FastBanditKnobs(), 2);
  StreamRun on_cuda = both.ServeOnCuda("specblock+bandit", FastBanditKnobs(), 2);
  const auto& cpu_bandit = dynamic_cast<const SpecBlockBanditAdapter&>(*on_cpu.adapter);
  const auto& cuda_bandit = dynamic_cast<const SpecBlockBanditAdapter&>(*on_cuda.adapter);
  ASSERT_EQ(cpu_bandit.stats().events, 1);
  ASSERT_EQ(cuda_bandit.stats().events, 1);
  ExpectFloat32On(cuda_bandit.trained().named_parameters(), cuda, "specblock+bandit");
  const double lr = 1e-4;  // the bandit's lr default
  EXPECT_LE(MaxParamDiff(cpu_bandit.trained().named_parameters(),
                         cuda_bandit.trained().named_parameters()),
            lr / 4);
}

}  // namespace
}  // namespace specbed
