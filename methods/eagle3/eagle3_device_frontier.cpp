// EAGLE-3's beam tree on the head's device (see eagle3_device_frontier.h).
// Checked by: tests/methods/eagle3_drafter_test.cpp.
#include "methods/eagle3/eagle3_device_frontier.h"

#include <ATen/ATen.h>

#include <algorithm>

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
  GrowBatch({{this, &head, root_hidden, root_logits, context_len, layers, top_k, &out}});
}

void Eagle3DeviceFrontier::GrowBatch(const std::vector<Job>& jobs) {
  int64_t layers = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    SPECBED_CHECK(jobs[i].frontier != nullptr && jobs[i].head != nullptr && jobs[i].out != nullptr,
                  "eagle3 device frontier: job ", i, " has no frontier, head or output");
    for (size_t j = 0; j < i; ++j) {
      SPECBED_CHECK(jobs[j].frontier != jobs[i].frontier, "eagle3 device frontier: jobs ", j,
                    " and ", i, " share a frontier");
    }
    jobs[i].frontier->Start(jobs[i]);
    layers = std::max(layers, jobs[i].layers);
  }
  std::vector<Eagle3DeviceRows> rows;
  std::vector<Eagle3DeviceFrontier*> growing;
  for (int64_t d = 2; d <= layers; ++d) {
    rows.clear();
    growing.clear();
    for (const Job& job : jobs) {
      if (job.layers < d) continue;
      growing.push_back(job.frontier);
      rows.push_back(job.frontier->LayerRows(d));
    }
    Eagle3Head::ForwardBatch(rows);
    for (Eagle3DeviceFrontier* f : growing) f->AddLayer();
  }
  for (const Job& job : jobs) job.frontier->Download();
}

void Eagle3DeviceFrontier::Start(const Job& job) {
  const int64_t k = job.top_k;
  SPECBED_CHECK(job.layers >= 1 && k >= 1 && job.context_len >= 1,
                "eagle3 device frontier: layers, top_k and the context must be >= 1 (got ",
                job.layers, ", ", k, ", ", job.context_len, ")");
  job_ = job;
  const at::Device device = job.root_logits.device();
  const int64_t total = k + (job.layers - 1) * k * k;
  if (!packed_.defined() || packed_.size(1) < total || !SameDevice(packed_.device(), device)) {
    packed_ = at::empty({4, total}, at::TensorOptions().dtype(at::kInt).device(device));
  }
  self_rows_ = at::eye(k, at::TensorOptions().dtype(at::kBool).device(device));
  context_ = at::ones({k, job.context_len}, self_rows_.options());
  AddChildren(job.root_logits, at::Tensor(), at::Tensor(), 0, k,
              job.head->draft_to_target_tensor());
  tree_mask_ = self_rows_;  // [k, (d-1) k]: the rows of layer d's frontier
  begin_ = 0;
  end_ = k;
}

Eagle3DeviceRows Eagle3DeviceFrontier::LayerRows(int64_t d) {
  const int64_t k = job_.top_k;
  const at::Tensor scores = packed_[3].view(at::kFloat);
  const at::Tensor beam =
      std::get<1>(at::sort(scores.narrow(0, begin_, end_ - begin_), /*stable=*/true, /*dim=*/0,
                           /*descending=*/true))
          .narrow(0, 0, k);
  frontier_ = beam + begin_;
  // The head row that produced each frontier node: the root's at layer 2, else its parent's
  // row of the previous call (candidate begin + f k + r came from row f).
  const at::Tensor source = beam.div(k, "floor");
  const at::Tensor features = d == 2 ? job_.root_hidden.expand({k, job_.root_hidden.size(1)})
                                     : job_.out->hidden.index_select(0, source);
  if (d > 2) tree_mask_ = at::cat({tree_mask_.index_select(0, source), self_rows_}, 1);
  const int64_t position = job_.context_len - 1 + (d - 1);
  return job_.head->DeviceRows(
      features, packed_[0].index_select(0, frontier_).to(at::kLong),
      at::full({k}, position, at::TensorOptions().dtype(at::kLong).device(scores.device())),
      at::cat({context_, tree_mask_}, 1), position + 1, *job_.out);
}

void Eagle3DeviceFrontier::AddLayer() {
  const int64_t k = job_.top_k;
  AddChildren(job_.out->logits, frontier_, packed_[3].view(at::kFloat).index_select(0, frontier_),
              end_, k, job_.head->draft_to_target_tensor());
  begin_ = end_;
  end_ += k * k;
}

void Eagle3DeviceFrontier::Download() {
  const TransferScope transfer(Transfer::kDeviceToHost);
  size_ = end_;
  host_ = packed_.narrow(1, 0, size_).to(at::kCPU).contiguous();
  job_ = Job{};
}

}  // namespace specbed
