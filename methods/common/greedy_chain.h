// The greedy chain of a draft LM on the ATen path, shared by SpS's drafter and the PEARL /
// SpecBranch draft LM: the argmax of the last logits feeds the next forward on the model's device
// (no host round trip per token) and the chain's ids come to the host in one copy.
// Checked by: tests/methods/pearl_test.cpp (DraftLmArgmaxChunkOnTheAtenPathMatchesTheRowPath),
// tests/methods/aten_path_test.cpp (SpS and PEARL match AR on the ATen path).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "models/llama_model.h"

namespace specbed {

// n >= 1 greedy tokens after `first` (the forward of the context: logits [1, 1, V] on the
// model's device): token i is the argmax of the logits after token i - 1 (lowest id on ties);
// tokens 0 .. n - 2 are fed to `model` (appended to `cache`), the last one is not.
// `ids` is the device staging buffer (int64, grown when needed, reused).
//   returns host int64 [n]
at::Tensor GreedyChainOnDevice(LlamaModel& model, KvCache& cache, ForwardOutput first, int64_t n,
                               at::Tensor& ids);

}  // namespace specbed
