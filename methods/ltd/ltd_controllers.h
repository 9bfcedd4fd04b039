// Controllers that steer the EAGLE-3 tree drafter through the draft hooks of
// harness/engine/method.h (Controller::ContinueDrafting between expansion rounds, VerifySize after
// the last one):
// - LtdController: LTD (spec §3.3): the depth policy pi_D asked every `depth_every`-th round, the
//   size policy pi_V once per step; either may be absent (then a static depth / size is used), so
//   one class serves `ltd` with policies both / size / depth. Policy inference runs inside the
//   drafter's Draft call, so it is charged to draft time.
// - DddController (Brown et al. 2024): stop after checkpoint rounds (5, 7, 9) when the log of the
//   summed beam path probabilities falls below a threshold (-0.3).
// - SvipController (Zhang et al. 2024c): stop when the entropy of the best node's draft
//   distribution implies a low acceptance bound (entropy factor 0.15, minimum entropy 0.3).
// - GammatuneController (Gautam et al. 2025): per-sequence depth gamma (rounds) with a switching
//   rule: grow by `grow` rounds after a fully accepted tree, else follow the smoothed count of
//   accepted drafts, s <- clip((1 - eta) s + eta * accepted, gamma_min, gamma_max).
// - ClassifierDepthController: Disco / SpecDec++ (ltd_classifiers.h): stop once the classifier's
//   estimate that the accepted path reaches the deepest layer falls below a threshold.
// - C2tController: C2T: verify as many candidates as the classifier keeps (estimate >= threshold),
//   the best by score (so the verified tree stays ancestor-closed).
// Depth D = expansion rounds after the first tree layer (spec §9.1); V = drafted nodes verified,
// root excluded. Knobs, defaults and interpretations: methods/ltd/README.md.
// Checked by: tests/methods/ltd_test.cpp (each controller's decisions on hand-made rounds, the
// budget it sets; ltd and every baseline token-identical to AR at T = 0 on the story prompts).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "harness/engine/draft_hooks.h"
#include "harness/engine/method.h"
#include "methods/ltd/ltd_classifiers.h"
#include "methods/ltd/ltd_policy.h"

namespace specbed {

// Per-controller counters (reset by the owner).
struct LtdControllerStats {
  int64_t steps = 0;
  int64_t depth_calls = 0, size_calls = 0;
  double policy_us = 0;  // policy inference (observation + forward), microseconds
};

// Common part: fixed maximum rounds and node budget; the step budget asks the drafter for
// max_rounds + 1 layers and max_nodes nodes.
class TreeShapeController : public Controller, public DraftHooks {
 public:
  DraftHooks* draft_hooks() override { return this; }
  TreeShapeController(int64_t max_rounds, int64_t max_nodes)
      : max_rounds_(max_rounds), max_nodes_(max_nodes) {}
  void BeginSequence(const DraftBegin& begin, DraftBudget& budget) override;
  void BeforeStep(const DraftStep& step, DraftBudget& budget) override;
  int64_t MaxNodes(const DraftBudget& base) const override {
    return std::max(base.nodes, max_nodes_);
  }
  int64_t max_rounds() const { return max_rounds_; }
  int64_t max_nodes() const { return max_nodes_; }

 protected:
  int64_t max_rounds_, max_nodes_;
};

// One decision of an LtdController, recorded only while a log is set (the adaptation probe,
// ltd_adaptation_probe.h), so serving pays nothing for it.
struct LtdDecision {
  char kind = 'V';          // 'D' = a depth decision, 'V' = the step's verified size
  int64_t prompt = 0;       // set by the probe
  int64_t context_len = 0;  // L the policy read
  int64_t rounds = 0;       // D: rounds done when asked; V: rounds the step ran
  float top_score = 0;      // best cumulative log-prob among the scores the policy read
  int64_t value = 0;        // D: 1 = CONTINUE, 0 = STOP; V: the verified size
};

class LtdController : public TreeShapeController {
 public:
  // depth / size: the policies (nullptr = static `static_rounds` / `static_nodes`).
  // depth_every: ask pi_D after every depth_every-th round (0 = the policy's own setting).
  LtdController(std::shared_ptr<LtdPolicy> depth, std::shared_ptr<LtdPolicy> size,
                int64_t max_rounds, int64_t static_rounds, int64_t static_nodes,
                int64_t depth_every);
  bool ContinueDrafting(const DraftRoundInfo& info) override;
  int64_t VerifySize(const DraftTreeInfo& info) override;
  void AfterStep(const DraftTree& tree, const Verdict& verdict) override { ++stats_.steps; }
  LtdControllerStats& stats() { return stats_; }
  // Appends every decision to `log` (nullptr = off, the default).
  void set_decision_log(std::vector<LtdDecision>* log) { log_ = log; }

 private:
  void Record(char kind, int64_t context_len, int64_t rounds, const float* scores, int64_t n,
              int64_t value);
  std::shared_ptr<LtdPolicy> depth_, size_;
  int64_t static_rounds_, static_nodes_, depth_every_;
  LtdControllerStats stats_;
  std::vector<LtdDecision>* log_ = nullptr;
};

class DddController : public TreeShapeController {
 public:
  DddController(int64_t max_rounds, int64_t nodes, std::vector<int64_t> check_rounds,
                double threshold);
  bool ContinueDrafting(const DraftRoundInfo& info) override;

 private:
  std::vector<int64_t> check_rounds_;
  double threshold_;
};

// Log of the summed probabilities of `n` cumulative log-probs (log-sum-exp).
double LogSumExp(const float* scores, int64_t n);

class SvipController : public TreeShapeController {
 public:
  SvipController(int64_t max_rounds, int64_t nodes, double entropy_factor, double min_entropy);
  bool ContinueDrafting(const DraftRoundInfo& info) override;
  // The acceptance lower bound SVIP reads off an entropy h: 1 - sqrt(factor * max(h, min_h)).
  double AcceptanceBound(double entropy) const;

 private:
  double factor_, min_entropy_;
};

class GammatuneController : public TreeShapeController {
 public:
  // gamma = expansion rounds (EAGLE's depth, the unit of the other baselines' D and of the LTD
  // paper's bounds), starting at `initial` each sequence, in [min_rounds, max_rounds]. After a
  // step whose whole drafted depth (gamma + 1) was accepted, gamma grows by `grow` and the
  // smoothed count stays; after a rejection the smoothed count follows the accepted drafts,
  // s <- clip((1 - eta) s + eta accepted), and gamma = ceil(s). grow = 0: smoothing alone.
  GammatuneController(int64_t nodes, int64_t initial, int64_t min_rounds, int64_t max_rounds,
                      double eta, int64_t grow);
  void BeginSequence(const DraftBegin& begin, DraftBudget& budget) override;
  void BeforeStep(const DraftStep& step, DraftBudget& budget) override;
  void AfterStep(const DraftTree& tree, const Verdict& verdict) override;
  // Rounds of the next step.
  int64_t gamma() const { return gamma_; }
  double smoothed() const { return smoothed_; }

 private:
  int64_t initial_, min_rounds_;
  double eta_;
  int64_t grow_;
  int64_t gamma_ = 0;
  double smoothed_ = 0;
};

// Disco (beam probabilities, entropy, round) or SpecDec++ (the drafter's hidden state at the best
// node): after each round, continue while sigmoid(logit) >= threshold.
class ClassifierDepthController : public TreeShapeController {
 public:
  ClassifierDepthController(std::shared_ptr<LtdClassifier> classifier, int64_t max_rounds,
                            int64_t nodes, double threshold);
  bool ContinueDrafting(const DraftRoundInfo& info) override;
  bool WantsDraftHidden() const override;
  LtdControllerStats& stats() { return stats_; }

 private:
  std::shared_ptr<LtdClassifier> classifier_;
  double threshold_;
  LtdControllerStats stats_;
};

// C2T at a static depth (`rounds`): V = the number of candidates whose (score, depth / 10) the
// classifier keeps (sigmoid >= threshold), at least 1, at most `nodes`.
class C2tController : public TreeShapeController {
 public:
  C2tController(std::shared_ptr<LtdClassifier> classifier, int64_t rounds, int64_t nodes,
                double threshold);
  int64_t VerifySize(const DraftTreeInfo& info) override;
  LtdControllerStats& stats() { return stats_; }

 private:
  std::shared_ptr<LtdClassifier> classifier_;
  double threshold_;
  LtdControllerStats stats_;
};

}  // namespace specbed
