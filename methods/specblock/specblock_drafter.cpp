// SpecBlock drafting (see specblock_drafter.h).
// Checked by: tests/methods/specblock_test.cpp.
#include "methods/specblock/specblock_drafter.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

#include "base/error.h"

namespace specbed {

std::array<int64_t, 4> ParseBranching(const std::string& text, const std::string& context) {
  std::array<int64_t, 4> out{};
  std::stringstream ss(text);
  std::string item;
  int n = 0;
  while (std::getline(ss, item, ',')) {
    SPECBED_CHECK(n < 4, context, ": branching '", text, "' needs exactly 4 widths (b0..b3)");
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      SPECBED_CHECK(used == item.size() && v >= 0 && v <= 64, context, ": branching '", text,
                    "': width '", item, "' is not an integer in [0, 64]");
      out[n++] = v;
    } catch (const std::logic_error&) {
      Fail(context, ": branching '", text, "': width '", item, "' is not an integer");
    }
  }
  SPECBED_CHECK(n == 4, context, ": branching '", text, "' needs exactly 4 widths (b0..b3)");
  SPECBED_CHECK(out[0] >= 1, context, ": branching '", text,
                "': bucket 0 (rank 1) needs a width >= 1");
  return out;
}

SpecBlockDrafter::SpecBlockDrafter(std::unique_ptr<SpecBlockModel> model,
                                   SpecBlockDraftOptions options)
    : model_(std::move(model)), options_(options) {
  SPECBED_CHECK(model_ != nullptr, "specblock drafter needs a model");
  SPECBED_CHECK(options_.blocks >= 1 && options_.budget >= 0 && options_.max_starts >= 1,
                "specblock: blocks and max_starts must be >= 1 and budget >= 0");
  const SpecBlockConfig& c = model_->config();
  k_ = c.block_size;
  d_ = c.hidden_size;
  ht_ = c.target_hidden_size;
  vd_ = c.draft_vocab_size;
  for (int64_t w : options_.branching) {
    SPECBED_CHECK(w <= vd_, "specblock: branching width ", w, " exceeds the draft vocabulary (",
                  vd_, ")");
  }
}

std::vector<int64_t> SpecBlockDrafter::TargetHiddenLayers() const {
  return model_->config().aux_layer_ids;
}

void SpecBlockDrafter::QueueCatchUps(const std::vector<at::Tensor>& hidden,
                                     const std::vector<int32_t>& tokens, int64_t first_position) {
  SPECBED_CHECK(hidden.size() == 3, "specblock: expected 3 target hidden states, got ",
                hidden.size());
  const int64_t n = static_cast<int64_t>(tokens.size());
  std::vector<at::Tensor> parts;
  for (const at::Tensor& h : hidden) {
    SPECBED_CHECK(h.dim() == 3 && h.size(1) >= n && h.size(2) == ht_,
                  "specblock: target hidden state has shape ", h.sizes(), ", expected [1, >=", n,
                  ", ", ht_, "]");
    parts.push_back(h.select(0, 0).narrow(0, 0, n));
  }
  // One concatenation for every row, on the model's device and in its dtype.
  const at::Tensor conds = at::cat(parts, -1).to(model_->device(), model_->dtype());
  for (int64_t i = 0; i < n; ++i) {
    Start s;
    s.cond = conds[i];
    s.token = tokens[i];
    s.position = first_position + i;
    pending_.push_back(std::move(s));
  }
}

void SpecBlockDrafter::Begin(const DraftBegin& begin) {
  at::NoGradGuard no_grad;
  const SpecBlockConfig& c = model_->config();
  const int64_t cap = k_ * (begin.max_len + 2) + options_.blocks * options_.max_starts * k_ + 8;
  cache_.k.assign(c.n_layers, at::Tensor());
  cache_.v.assign(c.n_layers, at::Tensor());
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const auto opts = at::TensorOptions(model_->dtype()).device(model_->device());
    cache_.k[l] = at::zeros({1, c.n_kv_heads, cap, c.head_dim}, opts);
    cache_.v[l] = at::zeros({1, c.n_kv_heads, cap, c.head_dim}, opts);
  }
  cache_len_ = committed_ = 0;
  first_call_ready_ = false;
  pending_.clear();
  step_calls_.clear();
  step_depths_.clear();
  const std::vector<int32_t>& prompt = *begin.prompt;
  const int64_t p = static_cast<int64_t>(prompt.size());
  std::vector<int32_t> next(prompt.begin() + 1, prompt.end());  // row j - 1 conditions token j
  next.push_back(begin.root);
  QueueCatchUps(begin.hidden, next, 1);
  first_ = std::move(pending_.back());
  pending_.pop_back();
  has_first_ = true;
  root_position_ = p;
}

void SpecBlockDrafter::RunFirstCall() {
  at::NoGradGuard no_grad;
  SPECBED_CHECK(has_first_, "specblock: Draft without a root start (Begin not called?)");
  // Call 1: catch-up starts + the root's first block.
  std::vector<Start> starts = std::move(pending_);
  pending_.clear();
  starts.push_back(std::move(first_));
  has_first_ = false;
  first_call_starts_ = static_cast<int64_t>(starts.size());
  Run(starts, /*target_cond=*/true, cache_len_);
  committed_ = cache_len_;  // every row of call 1 is committed context (root included)
  first_call_root_ = std::move(starts.back());
  first_call_ready_ = true;
}

std::vector<at::Tensor> SpecBlockDrafter::UploadInputs(const std::vector<Start>& starts,
                                                       bool target_cond,
                                                       int64_t n_committed_rows_before) {
  const int64_t n = static_cast<int64_t>(starts.size()), r = n * k_, c = cache_len_;
  staging_.Resize(n + r, r * (c + r));
  int64_t* tokens = staging_.ints();
  int64_t* positions = tokens + n;
  uint8_t* m = staging_.bytes();
  std::fill(m, m + r * (c + r), uint8_t{0});
  for (int64_t i = 0; i < n; ++i) {
    tokens[i] = starts[i].token;
    for (int64_t k = 0; k < k_; ++k) {
      positions[i * k_ + k] = starts[i].position + k;
      uint8_t* row = m + (i * k_ + k) * (c + r);
      std::fill(row, row + n_committed_rows_before, uint8_t{1});
      for (int64_t v : starts[i].visible) row[v] = 1;
      // Earlier starts of the same call: committed catch-up starts (call 1) are fully visible.
      if (target_cond) std::fill(row + c, row + c + i * k_, uint8_t{1});
      for (int64_t kk = 0; kk <= k; ++kk) row[c + i * k_ + kk] = 1;
    }
  }
  const auto [ints, bytes] = staging_.Upload(model_->device());
  return {ints.narrow(0, 0, n).view({1, n}), ints.narrow(0, n, r).view({1, r}),
          bytes.view({1, r, c + r}).ne(0)};
}

void SpecBlockDrafter::Run(const std::vector<Start>& starts, bool target_cond,
                           int64_t n_committed_rows_before) {
  const int64_t n = static_cast<int64_t>(starts.size());
  const int64_t r = n * k_;
  const int64_t width = target_cond ? 3 * ht_ : d_;
  std::vector<at::Tensor> conds;
  for (const Start& s : starts) {
    SPECBED_CHECK(s.cond.numel() == width, "specblock: internal: start condition width");
    conds.push_back(s.cond);
  }
  const at::Tensor cond = at::stack(conds).unsqueeze(0);  // [1, n, width]
  const int64_t c = cache_len_;
  SPECBED_CHECK(c + r <= cache_.k[0].size(2), "specblock: drafter cache full (", c + r, " > ",
                cache_.k[0].size(2), " rows)");
  const std::vector<at::Tensor> in = UploadInputs(starts, target_cond, n_committed_rows_before);
  SpecBlockKv past;
  past.k.resize(cache_.k.size());
  past.v.resize(cache_.v.size());
  for (size_t l = 0; l < cache_.k.size(); ++l) {
    past.k[l] = cache_.k[l].narrow(2, 0, c);
    past.v[l] = cache_.v[l].narrow(2, 0, c);
  }
  SpecBlockKv present;
  const at::Tensor h0 = model_->Fuse(cond, in[0], target_cond);
  const at::Tensor h = model_->Trunk(h0, in[1], in[2], &past, &present);
  for (size_t l = 0; l < cache_.k.size(); ++l) {
    cache_.k[l].narrow(2, c, r).copy_(present.k[l]);
    cache_.v[l].narrow(2, c, r).copy_(present.v[l]);
  }
  cache_len_ = c + r;
  out_h_ = h.reshape({r, d_}).contiguous();
  const at::Tensor logits = model_->Logits(out_h_);
  out_logp_ = at::log_softmax(logits.to(at::kFloat), -1).contiguous();
  ReadRunOutputs(logits);
  ++calls_last_step_;
  ++calls_total_;
}

void SpecBlockDrafter::ReadRunOutputs(const at::Tensor& logits) {
  const int64_t r = out_logp_.size(0);
  top_width_ =
      std::max<int64_t>(1, *std::max_element(options_.branching.begin(), options_.branching.end()));
  const auto [values, ids] = out_logp_.topk(top_width_, -1);
  const at::Tensor buckets = model_->RankLogits(out_h_, logits).argmax(-1);
  const at::Tensor host = at::cat({buckets.to(at::kInt), ids.flatten().to(at::kInt),
                                   values.flatten().contiguous().view(at::kInt)})
                              .cpu();
  const int32_t* p = host.data_ptr<int32_t>();
  out_bucket_.assign(p, p + r);
  out_top_ids_.assign(p + r, p + r + r * top_width_);
  const float* lp = reinterpret_cast<const float*>(p + r + r * top_width_);
  out_top_logp_.assign(lp, lp + r * top_width_);
}

void SpecBlockDrafter::AttachBlock(const Start& start, int64_t row0, std::vector<Candidate>& next) {
  const int64_t block = static_cast<int64_t>(dists_.size());
  dists_.push_back(out_logp_.narrow(0, row0, k_));
  const std::vector<int32_t>& d2t = model_->draft_to_target();
  int32_t parent = start.node;
  double parent_cum = start.cum_logp;
  int32_t parent_depth = start.node < 0 ? 0 : nodes_[start.node].depth;
  int32_t tip = -1;
  int64_t tip_row = -1;
  for (int64_t k = 0; k < k_; ++k) {
    const int64_t bucket = out_bucket_[row0 + k];
    if (block == 0) first_buckets_.push_back(bucket);
    const int64_t w = options_.branching[bucket];
    if (w == 0) break;
    const int32_t* ids = out_top_ids_.data() + (row0 + k) * top_width_;
    const float* lp = out_top_logp_.data() + (row0 + k) * top_width_;
    const int64_t dist_index = block * k_ + k;
    // The parent's children come from this slot's distribution.
    if (parent >= 0) {
      nodes_[parent].dist = dist_index;
    } else {
      root_dist_ = dist_index;
    }
    std::vector<int32_t> made;
    for (int64_t j = 0; j < w; ++j) {
      Node nd;
      nd.token = d2t[ids[j]];
      nd.parent = parent;
      nd.depth = parent_depth + 1;
      nd.logp = std::min(0.0f, lp[j]);
      nd.cum = parent_cum + nd.logp;
      made.push_back(static_cast<int32_t>(nodes_.size()));
      nodes_.push_back(nd);
    }
    // Non-top-1 candidates of uncertain slots are start candidates.
    if (bucket == 1 || bucket == 2 || bucket == 3) {
      for (size_t j = 1; j < made.size(); ++j) {
        Candidate cand;
        cand.node = made[j];
        next.push_back(std::move(cand));
        next.back().cond = out_h_[row0 + k];
        next.back().visible = start.visible;
        for (int64_t kk = 0; kk <= k; ++kk)
          next.back().visible.push_back(start_row_base_ + row0 + kk);
      }
    }
    parent = made[0];
    parent_cum = nodes_[parent].cum;
    parent_depth = nodes_[parent].depth;
    tip = parent;
    tip_row = row0 + k;
  }
  if (tip >= 0) {
    Candidate cand;
    cand.node = tip;
    cand.cond = out_h_[tip_row];
    cand.visible = start.visible;
    for (int64_t kk = row0; kk <= tip_row; ++kk) cand.visible.push_back(start_row_base_ + kk);
    next.push_back(std::move(cand));
  }
}

void SpecBlockDrafter::Prune(int32_t protect) {
  std::vector<int32_t> alive;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].alive) alive.push_back(static_cast<int32_t>(i));
  }
  if (static_cast<int64_t>(alive.size()) <= budget_) return;
  std::vector<uint8_t> keep_first(nodes_.size(), 0);
  for (int32_t n = protect; n >= 0; n = nodes_[n].parent) keep_first[n] = 1;
  std::stable_sort(alive.begin(), alive.end(), [&](int32_t a, int32_t b) {
    if (keep_first[a] != keep_first[b]) return keep_first[a] > keep_first[b];
    return nodes_[a].cum > nodes_[b].cum;
  });
  for (size_t i = budget_; i < alive.size(); ++i) nodes_[alive[i]].alive = false;
  // Closedness: a node whose parent is gone goes too (ties in cum keep parents first anyway).
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].alive && nodes_[i].parent >= 0 && !nodes_[nodes_[i].parent].alive)
      nodes_[i].alive = false;
  }
}

void SpecBlockDrafter::Draft(const DraftStep& step, DraftTree& tree) {
  at::NoGradGuard no_grad;
  calls_last_step_ = first_call_ready_ ? 1 : 0;  // Prefill ran this step's first call
  nodes_.clear();
  dists_.clear();
  dists_host_.clear();
  first_buckets_.clear();
  slot_dist_.clear();
  root_dist_ = -1;
  budget_ = std::min(options_.budget, step.budget.nodes);
  const int64_t max_depth = step.budget.depth;
  if (!first_call_ready_) RunFirstCall();
  first_call_ready_ = false;
  const int64_t n1 = first_call_starts_;
  const int64_t root_row0 = (n1 - 1) * k_;
  // The root's own block-1 rows are visible to later blocks only along the branch path: they are
  // part of the committed rows but masked per start (rows before root_rows_begin are context).
  const int64_t context_rows = committed_ - k_;
  start_row_base_ = 0;  // Candidate rows are absolute cache rows below.
  std::vector<Candidate> next;
  {
    Start root = std::move(first_call_root_);
    root.node = -1;
    root.cum_logp = 0;
    root.visible.clear();
    start_row_base_ = cache_len_ - n1 * k_;
    AttachBlock(root, root_row0, next);
  }
  // The best candidate of a round survives pruning while another round follows.
  auto best_candidate = [&](int64_t round) -> int32_t {
    if (round + 1 >= options_.blocks) return -1;
    int32_t best = -1;
    for (const Candidate& c : next) {
      if (nodes_[c.node].depth >= max_depth) continue;
      if (best < 0 || nodes_[c.node].cum > nodes_[best].cum) best = c.node;
    }
    return best;
  };
  if (budget_ > 0) Prune(best_candidate(0));
  for (int64_t m = 1; m < options_.blocks && budget_ > 0; ++m) {
    // Choose starts: alive candidates, best cumulative log-probability first.
    std::vector<Candidate> alive;
    for (Candidate& c : next) {
      if (nodes_[c.node].alive && nodes_[c.node].depth < max_depth) alive.push_back(std::move(c));
    }
    next.clear();
    if (alive.empty()) break;
    std::stable_sort(alive.begin(), alive.end(), [&](const Candidate& a, const Candidate& b) {
      return nodes_[a.node].cum > nodes_[b.node].cum;
    });
    if (static_cast<int64_t>(alive.size()) > options_.max_starts) alive.resize(options_.max_starts);
    std::vector<Start> later;
    for (Candidate& c : alive) {
      Start s;
      s.cond = std::move(c.cond);
      s.token = nodes_[c.node].token;
      s.position = root_position_ + nodes_[c.node].depth;
      s.node = c.node;
      s.cum_logp = nodes_[c.node].cum;
      s.visible = std::move(c.visible);
      later.push_back(std::move(s));
    }
    const int64_t base = cache_len_;
    Run(later, /*target_cond=*/false, context_rows);
    start_row_base_ = base;
    for (size_t i = 0; i < later.size(); ++i) AttachBlock(later[i], i * k_, next);
    Prune(best_candidate(m));
  }
  // Emit the alive nodes (creation order keeps parents first), within the depth budget.
  EmitTree(max_depth, tree);
  // Later-block rows are dropped; the committed rows stay.
  cache_len_ = committed_;
  step_calls_.push_back(calls_last_step_);
  step_depths_.push_back(max_depth);
}

void SpecBlockDrafter::EmitTree(int64_t max_depth, DraftTree& tree) {
  std::vector<int32_t> remap(nodes_.size(), -1);
  std::vector<uint8_t> has_child(1, 0);  // per slot of the emitted tree
  tree.Clear();
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& nd = nodes_[i];
    if (!nd.alive || nd.depth > max_depth) continue;
    const int32_t parent = nd.parent < 0 ? -1 : remap[nd.parent];
    if (nd.parent >= 0 && parent < 0) continue;
    remap[i] = tree.AddNode(nd.token, parent, nd.logp);
    has_child[parent + 1] = 1;
    has_child.push_back(0);
  }
  // A slot reports the distribution its children came from only when it kept a child: a node
  // whose children were all pruned (or cut by the depth budget) drafted nothing there.
  slot_dist_.assign(has_child.size(), -1);
  if (has_child[0]) slot_dist_[0] = root_dist_;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (remap[i] >= 0 && has_child[remap[i] + 1]) slot_dist_[remap[i] + 1] = nodes_[i].dist;
  }
}

double SpecBlockDrafter::SlotProb(int64_t slot, int32_t token) const {
  if (slot < 0 || slot >= static_cast<int64_t>(slot_dist_.size()) || slot_dist_[slot] < 0)
    return -1;
  const int64_t di = slot_dist_[slot];
  const int32_t d = model_->target_to_draft()[token];
  if (d < 0) return 0;
  const size_t block = static_cast<size_t>(di / k_);
  if (dists_host_.size() < dists_.size()) dists_host_.resize(dists_.size());
  if (!dists_host_[block].defined()) dists_host_[block] = dists_[block].cpu().contiguous();
  return std::exp(dists_host_[block].data_ptr<float>()[(di % k_) * vd_ + d]);
}

void SpecBlockDrafter::Accept(const DraftTree& tree, const Verdict& verdict) {
  // Accepted tokens become committed starts (catch-up at the next step's first call), each with
  // the target features of the position before it; the bonus is the next root.
  if (has_first_) {  // the step drafted nothing: the old root is committed context too
    pending_.push_back(std::move(first_));
    has_first_ = false;
  }
  const int64_t a = verdict.n_accepted();
  std::vector<int32_t> next(verdict.tokens.begin(), verdict.tokens.begin() + a);
  next.push_back(verdict.bonus);
  QueueCatchUps(verdict.hidden, next, root_position_ + 1);
  first_ = std::move(pending_.back());
  pending_.pop_back();
  has_first_ = true;
  root_position_ += 1 + a;
}

}  // namespace specbed
