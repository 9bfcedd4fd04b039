// Sampling and acceptance on the logits' device: what the verifier and AR run on the ATen path
// (every device; forced on the CPU in tests) so that a decode step never copies [rows, vocab]
// logits to the host. The target's sampling distributions come from batched ATen ops
// (SamplingProbs); the walk over the draft tree is one kernels/ launch (GreedyTreeVerify at
// T = 0, SampledTreeVerify at T > 0: the CUDA kernels on a GPU, the CPU references on a CPU);
// uniforms are drawn on the host from the Sampler's generator and uploaded with the tree; one
// small copy comes back per step (accepted nodes, their count, the bonus token).
// Checked by: tests/engine/device_sampling_test.cpp (SamplingProbs equals Sampler::Distribution
// row by row; chi-square losslessness of every rule through DeviceVerifier with the negative
// controls failing; one device-to-host copy per call), tests/methods/aten_path_test.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "harness/engine/method.h"
#include "harness/engine/sampler.h"

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

// Acceptance and sampling on the logits' device with reusable staging buffers (grown, never
// shrunk). Fills verdict.path and verdict.bonus only (the caller derives verdict.tokens).
class DeviceVerifier {
 public:
  // T = 0: the target argmax walk (kernels/greedy_verify.h).
  //   logits: [n + 1, V] float32 on the device; tree: host, n = tree.size()
  void AcceptGreedy(const DraftTree& tree, const at::Tensor& logits, Verdict& verdict);
  // T > 0 under `mode` (kernels/kernel_status.h kSampled*): the target's distributions from
  // SamplingProbs, the drafter's tree.draft_probs uploaded in the rejection modes, n + 1 uniforms
  // from sampler.rng().
  //   logits: [n + 1, V] float32 / bfloat16 / float16 on the device
  void AcceptSampled(const DraftTree& tree, const at::Tensor& logits, int32_t mode,
                     Sampler& sampler, Verdict& verdict);
  // One token from the target at `logits` ([..., V], its last row): the argmax at T = 0, else a
  // draw from SamplingProbs with one uniform from sampler.rng() (the walk of an empty tree).
  int32_t SampleToken(const at::Tensor& logits, Sampler& sampler);

 private:
  // Uploads tokens then parents into in_device_[0 .. 2n) and returns it.
  at::Tensor UploadTree(const DraftTree& tree);
  // Copies result_device_[0 .. n + 2) = [accepted | count | bonus] back (the step's one copy).
  void DownloadVerdict(int64_t n, Verdict& verdict);
  void Reserve(int64_t n, int64_t vocab, const at::Device& device);

  at::Tensor int_host_, in_device_, result_device_;
  at::Tensor uniforms_host_, uniforms_device_, draft_probs_device_, residual_device_;
  DraftTree empty_tree_;
};

}  // namespace specbed
