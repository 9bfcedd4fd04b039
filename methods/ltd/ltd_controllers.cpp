// LTD and baseline controllers (see ltd_controllers.h).
// Checked by: tests/methods/ltd_test.cpp.
#include "methods/ltd/ltd_controllers.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "base/timer.h"

namespace specbed {

void TreeShapeController::BeginSequence(const DraftBegin& begin, DraftBudget& budget) {
  budget.depth = max_rounds_ + 1;
  budget.nodes = max_nodes_;
}

void TreeShapeController::BeforeStep(const DraftStep& step, DraftBudget& budget) {
  budget.depth = max_rounds_ + 1;
  budget.nodes = max_nodes_;
}

LtdController::LtdController(std::shared_ptr<LtdPolicy> depth, std::shared_ptr<LtdPolicy> size,
                             int64_t max_rounds, int64_t static_rounds, int64_t static_nodes,
                             int64_t depth_every)
    : TreeShapeController(max_rounds, 1),
      depth_(std::move(depth)),
      size_(std::move(size)),
      static_rounds_(static_rounds),
      static_nodes_(static_nodes),
      depth_every_(depth_every) {
  SPECBED_CHECK(max_rounds >= 1 && static_rounds >= 1 && static_nodes >= 1,
                "ltd: max_depth, depth and total_tokens - 1 must be >= 1");
  max_nodes_ =
      size_ ? LtdVerifySize(size_->config(), size_->config().n_actions - 1) : static_nodes_;
  if (!depth_) max_rounds_ = std::min(max_rounds_, static_rounds_);
  if (depth_every_ <= 0) depth_every_ = depth_ ? depth_->config().depth_every : 1;
}

void LtdController::Record(char kind, int64_t context_len, int64_t rounds, const float* scores,
                           int64_t n, int64_t value) {
  if (log_ == nullptr) return;
  LtdDecision d;
  d.kind = kind;
  d.context_len = context_len;
  d.rounds = rounds;
  d.top_score = n > 0 ? *std::max_element(scores, scores + n) : 0.f;
  d.value = value;
  log_->push_back(d);
}

bool LtdController::ContinueDrafting(const DraftRoundInfo& info) {
  if (!depth_) return info.rounds < static_rounds_;
  if (info.rounds % depth_every_ != 0) return true;
  const int64_t t0 = NowNanos();
  std::vector<float>& obs = depth_->obs_buffer();
  EncodeDepthObservation(depth_->config(), info.child_scores, info.n_child_scores, info.context_len,
                         info.rounds, obs.data());
  const bool go = depth_->Act(obs.data()) == 1;
  stats_.policy_us += (NowNanos() - t0) * 1e-3;
  ++stats_.depth_calls;
  Record('D', info.context_len, info.rounds, info.child_scores, info.n_child_scores, go);
  return go;
}

int64_t LtdController::VerifySize(const DraftTreeInfo& info) {
  int64_t v = static_nodes_;
  if (size_) {
    const int64_t t0 = NowNanos();
    std::vector<float>& obs = size_->obs_buffer();
    EncodeSizeObservation(size_->config(), info.scores, info.n_scores, info.context_len,
                          info.rounds, obs.data());
    v = LtdVerifySize(size_->config(), size_->Act(obs.data()));
    stats_.policy_us += (NowNanos() - t0) * 1e-3;
    ++stats_.size_calls;
  }
  v = std::min(v, info.budget_nodes);
  Record('V', info.context_len, info.rounds, info.scores, info.n_scores, v);
  return v;
}

DddController::DddController(int64_t max_rounds, int64_t nodes, std::vector<int64_t> check_rounds,
                             double threshold)
    : TreeShapeController(max_rounds, nodes),
      check_rounds_(std::move(check_rounds)),
      threshold_(threshold) {}

double LogSumExp(const float* scores, int64_t n) {
  if (n <= 0) return -std::numeric_limits<double>::infinity();
  double m = scores[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, static_cast<double>(scores[i]));
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(scores[i] - m);
  return m + std::log(s);
}

bool DddController::ContinueDrafting(const DraftRoundInfo& info) {
  if (std::find(check_rounds_.begin(), check_rounds_.end(), info.rounds) == check_rounds_.end())
    return true;
  return LogSumExp(info.beam_scores, info.n_beam) >= threshold_;
}

SvipController::SvipController(int64_t max_rounds, int64_t nodes, double entropy_factor,
                               double min_entropy)
    : TreeShapeController(max_rounds, nodes), factor_(entropy_factor), min_entropy_(min_entropy) {}

double SvipController::AcceptanceBound(double entropy) const {
  return 1.0 - std::sqrt(factor_ * std::max(entropy, min_entropy_));
}

bool SvipController::ContinueDrafting(const DraftRoundInfo& info) {
  // Stop once the bound for the next token drops below one half (see README: our reading).
  return AcceptanceBound(info.best_entropy) >= 0.5;
}

GammatuneController::GammatuneController(int64_t nodes, int64_t initial, int64_t min_rounds,
                                         int64_t max_rounds, double eta, int64_t grow)
    : TreeShapeController(max_rounds, nodes),
      initial_(initial),
      min_rounds_(min_rounds),
      eta_(eta),
      grow_(grow) {
  SPECBED_CHECK(1 <= min_rounds && min_rounds <= initial && initial <= max_rounds && eta > 0 &&
                    eta <= 1 && grow >= 0,
                "gammatune: need 1 <= gamma_min <= depth <= gamma_max, 0 < eta <= 1 and grow >= 0 "
                "(got ",
                min_rounds, ", ", initial, ", ", max_rounds, ", ", eta, ", ", grow, ")");
}

void GammatuneController::BeginSequence(const DraftBegin& begin, DraftBudget& budget) {
  gamma_ = initial_;
  smoothed_ = static_cast<double>(initial_);
  BeforeStep(DraftStep(), budget);
}

void GammatuneController::BeforeStep(const DraftStep& step, DraftBudget& budget) {
  budget.depth = gamma_ + 1;
  budget.nodes = max_nodes_;
}

void GammatuneController::AfterStep(const DraftTree& tree, const Verdict& verdict) {
  const int64_t accepted = verdict.n_accepted();
  if (grow_ > 0 && accepted >= gamma_ + 1) {  // the whole drafted depth was taken: deepen
    gamma_ = std::min(gamma_ + grow_, max_rounds_);
    return;
  }
  smoothed_ = std::clamp((1 - eta_) * smoothed_ + eta_ * static_cast<double>(accepted),
                         static_cast<double>(min_rounds_), static_cast<double>(max_rounds_));
  gamma_ = std::clamp<int64_t>(static_cast<int64_t>(std::ceil(smoothed_ - 1e-9)), min_rounds_,
                               max_rounds_);
}

ClassifierDepthController::ClassifierDepthController(std::shared_ptr<LtdClassifier> classifier,
                                                     int64_t max_rounds, int64_t nodes,
                                                     double threshold)
    : TreeShapeController(max_rounds, nodes),
      classifier_(std::move(classifier)),
      threshold_(threshold) {
  SPECBED_CHECK(classifier_ != nullptr && classifier_->config().kind != LtdClassifierKind::kC2t,
                "a depth controller needs a disco or specdec++ classifier");
}

bool ClassifierDepthController::WantsDraftHidden() const {
  return classifier_->config().kind == LtdClassifierKind::kSpecDec;
}

bool ClassifierDepthController::ContinueDrafting(const DraftRoundInfo& info) {
  const int64_t t0 = NowNanos();
  const LtdClassifierConfig& c = classifier_->config();
  const float* x = info.best_hidden;
  if (c.kind == LtdClassifierKind::kDisco) {
    SPECBED_CHECK(info.top_k == c.top_k, "disco: the classifier was trained for top_k ", c.top_k,
                  ", the drafter runs top_k ", info.top_k);
    EncodeDiscoFeatures(c.top_k, info.beam_scores, info.n_beam, info.best_entropy, info.rounds,
                        classifier_->features().data());
    x = classifier_->features().data();
  } else {
    SPECBED_CHECK(x != nullptr && info.hidden_size == c.input_dim,
                  "specdec++: the classifier reads a hidden state of size ", c.input_dim,
                  ", the drafter gave ", info.hidden_size,
                  " (a classifier trained for another head?)");
  }
  const bool go = classifier_->Probability(x) >= threshold_;
  stats_.policy_us += (NowNanos() - t0) * 1e-3;
  ++stats_.depth_calls;
  return go;
}

C2tController::C2tController(std::shared_ptr<LtdClassifier> classifier, int64_t rounds,
                             int64_t nodes, double threshold)
    : TreeShapeController(rounds, nodes),
      classifier_(std::move(classifier)),
      threshold_(threshold) {
  SPECBED_CHECK(classifier_ != nullptr && classifier_->config().kind == LtdClassifierKind::kC2t,
                "eagle3+c2t needs a c2t classifier");
}

int64_t C2tController::VerifySize(const DraftTreeInfo& info) {
  const int64_t t0 = NowNanos();
  float* x = classifier_->features().data();
  int64_t kept = 0;
  for (int64_t i = 0; i < info.n_scores; ++i) {
    EncodeC2tFeatures(info.scores[i], BeamCandidateDepth(i, info.top_k), x);
    if (classifier_->Probability(x) >= threshold_) ++kept;
  }
  stats_.policy_us += (NowNanos() - t0) * 1e-3;
  ++stats_.size_calls;
  return std::clamp<int64_t>(kept, 1, info.budget_nodes);
}

}  // namespace specbed
