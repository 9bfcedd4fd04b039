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
//     branch point (T = 0: top-k of q_b; T > 0: sampled from q_b without replacement, candidate i
//     from q_b with the earlier candidates removed and renormalised; a token the draft already
//     drew at that position is the first candidate), each extended into a branch
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
// Timing and counters as PearlDecoder (pearl_decoder.h): t_draft_us = draft time not hidden
// behind the target (the DRAFT stage is never hidden), busy times per side, n_rolled_back = R
// tokens from the rejected one on + the branch positions drafted concurrently (counted once per
// position, not per branch: spec §5), n_draft_generated = drafted positions.
// Checked by: tests/methods/specbranch_test.cpp.
#pragma once

#include <memory>
#include <vector>

#include "harness/engine/method.h"
#include "methods/common/draft_ledger.h"
#include "methods/pearl/draft_lm.h"
#include "methods/pearl/side_thread.h"
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
};

class SpecBranchDecoder : public Decoder {
 public:
  // `policy` may be null when options.hrad is false. `feature_layers`: the target hidden layers
  // H-RAD reads (HradConfig::Layers()).
  SpecBranchDecoder(LlamaModel& target, const Tokenizer* tokenizer,
                    std::shared_ptr<LlamaModel> draft, std::unique_ptr<HradPolicy> policy,
                    std::vector<int64_t> feature_layers, SpecBranchOptions options);
  void Generate(const std::vector<int32_t>& prompt, const GenerationConfig& config, KvCache& cache,
                DecodeResult& result) override;
  int64_t MaxDraftNodes() const override { return options_.gamma_max; }
  // The drafted positions of the last Generate (pending() = still unverified when it stopped).
  const DraftLedger& ledger() const { return ledger_; }
  const SpecBranchCounters& counters() const { return counters_; }

 private:
  int Classify(const std::vector<float>& z);
  // Makes the draft side's thread (draft_threads wide); returns the target side's width.
  int PrepareSides();
  // The branch point's candidates from the draft logits `qb` [vocab] (the already drawn
  // `bp_token`, when >= 0, first): T = 0 the top-k, T > 0 k draws without replacement with each
  // draw's proposal row appended to `cand_q`; k = floor(k_max (1 - top-1 prob)) >= 1.
  void PickCandidates(const std::vector<float>& qb, int32_t bp_token, bool greedy,
                      std::vector<int32_t>& candidates, std::vector<float>& cand_q);

  LlamaModel& target_;
  const Tokenizer* tokenizer_;
  DraftLm draft_;
  std::unique_ptr<HradPolicy> policy_;
  std::vector<int64_t> feature_layers_;
  SpecBranchOptions options_;
  std::unique_ptr<SideThread> side_;
  SpecBranchCounters counters_;
  std::vector<float> scratch_, z_, dist_;
  at::Tensor ids_;
  DraftLedger ledger_;
};

}  // namespace specbed
