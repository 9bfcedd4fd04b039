// The method interface: every decoding method is assembled from a few small parts, so that "one
// interface" stays small and the runner never needs to know a method's name.
//
//   Drafter     proposes a draft tree below the root (the last committed token) each step and is
//               told the verdict (accepted path + bonus token) to roll its own state forward.
//   Controller  (optional) chooses the draft budget per prompt or per step (BlockPilot), and may
//               steer a tree drafter inside a step through its draft hooks (draft_hooks.h; LTD:
//               stop growing between expansion rounds, pick how many nodes are verified).
//   Adapter     (optional) learns online from verifier feedback (OSD, the cost-aware bandit).
//   Decoder     the generation loop. The default is SpeculativeDecoder (speculative_decoder.h:
//               prefill -> repeat(draft, verify, accept) -> stop rules identical to AR); AR is
//               ArDecoder; a method with its own loop (e.g. SpecBranch) brings its own Decoder.
//
// The runner, not the method, times phases and counts tokens: a Decoder reports one StepStats per
// verify step with the time spent in the drafter (draft), in the target forward + acceptance + KV
// compaction (verify) and everything else (other).
// Checked by: tests/engine/speculative_test.cpp (losslessness, invariants, timing fields).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "base/step_counters.h"
#include "harness/engine/ar_generate.h"
#include "harness/engine/sampler.h"
#include "methods/common/draft_tree.h"

namespace specbed {

class DraftHooks;  // harness/engine/draft_hooks.h

// How a sampling (T > 0) verification accepts draft tokens. At T = 0 every rule is greedy.
enum class VerifyRule {
  kGreedy,        // follow the target's argmax (exact at T = 0; used for every method at T = 0)
  kChainRs,       // chain rejection sampling (Leviathan et al. / Chen et al.); chains only
  kTreeRrs,       // multi-draft recursive rejection sampling (SpecInfer / EAGLE): the children of
                  // a slot must be i.i.d. samples from that slot's draft distribution
  kSampleFollow,  // sample the target at a slot, descend if a child carries that token; any tree
};
const char* VerifyRuleName(VerifyRule rule);
// Parses "greedy" | "chain_rs" | "tree_rrs" | "sample_follow"; errors name `context`.
VerifyRule ParseVerifyRule(const std::string& name, const std::string& context);

// Outcome of one verify step.
struct Verdict {
  std::vector<int32_t> path;  // accepted node indices, root's child first (empty = none)
  int32_t bonus = -1;         // token sampled from the target after the path (bonus/correction)
  // Tokens the step commits: tokens of `path`, then `bonus`.
  std::vector<int32_t> tokens;
  // Requested target hidden states at the committed slots (root, then path nodes):
  // one float/bf16 [1, 1 + path.size(), dim] tensor per requested layer.
  std::vector<at::Tensor> hidden;
  // The target's logits at every verify slot (root, then node i at row i + 1), no temperature
  // applied: float32 [n + 1, vocab] on the target's device. A view of the target's output buffer,
  // valid only until the next target forward (read it in Drafter::Accept / Adapter::Observe);
  // set by TreeVerifier, undefined from decoders that verify otherwise (PEARL, SpecBranch).
  // Lookahead and Token Recycling learn from the rejected slots too.
  at::Tensor logits;
  int64_t n_accepted() const { return static_cast<int64_t>(path.size()); }
};

// Per-step draft budget. `nodes` counts drafted nodes, root excluded; `depth` bounds the tree
// depth (chains: depth == nodes).
struct DraftBudget {
  int64_t nodes = 0;
  int64_t depth = 0;
};

// What a drafter sees at the start of a sequence.
struct DraftBegin {
  const std::vector<int32_t>* prompt = nullptr;  // prompt ids (all in the target cache)
  int32_t root = -1;                             // first generated token (the first root)
  // Target hidden states over the prompt for the drafter's requested layers: [1, P, dim] each.
  std::vector<at::Tensor> hidden;
  SamplingParams sampling;  // the case's sampling settings (drafters sample with them)
  uint64_t seed = 0;        // seed for the drafter's own randomness in this sequence
  std::string category;     // the prompt's category (GenerationConfig::category; "" = none)
  int64_t max_len = 0;      // the target cache's length: prompt + generated tokens fit in it
  // The target's logits at the last prompt position (the distribution the first generated token,
  // `root`, was sampled from; no temperature applied): float32 [V] CPU. A view of the target's
  // output buffer, valid only during BeginSequence / Begin (copy it to keep it).
  at::Tensor last_logits;
};

class Controller;

// What a drafter sees at each step.
struct DraftStep {
  int32_t root = -1;
  // All committed tokens: prompt + generated so far; the last one is `root`.
  const std::vector<int32_t>* committed = nullptr;
  DraftBudget budget;
  int64_t step_index = 0;
  // The draft hooks of the decoder's Controller (nullptr = none; draft_hooks.h): a drafter that
  // supports them (EAGLE-3) calls them while it drafts this step, so their cost is draft time.
  DraftHooks* hooks = nullptr;
};

class Drafter;

// One sequence's draft of a step, prepared and not yet made (SequenceStepper::PlanDraft): the
// drafter appends at most step.budget nodes to *tree (given empty).
struct DraftJob {
  Drafter* drafter = nullptr;  // nullptr: no draft this step (AR, or a K = 0 step)
  DraftStep step;
  DraftTree* tree = nullptr;
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Target layers whose hidden states the drafter wants (HF hidden_states indexing); empty = none.
  virtual std::vector<int64_t> TargetHiddenLayers() const { return {}; }
  // Starts a new sequence.
  virtual void Begin(const DraftBegin& begin) = 0;
  // Runs the work Begin queued over the prompt (a drafter that catches up lazily at its first
  // Draft), so that the decoder times the drafter's prefill as its own phase. Called once, right
  // after Begin; drafts must not depend on whether it ran.
  virtual void Prefill() {}
  // Appends at most budget.nodes nodes (depth <= budget.depth) below the root to `tree` (given
  // empty). Rules that need draft distributions (chain_rs, tree_rrs) need tree.draft_probs.
  virtual void Draft(const DraftStep& step, DraftTree& tree) = 0;
  // The verdict of the step (path, bonus = the next root, target hidden states); the drafter
  // rolls its state (e.g. its KV cache) forward to the committed tokens. A step may have had no
  // Draft call (the batch engine's K = 0 steps, possibly several in a row, told late: see
  // AcceptReadsLogits): `tree` is then empty and the verdict commits the bonus alone.
  virtual void Accept(const DraftTree& tree, const Verdict& verdict) = 0;
  // Draft tokens generated in the last Draft, offered to the verifier or not (a top-k tree
  // drafter generates every candidate it reranks); -1 = the offered nodes (tree.size()).
  virtual int64_t GeneratedLastStep() const { return -1; }
  // Whether Accept reads Verdict::logits (a view of the target's output, valid only until the
  // next forward). A drafter that does not gets the Accepts of the batch engine's K = 0 steps
  // (no draft) deferred to its next drafted step, in order, so a sequence that never drafts
  // again never pays for them (batch_engine.h).
  virtual bool AcceptReadsLogits() const { return false; }
  // Batched drafting (the batch engine, issue 46): drafters that return the same non-null key
  // (e.g. the draft model or head they share) can make several sequences' drafts in one
  // DraftBatch call (one draft-model forward per draft position, one head pass, for all of them).
  // Each sequence's draft must be the one Draft would make (the batch engine's identity tests hold
  // them token-identical to batch 1). nullptr (the default): this drafter drafts alone.
  virtual const void* DraftBatchKey() const { return nullptr; }
  // Makes every job's draft; every jobs[i].drafter has this drafter's DraftBatchKey (this is one
  // of them). The default drafts each in turn.
  virtual void DraftBatch(const std::vector<DraftJob>& jobs) {
    for (const DraftJob& job : jobs) job.drafter->Draft(job.step, *job.tree);
  }
};

// Chooses the budget (optional part).
class Controller {
 public:
  virtual ~Controller() = default;
  // Called once per sequence after prefill, and before every step; may change `budget`.
  virtual void BeginSequence(const DraftBegin& begin, DraftBudget& budget) {}
  virtual void BeforeStep(const DraftStep& step, DraftBudget& budget) {}
  // The largest node budget this controller may set when the decoder's default is `base` (the
  // KV cache is sized for it before prefill, so a raised budget is never clipped by the cache).
  virtual int64_t MaxNodes(const DraftBudget& base) const { return base.nodes; }

  // The hooks a tree drafter calls inside a step (draft_hooks.h: LTD's depth and size policies
  // and the baselines it is compared with); nullptr = none.
  virtual DraftHooks* draft_hooks() { return nullptr; }
  // After every verify step (after Drafter::Accept), with the step's tree and verdict; its cost
  // is draft time.
  virtual void AfterStep(const DraftTree& tree, const Verdict& verdict) {}
};

// Learns online from verifier feedback (optional part). The decoder calls BeginSequence after
// the drafter's Begin, Observe after every verdict, and EndSequence once the sequence stopped
// (still inside the timed decode: an update run there is charged to the request that triggered
// it, as draft time and StepStats::t_adapt_us of its last step).
class Adapter {
 public:
  virtual ~Adapter() = default;
  virtual void BeginSequence(const DraftBegin& begin) {}
  virtual void Observe(const DraftTree& tree, const Verdict& verdict) = 0;
  // `committed`: prompt + generated tokens (the first prompt_len are the prompt).
  virtual void EndSequence(const std::vector<int32_t>& committed, int64_t prompt_len) {}
};

// Counters and phase times of one verify step (filled by the decoder loop, never by a method):
// base/step_counters.h, shared with the stored StepRecord.
using StepStats = StepCounters;

// One generation with its per-step records.
struct DecodeResult {
  GenerationResult generation;
  std::vector<StepStats> steps;  // empty for AR
};

// One request decoded step by step inside a batch (harness/engine/batch_engine.h): a decoder's
// generation loop cut at the target forward, so that the sequences of a batch share one
// LlamaModel::ForwardRagged per step. The decoder object holds one sequence at a time, so a batch
// of B sequences uses B decoders of the method (each with its own drafter state).
class SequenceStepper {
 public:
  virtual ~SequenceStepper() = default;
  // Prefills `prompt` into `cache` (batch 1, reset here) with a batch-1 target forward, samples
  // the first token and starts the method's parts for the sequence.
  virtual void Start(const std::vector<int32_t>& prompt, const GenerationConfig& config,
                     KvCache& cache) = 0;
  virtual bool stopped() const = 0;
  // Plans the next step in two halves, so that the batch engine can make every sequence's draft
  // together between them (Drafter::DraftBatch). PlanDraft decides the step: a draft of at most
  // `max_nodes` nodes (< 0: the method's own budget; 0: no draft, the plain AR step), returned
  // as `job` (job.drafter == nullptr: nothing to draft). False when the context is full (the
  // sequence then stops). Once the job's draft is made, PlanVerify checks it and stages its
  // verify rows as a chunk of the batch forward.
  virtual bool PlanDraft(int64_t max_nodes, DraftJob& job) = 0;
  virtual SeqChunk PlanVerify() = 0;
  // Concludes the step from the chunk's rows of the batch forward (logits float32 [T, vocab];
  // hidden [1, T, dim] per HiddenLayers entry): acceptance, KV compaction, the method's accept
  // and the commit. Returns the step's counts, with t_draft_us / t_verify_us = this sequence's
  // own drafting (Plan + accept) and acceptance time (the shared forward is the batch's).
  virtual StepStats Conclude(const at::Tensor& logits, const std::vector<at::Tensor>& hidden) = 0;
  // Target layers whose hidden states Conclude needs (the same for every sequence of a method).
  virtual std::vector<int64_t> HiddenLayers() const { return {}; }
  // The tokens generated so far (the first comes from Start).
  virtual const std::vector<int32_t>& generated() const = 0;
  // Ends the sequence (an online adapter's end-of-sequence update) and fills `result`; returns the
  // adapter's time in microseconds (it stalls the whole batch).
  virtual double Finish(DecodeResult& result) = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // This decoder as a SequenceStepper, or nullptr when it runs its own loop (PEARL, SpecBranch:
  // their gain is hardware left idle by one request, so they cannot share a batch).
  virtual SequenceStepper* stepper() { return nullptr; }
  // Generates from `prompt` (non-empty) with `cache` (the target's batch-1 cache; reset here).
  virtual void Generate(const std::vector<int32_t>& prompt, const GenerationConfig& config,
                        KvCache& cache, DecodeResult& result) = 0;
  // The most draft nodes one verify step may add to the target cache beyond the committed tokens
  // (0 for AR). Callers size the cache with CacheLengthFor (speculative_decoder.h).
  virtual int64_t MaxDraftNodes() const { return 0; }
  // The rule this decoder verifies with at T > 0, as built for its case's knobs: a VerifyRule
  // name or the decoder's own rule; "" = no verification (AR). Every method uses greedy at T = 0.
  // The runner stores it as the case's sampling_verifier trait (the registry's trait is the
  // default knobs' rule, which tests hold equal to this).
  virtual std::string SamplingVerifier() const { return ""; }
};

// Autoregressive decoding (GenerateAr) as a Decoder, and as a SequenceStepper of one row a step
// (prefill and sampling exactly as GenerateAr, so a batched AR answer equals the batch-1 one).
class ArDecoder : public Decoder, public SequenceStepper {
 public:
  ArDecoder(LlamaModel& model, const Tokenizer* tokenizer) : model_(model), tokenizer_(tokenizer) {}
  void Generate(const std::vector<int32_t>& prompt, const GenerationConfig& config, KvCache& cache,
                DecodeResult& result) override;

  SequenceStepper* stepper() override { return this; }
  void Start(const std::vector<int32_t>& prompt, const GenerationConfig& config,
             KvCache& cache) override;
  bool stopped() const override { return stop_ && stop_->stopped(); }
  bool PlanDraft(int64_t max_nodes, DraftJob& job) override;
  SeqChunk PlanVerify() override;
  StepStats Conclude(const at::Tensor& logits, const std::vector<at::Tensor>& hidden) override;
  const std::vector<int32_t>& generated() const override { return stop_->tokens(); }
  double Finish(DecodeResult& result) override;

 private:
  LlamaModel& model_;
  const Tokenizer* tokenizer_;
  // The sequence a stepper runs.
  std::optional<Sampler> sampler_;
  std::optional<StopChecker> stop_;
  KvCache* cache_ = nullptr;
  int32_t token_ = -1;
  at::Tensor row_;  // int64 [1, 1]: the step's token
  int64_t n_steps_ = 0;
};

}  // namespace specbed
