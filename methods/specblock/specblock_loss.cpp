// SpecBlock's training loss and the single-position logits used by online adaptation (see
// specblock_loss.h).
// Checked by: tests/methods/specblock_test.cpp.
#include "methods/specblock/specblock_loss.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <memory>

#include "base/error.h"
#include "methods/common/train/param_device.h"

namespace specbed {
namespace {

// x[b, idx[b, ...]] along dim 1 for idx int64 [B, ...] (any trailing shape), x [B, T, ...].
at::Tensor GatherRows(const at::Tensor& x, const at::Tensor& idx) {
  const int64_t b = x.size(0);
  const at::Tensor flat = idx.reshape({b, -1});
  std::vector<int64_t> shape = idx.sizes().vec();
  at::Tensor out;
  if (x.dim() == 2) {
    out = x.gather(1, flat);
  } else {
    const int64_t w = x.size(2);
    out = x.gather(1, flat.unsqueeze(-1).expand({b, flat.size(1), w}));
    shape.push_back(w);
  }
  return out.reshape(shape);
}

// m[..., 0] = first; m[..., k + 1] = m[..., k] * hit[..., k]: [.., K + 1].
at::Tensor PrefixMask(const at::Tensor& first, const at::Tensor& hit) {
  return at::cat({first.unsqueeze(-1), hit}, -1).cumprod(-1);
}

}  // namespace

namespace {

// The block-1 training layout of starts [a, e) after `c` cached rows: start i is the root at
// token index i + 1 (condition: target features at i), slot k drafts token i + 2 + k at RoPE
// position i + 1 + k; every start sees every cached row, all K slots of earlier starts and the
// slots <= k of its own block (the served cache layout). Index tensors like `like` (int64, its
// device).
struct StartsLayout {
  at::Tensor positions;  // int64 [1, R], R = (e - a) * K
  at::Tensor mask;       // bool [1, R, c + R]
};
StartsLayout MakeStartsLayout(int64_t a, int64_t e, int64_t k, int64_t c, const at::Tensor& like) {
  const at::TensorOptions index = like.options();
  const at::Tensor i = at::arange(a, e, index), kk = at::arange(k, index);
  const at::Tensor qi = i.repeat_interleave(k), qk = kk.repeat({e - a});
  const at::Tensor own =
      (qi.unsqueeze(1) > qi.unsqueeze(0)) |
      ((qi.unsqueeze(1) == qi.unsqueeze(0)) & (qk.unsqueeze(1) >= qk.unsqueeze(0)));
  StartsLayout l;
  l.positions = (i.unsqueeze(1) + 1 + kk.unsqueeze(0)).reshape({1, -1});
  l.mask =
      (c > 0 ? at::cat({at::ones({own.size(0), c}, own.options()), own}, 1) : own).unsqueeze(0);
  return l;
}

// Trunk output [B, T - 1, K, d] of the block-1 layout over every start of every row.
at::Tensor Block1Hidden(const SpecBlockModel& model, const at::Tensor& aux,
                        const at::Tensor& tokens, bool detach_trunk) {
  const int64_t b = tokens.size(0), n1 = tokens.size(1) - 1;
  const StartsLayout l = MakeStartsLayout(0, n1, model.config().block_size, 0, tokens);
  std::unique_ptr<at::NoGradGuard> guard;
  if (detach_trunk) guard = std::make_unique<at::NoGradGuard>();
  return model.Trunk(model.Fuse(aux.narrow(1, 0, n1), tokens.narrow(1, 1, n1), true),
                     l.positions.expand({b, -1}), l.mask.expand({b, -1, -1}), nullptr, nullptr);
}

// Trunk output [1, e - a, K, d] of the starts [a, e) of batch row `bi`, after `past` (the keys
// and values of starts [0, a); null when a = 0); `present` receives this pass's.
at::Tensor StartsHidden(const SpecBlockModel& model, const at::Tensor& aux,
                        const at::Tensor& tokens, int64_t bi, int64_t a, int64_t e,
                        const SpecBlockKv* past, SpecBlockKv* present) {
  const int64_t k = model.config().block_size, n = e - a;
  const StartsLayout l = MakeStartsLayout(a, e, k, past != nullptr ? a * k : 0, tokens);
  const at::Tensor h0 = model.Fuse(aux.narrow(0, bi, 1).narrow(1, a, n),
                                   tokens.narrow(0, bi, 1).narrow(1, a + 1, n), true);
  return model.Trunk(h0, l.positions, l.mask, past, present);
}

}  // namespace

at::Tensor SpecBlockNextTokenLogits(const SpecBlockModel& model, const at::Tensor& aux,
                                    const at::Tensor& tokens, bool detach_trunk,
                                    at::Tensor* rank_logits) {
  const int64_t b = tokens.size(0);
  const at::Tensor h0 = Block1Hidden(model, aux, tokens, detach_trunk).select(2, 0);  // [B,n1,d]
  const at::Tensor logits = model.Logits(h0);
  if (rank_logits != nullptr) {
    *rank_logits = at::cat(
        {at::zeros({b, 1, kSpecBlockBuckets}, logits.options()), model.RankLogits(h0, logits)}, 1);
  }
  return at::cat({at::zeros({b, 1, logits.size(-1)}, logits.options()), logits}, 1);
}

SpecBlockSlotRows SpecBlockSlotsDrafting(const at::Tensor& loss_mask, int64_t block_size) {
  SPECBED_CHECK(
      loss_mask.dim() == 2 && loss_mask.scalar_type() == at::kFloat && loss_mask.device().is_cpu(),
      "specblock: loss mask must be float32 [B, T] on the CPU");
  const at::Tensor m = loss_mask.contiguous();
  const int64_t b = m.size(0), t = m.size(1), n1 = t - 1;
  const float* p = m.data_ptr<float>();
  std::vector<int64_t> slot, seq;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t r = 1; r + 1 < t; ++r) {
      if (p[bi * t + r] == 0) continue;
      for (int64_t k = 0; k < block_size && r - k >= 1; ++k) {
        const int64_t start = r - k - 1;  // layout start of the root at token index r - k
        slot.push_back((bi * n1 + start) * block_size + k);
        seq.push_back(bi * t + r);
      }
    }
  }
  SpecBlockSlotRows rows;
  rows.slot = at::tensor(slot, at::kLong);
  rows.seq = at::tensor(seq, at::kLong);
  return rows;
}

at::Tensor SpecBlockSlotLogits(const SpecBlockModel& model, const at::Tensor& aux,
                               const at::Tensor& tokens, const SpecBlockSlotRows& rows,
                               bool detach_trunk, at::Tensor* rank_logits) {
  SPECBED_CHECK(rows.slot.is_cpu() && rows.slot.scalar_type() == at::kLong,
                "specblock: slot rows must be int64 on the CPU");
  const int64_t k = model.config().block_size, n1 = tokens.size(1) - 1;
  const at::Tensor slot = rows.slot.contiguous();
  const int64_t* s = slot.data_ptr<int64_t>();
  const int64_t n = slot.numel();
  std::unique_ptr<at::NoGradGuard> guard;
  if (detach_trunk) guard = std::make_unique<at::NoGradGuard>();
  std::vector<at::Tensor> spans;  // per request with slots: [(e - a) * K, d]
  std::vector<int64_t> gather(n);
  int64_t offset = 0;
  for (int64_t j = 0; j < n;) {
    const int64_t bi = s[j] / (n1 * k);
    int64_t a = n1, e = 0, end = j;
    for (; end < n && s[end] / (n1 * k) == bi; ++end) {
      const int64_t start = (s[end] / k) % n1;
      a = std::min(a, start);
      e = std::max(e, start + 1);
    }
    SpecBlockKv context;
    if (a > 0) {
      at::NoGradGuard no_grad;
      StartsHidden(model, aux, tokens, bi, 0, a, nullptr, &context);
    }
    const at::Tensor h =
        StartsHidden(model, aux, tokens, bi, a, e, a > 0 ? &context : nullptr, nullptr);
    for (int64_t m = j; m < end; ++m) gather[m] = offset + s[m] % (n1 * k) - a * k;
    spans.push_back(h.reshape({-1, h.size(-1)}));
    offset += spans.back().size(0);
    j = end;
  }
  guard.reset();
  const at::Tensor all =
      spans.empty() ? at::zeros({0, model.config().hidden_size}, aux.options().dtype(at::kFloat))
                    : at::cat(spans, 0);
  const at::Tensor hs = all.index_select(0, at::tensor(gather, at::kLong).to(all.device()));
  const at::Tensor logits = model.Logits(hs);
  if (rank_logits != nullptr) *rank_logits = model.RankLogits(hs, logits);
  return logits;
}

namespace {

// The index layout of one training batch: B sequences of T tokens, n1 = T - 1 block starts of K
// slots each, r = n1 * K query rows (start-major).
struct SlotGrid {
  int64_t b, t, k, n1, r;
  at::Tensor i;   // int64 [n1, 1]: start index
  at::Tensor kk;  // int64 [1, K]: slot index
  at::Tensor qi;  // int64 [r]: start of each query row
  at::Tensor qk;  // int64 [r]: slot of each query row
};

SlotGrid MakeSlotGrid(const at::Tensor& tokens, int64_t k) {
  SlotGrid g;
  g.b = tokens.size(0);
  g.t = tokens.size(1);
  g.k = k;
  SPECBED_CHECK(g.t >= 3, "specblock loss: sequences need >= 3 tokens");
  g.n1 = g.t - 1;
  g.r = g.n1 * k;
  const at::TensorOptions index = tokens.options();  // int64, on the tokens' device
  g.i = at::arange(g.n1, index).unsqueeze(1);
  g.kk = at::arange(k, index).unsqueeze(0);
  g.qi = at::arange(g.n1, index).repeat_interleave(k);
  g.qk = at::arange(k, index).repeat({g.n1});
  return g;
}

// What one block's forward gives the loss.
struct BlockPass {
  at::Tensor h;        // trunk output [B, n1, K, d]
  at::Tensor logits;   // [B, n1, K, Vd]
  at::Tensor labels;   // target-vocabulary label per slot [B, n1, K]
  at::Tensor teacher;  // the target's distribution over the draft vocabulary per slot
  at::Tensor valid;    // float [B, n1, K]: the slot has a supervised label
  at::Tensor hit;      // float [B, n1, K]: draft top-1 == label (valid slots; no grad)
  at::Tensor m;        // valid-prefix mask [B, n1, K + 1]
  at::Tensor w;        // loss weight per slot: m[..., :K] * valid
};

// The block's labels, teacher, hits, valid-prefix mask (starting at `first`) and weights, for
// label indices `li` (teacher indices li - 1) of its logits.
void SupervisePass(const SpecBlockModel& model, const at::Tensor& tokens,
                   const at::Tensor& target_draft, const at::Tensor& li_c, const at::Tensor& ti_c,
                   const at::Tensor& first, bool valid_prefix, BlockPass& p) {
  p.labels = GatherRows(tokens, li_c);
  p.teacher = at::softmax(GatherRows(target_draft, ti_c), -1);
  {
    at::NoGradGuard no_grad;
    p.hit = model.draft_ids()
                .index_select(0, p.logits.argmax(-1).reshape({-1}))
                .view(p.labels.sizes())
                .eq(p.labels);
    p.hit = p.hit.to(at::kFloat) * p.valid;
  }
  const int64_t b = p.valid.size(0), n1 = p.valid.size(1), k = p.valid.size(2);
  p.m = valid_prefix ? PrefixMask(first, p.hit) : at::ones({b, n1, k + 1}, p.hit.options());
  p.w = p.m.narrow(-1, 0, k) * p.valid;
}

// Block 1: every start i drafts from target features at i and token x_{i+1}; slot (i, k) sees
// every slot of earlier starts and slots <= k of its own block. Fills *kv1 for block 2.
BlockPass Block1Pass(const SpecBlockModel& model, const SlotGrid& g, const at::Tensor& aux,
                     const at::Tensor& tokens, const at::Tensor& target_draft,
                     const at::Tensor& loss_mask, bool valid_prefix, SpecBlockKv* kv1) {
  const int64_t b = g.b, t = g.t, k = g.k, n1 = g.n1, r = g.r;
  const at::Tensor pos1 = (g.i + 1 + g.kk).reshape({1, r}).expand({b, r});
  const at::Tensor li1 = (g.i + 2 + g.kk).expand({n1, k});  // label index
  const at::Tensor ti1 = li1 - 1;                           // teacher index
  const at::Tensor in1 = li1.lt(t);
  const at::Tensor li1c = li1.clamp_max(t - 1).unsqueeze(0).expand({b, n1, k});
  const at::Tensor ti1c = ti1.clamp_max(t - 1).unsqueeze(0).expand({b, n1, k});
  BlockPass p;
  p.valid = GatherRows(loss_mask, ti1c) * in1.unsqueeze(0).to(at::kFloat);
  const at::Tensor& qi = g.qi;
  const at::Tensor& qk = g.qk;
  const at::Tensor mask1 =
      ((qi.unsqueeze(1) > qi.unsqueeze(0)) |
       ((qi.unsqueeze(1) == qi.unsqueeze(0)) & (qk.unsqueeze(1) >= qk.unsqueeze(0))))
          .unsqueeze(0)
          .expand({b, r, r});
  p.h = model.Trunk(model.Fuse(aux.narrow(1, 0, n1), tokens.narrow(1, 1, n1), true), pos1, mask1,
                    nullptr, kv1);
  p.logits = model.Logits(p.h);
  SupervisePass(model, tokens, target_draft, li1c, ti1c, at::ones({b, n1}, p.valid.options()),
                valid_prefix, p);
  return p;
}

// Block 2 (cross-block chaining): start i continues from block 1's slot s (per start, `s` int64
// [B, n1] in 1..K) with token x_{i+1+s}; it sees the context of starts < i, block-1 slots
// (i, < s) and itself causally. Its valid-prefix mask starts at block 1's m_{i,s}.
BlockPass Block2Pass(const SpecBlockModel& model, const SlotGrid& g, const BlockPass& p1,
                     const at::Tensor& s, const at::Tensor& tokens, const at::Tensor& target_draft,
                     const at::Tensor& loss_mask, bool valid_prefix, SpecBlockKv* kv1) {
  const int64_t b = g.b, t = g.t, k = g.k, n1 = g.n1, r = g.r;
  const int64_t hidden = model.config().hidden_size;
  const at::Tensor cond2 =
      p1.h.gather(2, (s - 1).view({b, n1, 1, 1}).expand({b, n1, 1, hidden})).squeeze(2);
  const at::Tensor start2 = g.i.view({1, n1}) + 1 + s;  // token index of the block-2 start
  const at::Tensor tok2 = GatherRows(tokens, start2.clamp_max(t - 1));
  const at::Tensor pos2 = (start2.unsqueeze(-1) + g.kk.view({1, 1, k})).reshape({b, r});
  const at::Tensor li2 = start2.unsqueeze(-1) + 1 + g.kk.view({1, 1, k});
  const at::Tensor ti2 = li2 - 1;
  BlockPass p;
  p.valid = GatherRows(loss_mask, ti2.clamp_max(t - 1)) * li2.lt(t).to(at::kFloat);
  // Keys: block-1 rows (context of starts < i, slots (i, < s)) then block-2 rows (causal).
  const at::Tensor& qi = g.qi;
  const at::Tensor& qk = g.qk;
  const at::Tensor s_row = s.repeat_interleave(k, 1);  // [B, r] split of each query row
  const at::Tensor ctx = (qi.unsqueeze(1) > qi.unsqueeze(0)).unsqueeze(0) |
                         ((qi.unsqueeze(1) == qi.unsqueeze(0)).unsqueeze(0) &
                          (qk.view({1, 1, r}) < s_row.unsqueeze(2)));
  const at::Tensor own =
      ((qi.unsqueeze(1) == qi.unsqueeze(0)) & (qk.unsqueeze(1) >= qk.unsqueeze(0)))
          .unsqueeze(0)
          .expand({b, r, r});
  const at::Tensor mask2 = at::cat({ctx.expand({b, r, r}), own}, 2);
  p.h = model.Trunk(model.Fuse(cond2, tok2, false), pos2, mask2, kv1, nullptr);
  p.logits = model.Logits(p.h);
  const at::Tensor first2 = p1.m.gather(2, s.unsqueeze(-1)).squeeze(-1);
  SupervisePass(model, tokens, target_draft, li2.clamp_max(t - 1), ti2.clamp_max(t - 1), first2,
                valid_prefix, p);
  return p;
}

// Per-slot soft CE summed over slots, each normalised by its own weight sum (floored at
// slot_norm_floor times slot 1's).
at::Tensor SlotNormalisedLoss(const BlockPass& p, double slot_norm_floor) {
  const at::Tensor ce = -(p.teacher * at::log_softmax(p.logits, -1)).sum(-1);  // [B, n1, K]
  const at::Tensor num = (ce * p.w).sum(at::IntArrayRef{0, 1});                // [K]
  at::Tensor den = p.w.sum(at::IntArrayRef{0, 1});
  if (slot_norm_floor > 0) den = at::maximum(den, den.narrow(0, 0, 1) * slot_norm_floor);
  return (num / den.clamp_min(1.0)).sum();
}

// The rank head's cross-entropy summed over the blocks' weighted slots.
struct RankLoss {
  at::Tensor num = at::zeros({}, at::kFloat);
  double den = 0;

  // Adds block `p`; `confusion` (optional) accumulates [true bucket][predicted] at w > 0.
  void Add(const SpecBlockModel& model, const BlockPass& p,
           std::array<std::array<double, 4>, 4>* confusion) {
    const at::Tensor rl = model.RankLogits(p.h, p.logits);
    const at::Tensor bucket = SpecBlockBucketLabels(p.logits, p.labels, model);
    const at::Tensor ce =
        at::cross_entropy_loss(rl.reshape({-1, kSpecBlockBuckets}), bucket.reshape({-1}), {},
                               at::Reduction::None, -100)
            .view(p.w.sizes());
    num = num + (ce * p.w).sum();
    den += p.w.sum().item<double>();
    if (confusion == nullptr) return;
    const at::Tensor pred = rl.argmax(-1).reshape({-1});
    const at::Tensor tb = bucket.reshape({-1});
    const at::Tensor sel = p.w.reshape({-1}).gt(0);
    const at::Tensor cell = (tb * 4 + pred).masked_select(sel);
    const at::Tensor counts = ToHost(at::bincount(cell, {}, 16));  // one host read
    for (int a = 0; a < 4; ++a)
      for (int q = 0; q < 4; ++q) (*confusion)[a][q] += counts[a * 4 + q].item<double>();
  }
};

// Block 1's per-slot hits and counts (valid slots).
void SlotFigures(const BlockPass& p1, int64_t k, SpecBlockLossResult& res) {
  // Read on the host: one copy each off the CPU (the same tensors on it).
  const at::Tensor hs = ToHost((p1.hit * p1.valid).sum(at::IntArrayRef{0, 1})),
                   cs = ToHost(p1.valid.sum(at::IntArrayRef{0, 1}));
  res.slot_hits.assign(k, 0);
  res.slot_counts.assign(k, 0);
  for (int64_t s = 0; s < k; ++s) {
    res.slot_hits[s] = hs[s].item<double>();
    res.slot_counts[s] = cs[s].item<double>();
  }
}

// Split points s ~ U{1..K}, one per start, int64 [B, n1] on the grid's device (drawn on the
// host, one copy).
at::Tensor DrawSplits(const SlotGrid& g, std::mt19937_64& rng) {
  at::Tensor s = at::empty({g.b, g.n1}, at::kLong);
  int64_t* sp = s.data_ptr<int64_t>();
  for (int64_t x = 0; x < g.b * g.n1; ++x) sp[x] = 1 + static_cast<int64_t>(rng() % g.k);
  return OnDevice(s, g.i.device());
}

}  // namespace

SpecBlockLossResult SpecBlockLoss(const SpecBlockModel& model, const at::Tensor& aux,
                                  const at::Tensor& tokens, const at::Tensor& target_logits,
                                  const at::Tensor& loss_mask, const SpecBlockLossOptions& options,
                                  std::mt19937_64& rng) {
  const SlotGrid g = MakeSlotGrid(tokens, model.config().block_size);
  const at::Tensor target_draft = target_logits.index_select(-1, model.draft_ids());
  SpecBlockLossResult res;
  at::Tensor draft_total = at::zeros({}, at::kFloat);
  RankLoss rank;

  SpecBlockKv kv1;
  const BlockPass p1 =
      Block1Pass(model, g, aux, tokens, target_draft, loss_mask, options.valid_prefix, &kv1);
  draft_total = draft_total + SlotNormalisedLoss(p1, options.slot_norm_floor);
  SlotFigures(p1, g.k, res);
  if (options.rank) rank.Add(model, p1, &res.confusion);

  if (options.blocks >= 2) {
    const at::Tensor s = DrawSplits(g, rng);
    const BlockPass p2 =
        Block2Pass(model, g, p1, s, tokens, target_draft, loss_mask, options.valid_prefix, &kv1);
    draft_total = draft_total + SlotNormalisedLoss(p2, options.slot_norm_floor);
    if (options.rank) rank.Add(model, p2, nullptr);
  }
  res.draft_loss = draft_total.item<double>();
  at::Tensor loss = draft_total;
  if (options.rank && rank.den > 0) {
    const at::Tensor rl = rank.num / rank.den;
    res.rank_loss = rl.item<double>();
    loss = loss + rl;
  }
  res.loss = loss;
  return res;
}

}  // namespace specbed
