// SpecBlock's cost-aware bandit adapter (spec §5): decides per query whether to skip, update the
// heads only (lm_head + final norm + rank head) or update the whole drafter, from a value per
// action learned from the measured throughput change after each update.
//
// Per query (one prompt's generation): signal s = sum over verify steps whose path stopped at a
// node with drafted children of (1 - r), r = the draft probability of the token the target chose
// there (the bonus). Lifecycle: `warmup` queries only measure throughput; then per query the
// policy picks an action (BanditPolicy); a non-skip action pushes the query (its committed tokens
// and rejected positions) into that action's buffer; a buffer holding `buffer` queries fires one
// training event (unless blocked: `block_after` queries after every event, or a measurement
// interval still open): `steps` AdamW steps on forward KL(target || draft) at the buffered
// positions (the target as served: its logits and hidden states kept while the query ran,
// methods/common/served_teacher.h; no teacher forward) + rank-head CE + kl_lambda · KL(p_train ||
// p_theta0) (or, with osd_objective, forward KL alone: specblock+osd's loss), on the whole served
// queries unless max_tokens caps them, then the served drafter takes the new weights and a
// measurement interval of `interval` queries opens. When it closes: delta = throughput over the
// interval (update time included) - throughput over the `interval` queries before the event (or the
// warm-up's), and v[a] <- (1 - alpha) v[a] + alpha delta / s_trig unless s_trig < s_min. Windows of
// `interval` queries track tau; three consecutive falls revert the served and trained drafter to
// the last good snapshot (the best-tau window's weights) and reset the values. Cold start: the
// first `cold_start` events pick head or full (never skip, unless s < s_min): with probability eps
// (linear eps_start -> eps_end over the cold start) uniformly, else the one with fewer samples,
// then the larger estimate. After it: argmax of s·v, skip when both <= 0, except that with
// probability `explore` a query with s >= s_min probes head or full uniformly, so exploration never
// dies (the paper stops exploring after the cold start; skip was then absorbing: a skipped query
// never updates a value). A rollback resets the values and reopens the cold start. A rollback needs
// an update to undo: the falling windows must follow a training event (a fall with no event in it
// is a workload change, not a harmful update). `gating = false` is the paper's "- cost-aware
// bandit" ablation: never skip, never blocked, every saturation fires (head/full routing by the
// estimates kept). Every update runs inside the request that triggers it (charged to its decode
// time). θ_train and θ0 live on the target's device in float32 (the served drafter keeps the
// target's dtype). Time: the reward's seconds (a query's time from BeginSequence to EndSequence,
// plus the previous event's update time charged to the next query) are read from an injected Clock
// (base/clock.h; WallClock, the steady clock, unless given: production measures real throughput);
// the reported update_seconds (stats and window log) are always wall time. Tests inject a cost
// model so that the bandit's choices do not depend on the machine's load. Checked by:
// tests/methods/specblock_test.cpp (BanditPolicy decisions with fixed seeds),
// tests/methods/served_teacher_test.cpp (θ_train on the target's device; OnlineUpdateCuda);
// the adapter on a cost-model clock in SpecBlockAdapt.BanditUpdates* (deterministic).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "harness/engine/method.h"
#include "methods/common/served_teacher.h"
#include "methods/common/train/optimizer.h"
#include "models/llama_model.h"

namespace specbed {

class SpecBlockDrafter;
class SpecBlockModel;

enum class BanditAction { kSkip = 0, kHead = 1, kFull = 2 };
const char* BanditActionName(BanditAction a);

struct BanditOptions {
  double alpha = 0.10;
  double s_min = 5;
  double kl_lambda = 0.01;
  int64_t warmup = 10;     // queries that only measure
  int64_t cold_start = 8;  // training events with forced exploration
  double eps_start = 0.30, eps_end = 0.10;
  double explore = 0.10;    // after the cold start: probability of probing head/full (0 = paper)
  int64_t block_after = 2;  // queries after an event that may not fire
  int64_t buffer = 8;       // queries per buffer before it fires
  int64_t interval = 8;     // measurement interval / window, in queries
  int64_t rollback_windows = 3;
  int64_t steps = 1;  // AdamW steps per event
  double lr = 1e-4;
  int64_t max_tokens = 0;  // as OsdOptions::max_tokens: 0 = the whole served request
  // An event's loss: false = forward KL + rank-head CE + kl_lambda KL anchor, gradients clipped
  // at 0.5 (spec §5.4); true = OSD's update (forward KL only, unclipped; specblock+osd's loss).
  bool osd_objective = false;
  bool gating = true;
  // The reward of a query: its tokens/s over the mean tokens/s of the earlier queries of its
  // prompt category (true), or raw tokens/s (false, the spec's [R]; the change of an interval
  // then moves with the prompt mix as much as with the update).
  bool per_category_reward = true;
  uint64_t seed = 0;
};

// The decision logic alone (no model), for tests.
class BanditPolicy {
 public:
  explicit BanditPolicy(const BanditOptions& options);
  // Action for a query with signal s (after warm-up).
  BanditAction Choose(double s);
  // A training event of action `a` fired.
  void OnEvent(BanditAction a);
  // A measurement interval of action `a` closed with throughput change `delta` for trigger
  // signal `s_trig` (ignored when s_trig < s_min).
  void OnMeasured(BanditAction a, double delta, double s_trig);
  void Reset();  // values, sample counts and events back to 0: the cold start again (rollback)
  double value(BanditAction a) const { return v_[static_cast<int>(a)]; }
  int64_t samples(BanditAction a) const { return n_[static_cast<int>(a)]; }
  int64_t events() const { return events_; }
  double epsilon() const;

 private:
  BanditOptions o_;
  std::array<double, 3> v_{};
  std::array<int64_t, 3> n_{};
  int64_t events_ = 0;
  std::mt19937_64 rng_;
};

// The reward of one query as a ratio (numerator, denominator); an interval's throughput is the
// ratio of the sums. Raw: (tokens, seconds). Per category: (tokens/s over the mean tokens/s of
// the earlier queries of the same category, 1), 1 for a category's first query; a stretch of
// slower prompts then reads as no change (spec G10: Δ_tp at batch 1 varies with the prompt).
class QueryReward {
 public:
  explicit QueryReward(bool per_category) : per_category_(per_category) {}
  // The reward of a query of `category` that produced `tokens` in `seconds`; remembered after.
  std::pair<double, double> Add(const std::string& category, double tokens, double seconds);

 private:
  bool per_category_;
  std::map<std::string, std::pair<double, double>> seen_;  // category -> (tokens, seconds)
};

// Tracks window tau and decides rollbacks.
class RollbackTracker {
 public:
  explicit RollbackTracker(int64_t windows) : windows_(windows) {}
  // Adds a closed window's tau (`updated`: a training event changed the served weights in it);
  // returns true when tau fell over the last `windows` windows and an update happened in them or
  // in the window before the first fall (then the history restarts). `*is_best` says whether
  // this window is the best so far.
  bool AddWindow(double tau, bool updated, bool* is_best);

 private:
  int64_t windows_;
  std::vector<std::pair<double, bool>> history_;  // (tau, updated) per window
  double best_ = -1;
};

struct BanditWindow {
  int64_t queries = 0;
  double tau = 0;
  double tokens_per_s = 0;           // on the adapter's clock (what the reward saw)
  std::array<int64_t, 3> actions{};  // per query
  int64_t events = 0;
  int64_t head_events = 0, full_events = 0;
  int64_t rollbacks = 0;
  double update_seconds = 0;  // wall time
};

struct BanditStats {
  std::vector<BanditWindow> windows;
  int64_t events = 0, rollbacks = 0;
  int64_t head_events = 0, full_events = 0;  // counted before the clock reads the event's end
  double update_seconds = 0;                 // wall time
  int64_t context_tokens = 0;                // tokens θ_train attended over, summed over events
};

class SpecBlockBanditAdapter : public Adapter {
 public:
  // `drafter`: the served drafter (θ_inf); the adapter keeps θ_train and θ0 copies. `clock`:
  // the reward's time source (null = WallClock); it must outlive the adapter.
  SpecBlockBanditAdapter(LlamaModel& target, SpecBlockDrafter& drafter, BanditOptions options,
                         std::string log_path = "", const Clock* clock = nullptr);
  ~SpecBlockBanditAdapter() override;

  void BeginSequence(const DraftBegin& begin) override;
  void Observe(const DraftTree& tree, const Verdict& verdict) override;
  void EndSequence(const std::vector<int32_t>& committed, int64_t prompt_len) override;

  const BanditStats& stats() const { return stats_; }
  const BanditPolicy& policy() const { return policy_; }
  // θ_train: float32 leaves on the target's device.
  const SpecBlockModel& trained() const { return *train_; }

 private:
  void Fire(BanditAction a);
  void CloseWindow();

  LlamaModel& target_;
  SpecBlockDrafter& drafter_;
  BanditOptions o_;
  std::string log_path_;
  const Clock& clock_;  // the reward's time
  std::unique_ptr<SpecBlockModel> train_, anchor_;
  std::unique_ptr<AdamWOptimizer> head_opt_, full_opt_;
  BanditPolicy policy_;
  RollbackTracker rollback_;
  std::map<std::string, at::Tensor> good_;  // last good snapshot
  // The served weights when the current window opened (what a best window's tau measured).
  std::map<std::string, at::Tensor> window_weights_;
  // Buffered queries (the rejected positions supervised, with the teacher as served).
  std::array<std::vector<ServedRequest>, 3> buffers_;
  // Current query.
  ServedTeacher served_;
  double s_ = 0;
  std::string category_;
  int64_t position_ = 0, q_steps_ = 0, q_tokens_ = 0;
  double t_begin_ = 0;  // clock_ at BeginSequence
  // Reward history per query (QueryReward: numerator, denominator).
  QueryReward reward_;
  std::vector<std::pair<double, double>> history_;
  int64_t queries_ = 0, blocked_ = 0;
  double warm_tps_ = 0;
  // Open measurement interval.
  bool measuring_ = false;
  BanditAction trig_a_ = BanditAction::kSkip;
  double trig_s_ = 0, trig_base_ = 0, meas_tokens_ = 0, meas_seconds_ = 0;
  int64_t meas_left_ = 0;
  double pending_update_s_ = 0;  // on clock_
  BanditWindow window_;
  int64_t win_steps_ = 0, win_tokens_ = 0;
  double win_seconds_ = 0;
  BanditStats stats_;
};

}  // namespace specbed
