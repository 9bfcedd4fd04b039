// The batch engine and the draft schedules (see batch_engine.h).
#include "harness/engine/batch_engine.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cmath>

#include "base/error.h"
#include "base/timer.h"

namespace specbed {

namespace {

std::atomic<int> g_fault{static_cast<int>(BatchFault::kNone)};

class FixedSchedule : public DraftSchedule {
 public:
  void Choose(const std::vector<int64_t>& slots, std::vector<int64_t>& caps) override {
    caps.assign(slots.size(), -1);
  }
  nlohmann::json ToJson() const override { return {{"policy", "fixed"}}; }
};

class ByBatchSchedule : public DraftSchedule {
 public:
  explicit ByBatchSchedule(std::map<int64_t, int64_t> k_by_batch) : k_(std::move(k_by_batch)) {}
  void Choose(const std::vector<int64_t>& slots, std::vector<int64_t>& caps) override {
    const auto it = k_.lower_bound(static_cast<int64_t>(slots.size()));
    caps.assign(slots.size(), it == k_.end() ? 0 : it->second);
  }
  nlohmann::json ToJson() const override {
    nlohmann::json table = nlohmann::json::object();
    for (const auto& [b, k] : k_) table[std::to_string(b)] = k;
    return {{"policy", "by_batch"}, {"k_by_batch", table}};
  }

 private:
  std::map<int64_t, int64_t> k_;
};

class SplitSchedule : public DraftSchedule {
 public:
  explicit SplitSchedule(int64_t tokens) : tokens_(tokens) {}
  void SetMethodNodes(int64_t nodes) override { cap_ = nodes; }
  void Choose(const std::vector<int64_t>& slots, std::vector<int64_t>& caps) override {
    caps.assign(slots.size(), 0);
    std::vector<double> next(slots.size());  // probability the sequence's next node is accepted
    for (size_t i = 0; i < slots.size(); ++i) next[i] = Rate(slots[i]);
    for (int64_t t = 0; t < tokens_; ++t) {
      int64_t best = -1;
      for (size_t i = 0; i < slots.size(); ++i) {
        if (caps[i] >= cap_) continue;
        if (best < 0 || next[i] > next[best]) best = static_cast<int64_t>(i);
      }
      if (best < 0) break;
      ++caps[best];
      next[best] *= Rate(slots[best]);
    }
  }
  void Observe(int64_t slot, int64_t drafted, int64_t accepted) override {
    if (drafted <= 0) return;
    // Per-node acceptance of a chain: accepted / drafted, smoothed.
    const double observed = static_cast<double>(accepted) / static_cast<double>(drafted);
    double& r = rate_[slot];
    r = rate_.count(slot) ? 0.8 * r + 0.2 * observed : observed;
  }
  void Reset(int64_t slot) override { rate_.erase(slot); }
  nlohmann::json ToJson() const override { return {{"policy", "split"}, {"tokens", tokens_}}; }

 private:
  double Rate(int64_t slot) const {
    const auto it = rate_.find(slot);
    return it == rate_.end() ? 0.5 : std::clamp(it->second, 0.01, 0.99);
  }
  int64_t tokens_, cap_ = 0;
  std::map<int64_t, double> rate_;
};

// The k_by_batch table of a by_batch schedule: keys batch sizes >= 1, values K >= 0.
std::map<int64_t, int64_t> ParseKByBatch(const nlohmann::json& table, const std::string& context) {
  SPECBED_CHECK(table.is_object() && !table.empty(), context,
                ": k_by_batch must be a non-empty object {\"batch size\": K, ...}");
  std::map<int64_t, int64_t> k;
  for (const auto& [key, value] : table.items()) {
    int64_t b = 0;
    try {
      size_t used = 0;
      b = std::stoll(key, &used);
      SPECBED_CHECK(used == key.size(), "");
    } catch (...) {
      Fail(context, ": k_by_batch key \"", key, "\" is not a batch size (an integer >= 1)");
    }
    SPECBED_CHECK(b >= 1, context, ": k_by_batch key ", b, " must be a batch size >= 1");
    SPECBED_CHECK(
        value.is_number_integer() && value.get<int64_t>() >= -1, context, ": k_by_batch[\"", key,
        "\"] must be a draft length K >= 0 (or -1: the method's own budget), got ", value.dump());
    k[b] = value.get<int64_t>();
  }
  return k;
}

}  // namespace

void SetBatchFaultForTesting(BatchFault fault) {
  g_fault.store(static_cast<int>(fault), std::memory_order_relaxed);
}

std::unique_ptr<DraftSchedule> ParseDraftSchedule(const nlohmann::json& spec,
                                                  const std::string& context) {
  SPECBED_CHECK(spec.is_object() && spec.contains("policy") && spec["policy"].is_string(), context,
                ": a schedule is {\"policy\": \"fixed\" | \"by_batch\" | \"split\", ...}, got ",
                spec.dump());
  const std::string policy = spec["policy"];
  auto only = [&](std::initializer_list<const char*> keys) {
    for (const auto& [key, value] : spec.items()) {
      bool known = key == "policy";
      for (const char* k : keys) known = known || key == k;
      SPECBED_CHECK(known, context, ": schedule \"", policy, "\" has no setting \"", key, "\"");
    }
  };
  if (policy == "fixed") {
    only({});
    return std::make_unique<FixedSchedule>();
  }
  if (policy == "by_batch") {
    only({"k_by_batch"});
    SPECBED_CHECK(spec.contains("k_by_batch"), context, ": schedule by_batch needs k_by_batch");
    return std::make_unique<ByBatchSchedule>(ParseKByBatch(spec["k_by_batch"], context));
  }
  if (policy == "split") {
    only({"tokens"});
    SPECBED_CHECK(spec.contains("tokens") && spec["tokens"].is_number_integer() &&
                      spec["tokens"].get<int64_t>() >= 0,
                  context, ": schedule split needs \"tokens\": the draft nodes per step (>= 0)");
    return std::make_unique<SplitSchedule>(spec["tokens"].get<int64_t>());
  }
  Fail(context, ": unknown schedule policy \"", policy, "\" (expected fixed, by_batch or split)");
}

BatchEngine::BatchEngine(LlamaModel& target, DecoderFactory make_decoder, BatchOptions options,
                         std::unique_ptr<DraftSchedule> schedule)
    : target_(target),
      make_decoder_(std::move(make_decoder)),
      options_(options),
      schedule_(std::move(schedule)) {
  SPECBED_CHECK(options_.max_running >= 1, "batch engine: max_running must be >= 1");
  SPECBED_CHECK(options_.cache_len >= 2, "batch engine: cache_len must be >= 2");
  if (!schedule_) schedule_ = std::make_unique<FixedSchedule>();
  schedule_->SetMethodNodes(options_.method_nodes);
  slots_.resize(options_.max_running);
}

int64_t BatchEngine::running() const {
  int64_t n = 0;
  for (const Slot& s : slots_) n += s.id >= 0 ? 1 : 0;
  return n;
}

const std::vector<int32_t>& BatchEngine::generated(int64_t id) const {
  for (const Slot& s : slots_) {
    if (s.id == id) return s.stepper->generated();
  }
  Fail("batch engine: request ", id, " is not running");
}

BatchEngine::Slot& BatchEngine::FreeSlot() {
  for (Slot& s : slots_) {
    if (s.id < 0) return s;
  }
  Fail("batch engine: no free slot (", options_.max_running, " running)");
}

void BatchEngine::Admit(int64_t id, const std::vector<int32_t>& prompt,
                        const GenerationConfig& config) {
  Slot& slot = FreeSlot();
  if (!slot.decoder) {
    slot.decoder = make_decoder_();
    slot.stepper = slot.decoder->stepper();
    SPECBED_CHECK(slot.stepper != nullptr,
                  "batch engine: this method runs its own decode loop and cannot share a batch "
                  "(run it at concurrency 1)");
    slot.cache = target_.NewCache(1, options_.cache_len);
  }
  slot.id = id;
  schedule_->Reset(&slot - slots_.data());
  slot.stepper->Start(prompt, config, slot.cache);
  if (slot.stepper->stopped()) {
    double adapt_us = 0;
    FinishSlot(slot, adapt_us);
  }
}

void BatchEngine::FinishSlot(Slot& slot, double& adapt_us) {
  FinishedRequest done;
  done.id = slot.id;
  done.adapt_us = slot.stepper->Finish(done.result);
  adapt_us += done.adapt_us;
  finished_.push_back(std::move(done));
  slot.id = -1;
}

std::vector<FinishedRequest> BatchEngine::TakeFinished() {
  std::vector<FinishedRequest> out;
  out.swap(finished_);
  return out;
}

// Plan, first half: every live sequence's step decided, its draft job collected (a sequence whose
// context is full stops here).
void BatchEngine::PlanDrafts(const std::vector<int64_t>& live, const std::vector<int64_t>& caps,
                             StepPlan& plan, BatchStepReport& report) {
  for (size_t j = 0; j < live.size(); ++j) {
    Slot& slot = slots_[live[j]];
    DraftJob job;
    if (!slot.stepper->PlanDraft(caps[j], job)) {
      FinishSlot(slot, report.t_adapt_us);
      continue;
    }
    report.k_chosen = std::max(report.k_chosen, caps[j] < 0 ? options_.method_nodes : caps[j]);
    plan.in_step.push_back(live[j]);
    if (job.drafter != nullptr) plan.jobs.push_back(job);
  }
}

// The step's drafts: jobs whose drafters share a DraftBatchKey in one DraftBatch call each
// (options_.batch_drafts), every other job alone.
void BatchEngine::MakeDrafts(const std::vector<DraftJob>& jobs) const {
  std::vector<bool> done(jobs.size(), false);
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (done[i]) continue;
    const void* key = options_.batch_drafts ? jobs[i].drafter->DraftBatchKey() : nullptr;
    if (key == nullptr) {
      jobs[i].drafter->Draft(jobs[i].step, *jobs[i].tree);
      continue;
    }
    std::vector<DraftJob> group;
    for (size_t k = i; k < jobs.size(); ++k) {
      if (!done[k] && jobs[k].drafter->DraftBatchKey() == key) {
        group.push_back(jobs[k]);
        done[k] = true;
      }
    }
    jobs[i].drafter->DraftBatch(group);
  }
}

// The batch forward over the step's chunks, then each sequence's acceptance and commit.
void BatchEngine::ForwardAndConclude(const StepPlan& plan, std::vector<SeqChunk>& chunks,
                                     BatchStepReport& report) {
  const int64_t t1 = NowNanos();
  RaggedOptions options;
  options.hidden_layers = slots_[plan.in_step[0]].stepper->HiddenLayers();
  options.batch_invariant = options_.batch_invariant;
  if (chunks.size() >= 2 &&
      g_fault.load(std::memory_order_relaxed) == static_cast<int>(BatchFault::kSwapCaches)) {
    std::swap(chunks[0].cache, chunks[1].cache);  // the negative control's bug
  }
  const RaggedOutput out = target_.ForwardRagged(chunks, options);
  report.t_verify_us += (NowNanos() - t1) * 1e-3;
  for (size_t j = 0; j < plan.in_step.size(); ++j) {
    Slot& slot = slots_[plan.in_step[j]];
    const StepStats stats = slot.stepper->Conclude(out.logits[j], out.hidden[j]);
    report.n_drafted += stats.n_drafted;
    report.n_accepted += stats.n_accepted;
    report.n_emitted += stats.n_emitted;
    report.t_draft_us += stats.t_draft_us;
    report.t_verify_us += stats.t_verify_us;
    report.emitted.push_back({slot.id, stats.n_emitted});
    schedule_->Observe(plan.in_step[j], stats.n_drafted, stats.n_accepted);
    if (slot.stepper->stopped()) FinishSlot(slot, report.t_adapt_us);
  }
}

BatchStepReport BatchEngine::Step() {
  const int64_t t0 = NowNanos();
  std::vector<int64_t> live;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].id >= 0) live.push_back(static_cast<int64_t>(i));
  }
  SPECBED_CHECK(!live.empty(), "batch engine: Step with no running sequence");
  BatchStepReport report;
  std::vector<int64_t> caps;
  schedule_->Choose(live, caps);
  StepPlan plan;
  PlanDrafts(live, caps, plan, report);
  const int64_t t_draft = NowNanos();
  MakeDrafts(plan.jobs);
  report.t_draft_us += (NowNanos() - t_draft) * 1e-3;
  std::vector<SeqChunk> chunks;  // the verify rows, in plan.in_step order
  for (int64_t slot : plan.in_step) {
    chunks.push_back(slots_[slot].stepper->PlanVerify());
    report.n_verify_tokens += chunks.back().tokens.size(1);
  }
  report.batch_size = static_cast<int64_t>(chunks.size());
  if (!chunks.empty()) ForwardAndConclude(plan, chunks, report);
  const double total_us = (NowNanos() - t0) * 1e-3;
  report.t_draft_us += report.t_adapt_us;
  report.t_other_us = std::max(0.0, total_us - report.t_draft_us - report.t_verify_us);
  return report;
}

}  // namespace specbed
