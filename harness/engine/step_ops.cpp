// The ops of a decode step and of a verify step (see step_ops.h).
#include "harness/engine/step_ops.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <random>

#include "base/error.h"
#include "harness/engine/device_sampling.h"
#include "harness/engine/sampler.h"
#include "harness/engine/verifier.h"

namespace specbed {
namespace {

// Warm-up steps at each context before anything is recorded: the buffers reach their steady size.
constexpr int kWarmSteps = 2;

at::Tensor RandomIds(int64_t n, int64_t vocab, std::mt19937_64& rng) {
  at::Tensor ids = at::empty({1, n}, at::kLong);
  int64_t* p = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab));
  return ids;
}

void CheckTraceable(const LlamaModel& model, int64_t width, int64_t context_a, int64_t context_b) {
  SPECBED_CHECK(model.forward_path() == ForwardPath::kAten,
                "op counts: the model must run the ATen forward path (bench --forward aten)");
  const int64_t longest = std::max(context_a, context_b) + width + 1;
  SPECBED_CHECK(context_a >= 1 && context_b >= 1 && longest <= model.config().max_seq_len,
                "op counts: contexts ", context_a, " and ", context_b, " (each >= 1) + width ",
                width, " must fit max_seq_len ", model.config().max_seq_len);
}

// The cache holding the first `length` tokens of `context_ids` [1, >= length]: truncated when
// it is at least that long, else filled again from the start (untraced).
void SetLength(LlamaModel& model, KvCache& cache, const at::Tensor& context_ids, int64_t length) {
  if (cache.length() >= length) {
    cache.Truncate(length);
    return;
  }
  cache.Truncate(0);
  ForwardOptions no_logits;
  no_logits.logits = LogitsMode::kNone;
  model.Forward(context_ids.narrow(1, 0, length), cache, no_logits);
}

// `step` (which starts from a cache holding the context) warmed up at both contexts, then
// recorded at each; `context_ids` holds at least the longer context.
StepOps Record(LlamaModel& model, KvCache& cache, const at::Tensor& context_ids, int64_t context_a,
               int64_t context_b, const std::function<void()>& step) {
  for (int64_t context : {context_a, context_b}) {
    for (int i = 0; i < kWarmSteps; ++i) {
      SetLength(model, cache, context_ids, context);
      step();
    }
  }
  StepOps out;
  out.context_a = context_a;
  out.context_b = context_b;
  out.n_layers = model.config().n_layers;
  std::vector<OpRecord> traces[2];
  for (int k = 0; k < 2; ++k) {
    SetLength(model, cache, context_ids, k == 0 ? context_a : context_b);
    const int64_t copies = DeviceToHostCopies();
    AllocationCount allocations;
    OpTrace trace;
    step();
    trace.Stop();
    traces[k] = trace.ops();
    if (k == 0) {
      out.allocations = allocations.count();
      out.host_copies = DeviceToHostCopies() - copies;
    }
  }
  out.counts = CountOps(traces[0]);
  out.layer_launching = out.counts.in_layers;
  out.difference = TraceDifference(traces[0], traces[1]);
  return out;
}

}  // namespace

StepOps TraceDecodeStep(LlamaModel& model, int64_t context_a, int64_t context_b) {
  CheckTraceable(model, 1, context_a, context_b);
  const int64_t vocab = model.config().vocab_size;
  std::mt19937_64 rng(42);
  KvCache cache = model.NewCache(1, std::max(context_a, context_b) + 1);
  const at::Tensor context_ids = RandomIds(std::max(context_a, context_b), vocab, rng);
  const at::Tensor step_ids = RandomIds(1, vocab, rng);
  int64_t* step_id = step_ids.data_ptr<int64_t>();
  Sampler sampler(SamplingParams{}, 1);
  DeviceVerifier device;
  StepOps out = Record(model, cache, context_ids, context_a, context_b, [&] {
    const ForwardOutput o = model.Forward(step_ids, cache);
    step_id[0] = device.SampleToken(o.logits, sampler) % vocab;
  });
  out.step = "decode";
  out.width = 1;
  return out;
}

StepOps TraceVerifyStep(LlamaModel& model, int64_t n_nodes, int64_t context_a, int64_t context_b) {
  SPECBED_CHECK(n_nodes >= 1, "op counts: a verify step needs >= 1 node, got ", n_nodes);
  // Room for the rows the verifier runs: padded up to the bucket when the model replays steps.
  const int64_t width = StepBucket(n_nodes + 1);
  CheckTraceable(model, width, context_a, context_b);
  const int64_t vocab = model.config().vocab_size;
  std::mt19937_64 rng(7);
  KvCache cache = model.NewCache(1, std::max(context_a, context_b) + width);
  const at::Tensor context_ids = RandomIds(std::max(context_a, context_b), vocab, rng);
  DraftTree tree;
  for (int32_t i = 0; i < n_nodes; ++i) {
    tree.AddNode(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)),
                 i == 0 ? -1 : (i - 1) / 2);
  }
  const auto root = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  Sampler sampler(SamplingParams{}, 1);
  TreeVerifier verifier(model);
  Verdict verdict;
  StepOps out = Record(model, cache, context_ids, context_a, context_b, [&] {
    verifier.Verify(root, tree, VerifyRule::kGreedy, sampler, cache, {}, verdict);
  });
  out.step = "verify";
  out.width = n_nodes + 1;
  return out;
}

}  // namespace specbed
