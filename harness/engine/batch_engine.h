// Continuous batching on one target: many requests decoded at once, each by its own decoder of
// the case's method (its own drafter state, sampler, stop rules and batch-1 KV cache), sharing one
// target forward per step (LlamaModel::ForwardRagged: one matrix pass over every sequence's rows,
// attention per sequence against its own cache). Requests join at step boundaries (Admit: their
// prefill is a batch-1 forward) and leave when their stop rules fire.
//
// A step: the schedule gives every running sequence a draft cap (DraftSchedule: the method's own
// budget, a per-batch-size K with K = 0 above a threshold, or one token budget split across the
// batch); each sequence plans its step within it; the drafts are made, those of drafters sharing
// a draft model or head in one batched call (Drafter::DraftBatch: the SpS draft LM's forwards,
// Medusa's heads and, on the ATen path, the DFlash family's and EAGLE-3's heads go over every
// sequence at once); each sequence stages its verify rows; one ragged forward over all of them;
// each sequence concludes (acceptance on its rows, compaction, its drafter's accept, the
// commit). K = 0 runs no drafter, no controller and no tree staging: the step is the plain
// batched AR step (vLLM PR #5000: a "disabled" path that still ran the speculative machinery
// cost 7%).
//
// With RaggedOptions::batch_invariant (the default) on the row kernels every sequence's tokens
// are those of its batch-1 decode, at T = 0 and, with the same seeds, at T > 0.
// Checked by: tests/methods/batch_engine_test.cpp (every batchable method at B = 2, 4, 8 token-
// identical to batch 1 on the story prompts, T = 0 and T > 0; a cache mixed up between sequences
// fails it; K = 0 equals AR; the schedules; SpS's batched drafts: one draft forward a position for
// the whole batch, Medusa's one head pass a step, on the ATen path DFlash's and DDTree's one head
// forward a step and EAGLE-3's one per tree layer, the same answers as drafting alone).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/engine/method.h"
#include "models/llama_model.h"

namespace specbed {

// Draft caps per batch step (the load-aware draft length).
class DraftSchedule {
 public:
  virtual ~DraftSchedule() = default;
  // Fills caps[i] for running slot slots[i]: -1 = the method's own budget, 0 = no draft (the plain
  // AR step), n > 0 = at most n draft nodes.
  virtual void Choose(const std::vector<int64_t>& slots, std::vector<int64_t>& caps) = 0;
  // A slot's outcome after a step (drafted nodes, accepted tokens); a new request in a slot
  // starts with Reset.
  virtual void Observe(int64_t slot, int64_t drafted, int64_t accepted) {}
  virtual void Reset(int64_t slot) {}
  // The method's own node budget (what a cap of -1 stands for), set by the engine.
  virtual void SetMethodNodes(int64_t nodes) {}
  // The policy and its parameters, e.g. {"policy": "by_batch", "k_by_batch": {"4": 4}}.
  virtual nlohmann::json ToJson() const = 0;
};

// Parses a schedule: {"policy": "fixed"} (every sequence drafts its method's budget),
// {"policy": "by_batch", "k_by_batch": {"B": K, ...}} (vLLM / TensorRT-LLM style: at batch size b
// the K of the smallest key >= b, K = -1 = the method's own budget; above the largest key K = 0:
// {"2": -1} speculates as the method does up to batch 2 and runs plain AR above), or
// {"policy": "split", "tokens": N} (TETRIS style: N draft nodes per step split across the batch,
// one node at a time to the sequence whose next node is likeliest to be accepted: acceptance
// rate a_i^(k+1) for its k-th node, a_i an exponential average of its observed acceptance, 0.5 at
// the start; never above the method's budget). Errors name `context` and what was expected.
std::unique_ptr<DraftSchedule> ParseDraftSchedule(const nlohmann::json& spec,
                                                  const std::string& context);

struct BatchOptions {
  int64_t max_running = 1;      // slots: the most sequences in one step
  int64_t cache_len = 0;        // positions of each slot's KV cache (prompt + output + draft)
  bool batch_invariant = true;  // RaggedOptions::batch_invariant
  // Drafters that share a Drafter::DraftBatchKey (the SpS draft LM, Medusa's heads, the DFlash
  // family's and EAGLE-3's heads on the ATen path) make a step's drafts in one
  // DraftBatch call; false: every sequence drafts alone (the same drafts, for A/B timing).
  bool batch_drafts = true;
  // The method's own node budget (the cap -1 stands for; DraftSchedule "split" never exceeds it).
  int64_t method_nodes = 0;
};

// What one Step did.
struct BatchStepReport {
  int64_t batch_size = 0, n_verify_tokens = 0, n_drafted = 0, n_accepted = 0, n_emitted = 0;
  int64_t k_chosen = 0;  // the largest cap given (-1 resolved to the method's budget)
  double t_draft_us = 0, t_verify_us = 0, t_other_us = 0, t_adapt_us = 0;
  // Tokens each request appended this step: (request id, n).
  std::vector<std::pair<int64_t, int64_t>> emitted;
};

struct FinishedRequest {
  int64_t id = 0;
  DecodeResult result;
  double adapt_us = 0;  // its adapter's end-of-sequence update (it stalled the batch)
};

// A deliberately wrong engine (the negative control of the batch-identity test): kSwapCaches
// hands the first two sequences of every step each other's KV cache in the batch forward.
// Process-wide; never set outside tests.
enum class BatchFault { kNone, kSwapCaches };
void SetBatchFaultForTesting(BatchFault fault);

class BatchEngine {
 public:
  // `make_decoder` builds one decoder of the case's method (called once per slot, lazily); a
  // decoder without a stepper (Decoder::stepper() == nullptr) is refused.
  using DecoderFactory = std::function<std::unique_ptr<Decoder>()>;
  BatchEngine(LlamaModel& target, DecoderFactory make_decoder, BatchOptions options,
              std::unique_ptr<DraftSchedule> schedule);

  // Admits a request into a free slot: its prefill (a batch-1 forward) and first token run now.
  // A request that stops at its first token finishes here (TakeFinished). Needs a free slot.
  void Admit(int64_t id, const std::vector<int32_t>& prompt, const GenerationConfig& config);
  // One batch step over every running sequence. Needs running() > 0.
  BatchStepReport Step();
  // Requests finished since the last call.
  std::vector<FinishedRequest> TakeFinished();

  int64_t running() const;
  int64_t free_slots() const { return options_.max_running - running(); }
  // Tokens request `id` (running) has generated so far.
  const std::vector<int32_t>& generated(int64_t id) const;

 private:
  struct Slot {
    std::unique_ptr<Decoder> decoder;
    SequenceStepper* stepper = nullptr;
    KvCache cache;
    int64_t id = -1;  // -1 = free
  };
  // One step's plan: the slots in its forward (in chunk order) and the drafts to make.
  struct StepPlan {
    std::vector<int64_t> in_step;
    std::vector<DraftJob> jobs;
  };
  Slot& FreeSlot();
  void FinishSlot(Slot& slot, double& adapt_us);
  void PlanDrafts(const std::vector<int64_t>& live, const std::vector<int64_t>& caps,
                  StepPlan& plan, BatchStepReport& report);
  void MakeDrafts(const std::vector<DraftJob>& jobs) const;
  void ForwardAndConclude(const StepPlan& plan, std::vector<SeqChunk>& chunks,
                          BatchStepReport& report);

  LlamaModel& target_;
  DecoderFactory make_decoder_;
  BatchOptions options_;
  std::unique_ptr<DraftSchedule> schedule_;
  std::vector<Slot> slots_;
  std::vector<FinishedRequest> finished_;
};

}  // namespace specbed
