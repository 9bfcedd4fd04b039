// The draft -> verify -> accept loop (see speculative_decoder.h) and ArDecoder.
#include "harness/engine/speculative_decoder.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "base/error.h"
#include "base/timer.h"
#include "kernels/engine_counters.h"
#include "models/device.h"

namespace specbed {

namespace {

// The phases of one step on the device-synchronized clock, lap by lap: each Lap(phase) charges
// the time since the previous lap to `phase`, so draft + verify + other tile the step and the
// loop never does clock arithmetic. The first lap starts at the previous step's end (or the end of
// prefill: the loop overhead between steps is "other"). Accepting (Drafter::Accept, the adapter
// and controller hooks) is draft time; committing the tokens is "other". Beside the synced clock
// each lap marks the device's stream (`marks`: timing events, read once per step after the last
// lap's sync) for the phases' device time, and the step's engine counters are the difference of
// two readings (kernels/engine_counters.h).
class StepPhases {
 public:
  enum Phase { kDraft, kVerify, kOther };
  static constexpr int kMaxLaps = 8;
  StepPhases(const at::Device& device, int64_t start_ns, DeviceMarks& marks)
      : device_(device), last_ns_(start_ns), marks_(marks), counters_(ReadEngineCounters()) {
    if (marks_.size() == 0) {
      marks_.Mark();  // a generation's first step: its device time starts here
    } else {
      marks_.KeepLast();
    }
  }
  void Lap(Phase phase) {
    marks_.Mark();
    lap_phase_[std::min<int64_t>(marks_.size() - 1, kMaxLaps - 1)] = phase;
    const int64_t now = DeviceNowNanos(device_);
    ns_[phase] += now - last_ns_;
    last_ns_ = now;
  }
  int64_t end_ns() const { return last_ns_; }
  // The step's phase times and counters; on the first step the drafter's Begin (`begin_ns`, part
  // of the first "other" lap) moves to draft time and its prefill part is reported beside it.
  void SetStepTimes(bool first, int64_t begin_ns, int64_t drafter_prefill_ns,
                    StepStats& stats) const {
    const int64_t moved = first ? begin_ns : 0;
    stats.t_draft_us = (ns_[kDraft] + moved) * 1e-3;
    stats.t_verify_us = ns_[kVerify] * 1e-3;
    stats.t_other_us = (ns_[kOther] - moved) * 1e-3;
    stats.t_draft_prefill_us = first ? drafter_prefill_ns * 1e-3 : 0.0;
    stats.t_draft_busy_us = stats.t_draft_us;
    stats.t_verify_busy_us = stats.t_verify_us;
    double device_us[3] = {0, 0, 0};
    for (int64_t i = 1; i < marks_.size() && i < kMaxLaps; ++i) {
      device_us[lap_phase_[i]] += marks_.ElapsedUs(i);
    }
    stats.t_draft_device_us = device_us[kDraft];
    stats.t_verify_device_us = device_us[kVerify];
    stats.t_other_device_us = device_us[kOther];
    const EngineCounters d = ReadEngineCounters().Since(counters_);
    stats.n_launches = d.launches;
    stats.n_host_reads = d.host_reads;
    stats.n_graph_replays = d.replays;
    stats.n_graph_captures = d.captures;
    stats.n_h2d_copies = d.h2d;
    stats.n_d2h_copies = d.d2h;
  }

 private:
  at::Device device_;
  int64_t last_ns_;
  int64_t ns_[3] = {0, 0, 0};
  DeviceMarks& marks_;
  EngineCounters counters_;  // at the step's start
  Phase lap_phase_[kMaxLaps] = {};
};

// Pushes the verdict's tokens until a stop rule fires; returns how many were emitted.
int64_t CommitTokens(const std::vector<int32_t>& tokens, std::vector<int32_t>& committed,
                     StopChecker& stop) {
  const size_t before = stop.tokens().size();
  for (int32_t token : tokens) {
    committed.push_back(token);
    if (stop.Push(token) != StopReason::kNone) break;
  }
  return static_cast<int64_t>(stop.tokens().size() - before);
}

// Prepares one step's draft: `step` gets the controller's budget cut to what the cache holds
// (`free` slots) and the tokens still allowed (`left`: a deeper draft could not be emitted), and
// its draft hooks; `tree` is cleared for the drafter.
void PrepareDraftStep(Controller* controller, DraftStep& step, DraftBudget& budget, int64_t free,
                      int64_t left, DraftTree& tree) {
  step.hooks = controller != nullptr ? controller->draft_hooks() : nullptr;
  if (controller) controller->BeforeStep(step, budget);
  step.budget.nodes = std::min(budget.nodes, free);
  step.budget.depth = std::min({budget.depth, step.budget.nodes, left});
  tree.Clear();
}

// Checks a drafter's tree for `step` (structure, budget); returns the draft's depth.
int32_t CheckedDraftDepth(const DraftStep& step, const DraftTree& tree, int64_t vocab) {
  tree.ValidateStructure(vocab);
  const int32_t depth = tree.max_depth();
  SPECBED_CHECK(tree.size() <= step.budget.nodes && depth <= step.budget.depth,
                "drafter exceeded its budget: ", tree.size(), " nodes, depth ", depth, " (budget ",
                step.budget.nodes, " nodes, depth ", step.budget.depth, ")");
  return depth;
}

// The adapter's end-of-sequence work (e.g. an OSD update): drafter cost of this request, added to
// the last step.
double EndAdapter(Adapter& adapter, const std::vector<int32_t>& committed, int64_t prompt_len,
                  const at::Device& device, std::vector<StepStats>& steps) {
  const int64_t a0 = DeviceNowNanos(device);
  adapter.EndSequence(committed, prompt_len);
  const double adapt_us = (DeviceNowNanos(device) - a0) * 1e-3;
  if (steps.empty()) return adapt_us;
  steps.back().t_draft_us += adapt_us;
  steps.back().t_adapt_us += adapt_us;
  steps.back().t_draft_busy_us += adapt_us;
  return adapt_us;
}

// The counts of a verified step (its times are SetStepTimes'). `generated` = the drafter's
// GeneratedLastStep (-1: every drafted node).
StepStats CountStep(const DraftTree& tree, const Verdict& verdict, int32_t draft_depth,
                    int64_t generated) {
  StepStats stats;
  stats.n_drafted = tree.size();
  stats.n_accepted = verdict.n_accepted();
  stats.draft_depth = draft_depth;
  stats.n_target_forwards = 1;
  stats.n_draft_generated = generated >= 0 ? generated : stats.n_drafted;
  // Node units, as n_draft_generated: every verified node not kept (a chain: the rejected one and
  // every one after it; a tree: also the branches off the accepted path).
  stats.n_rolled_back = stats.n_drafted - stats.n_accepted;
  return stats;
}

// The target's prefill over `prompt` (hidden states of `hidden_layers` kept in `out`) and the
// first token, sampled where the logits are on the ATen path (`on_device`).
int32_t Prefill(LlamaModel& target, const std::vector<int32_t>& prompt,
                const std::vector<int64_t>& hidden_layers, DeviceVerifier* on_device,
                Sampler& sampler, KvCache& cache, ForwardOutput& out) {
  const at::Tensor prompt_ids =
      at::tensor(std::vector<int64_t>(prompt.begin(), prompt.end()), at::kLong).view({1, -1});
  ForwardOptions options;
  options.hidden_layers = hidden_layers;
  out = target.Forward(prompt_ids, cache, options);
  return SampleNext(sampler, out.logits, on_device);
}

// The answer's tokens, text, stop reason and prefill / decode times (device-synchronized clock
// readings in ns; the stepper's decode time spans its batch steps, co-running requests' included).
void FinishGeneration(const StopChecker& stop, int64_t t_start, int64_t t_prefill_end,
                      int64_t t_end, GenerationResult& gen) {
  gen.tokens = stop.tokens();
  gen.text = stop.text();
  gen.stop_reason = stop.reason();
  gen.prefill_ms = (t_prefill_end - t_start) * 1e-6;
  gen.decode_ms = (t_end - t_prefill_end) * 1e-6;
}

void CheckPromptFits(const std::vector<int32_t>& prompt, const KvCache& cache) {
  SPECBED_CHECK(!prompt.empty(), "generation needs a non-empty prompt (add BOS)");
  SPECBED_CHECK(cache.batch() == 1, "speculative decoding uses a batch-1 cache");
  SPECBED_CHECK(static_cast<int64_t>(prompt.size()) < cache.max_len(), "prompt of ", prompt.size(),
                " tokens does not fit the context (", cache.max_len(), " positions)");
}

}  // namespace

int64_t CacheLengthFor(const LlamaModel& model, int64_t prompt_len, int64_t max_new_tokens,
                       const Decoder& decoder) {
  return std::min<int64_t>(model.config().max_seq_len,
                           prompt_len + max_new_tokens + 1 + decoder.MaxDraftNodes());
}

uint64_t DrafterSeed(uint64_t sequence_seed) {
  uint64_t z = sequence_seed + 0x6a09e667f3bcc909ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

SpeculativeDecoder::SpeculativeDecoder(LlamaModel& target, const Tokenizer* tokenizer,
                                       std::unique_ptr<Drafter> drafter, SpeculativeOptions options,
                                       std::unique_ptr<Controller> controller,
                                       std::unique_ptr<Adapter> adapter)
    : target_(target),
      tokenizer_(tokenizer),
      drafter_(std::move(drafter)),
      options_(options),
      controller_(std::move(controller)),
      adapter_(std::move(adapter)),
      verifier_(target),
      marks_(target.device()) {
  SPECBED_CHECK(drafter_ != nullptr, "speculative decoder needs a drafter");
  SPECBED_CHECK(options_.budget.nodes >= 0 && options_.budget.depth >= 0,
                "draft budget must be >= 0 (nodes ", options_.budget.nodes, ", depth ",
                options_.budget.depth, ")");
}

int64_t SpeculativeDecoder::MaxDraftNodes() const {
  const int64_t own = options_.budget.nodes;
  return controller_ ? std::max(own, controller_->MaxNodes(options_.budget)) : own;
}

SpeculativeDecoder::BeginTimes SpeculativeDecoder::BeginParts(const std::vector<int32_t>& prompt,
                                                              int32_t root, ForwardOutput& prefill,
                                                              const GenerationConfig& config,
                                                              int64_t max_len, DraftBudget& budget,
                                                              Adapter* adapter) {
  DraftBegin begin;
  begin.prompt = &prompt;
  begin.root = root;
  begin.hidden = std::move(prefill.hidden);
  begin.sampling = config.sampling;
  begin.seed = DrafterSeed(config.seed);
  begin.category = config.category;
  begin.max_len = max_len;
  // [1, 1, V] -> [V]: no copy on the CPU; once per sequence from a device.
  begin.last_logits = CopyToHost(prefill.logits).view({target_.config().vocab_size});
  const int64_t b0 = DeviceNowNanos(target_.device());
  if (controller_) controller_->BeginSequence(begin, budget);
  const int64_t p0 = DeviceNowNanos(target_.device());
  drafter_->Begin(begin);
  // The drafter prefill phase (its catch-up over the prompt), timed apart; a stepper leaves it to
  // the drafter's first Draft, so a sequence the batch never lets draft (K = 0) never pays it.
  if (!stepping_) drafter_->Prefill();
  BeginTimes t;
  t.drafter_prefill_ns = DeviceNowNanos(target_.device()) - p0;
  if (adapter) adapter->BeginSequence(begin);
  t.all_ns = DeviceNowNanos(target_.device()) - b0;
  return t;
}

void SpeculativeDecoder::StartSequence(const std::vector<int32_t>& prompt,
                                       const GenerationConfig& config, KvCache& cache) {
  CheckPromptFits(prompt, cache);
  sampler_.emplace(config.sampling, config.seed);
  stop_.emplace(config.stop, tokenizer_, prompt.back());
  cache_ = &cache;
  cache.Truncate(0);
  verifier_.SetSyntheticAcceptance(config.synthetic_acceptance,
                                   DrafterSeed(config.seed ^ 0x73796e7468ULL));  // "synth"
  hidden_layers_ = drafter_->TargetHiddenLayers();
  active_adapter_ = config.adapt ? adapter_.get() : nullptr;  // warm-ups do not reach it
  prompt_len_ = static_cast<int64_t>(prompt.size());
  max_new_tokens_ = config.stop.max_new_tokens;
  deferred_.clear();
  defer_accept_ = false;
  step_index_ = 0;

  // Prefill (identical to AR).
  t_start_ = DeviceNowNanos(target_.device());
  ForwardOutput out;
  DeviceVerifier* on_device =
      target_.forward_path() == ForwardPath::kAten ? &verifier_.device() : nullptr;
  root_ = Prefill(target_, prompt, hidden_layers_, on_device, *sampler_, cache, out);
  t_prefill_end_ = DeviceNowNanos(target_.device());
  stop_->Push(root_);

  committed_.assign(prompt.begin(), prompt.end());
  committed_.push_back(root_);
  begun_ = BeginTimes();
  budget_ = options_.budget;
  if (!stop_->stopped()) {
    begun_ = BeginParts(prompt, root_, out, config, cache.max_len(), budget_, active_adapter_);
  }
}

void SpeculativeDecoder::PrepareDraft(int64_t free, int64_t node_cap, DraftJob& job) {
  defer_accept_ = node_cap == 0 && !drafter_->AcceptReadsLogits();
  job = DraftJob();
  if (node_cap == 0) {  // the plain AR step: no drafter, no controller
    tree_.Clear();
    return;
  }
  FlushDeferred();
  job.drafter = drafter_.get();
  job.tree = &tree_;
  job.step.root = root_;
  job.step.committed = &committed_;
  job.step.step_index = step_index_;
  const int64_t left = max_new_tokens_ - static_cast<int64_t>(stop_->tokens().size());
  PrepareDraftStep(controller_.get(), job.step, budget_,
                   node_cap > 0 ? std::min(free, node_cap) : free, left, tree_);
}

int32_t SpeculativeDecoder::DraftNext(int64_t free, int64_t node_cap) {
  DraftJob job;
  PrepareDraft(free, node_cap, job);
  if (job.drafter == nullptr) return 0;
  drafter_->Draft(job.step, tree_);
  return CheckedDraftDepth(job.step, tree_, target_.config().vocab_size);
}

void SpeculativeDecoder::FlushDeferred() {
  for (const Verdict& v : deferred_) drafter_->Accept(empty_tree_, v);
  deferred_.clear();
}

void SpeculativeDecoder::AcceptVerdict() {
  if (defer_accept_) {  // a step without a draft: the drafter catches up when it drafts again
    deferred_.push_back(verdict_);
    deferred_.back().logits = at::Tensor();
  } else {
    FlushDeferred();
    drafter_->Accept(tree_, verdict_);
  }
  if (active_adapter_) active_adapter_->Observe(tree_, verdict_);
  if (controller_) controller_->AfterStep(tree_, verdict_);
}

StepStats SpeculativeDecoder::CommitStep(int32_t draft_depth) {
  StepStats stats = CountStep(tree_, verdict_, draft_depth, drafter_->GeneratedLastStep());
  stats.n_emitted = CommitTokens(verdict_.tokens, committed_, *stop_);
  root_ = verdict_.tokens.back();
  return stats;
}

double SpeculativeDecoder::EndSequence(std::vector<StepStats>& steps, DecodeResult& result) {
  double adapt_us = 0;
  if (active_adapter_) {
    adapt_us = EndAdapter(*active_adapter_, committed_, prompt_len_, target_.device(), steps);
  }
  GenerationResult& gen = result.generation;
  gen = GenerationResult();
  FinishGeneration(*stop_, t_start_, t_prefill_end_, DeviceNowNanos(target_.device()), gen);
  gen.n_steps = static_cast<int64_t>(steps.size());
  return adapt_us;
}

void SpeculativeDecoder::Generate(const std::vector<int32_t>& prompt,
                                  const GenerationConfig& config, KvCache& cache,
                                  DecodeResult& result) {
  stepping_ = false;
  StartSequence(prompt, config, cache);
  result.steps.clear();
  result.steps.reserve(static_cast<size_t>(config.stop.max_new_tokens) + 1);
  // End of the previous step; the first step's "other" starts at the end of prefill (minus the
  // drafter's Begin, which is draft time), so draft + verify + other add up to decode time.
  int64_t t_prev_end = t_prefill_end_;
  marks_.Clear();
  while (!stop_->stopped()) {
    const int64_t free = cache.max_len() - cache.length() - 1;  // slots after the root
    if (free < 0) {
      stop_->StopForContext();
      break;
    }
    StepPhases phases(target_.device(), t_prev_end, marks_);
    phases.Lap(StepPhases::kOther);  // the loop since the previous step ended
    const int32_t draft_depth = DraftNext(free, -1);
    phases.Lap(StepPhases::kDraft);
    verifier_.Verify(root_, tree_, options_.sampling_rule, *sampler_, cache, hidden_layers_,
                     verdict_);
    phases.Lap(StepPhases::kVerify);
    AcceptVerdict();
    phases.Lap(StepPhases::kDraft);
    StepStats stats = CommitStep(draft_depth);
    phases.Lap(StepPhases::kOther);
    phases.SetStepTimes(step_index_ == 0, begun_.all_ns, begun_.drafter_prefill_ns, stats);
    t_prev_end = phases.end_ns();
    result.steps.push_back(stats);
    ++step_index_;
  }
  EndSequence(result.steps, result);
}

void SpeculativeDecoder::Start(const std::vector<int32_t>& prompt, const GenerationConfig& config,
                               KvCache& cache) {
  stepping_ = true;
  StartSequence(prompt, config, cache);
  steps_.clear();
}

bool SpeculativeDecoder::PlanDraft(int64_t max_nodes, DraftJob& job) {
  const int64_t free = cache_->max_len() - cache_->length() - 1;  // slots after the root
  if (free < 0) {
    stop_->StopForContext();
    return false;
  }
  const int64_t t0 = NowNanos();
  PrepareDraft(free, max_nodes, job);
  planned_ = job;
  plan_ns_ = NowNanos() - t0;
  return true;
}

SeqChunk SpeculativeDecoder::PlanVerify() {
  const int64_t t0 = NowNanos();
  draft_depth_ = planned_.drafter != nullptr
                     ? CheckedDraftDepth(planned_.step, tree_, target_.config().vocab_size)
                     : 0;
  plan_ns_ += NowNanos() - t0;
  return verifier_.StageChunk(root_, tree_, *cache_);
}

StepStats SpeculativeDecoder::Conclude(const at::Tensor& logits,
                                       const std::vector<at::Tensor>& hidden) {
  const int64_t t0 = NowNanos();
  verifier_.Conclude(tree_, options_.sampling_rule, *sampler_, *cache_, logits, hidden, verdict_);
  const int64_t t1 = NowNanos();
  AcceptVerdict();
  StepStats stats = CommitStep(draft_depth_);
  stats.t_draft_us = (plan_ns_ + NowNanos() - t1) * 1e-3;
  stats.t_verify_us = (t1 - t0) * 1e-3;
  stats.t_draft_busy_us = stats.t_draft_us;
  stats.t_verify_busy_us = stats.t_verify_us;
  steps_.push_back(stats);
  ++step_index_;
  return stats;
}

double SpeculativeDecoder::Finish(DecodeResult& result) {
  const double adapt_us = EndSequence(steps_, result);
  result.steps = std::move(steps_);
  steps_.clear();
  return adapt_us;
}

}  // namespace specbed
