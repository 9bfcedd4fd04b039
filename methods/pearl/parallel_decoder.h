// The scaffolding of a parallel draft/verify decoder, shared by PEARL and SpecBranch: the target
// verifies [pend] + R on the calling thread while a draft LM works on a SideThread, the two sides
// join every step, and a rejection rolls back what was drafted after it. The base owns what the
// two loops have in common: the per-answer state (ParallelAnswer), the prefill, the side thread
// and the thread budgets, the target side of a step (VerifyChain: forward, chain acceptance of R,
// then AcceptAt / SampleAt for the slot after R), committing through the stop rules, the draft
// ledger and the step's counters and times (EndStep), and the answer's totals.
//
// Where the verify rows are read. The row path (CPU) reads the [n + 1, V] logits in place. On the
// ATen path at T = 0 (every device; forced on the CPU in tests) the rows' argmax ids are computed
// where the logits are and only those n + 1 ids come to the host: one small copy per step. At
// T > 0 on the ATen path the whole step is accepted where the logits are (SettleOnDevice, after
// the join, once the slot after R's candidates are known): the chain R plus the candidates at the
// slot after R as siblings form one DraftTree, walked once by DeviceVerifier::AcceptSampled in
// tree_rrs (kSampledRejection); one small copy comes back (accepted nodes, count, bonus). The
// rule and why it is the host rule's distribution: methods/pearl/README.md "Acceptance on the
// device".
//
// Timing (method.h StepStats): the phase clock synchronizes the device (DeviceNowNanos); each
// step's t_verify_us is the target side (forward + acceptance), t_draft_us the serial draft time
// plus the draft time still running after the target side finished (not hidden), t_other_us the
// rest (join, bookkeeping); the three tile the wall time. t_draft_busy_us / t_verify_busy_us are
// what each side computed. The draft LM's prefill is charged to step 0 (t_draft_prefill_us).
// Checked by: tests/methods/pearl_test.cpp, tests/methods/specbranch_test.cpp (both decoders on
// it; *.AtenPathAtTemperatureOneAcceptsOnTheDevice and the AtenPath.*ChiSquare ctest entries: the
// device acceptance), tests/methods/aten_path_test.cpp (the ATen path's argmax verify).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "harness/engine/device_sampling.h"
#include "harness/engine/method.h"
#include "harness/engine/sampler.h"
#include "harness/engine/stop_rules.h"
#include "methods/common/draft_ledger.h"
#include "methods/pearl/draft_lm.h"
#include "methods/pearl/side_thread.h"

namespace specbed {

// One answer's state in a parallel decoder.
struct ParallelAnswer {
  ParallelAnswer(const std::vector<int32_t>& prompt, const GenerationConfig& config,
                 const Tokenizer* tokenizer);
  // Tokens the stop rules still allow.
  int64_t left() const;

  const GenerationConfig& config;
  Sampler sampler;
  StopChecker stop;
  std::vector<int32_t> committed;  // prompt + generated; the last one (pend) not yet in the cache
  bool greedy;
  int64_t t_start = 0, t_prefill_end = 0, t_prev_end = 0;
  int64_t draft_begin_ns = 0;  // the draft LM's prefill, charged to step 0
  int64_t step_index = 0;
};

// The target side of one step: [pend] + R forwarded and R's chain acceptance.
struct ChainVerdict {
  ForwardOutput out;        // the verify forward (hidden states when asked for)
  int64_t base = 0;         // cache length before it
  int64_t n_accepted = 0;   // accepted prefix of R
  int32_t correction = -1;  // the target's token at the first rejection
  int64_t v0 = 0, v1 = 0;   // the target side's clock (v1: after the forward)
  int64_t settle_ns = 0;    // SettleOnDevice's time after the join (counted as verify time)
};

// The draft side's clock of one step: the concurrent job [d0, d1] (when `ran`) and the serial
// draft time before it (SpecBranch's DRAFT stage).
struct DraftClock {
  int64_t d0 = 0, d1 = 0;
  bool ran = false;
  int64_t serial_ns = 0;
};

// What a step committed and how the verifier saw it.
struct StepOutcome {
  std::vector<int32_t> tokens;  // committed this step (accepted draft tokens + one target token)
  int64_t n_offered = 0;        // draft tokens the verifier tested
  bool rollback = false;        // a rejection discarded drafted tokens
};

class ParallelDecoder : public Decoder {
 public:
  // The drafted positions of the last Generate (pending() = still unverified when it stopped).
  const DraftLedger& ledger() const { return ledger_; }
  DraftLm& draft() { return draft_; }
  // The target side's intra-op width: `option` when > 0, else the caller's width - draft_threads.
  static int TargetThreads(int option, int draft_threads);
  // Verify-row copies to the host ([n + 1, V], the row path's in-place read excluded) and
  // device walks (SettleOnDevice) so far: tests check that T > 0 on the ATen path makes none of
  // the first and one walk per step.
  int64_t verify_row_copies() const { return verify_row_copies_; }
  int64_t device_walks() const { return device_walks_; }

 protected:
  // `name` prefixes errors; ids_ holds up to max_chunk + 8 verify tokens.
  ParallelDecoder(LlamaModel& target, const Tokenizer* tokenizer, std::shared_ptr<LlamaModel> draft,
                  int64_t max_chunk, const char* name);

  // Checks prompt and cache, (re)makes the side thread `draft_threads` wide, clears the result.
  void BeginAnswer(const std::vector<int32_t>& prompt, const KvCache& cache, int draft_threads,
                   DecodeResult& result);
  // Prefill identical to AR (with `hidden_layers`), the first token pushed, then the draft LM's
  // prefill on the side thread (its cache holds the context + `draft_margin` positions).
  ForwardOutput Prefill(const std::vector<int32_t>& prompt, KvCache& cache,
                        const std::vector<int64_t>& hidden_layers, int64_t draft_margin,
                        ParallelAnswer& answer);
  // Cuts R and its draft rows to `free` positions (only at the context limit; the cut positions
  // count as trimmed).
  void FitToContext(int64_t free, bool greedy, std::vector<int32_t>& r, std::vector<float>& r_q);
  // The target side: forwards [pend] + r, then the chain acceptance of r (r_q: their draft
  // distributions, [|r|, V] row-major, empty at T = 0).
  void VerifyChain(ParallelAnswer& answer, const std::vector<int32_t>& r,
                   const std::vector<float>& r_q, const std::vector<int64_t>& hidden_layers,
                   KvCache& cache, ChainVerdict& verdict);
  // Whether VerifyChain leaves the acceptance to SettleOnDevice: T > 0 on the ATen path.
  bool AcceptsOnDevice(bool greedy) const;
  // T > 0 on the ATen path, after the join: accepts R (r, r_q as given to VerifyChain) and the k
  // candidates at the slot after R (siblings drawn i.i.d. from the one draft distribution `q`,
  // [V] host float32; k = 0: the target's own token there) in one DeviceVerifier walk, filling
  // verdict.n_accepted / correction; AcceptAt / SampleAt at that slot then return its outcome.
  // `accept_first` (negative control, NOT lossless): candidate 0 is taken once R is accepted.
  void SettleOnDevice(ParallelAnswer& answer, const std::vector<int32_t>& r,
                      const std::vector<float>& r_q, const int32_t* candidates, int64_t k,
                      const float* q, bool accept_first, ChainVerdict& verdict);
  // The one-slot rule (AcceptAtSlot) at verify slot `slot` of the last VerifyChain (after
  // SettleOnDevice: its outcome at the slot after R).
  int AcceptAt(int64_t slot, const int32_t* candidates, int64_t k, const float* q, Sampler& sampler,
               int32_t* correction, bool accept_first = false);
  // The target's own token at verify slot `slot` (argmax at T = 0, else a draw).
  int32_t SampleAt(int64_t slot, Sampler& sampler);
  // Steps (Step) until a stop rule or the context ends the answer, then FinishAnswer.
  void RunSteps(ParallelAnswer& answer, KvCache& cache, DecodeResult& result);
  // One step with `free` cache slots after pend.
  virtual void Step(ParallelAnswer& answer, KvCache& cache, int64_t free, DecodeResult& result) = 0;
  // Pushes the outcome's tokens through the stop rules; returns how many were emitted.
  static int64_t Commit(ParallelAnswer& answer, const std::vector<int32_t>& tokens);
  // The step's counters (draft ledger included) and times; appends it to result.steps.
  void EndStep(const StepOutcome& outcome, int64_t n_emitted, const ChainVerdict& verdict,
               const DraftClock& draft, bool parallel, ParallelAnswer& answer,
               DecodeResult& result);
  // The answer's tokens, text, stop reason and times.
  static void FinishAnswer(const ParallelAnswer& answer, DecodeResult& result);

  LlamaModel& target_;
  const Tokenizer* tokenizer_;
  DraftLm draft_;
  std::unique_ptr<SideThread> side_;
  DraftLedger ledger_;

 private:
  const char* name_;
  std::vector<float> scratch_;
  at::Tensor ids_;
  at::Tensor host_rows_;   // the last verify's logits on the host (row path, or T > 0)
  at::Tensor argmax_ids_;  // the last verify's argmax ids (ATen path at T = 0), host int64
  // T > 0 on the ATen path: the step's tree, the walk and its outcome at the slot after R.
  bool on_device_ = false;
  DeviceVerifier device_verifier_;
  DraftTree tree_;
  Verdict device_verdict_;
  int64_t settled_slot_ = -1;
  int slot_choice_ = -1;
  int32_t slot_token_ = -1;
  int64_t verify_row_copies_ = 0, device_walks_ = 0;
};

}  // namespace specbed
