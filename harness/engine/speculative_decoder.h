// The default Decoder of speculative methods: prefill -> repeat(draft, verify, accept) -> the
// same stop rules as AR (stop_rules.h), fed one token at a time, so outputs are comparable token
// for token.
//
// Conventions (shared with AR, see ar_generate.h and results/README.md):
// - prefill_ms: the target's prompt forward and the sampling of the first token (the first
//   root). The drafter's own prompt processing (Drafter::Begin) is counted as draft time of the
//   first step, i.e. inside decode_ms, so a method pays for its drafter.
// - Per step: draft = Controller::BeforeStep + Drafter::Draft (with the Controller's draft hooks,
//   DraftStep::controller) + Drafter::Accept + Adapter::Observe + Controller::AfterStep;
//   verify = target forward over root + tree, acceptance and KV compaction (TreeVerifier);
//   other = everything else in the loop (stop rules, bookkeeping).
// - n_emitted counts tokens appended to the output; sum(n_emitted) = n_output_tokens - 1 (the
//   first token comes from the prefill logits, as in AR). A stop inside a step drops the rest.
// - Honest budgets: callers size the cache with CacheLengthFor (prompt + max_new_tokens + 1 +
//   MaxDraftNodes(), capped at the model's context), so the node budget is only clipped when the
//   cache truly cannot hold it (L + 1 + nodes <= cache.max_len(), e.g. at max_seq_len). Near the
//   end of an answer only the depth is limited, by the tokens still allowed: depth <=
//   max_new_tokens - generated (generated includes the root).
// Checked by: tests/engine/speculative_test.cpp.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "harness/engine/method.h"
#include "harness/engine/verifier.h"
#include "models/device.h"

namespace specbed {

struct SpeculativeOptions {
  DraftBudget budget;                               // default budget (a Controller may change it)
  VerifyRule sampling_rule = VerifyRule::kChainRs;  // rule at T > 0 (greedy at T = 0)
};

class SpeculativeDecoder : public Decoder, public SequenceStepper {
 public:
  SpeculativeDecoder(LlamaModel& target, const Tokenizer* tokenizer,
                     std::unique_ptr<Drafter> drafter, SpeculativeOptions options,
                     std::unique_ptr<Controller> controller = nullptr,
                     std::unique_ptr<Adapter> adapter = nullptr);
  void Generate(const std::vector<int32_t>& prompt, const GenerationConfig& config, KvCache& cache,
                DecodeResult& result) override;
  // The default budget's nodes, or the installed Controller's MaxNodes when larger.
  int64_t MaxDraftNodes() const override;
  std::string SamplingVerifier() const override { return VerifyRuleName(options_.sampling_rule); }

  // The batch engine's stepper (method.h): the same loop cut at the target forward; a plan of
  // max_nodes = 0 skips the drafter and the controller (the plain AR step; the drafter is told
  // the verdict in Accept, deferred to its next drafted step unless AcceptReadsLogits, so its
  // state follows the committed tokens).
  SequenceStepper* stepper() override { return this; }
  void Start(const std::vector<int32_t>& prompt, const GenerationConfig& config,
             KvCache& cache) override;
  bool stopped() const override { return stop_ && stop_->stopped(); }
  bool PlanDraft(int64_t max_nodes, DraftJob& job) override;
  SeqChunk PlanVerify() override;
  StepStats Conclude(const at::Tensor& logits, const std::vector<at::Tensor>& hidden) override;
  std::vector<int64_t> HiddenLayers() const override { return drafter_->TargetHiddenLayers(); }
  const std::vector<int32_t>& generated() const override { return stop_->tokens(); }
  double Finish(DecodeResult& result) override;

  Drafter& drafter() { return *drafter_; }
  // Installs (or replaces) the online Adapter; takes effect at the next Generate.
  void SetAdapter(std::unique_ptr<Adapter> adapter) { adapter_ = std::move(adapter); }
  Adapter* adapter() { return adapter_.get(); }
  // Installs (or replaces, or with nullptr removes) the Controller; takes effect at the next
  // Generate.
  void SetController(std::unique_ptr<Controller> controller) {
    controller_ = std::move(controller);
  }
  Controller* controller() { return controller_.get(); }

 private:
  struct BeginTimes {
    int64_t all_ns = 0;              // controller, drafter and adapter starts (draft time)
    int64_t drafter_prefill_ns = 0;  // Drafter::Begin + Prefill: the drafter prefill phase
  };
  // Starts the sequence's controller (which may change `budget`), drafter and `adapter` (null =
  // none: no adapter, or a generation it must not learn from) from the prefill's output (its
  // hidden states are moved out) and the first token `root`.
  BeginTimes BeginParts(const std::vector<int32_t>& prompt, int32_t root, ForwardOutput& prefill,
                        const GenerationConfig& config, int64_t max_len, DraftBudget& budget,
                        Adapter* adapter);

  // The steps of a sequence, shared by Generate and the stepper.
  // Prefill, the first token (the first root) and the parts' starts.
  void StartSequence(const std::vector<int32_t>& prompt, const GenerationConfig& config,
                     KvCache& cache);
  // The step's draft job within the budget, the `free` cache slots and node_cap (< 0: no cap;
  // 0: an empty draft, no job: the drafter and the controller are not called).
  void PrepareDraft(int64_t free, int64_t node_cap, DraftJob& job);
  // PrepareDraft, the draft made into tree_ and checked; returns the draft's depth.
  int32_t DraftNext(int64_t free, int64_t node_cap);
  // The parts' accept of verdict_ (drafter, adapter, controller); after a step without a draft
  // the drafter's Accept is deferred (Drafter::AcceptReadsLogits) until FlushDeferred.
  void AcceptVerdict();
  void FlushDeferred();
  // The step's counts, its tokens committed (until a stop rule fires) and the next root.
  StepStats CommitStep(int32_t draft_depth);
  // The adapter's end of sequence (added to the last of `steps`) and the generation result;
  // returns the adapter's time (us).
  double EndSequence(std::vector<StepStats>& steps, DecodeResult& result);

  LlamaModel& target_;
  const Tokenizer* tokenizer_;
  std::unique_ptr<Drafter> drafter_;
  SpeculativeOptions options_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<Adapter> adapter_;
  TreeVerifier verifier_;
  DraftTree tree_;
  Verdict verdict_;
  std::vector<int32_t> committed_;
  DeviceMarks marks_;  // the phases' device-time marks (reused across steps)
  // The sequence in progress.
  std::optional<Sampler> sampler_;
  std::optional<StopChecker> stop_;
  KvCache* cache_ = nullptr;
  Adapter* active_adapter_ = nullptr;  // null: no adapter, or a generation it must not learn from
  std::vector<int64_t> hidden_layers_;
  DraftBudget budget_;
  BeginTimes begun_;
  DraftJob planned_;  // the stepper's job of this step (PlanDraft -> PlanVerify)
  int32_t root_ = -1, draft_depth_ = 0;
  int64_t step_index_ = 0, prompt_len_ = 0, max_new_tokens_ = 0;
  int64_t t_start_ = 0, t_prefill_end_ = 0, plan_ns_ = 0;
  std::vector<StepStats> steps_;  // the stepper's steps
  // The verdicts of K = 0 steps the drafter has not yet been told (logits dropped), in order.
  std::vector<Verdict> deferred_;
  bool defer_accept_ = false;
  bool stepping_ = false;  // the sequence runs as a stepper (Start), not in Generate
  DraftTree empty_tree_;
};

// Length of a target KV cache that holds a prompt of `prompt_len` tokens, `max_new_tokens`
// generated tokens, the root and the largest draft tree of `decoder` (MaxDraftNodes), capped at
// the model's max_seq_len.
int64_t CacheLengthFor(const LlamaModel& model, int64_t prompt_len, int64_t max_new_tokens,
                       const Decoder& decoder);

// Seed of a drafter's own randomness for a sequence, derived from the target sampler's seed.
uint64_t DrafterSeed(uint64_t sequence_seed);

}  // namespace specbed
