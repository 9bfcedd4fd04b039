// The draft chain of a draft LM on the ATen path, shared by SpS's drafter and the PEARL /
// SpecBranch draft LM: each token is chosen on the model's device (the argmax at T = 0, a draw
// from its sampling distribution at T > 0) and feeds the next forward there (no host round trip
// per token); the chain's ids come to the host in one copy, and at T > 0 its draft distributions
// stay on the device (DeviceDraftSampler, harness/engine/device_sampling.h).
// Checked by: tests/methods/pearl_test.cpp (DraftLmArgmaxChunkOnTheAtenPathMatchesTheRowPath,
// DraftLmSampledChunkOnTheAtenPathMatchesTheRowPath), tests/methods/aten_path_test.cpp (SpS and
// PEARL match AR on the ATen path; SpS's T = 1 chi-square on it), tests/engine/speculative_test.cpp
// (SpsSampledDraftsStayOnTheDeviceOnTheAtenPath).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "harness/engine/device_sampling.h"
#include "harness/engine/sampler.h"
#include "models/llama_model.h"

namespace specbed {

// n >= 1 greedy tokens after `first` (the forward of the context: logits [1, 1, V] on the
// model's device): token i is the argmax of the logits after token i - 1 (lowest id on ties);
// tokens 0 .. n - 2 are fed to `model` (appended to `cache`), the last one is not.
// `ids` is the device staging buffer (int64, grown when needed, reused).
//   returns host int64 [n]
at::Tensor GreedyChainOnDevice(LlamaModel& model, KvCache& cache, ForwardOutput first, int64_t n,
                               at::Tensor& ids);

// n >= 1 sampled tokens after `first`, as GreedyChainOnDevice but token i is drawn from the
// sampling distribution (`sampler`'s params) of the logits after token i - 1, with one uniform
// per token from sampler.rng() (the host path's order). The distributions stay in
// draws.probs() rows [0, n] (row n zero): point DraftTree::draft_probs_device at it.
//   returns host int32 [n]
at::Tensor SampledChainOnDevice(LlamaModel& model, KvCache& cache, ForwardOutput first, int64_t n,
                                Sampler& sampler, DeviceDraftSampler& draws, at::Tensor& ids);

}  // namespace specbed
