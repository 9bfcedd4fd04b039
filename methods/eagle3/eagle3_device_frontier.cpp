// EAGLE-3's beam tree on the head's device (see eagle3_device_frontier.h).
// Checked by: tests/methods/eagle3_drafter_test.cpp.
#include "methods/eagle3/eagle3_device_frontier.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "base/error.h"
#include "kernels/engine_counters.h"
#include "models/device.h"

namespace specbed {
namespace {

// Appends the top-k children of every row of `logits` (float32 [m * r, Vd]: r rows per sequence,
// sequence after sequence) to `packed` (int32 [m, 4, capacity]: token, parent, log-prob bits,
// score bits) at candidates [at, at + r k) of each sequence: parents int64 [m, r] candidate
// indices whose scores the children add up (undefined = the root, r = 1).
void AddChildren(const at::Tensor& packed, const at::Tensor& logits, const at::Tensor& parents,
                 int64_t at, int64_t k, const at::Tensor& draft_to_target) {
  const int64_t m = packed.size(0), r = logits.size(0) / m, n = r * k;
  const at::Tensor rank =
      std::get<1>(at::sort(logits, /*stable=*/true, /*dim=*/-1, /*descending=*/true))
          .narrow(1, 0, k);
  const at::Tensor logp =
      (logits.gather(1, rank) - at::logsumexp(logits, -1, /*keepdim=*/true)).clamp_max(0.0);
  const at::Tensor scores = packed.select(1, 3).view(at::kFloat);
  packed.select(1, 0).narrow(1, at, n).copy_(
      draft_to_target.index_select(0, rank.flatten()).view({m, n}));
  packed.select(1, 2).view(at::kFloat).narrow(1, at, n).copy_(logp.view({m, n}));
  if (!parents.defined()) {
    packed.select(1, 1).narrow(1, at, n).fill_(-1);
    scores.narrow(1, at, n).copy_(logp.view({m, n}));
    return;
  }
  const at::Tensor total = scores.gather(1, parents).unsqueeze(-1) + logp.view({m, r, k});
  packed.select(1, 1).narrow(1, at, n).view({m, r, k}).copy_(
      parents.unsqueeze(-1).expand({m, r, k}));
  scores.narrow(1, at, n).copy_(total.view({m, n}));
}

// The checks of GrowBatch; returns the jobs, most layers first (those still growing at a layer
// are then a prefix).
std::vector<Eagle3DeviceFrontier::Job> SortedJobs(
    const std::vector<Eagle3DeviceFrontier::Job>& jobs) {
  SPECBED_CHECK(!jobs.empty(), "eagle3 device frontier: no trees to grow");
  for (size_t i = 0; i < jobs.size(); ++i) {
    const Eagle3DeviceFrontier::Job& j = jobs[i];
    SPECBED_CHECK(j.frontier != nullptr && j.head != nullptr && j.out != nullptr,
                  "eagle3 device frontier: job ", i, " has no frontier, head or output");
    SPECBED_CHECK(j.layers >= 1 && j.top_k >= 1 && j.context_len >= 1,
                  "eagle3 device frontier: layers, top_k and the context must be >= 1 (got ",
                  j.layers, ", ", j.top_k, ", ", j.context_len, ")");
    SPECBED_CHECK(j.top_k == jobs[0].top_k, "eagle3 device frontier: job ", i, " has top_k ",
                  j.top_k, ", job 0 ", jobs[0].top_k, " (one batch grows one width)");
    for (size_t p = 0; p < i; ++p) {
      SPECBED_CHECK(jobs[p].frontier != j.frontier, "eagle3 device frontier: jobs ", p, " and ", i,
                    " share a frontier");
    }
  }
  std::vector<Eagle3DeviceFrontier::Job> sorted = jobs;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.layers > b.layers; });
  return sorted;
}

// A batch's inputs on the device, made once a step (jobs sorted, one top_k).
struct BatchInputs {
  at::Tensor roots;        // [c, H] the root rows' hidden
  at::Tensor root_logits;  // float32 [c, Vd]
  at::Tensor positions;    // int64 [c, k]: a layer-2 row's position (context_len)
  at::Tensor self_rows;    // bool [c, k, k]: each frontier row sees its own slot
  at::Tensor offsets;      // int64 [c, 1]: a sequence's first row in a layer's batch
  // Per sequence bool [k, context_len + (layers - 1) k]: the context, then (filled per layer)
  // the frontier rows' ancestors' rows and their own.
  std::vector<at::Tensor> allowed;
};

BatchInputs StartBatch(const std::vector<Eagle3DeviceFrontier::Job>& jobs, int64_t k) {
  const int64_t c = static_cast<int64_t>(jobs.size());
  const at::Device device = jobs[0].root_logits.device();
  const at::TensorOptions bools = at::TensorOptions().dtype(at::kBool).device(device);
  const at::TensorOptions longs = at::TensorOptions().dtype(at::kLong).device(device);
  std::vector<at::Tensor> roots, logits, positions;
  BatchInputs in;
  for (const Eagle3DeviceFrontier::Job& j : jobs) {
    roots.push_back(j.root_hidden);
    logits.push_back(j.root_logits);
    positions.push_back(at::full({1}, j.context_len, longs));  // a device op: no upload
    in.allowed.push_back(at::ones({k, j.context_len + (j.layers - 1) * k}, bools));
  }
  in.roots = at::cat(roots);
  in.root_logits = at::cat(logits);
  in.positions = at::cat(positions).unsqueeze(1).expand({c, k});
  in.self_rows = at::eye(k, bools).expand({c, k, k});
  in.offsets = at::arange(c, longs).mul(k).unsqueeze(1);
  return in;
}

}  // namespace

void Eagle3DeviceFrontier::Grow(Eagle3Head& head, const at::Tensor& root_hidden,
                                const at::Tensor& root_logits, int64_t context_len, int64_t layers,
                                int64_t top_k, Eagle3HeadOutput& out) {
  GrowBatch({{this, &head, root_hidden, root_logits, context_len, layers, top_k, &out}});
}

void Eagle3DeviceFrontier::GrowBatch(const std::vector<Job>& unsorted) {
  const std::vector<Job> jobs = SortedJobs(unsorted);
  const int64_t c = static_cast<int64_t>(jobs.size()), k = jobs[0].top_k;
  const int64_t total = k + (jobs[0].layers - 1) * k * k;
  const at::Device device = jobs[0].root_logits.device();
  at::Tensor& packed = jobs[0].frontier->packed_;
  if (!packed.defined() || packed.size(0) != c || packed.size(2) < total ||
      !SameDevice(packed.device(), device)) {
    packed = at::empty({c, 4, total}, at::TensorOptions().dtype(at::kInt).device(device));
  }
  const at::Tensor& d2t = jobs[0].head->draft_to_target_tensor();
  const BatchInputs in = StartBatch(jobs, k);
  AddChildren(packed, in.root_logits, at::Tensor(), 0, k, d2t);  // layer 1: the root's children
  at::Tensor tree_mask = in.self_rows, hidden;  // [m, k, (d - 1) k]; the last layer's rows
  std::vector<Eagle3DeviceRows> rows;
  int64_t begin = 0, end = k;
  for (int64_t d = 2; d <= jobs[0].layers; ++d) {
    int64_t m = 0;  // sequences still growing: a prefix
    while (m < c && jobs[m].layers >= d) ++m;
    const at::Tensor mine = packed.narrow(0, 0, m);
    // The beam: the k best candidates of the last layer; the head row that made each (candidate
    // begin + f k + r came from row f), and the row's features.
    const at::Tensor beam =
        std::get<1>(at::sort(mine.select(1, 3).view(at::kFloat).narrow(1, begin, end - begin),
                             /*stable=*/true, /*dim=*/1, /*descending=*/true))
            .narrow(1, 0, k);
    const at::Tensor frontier = beam + begin;  // [m, k]
    const at::Tensor source = beam.div(k, "floor");
    const at::Tensor self_rows = in.self_rows.narrow(0, 0, m);
    const at::Tensor features =
        d == 2 ? in.roots.narrow(0, 0, m).unsqueeze(1).expand({m, k, -1}).reshape({m * k, -1})
               : hidden.index_select(0, (source + in.offsets.narrow(0, 0, m)).flatten());
    tree_mask =
        d == 2 ? self_rows
               : at::cat(
                     {at::take_along_dim(tree_mask.narrow(0, 0, m),
                                         source.unsqueeze(-1).expand({m, k, tree_mask.size(2)}), 1),
                      self_rows},
                     2);
    const at::Tensor tokens = mine.select(1, 0).gather(1, frontier).to(at::kLong);
    const at::Tensor positions = in.positions.narrow(0, 0, m) + (d - 2);
    rows.clear();
    for (int64_t i = 0; i < m; ++i) {
      const Job& j = jobs[i];
      in.allowed[i].narrow(1, j.context_len, (d - 1) * k).copy_(tree_mask[i]);
      rows.push_back(j.head->DeviceRows(features.narrow(0, i * k, k), tokens[i], positions[i],
                                        in.allowed[i].narrow(1, 0, j.context_len + (d - 1) * k),
                                        j.context_len + d - 1, *j.out));
    }
    Eagle3HeadOutput batch;
    Eagle3Head::ForwardBatch(rows, &batch);
    hidden = batch.hidden;
    AddChildren(mine, batch.logits, frontier, end, k, d2t);
    begin = end;
    end += k * k;
  }
  Download(jobs, packed.narrow(2, 0, total));
}

void Eagle3DeviceFrontier::Download(const std::vector<Job>& jobs, const at::Tensor& packed) {
  const TransferScope transfer(Transfer::kDeviceToHost);
  const at::Tensor host = packed.to(at::kCPU);  // one copy for the batch
  for (size_t i = 0; i < jobs.size(); ++i) {
    Eagle3DeviceFrontier& f = *jobs[i].frontier;
    const int64_t k = jobs[i].top_k;
    f.size_ = k + (jobs[i].layers - 1) * k * k;
    f.host_ = host[static_cast<int64_t>(i)].narrow(1, 0, f.size_).contiguous();
  }
}

}  // namespace specbed
