// Sampling and acceptance on the logits' device (see device_sampling.h).
// Checked by: tests/engine/device_sampling_test.cpp.
#include "harness/engine/device_sampling.h"

#include <algorithm>
#include <atomic>

#include <ATen/ATen.h>

#include "harness/base/error.h"
#include "kernels/greedy_verify.h"
#include "kernels/sampled_verify.h"

namespace specbed {
namespace {

std::atomic<int64_t> g_device_to_host_copies{0};

// Keeps the sorted-order prefix that meets top-k and top-p (Sampler::Distribution's rule:
// token j of the descending order stays iff j < k and the mass before it is < top_p).
at::Tensor TruncateTopKTopP(const at::Tensor& probs, const SamplingParams& params) {
  const int64_t vocab = probs.size(-1);
  const bool use_top_k = params.top_k > 0 && params.top_k < vocab;
  const bool use_top_p = params.top_p < 1.0;
  if (!use_top_k && !use_top_p) return probs;
  auto [sorted, order] = at::sort(probs, /*stable=*/true, /*dim=*/-1, /*descending=*/true);
  const at::Tensor sorted64 = sorted.to(at::kDouble);
  at::Tensor keep = at::ones_like(sorted, at::kBool);
  if (use_top_k) {
    keep = at::arange(vocab, probs.options().dtype(at::kLong)).lt(params.top_k).expand_as(sorted);
  }
  if (use_top_p) keep = keep.logical_and((sorted64.cumsum(-1) - sorted64).lt(params.top_p));
  at::Tensor kept = sorted64.mul(keep);
  kept = kept.div(kept.sum(-1, /*keepdim=*/true)).to(at::kFloat);
  return at::zeros_like(probs).scatter_(-1, order, kept);
}

}  // namespace

at::Tensor CopyToHost(const at::Tensor& t) {
  if (t.device().is_cpu()) return t;
  g_device_to_host_copies.fetch_add(1, std::memory_order_relaxed);
  return t.cpu();
}

int64_t DeviceToHostCopies() {
  return g_device_to_host_copies.load(std::memory_order_relaxed);
}

at::Tensor SamplingProbs(const at::Tensor& logits, const SamplingParams& params) {
  SPECBED_CHECK(logits.dim() == 2, "SamplingProbs: logits must be [rows, V], got ", logits.sizes());
  const at::Tensor x = logits.to(at::kFloat);
  if (params.greedy()) {
    return at::zeros_like(x).scatter_(-1, x.argmax(-1, /*keepdim=*/true), 1.0);
  }
  const at::Tensor probs = at::softmax(x.div(params.temperature), -1);
  return TruncateTopKTopP(probs, params);
}

void DeviceVerifier::Reserve(int64_t n, int64_t vocab, const at::Device& device) {
  const bool grow =
      !int_host_.defined() || int_host_.numel() < 2 * n + 2 || in_device_.device() != device;
  if (grow) {
    const int64_t cap = std::max<int64_t>(2 * n + 2, 128);
    const at::TensorOptions on_device = at::TensorOptions().device(device);
    int_host_ = at::empty({cap}, at::kInt);
    in_device_ = at::empty({cap}, on_device.dtype(at::kInt));
    result_device_ = at::empty({cap}, on_device.dtype(at::kInt));
    uniforms_host_ = at::empty({cap}, at::kDouble);
    uniforms_device_ = at::empty({cap}, on_device.dtype(at::kDouble));
  }
  if (vocab > 0 && (grow || !residual_device_.defined() || residual_device_.numel() < vocab)) {
    residual_device_ = at::empty({vocab}, at::TensorOptions(at::kFloat).device(device));
  }
}

at::Tensor DeviceVerifier::UploadTree(const DraftTree& tree) {
  const int64_t n = tree.size();
  int32_t* host = int_host_.data_ptr<int32_t>();
  std::copy(tree.token.begin(), tree.token.end(), host);
  std::copy(tree.parent.begin(), tree.parent.end(), host + n);
  return in_device_.narrow(0, 0, 2 * n).copy_(int_host_.narrow(0, 0, 2 * n));
}

void DeviceVerifier::DownloadVerdict(int64_t n, Verdict& verdict) {
  // The step's one device-to-host copy, into the staging buffer the tree came from (its upload
  // was synchronous, so it is free again): no allocation, no pointer into a temporary.
  const at::Tensor result = result_device_.narrow(0, 0, n + 2);
  at::Tensor host = result;
  if (!result.device().is_cpu()) {
    host = int_host_.narrow(0, 0, n + 2).copy_(result);
    g_device_to_host_copies.fetch_add(1, std::memory_order_relaxed);
  }
  const int32_t* r = host.data_ptr<int32_t>();
  verdict.path.assign(r, r + r[n]);
  verdict.bonus = r[n + 1];
}

void DeviceVerifier::AcceptGreedy(const DraftTree& tree, const at::Tensor& logits,
                                  Verdict& verdict) {
  const int64_t n = tree.size();
  Reserve(n, 0, logits.device());
  const at::Tensor in = UploadTree(tree);
  const at::Tensor result = result_device_.narrow(0, 0, n + 2);
  GreedyTreeVerify(logits.view({1, n + 1, logits.size(-1)}), in.narrow(0, 0, n).view({1, n}),
                   in.narrow(0, n, n).view({1, n}), result.narrow(0, 0, n).view({1, n}),
                   result.narrow(0, n, 1), result.narrow(0, n + 1, 1));
  DownloadVerdict(n, verdict);
}

void DeviceVerifier::AcceptSampled(const DraftTree& tree, const at::Tensor& logits, int32_t mode,
                                   Sampler& sampler, Verdict& verdict) {
  const int64_t n = tree.size(), vocab = logits.size(-1);
  const at::Device device = logits.device();
  Reserve(n, vocab, device);
  const at::Tensor in = UploadTree(tree);
  double* u = uniforms_host_.data_ptr<double>();
  for (int64_t i = 0; i <= n; ++i) u[i] = Uniform01(sampler.rng());
  const at::Tensor uniforms =
      uniforms_device_.narrow(0, 0, n + 1).copy_(uniforms_host_.narrow(0, 0, n + 1));
  at::Tensor q;  // the rejection modes' draft distributions, uploaded (host -> device)
  if (n > 0 && (mode == kSampledRejection || mode == kSampledRejectionTargetResidual)) {
    SPECBED_CHECK(tree.has_draft_probs() && tree.vocab == vocab,
                  "sampled verification needs the draft distributions [n+1, ", vocab, "]");
    const at::Tensor rows =
        at::from_blob(const_cast<float*>(tree.draft_probs.data()), {1, n + 1, vocab}, at::kFloat);
    q = device.is_cpu() ? rows : rows.to(device);
  }
  const at::Tensor probs = SamplingProbs(logits.view({n + 1, vocab}), sampler.params());
  const at::Tensor result = result_device_.narrow(0, 0, n + 2);
  SampledTreeVerify(probs.view({1, n + 1, vocab}), q, in.narrow(0, 0, n).view({1, n}),
                    in.narrow(0, n, n).view({1, n}), uniforms.view({1, n + 1}), mode,
                    residual_device_.narrow(0, 0, vocab).view({1, vocab}),
                    result.narrow(0, 0, n).view({1, n}), result.narrow(0, n, 1),
                    result.narrow(0, n + 1, 1));
  DownloadVerdict(n, verdict);
}

int32_t DeviceVerifier::SampleToken(const at::Tensor& logits, Sampler& sampler) {
  const int64_t vocab = logits.size(-1);
  const at::Tensor row = logits.reshape({-1, vocab}).narrow(0, logits.numel() / vocab - 1, 1);
  Verdict verdict;
  if (sampler.params().greedy()) {
    AcceptGreedy(empty_tree_, row.to(at::kFloat).contiguous(), verdict);
  } else {
    AcceptSampled(empty_tree_, row, kSampledFollow, sampler, verdict);
  }
  return verdict.bonus;
}

}  // namespace specbed
