// EAGLE-3 tree drafting (see eagle3_drafter.h).
// Checked by: tests/methods/eagle3_drafter_test.cpp.
#include "methods/eagle3/eagle3_drafter.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "base/error.h"
#include "harness/engine/draft_hooks.h"
#include "kernels/engine_counters.h"

namespace specbed {

Eagle3Drafter::Eagle3Drafter(std::unique_ptr<Eagle3Head> head, Eagle3DraftOptions options)
    : head_(std::move(head)), options_(options) {
  SPECBED_CHECK(head_ != nullptr, "eagle3 drafter needs a head");
  SPECBED_CHECK(options_.depth >= 1 && options_.top_k >= 1 && options_.nodes >= 0,
                "eagle3: depth and top_k must be >= 1 and the node budget >= 0 (got depth ",
                options_.depth, ", top_k ", options_.top_k, ", nodes ", options_.nodes, ")");
  const Eagle3Config& c = head_->config();
  layers_ = c.aux_layer_ids;
  SPECBED_CHECK(layers_.size() == static_cast<size_t>(kEagle3AuxLayers),
                "eagle3: the head has no aux layer ids (eagle_aux_hidden_state_layer_ids); pair "
                "it with its target's layers first");
  SPECBED_CHECK(options_.top_k <= c.draft_vocab_size, "eagle3: top_k ", options_.top_k,
                " exceeds the draft vocabulary (", c.draft_vocab_size, ")");
  ht_ = c.target_hidden_size;
  h_ = c.hidden_size;
  vd_ = c.draft_vocab_size;
}

std::vector<int64_t> Eagle3Drafter::TargetHiddenLayers() const {
  return layers_;
}

void Eagle3Drafter::ReplaceHead(std::unique_ptr<Eagle3Head> head) {
  SPECBED_CHECK(head != nullptr && head->config().hidden_size == h_ &&
                    head->config().draft_vocab_size == vd_ &&
                    head->config().aux_layer_ids == layers_,
                "eagle3: a replacement head must have the same shape and aux layers");
  head_ = std::move(head);
}

void Eagle3Drafter::QueueContext(const std::vector<at::Tensor>& hidden, int64_t offset, int64_t n,
                                 const int32_t* next) {
  SPECBED_CHECK(hidden.size() == layers_.size(), "eagle3: expected ", layers_.size(),
                " target hidden states, got ", hidden.size());
  std::vector<at::Tensor> parts;
  for (size_t l = 0; l < hidden.size(); ++l) {
    const at::Tensor& h = hidden[l];
    SPECBED_CHECK(h.dim() == 3 && h.size(1) >= offset + n && h.size(2) == ht_,
                  "eagle3: target hidden state ", l, " has shape ", h.sizes(),
                  ", expected [1, >=", offset + n, ", ", ht_, "]");
    parts.push_back(h.select(0, 0).narrow(0, offset, n));
  }
  pending_features_.push_back(at::cat(parts, 1));
  pending_tokens_.insert(pending_tokens_.end(), next, next + n);
}

void Eagle3Drafter::Begin(const DraftBegin& begin) {
  const int64_t tree_rows = options_.depth * options_.top_k + 1;
  head_->ResetCache(begin.max_len + tree_rows);
  context_len_ = 0;
  last_row_ = -1;
  pending_features_.clear();
  pending_tokens_.clear();
  const std::vector<int32_t>& prompt = *begin.prompt;
  const int64_t p = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> next(prompt.begin() + 1, prompt.end());
  next.push_back(begin.root);
  QueueContext(begin.hidden, 0, p, next.data());
}

void Eagle3Drafter::FlushContext() {
  if (pending_tokens_.empty()) return;
  head_->Forward(PendingFeatures(), pending_tokens_.data(), nullptr,
                 static_cast<int64_t>(pending_tokens_.size()), nullptr, out_);
  ContextAppended();
}

at::Tensor Eagle3Drafter::PendingFeatures() const {
  return pending_features_.size() == 1 ? pending_features_[0] : at::cat(pending_features_, 0);
}

void Eagle3Drafter::ContextAppended() {
  const int64_t n = static_cast<int64_t>(pending_tokens_.size());
  context_len_ += n;
  last_row_ = n - 1;
  pending_features_.clear();
  pending_tokens_.clear();
}

void Eagle3Drafter::Accept(const DraftTree& tree, const Verdict& verdict) {
  // Rows for the root and the accepted nodes; their next tokens are the committed tokens.
  const int64_t n = 1 + verdict.n_accepted();
  QueueContext(verdict.hidden, 0, n, verdict.tokens.data());
}

void Eagle3Drafter::TopK(const float* row, float log_z, int64_t k, int32_t* tokens, float* logp) {
  // One pass: the k best ids kept in a small sorted buffer (highest logit first; ties: smaller
  // draft id first, so the result is deterministic).
  order_.resize(k);
  int64_t filled = 0;
  for (int64_t v = 0; v < vd_; ++v) {
    const float x = row[v];
    if (filled == k && !(x > row[order_[k - 1]])) continue;  // equal: the earlier id stays
    int64_t pos = filled < k ? filled++ : k - 1;
    while (pos > 0 && x > row[order_[pos - 1]]) {
      order_[pos] = order_[pos - 1];
      --pos;
    }
    order_[pos] = static_cast<int32_t>(v);
  }
  for (int64_t r = 0; r < k; ++r) {
    tokens[r] = head_->DraftToTarget(order_[r]);
    logp[r] = std::min(0.0f, row[order_[r]] - log_z);
  }
}

void Eagle3Drafter::Draft(const DraftStep& step, DraftTree& tree) {
  if (!PlanTree(step)) return;
  // Context rows queued since the last step (the prompt at the first step, unless Prefill ran).
  FlushContext();
  TakeRoot();
  if (GrowsOnDevice(step)) {
    device_frontier_.Grow(*head_, node_hidden_.narrow(0, 0, 1), root_logits_, context_len_,
                          layer_limit_, options_.top_k, out_);
    BuildFromFrontier(tree);
  } else {
    BeamTreeOptions bo;
    bo.depth = depth_;
    bo.top_k = options_.top_k;
    bo.budget = nodes_;
    step_ = &step;
    if (step.hooks != nullptr) best_entropy_ = Entropy(root_logits_[0]);
    try {
      builder_.Build(*this, bo, tree);
    } catch (...) {
      step_ = nullptr;
      throw;
    }
    step_ = nullptr;
  }
  EndTree();
}

bool Eagle3Drafter::PlanTree(const DraftStep& step) {
  nodes_ = std::min(options_.nodes, step.budget.nodes);
  depth_ = std::min(options_.depth, step.budget.depth);
  generated_ = 0;
  return nodes_ > 0 && depth_ > 0;
}

void Eagle3Drafter::TakeRoot() {
  SPECBED_CHECK(last_row_ >= 0, "eagle3: no context rows to draft from (Begin not called?)");
  EnsureNodeRows(1 + options_.top_k + (depth_ - 1) * options_.top_k * options_.top_k);
  node_hidden_.narrow(0, 0, 1).copy_(out_.hidden.narrow(0, last_row_, 1));
  root_logits_ = out_.logits.narrow(0, last_row_, 1).clone();
  last_row_ = -1;
  candidate_slot_.clear();
  layer_limit_ = std::min(depth_, nodes_);
}

void Eagle3Drafter::BuildFromFrontier(DraftTree& tree) {
  builder_.BuildFromCandidates(device_frontier_.tokens(), device_frontier_.parents(),
                               device_frontier_.logp(), device_frontier_.scores(),
                               device_frontier_.size(), layer_limit_, nodes_, tree);
}

void Eagle3Drafter::EndTree() {
  generated_ = builder_.candidates().size();
  head_->TruncateCache(context_len_);
}

const void* Eagle3Drafter::DraftBatchKey() const {
  const bool device =
      head_->placement().aten && options_.frontier != Eagle3DraftOptions::Frontier::kHost;
  return device ? head_->weights().get() : nullptr;
}

void Eagle3Drafter::DraftBatch(const std::vector<DraftJob>& jobs) {
  std::vector<const DraftJob*> batch;  // trees grown on the device frontier, together
  for (const DraftJob& job : jobs) {
    auto* drafter = dynamic_cast<Eagle3Drafter*>(job.drafter);
    SPECBED_CHECK(drafter != nullptr && drafter->DraftBatchKey() == DraftBatchKey(),
                  "eagle3 drafter: DraftBatch got a job of another drafter");
    if (!drafter->GrowsOnDevice(job.step)) {
      drafter->Draft(job.step, *job.tree);  // a Controller's hooks read every layer on the host
    } else if (drafter->PlanTree(job.step)) {
      batch.push_back(&job);
    }
  }
  if (batch.empty()) return;
  auto of = [](const DraftJob* job) { return static_cast<Eagle3Drafter*>(job->drafter); };
  // Every sequence's queued context rows in one head forward, then the trees layer by layer.
  std::vector<Eagle3DeviceRows> context;
  std::vector<Eagle3Drafter*> flushed;
  for (const DraftJob* job : batch) {
    Eagle3Drafter* d = of(job);
    if (d->pending_tokens_.empty()) continue;
    context.push_back(d->head_->StageRows(d->PendingFeatures(), d->pending_tokens_.data(), nullptr,
                                          static_cast<int64_t>(d->pending_tokens_.size()), nullptr,
                                          d->out_));
    flushed.push_back(d);
  }
  if (!context.empty()) Eagle3Head::ForwardBatch(context);
  for (Eagle3Drafter* d : flushed) d->ContextAppended();
  std::vector<Eagle3DeviceFrontier::Job> grow;
  for (const DraftJob* job : batch) {
    Eagle3Drafter* d = of(job);
    d->TakeRoot();
    grow.push_back({&d->device_frontier_, d->head_.get(), d->node_hidden_.narrow(0, 0, 1),
                    d->root_logits_, d->context_len_, d->layer_limit_, d->options_.top_k,
                    &d->out_});
  }
  Eagle3DeviceFrontier::GrowBatch(grow);
  for (const DraftJob* job : batch) {
    of(job)->BuildFromFrontier(*job->tree);
    of(job)->EndTree();
  }
}

bool Eagle3Drafter::GrowsOnDevice(const DraftStep& step) const {
  using Frontier = Eagle3DraftOptions::Frontier;
  SPECBED_CHECK(options_.frontier != Frontier::kDevice || head_->placement().aten,
                "eagle3: the device frontier needs the head on the ATen path (a GPU target, or "
                "SPECBED_FORWARD=aten on the CPU); this head runs the row loops");
  return options_.frontier != Frontier::kHost && head_->placement().aten && step.hooks == nullptr;
}

void Eagle3Drafter::EnsureNodeRows(int64_t rows) {
  if (node_hidden_.defined() && node_hidden_.size(0) >= rows &&
      node_hidden_.options().type_equal(out_.hidden.options()) &&
      node_hidden_.device() == out_.hidden.device()) {
    return;
  }
  node_hidden_ = at::empty({rows, h_}, out_.hidden.options());
}

void Eagle3Drafter::TopKRows(const at::Tensor& logits, int64_t k, int32_t* tokens, float* logp) {
  // A layer's top-k reaches the host: one download on a device, read in place on the CPU (counted
  // there too, kernels/engine_counters.h).
  const TransferScope transfer(Transfer::kDeviceToHost);
  const int64_t n = logits.size(0);
  if (logits.is_cpu()) {
    // log Z by ATen's logsumexp, as the device frontier computes it (equal trees on equal logits).
    const at::Tensor rows = logits.contiguous();
    const at::Tensor log_z = at::logsumexp(rows, -1).contiguous();
    for (int64_t i = 0; i < n; ++i) {
      TopK(rows.data_ptr<float>() + i * vd_, log_z.data_ptr<float>()[i], k, tokens + i * k,
           logp + i * k);
    }
    return;
  }
  DownloadTopKLogProbs(logits, k, head_->draft_to_target_tensor(), tokens, logp);
}

double Eagle3Drafter::Entropy(const at::Tensor& row) const {
  if (row.is_cpu()) return Entropy(row.contiguous().data_ptr<float>());
  const at::Tensor logp = at::log_softmax(row, -1);
  return -(logp.exp() * logp).sum().item<double>();
}

double Eagle3Drafter::Entropy(const float* row) const {
  float max_v = -std::numeric_limits<float>::infinity();
  for (int64_t v = 0; v < vd_; ++v) max_v = std::max(max_v, row[v]);
  double sum = 0, weighted = 0;
  for (int64_t v = 0; v < vd_; ++v) {
    const double x = static_cast<double>(row[v] - max_v);
    const double e = std::exp(x);
    sum += e;
    weighted += e * x;
  }
  return std::log(sum) - weighted / sum;  // H = log Z - E[x - max]
}

bool Eagle3Drafter::ContinueGrowing(const std::vector<float>& scores, int64_t layer_begin,
                                    int64_t layer) {
  if (step_ == nullptr || step_->hooks == nullptr) return true;
  const int64_t n = static_cast<int64_t>(scores.size()) - layer_begin;
  const int64_t w = std::min<int64_t>(options_.top_k, n);
  beam_scores_.assign(scores.begin() + layer_begin, scores.end());
  std::partial_sort(beam_scores_.begin(), beam_scores_.begin() + w, beam_scores_.end(),
                    std::greater<float>());
  DraftRoundInfo info;
  info.rounds = layer - 1;
  info.max_rounds = layer_limit_ - 1;
  info.top_k = options_.top_k;
  info.child_scores = scores.data() + layer_begin;
  info.n_child_scores = n;
  info.beam_scores = beam_scores_.data();
  info.n_beam = w;
  info.best_entropy = best_entropy_;
  info.context_len = static_cast<int64_t>(step_->committed ? step_->committed->size() : 0);
  if (step_->hooks->WantsDraftHidden()) {
    info.best_hidden = best_hidden_.data();
    info.hidden_size = static_cast<int64_t>(best_hidden_.size());
  }
  return step_->hooks->ContinueDrafting(info);
}

int64_t Eagle3Drafter::KeepBudget(const std::vector<float>& scores, int64_t layers,
                                  int64_t budget) {
  if (step_ == nullptr || step_->hooks == nullptr) return budget;
  DraftTreeInfo info;
  info.rounds = layers - 1;
  info.top_k = options_.top_k;
  info.scores = scores.data();
  info.n_scores = static_cast<int64_t>(scores.size());
  info.budget_nodes = budget;
  info.context_len = static_cast<int64_t>(step_->committed ? step_->committed->size() : 0);
  return step_->hooks->VerifySize(info);
}

void Eagle3Drafter::Expand(const DraftTree& candidates, const std::vector<int32_t>& frontier,
                           int64_t k, std::vector<int32_t>& tokens, std::vector<float>& logp) {
  if (frontier.size() == 1 && frontier[0] == -1) {
    TopKRows(root_logits_, k, tokens.data(), logp.data());
    return;
  }
  const int64_t n_cand = candidates.size();
  candidate_slot_.resize(n_cand, -1);
  const int64_t n = static_cast<int64_t>(frontier.size());
  const int64_t cache_len = head_->cache_length();
  const int64_t cols = cache_len + n;
  SPECBED_CHECK(n_cand + 1 <= node_hidden_.size(0), "eagle3: internal: ", n_cand,
                " candidates exceed the tree's ", node_hidden_.size(0) - 1, " rows");
  staging_.Resize(2 * n, 0);
  int64_t* parent_row = staging_.ints();
  int64_t* node_row = parent_row + n;
  tokens_.resize(n);
  positions_.resize(n);
  mask_.assign(static_cast<size_t>(n * cols), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t c = frontier[i];
    const int32_t parent = candidates.parent[c];
    SPECBED_CHECK(parent < 0 || candidate_slot_[parent] >= 0,
                  "eagle3: internal: expanding a node whose parent was never run");
    parent_row[i] = parent + 1;
    node_row[i] = c + 1;
    tokens_[i] = candidates.token[c];
    positions_[i] = context_len_ - 1 + candidates.depth[c];
    uint8_t* row = mask_.data() + i * cols;
    std::fill(row, row + context_len_, uint8_t{1});
    for (int32_t a = parent; a >= 0; a = candidates.parent[a]) row[candidate_slot_[a]] = 1;
    row[cache_len + i] = 1;
  }
  const at::Tensor rows = staging_.Upload(node_hidden_.device()).first;
  head_->Forward(node_hidden_.index_select(0, rows.narrow(0, 0, n)), tokens_.data(),
                 positions_.data(), n, mask_.data(), out_);
  node_hidden_.index_copy_(0, rows.narrow(0, n, n), out_.hidden);
  for (int64_t i = 0; i < n; ++i) candidate_slot_[frontier[i]] = cache_len + i;
  TopKRows(out_.logits, k, tokens.data(), logp.data());
  if (step_ == nullptr || step_->hooks == nullptr) return;
  best_entropy_ = Entropy(out_.logits[0]);
  if (step_->hooks->WantsDraftHidden()) {
    const TransferScope transfer(Transfer::kDeviceToHost);
    const at::Tensor row = out_.hidden[0].to(at::kFloat).cpu().contiguous();
    best_hidden_.assign(row.data_ptr<float>(), row.data_ptr<float>() + row.numel());
  }
}

}  // namespace specbed
