// SpecBlock's cost-aware bandit adapter (see specblock_bandit.h).
// Checked by: tests/methods/specblock_test.cpp.
#include "methods/specblock/specblock_bandit.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/enum_names.h"
#include "base/error.h"
#include "base/timer.h"
#include "methods/specblock/specblock_drafter.h"
#include "methods/specblock/specblock_loss.h"
#include "methods/specblock/specblock_model.h"

namespace specbed {

const char* BanditActionName(BanditAction a) {
  static constexpr EnumName<BanditAction> kNames[] = {
      {BanditAction::kSkip, "skip"}, {BanditAction::kHead, "head"}, {BanditAction::kFull, "full"}};
  return EnumNameOf(kNames, a);
}

BanditPolicy::BanditPolicy(const BanditOptions& options) : o_(options), rng_(options.seed) {}

double BanditPolicy::epsilon() const {
  if (o_.cold_start <= 1) return o_.eps_end;
  const double f = std::min(1.0, static_cast<double>(events_) / (o_.cold_start - 1));
  return o_.eps_start + (o_.eps_end - o_.eps_start) * f;
}

BanditAction BanditPolicy::Choose(double s) {
  const double head = s * v_[1], full = s * v_[2];
  const BanditAction best = full > head ? BanditAction::kFull : BanditAction::kHead;
  if (events_ < o_.cold_start) {
    // Cold start: explore both actions (the "- cost-aware bandit" ablation keeps the head/full
    // routing, so it explores too, but never skips).
    if (o_.gating && s < o_.s_min) return BanditAction::kSkip;
    std::uniform_real_distribution<double> u(0.0, 1.0);
    if (u(rng_) < epsilon()) return u(rng_) < 0.5 ? BanditAction::kHead : BanditAction::kFull;
    if (n_[1] == 0 || n_[2] == 0) {
      if (n_[1] != n_[2]) return n_[1] < n_[2] ? BanditAction::kHead : BanditAction::kFull;
      return events_ % 2 == 0 ? BanditAction::kHead : BanditAction::kFull;
    }
    return best;
  }
  if (o_.explore > 0 && !(o_.gating && s < o_.s_min)) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    if (u(rng_) < o_.explore) return u(rng_) < 0.5 ? BanditAction::kHead : BanditAction::kFull;
  }
  if (o_.gating && head <= 0 && full <= 0) return BanditAction::kSkip;
  return best;
}

void BanditPolicy::OnEvent(BanditAction a) {
  ++events_;
  ++n_[static_cast<int>(a)];
}

void BanditPolicy::OnMeasured(BanditAction a, double delta, double s_trig) {
  if (s_trig < o_.s_min || a == BanditAction::kSkip) return;
  double& v = v_[static_cast<int>(a)];
  v = (1 - o_.alpha) * v + o_.alpha * delta / s_trig;
}

void BanditPolicy::Reset() {
  v_ = {};
  n_ = {};
  events_ = 0;
}

std::pair<double, double> QueryReward::Add(const std::string& category, double tokens,
                                           double seconds) {
  if (!per_category_) return {tokens, seconds};
  auto& [t, s] = seen_[category];
  const double tps = seconds > 0 ? tokens / seconds : 0;
  const double mean = s > 0 ? t / s : 0;
  t += tokens;
  s += seconds;
  return {mean > 0 ? tps / mean : 1.0, 1.0};
}

bool RollbackTracker::AddWindow(double tau, bool updated, bool* is_best) {
  *is_best = tau >= best_;
  if (*is_best) best_ = tau;
  history_.emplace_back(tau, updated);
  const int64_t n = static_cast<int64_t>(history_.size());
  if (n < windows_ + 1) return false;
  bool any_update = false;
  for (int64_t i = n - windows_; i < n; ++i) {
    if (!(history_[i].first < history_[i - 1].first)) return false;
  }
  for (int64_t i = n - windows_ - 1; i < n; ++i) any_update = any_update || history_[i].second;
  if (!any_update) return false;
  history_.clear();
  return true;
}

SpecBlockBanditAdapter::SpecBlockBanditAdapter(LlamaModel& target, SpecBlockDrafter& drafter,
                                               BanditOptions options, std::string log_path,
                                               const Clock* clock)
    : target_(target),
      drafter_(drafter),
      o_(options),
      log_path_(std::move(log_path)),
      clock_(clock != nullptr ? *clock : WallClock()),
      policy_(options),
      rollback_(options.rollback_windows),
      reward_(options.per_category_reward) {
  if (!log_path_.empty()) {  // one log per case: a rerun or a later case never appends to it
    std::ofstream log(log_path_, std::ios::trunc);
    SPECBED_CHECK(log.good(), "specblock+bandit: cannot write the window log '", log_path_,
                  "' (knob log: a writable file path)");
  }
  const SpecBlockModel& served = drafter_.model();
  const at::Tensor embedding = target_.weights().tok_embeddings;
  // θ_train and θ0 live on the target's device in float32 (θ0 computes without gradients).
  HeadPlacement placement = TargetHeadPlacement(target_);
  placement.dtype = at::kFloat;
  train_ = std::make_unique<SpecBlockModel>(served.config(), served.Tensors(), embedding, true,
                                            placement);
  anchor_ = std::make_unique<SpecBlockModel>(served.config(), served.Tensors(), embedding, false,
                                             placement);
  std::vector<std::pair<std::string, at::Tensor>> head, all = train_->named_parameters();
  std::vector<bool> head_decay, all_decay;
  for (const auto& [name, p] : all) {
    all_decay.push_back(false);
    if (SpecBlockIsHeadParam(name)) {
      head.emplace_back(name, p);
      head_decay.push_back(false);
    }
  }
  head_opt_ = std::make_unique<AdamWOptimizer>(head, head_decay, 0.9, 0.999, 0.0);
  full_opt_ = std::make_unique<AdamWOptimizer>(all, all_decay, 0.9, 0.999, 0.0);
  good_ = served.Tensors();
  window_weights_ = good_;
}

SpecBlockBanditAdapter::~SpecBlockBanditAdapter() = default;

void SpecBlockBanditAdapter::BeginSequence(const DraftBegin& begin) {
  s_ = 0;
  position_ = static_cast<int64_t>(begin.prompt->size());  // index of the first generated token
  category_ = begin.category;
  served_.Begin(begin);
  q_steps_ = q_tokens_ = 0;
  t_begin_ = clock_.Now();
}

void SpecBlockBanditAdapter::Observe(const DraftTree& tree, const Verdict& verdict) {
  const int64_t a = verdict.n_accepted();
  const int64_t slot = a == 0 ? 0 : verdict.path.back() + 1;
  const double r = drafter_.SlotProb(slot, verdict.bonus);
  // The committed sequence index of the bonus: position_ is the index of the current root.
  const int64_t bonus_index = position_ + a + 1;
  if (r >= 0) s_ += 1.0 - r;
  served_.Observe(verdict, r >= 0, bonus_index);
  position_ += a + 1;
  ++q_steps_;
  q_tokens_ += a + 1;
}

void SpecBlockBanditAdapter::Fire(BanditAction a) {
  const int64_t t0 = NowMicros();
  const double c0 = clock_.Now();
  std::vector<ServedRequest>& buf = buffers_[static_cast<int>(a)];
  // The buffered queries (whole, or each its last max_tokens tokens), with the target as served.
  // Built on θ_train's device (the target's); the mask is read on its host layout (no copy).
  const OnlineBatch batch = BuildOnlineBatch(buf, train_->device());
  for (const ServedRequest& r : buf) stats_.context_tokens += static_cast<int64_t>(r.tokens.size());
  if (batch.host_loss_mask.sum().item<double>() > 0) {
    const at::Tensor& aux = batch.features;
    const at::Tensor& tokens = batch.tokens;
    // Every block-1 slot that drafts a rejected position (SpecBlockSlotsDrafting), found on the
    // host (SpecBlockSlotLogits plans its context split there); the gathered slot and label
    // indices go up in one host-to-device copy each.
    const SpecBlockSlotRows rows =
        SpecBlockSlotsDrafting(batch.host_loss_mask, train_->config().block_size);
    const at::Tensor& seq = rows.seq;  // host: TeacherRowsAtFlat checks it there
    const at::Tensor labels = tokens.reshape(-1).index_select(0, (seq + 1).to(batch.device()));
    at::Tensor anchor_logits;  // θ0's, for the KL anchor (not needed by OSD's objective)
    if (!o_.osd_objective) {
      at::NoGradGuard no_grad;
      anchor_logits = SpecBlockSlotLogits(*anchor_, aux, tokens, rows, true);
    }
    const at::Tensor teacher_rows =
        at::log_softmax(TeacherRowsAtFlat(batch, seq).index_select(-1, train_->draft_ids()), -1);
    AdamWOptimizer& opt = a == BanditAction::kHead ? *head_opt_ : *full_opt_;
    for (int64_t step = 0; step < o_.steps; ++step) {
      at::Tensor rank_rows;
      const at::Tensor logits =
          SpecBlockSlotLogits(*train_, aux, tokens, rows, a == BanditAction::kHead,
                              o_.osd_objective ? nullptr : &rank_rows);
      const at::Tensor log_q = at::log_softmax(logits, -1);
      const at::Tensor fkl = (teacher_rows.exp() * (teacher_rows - log_q)).sum(-1).mean();
      at::Tensor loss = fkl;
      if (!o_.osd_objective) {
        const at::Tensor anchor_lp = at::log_softmax(anchor_logits, -1);
        const at::Tensor kl0 = (log_q.exp() * (log_q - anchor_lp)).sum(-1).mean();
        const at::Tensor buckets = SpecBlockBucketLabels(logits, labels, *train_);
        loss = loss + at::cross_entropy_loss(rank_rows, buckets) + o_.kl_lambda * kl0;
      }
      loss.backward();
      // Head-only: the trunk ran without gradients; the full optimiser covers everything.
      opt.Step(o_.lr, o_.osd_objective ? 0.0 : 0.5);
      if (a == BanditAction::kHead) {
        for (const auto& [name, p] : train_->named_parameters()) {
          if (p.grad().defined()) p.mutable_grad() = at::Tensor();
        }
      }
    }
    drafter_.model().CopyFrom(*train_);  // θ_train -> θ_inf
  }
  buf.clear();
  ++stats_.events;
  ++window_.events;
  if (a == BanditAction::kHead) {
    ++stats_.head_events;
    ++window_.head_events;
  } else if (a == BanditAction::kFull) {
    ++stats_.full_events;
    ++window_.full_events;
  }
  // Read after the event is counted: a cost-model clock may charge the event by its kind.
  const double secs = (NowMicros() - t0) * 1e-6;  // reported: wall time
  stats_.update_seconds += secs;
  window_.update_seconds += secs;
  pending_update_s_ += clock_.Now() - c0;  // charged to the next query's reward: clock_
  policy_.OnEvent(a);
}

void SpecBlockBanditAdapter::CloseWindow() {
  window_.tau = win_steps_ > 0 ? static_cast<double>(win_tokens_) / win_steps_ : 0;
  window_.tokens_per_s = win_seconds_ > 0 ? win_tokens_ / win_seconds_ : 0;
  bool best = false;
  if (rollback_.AddWindow(window_.tau, window_.events > 0, &best)) {
    // The snapshot is on the served drafter's device and in its dtype: restored there.
    HeadPlacement placement;
    placement.device = drafter_.model().device();
    placement.dtype = drafter_.model().dtype();
    drafter_.model().CopyFrom(*std::make_unique<SpecBlockModel>(
        drafter_.model().config(), good_, target_.weights().tok_embeddings, false, placement));
    train_->CopyFrom(drafter_.model());
    policy_.Reset();
    ++window_.rollbacks;
    ++stats_.rollbacks;
  } else if (best) {
    // The weights that served this window from its start (an event inside the window changed
    // the served weights after part of its tau was measured; those are not known to be good).
    good_ = window_weights_;
  }
  if (window_.events > 0 || window_.rollbacks > 0) window_weights_ = drafter_.model().Tensors();
  if (!log_path_.empty()) {
    nlohmann::json j;
    j["window"] = stats_.windows.size();
    j["queries"] = window_.queries;
    j["tau"] = window_.tau;
    j["tokens_per_s"] = window_.tokens_per_s;
    j["skip"] = window_.actions[0];
    j["head"] = window_.actions[1];
    j["full"] = window_.actions[2];
    j["events"] = window_.events;
    j["head_events"] = window_.head_events;
    j["full_events"] = window_.full_events;
    j["rollbacks"] = window_.rollbacks;
    j["update_seconds"] = window_.update_seconds;
    j["v_head"] = policy_.value(BanditAction::kHead);
    j["v_full"] = policy_.value(BanditAction::kFull);
    std::ofstream(log_path_, std::ios::app) << j.dump() << "\n";
  }
  stats_.windows.push_back(window_);
  window_ = BanditWindow();
  win_steps_ = win_tokens_ = 0;
  win_seconds_ = 0;
}

void SpecBlockBanditAdapter::EndSequence(const std::vector<int32_t>& committed,
                                         int64_t prompt_len) {
  // Throughput of this query (the previous event's update time charged to it).
  const double secs = (clock_.Now() - t_begin_) + pending_update_s_;
  pending_update_s_ = 0;
  const double tokens = static_cast<double>(q_tokens_);
  const auto [reward_num, reward_den] = reward_.Add(category_, tokens, secs);
  history_.emplace_back(reward_num, reward_den);
  ++queries_;
  win_steps_ += q_steps_;
  win_tokens_ += q_tokens_;
  win_seconds_ += secs;
  ++window_.queries;
  if (measuring_) {
    meas_tokens_ += reward_num;  // the interval's reward: ratio of the sums
    meas_seconds_ += reward_den;
    if (--meas_left_ == 0) {
      measuring_ = false;
      const double tps = meas_seconds_ > 0 ? meas_tokens_ / meas_seconds_ : 0;
      policy_.OnMeasured(trig_a_, tps - trig_base_, trig_s_);
    }
  }
  BanditAction a = BanditAction::kSkip;
  if (queries_ <= o_.warmup) {
    double tt = 0, ss = 0;
    for (const auto& [t, s] : history_) {
      tt += t;
      ss += s;
    }
    warm_tps_ = ss > 0 ? tt / ss : 0;
  } else {
    a = policy_.Choose(s_);
  }
  ++window_.actions[static_cast<int>(a)];
  if (a != BanditAction::kSkip) {
    buffers_[static_cast<int>(a)].push_back(served_.Finish(committed, o_.max_tokens));
  }
  const bool blocked = o_.gating && (blocked_ > 0 || measuring_);
  if (blocked_ > 0) --blocked_;
  if (a != BanditAction::kSkip && !blocked &&
      static_cast<int64_t>(buffers_[static_cast<int>(a)].size()) >= o_.buffer) {
    // Without gating (the "- bandit" ablation) an event can fire inside the previous event's
    // measurement interval: close that one early over the queries it saw, so the head/full
    // values still learn (otherwise every event restarts the interval and none ever closes).
    if (measuring_ && meas_left_ < o_.interval) {
      const double tps = meas_seconds_ > 0 ? meas_tokens_ / meas_seconds_ : 0;
      policy_.OnMeasured(trig_a_, tps - trig_base_, trig_s_);
    }
    // Baseline: the `interval` queries before the trigger (the warm-up's for the first event).
    double tt = 0, ss = 0;
    const int64_t n = static_cast<int64_t>(history_.size());
    for (int64_t i = std::max<int64_t>(0, n - o_.interval); i < n; ++i) {
      tt += history_[i].first;
      ss += history_[i].second;
    }
    trig_base_ = policy_.events() == 0 ? warm_tps_ : (ss > 0 ? tt / ss : 0);
    trig_s_ = s_;
    trig_a_ = a;
    Fire(a);
    measuring_ = true;
    meas_left_ = o_.interval;
    meas_tokens_ = meas_seconds_ = 0;
    blocked_ = o_.block_after;
  }
  if (window_.queries >= o_.interval) CloseWindow();
}

}  // namespace specbed
