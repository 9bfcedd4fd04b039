// The draft chains on the model's device (see draft_chain.h).
#include "methods/common/draft_chain.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "models/device.h"

namespace specbed {
namespace {

// The int64 staging buffer of a chain's ids on the model's device (grown, reused).
void ReserveIds(const LlamaModel& model, int64_t n, at::Tensor& ids) {
  if (!ids.defined() || ids.numel() < n || !SameDevice(ids.device(), model.device())) {
    ids = at::empty({std::max<int64_t>(n, 8)}, at::TensorOptions(at::kLong).device(model.device()));
  }
}

constexpr int64_t kGreedyPick = 0;  // the greedy pick's graph key (it bakes in no buffer)

}  // namespace

at::Tensor GreedyChainOnDevice(LlamaModel& model, KvCache& cache, ForwardOutput first, int64_t n,
                               at::Tensor& ids) {
  const int64_t vocab = model.config().vocab_size;
  ReserveIds(model, n, ids);
  auto pick = [&](int64_t, const at::Tensor& logits, const at::Tensor& id) {
    at::Tensor out = id;  // a handle: the out= overload takes a non-const reference
    at::argmax_out(out, logits.view({vocab}), 0, /*keepdim=*/true);  // lowest id on ties
  };
  if (model.ChainsSteps(n)) {  // the whole chain as one captured program
    model.DecodeChain(first.logits, cache, n, ids, pick, {kGreedyPick});
  } else {
    ForwardOutput out = std::move(first);
    for (int64_t i = 0; i < n; ++i) {
      const at::Tensor slot = ids.narrow(0, i, 1);
      pick(i, out.logits, slot);
      if (i + 1 < n) out = model.Forward(slot.view({1, 1}), cache);
    }
  }
  return CopyToHost(ids.narrow(0, 0, n));  // the chain's one copy
}

at::Tensor SampledChainOnDevice(LlamaModel& model, KvCache& cache, ForwardOutput first, int64_t n,
                                Sampler& sampler, DeviceDraftSampler& draws, at::Tensor& ids) {
  const int64_t vocab = model.config().vocab_size;
  ReserveIds(model, n, ids);
  draws.Begin(n, vocab, model.device(), sampler.rng());
  auto pick = [&](int64_t i, const at::Tensor& logits, const at::Tensor& id) {
    draws.Sample(logits.view({1, vocab}), sampler.params(), i, id);
  };
  if (model.ChainsSteps(n) && DraftFaultForTesting() == DraftFault::kNone) {
    model.DecodeChain(first.logits, cache, n, ids, pick, draws.GraphKey(sampler.params()));
  } else {  // a planted draft fault keeps host state between picks: never captured
    ForwardOutput out = std::move(first);
    for (int64_t i = 0; i < n; ++i) {
      const at::Tensor slot = ids.narrow(0, i, 1);
      pick(i, out.logits, slot);
      if (i + 1 < n) out = model.Forward(slot.view({1, 1}), cache);
    }
  }
  return draws.TokensToHost();  // the chain's one copy
}

}  // namespace specbed
