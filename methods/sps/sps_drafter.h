// SpS drafter: classic speculative sampling (Leviathan et al. 2023, "Fast Inference from
// Transformers via Speculative Decoding"; Chen et al. 2023, "Accelerating Large Language Model
// Decoding with Speculative Sampling") with a separate small draft LM that shares the target's
// tokenizer. Each step drafts a chain of gamma tokens autoregressively with the draft model
// (sampling with the case's settings; argmax at T = 0) and records the draft distribution of
// every position for chain rejection sampling.
// The draft model keeps its own KV cache in step with the committed tokens: after a verdict it
// truncates to committed + root + accepted; when the whole chain was accepted, the last draft
// token (never fed to the draft model) is fed together with the new root at the next step.
// On the ATen forward path (every non-CPU device, or forced on the CPU) drafting stays on the
// draft model's device (methods/common/draft_chain.h): each token (the argmax, or a draw at
// T > 0) feeds the next forward there, the chain's ids come back in one copy, and at T > 0 the
// draft distributions stay on the device for the verifier (DraftTree::draft_probs_device).
// Checked by: tests/engine/speculative_test.cpp (exact match with AR at T = 0 on stories260K;
// drafter cache = fresh forward over the committed tokens), tests/methods/aten_path_test.cpp
// (the ATen path; SpS's T = 1 chi-square on it), tests/engine/device_sampling_test.cpp
// (SpsSampledChainOnTheAtenPath*).
#pragma once

#include <memory>
#include <random>
#include <vector>

#include "harness/engine/device_sampling.h"
#include "harness/engine/method.h"
#include "models/llama_model.h"

namespace specbed {

class SpsDrafter : public Drafter {
 public:
  // `draft` must share the target's vocabulary. The chain length is the step budget (gamma,
  // clipped near the end of the context). Its cache is sized like the target's (DraftBegin).
  explicit SpsDrafter(std::shared_ptr<LlamaModel> draft);

  // Begin queues the prompt; Prefill (or the first Draft) runs the draft model over it.
  void Begin(const DraftBegin& begin) override;
  void Prefill() override;
  void Draft(const DraftStep& step, DraftTree& tree) override;
  void Accept(const DraftTree& tree, const Verdict& verdict) override;
  // Batched drafting on the row kernels (the batch engine): the drafters sharing a draft model
  // make their chains together, one LlamaModel::ForwardRagged per chain position over every
  // sequence still drafting (batch-invariant, so each chain is the one Draft would make, for the
  // same seed). On the ATen path each drafts alone (its chain stays on the device).
  const void* DraftBatchKey() const override;
  void DraftBatch(const std::vector<DraftJob>& jobs) override;

  // Serves `draft` from the next Begin on (online adaptation, methods/osd); its config must equal
  // the current draft's (the cache is reused).
  void ReplaceModel(std::shared_ptr<LlamaModel> draft);
  const LlamaModel& model() const { return *draft_; }

  // The draft model's cache (tests compare it with a fresh forward).
  const KvCache& cache() const { return cache_; }

 private:
  // A step's start: the prompt prefilled, the pending tokens staged in ids_ (fed_ of them);
  // returns the chain length (0: nothing to draft).
  int64_t BeginChain(const DraftStep& step);
  // The row path's draft distributions for a chain of gamma (T > 0 only).
  void StartHostChain(int64_t gamma, DraftTree& tree) const;
  // Chain token i from the draft model's CPU logits (float32 [1, vocab]) after token i - 1,
  // appended to `tree` and staged in ids_ as the next forward's input.
  int32_t ChainToken(const at::Tensor& logits, int64_t i, DraftTree& tree);
  // Greedy chain on the draft model's device (the ATen path): `out` holds the logits after the
  // pending tokens.
  void DraftGreedyOnDevice(ForwardOutput out, int64_t gamma, DraftTree& tree);
  // The same at T > 0: the distributions stay in draws_ (tree.draft_probs_device).
  void DraftSampledOnDevice(ForwardOutput out, int64_t gamma, DraftTree& tree);

  std::shared_ptr<LlamaModel> draft_;
  KvCache cache_;
  std::unique_ptr<Sampler> sampler_;
  std::vector<int32_t> pending_;  // committed tokens not yet in the draft cache (ends with root)
  int64_t base_len_ = 0;          // draft cache length before this step's tokens
  int64_t fed_ = 0;               // pending tokens fed this step
  at::Tensor ids_;                // [1, capacity] int64 input buffer
  at::Tensor prompt_;             // [1, P] int64: the prompt until Prefill ran (else undefined)
  at::Tensor device_ids_;         // [capacity] int64 on the draft model's device (ATen path)
  DeviceDraftSampler draws_;      // T > 0 on the ATen path: the chain's distributions and draws
};

}  // namespace specbed
