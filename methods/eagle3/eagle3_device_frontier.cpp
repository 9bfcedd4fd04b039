// EAGLE-3's beam tree on the head's device (see eagle3_device_frontier.h).
// Checked by: tests/methods/eagle3_drafter_test.cpp.
#include "methods/eagle3/eagle3_device_frontier.h"

#include <ATen/ATen.h>

#include "base/error.h"
#include "kernels/engine_counters.h"
#include "models/device.h"

namespace specbed {

void Eagle3DeviceFrontier::AddChildren(const at::Tensor& logits, const at::Tensor& parents,
                                       const at::Tensor& parent_scores, int64_t at, int64_t k,
                                       const at::Tensor& draft_to_target) {
  const int64_t rows = logits.size(0), n = rows * k;
  const at::Tensor rank =
      std::get<1>(at::sort(logits, /*stable=*/true, /*dim=*/-1, /*descending=*/true))
          .narrow(1, 0, k);
  const at::Tensor logp =
      (logits.gather(1, rank) - at::logsumexp(logits, -1, /*keepdim=*/true)).clamp_max(0.0);
  const at::Tensor scores = parents.defined() ? parent_scores.unsqueeze(1) + logp : logp;
  packed_[0].narrow(0, at, n).copy_(draft_to_target.index_select(0, rank.flatten()));
  if (parents.defined()) {
    packed_[1].narrow(0, at, n).view({rows, k}).copy_(parents.unsqueeze(1).expand({rows, k}));
  } else {
    packed_[1].narrow(0, at, n).fill_(-1);
  }
  packed_[2].view(at::kFloat).narrow(0, at, n).copy_(logp.flatten());
  packed_[3].view(at::kFloat).narrow(0, at, n).copy_(scores.flatten());
}

void Eagle3DeviceFrontier::Grow(Eagle3Head& head, const at::Tensor& root_hidden,
                                const at::Tensor& root_logits, int64_t context_len, int64_t layers,
                                int64_t top_k, Eagle3HeadOutput& out) {
  const int64_t k = top_k;
  SPECBED_CHECK(layers >= 1 && k >= 1 && context_len >= 1,
                "eagle3 device frontier: layers, top_k and the context must be >= 1 (got ", layers,
                ", ", k, ", ", context_len, ")");
  const at::Device device = root_logits.device();
  const int64_t total = k + (layers - 1) * k * k;
  if (!packed_.defined() || packed_.size(1) < total || !SameDevice(packed_.device(), device)) {
    packed_ = at::empty({4, total}, at::TensorOptions().dtype(at::kInt).device(device));
  }
  const at::Tensor& d2t = head.draft_to_target_tensor();
  const at::Tensor scores = packed_[3].view(at::kFloat);
  const at::TensorOptions long_options = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor self_rows = at::eye(k, at::TensorOptions().dtype(at::kBool).device(device));
  const at::Tensor context = at::ones({k, context_len}, self_rows.options());
  AddChildren(root_logits, at::Tensor(), at::Tensor(), 0, k, d2t);
  at::Tensor tree_mask = self_rows;  // [k, (d-1) k]: the rows of layer d's frontier
  int64_t begin = 0, end = k;
  for (int64_t d = 2; d <= layers; ++d) {
    const at::Tensor beam =
        std::get<1>(at::sort(scores.narrow(0, begin, end - begin), /*stable=*/true, /*dim=*/0,
                             /*descending=*/true))
            .narrow(0, 0, k);
    const at::Tensor frontier = beam + begin;
    // The head row that produced each frontier node: the root's at layer 2, else its parent's
    // row of the previous call (candidate begin + f k + r came from row f).
    const at::Tensor source = beam.div(k, "floor");
    const at::Tensor features =
        d == 2 ? root_hidden.expand({k, root_hidden.size(1)}) : out.hidden.index_select(0, source);
    if (d > 2) tree_mask = at::cat({tree_mask.index_select(0, source), self_rows}, 1);
    const int64_t position = context_len - 1 + (d - 1);
    head.ForwardOnDevice(features, packed_[0].index_select(0, frontier).to(at::kLong),
                         at::full({k}, position, long_options), at::cat({context, tree_mask}, 1),
                         position + 1, out);
    AddChildren(out.logits, frontier, scores.index_select(0, frontier), end, k, d2t);
    begin = end;
    end += k * k;
  }
  const TransferScope transfer(Transfer::kDeviceToHost);
  host_ = packed_.narrow(1, 0, total).to(at::kCPU).contiguous();
  size_ = total;
}

}  // namespace specbed
