// SpecBranch (anonymous submission, seed 004; specs/specbranch.md): parallel speculative decoding
// with H-RAD (hybrid rollback-aware draft lengths) and branch resampling at the branch point.
//
// State between steps: the committed tokens (the last one, `pend`, not yet in the target cache),
// R = retained draft tokens after pend awaiting verification, and the branch point after R with
// the draft's logits there (q_b). One step:
//   [DRAFT stage, only at the start and after a rollback; target idle] H-RAD a priori on the
//     features of the last verified position: s = 0 -> R = []; s = 2 -> draft gamma_max tokens;
//     s = 1 -> draft until the first token whose temperature-1 confidence is below epsilon (that
//     token's position becomes the branch point and the token its first candidate), at most
//     gamma_max.
//   [BRANCH step, two threads] target: forward [pend] + R (+ the last K layers' hidden states),
//     chain acceptance of R. Draft: k = max(1, floor(k_max * (1 - conf_b))) candidates at the
//     branch point (T = 0: top-k of q_b; T > 0: k i.i.d. draws from q_b on every path, repeats
//     allowed; a token the draft already drew at that position is the first candidate), each
//     extended into a branch
//     of L_br = gamma_max positions (candidate included).
//   [join] R[n] rejected -> ROLLBACK: commit R[:n] + correction, drop all branches, DRAFT stage
//     next. R accepted -> branch selection at the branch point with the multi-candidate rule
//     (§4.2; AcceptAtSlot). None accepted -> ROLLBACK with the rule's correction. Branch j kept ->
//     commit R + c_j; H-RAD posterior on (hidden states at the last position, embedding of c_j)
//     trims branch j: s = 2 -> R = its tokens; s = 1 -> R = its tokens before the first one with
//     confidence < epsilon (the branch point moves there); s = 0 -> R = [] (branch point right
//     after c_j).
// Variants (knobs): branch = false -> "w/o branch" = H-RAD + sequential SD (DRAFT stage every
// step, ordinary bonus token, one thread); hrad = false -> "w/o H-RAD" = s = 2 always (fixed
// chunks, branches at every chunk end).
// Timing and counters: ParallelDecoder (methods/pearl/parallel_decoder.h): t_draft_us = draft time
// not hidden behind the target (the DRAFT stage is never hidden), busy times per side,
// n_rolled_back = R tokens from the rejected one on + the branch positions drafted concurrently
// (counted once per position, not per branch: spec §5), n_draft_generated = drafted positions.
// Checked by: tests/methods/specbranch_test.cpp.
#pragma once

#include <memory>
#include <vector>

#include "methods/pearl/parallel_decoder.h"
#include "methods/specbranch/hrad.h"

namespace specbed {

struct SpecBranchOptions {
  int64_t gamma_max = 4;   // longest draft chunk and branch length (positions); ~ c
  int64_t k_max = 4;       // most branches at a branch point
  double epsilon = 0.2;    // confidence threshold (temperature-1 draft probability)
  bool branch = true;      // false: w/o branch (H-RAD + sequential SD)
  bool hrad = true;        // false: w/o H-RAD (s = 2 always)
  int target_threads = 0;  // 0 = the caller's width - draft_threads (branch mode)
  int draft_threads = 1;
  bool parallel = true;  // false: the two sides of a branch step run one after the other
  // Negative control for tests only (NOT lossless): keep the first branch without testing it.
  bool test_accept_first_branch = false;
};

struct SpecBranchCounters {
  int64_t hrad_calls = 0, class_count[3] = {0, 0, 0};
  int64_t branch_points = 0, branches = 0, rollbacks = 0, draft_stages = 0;
  // Candidates equal to an earlier one of their branch point (T > 0 draws are i.i.d. on every
  // path, so repeats happen; a draw without replacement would never repeat).
  int64_t repeated_candidates = 0;
};

class SpecBranchDecoder : public ParallelDecoder {
 public:
  // `policy` may be null when options.hrad is false. `feature_layers`: the target hidden layers
  // H-RAD reads (HradConfig::Layers()).
  SpecBranchDecoder(LlamaModel& target, const Tokenizer* tokenizer,
                    std::shared_ptr<LlamaModel> draft, std::unique_ptr<HradPolicy> policy,
                    std::vector<int64_t> feature_layers, SpecBranchOptions options);
  void Generate(const std::vector<int32_t>& prompt, const GenerationConfig& config, KvCache& cache,
                DecodeResult& result) override;
  int64_t MaxDraftNodes() const override { return options_.gamma_max; }
  // Chain rejection sampling of R, then recursive rejection sampling over the branch candidates.
  std::string SamplingVerifier() const override { return "chain_rs+branch_rrs"; }
  const SpecBranchCounters& counters() const { return counters_; }

 private:
  int Classify(const std::vector<float>& z);
  // One step: [DRAFT stage], branches drafted on the side thread while the target verifies R,
  // then the join.
  void Step(ParallelAnswer& answer, KvCache& cache, int64_t free, DecodeResult& result) override;
  // The serial DRAFT stage: H-RAD a priori, then R and the branch point (target idle).
  void DraftStage(const ParallelAnswer& answer, int64_t free, DraftClock& clock);
  // Picks the branch point's candidates and starts drafting their branches (lb positions each,
  // candidate included) on the side thread.
  void StartBranches(const ParallelAnswer& answer, int64_t lb, DraftClock& clock);
  // The branch point's candidates from the draft logits `qb` [vocab] (the already drawn
  // `bp_token`, when >= 0, first): T = 0 the top-k, T > 0 k i.i.d. draws on every path, with
  // q_b in `cand_q` (a row per candidate on the host path, one on the device walk);
  // k = floor(k_max (1 - top-1 prob)) >= 1.
  void PickCandidates(const std::vector<float>& qb, int32_t bp_token, bool greedy,
                      std::vector<int32_t>& candidates, std::vector<float>& cand_q);
  // The join: rollback, an ordinary bonus token (no branches), or branch selection.
  StepOutcome Join(ParallelAnswer& answer, const ChainVerdict& verdict, KvCache& cache);
  // Positions drafted after R this step (branch point + longest branch), entered in the ledger.
  int64_t PositionsAfterR(int64_t bp_pending);
  // Branch selection at the branch point and the posterior H-RAD trim of the kept branch.
  void SelectBranch(ParallelAnswer& answer, const ChainVerdict& verdict, int64_t after_r,
                    StepOutcome& outcome);
  // R <- the first `keep` tokens of `branch`; the branch point moves after them.
  void TakeBranch(const DraftChunk& branch, int64_t keep, bool greedy);

  std::unique_ptr<HradPolicy> policy_;
  std::vector<int64_t> feature_layers_;
  SpecBranchOptions options_;
  SpecBranchCounters counters_;
  std::vector<float> z_, dist_;
  // Between steps: R (retained draft tokens after pend) and their distributions (T > 0), the
  // draft logits at the branch point, and the token the draft already drew there (-1 = none: it
  // becomes the first candidate; README "Stop token").
  std::vector<int32_t> r_;
  std::vector<float> r_q_, qb_;
  int32_t bp_token_ = -1;
  bool draft_stage_ = true;
  // One step's drafting.
  std::vector<int32_t> context_, candidates_;
  std::vector<float> cand_q_;  // [k, vocab] proposal of each candidate (T > 0)
  DraftChunk chunk_;
  std::vector<DraftChunk> branches_;
};

}  // namespace specbed
