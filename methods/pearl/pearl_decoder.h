// PEARL (Liu et al. 2024, "Parallel Speculative Decoding with Adaptive Draft Length",
// arXiv:2408.11850) as SpecBranch's §3.7 baseline: a two-stage pipeline in which the draft LM
// drafts the next chunk while the target verifies the current one, on two host threads, lockstep
// join each step, global invalidation on rejection. Its own Decoder.
//
// One step (state: the committed tokens, whose last one `pend` is not yet in the target cache,
// and R = draft tokens after pend awaiting verification, with their draft distributions):
//   target side (calling thread):  forward [pend] + R, chain acceptance of R (greedy at T = 0,
//                                  chain rejection sampling at T > 0);
//   draft side (SideThread):       draft the next chunk N (gamma tokens) after committed + R,
//                                  i.e. assuming all of R is accepted (PEARL's post-verify);
//   join, then:
//   - R[n] rejected: commit R[:n] + the correction; R[n:] and all of N are rolled back; the next
//     step verifies [correction] alone while gamma fresh tokens are drafted (PEARL's pre-verify:
//     the target checks the first new token while the draft keeps drafting);
//   - R all accepted: N[0] is tested against the target's distribution after R with the same
//     rule (no bonus token is sampled -- as in PEARL/SpecBranch the draft's guess is verified
//     instead); accepted: commit R + N[0], R <- N[1:]; rejected: commit R + the correction, N is
//     rolled back.
// Every committed token is the outcome of ordinary chain rejection sampling over a chain whose
// tokens were drawn from the draft given exactly the tokens before them, so the output
// distribution is the target's (T = 0: identical to AR).
//
// Timing and counters: ParallelDecoder (parallel_decoder.h); PEARL has no serial draft stage.
// Checked by: tests/methods/pearl_test.cpp.
#pragma once

#include <memory>
#include <vector>

#include "methods/pearl/parallel_decoder.h"

namespace specbed {

struct PearlOptions {
  int64_t gamma = 4;       // chunk length drafted per step
  int target_threads = 0;  // intra-op width of the target side; 0 = the caller's width - draft
  int draft_threads = 1;   // intra-op width of the draft side
  bool parallel = true;    // false: the two sides run one after the other (same tokens)
  // Negative control for tests only (NOT lossless): accept the next chunk's first token without
  // testing it against the target.
  bool test_accept_next_unverified = false;
};

// Per-step trace for tests (off unless a PearlTrace is installed).
struct PearlTraceStep {
  std::vector<int32_t> verified;   // R: draft tokens verified this step (after pend)
  std::vector<int32_t> drafted;    // N: the chunk drafted concurrently
  std::vector<int32_t> committed;  // tokens committed this step
  int64_t n_accepted_r = 0;        // accepted tokens of R
  bool rollback = false;           // a rejection discarded drafted tokens
  int64_t n_rolled_back = 0;
  std::vector<int32_t> next_r;  // R of the next step
};
struct PearlTrace {
  std::vector<PearlTraceStep> steps;
};

class PearlDecoder : public ParallelDecoder {
 public:
  PearlDecoder(LlamaModel& target, const Tokenizer* tokenizer, std::shared_ptr<LlamaModel> draft,
               PearlOptions options);
  void Generate(const std::vector<int32_t>& prompt, const GenerationConfig& config, KvCache& cache,
                DecodeResult& result) override;
  int64_t MaxDraftNodes() const override { return options_.gamma; }
  // Chain rejection sampling of each chunk (the first token of the next chunk tested the same way).
  std::string SamplingVerifier() const override { return "chain_rs"; }

  void SetTrace(PearlTrace* trace) { trace_ = trace; }

 private:
  // One step: the next chunk drafted on the side thread while the target verifies R, then the
  // join.
  void Step(ParallelAnswer& answer, KvCache& cache, int64_t free, DecodeResult& result) override;
  // Starts drafting the next chunk (n_next tokens after committed + R) on the side thread.
  void StartNextChunk(const ParallelAnswer& answer, int64_t n_next, DraftClock& clock);
  // The join: R's outcome, then (R all accepted) the test of the next chunk's first token.
  StepOutcome Join(ParallelAnswer& answer, const ChainVerdict& verdict, KvCache& cache);

  PearlOptions options_;
  PearlTrace* trace_ = nullptr;
  std::vector<int32_t> r_;  // draft tokens after pend awaiting verification
  std::vector<float> r_q_;  // their draft distributions (T > 0)
  std::vector<int32_t> draft_context_;
  DraftChunk next_;  // the chunk drafted concurrently
};

}  // namespace specbed
