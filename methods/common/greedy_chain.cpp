// The greedy draft chain on the model's device (see greedy_chain.h).
#include "methods/common/greedy_chain.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "harness/engine/device_sampling.h"

namespace specbed {

at::Tensor GreedyChainOnDevice(LlamaModel& model, KvCache& cache, ForwardOutput first, int64_t n,
                               at::Tensor& ids) {
  const int64_t vocab = model.config().vocab_size;
  if (!ids.defined() || ids.numel() < n || ids.device() != model.device()) {
    ids = at::empty({std::max<int64_t>(n, 8)}, at::TensorOptions(at::kLong).device(model.device()));
  }
  ForwardOutput out = std::move(first);
  for (int64_t i = 0; i < n; ++i) {
    at::Tensor slot = ids.narrow(0, i, 1);
    at::argmax_out(slot, out.logits.view({vocab}), 0, /*keepdim=*/true);  // lowest id on ties
    if (i + 1 < n) out = model.Forward(slot.view({1, 1}), cache);
  }
  return CopyToHost(ids.narrow(0, 0, n));  // the chain's one copy
}

}  // namespace specbed
