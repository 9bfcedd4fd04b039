// The draft chains on the model's device (see draft_chain.h).
#include "methods/common/draft_chain.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace specbed {
namespace {

// The int64 staging buffer of a chain's ids on the model's device (grown, reused).
void ReserveIds(const LlamaModel& model, int64_t n, at::Tensor& ids) {
  if (!ids.defined() || ids.numel() < n || ids.device() != model.device()) {
    ids = at::empty({std::max<int64_t>(n, 8)}, at::TensorOptions(at::kLong).device(model.device()));
  }
}

}  // namespace

at::Tensor GreedyChainOnDevice(LlamaModel& model, KvCache& cache, ForwardOutput first, int64_t n,
                               at::Tensor& ids) {
  const int64_t vocab = model.config().vocab_size;
  ReserveIds(model, n, ids);
  ForwardOutput out = std::move(first);
  for (int64_t i = 0; i < n; ++i) {
    at::Tensor slot = ids.narrow(0, i, 1);
    at::argmax_out(slot, out.logits.view({vocab}), 0, /*keepdim=*/true);  // lowest id on ties
    if (i + 1 < n) out = model.Forward(slot.view({1, 1}), cache);
  }
  return CopyToHost(ids.narrow(0, 0, n));  // the chain's one copy
}

at::Tensor SampledChainOnDevice(LlamaModel& model, KvCache& cache, ForwardOutput first, int64_t n,
                                Sampler& sampler, DeviceDraftSampler& draws, at::Tensor& ids) {
  const int64_t vocab = model.config().vocab_size;
  ReserveIds(model, n, ids);
  draws.Begin(n, vocab, model.device(), sampler.rng());
  ForwardOutput out = std::move(first);
  for (int64_t i = 0; i < n; ++i) {
    const at::Tensor slot = ids.narrow(0, i, 1);
    draws.Sample(out.logits.view({1, vocab}), sampler.params(), i, slot);
    if (i + 1 < n) out = model.Forward(slot.view({1, 1}), cache);
  }
  return draws.TokensToHost();  // the chain's one copy
}

}  // namespace specbed
