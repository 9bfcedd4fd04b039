// Sampling and acceptance on the logits' device (see device_sampling.h).
// Checked by: tests/engine/device_sampling_test.cpp.
#include "harness/engine/device_sampling.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <ATen/ATen.h>
#include <ATen/core/LegacyTypeDispatch.h>

#include "base/error.h"
#include "kernels/engine_counters.h"
#include "kernels/greedy_verify.h"
#include "kernels/kv_compact.h"
#include "kernels/sampled_verify.h"
#include "models/device.h"

namespace specbed {
namespace {

// kBelowAutograd: the verifier's and the draft sampler's entry points write preallocated buffers
// and the KV cache through out= and in-place ops, which autograd never differentiates, so they
// dispatch below the autograd and view-tracking layers (as AtenForward::Run does): their per-op
// bookkeeping is most of the host time of a small model's verify step.

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

// The tree's draft distributions as [1, n + 1, V] float32 on `device`: the drafter's device rows in
// place, or its host rows uploaded (one host-to-device copy).
at::Tensor DraftProbsOn(const DraftTree& tree, int64_t vocab, const at::Device& device) {
  const int64_t n = tree.size();
  SPECBED_CHECK(tree.has_draft_probs() && tree.vocab == vocab,
                "sampled verification needs the draft distributions [n+1, ", vocab, "]");
  if (tree.draft_probs_device != nullptr) {
    const at::Tensor& rows = *tree.draft_probs_device;
    SPECBED_CHECK(rows.dim() == 2 && rows.size(0) >= n + 1 && rows.size(1) == vocab &&
                      rows.scalar_type() == at::kFloat && SameDevice(rows.device(), device) &&
                      rows.is_contiguous(),
                  "sampled verification: the drafter's device distributions are ", rows.sizes(),
                  " ", rows.scalar_type(), " on ", rows.device(), ", expected contiguous float32 [",
                  n + 1, "+, ", vocab, "] on ", device);
    return rows.narrow(0, 0, n + 1).view({1, n + 1, vocab});
  }
  const at::Tensor rows =
      at::from_blob(const_cast<float*>(tree.draft_probs.data()), {1, n + 1, vocab}, at::kFloat);
  const TransferScope transfer(Transfer::kHostToDevice);  // host draft distributions
  return device.is_cpu() ? rows : rows.to(device);
}

}  // namespace

at::Tensor CopyToHost(const at::Tensor& t) {
  const TransferScope transfer(Transfer::kDeviceToHost);  // counted on the CPU too
  if (t.device().is_cpu()) return t;
  g_device_to_host_copies.fetch_add(1, std::memory_order_relaxed);
  return t.cpu();
}

int64_t DeviceToHostCopies() {
  return g_device_to_host_copies.load(std::memory_order_relaxed);
}

at::Tensor SamplingProbs(const at::Tensor& logits, const SamplingParams& params) {
  SPECBED_CHECK(logits.dim() == 2, "SamplingProbs: logits must be [rows, V], got ", logits.sizes());
  const at::Tensor out = at::empty(logits.sizes(), logits.options().dtype(at::kFloat));
  SamplingProbsInto(logits, params, at::empty_like(out), out);
  return out;
}

void SamplingProbsInto(const at::Tensor& logits, const SamplingParams& params,
                       const at::Tensor& scratch, const at::Tensor& out) {
  SPECBED_CHECK(logits.dim() == 2 && out.sizes() == logits.sizes() &&
                    scratch.sizes() == logits.sizes() && out.scalar_type() == at::kFloat &&
                    scratch.scalar_type() == at::kFloat,
                "SamplingProbsInto: logits ", logits.sizes(), ", scratch ", scratch.sizes(),
                " and out ", out.sizes(), " must all be [rows, V] (scratch and out float32)");
  if (params.greedy()) {
    out.zero_().scatter_(-1, logits.argmax(-1, /*keepdim=*/true), 1.0);
    return;
  }
  // x * (1 / T) in float32, as Sampler::Distribution. The factor is a CPU scalar tensor written in
  // place (a Scalar operand would be wrapped in a fresh tensor and cast: two allocations per call);
  // one per thread (PEARL's draft thread samples beside the verifier); read at launch time.
  static thread_local const at::Tensor inv_temperature = at::empty({}, at::kFloat);
  *inv_temperature.data_ptr<float>() = static_cast<float>(1.0 / params.temperature);
  scratch.copy_(logits);  // float32 (the model's dtype may be bfloat16 / float16)
  scratch.mul_(inv_temperature);
  at::Tensor dest = out;  // a handle: the out= overload takes a non-const reference
  at::_softmax_out(dest, scratch, /*dim=*/-1, /*half_to_float=*/false);
  const bool truncates = (params.top_k > 0 && params.top_k < logits.size(-1)) || params.top_p < 1.0;
  if (truncates) out.copy_(TruncateTopKTopP(out, params));
}

void DeviceVerifier::Reserve(int64_t n, int64_t vocab, const at::Device& device) {
  const bool grow = !int_host_.defined() || int_host_.numel() < 2 * n + 2 ||
                    !SameDevice(in_device_.device(), device);
  if (grow) {
    const int64_t cap = std::max<int64_t>(2 * n + 2, 128);
    const at::TensorOptions on_device = at::TensorOptions().device(device);
    int_host_ = at::empty({cap}, at::kInt);
    in_device_ = at::empty({cap}, on_device.dtype(at::kInt));
    result_device_ = at::empty({cap}, on_device.dtype(at::kInt));
    path_slots_ = at::zeros({cap + 1}, on_device.dtype(at::kInt));  // [0] stays 0: the root
    one_ = at::ones({}, on_device.dtype(at::kInt));
    uniforms_host_ = at::empty({cap}, at::kDouble);
    uniforms_device_ = at::empty({cap}, on_device.dtype(at::kDouble));
  }
  if (vocab > 0 && (grow || !residual_device_.defined() || residual_device_.numel() < vocab)) {
    residual_device_ = at::empty({vocab}, at::TensorOptions(at::kFloat).device(device));
  }
  if (vocab > 0 && (grow || !probs_.defined() || probs_.numel() < (n + 1) * vocab)) {
    const int64_t elements = std::max<int64_t>(n + 1, 16) * vocab;
    probs_ = at::empty({elements}, at::TensorOptions(at::kFloat).device(device));
    scratch_ = at::empty({elements}, at::TensorOptions(at::kFloat).device(device));
  }
}

at::Tensor DeviceVerifier::UploadTree(const DraftTree& tree, int64_t committed) {
  const int64_t n = tree.size();
  int32_t* host = int_host_.data_ptr<int32_t>();
  std::copy(tree.token.begin(), tree.token.end(), host);
  std::copy(tree.parent.begin(), tree.parent.end(), host + n);
  host[2 * n] = static_cast<int32_t>(committed);
  const TransferScope transfer(Transfer::kHostToDevice);
  return in_device_.narrow(0, 0, 2 * n + 1).copy_(int_host_.narrow(0, 0, 2 * n + 1));
}

at::Tensor DeviceVerifier::StageTree(const DraftTree& tree, int64_t committed, Sampler* sampler) {
  const int64_t n = tree.size(), size = 2 * n + 1 + (sampler != nullptr ? n + 1 : 0);
  if (!staged_host_.defined() || staged_host_.numel() < size) {
    staged_host_ = at::empty({std::max<int64_t>(size, 192)}, at::kLong);
  }
  int64_t* host = staged_host_.data_ptr<int64_t>();
  std::copy(tree.token.begin(), tree.token.end(), host);
  std::copy(tree.parent.begin(), tree.parent.end(), host + n);
  host[2 * n] = committed;
  if (sampler != nullptr) {
    double* u = reinterpret_cast<double*>(host + 2 * n + 1);
    for (int64_t i = 0; i <= n; ++i) u[i] = Uniform01(sampler->rng());
  }
  return staged_host_.narrow(0, 0, size);
}

at::Tensor DeviceVerifier::TreeOnDevice(const DraftTree& tree, int64_t committed,
                                        const at::Tensor& staged) {
  if (!staged.defined()) return UploadTree(tree, committed);
  const int64_t n = tree.size();
  SPECBED_CHECK(staged.numel() >= 2 * n + 1 && staged.device() == in_device_.device(),
                "DeviceVerifier: the staged tree has ", staged.numel(), " values on ",
                staged.device(), ", expected >= ", 2 * n + 1, " on ", in_device_.device());
  return in_device_.narrow(0, 0, 2 * n + 1).copy_(staged.narrow(0, 0, 2 * n + 1));
}

void DeviceVerifier::CompactOnDevice(int64_t n, const at::Tensor& in,
                                     const CompactAfterWalk& compact) {
  if (compact.cache == nullptr) return;
  const at::Tensor result = result_device_.narrow(0, 0, n + 2);
  CompactKvCacheToPath(compact.cache->storage(), in.narrow(0, 2 * n, 1),
                       result.narrow(0, 0, n).view({1, n}), result.narrow(0, n, 1));
}

void DeviceVerifier::DownloadVerdict(int64_t n, Verdict& verdict, const CompactAfterWalk& compact) {
  // The step's one device-to-host copy, into the staging buffer the tree came from (its upload
  // was synchronous, so it is free again): no allocation, no pointer into a temporary.
  const at::Tensor result = result_device_.narrow(0, 0, n + 2);
  const TransferScope transfer(Transfer::kDeviceToHost);  // counted on the CPU too
  at::Tensor host = result;
  if (!result.device().is_cpu()) {
    host = int_host_.narrow(0, 0, n + 2).copy_(result);
    g_device_to_host_copies.fetch_add(1, std::memory_order_relaxed);
  }
  const int32_t* r = host.data_ptr<int32_t>();
  verdict.path.assign(r, r + r[n]);
  verdict.bonus = r[n + 1];
  if (compact.cache != nullptr) compact.cache->Truncate(compact.committed + 1 + r[n]);
}

at::Tensor DeviceVerifier::PathSlots(int64_t n, int64_t k) {
  SPECBED_CHECK(path_slots_.defined() && n + 1 <= path_slots_.numel() && k >= 0 && k <= n,
                "DeviceVerifier::PathSlots: a walk of ", n, " nodes with ", k,
                " accepted must come first");
  at::Tensor rows = path_slots_.narrow(0, 1, n);
  at::add_out(rows, result_device_.narrow(0, 0, n), one_);  // -1 pads become row 0
  return path_slots_.narrow(0, 0, k + 1);
}

void DeviceVerifier::AcceptGreedy(const DraftTree& tree, const at::Tensor& logits, Verdict& verdict,
                                  const CompactAfterWalk& compact, const at::Tensor& staged) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;  // (kBelowAutograd)
  const int64_t n = tree.size();
  Reserve(n, 0, logits.device());
  const at::Tensor in = TreeOnDevice(tree, compact.committed, staged);
  const at::Tensor result = result_device_.narrow(0, 0, n + 2);
  GreedyTreeVerify(logits.view({1, n + 1, logits.size(-1)}), in.narrow(0, 0, n).view({1, n}),
                   in.narrow(0, n, n).view({1, n}), result.narrow(0, 0, n).view({1, n}),
                   result.narrow(0, n, 1), result.narrow(0, n + 1, 1));
  CompactOnDevice(n, in, compact);
  DownloadVerdict(n, verdict, compact);
}

void DeviceVerifier::AcceptSampled(const DraftTree& tree, const at::Tensor& logits, int32_t mode,
                                   Sampler& sampler, Verdict& verdict,
                                   const CompactAfterWalk& compact, const at::Tensor& staged) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;  // (kBelowAutograd)
  const int64_t n = tree.size(), vocab = logits.size(-1);
  const at::Device device = logits.device();
  Reserve(n, vocab, device);
  const at::Tensor in = TreeOnDevice(tree, compact.committed, staged);
  const at::Tensor uniforms = [&] {
    if (staged.defined()) {
      SPECBED_CHECK(staged.numel() == 3 * n + 2,
                    "DeviceVerifier: the staged tree has no "
                    "uniforms (",
                    staged.numel(), " values, expected ", 3 * n + 2, ")");
      return uniforms_device_.narrow(0, 0, n + 1)
          .copy_(staged.narrow(0, 2 * n + 1, n + 1).view(at::kDouble));
    }
    double* u = uniforms_host_.data_ptr<double>();
    for (int64_t i = 0; i <= n; ++i) u[i] = Uniform01(sampler.rng());
    const TransferScope transfer(Transfer::kHostToDevice);
    return uniforms_device_.narrow(0, 0, n + 1).copy_(uniforms_host_.narrow(0, 0, n + 1));
  }();
  at::Tensor q;  // the rejection modes' draft distributions
  if (n > 0 && (mode == kSampledRejection || mode == kSampledRejectionTargetResidual)) {
    q = DraftProbsOn(tree, vocab, device);
  }
  const at::Tensor probs = probs_.narrow(0, 0, (n + 1) * vocab).view({n + 1, vocab});
  SamplingProbsInto(logits.view({n + 1, vocab}), sampler.params(),
                    scratch_.narrow(0, 0, (n + 1) * vocab).view({n + 1, vocab}), probs);
  const at::Tensor result = result_device_.narrow(0, 0, n + 2);
  SampledTreeVerify(probs.view({1, n + 1, vocab}), q, in.narrow(0, 0, n).view({1, n}),
                    in.narrow(0, n, n).view({1, n}), uniforms.view({1, n + 1}), mode,
                    residual_device_.narrow(0, 0, vocab).view({1, vocab}),
                    result.narrow(0, 0, n).view({1, n}), result.narrow(0, n, 1),
                    result.narrow(0, n + 1, 1));
  CompactOnDevice(n, in, compact);
  DownloadVerdict(n, verdict, compact);
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

void DeviceDraftSampler::Begin(int64_t n, int64_t vocab, const at::Device& device,
                               std::mt19937_64& rng) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;  // (kBelowAutograd)
  SPECBED_CHECK(n >= 1 && vocab >= 1, "DeviceDraftSampler: a chain of ", n, " tokens over ", vocab,
                " ids (expected >= 1 each)");
  const bool grow = !probs_.defined() || !SameDevice(probs_.device(), device) || vocab != vocab_ ||
                    probs_.size(0) < n + 1;
  if (grow) {
    const int64_t rows = std::max<int64_t>(n + 1, 16);
    const at::TensorOptions on_device = at::TensorOptions().device(device);
    probs_ = at::empty({rows, vocab}, on_device.dtype(at::kFloat));
    scratch_ = at::empty({rows, vocab}, on_device.dtype(at::kFloat));
    uniforms_host_ = at::empty({rows}, at::kDouble);
    uniforms_ = at::empty({rows}, on_device.dtype(at::kDouble));
    tokens_ = at::empty({rows}, on_device.dtype(at::kInt));
    counts_ = at::empty({rows}, on_device.dtype(at::kInt));
    empty_ = at::empty({rows, 0}, on_device.dtype(at::kInt));
  }
  n_ = n;
  vocab_ = vocab;
  double* u = uniforms_host_.data_ptr<double>();
  for (int64_t i = 0; i < n; ++i) u[i] = Uniform01(rng);
  const TransferScope transfer(Transfer::kHostToDevice);
  uniforms_.narrow(0, 0, n).copy_(uniforms_host_.narrow(0, 0, n));
  probs_.narrow(0, n, 1).zero_();
}

void DeviceDraftSampler::Sample(const at::Tensor& logits, const SamplingParams& params,
                                int64_t first, const at::Tensor& ids) {
  const at::AutoDispatchBelowADInplaceOrView below_autograd;  // (kBelowAutograd)
  const int64_t r = logits.size(0);
  SPECBED_CHECK(logits.dim() == 2 && logits.size(1) == vocab_ && first >= 0 && first + r <= n_,
                "DeviceDraftSampler::Sample: logits ", logits.sizes(), " for rows [", first, ", ",
                first + r, ") of a chain of ", n_, " over ", vocab_, " ids");
  const at::Tensor probs = probs_.narrow(0, first, r);
  const at::Tensor scratch = scratch_.narrow(0, 0, r);
  SamplingProbsInto(logits, params, scratch, probs);
  // r independent draws: the walk of r empty trees (sample_follow draws the bonus from row 0).
  const at::Tensor none = empty_.narrow(0, 0, r);
  const at::Tensor tokens = tokens_.narrow(0, first, r);
  SampledTreeVerify(probs.view({r, 1, vocab_}), at::Tensor(), none, none,
                    uniforms_.narrow(0, first, r).view({r, 1}), kSampledFollow, scratch, none,
                    counts_.narrow(0, 0, r), tokens);
  if (ids.defined()) ids.copy_(tokens);
  if (DraftFaultForTesting() != DraftFault::kNone) InjectDraftFault(logits, first);
}

void DeviceDraftSampler::InjectDraftFault(const at::Tensor& logits, int64_t first) {
  const int64_t r = logits.size(0);
  const at::Tensor rows = probs_.narrow(0, first, r);
  if (DraftFaultForTesting() == DraftFault::kUntemperedQ) {
    rows.copy_(at::softmax(logits.to(at::kFloat), -1));
    return;
  }
  // kStaleQRow: each row gets the true row of the draw before it (as Sampler::DraftToken: the
  // first row of a chain gets the previous chain's last).
  const at::Tensor truth = rows.clone();
  if (stale_row_.defined() && stale_row_.size(1) == vocab_) rows.narrow(0, 0, 1).copy_(stale_row_);
  if (r > 1) rows.narrow(0, 1, r - 1).copy_(truth.narrow(0, 0, r - 1));
  stale_row_ = truth.narrow(0, r - 1, 1);
}

std::vector<int64_t> DeviceDraftSampler::GraphKey(const SamplingParams& params) const {
  std::vector<int64_t> key = {1, params.top_k, vocab_};  // 1: the sampled pick
  for (double x : {params.temperature, params.top_p}) {
    int64_t bits = 0;
    std::memcpy(&bits, &x, sizeof(bits));
    key.push_back(bits);
  }
  for (const at::Tensor* t : {&probs_, &scratch_, &uniforms_, &tokens_, &counts_, &empty_}) {
    key.push_back(reinterpret_cast<int64_t>(t->data_ptr()));
  }
  return key;
}

at::Tensor DeviceDraftSampler::TokensToHost() const {
  return CopyToHost(tokens_.narrow(0, 0, n_));
}

}  // namespace specbed
