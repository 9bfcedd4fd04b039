// Sampling and acceptance on the logits' device: what the verifier and AR run on the ATen path
// (every device; forced on the CPU in tests) so that a decode step never copies [rows, vocab]
// logits to the host. The target's sampling distributions come from batched ATen ops
// (SamplingProbs); the walk over the draft tree is one kernels/ launch (GreedyTreeVerify at
// T = 0, SampledTreeVerify at T > 0: the CUDA kernels on a GPU, the CPU references on a CPU);
// uniforms are drawn on the host from the Sampler's generator and uploaded with the tree; one
// small copy comes back per step (accepted nodes, their count, the bonus token). The drafters'
// sampled chains draw on the device too (DeviceDraftSampler) and leave their distributions there.
// Checked by: tests/engine/device_sampling_test.cpp (SamplingProbs equals Sampler::Distribution
// row by row, SamplingProbsInto allocates nothing at T > 0 without truncation; DeviceDraftSampler
// draws the host sampler's tokens; device draft rows give the host rows' verdict; chi-square
// losslessness of every rule through DeviceVerifier with the negative controls failing; one
// device-to-host copy per call), tests/engine/speculative_test.cpp (a warm sampled SpS step on
// the ATen path allocates nothing), tests/methods/aten_path_test.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <random>

#include "harness/engine/method.h"
#include "harness/engine/sampler.h"
#include "models/kv_cache.h"

namespace specbed {

// `t` itself on the CPU; otherwise a host copy, counted by DeviceToHostCopies.
at::Tensor CopyToHost(const at::Tensor& t);
// Device-to-host copies made by the decode path so far (process-wide): tests check that a
// verify step on a device makes one.
int64_t DeviceToHostCopies();

// Sampler::Distribution for every row at once, on the logits' device: softmax(logits / T) in
// float32, then the smallest prefix by probability (ties: lower id first) that meets top-k and
// top-p, renormalized; greedy params give the one-hot argmax.
//   logits: [rows, V] float32 / bfloat16 / float16, any device
//   returns float32 [rows, V] on the same device
at::Tensor SamplingProbs(const at::Tensor& logits, const SamplingParams& params);
// SamplingProbs written into `out` through `scratch` (both float32 [rows, V], contiguous, on the
// logits' device): at T > 0 without top-k / top-p no storage is allocated (the truncation sorts
// into temporaries; greedy params allocate the argmax).
void SamplingProbsInto(const at::Tensor& logits, const SamplingParams& params,
                       const at::Tensor& scratch, const at::Tensor& out);

// Drafting by sampling on the device (SpS's and the draft LM's sampled chains on the ATen path,
// DFlash's sampled chain): the draft distributions stay in this sampler's buffer on the device
// (DraftTree::draft_probs_device points at it) and each token is drawn there by the
// kernels/sampled_verify inverse-CDF draw (SampleFromProbs' rule), with uniforms drawn on the
// host from the drafter's generator — one per token, in the order of the host path — and uploaded
// once per chain. Buffers grow, never shrink: once warm a chain at T > 0 without top-k / top-p
// allocates no storage.
class DeviceDraftSampler {
 public:
  // Starts a chain of n >= 1 tokens over `vocab` on `device`: n uniforms from `rng` go up in one
  // host-to-device copy; probs row n (the last node's, which has no children) is zeroed.
  void Begin(int64_t n, int64_t vocab, const at::Device& device, std::mt19937_64& rng);
  // Chain rows [first, first + r): probs() rows get SamplingProbs(logits, params) and a token is
  // drawn from each with uniforms [first, first + r); the tokens are also written to `ids` when
  // it is given (the next forward's input).
  //   logits: [r, V] float32 / bfloat16 / float16 on the device
  //   ids:    int64 [r] on the device, or undefined
  void Sample(const at::Tensor& logits, const SamplingParams& params, int64_t first,
              const at::Tensor& ids = at::Tensor());
  // float32 [>= n + 1, V] on the device: rows [0, n] are the chain's draft distributions (row s =
  // what token s was drawn from, row n zero), for DraftTree::draft_probs_device.
  const at::Tensor& probs() const { return probs_; }
  // The chain's n tokens on the host (int32 [n]): the chain's one device-to-host copy.
  at::Tensor TokensToHost() const;
  // What a captured chain of Sample calls bakes in (LlamaModel::DecodeChain's pick_key): the
  // buffers' addresses and `params`.
  std::vector<int64_t> GraphKey(const SamplingParams& params) const;

 private:
  // DraftFault (tests): rows [first, first + r) of probs() rewritten after the draws.
  void InjectDraftFault(const at::Tensor& logits, int64_t first);

  int64_t n_ = 0, vocab_ = 0;
  at::Tensor probs_, scratch_, uniforms_host_, uniforms_, tokens_, counts_, empty_;
  at::Tensor stale_row_;  // DraftFault::kStaleQRow: the last row's true distribution
};

// Acceptance and sampling on the logits' device with reusable staging buffers (grown, never
// shrunk). Fills verdict.path and verdict.bonus only (the caller derives verdict.tokens).
//
// With a CompactAfterWalk the verify step's KV compaction runs on the device too, from the
// verdict the walk left there (kernels/kv_compact.h CompactKvCacheToPath; the committed length
// travels in the tree's upload), before the one copy back; the cache's length is then set to
// committed + 1 + the path's length. Then no op of the step depends on the context length.
struct CompactAfterWalk {
  KvCache* cache = nullptr;  // null: no compaction
  int64_t committed = 0;     // the cache's length before the root
};

class DeviceVerifier {
 public:
  // T = 0: the target argmax walk (kernels/greedy_verify.h).
  //   logits: [n + 1, V] float32 on the device; tree: host, n = tree.size()
  //   staged: the tree (and at T > 0 its uniforms) already on the device, as StageTree laid
  //     them out and the forward carried them (ForwardOutput::staged_extra); undefined = upload
  //     them here (one more copy).
  void AcceptGreedy(const DraftTree& tree, const at::Tensor& logits, Verdict& verdict,
                    const CompactAfterWalk& compact = {}, const at::Tensor& staged = {});
  // T > 0 under `mode` (kernels/kernel_status.h kSampled*): the target's distributions from
  // SamplingProbsInto (reused buffers), the drafter's distributions in the rejection modes
  // (tree.draft_probs_device read in place, or tree.draft_probs uploaded), n + 1 uniforms from
  // sampler.rng().
  //   logits: [n + 1, V] float32 / bfloat16 / float16 on the device
  void AcceptSampled(const DraftTree& tree, const at::Tensor& logits, int32_t mode,
                     Sampler& sampler, Verdict& verdict, const CompactAfterWalk& compact = {},
                     const at::Tensor& staged = {});
  // The walk's inputs for the verify forward to carry (ForwardOptions::staged_extra): int64
  // [2n + 1] = tokens, parents, committed length, then with `sampler` (T > 0) the n + 1
  // uniforms drawn from sampler->rng() now (the draws AcceptSampled would make), as the bits of
  // doubles: [3n + 2] in all. Written into a reused host buffer; returns its CPU view.
  at::Tensor StageTree(const DraftTree& tree, int64_t committed, Sampler* sampler);
  // One token from the target at `logits` ([..., V], its last row): the argmax at T = 0, else a
  // draw from SamplingProbs with one uniform from sampler.rng() (the walk of an empty tree).
  int32_t SampleToken(const at::Tensor& logits, Sampler& sampler);
  // After a walk of a tree of n nodes that accepted k: the committed rows of the verify step as
  // int32 [k + 1] on the device (row 0 = the root, then 1 + each accepted node), from the
  // walk's verdict still on the device (no upload): what the hidden states are gathered by.
  at::Tensor PathSlots(int64_t n, int64_t k);

 private:
  // Uploads tokens, parents and the committed length into in_device_[0 .. 2n + 1) and returns it.
  at::Tensor UploadTree(const DraftTree& tree, int64_t committed);
  // The tree's walk inputs as int32 [2n + 1] on the device: from `staged` (StageTree's layout)
  // when defined, else uploaded.
  at::Tensor TreeOnDevice(const DraftTree& tree, int64_t committed, const at::Tensor& staged);
  // The walk's compaction (CompactAfterWalk) on the device, before the copy back.
  void CompactOnDevice(int64_t n, const at::Tensor& in, const CompactAfterWalk& compact);
  // Copies result_device_[0 .. n + 2) = [accepted | count | bonus] back (the step's one copy),
  // then sets a compacted cache's length.
  void DownloadVerdict(int64_t n, Verdict& verdict, const CompactAfterWalk& compact = {});
  void Reserve(int64_t n, int64_t vocab, const at::Device& device);

  at::Tensor int_host_, in_device_, result_device_;
  at::Tensor staged_host_;       // int64 [cap] CPU: StageTree's block
  at::Tensor path_slots_, one_;  // int32 [cap + 1] (PathSlots), 1 (0-dim)
  // probs_, scratch_: the target's sampling distributions [rows, V] (SamplingProbsInto).
  at::Tensor uniforms_host_, uniforms_device_, residual_device_, probs_, scratch_;
  DraftTree empty_tree_;
};

}  // namespace specbed
